"""Gradients of the sequence and optional ops. The gradient of a sequence is a sequence of the
elements' gradients (zeros for elements nothing used); the gradient of an optional is an optional.
Element types come from what made the sequence (gradreg_plugins.onnx.nodes.element_dtype)."""
from __future__ import annotations

from typing import Any

import numpy as np

from gradreg.model import dtypes
from gradreg_plugins.onnx import family
from gradreg_plugins.onnx.grads.common import fail, is_float, onnx_op, per_input
from gradreg_plugins.onnx.grads.control_flow import body_gradient, inline_call
from gradreg_plugins.onnx.nodes import captured_inputs, element_dtype, onnx_inputs
from gradreg_plugins.onnx.subgraphs import trace_body


def _element(op, sequence) -> Any:
    dtype = element_dtype(sequence)
    if dtype is None:
        raise fail(op, f"the element type of sequence {sequence.name} is not known")
    return dtype.base_dtype


def _map(op, sequences, element_types, build, output_types, name: str):
    """SequenceMap of ``build`` over the sequences' elements (a traced body)."""
    body, captured = trace_body(op.graph, f"{op.name.split('/')[-1]}_{name}", [(d, None) for d in element_types],
                                build)
    out = onnx_op("SequenceMap", *sequences, body=body, captured=captured, output_types=[dtypes.variant] *
                  len(output_types), outputs=len(output_types))
    return out


def zeros_sequence(op, sequence):
    """A sequence of zeros shaped like each element of ``sequence``."""
    dtype = _element(op, sequence)
    storage = dtype.storage
    return _map(op, [sequence], [dtype],
                lambda x: [onnx_op("ConstantOfShape", onnx_op("Shape", x), value=np.zeros(1, storage))], [dtype],
                "zeros")


def _position(sequence, position):
    """A (possibly negative, possibly absent: the end) position as a non-negative index."""
    length = onnx_op("SequenceLength", sequence)
    if position is None:
        return length
    position = onnx_op("Cast", position, to=np.int64)
    return onnx_op("Where", onnx_op("Less", position, np.int64(0)), onnx_op("Add", position, length), position)


@family.gradient("onnx::SequenceConstruct")
def _sequence_construct_grad(op, g):
    if g is None:
        return per_input(op, [None] * len(op.inputs))
    return per_input(op, [onnx_op("SequenceAt", g, np.int64(i)) if is_float(t) else None
                          for i, t in enumerate(op.inputs)])


@family.gradient("onnx::SequenceAt")
def _sequence_at_grad(op, g):
    sequence, position = op.inputs
    index = _position(sequence, position)
    cleared = onnx_op("SequenceErase", zeros_sequence(op, sequence), index)
    return per_input(op, (onnx_op("SequenceInsert", cleared, g, index), None))


@family.gradient("onnx::SequenceInsert")
def _sequence_insert_grad(op, g):
    sequence, tensor, position = (onnx_inputs(op) + [None])[:3]
    if g is None:
        return per_input(op, (None, None, None))
    index = _position(sequence, position)
    return per_input(op, (onnx_op("SequenceErase", g, index), onnx_op("SequenceAt", g, index), None))


@family.gradient("onnx::SequenceErase")
def _sequence_erase_grad(op, g):
    sequence, position = (onnx_inputs(op) + [None])[:2]
    if g is None:
        return per_input(op, (None, None))
    index = _position(sequence, position if position is not None else np.int64(-1))
    erased = onnx_op("SequenceAt", sequence, index)
    zeros = onnx_op("ConstantOfShape", onnx_op("Shape", erased), value=np.zeros(1, _element(op, sequence).storage))
    return per_input(op, (onnx_op("SequenceInsert", g, zeros, index), None))


@family.gradient("onnx::ConcatFromSequence")
def _concat_from_sequence_grad(op, g):
    sequence = op.inputs[0]
    axis = int(op.get_attr("axis"))
    if op.get_attr("new_axis"):
        return per_input(op, onnx_op("SplitToSequence", g, axis=axis, keepdims=0))
    lengths = _map(op, [sequence], [_element(op, sequence)],
                   lambda x: [onnx_op("Reshape", onnx_op("Gather", onnx_op("Shape", x), np.int64(axis)),
                                      np.array([1], np.int64))], [dtypes.int64], "lengths")
    return per_input(op, onnx_op("SplitToSequence", g, onnx_op("ConcatFromSequence", lengths, axis=0), axis=axis))


@family.gradient("onnx::SplitToSequence")
def _split_to_sequence_grad(op, g):
    x, split = (onnx_inputs(op) + [None])[:2]
    if g is None:
        return per_input(op, (None, None))
    squeezed = split is None and not op.get_attr("keepdims")
    dsequence = onnx_op("ConcatFromSequence", g, axis=int(op.get_attr("axis")), new_axis=int(squeezed))
    return per_input(op, (dsequence, None))


@family.gradient("onnx::Optional")
def _optional_grad(op, g):
    if not op.inputs or g is None:
        return per_input(op, [None] * len(op.inputs))
    return per_input(op, onnx_op("OptionalGetElement", g))


@family.gradient("onnx::OptionalGetElement")
def _optional_get_element_grad(op, g):
    return per_input(op, onnx_op("Optional", g))


@family.gradient("onnx::SequenceMap")
def _sequence_map_grad(op, *grads):
    """A SequenceMap of the body's gradient function over the inputs' elements and the outputs'
    gradients; the gradients of the tensors every iteration shares (additional tensor inputs,
    captured values) come back as sequences and are summed."""
    inputs = onnx_inputs(op)
    captured = captured_inputs(op)
    sequences = [t for t in inputs if t.dtype is dtypes.variant]
    shared = [t for t in inputs if t.dtype is not dtypes.variant] + list(captured)
    g_name = body_gradient(op, "body")
    out_types = [_element(op, t) for t in op.outputs]
    seq_grads = [g if g is not None else zeros_sequence(op, t) for g, t in zip(grads, op.outputs)]
    in_types = [_element(op, s) for s in sequences]
    n_seq = len(sequences)

    def backward(*elements):
        given = iter(elements[:n_seq])
        body_inputs = [next(given) if t.dtype is dtypes.variant else t for t in inputs] + list(captured)
        found = inline_call(g_name, body_inputs + list(elements[n_seq:]))
        # the sequences' element gradients, then (summed after the map) the shared tensors'
        owners = list(inputs) + list(captured)
        return [d for d, t in zip(found, owners) if t.dtype is dtypes.variant] + \
            [d for d, t in zip(found, owners) if t.dtype is not dtypes.variant]
    body, outer = trace_body(op.graph, f"{op.name.split('/')[-1]}_backward", [(d, None) for d in in_types + out_types],
                             backward)
    n_out = n_seq + len(shared)
    result = onnx_op("SequenceMap", *sequences, *seq_grads, body=body, captured=outer,
                     output_types=[dtypes.variant] * n_out, outputs=n_out)
    result = list(result) if isinstance(result, tuple) else [result]
    by_tensor = {}
    for t, d in zip(sequences, result[:n_seq]):
        by_tensor[id(t)] = d
    for t, d in zip(shared, result[n_seq:]):
        if is_float(t):
            stacked = onnx_op("ConcatFromSequence", d, axis=0, new_axis=1)
            by_tensor[id(t)] = onnx_op("ReduceSum", stacked, np.array([0], np.int64), keepdims=0)
    return per_input(op, [by_tensor.get(id(t)) for t in inputs] + [by_tensor.get(id(t)) for t in captured])
