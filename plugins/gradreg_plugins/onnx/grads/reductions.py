"""Gradients of the reductions (axes as an input, constant or computed, or absent; keepdims;
noop_with_empty_axes), the softmax family, CumSum, CumProd and TopK."""
from __future__ import annotations

import numpy as np

from gradreg.model.shape_inference import constant_value
from gradreg_plugins.onnx import family
from gradreg_plugins.onnx.grads.common import (
    const_like,
    fail,
    ints,
    onnx_op,
    per_input,
    shape_of,
    static_rank,
    zeros_like,
)
from gradreg_plugins.onnx.nodes import onnx_inputs
from gradreg_plugins.onnx.subgraphs import trace_body

_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min


def _constant_axes(axes) -> list[int] | None:
    value = constant_value(axes) if axes is not None else None
    return None if value is None else [int(a) for a in np.asarray(value).reshape(-1)]


def _kept(op, t):
    """A reduction's output ``t`` (or its gradient) with the reduced axes back as size-1 axes,
    so it broadcasts against the input; None if the reduction is the identity (empty axes with
    noop_with_empty_axes)."""
    x, axes = (onnx_inputs(op) + [None])[:2]
    noop = bool(op.get_attr("noop_with_empty_axes"))
    constant = _constant_axes(axes) if axes is not None else []
    if constant == [] and noop:
        return None
    if op.get_attr("keepdims") or constant == []:   # kept, or all axes reduced to a scalar
        return t
    if constant is None and noop:
        raise fail(op, "axes computed at run time with noop_with_empty_axes and keepdims=0 are not "
                       "differentiated (the output's rank depends on whether the axes are empty)")
    rank = x.shape.rank
    if constant is not None and rank is not None and sorted(a % rank for a in constant) == list(range(len(constant))):
        return t    # the leading axes: broadcasting puts them back
    return onnx_op("Unsqueeze", t, axes)


def _spread(op, g):
    """The output gradient broadcast to the input's shape."""
    kept = _kept(op, g)
    return g if kept is None else onnx_op("Expand", kept, shape_of(op.inputs[0]))


@family.gradient("onnx::ReduceSum")
def _reduce_sum_grad(op, g):
    return per_input(op, _spread(op, g))


@family.gradient("onnx::ReduceMean")
def _reduce_mean_grad(op, g):
    x, y = op.inputs[0], op.outputs[0]
    n_x, n_y = x.shape.num_elements(), y.shape.num_elements()
    if n_x is not None and n_y:
        count = const_like(n_x // n_y, g, "count")
    else:
        count = onnx_op("Div", onnx_op("Cast", onnx_op("Size", x), to=g.dtype),
                        onnx_op("Cast", onnx_op("Size", y), to=g.dtype))
    return per_input(op, onnx_op("Div", _spread(op, g), count))


@family.gradient("onnx::ReduceSumSquare")
def _reduce_sum_square_grad(op, g):
    x = op.inputs[0]
    return per_input(op, onnx_op("Mul", _spread(op, g), onnx_op("Mul", x, const_like(2, x))))


@family.gradient("onnx::ReduceL1")
def _reduce_l1_grad(op, g):
    x = op.inputs[0]
    return per_input(op, onnx_op("Mul", _spread(op, g), onnx_op("Sign", x)))


@family.gradient("onnx::ReduceL2")
def _reduce_l2_grad(op, g):
    """x / ||x|| (0 where the norm is 0)."""
    x = op.inputs[0]
    y = _as_input_rank(op, op.outputs[0])
    zero = onnx_op("Equal", y, const_like(0, y))
    safe = onnx_op("Where", zero, const_like(1, y), y)
    return per_input(op, onnx_op("Mul", _spread(op, g), onnx_op("Where", zero, const_like(0, x),
                                                                 onnx_op("Div", x, safe))))


@family.gradient("onnx::ReduceLogSum")
def _reduce_log_sum_grad(op, g):
    """y = log(sum x): dx = g / sum x = g exp(-y)."""
    y = _as_input_rank(op, op.outputs[0])
    return per_input(op, onnx_op("Mul", _spread(op, g), onnx_op("Exp", onnx_op("Neg", y))))


@family.gradient("onnx::ReduceLogSumExp")
def _reduce_log_sum_exp_grad(op, g):
    """y = log(sum exp x): dx = g exp(x - y), the softmax over the reduced axes."""
    x = op.inputs[0]
    y = _as_input_rank(op, op.outputs[0])
    return per_input(op, onnx_op("Mul", _spread(op, g), onnx_op("Exp", onnx_op("Sub", x, y))))


def _as_input_rank(op, y):
    kept = _kept(op, y)
    return y if kept is None else kept


def _extremum_grad(op, g):
    """To the elements equal to the extremum, split evenly among ties."""
    x = op.inputs[0]
    y = _as_input_rank(op, op.outputs[0])
    mask = onnx_op("Cast", onnx_op("Equal", x, y), to=g.dtype)
    axes = onnx_inputs(op)[1] if len(onnx_inputs(op)) > 1 else None
    count = onnx_op("ReduceSum", mask, axes, keepdims=1,
                    noop_with_empty_axes=op.get_attr("noop_with_empty_axes")) if axes is not None else \
        onnx_op("ReduceSum", mask, keepdims=1)
    return per_input(op, onnx_op("Mul", _spread(op, g), onnx_op("Div", mask, count)))


family.gradient("onnx::ReduceMax")(_extremum_grad)
family.gradient("onnx::ReduceMin")(_extremum_grad)


@family.gradient("onnx::ReduceProd")
def _reduce_prod_grad(op, g):
    """The product of the other elements of each reduced group: exclusive cumulative products
    from both ends over the group laid out on one axis (exact with zeros, no division)."""
    x = op.inputs[0]
    axes = onnx_inputs(op)[1] if len(onnx_inputs(op)) > 1 else None
    rank = static_rank(op, x)
    constant = _constant_axes(axes) if axes is not None else []
    if constant is None:
        raise fail(op, "the axes must be constant")
    if constant == [] and op.get_attr("noop_with_empty_axes"):
        return per_input(op, g)
    reduced = sorted({a % rank for a in constant}) if constant else list(range(rank))
    kept = [a for a in range(rank) if a not in reduced]
    moved = onnx_op("Transpose", x, perm=kept + reduced)
    lead = onnx_op("Slice", shape_of(moved), ints([0], x, "start"), ints([len(kept)], x, "end"))
    grouped = onnx_op("Reshape", moved, onnx_op("Concat", lead, ints([-1], x, "rest"), axis=0))
    axis = np.array(len(kept), dtype=np.int64)
    before = onnx_op("CumProd", grouped, axis, exclusive=1)
    after = onnx_op("CumProd", grouped, axis, exclusive=1, reverse=1)
    others = onnx_op("Reshape", onnx_op("Mul", before, after), shape_of(moved))
    back = onnx_op("Transpose", others, perm=list(np.argsort(kept + reduced)))
    return per_input(op, onnx_op("Mul", _spread(op, g), back))


# -- softmax family -------------------------------------------------------------------------------------

@family.gradient("onnx::Softmax")
def _softmax_grad(op, g):
    y = op.outputs[0]
    axis = ints([op.get_attr("axis")], g, "axis")
    dot = onnx_op("ReduceSum", onnx_op("Mul", g, y), axis, keepdims=1)
    return per_input(op, onnx_op("Mul", y, onnx_op("Sub", g, dot)))


@family.gradient("onnx::LogSoftmax")
def _log_softmax_grad(op, g):
    y = op.outputs[0]
    axis = ints([op.get_attr("axis")], g, "axis")
    total = onnx_op("ReduceSum", g, axis, keepdims=1)
    return per_input(op, onnx_op("Sub", g, onnx_op("Mul", onnx_op("Exp", y), total)))


# -- cumulative ops and TopK ----------------------------------------------------------------------------

@family.gradient("onnx::CumSum")
def _cumsum_grad(op, g):
    """Each input element reaches the outputs after it (before it, reversed): the cumulative sum
    of the gradient the other way."""
    axis = op.inputs[1]
    return per_input(op, (onnx_op("CumSum", g, axis, exclusive=op.get_attr("exclusive"),
                   reverse=1 - int(op.get_attr("reverse"))), None))


@family.gradient("onnx::CumProd")
def _cumprod_grad(op, g):
    """For y_i = prod_{k <= i} x_k: dx_j = (prod_{k < j} x_k) z_j with z_j = sum_{i >= j} g_i
    prod_{j < k <= i} x_k, which satisfies z_j = g_j + x_{j+1} z_{j+1}: a reverse Scan (exact
    with zeros). Exclusive products shift g by one; reverse ones flip the axis."""
    x, axis_input = op.inputs
    value = constant_value(axis_input)
    if value is None:
        raise fail(op, "the axis must be constant")
    axis = int(np.asarray(value).reshape(-1)[0])
    rank = static_rank(op, x)
    axis = axis + rank if axis < 0 else axis
    reverse = bool(op.get_attr("reverse"))
    xs, gs = (_flip(x, axis), _flip(g, axis)) if reverse else (x, g)
    before = onnx_op("CumProd", xs, axis_input, exclusive=1)
    shifted_g = _shift_left(gs, axis) if op.get_attr("exclusive") else gs
    z = _linear_recurrence(op, shifted_g, _shift_left(xs, axis), axis)
    dx = onnx_op("Mul", before, z)
    return per_input(op, (_flip(dx, axis) if reverse else dx, None))


def _flip(t, axis: int):
    return onnx_op("Slice", t, ints([-1], t, "start"), ints([_INT64_MIN], t, "end"), ints([axis], t, "axis"),
                   ints([-1], t, "step"))


def _shift_left(t, axis: int):
    """t_{j+1} at position j (zero at the end)."""
    rest = onnx_op("Slice", t, ints([1], t, "start"), ints([_INT64_MAX], t, "end"), ints([axis], t, "axis"))
    last = onnx_op("Slice", t, ints([-1], t, "start"), ints([_INT64_MAX], t, "end"), ints([axis], t, "axis"))
    return onnx_op("Concat", rest, zeros_like(last), axis=axis)


def _linear_recurrence(op, a, b, axis: int):
    """z_j = a_j + b_j z_{j+1} along ``axis`` (z past the end 0), by a reverse Scan."""
    element = a.shape.dims[:axis] + a.shape.dims[axis + 1:] if a.shape.dims is not None else None

    def body(z_next, a_j, b_j):
        z = onnx_op("Add", a_j, onnx_op("Mul", b_j, z_next))
        return [z, onnx_op("Identity", z)]
    dtype = a.known_dtype.base_dtype
    name, captured = trace_body(op.graph, f"{op.name}_grad_recurrence", [(dtype, element)] * 3, body)
    start = onnx_op("Gather", zeros_like(a), np.int64(0), axis=axis)
    _, z = onnx_op("Scan", start, a, b, body=name, num_scan_inputs=2, scan_input_axes=[axis, axis],
                   scan_input_directions=[1, 1], scan_output_axes=[axis], scan_output_directions=[1],
                   captured=captured, output_types=[dtype, dtype], outputs=2)
    return z


@family.gradient("onnx::TopK")
def _topk_grad(op, g, *unused):
    """The values' gradient added back at the indices TopK took them from."""
    x = op.inputs[0]
    indices = op.outputs[1]
    return per_input(op, (onnx_op("ScatterElements", zeros_like(x), indices, g, axis=op.get_attr("axis"),
                   reduction="add"), None))


