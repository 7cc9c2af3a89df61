"""Gradients of If, Loop and Scan: ONNX control flow whose gradient is ONNX control flow.

The subgraphs are library functions (their formal inputs, then the outer values they use, which
the node passes as its captured inputs). Each rule differentiates the body once into a library
function G (:func:`gradreg.autodiff.function_gradients.ensure_symbolic_gradient_function`:
G takes the body's inputs and one gradient per body output, returns the gradients of the body's
inputs) and calls it from a new subgraph:

* If: an If whose branches are the branches' G, on the same condition;
* Scan: a forward Scan records the state entering each iteration; a backward Scan walks the
  iterations in reverse, calling G with the recorded state, that iteration's scanned elements
  and the output gradients; it carries the states' gradients back and sums the captured values';
* Loop: likewise, with the iterations' count taken from the recording Loop and the recorded
  values indexed by iteration number.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gradreg.autodiff.gradients import as_dense_gradients, gradients
from gradreg.build.builders import apply_op
from gradreg.build.functions import function_graph
from gradreg.model import dtypes
from gradreg.model.graph import Operation, Tensor, get_default_graph
from gradreg_plugins.onnx import family
from gradreg_plugins.onnx.grads.common import const_like, fail, is_float, onnx_op, per_input, zeros_like
from gradreg_plugins.onnx.nodes import captured_inputs, onnx_inputs
from gradreg_plugins.onnx.subgraphs import function_def, inline, trace_body


def inline_call(function: str, inputs: Sequence[Tensor]) -> list[Tensor]:
    """Library function ``function``'s ops on ``inputs``, inlined in the current default graph."""
    return inline(get_default_graph(), function, inputs, f"function '{function}'")


def _output_grads(op: Operation, grads: Sequence[Any]) -> list[Tensor]:
    """A gradient for every output (zeros where none arrived: integer outputs, unused ones)."""
    out = []
    for t, g in zip(op.outputs, grads):
        if g is None:
            if t.dtype is None or t.dtype.kind == "v":
                raise fail(op, f"output {t.name} is a sequence or optional value, which control-flow gradients "
                               f"do not carry")
            g = zeros_like(t)
        out.append(g)
    return out


def body_gradient(op: Operation, attr: str) -> str:
    """G of the subgraph in ``attr``: a library function of the body's inputs and one gradient per
    body output (those of integer and boolean outputs are ignored) returning the gradients of the
    body's inputs (zeros where one does not matter)."""
    library = op.graph.library
    name = op.get_attr(attr).name
    grad_name = f"{name}_grad"
    if grad_name in library:
        return grad_name
    body = function_graph(library, name, {}, f"node '{op.name}'")
    with body.as_default():
        grad_ys = [apply_op("Placeholder", dtype=t.known_dtype.base_dtype, shape=t.shape, name=f"grad_y_{i}")
                   for i, t in enumerate(body.outputs)]
        pairs = [(y, g) for y, g in zip(body.outputs, grad_ys) if is_float(y)]
        if pairs:
            grads = as_dense_gradients(gradients([y for y, _ in pairs], body.inputs, grad_ys=[g for _, g in pairs],
                                                 unconnected_gradients="zero"))
        else:
            grads = [zeros_like(t) for t in body.inputs]
        grads = [onnx_op("Identity", d) if d.op.type == "Placeholder" else d for d in grads]
    library.add(function_def(body, grad_name, list(body.inputs) + grad_ys, grads))
    return grad_name


def _specs(tensors: Sequence[Tensor]) -> list[tuple[Any, Any]]:
    return [(t.known_dtype.base_dtype, t.shape) for t in tensors]


# -- If -------------------------------------------------------------------------------------------------

@family.gradient("onnx::If")
def _if_grad(op, *grads):
    """An If of the branches' gradient functions: each takes the captured values and the output
    gradients (captured too) and returns the captured values' gradients."""
    captured = captured_inputs(op)
    if not captured:
        return per_input(op, None)
    out_grads = _output_grads(op, grads)
    branches = {attr: body_gradient(op, attr) for attr in ("then_branch", "else_branch")}
    d_captured = onnx_op("If", op.inputs[0], captured=captured + out_grads, outputs=len(captured),
                         output_types=[t.known_dtype.base_dtype for t in captured], **branches)
    d_captured = (d_captured,) if len(captured) == 1 else d_captured
    return per_input(op, (None,) + tuple(d if is_float(t) else None for t, d in zip(captured, d_captured)))


# -- Scan -----------------------------------------------------------------------------------------------

def _ints(op: Operation, name: str, n: int) -> list[int]:
    value = op.get_attr(name)
    return [int(v) for v in value] if value else [0] * n


@family.gradient("onnx::Scan")
def _scan_grad(op, *grads):
    inputs = onnx_inputs(op)
    captured = captured_inputs(op)
    n_scan_in = int(op.get_attr("num_scan_inputs"))
    n_state = len(inputs) - n_scan_in
    states, xs = inputs[:n_state], inputs[n_state:]
    n_scan_out = len(op.outputs) - n_state
    in_axes, in_dirs = _ints(op, "scan_input_axes", n_scan_in), _ints(op, "scan_input_directions", n_scan_in)
    out_axes, out_dirs = _ints(op, "scan_output_axes", n_scan_out), _ints(op, "scan_output_directions", n_scan_out)
    body = op.get_attr("body").name
    out_grads = _output_grads(op, grads)
    recorded = _recorded_states(op, body, states, xs, captured, in_axes, in_dirs, out_axes, out_dirs)
    g_name = body_gradient(op, "body")
    acc = [t for t in captured if is_float(t)]
    element_specs = _specs(states) + _element_specs(xs, in_axes) + _element_specs(op.outputs[n_state:], out_axes)

    def backward(*args):
        ds_next, dc_acc = args[:n_state], args[n_state:n_state + len(acc)]
        s_t = args[n_state + len(acc):2 * n_state + len(acc)]
        rest = args[2 * n_state + len(acc):]
        x_t, dy_t = rest[:n_scan_in], rest[n_scan_in:]
        found = inline_call(g_name, list(s_t) + list(x_t) + list(captured) + list(ds_next) + list(dy_t))
        ds, dx, dc = found[:n_state], found[n_state:n_state + n_scan_in], found[n_state + n_scan_in:]
        by_captured = dict(zip([id(t) for t in captured], dc))
        summed = [onnx_op("Add", a, by_captured[id(c)]) for a, c in zip(dc_acc, acc)]
        return list(ds) + summed + list(dx)
    name, outer = trace_body(op.graph, f"{body}_backward", _specs(states) + _specs(acc) + element_specs, backward)
    start = out_grads[:n_state] + [zeros_like(t) for t in acc]
    scanned = list(recorded) + list(xs) + out_grads[n_state:]
    out_types = [t.known_dtype.base_dtype for t in list(states) + acc + list(xs)]
    result = onnx_op("Scan", *start, *scanned, body=name, num_scan_inputs=len(scanned),
                     scan_input_axes=[0] * n_state + in_axes + out_axes,
                     scan_input_directions=[1] * n_state + [1 - d for d in in_dirs] + [1 - d for d in out_dirs],
                     scan_output_axes=in_axes, scan_output_directions=[1 - d for d in in_dirs],
                     captured=outer, output_types=out_types, outputs=len(out_types))
    result = list(result) if isinstance(result, tuple) else [result]
    d_states, d_acc, d_xs = result[:n_state], result[n_state:n_state + len(acc)], result[n_state + len(acc):]
    by_acc = dict(zip([id(t) for t in acc], d_acc))
    by_position = [d if is_float(t) else None for t, d in zip(list(states) + list(xs), d_states + d_xs)]
    return per_input(op, by_position + [by_acc.get(id(t)) for t in captured])


def _element_specs(tensors: Sequence[Tensor], axes: Sequence[int]) -> list[tuple[Any, Any]]:
    """(dtype, shape) of one scanned element of each tensor (its scan axis removed)."""
    out = []
    for t, axis in zip(tensors, axes):
        dims = t.shape.dims
        element = None
        if dims is not None:
            a = axis + len(dims) if axis < 0 else axis
            element = list(dims[:a]) + list(dims[a + 1:])
        out.append((t.known_dtype.base_dtype, element))
    return out


def _recorded_states(op, body: str, states, xs, captured, in_axes, in_dirs, out_axes, out_dirs) -> list[Tensor]:
    """The state entering each iteration, stacked in iteration order (a Scan that also outputs them)."""
    n_state = len(states)
    if not n_state:
        return []

    def record(*args):
        found = inline_call(body, list(args) + list(captured))
        return found + [onnx_op("Identity", s) for s in args[:n_state]]
    specs = _specs(states) + _element_specs(xs, in_axes)
    name, outer = trace_body(op.graph, f"{body}_recording", specs, record)
    types = [t.known_dtype.base_dtype for t in list(op.outputs) + list(states)]
    result = onnx_op("Scan", *states, *xs, body=name, num_scan_inputs=len(xs), scan_input_axes=in_axes,
                     scan_input_directions=in_dirs, scan_output_axes=out_axes + [0] * n_state,
                     scan_output_directions=out_dirs + [0] * n_state, captured=outer, output_types=types,
                     outputs=len(types))
    result = list(result) if isinstance(result, tuple) else [result]
    return result[len(op.outputs):]


# -- Loop -----------------------------------------------------------------------------------------------

@family.gradient("onnx::Loop")
def _loop_grad(op, *grads):
    inputs = onnx_inputs(op)
    trip, cond, carried = inputs[0], inputs[1], list(inputs[2:])
    captured = captured_inputs(op)
    n = len(carried)
    body = op.get_attr("body").name
    out_grads = _output_grads(op, grads)
    d_final, d_scanned = out_grads[:n], out_grads[n:]
    count, stacks = _recorded_iterations(op, body, trip, cond, carried, captured)
    g_name = body_gradient(op, "body")
    acc = [t for t in captured if is_float(t)]

    def backward(u, keep, *args):
        ds_next, dc_acc = args[:n], args[n:]
        t = onnx_op("Sub", onnx_op("Sub", count, np.int64(1)), u)
        s_t = [onnx_op("Gather", s, t, axis=0) for s in stacks]
        dy_t = [onnx_op("Gather", d, t, axis=0) for d in d_scanned]
        true = const_like(True, keep)
        found = inline_call(g_name, [t, true] + s_t + list(captured) + [const_like(False, keep)] + list(ds_next)
                            + dy_t)
        ds, dc = found[2:2 + n], found[2 + n:]
        by_captured = dict(zip([id(c) for c in captured], dc))
        return [onnx_op("Identity", true)] + list(ds) + [onnx_op("Add", a, by_captured[id(c)])
                                                         for a, c in zip(dc_acc, acc)]
    specs = [(dtypes.int64, []), (dtypes.bool_, [])] + _specs(carried) + _specs(acc)
    name, outer = trace_body(op.graph, f"{body}_backward", specs, backward)
    types = [t.known_dtype.base_dtype for t in carried + acc]
    result = onnx_op("Loop", count, None, *d_final, *[zeros_like(t) for t in acc], body=name, captured=outer,
                     output_types=types, outputs=len(types))
    result = list(result) if isinstance(result, tuple) else [result]
    d_carried, d_acc = result[:n], result[n:]
    by_acc = dict(zip([id(t) for t in acc], d_acc))
    return per_input(op, [None, None] + [d if is_float(t) else None for t, d in zip(carried, d_carried)] + \
        [by_acc.get(id(t)) for t in captured])


def _recorded_iterations(op, body: str, trip, cond, carried, captured) -> tuple[Tensor, list[Tensor]]:
    """(number of iterations run, the carried values entering each iteration stacked), from a
    Loop that also outputs those and its iteration numbers."""
    n = len(carried)
    n_out = len(op.outputs)

    def record(i, keep, *values):
        found = inline_call(body, [i, keep] + list(values) + list(captured))
        return found + [onnx_op("Identity", v) for v in values] + [onnx_op("Identity", i)]
    specs = [(dtypes.int64, []), (dtypes.bool_, [])] + _specs(carried)
    name, outer = trace_body(op.graph, f"{body}_recording", specs, record)
    types = [t.known_dtype.base_dtype for t in list(op.outputs) + list(carried)] + [dtypes.int64]
    result = onnx_op("Loop", trip, cond, *carried, body=name, captured=outer, output_types=types, outputs=len(types))
    result = list(result) if isinstance(result, tuple) else [result]
    stacks = result[n_out:n_out + n]
    iterations = result[-1]
    count = onnx_op("Squeeze", onnx_op("Shape", iterations, start=0, end=1), np.array([0], np.int64))
    return count, stacks
