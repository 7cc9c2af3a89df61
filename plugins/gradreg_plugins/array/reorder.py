"""Ops that move elements without changing them: Roll, ReverseSequence and Reverse (the V1
form of ReverseV2, with a boolean mask of axes). Definitions, NumPy kernels, shape functions
and gradient rules. Each is a permutation of its input, so its gradient is the inverse
permutation of the output's gradient: Roll back by the negated shift; ReverseSequence and
Reverse are their own inverses.
"""
from __future__ import annotations

import numpy as np

from gradreg.build.builders import apply_op, as_dense
from gradreg.errors import ShapeError
from gradreg.model.shapes import TensorShape
from gradreg_plugins.array import family

_INDEX = "{int32, int64}"


def _vector(value, what: str) -> np.ndarray:
    value = np.asarray(value)
    if value.ndim > 1:
        raise ValueError(f"{what} must be a scalar or a vector, got shape {list(value.shape)}")
    return value.reshape(-1).astype(np.int64)


# -- Roll ------------------------------------------------------------------------------------------

def _roll_shape(ctx):
    shift, axis = ctx.input_shape(1), ctx.input_shape(2)
    for name, s in (("shift", shift), ("axis", axis)):
        if s.rank is not None and s.rank > 1:
            raise ctx.error(f"{name} must be a scalar or a 1-D vector, got shape {s}")
    if shift.rank is not None and axis.rank is not None and shift.is_fully_defined() and axis.is_fully_defined() \
            and shift.num_elements() != axis.num_elements():
        raise ctx.error(f"shift and axis must have the same size, got {shift} and {axis}")
    return ctx.input_shape(0)


family.op("Roll", inputs=["input: T", "shift: Tshift", "axis: Taxis"], outputs=["output: T"],
          attrs=["T: type", f"Tshift: {_INDEX}", f"Taxis: {_INDEX}"], shape=_roll_shape, api="roll")


def roll(x, shift, axis):
    """Elements shifted along each axis, wrapping around; shifts of a repeated axis add up."""
    shifts, axes = _vector(shift, "shift"), _vector(axis, "axis")
    if shifts.size != axes.size:
        raise ValueError(f"shift and axis must have the same size, got {shifts.size} and {axes.size}")
    rank = np.ndim(x)
    total = [0] * rank
    for s, a in zip(shifts.tolist(), axes.tolist()):
        if not -rank <= a < rank:
            raise ValueError(f"axis {a} is out of range for a tensor of rank {rank}")
        total[a % rank] += s
    moved = [a for a in range(rank) if x.shape[a] and total[a] % x.shape[a]]
    if not moved:
        return x
    return np.roll(x, [total[a] for a in moved], axis=moved)


family.simple_kernel("Roll", roll)


@family.gradient("Roll")
def _roll_grad(op, grad):
    """Rolled back: the same axes, the shifts negated."""
    return apply_op("Roll", as_dense(grad), -op.inputs[1], op.inputs[2]), None, None


# -- ReverseSequence ---------------------------------------------------------------------------------

def _reverse_sequence_shape(ctx):
    source = ctx.input_shape(0)
    lengths = ctx.input_shape(1)
    if lengths.rank is not None and lengths.rank != 1:
        raise ctx.error(f"seq_lengths must be 1-D, got shape {lengths}")
    if source.rank is None:
        return source
    seq_dim, batch_dim = ctx.attr("seq_dim"), ctx.attr("batch_dim")
    rank = source.rank
    if batch_dim == seq_dim:
        raise ctx.error(f"seq_dim and batch_dim must differ, both are {seq_dim}")
    for name, d in (("seq_dim", seq_dim), ("batch_dim", batch_dim)):
        if not 0 <= d < rank:
            raise ctx.error(f"{name} must be in [0, {rank}), got {d}")
    dims = list(source.dims)
    if lengths.rank == 1:
        try:
            dims[batch_dim] = source[batch_dim: batch_dim + 1].merge_with(lengths).dims[0]
        except ShapeError:
            raise ctx.error(f"the length of seq_lengths {lengths} must equal input.dims({batch_dim}) of "
                            f"input shape {source}") from None
    return TensorShape(dims)


family.op("ReverseSequence", inputs=["input: T", "seq_lengths: Tlen"], outputs=["output: T"],
          attrs=["seq_dim: int", "batch_dim: int = 0", "T: type", f"Tlen: {_INDEX} = int64"],
          shape=_reverse_sequence_shape)


@family.kernel("ReverseSequence")
def _reverse_sequence(op, ctx):
    seq_dim, batch_dim = op.get_attr("seq_dim"), op.get_attr("batch_dim")

    def reverse_sequence(x, seq_lengths):
        lengths = np.asarray(seq_lengths).astype(np.int64)
        rank = np.ndim(x)
        if batch_dim == seq_dim or not (0 <= seq_dim < rank and 0 <= batch_dim < rank):
            raise ValueError(f"invalid seq_dim {seq_dim} / batch_dim {batch_dim} for input of rank {rank}")
        if lengths.shape != (x.shape[batch_dim],):
            raise ValueError(f"Length of seq_lengths != input.dims({batch_dim}), ({lengths.size} vs. "
                             f"{x.shape[batch_dim]})")
        bad = np.flatnonzero((lengths < 0) | (lengths > x.shape[seq_dim]))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"seq_lens({i}) = {lengths[i]} is not in [0, input.dims({seq_dim}) = "
                             f"{x.shape[seq_dim]}]")
        return _reversed_prefixes(x, lengths, seq_dim, batch_dim)
    return reverse_sequence


def _reversed_prefixes(x: np.ndarray, lengths: np.ndarray, seq_dim: int, batch_dim: int) -> np.ndarray:
    """Along seq_dim, the first lengths[b] elements of batch row b in reverse order."""
    steps = np.arange(x.shape[seq_dim])
    per_batch = lengths[:, None]                                        # [batch, 1]
    source = np.where(steps[None, :] < per_batch, per_batch - 1 - steps[None, :], steps[None, :])
    index_shape = [1] * x.ndim
    index_shape[batch_dim], index_shape[seq_dim] = x.shape[batch_dim], x.shape[seq_dim]
    if batch_dim > seq_dim:
        source = source.T
    index = np.broadcast_to(source.reshape(index_shape), x.shape)
    return np.take_along_axis(x, index, axis=seq_dim)


@family.gradient("ReverseSequence")
def _reverse_sequence_grad(op, grad):
    return apply_op("ReverseSequence", as_dense(grad), op.inputs[1], seq_dim=op.get_attr("seq_dim"),
                    batch_dim=op.get_attr("batch_dim")), None


# -- Reverse (V1) ------------------------------------------------------------------------------------

def _reverse_v1_shape(ctx):
    source, dims = ctx.input_shape(0), ctx.input_shape(1)
    if dims.rank is not None and dims.rank != 1:
        raise ctx.error(f"dims must be 1-D, got shape {dims}")
    if source.rank is not None and source.rank > 8:
        raise ctx.error(f"reverse is not implemented for tensors of rank {source.rank} > 8")
    if source.rank is not None and dims.rank == 1 and dims.dims[0] is not None and dims.dims[0] != source.rank:
        raise ctx.error(f"dims must have one entry per dimension of the input: {dims.dims[0]} vs. {source.rank}")
    return source


family.op("Reverse", inputs=["tensor: T", "dims: bool"], outputs=["output: T"],
          attrs=["T: {uint8, int8, uint16, int16, uint32, int32, uint64, int64, bool, bfloat16, float16, float32, "
                 "float64, complex64, complex128, string}"], shape=_reverse_v1_shape)


def _reverse_v1(x, dims):
    dims = np.asarray(dims)
    if dims.ndim != 1 or dims.size != np.ndim(x):
        raise ValueError(f"'dims' must have the same number of values as 'input' has dimensions; 'input' has "
                         f"{np.ndim(x)}, 'dims' has shape {list(dims.shape)}")
    axes = tuple(int(a) for a in np.flatnonzero(dims))
    return np.flip(x, axis=axes) if axes else x


family.simple_kernel("Reverse", _reverse_v1)


@family.gradient("Reverse")
def _reverse_v1_grad(op, grad):
    return apply_op("Reverse", as_dense(grad), op.inputs[1]), None

