"""DynamicPartition, DynamicStitch and ParallelDynamicStitch: definitions, NumPy kernels, shape
functions and gradient rules.

DynamicPartition sends each slice of ``data`` to exactly one output, so its gradient stitches
the outputs' gradients back (as TensorFlow's rule does).

DynamicStitch writes ``data[m][i]`` to row ``indices[m][i]`` of its output; where several
slices name the same row, only the last one (in the order of m, then i) lands: the others do
not reach the output at all, and their gradient is zero. TensorFlow's rule gathers the
output's gradient at every index, so it gives each overwritten slice the gradient of the slice
that replaced it (the op sweep's DynamicStitch.f64_duplicate_indices, a TENSORFLOW_WRONG
entry; finite differences side with gradreg). gradreg's rule gathers the gradient only for
the slices that landed: the winner of each row is found by stitching every slice's ordinal
with the op itself, and a slice whose ordinal is not its row's winner gathers a zero row
instead. With constant indices (the usual case) the winners are worked out while building
the graph and the rule is TensorFlow's plain Gather when no index repeats.

ParallelDynamicStitch is the same op without an order among duplicates (TensorFlow's CPU
kernel lets any of them land); gradreg's kernel is DynamicStitch's, and its rule gives the
gradient to the slice its kernel let land.
"""
from __future__ import annotations

import numpy as np

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op, as_dense, constant
from gradreg.errors import ShapeError
from gradreg.model import dtypes
from gradreg.model.graph import Tensor
from gradreg.model.shape_inference import constant_value
from gradreg.model.shapes import TensorShape
from gradreg_plugins.array import family

# -- DynamicPartition --------------------------------------------------------------------------------


def _partition_shape(ctx):
    num = ctx.attr("num_partitions")
    data, partitions = ctx.input_shape(0), ctx.input_shape(1)
    if data.rank is None or partitions.rank is None:
        return [TensorShape(None)] * num
    if partitions.rank > data.rank or not data[:partitions.rank].is_compatible_with(partitions):
        raise ctx.error(f"data.shape {data} must start with partitions.shape {partitions}")
    return [TensorShape([None]).concatenate(data[partitions.rank:])] * num


family.op("DynamicPartition", inputs=["data: T", "partitions: int32"], outputs=["outputs: num_partitions * T"],
          attrs=["num_partitions: int >= 1", "T: type"], shape=_partition_shape, api="dynamic_partition")


@family.kernel("DynamicPartition")
def _dynamic_partition(op, ctx):
    num = op.get_attr("num_partitions")

    def partition(data, partitions):
        partitions = np.asarray(partitions)
        if data.shape[:partitions.ndim] != partitions.shape:
            raise ValueError(f"data.shape must start with partitions.shape, got data.shape = "
                             f"{list(data.shape)}, partitions.shape = {list(partitions.shape)}")
        flat = partitions.reshape(-1)
        bad = np.flatnonzero((flat < 0) | (flat >= num))
        if bad.size:
            where = np.unravel_index(int(bad[0]), partitions.shape)
            raise ValueError(f"partitions[{','.join(map(str, where))}] = {flat[bad[0]]} is not in [0, {num})")
        rows = data.reshape((flat.size,) + data.shape[partitions.ndim:])
        out = tuple(rows[flat == p] for p in range(num))
        return out[0] if num == 1 else out
    return partition


@family.gradient("DynamicPartition")
def _dynamic_partition_grad(op, *grads):
    """Each slice's gradient is its row of the gradient of the output it went to: the
    positions of the slices, partitioned like the data, stitch the gradients back."""
    data, partitions = op.inputs
    shape = rules.shape_vector(partitions)
    count = apply_op("Prod", shape, rules.ints([0]))
    positions = apply_op("Reshape", apply_op("Range", rules.ints(0), count, rules.ints(1)), shape)
    parts = apply_op("DynamicPartition", positions, partitions, num_partitions=op.get_attr("num_partitions"))
    parts = list(parts) if isinstance(parts, (list, tuple)) else [parts]
    stitched = apply_op("DynamicStitch", parts, [as_dense(g) for g in grads])
    return rules.reshape_like(stitched, data), None


# -- DynamicStitch / ParallelDynamicStitch ------------------------------------------------------------


def _stitch_shape(ctx):
    n = ctx.attr("N")
    inner = TensorShape(None)
    for m in range(n):
        index_shape, data_shape = ctx.input_shape(m), ctx.input_shape(n + m)
        if index_shape.rank is None or data_shape.rank is None:
            continue
        if data_shape.rank < index_shape.rank or not data_shape[:index_shape.rank].is_compatible_with(index_shape):
            raise ctx.error(f"data[{m}].shape = {data_shape} does not start with indices[{m}].shape = {index_shape}")
        try:
            inner = inner.merge_with(data_shape[index_shape.rank:])
        except ShapeError:
            raise ctx.error(f"data[{m}].shape = {data_shape} does not match the other data's inner shape "
                            f"{inner}") from None
    values = [ctx.input_value(m) for m in range(n)]
    rows = None
    if all(v is not None for v in values):
        rows = max((int(np.max(v)) + 1 for v in values if np.size(v)), default=0)
    return TensorShape([rows]).concatenate(inner)


def stitch(indices: list, data: list) -> np.ndarray:
    """merged[indices[m][i]] = data[m][i], the last slice winning where rows repeat."""
    if not data:
        raise ValueError("DynamicStitch needs at least one input")
    inner = None
    flat_indices, flat_rows = [], []
    for m, (idx, values) in enumerate(zip(indices, data)):
        idx = np.asarray(idx)
        if values.shape[:idx.ndim] != idx.shape:
            raise ValueError(f"data[{m}].shape = {list(values.shape)} does not start with indices[{m}].shape = "
                             f"{list(idx.shape)}")
        tail = values.shape[idx.ndim:]
        if inner is not None and tail != inner:
            raise ValueError(f"Need data[{m}].shape[{idx.ndim}:] = {list(inner)}, got data[{m}].shape = "
                             f"{list(values.shape)}")
        inner = tail
        flat_indices.append(idx.reshape(-1).astype(np.int64))
        flat_rows.append(values.reshape((idx.size,) + tail))
    positions = np.concatenate(flat_indices)
    if positions.size and positions.min() < 0:
        raise ValueError(f"indices hold a negative index: {int(positions.min())}")
    rows = int(positions.max()) + 1 if positions.size else 0
    out = np.zeros((rows,) + tuple(inner or ()), dtype=data[0].dtype)   # inner: set by the first input
    if positions.size:
        winners = _last_occurrences(positions)
        out[positions[winners]] = np.concatenate(flat_rows)[winners]
    return out


def _last_occurrences(positions: np.ndarray) -> np.ndarray:
    """The index of the last occurrence of each distinct value of ``positions``."""
    _, first_in_reversed = np.unique(positions[::-1], return_index=True)
    return positions.size - 1 - first_in_reversed


def _stitch_kernel(op, ctx):
    n = op.get_attr("N")

    def compute(*args):
        out = stitch(list(args[:n]), list(args[n:]))
        ctx.check_elements(out.size, op)
        return out
    return compute


for _op_type, _api in (("DynamicStitch", "dynamic_stitch"), ("ParallelDynamicStitch", "parallel_dynamic_stitch")):
    family.op(_op_type, inputs=["indices: N * int32", "data: N * T"], outputs=["merged: T"],
              attrs=["N: int >= 1", "T: type"], shape=_stitch_shape, api=_api)
    family.kernel(_op_type)(_stitch_kernel)
    family.gradient(_op_type)(lambda op, grad: _stitch_gradient(op, grad))


def _stitch_gradient(op, grad) -> list:
    """Gradients of the data: the output's gradient at each slice's row, for the slices that
    landed; zeros for those a later slice overwrote (see the module docstring)."""
    n = op.get_attr("N")
    indices = list(op.inputs[:n])
    grad = rules.dense(grad)
    known = [constant_value(t) for t in indices]
    if all(v is not None for v in known):
        picks = _static_picks([np.asarray(v) for v in known])
    else:
        picks = _dynamic_picks(op, indices)
    if picks is None:   # no repeated index: every slice landed
        return [None] * n + [apply_op("GatherV2", grad, idx, rules.ints(0)) for idx in indices]
    padded = apply_op("Pad", grad, _one_more_row(grad))
    return [None] * n + [apply_op("GatherV2", padded, pick, rules.ints(0)) for pick in picks]


def _static_picks(known: list[np.ndarray]) -> list | None:
    """With constant indices: per input, its indices with overwritten slices sent to the extra
    zero row; None when no index repeats."""
    flat = np.concatenate([v.reshape(-1).astype(np.int64) for v in known])
    if np.unique(flat).size == flat.size:
        return None
    landed = np.zeros(flat.size, bool)
    landed[_last_occurrences(flat)] = True
    rows = int(flat.max()) + 1
    picks, start = [], 0
    for v in known:
        part = np.where(landed[start:start + v.size], flat[start:start + v.size], rows)
        picks.append(constant(part.reshape(v.shape).astype(np.int32), dtypes.int32))
        start += v.size
    return picks


def _dynamic_picks(op, indices: list) -> list:
    """Per input, in the graph: its indices, with a slice whose ordinal is not the one the op
    stitched into its row sent to the extra zero row (the output's row count)."""
    ordinals, offset = [], rules.ints(0)
    for idx in indices:
        size = apply_op("Size", idx)
        span = apply_op("Range", offset, offset + size, rules.ints(1))
        ordinals.append(apply_op("Reshape", span, apply_op("Shape", idx)))
        offset = offset + size
    winners = apply_op(op.type, indices, ordinals)
    rows = apply_op("StridedSlice", apply_op("Shape", winners), [0], [1], [1], shrink_axis_mask=1)
    picks = []
    for idx, ordinal in zip(indices, ordinals):
        landed = apply_op("Equal", apply_op("GatherV2", winners, idx, rules.ints(0)), ordinal)
        picks.append(apply_op("SelectV2", landed, idx, rows))
    return picks


def _one_more_row(grad: Tensor) -> Tensor:
    """Paddings adding one zero row after the first dim of ``grad``."""
    rank = grad.shape.rank
    if rank is not None:
        return rules.ints([[0, 1]] + [[0, 0]] * (rank - 1))
    rest = apply_op("Fill", apply_op("Pack", [apply_op("Rank", grad) - rules.ints(1), rules.ints(2)],
                                     axis=0), rules.ints(0))
    return apply_op("ConcatV2", [rules.ints([[0, 1]]), rest], rules.ints(0))
