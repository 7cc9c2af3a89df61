"""The TensorFlow ops the ONNX exporter writes, each as the ONNX nodes that compute it: the ops
``gradients()`` adds to an ONNX model's gradient graph (AddN, ZerosLike, Fill, Shape, ...) and a
core set for converting TensorFlow GraphDefs (MatMul, Reshape, Sum, Softmax, ...).

:data:`TF_OPS` maps a TensorFlow op type to its writer ``write(emitter, op)``, which adds nodes
through the exporter's :class:`~gradreg_plugins.onnx.exporter.Emitter`. A TensorFlow op missing
here is a GraphError naming it when a graph holding it is written as ONNX: mapping one more op
is one more entry.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from onnx import helper

from gradreg.autodiff.function_gradients import ensure_symbolic_gradient_function
from gradreg.build.functions import call_attrs_of
from gradreg.errors import GraphError, describe_node
from gradreg.model import dtypes
from gradreg.model.graph import Operation, Tensor
from gradreg.model.shape_inference import constant_value
from gradreg_plugins.onnx.nodes import element_dtype, onnx_element_type, tensor_dtype

if TYPE_CHECKING:
    from gradreg_plugins.onnx.exporter import Emitter

__all__ = ["TF_OPS"]



def _out(em: Emitter, op: Operation, i: int = 0) -> str:
    return em.output_name(op.outputs[i])


def _ins(em: Emitter, op: Operation) -> list[str]:
    return [em.name_of(t) for t in op.inputs]


def _same(onnx_type: str) -> Callable[[Emitter, Operation], None]:
    """A TensorFlow op whose inputs and output match ONNX op ``onnx_type`` one to one."""
    def emit(em: Emitter, op: Operation) -> None:
        em.node(onnx_type, _ins(em, op), [_out(em, op)], name=op.name)
    return emit


def _constant_input(op: Operation, index: int) -> np.ndarray:
    value = constant_value(op.inputs[index])
    if value is None:
        raise GraphError(f"{describe_node(op.name, op.type)}: input {index} must be a constant to be written "
                         f"as ONNX")
    return np.asarray(value)


def _as_int64(em: Emitter, name: str, t: Tensor) -> str:
    if tensor_dtype(t).base_dtype is dtypes.int64:
        return name
    cast = em.new_name(None, name + "_int64")
    em.node("Cast", [name], [cast], to=onnx_element_type(dtypes.int64))
    return cast


def _alias(em: Emitter, op: Operation) -> None:
    """An identity (Identity, StopGradient, IdentityN, a one-input AddN): no node, its outputs are
    its inputs' values (a graph output gets the Identity that names it)."""
    for t, source in zip(op.outputs, op.inputs):
        em.names[t] = em.name_of(source)


def _add_n(em: Emitter, op: Operation) -> None:
    if op.outputs[0].dtype is dtypes.variant:   # gradients of a sequence with several consumers
        _add_sequences(em, op)
        return
    if len(op.inputs) == 1:
        _alias(em, op)
        return
    em.node("Sum", _ins(em, op), [_out(em, op)], name=op.name)


def _add_sequences(em: Emitter, op: Operation) -> None:
    """Elementwise sums of sequences: SequenceMap of Add, one pair at a time."""
    element = element_dtype(op.inputs[0])
    if element is None:
        raise GraphError(f"{describe_node(op.name, op.type)}: the element type of the sequences it adds is not known")
    code = onnx_element_type(element)
    body = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "add_elements",
                             [helper.make_tensor_value_info(n, code, None) for n in ("a", "b")],
                             [helper.make_tensor_value_info("c", code, None)])
    names = _ins(em, op)
    total = names[0]
    for i, name in enumerate(names[1:]):
        out = _out(em, op) if i == len(names) - 2 else em.new_name(None, f"{op.name}/partial")
        em.node("SequenceMap", [total, name], [out], name=f"{op.name}_{i}", body=body)
        total = out


def _filled_like(fill: int) -> Callable[[Emitter, Operation], None]:
    def emit(em: Emitter, op: Operation) -> None:
        shape = em.new_name(None, op.name + "/shape")
        em.node("Shape", [em.name_of(op.inputs[0])], [shape])
        value = helper.make_tensor("value", onnx_element_type(tensor_dtype(op.outputs[0])), [1], [fill])
        em.node("ConstantOfShape", [shape], [_out(em, op)], name=op.name, value=value)
    return emit


def _fill(em: Emitter, op: Operation) -> None:
    dims, value = _ins(em, op)
    em.node("Expand", [value, _as_int64(em, dims, op.inputs[0])], [_out(em, op)], name=op.name)


def _shape(em: Emitter, op: Operation) -> None:
    out = op.outputs[0]
    if tensor_dtype(out).base_dtype is dtypes.int64:
        em.node("Shape", _ins(em, op), [_out(em, op)], name=op.name)
        return
    raw = em.new_name(None, op.name + "/int64")
    em.node("Shape", _ins(em, op), [raw], name=op.name)
    em.node("Cast", [raw], [_out(em, op)], to=onnx_element_type(tensor_dtype(out)))


def _cast(em: Emitter, op: Operation) -> None:
    em.node("Cast", _ins(em, op), [_out(em, op)], name=op.name, to=onnx_element_type(tensor_dtype(op.outputs[0])))


def _transposed(em: Emitter, name: str, t: Tensor, last_two: bool) -> str:
    rank = t.shape.rank
    if rank is None:
        raise GraphError(f"{t.name}: transposing it for ONNX needs its rank")
    perm = list(range(rank))
    perm[-2:] = perm[-2:][::-1]
    out = em.new_name(None, name + "_T")
    em.node("Transpose", [name], [out], perm=perm)
    return out


def _matmul(em: Emitter, op: Operation) -> None:
    a, b = _ins(em, op)
    flags = ("transpose_a", "transpose_b") if op.type == "MatMul" else ("adj_x", "adj_y")
    if op.get_attr(flags[0]):
        a = _transposed(em, a, op.inputs[0], True)
    if op.get_attr(flags[1]):
        b = _transposed(em, b, op.inputs[1], True)
    em.node("MatMul", [a, b], [_out(em, op)], name=op.name)


def _reshape(em: Emitter, op: Operation) -> None:
    x, shape = _ins(em, op)
    em.node("Reshape", [x, _as_int64(em, shape, op.inputs[1])], [_out(em, op)], name=op.name)


def _transpose(em: Emitter, op: Operation) -> None:
    perm = [int(p) for p in _constant_input(op, 1).reshape(-1)]
    em.node("Transpose", [em.name_of(op.inputs[0])], [_out(em, op)], name=op.name, perm=perm)


def _reduction(onnx_type: str) -> Callable[[Emitter, Operation], None]:
    def emit(em: Emitter, op: Operation) -> None:
        x, axes = _ins(em, op)
        axes64 = _as_int64(em, axes, op.inputs[1])
        if op.inputs[1].shape.rank == 0:
            flat = em.new_name(None, axes64 + "_1d")
            em.node("Reshape", [axes64, em.constant(np.array([-1], np.int64), "minus_one")], [flat])
            axes64 = flat
        em.node(onnx_type, [x, axes64], [_out(em, op)], name=op.name, keepdims=int(op.get_attr("keep_dims")))
    return emit


def _expand_dims(em: Emitter, op: Operation) -> None:
    axis = [int(a) for a in _constant_input(op, 1).reshape(-1)]
    em.node("Unsqueeze", [em.name_of(op.inputs[0]), em.constant(np.array(axis, np.int64), "axes")], [_out(em, op)],
            name=op.name)


def _squeeze(em: Emitter, op: Operation) -> None:
    axes = [int(a) for a in op.get_attr("squeeze_dims")]
    inputs = [em.name_of(op.inputs[0])] + ([em.constant(np.array(axes, np.int64), "axes")] if axes else [])
    em.node("Squeeze", inputs, [_out(em, op)], name=op.name)


def _concat(em: Emitter, op: Operation) -> None:
    axis = int(_constant_input(op, len(op.inputs) - 1))
    em.node("Concat", [em.name_of(t) for t in op.inputs[:-1]], [_out(em, op)], name=op.name, axis=axis)


def _square(em: Emitter, op: Operation) -> None:
    x = em.name_of(op.inputs[0])
    em.node("Mul", [x, x], [_out(em, op)], name=op.name)


def _softmax(onnx_type: str) -> Callable[[Emitter, Operation], None]:
    def emit(em: Emitter, op: Operation) -> None:
        em.node(onnx_type, _ins(em, op), [_out(em, op)], name=op.name, axis=-1)
    return emit


def _bias_add(em: Emitter, op: Operation) -> None:
    if op.has_attr("data_format") and op.get_attr("data_format") not in (b"NHWC", b"N...C"):
        raise GraphError(f"{describe_node(op.name, op.type)}: only NHWC BiasAdd maps to ONNX")
    em.node("Add", _ins(em, op), [_out(em, op)], name=op.name)


def _pack(em: Emitter, op: Operation) -> None:
    axis = op.get_attr("axis")
    axes = em.constant(np.array([axis], np.int64), "axis")
    parts = []
    for t in op.inputs:
        parts.append(em.new_name(None, op.name + "/unsqueezed"))
        em.node("Unsqueeze", [em.name_of(t), axes], [parts[-1]])
    em.node("Concat", parts, [_out(em, op)], name=op.name, axis=axis)


def _slice(em: Emitter, op: Operation) -> None:
    """TensorFlow's Slice(input, begin, size), size -1 meaning "to the end", as ONNX's Slice."""
    x, begin, size = _ins(em, op)
    begin64, size64 = _as_int64(em, begin, op.inputs[1]), _as_int64(em, size, op.inputs[2])
    stop = em.new_name(None, op.name + "/stop")
    em.node("Add", [begin64, size64], [stop])
    ends = em.new_name(None, op.name + "/ends")
    to_end = em.new_name(None, op.name + "/to_end")
    em.node("Equal", [size64, em.constant(np.array(-1, np.int64), "minus_one")], [to_end])
    em.node("Where", [to_end, em.constant(np.array(np.iinfo(np.int64).max, np.int64), "end"), stop], [ends])
    em.node("Slice", [x, begin64, ends], [_out(em, op)], name=op.name)


def _softmax_cross_entropy(em: Emitter, op: Operation) -> None:
    """loss = -sum(labels * log_softmax(logits)) per row; backprop = softmax(logits) - labels."""
    logits, labels = _ins(em, op)
    log_probs = em.new_name(None, op.name + "/log_probs")
    em.node("LogSoftmax", [logits], [log_probs], axis=-1)
    weighted = em.new_name(None, op.name + "/weighted")
    em.node("Mul", [labels, log_probs], [weighted])
    total = em.new_name(None, op.name + "/total")
    em.node("ReduceSum", [weighted, em.constant(np.array([-1], np.int64), "last")], [total], keepdims=0)
    em.node("Neg", [total], [_out(em, op, 0)], name=op.name)
    probs = em.new_name(None, op.name + "/probs")
    em.node("Softmax", [logits], [probs], axis=-1)
    em.node("Sub", [probs, labels], [_out(em, op, 1)])


def _symbolic_gradient(em: Emitter, op: Operation) -> None:
    """The gradient of a library-function call (a model-local function's): a call of the function's
    gradient function (its inputs, then one gradient per output), added to the library once."""
    func = op.get_attr("f")
    name = ensure_symbolic_gradient_function(em.graph.library, func.name, call_attrs_of(op, "f"),
                                             f"node '{op.name}'")
    em.exporter.function_call(em, op, name)


def _skip(em: Emitter, op: Operation) -> None:
    """Ops with no outputs (NoOp): ONNX has no control edges, so nothing is written."""


# TensorFlow op type -> writer of its ONNX equivalent.
TF_OPS: dict[str, Callable[[Emitter, Operation], None]] = {
    "Identity": _alias, "StopGradient": _alias, "Snapshot": _alias, "PreventGradient": _alias,
    "IdentityN": _alias, "NoOp": _skip,
    "AddN": _add_n, "ZerosLike": _filled_like(0), "OnesLike": _filled_like(1), "Fill": _fill,
    "Shape": _shape, "Cast": _cast,
    "AddV2": _same("Add"), "Add": _same("Add"), "Sub": _same("Sub"), "Mul": _same("Mul"),
    "RealDiv": _same("Div"), "Neg": _same("Neg"), "Abs": _same("Abs"), "Exp": _same("Exp"), "Log": _same("Log"),
    "Sqrt": _same("Sqrt"), "Tanh": _same("Tanh"), "Sigmoid": _same("Sigmoid"), "Relu": _same("Relu"),
    "Reciprocal": _same("Reciprocal"), "Pow": _same("Pow"), "Maximum": _same("Max"), "Minimum": _same("Min"),
    "Square": _square, "Sin": _same("Sin"), "Cos": _same("Cos"), "Erf": _same("Erf"), "Floor": _same("Floor"),
    "Less": _same("Less"), "Greater": _same("Greater"), "Equal": _same("Equal"),
    "LessEqual": _same("LessOrEqual"), "GreaterEqual": _same("GreaterOrEqual"), "LogicalNot": _same("Not"),
    "LogicalAnd": _same("And"), "LogicalOr": _same("Or"), "SelectV2": _same("Where"),
    "MatMul": _matmul, "BatchMatMulV2": _matmul, "Reshape": _reshape, "Transpose": _transpose,
    "Sum": _reduction("ReduceSum"), "Mean": _reduction("ReduceMean"), "Max": _reduction("ReduceMax"),
    "Min": _reduction("ReduceMin"), "Prod": _reduction("ReduceProd"),
    "ExpandDims": _expand_dims, "Squeeze": _squeeze, "ConcatV2": _concat,
    "Softmax": _softmax("Softmax"), "LogSoftmax": _softmax("LogSoftmax"), "BiasAdd": _bias_add,
    "Pack": _pack, "Slice": _slice, "SoftmaxCrossEntropyWithLogits": _softmax_cross_entropy,
    "SymbolicGradient": _symbolic_gradient,
}
