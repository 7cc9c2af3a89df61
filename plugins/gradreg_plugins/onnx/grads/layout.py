"""Gradients of the ops that rearrange elements: reshapes, Transpose, Concat, Split, Slice,
Tile, Pad, Expand, Compress, Trilu, ReverseSequence, and the gathers and scatters.

Ops that only move, copy or drop elements differentiate by :func:`index_adjoint`: the op is
applied to the input's flat indices, and the output gradient is added back where each output
element came from (copies add up, dropped elements get zero)."""
from __future__ import annotations

import numpy as np

from gradreg_plugins.onnx import family
from gradreg_plugins.onnx.grads.common import (
    axis_of,
    const_like,
    fail,
    index_adjoint,
    ints,
    iota_like,
    is_float,
    ones_like,
    onnx_op,
    per_input,
    reduce_to,
    scatter_add_flat,
    shape_of,
    static_rank,
    zeros_like,
)
from gradreg_plugins.onnx.nodes import onnx_inputs


def _reshaped_back(op, g):
    return per_input(op, onnx_op("Reshape", g, shape_of(op.inputs[0])))


for _op_type in ("onnx::Reshape", "onnx::Flatten", "onnx::Squeeze", "onnx::Unsqueeze"):
    family.gradient(_op_type)(_reshaped_back)


@family.gradient("onnx::Expand")
def _expand_grad(op, g):
    return per_input(op, (reduce_to(g, op.inputs[0]), None))


@family.gradient("onnx::Transpose")
def _transpose_grad(op, g):
    perm = op.get_attr("perm")
    if perm is None:
        rank = op.inputs[0].shape.rank
        if rank is None:
            raise fail(op, "the input's rank must be known")
        perm = list(range(rank))[::-1]
    return per_input(op, onnx_op("Transpose", g, perm=[int(p) for p in np.argsort(perm)]))


@family.gradient("onnx::Concat")
def _concat_grad(op, g):
    axis = op.get_attr("axis")
    sizes = [onnx_op("Gather", shape_of(x), ints([axis], g, "axis"), axis=0) for x in op.inputs]
    parts = onnx_op("Split", g, onnx_op("Concat", *sizes, axis=0), axis=axis, outputs=len(op.inputs))
    return per_input(op, (parts,) if len(op.inputs) == 1 else tuple(parts))


@family.gradient("onnx::Split")
def _split_grad(op, *grads):
    parts = [g if g is not None else zeros_like(t) for t, g in zip(op.outputs, grads)]
    return per_input(op, (onnx_op("Concat", *parts, axis=op.get_attr("axis")), None))


@family.gradient("onnx::Slice")
def _slice_grad(op, g):
    x, *bounds = onnx_inputs(op)
    return per_input(op, index_adjoint(x, g, lambda index: onnx_op("Slice", index, *bounds)))


@family.gradient("onnx::Tile")
def _tile_grad(op, g):
    x, repeats = op.inputs
    return per_input(op, (index_adjoint(x, g, lambda index: onnx_op("Tile", index, repeats)), None))


@family.gradient("onnx::Compress")
def _compress_grad(op, g):
    x, condition = op.inputs
    axis = op.get_attr("axis")
    attrs = {} if axis is None else {"axis": axis}
    return per_input(op, (index_adjoint(x, g, lambda index: onnx_op("Compress", index, condition, **attrs)), None))


@family.gradient("onnx::Pad")
def _pad_grad(op, g):
    """Every mode pads the input's flat indices the same way; constant padding marks its new
    elements -1 (they take the constant value, whose gradient they sum to)."""
    x, pads, value, axes = (onnx_inputs(op) + [None, None])[:4]
    mode = op.get_attr("mode") or b"constant"
    attrs = {"mode": mode.decode() if isinstance(mode, bytes) else mode}
    index = iota_like(x)
    marker = np.int64(-1) if attrs["mode"] == "constant" else None
    padded = onnx_op("Pad", index, pads, marker, axes, **attrs)
    if marker is None:
        return per_input(op, (scatter_add_flat(x, padded, g), None, None, None))
    from_x = onnx_op("GreaterOrEqual", padded, np.int64(0))
    zero = const_like(0, g)
    dx = scatter_add_flat(x, onnx_op("Where", from_x, padded, np.int64(0)), onnx_op("Where", from_x, g, zero))
    dvalue = None
    if is_float(value):
        dvalue = onnx_op("ReduceSum", onnx_op("Where", from_x, zero, g), keepdims=0)
        dvalue = onnx_op("Reshape", dvalue, shape_of(value))
    return per_input(op, (dx, None, dvalue, None))


@family.gradient("onnx::Trilu")
def _trilu_grad(op, g):
    inputs = onnx_inputs(op)
    return per_input(op, (onnx_op("Trilu", g, *inputs[1:], upper=op.get_attr("upper")), None))


@family.gradient("onnx::ReverseSequence")
def _reverse_sequence_grad(op, g):
    x, lengths = op.inputs
    return per_input(op, (onnx_op("ReverseSequence", g, lengths, batch_axis=op.get_attr("batch_axis"),
                   time_axis=op.get_attr("time_axis")), None))


# -- gathers and scatters -------------------------------------------------------------------------------

@family.gradient("onnx::Gather")
def _gather_grad(op, g):
    """Zeros shaped like the data with the output gradient added at the gathered positions
    (ScatterND, reduction "add"), the gathered axis moved first and back."""
    data, indices = op.inputs
    rank_d, rank_i, rank_out = data.shape.rank, indices.shape.rank, op.outputs[0].shape.rank
    if rank_d is None and rank_i is not None and rank_out is not None:
        rank_d = rank_out - rank_i + 1
    if rank_i is None and rank_d is not None and rank_out is not None:
        rank_i = rank_out - rank_d + 1
    axis = op.get_attr("axis")
    if axis != 0 and (rank_d is None or rank_i is None):
        raise fail(op, "the ranks of the data and the indices must be known (unless axis is 0)")
    axis = axis % rank_d if axis else 0
    index = indices if indices.dtype.name == "int64" else onnx_op("Cast", indices, to=np.int64)
    size = onnx_op("Gather", shape_of(data), const_like(axis, index, "axis"), axis=0)      # a scalar
    index = onnx_op("Where", onnx_op("Less", index, const_like(0, index)), onnx_op("Add", index, size), index)
    moved, updates = data, g
    if axis:
        perm = [axis] + [i for i in range(rank_d) if i != axis]
        moved = onnx_op("Transpose", data, perm=perm)
        updates = onnx_op("Transpose", g, perm=list(range(axis, axis + rank_i)) + list(range(axis)) +
                          list(range(axis + rank_i, rank_d - 1 + rank_i)))
    zeros = zeros_like(moved, g.dtype)
    scattered = onnx_op("ScatterND", zeros, onnx_op("Unsqueeze", index, ints([-1], g, "last")), updates,
                        reduction="add")
    if axis:
        scattered = onnx_op("Transpose", scattered, perm=[int(p) for p in np.argsort(perm)])
    return per_input(op, (scattered, None))


@family.gradient("onnx::GatherElements")
def _gather_elements_grad(op, g):
    data, indices = op.inputs
    return per_input(op, (onnx_op("ScatterElements", zeros_like(data, g.dtype), indices, g, axis=op.get_attr("axis"),
                   reduction="add"), None))


@family.gradient("onnx::GatherND")
def _gather_nd_grad(op, g):
    data, indices = op.inputs
    batch_dims = op.get_attr("batch_dims")
    if batch_dims:
        ddata = index_adjoint(data, g, lambda index: onnx_op("GatherND", index, indices, batch_dims=batch_dims))
        return per_input(op, (ddata, None))
    return per_input(op, (onnx_op("ScatterND", zeros_like(data, g.dtype), indices, g, reduction="add"), None))


def _corner(op, g, indices, axis: int):
    """g cut to the extent of ``indices`` on every axis but ``axis`` (GatherElements wants equal sizes
    there; ScatterElements' indices may cover a corner)."""
    rank = static_rank(op, op.inputs[0], "the data")
    others = [d for d in range(rank) if d != axis]
    if not others:
        return g
    ends = onnx_op("Gather", shape_of(indices), ints(others, g, "other_axes"), axis=0)
    return onnx_op("Slice", g, ints([0] * len(others), g, "starts"), ends, ints(others, g, "axes"))


def _scatter_grad(op, g, gather, scatter: str, **attrs):
    """ScatterElements / ScatterND: y = data with updates written (or combined) at indices;
    ``gather(t)`` reads t at each update's position."""
    data, indices, updates = op.inputs
    reduction = op.get_attr("reduction") if op.has_attr("reduction") else b"none"
    reduction = reduction.decode() if isinstance(reduction, bytes) else (reduction or "none")
    y = op.outputs[0]
    picked = gather(g)
    if reduction == "none":
        return onnx_op(scatter, g, indices, zeros_like(updates, g.dtype), **attrs), None, picked
    if reduction == "add":
        return g, None, picked
    if reduction == "mul":
        # y = data * prod(updates at the position): ddata = g prod(updates); dupdate_k = g y / update_k,
        # or g data where the update is zero (exact when it is the position's only update)
        ddata = onnx_op(scatter, g, indices, updates, reduction="mul", **attrs)
        total = gather(onnx_op("Mul", g, y))
        alone = gather(onnx_op("Mul", g, data))
        zero = onnx_op("Equal", updates, const_like(0, updates))
        safe = onnx_op("Where", zero, const_like(1, updates), updates)
        return ddata, None, onnx_op("Where", zero, alone, onnx_op("Div", total, safe))
    # max / min: to whichever of data and the updates equals the output
    ddata = onnx_op("Mul", g, onnx_op("Cast", onnx_op("Equal", data, y), to=g.dtype))
    won = onnx_op("Equal", updates, gather(y))
    return ddata, None, onnx_op("Mul", picked, onnx_op("Cast", won, to=g.dtype))


@family.gradient("onnx::ScatterElements")
def _scatter_elements_grad(op, g):
    data, indices, _ = op.inputs
    axis = axis_of(op, static_rank(op, data, "the data"))
    grads = _scatter_grad(op, g, lambda t: onnx_op("GatherElements", _corner(op, t, indices, axis), indices, axis=axis),
                          "ScatterElements", axis=axis)
    return per_input(op, grads)


@family.gradient("onnx::Scatter")
def _scatter_deprecated_grad(op, g):
    data, indices, updates = op.inputs
    axis = axis_of(op, static_rank(op, data, "the data"))
    picked = onnx_op("GatherElements", _corner(op, g, indices, axis), indices, axis=axis)
    ddata = onnx_op("ScatterElements", g, indices, zeros_like(updates, g.dtype), axis=axis)
    return per_input(op, (ddata, None, picked))


@family.gradient("onnx::ScatterND")
def _scatter_nd_grad(op, g):
    indices = op.inputs[1]
    return per_input(op, _scatter_grad(op, g, lambda t: onnx_op("GatherND", t, indices), "ScatterND"))


@family.gradient("onnx::MaxUnpool")
def _max_unpool_grad(op, g):
    """The output is zeros with X written at the flat indices I: dX is g read back at I."""
    x, indices = op.inputs[:2]
    flat = ints([-1], g, "flat")
    picked = onnx_op("Gather", onnx_op("Reshape", g, flat), onnx_op("Reshape", indices, flat), axis=0)
    return per_input(op, (onnx_op("Reshape", picked, shape_of(x)), None, None))


@family.gradient("onnx::TensorScatter")
def _tensor_scatter_grad(op, g):
    """present = past_cache with update written along ``axis`` at each batch row's write index
    (wrapping around in circular mode): d past is g where nothing was written, d update is g
    read back where it was."""
    past, update, write_indices = (onnx_inputs(op) + [None])[:3]
    written = onnx_op("TensorScatter", zeros_like(past, g.dtype), ones_like(update, g.dtype), write_indices,
                      axis=op.get_attr("axis"), mode=op.get_attr("mode").decode())
    dpast = onnx_op("Mul", g, onnx_op("Sub", const_like(1, g), written))
    position = onnx_op("TensorScatter", zeros_like(past, np.int64), onnx_op("Add", iota_like(update), np.int64(1)),
                       write_indices, axis=op.get_attr("axis"), mode=op.get_attr("mode").decode())
    # position - 1 is the flat index into update of the element written there (-1: none)
    source = onnx_op("Sub", position, np.int64(1))
    has = onnx_op("GreaterOrEqual", source, np.int64(0))
    dupdate = scatter_add_flat(update, onnx_op("Where", has, source, np.int64(0)),
                               onnx_op("Where", has, g, const_like(0, g)))
    return per_input(op, (dpast, dupdate, None))


@family.gradient("onnx::Range")
def _range_grad(op, g):
    """y_i = start + i delta: d start = sum g, d delta = sum i g; the limit only decides the length."""
    start = op.inputs[0]
    if not is_float(start):
        return per_input(op, (None, None, None))
    steps = onnx_op("Cast", iota_like(g), to=g.dtype)
    dstart, ddelta = onnx_op("ReduceSum", g, keepdims=0), onnx_op("ReduceSum", onnx_op("Mul", g, steps), keepdims=0)
    return per_input(op, (dstart, None, ddelta))
