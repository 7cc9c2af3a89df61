"""Gradient rules of the array family: ``rule(op, *grads) -> one gradient per input``.

The rules build the backward graph from TensorFlow's own op types (a differentiated graph
imports into TensorFlow) and mirror tensorflow/python/ops/array_grad.py. Whatever the static
shapes and constant inputs already tell (shapes, axes, permutations, paddings) is computed
in Python and written as Const nodes; Shape-based computations are the fallback for what is
only known at run time.
"""
from __future__ import annotations

import numpy as np

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op, as_dense, constant
from gradreg.errors import GradientError, describe_node
from gradreg.model import dtypes
from gradreg.model.graph import Tensor
from gradreg.model.indexed_slices import IndexedSlices
from gradreg.model.shape_inference import constant_value
from gradreg.model.shapes import TensorShape
from gradreg_plugins.array import family, slicing
from gradreg_plugins.rule_helpers import landed_indices

_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")

# Ops whose outputs do not depend differentiably on their inputs (or that have no inputs).
family.not_differentiable(
    "Const", "Placeholder", "StopGradient", "ZerosLike", "OnesLike",
    "Shape", "ShapeN", "Size", "Rank", "ConcatOffset", "BroadcastArgs", "BroadcastGradientArgs",
    "InvertPermutation", "ListDiff", "Where", "OneHot", "Unique", "LowerBound", "UpperBound",
)


# -- helpers ------------------------------------------------------------------------------------

def _static_int(t: Tensor) -> int | None:
    value = constant_value(t)
    return None if value is None or np.size(value) != 1 else int(np.asarray(value).reshape(-1)[0])


def _all_axes(t: Tensor) -> Tensor:
    rank = t.shape.rank
    return rules.ints(list(range(rank))) if rank is not None else apply_op("Range", 0, apply_op("Rank", t), 1)


def _sum_all(t: Tensor) -> Tensor:
    return t if t.shape.rank == 0 else apply_op("Sum", t, _all_axes(t))


class _Dims:
    """The dims of a tensor: Python ints where static, scalar int32 tensors where not (one Shape
    node for the tensor, made on first need)."""

    def __init__(self, tensor: Tensor, static: TensorShape | None = None):
        self.tensor = tensor
        self.static = static if static is not None else tensor.shape
        self._shape = None

    def __getitem__(self, i: int):
        d = self.static.as_list()[i]
        if d is not None:
            return d
        if self._shape is None:
            self._shape = apply_op("Shape", self.tensor)
        return apply_op("StridedSlice", self._shape, [i], [i + 1], [1], shrink_axis_mask=1)

    def range(self, start: int, stop: int) -> list:
        return [self[i] for i in range(start, stop)]


def _product(values: list):
    """The product of ints and scalar tensors: a Python int while no tensor is involved."""
    known = int(np.prod([v for v in values if not isinstance(v, Tensor)], dtype=np.int64))
    out: int | Tensor = known
    for v in values:
        if isinstance(v, Tensor):
            out = v if isinstance(out, int) and out == 1 else out * v
    return out


def _vector(values: list) -> Tensor:
    """A shape vector from ints and scalar int32 tensors: a Const when all are ints."""
    if not any(isinstance(v, Tensor) for v in values):
        return rules.ints(values, dtypes.int32)
    return apply_op("Pack", [v if isinstance(v, Tensor) else rules.ints(v, dtypes.int32) for v in values], axis=0)


def _masks(op) -> dict:
    return {m: op.get_attr(m) for m in _MASKS}


def _reshape_to(grad, x: Tensor) -> Tensor:
    return rules.reshape_like(rules.dense(grad), x)


# -- identities ---------------------------------------------------------------------------------

@family.gradient("Identity", "Snapshot", "PlaceholderWithDefault", "EnsureShape")
def _identity_grad(op, grad):
    return grad


@family.gradient("IdentityN")
def _identity_n_grad(op, *grads):
    return list(grads)


@family.gradient("CheckNumerics", "CheckNumericsV2")
def _check_numerics_grad(op, grad):
    message = op.get_attr("message").decode("utf-8", "replace")
    return apply_op(op.type, as_dense(grad),
                    message=f"Not a number (NaN) or infinity (Inf) values detected in gradient. {message}")


@family.gradient("PreventGradient")
def _prevent_gradient_grad(op, grad):
    message = op.get_attr("message").decode("utf-8", "replace")
    raise GradientError(f"{describe_node(op.name, op.type)}: Gradient explicitly disabled. Reason: {message}")


# -- reshaping ----------------------------------------------------------------------------------

@family.gradient("Reshape")
def _reshape_grad(op, grad):
    return _reshape_to(grad, op.inputs[0]), None


@family.gradient("ExpandDims")
def _expand_dims_grad(op, grad):
    dim = _static_int(op.inputs[1])
    if dim is None:
        return _reshape_to(grad, op.inputs[0]), None
    # A negative dim counts from the end of the output, as Squeeze's dims count in grad.
    return apply_op("Squeeze", rules.dense(grad), squeeze_dims=[dim]), None


@family.gradient("Squeeze")
def _squeeze_grad(op, grad):
    return _reshape_to(grad, op.inputs[0])


def _inverse_permutation(perm: Tensor) -> Tensor:
    value = constant_value(perm)
    if value is None:
        return apply_op("InvertPermutation", perm)
    inverse = np.argsort(value).astype(value.dtype)
    if np.array_equal(inverse, value):   # swaps and reversals are their own inverse
        return perm
    return constant(inverse, perm.known_dtype.base_dtype)


@family.gradient("Transpose", "ConjugateTranspose")
def _transpose_grad(op, grad):
    # ConjugateTranspose: the adjoint of conj(transpose(x)) is conj(transpose back).
    return apply_op(op.type, as_dense(grad), _inverse_permutation(op.inputs[1])), None


# -- joining and splitting ----------------------------------------------------------------------

@family.gradient("Pack")
def _pack_grad(op, grad):
    return apply_op("Unpack", as_dense(grad), num=op.get_attr("N"), axis=op.get_attr("axis"))


@family.gradient("Unpack")
def _unpack_grad(op, *grads):
    return apply_op("Pack", [as_dense(g) for g in grads], axis=op.get_attr("axis"))


def _join(grads: list, axis: Tensor):
    """The gradients of the pieces of a split, concatenated back."""
    if len(grads) == 1:
        return grads[0]
    return apply_op("ConcatV2", [as_dense(g) for g in grads], axis)


@family.gradient("Split")
def _split_grad(op, *grads):
    return None, _join(list(grads), op.inputs[0])


@family.gradient("SplitV")
def _split_v_grad(op, *grads):
    return _join(list(grads), op.inputs[2]), None, None


@family.gradient("ConcatV2")
def _concat_v2_grad(op, grad):
    return _concat_grad(grad, op.inputs[:-1], op.inputs[-1], op.outputs[0]) + [None]


@family.gradient("Concat")
def _concat_grad_v1(op, grad):
    return [None] + _concat_grad(grad, op.inputs[1:], op.inputs[0], op.outputs[0])


def _concat_grad(grad, values: list, axis_tensor: Tensor, output: Tensor) -> list:
    """Each value's part of the gradient. With the axis and the values' sizes along it known:
    one SplitV (or, for IndexedSlices, each value's rows or columns of them); else ConcatOffset
    and a Slice per value."""
    rank = next((v.shape.rank for v in values if v.shape.rank is not None), output.shape.rank)
    axis = _static_int(axis_tensor)
    sizes = None
    if axis is not None and rank:
        axis %= rank
        sizes = [v.shape.dims[axis] if v.shape.rank is not None else None for v in values]
    if isinstance(grad, IndexedSlices):
        if sizes is not None and axis is not None and all(s is not None for s in sizes):
            return _concat_sparse_grad(grad, values, axis, [int(s) for s in sizes if s is not None])
        grad = as_dense(grad)
    if sizes is not None and sizes.count(None) <= 1:
        splits = rules.ints([-1 if s is None else s for s in sizes])
        split_dim = axis_tensor if axis_tensor.known_dtype.base_dtype is dtypes.int32 else rules.ints(axis)
        return list(apply_op("SplitV", grad, splits, split_dim, num_split=len(values)))
    if axis is not None and rank:
        axis_t = rules.ints(axis)
    else:
        if axis_tensor.known_dtype.base_dtype is not dtypes.int32:
            axis_tensor = apply_op("Cast", axis_tensor, DstT=dtypes.int32)
        axis_t = apply_op("FloorMod", axis_tensor, apply_op("Rank", values[0]))
    shapes = apply_op("ShapeN", list(values))
    offsets = apply_op("ConcatOffset", axis_t, shapes)
    return [apply_op("Slice", grad, begin, size) for begin, size in zip(offsets, shapes)]


def _concat_sparse_grad(grad: IndexedSlices, values: list, axis: int, sizes: list[int]) -> list:
    """IndexedSlices per value: along axis 0 each value takes the rows that fall in its range;
    along another axis each takes its columns of every row."""
    out, start = [], 0
    for value, size in zip(values, sizes):
        dense_shape = rules.shape_vector(value)
        if axis == 0:
            indices = grad.indices
            index_dtype = indices.known_dtype.base_dtype
            in_range = apply_op("LogicalAnd", apply_op("GreaterEqual", indices, rules.ints(start, index_dtype)),
                                apply_op("Less", indices, rules.ints(start + size, index_dtype)))
            picked = apply_op("Squeeze", apply_op("Where", in_range), squeeze_dims=[1])
            rows = apply_op("GatherV2", indices, picked, 0) - rules.ints(start, index_dtype)
            out.append(IndexedSlices(apply_op("GatherV2", grad.values, picked, 0), rows, dense_shape))
        else:
            begin = [0] * len(value.shape.dims)
            begin[axis] = start
            extent = [-1 if i != axis else size for i in range(len(begin))]
            columns = apply_op("Slice", grad.values, rules.ints(begin), rules.ints(extent))
            out.append(IndexedSlices(columns, grad.indices, dense_shape))
        start += size
    return out


# -- slicing ------------------------------------------------------------------------------------

@family.gradient("Slice")
def _slice_grad(op, grad):
    """Zeros around the slice: Pad with begin before and the rest of each dim after."""
    x, begin = op.inputs[0], op.inputs[1]
    index_dtype = begin.dtype.base_dtype
    begin_value = constant_value(begin)
    in_shape, out_shape = x.shape, op.outputs[0].shape
    if begin_value is not None and in_shape.is_fully_defined() and out_shape.is_fully_defined():
        before = np.asarray(begin_value, dtype=np.int64).reshape(-1)
        after = np.asarray(in_shape.dims, dtype=np.int64) - np.asarray(out_shape.dims, dtype=np.int64) - before
        paddings = constant(np.stack([before, after], axis=1).astype(index_dtype.np), index_dtype)
    else:
        column = rules.ints([-1, 1])
        grown = rules.shape_vector(x, index_dtype) - rules.shape_vector(op.outputs[0], index_dtype)
        after = grown - begin
        paddings = apply_op("ConcatV2", [apply_op("Reshape", begin, column), apply_op("Reshape", after, column)], 1)
    return apply_op("Pad", as_dense(grad), paddings), None, None


@family.gradient("StridedSlice")
def _strided_slice_grad(op, grad):
    x, begin, end, strides = op.inputs
    if begin.dtype.base_dtype not in (dtypes.int32, dtypes.int64):   # StridedSliceGrad has no int16
        begin, end, strides = (apply_op("Cast", t, DstT=dtypes.int32) for t in (begin, end, strides))
    shape = rules.shape_vector(x, begin.dtype.base_dtype)
    dx = apply_op("StridedSliceGrad", shape, begin, end, strides, as_dense(grad), **_masks(op))
    return dx, None, None, None


@family.iteration_sum("StridedSliceGrad")
def _strided_slice_grad_iteration_sum(op):
    """In a loop gradient, the gradient of an invariant read one leading index per iteration
    (``xs[t]``: shrink_axis_mask 1, stride 1) is the iterations' dy_t added at their indices
    after the loop (UnsortedSegmentSum of the stacked rows), instead of a zero tensor of the
    invariant's full size built and added in every iteration, which is quadratic in the trip
    count. Same sums (each index's rows in iteration order)."""
    shape, begin, _end, _strides, dy = op.inputs
    dims = constant_value(shape)
    if not slicing.reads_one_row(op) or dims is None:
        return None
    if not (rules.collectable(dy) and begin.dtype.base_dtype in (dtypes.int32, dtypes.int64)):
        return None
    rows = int(np.ravel(dims)[0])

    def build(stacked):
        ids = apply_op("Reshape", stacked(begin), rules.ints([-1]))
        ids = apply_op("FloorMod", ids, rules.ints(rows, ids.dtype.base_dtype))   # xs[-1] is the last row
        return apply_op("UnsortedSegmentSum", stacked(dy), ids, rules.ints(rows))
    return [begin, dy], build


@family.gradient("StridedSliceGrad")
def _strided_slice_grad_grad(op, grad):
    _, begin, end, strides, _ = op.inputs
    return None, None, None, None, apply_op("StridedSlice", as_dense(grad), begin, end, strides, **_masks(op))


# -- padding, tiling, filling, broadcasting -----------------------------------------------------

@family.gradient("Pad")
def _pad_grad(op, grad):
    return _padded_part(op, as_dense(grad)), None


@family.gradient("PadV2")
def _pad_v2_grad(op, grad):
    """The padded part as for Pad; the fill value got everything outside it. (TensorFlow returns
    None for the fill value; it is differentiable, so it gets its gradient here unless it is a
    constant, which never needs one.)"""
    grad = as_dense(grad)
    dx = _padded_part(op, grad)
    fill = op.inputs[2]
    dfill = None
    if fill.dtype.is_differentiable and constant_value(fill) is None:
        dfill = _sum_all(grad) - _sum_all(dx)
    return dx, None, dfill


def _padded_part(op, grad: Tensor) -> Tensor:
    x, paddings = op.inputs[0], op.inputs[1]
    index_dtype = paddings.dtype.base_dtype
    pads = constant_value(paddings)
    if pads is not None:
        begin = constant(np.asarray(pads).reshape(-1, 2)[:, 0], index_dtype)
    else:
        begin = apply_op("StridedSlice", paddings, [0, 0], [0, 1], [1, 1], begin_mask=1, end_mask=1,
                         shrink_axis_mask=2)
    return apply_op("Slice", grad, begin, rules.shape_vector(x, index_dtype))


@family.gradient("MirrorPad")
def _mirror_pad_grad(op, grad):
    return apply_op("MirrorPadGrad", as_dense(grad), op.inputs[1], mode=op.get_attr("mode")), None


@family.gradient("MirrorPadGrad")
def _mirror_pad_grad_grad(op, grad):
    return apply_op("MirrorPad", as_dense(grad), op.inputs[1], mode=op.get_attr("mode")), None


@family.gradient("Tile")
def _tile_grad(op, grad):
    """Sum of the tiles: grad reshaped to [m0, d0, m1, d1, ...] and summed over the m axes. An
    IndexedSlices gradient is first folded onto the rows of one tile (indices mod d0)."""
    x, multiples = op.inputs
    index_dtype = multiples.dtype.base_dtype
    reps = constant_value(multiples)
    folded = isinstance(grad, IndexedSlices) and grad.indices.dtype.base_dtype in (dtypes.int32, dtypes.int64)
    if folded:
        grad = _rows_modulo(grad, x)
    grad = as_dense(grad)
    if reps is not None and x.shape.is_fully_defined():
        reps = [1 if folded and i == 0 else int(r) for i, r in enumerate(np.asarray(reps).reshape(-1))]
        if all(r == 1 for r in reps) and grad.shape == x.shape:
            return grad, None
        split = [v for pair in zip(reps, x.shape.dims) for v in pair]
        dx = apply_op("Sum", apply_op("Reshape", grad, rules.ints(split)), rules.ints(list(range(0, len(split), 2))))
        return dx, None
    if folded:
        rest = apply_op("StridedSlice", multiples, [1], [0], [1], end_mask=1)
        multiples = apply_op("ConcatV2", [rules.ints([1], index_dtype), rest], 0)
    pairs = apply_op("Pack", [multiples, rules.shape_vector(x, index_dtype)], axis=1)
    split = apply_op("Reshape", pairs, rules.ints([-1]))
    axes = apply_op("Range", 0, apply_op("Size", split), 2)
    dx = apply_op("Sum", apply_op("Reshape", grad, split), axes)
    dx.set_shape(x.shape)
    return dx, None


def _rows_modulo(grad: IndexedSlices, x: Tensor) -> Tensor:
    """The rows of an IndexedSlices gradient of tile(x) summed onto the first tile's rows."""
    index_dtype = grad.indices.known_dtype.base_dtype
    rows = x.shape.as_list()[0] if x.shape.rank else None
    count = rules.ints(rows, index_dtype) if rows is not None else apply_op(
        "Cast", apply_op("StridedSlice", apply_op("Shape", x), [0], [1], [1], shrink_axis_mask=1), DstT=index_dtype)
    return apply_op("UnsortedSegmentSum", grad.values, apply_op("FloorMod", grad.indices, count), count)


@family.gradient("BroadcastTo")
def _broadcast_to_grad(op, grad):
    return _summed_to(as_dense(grad), op.inputs[0], op.outputs[0].shape), None


def _summed_to(grad: Tensor, x: Tensor, out_shape: TensorShape) -> Tensor:
    """``grad`` (of ``x`` broadcast to ``out_shape``) summed over the broadcast dims: the leading
    new ones and those of size 1 in ``x``."""
    in_shape = x.shape
    if in_shape.is_fully_defined() and out_shape.is_fully_defined():
        in_dims, out_dims = in_shape.as_tuple(), out_shape.as_tuple()
        lead = len(out_dims) - len(in_dims)
        axes = list(range(lead)) + [lead + i for i, d in enumerate(in_dims)
                                    if d == 1 and out_dims[lead + i] != 1]
        summed = apply_op("Sum", grad, rules.ints(axes)) if axes else grad
        kept = [d for i, d in enumerate(out_dims) if i not in axes]
        if list(in_dims) == kept:
            return summed
        return apply_op("Reshape", summed, rules.ints(in_dims))
    x_shape = rules.shape_vector(x)
    _, reduced = apply_op("BroadcastGradientArgs", apply_op("Shape", grad), x_shape)
    return apply_op("Reshape", apply_op("Sum", grad, reduced, keep_dims=True), x_shape)


@family.gradient("Fill")
def _fill_grad(op, grad):
    return None, _sum_all(as_dense(grad))


# -- gathering and scattering -------------------------------------------------------------------

@family.gradient("Gather")
def _gather_grad(op, grad):
    return _rows_gradient(op.inputs[0], op.inputs[1], grad), None


@family.gradient("GatherV2")
def _gather_v2_grad(op, grad):
    """Axis 0: IndexedSlices (the gathered rows). Another axis: moved to the front (after the
    batch dims), summed with UnsortedSegmentSum and moved back, as TensorFlow does."""
    params, indices, axis_tensor = op.inputs
    batch_dims = op.get_attr("batch_dims")
    params_rank, indices_rank = params.shape.rank, indices.shape.rank
    if batch_dims < 0:
        if indices_rank is None:
            raise GradientError(f"cannot differentiate {describe_node(op.name, op.type)}: batch_dims "
                                f"{batch_dims} is negative and the rank of the indices is unknown")
        batch_dims += indices_rank
    axis = _static_int(axis_tensor)
    if axis is not None and axis < 0 and params_rank is not None:
        axis += params_rank
    if axis == 0:
        return _rows_gradient(params, indices, grad), None, None
    grad = rules.dense(grad)
    if axis is not None and axis >= 0 and params_rank is not None and indices_rank is not None:
        dx = _gather_axis_gradient(params, indices, grad, axis, batch_dims, op.outputs[0].shape)
    else:
        dx = _gather_axis_gradient_dynamic(params, indices, grad, axis_tensor, batch_dims)
    return dx, None, None


def _rows_gradient(params: Tensor, indices: Tensor, grad) -> IndexedSlices:
    """The gradient of gathering rows of ``params``: the rows of ``grad``, at ``indices``."""
    dense_shape = rules.shape_vector(params)
    grad = rules.dense(grad)
    if indices.shape.rank == 1:   # grad is already [number of indices] + params.shape[1:]
        return IndexedSlices(grad, indices, dense_shape)
    n = indices.shape.num_elements()
    count = rules.ints([n]) if n is not None else apply_op("ExpandDims", apply_op("Size", indices), 0)
    tail = params.shape[1:] if params.shape.rank is not None else TensorShape(None)
    known_count = constant_value(count)
    if tail.is_fully_defined() and known_count is not None:
        values_shape = rules.ints(list(known_count) + tail.as_list())
    else:
        rest = apply_op("StridedSlice", dense_shape, [1], [0], [1], end_mask=1)
        values_shape = apply_op("ConcatV2", [count, rest], 0)
    return IndexedSlices(apply_op("Reshape", grad, values_shape), apply_op("Reshape", indices, count), dense_shape)


def _gather_axis_gradient(params, indices, grad, axis: int, batch_dims: int, out_shape: TensorShape) -> Tensor:
    """GatherV2's gradient for axis > 0 with the ranks known (dims may be unknown).

    grad has shape P[:a] + I[b:] + P[a+1:] (a = axis, b = batch_dims). Its index dims are
    flattened to one (N), moved to position b, the batch dims folded into the row index
    (row = batch * P[a] + index), rows summed by UnsortedSegmentSum, and everything moved back.
    """
    a, b = axis, batch_dims
    rank = params.shape.rank
    p = _Dims(params)
    g = _Dims(grad, grad.shape.merge_with(out_shape))
    k = indices.shape.rank - b                       # index dims after the batch dims
    outer, inner = p.range(0, a), p.range(a + 1, rank)
    count = _product(g.range(a, a + k))              # N
    values = grad if k == 1 else apply_op("Reshape", grad, _vector(outer + [count] + inner))
    to_front = list(range(b)) + [a] + list(range(b, a)) + list(range(a + 1, rank))
    if a != b:
        values = apply_op("Transpose", values, rules.ints(to_front))
    rows = p[a]
    index_dtype = indices.dtype.base_dtype
    if index_dtype not in (dtypes.int32, dtypes.int64):
        indices, index_dtype = apply_op("Cast", indices, DstT=dtypes.int32), dtypes.int32
    batch = p.range(0, b)
    middle = p.range(b, a) + inner                   # the dims after the row dim, once moved
    if b:
        batches = _product(batch)
        ordinals = apply_op("Range", _cast_scalar(0, index_dtype), _cast_scalar(batches, index_dtype),
                            _cast_scalar(1, index_dtype))
        offsets = ordinals * _cast_scalar(rows, index_dtype)
        offsets = apply_op("Reshape", offsets, _vector(batch + [1] * k))
        indices = indices + offsets
        values = apply_op("Reshape", values, _vector([_product([batches, count])] + middle))
        segments = _product([batches, rows])
    else:
        segments = rows
    flat = indices if indices.shape.rank == 1 else apply_op("Reshape", indices, rules.ints([-1]))
    summed = apply_op("UnsortedSegmentSum", values, flat, segments)
    if b:
        summed = apply_op("Reshape", summed, _vector(batch + [rows] + middle))
    if a != b:
        summed = apply_op("Transpose", summed, rules.ints(list(np.argsort(to_front))))
    return summed


def _cast_scalar(value, dtype):
    if not isinstance(value, Tensor):
        return rules.ints(value, dtype)
    return value if value.dtype.base_dtype is dtype else apply_op("Cast", value, DstT=dtype)


def _gather_axis_gradient_dynamic(params, indices, grad, axis_tensor, batch_dims: int) -> Tensor:
    """The same as _gather_axis_gradient when the axis or a rank is only known at run time:
    every shape, permutation and count is computed in the graph."""
    b = batch_dims
    if axis_tensor.dtype.base_dtype is not dtypes.int32:
        axis_tensor = apply_op("Cast", axis_tensor, DstT=dtypes.int32)
    index_dtype = indices.dtype.base_dtype
    if index_dtype not in (dtypes.int32, dtypes.int64):
        indices, index_dtype = apply_op("Cast", indices, DstT=dtypes.int32), dtypes.int32
    params_shape = apply_op("Shape", params)
    rank = apply_op("Rank", params)
    a = apply_op("FloorMod", axis_tensor, rank)
    a1 = a + rules.ints(1)
    a_vec, a1_vec = apply_op("Reshape", a, rules.ints([1])), apply_op("Reshape", a1, rules.ints([1]))
    k = apply_op("Rank", indices) - rules.ints(b)

    def piece(begin, end, **masks):
        return apply_op("StridedSlice", params_shape, begin, end, rules.ints([1]), **masks)
    outer, inner = piece(rules.ints([0]), a_vec, begin_mask=1), piece(a1_vec, rules.ints([0]), end_mask=1)
    rows = apply_op("Reshape", piece(a_vec, a1_vec), rules.ints([]))
    index_dims = apply_op("StridedSlice", apply_op("Shape", grad), a_vec,
                          a_vec + apply_op("Reshape", k, rules.ints([1])), rules.ints([1]))
    count = apply_op("Prod", index_dims, rules.ints([0]), keep_dims=True)
    values = apply_op("Reshape", grad, apply_op("ConcatV2", [outer, count, inner], 0))

    def span(start, stop):
        return apply_op("Range", start, stop, 1)
    to_front = apply_op("ConcatV2", [span(0, b), a_vec, span(b, a), span(a1, rank)], 0)
    values = apply_op("Transpose", values, to_front)
    middle = apply_op("StridedSlice", apply_op("Shape", values), rules.ints([b + 1]), rules.ints([0]), rules.ints([1]),
                      end_mask=1)
    if b:
        batch = piece(rules.ints([0]), rules.ints([b]))
        batches = apply_op("Prod", batch, rules.ints([0]))
        segments = batches * rows
        batch_index = apply_op("Range", rules.ints(0, index_dtype), apply_op("Cast", batches, DstT=index_dtype),
                               rules.ints(1, index_dtype))
        offsets = batch_index * apply_op("Cast", rows, DstT=index_dtype)
        ones = apply_op("Fill", apply_op("Reshape", k, rules.ints([1])), rules.ints(1))
        offsets = apply_op("Reshape", offsets, apply_op("ConcatV2", [batch, ones], 0))
        indices = indices + offsets
        flat_rows = apply_op("ExpandDims", apply_op("Size", indices), 0)
        values = apply_op("Reshape", values, apply_op("ConcatV2", [flat_rows, middle], 0))
    else:
        segments = rows
    summed = apply_op("UnsortedSegmentSum", values, apply_op("Reshape", indices, rules.ints([-1])), segments)
    if b:
        summed = apply_op("Reshape", summed, apply_op("ConcatV2", [batch, apply_op("Reshape", rows, rules.ints([1])),
                                                                     middle], 0))
    back = apply_op("ConcatV2", [span(0, b), span(b + 1, a1), rules.ints([b]), span(a1, rank)], 0)
    return apply_op("Transpose", summed, back)


def _index_shape(t: Tensor, indices: Tensor) -> Tensor:
    """Shape(t) in the dtype of ``indices`` (what ScatterNd takes with them)."""
    return rules.shape_vector(t, indices.known_dtype.base_dtype)


@family.gradient("GatherNd")
def _gather_nd_grad(op, grad):
    params, indices = op.inputs
    grad = as_dense(grad)
    shape = _index_shape(params, indices)
    policy = op.get_attr("bad_indices_policy")
    if indices.shape.rank == 2 and indices.shape.dims[-1] == 1 and policy != b"IGNORE":
        return IndexedSlices(grad, apply_op("Squeeze", indices, squeeze_dims=[-1]), shape), None
    return apply_op("ScatterNd", indices, grad, shape, bad_indices_policy=policy), None


def _gathered(grad: Tensor, op, indices: Tensor) -> Tensor:
    """The gradient of the updates of a scatter: grad at the indices (rows dropped by the
    IGNORE policy get zeros, as they had no effect)."""
    if indices.known_dtype.base_dtype is dtypes.uint16:   # GatherNd has no uint16 indices
        indices = apply_op("Cast", indices, DstT=dtypes.int32)
    return apply_op("GatherNd", grad, indices, bad_indices_policy=op.get_attr("bad_indices_policy"))


@family.gradient("ScatterNd")
def _scatter_nd_grad(op, grad):
    return None, _gathered(as_dense(grad), op, op.inputs[0]), None


@family.gradient("TensorScatterUpdate")
def _tensor_scatter_update_grad(op, grad):
    """The overwritten elements of the tensor get no gradient; of the updates, those that land
    get theirs. Where indices repeat, only the last update of a row lands (TensorFlow's CPU
    kernel); TensorFlow's rule gives the others the row's gradient too, gradreg's gives them
    zeros (see _landed_updates)."""
    _, indices, updates = op.inputs
    grad = as_dense(grad)
    policy = op.get_attr("bad_indices_policy")
    dtensor = apply_op("TensorScatterUpdate", grad, indices, apply_op("ZerosLike", updates), bad_indices_policy=policy)
    picks = _landed_updates(op)
    if picks is None:
        return dtensor, None, _gathered(grad, op, indices)
    return dtensor, None, apply_op("GatherNd", grad, picks, bad_indices_policy=b"IGNORE")


def _landed_updates(op) -> Tensor | None:
    """TensorScatterUpdate's indices with overwritten updates sent to -1 (see landed_indices)."""
    tensor, indices, _ = op.inputs
    policy = op.get_attr("bad_indices_policy")
    if constant_value(indices) is not None:
        return landed_indices(indices, None, policy)
    index_dtype = dtypes.int64 if indices.known_dtype.base_dtype is dtypes.int64 else dtypes.int32
    depth = apply_op("StridedSlice", apply_op("Shape", indices, out_type=index_dtype), [-1], [0], [1], end_mask=1)
    prefix = apply_op("StridedSlice", apply_op("Shape", tensor, out_type=index_dtype), rules.ints([0], index_dtype),
                      depth, rules.ints([1], index_dtype))
    return landed_indices(indices, prefix, policy)


@family.gradient("TensorScatterAdd", "ScatterNdNonAliasingAdd")
def _tensor_scatter_add_grad(op, grad):
    grad = as_dense(grad)
    return grad, None, _gathered(grad, op, op.inputs[1])


@family.gradient("TensorScatterSub")
def _tensor_scatter_sub_grad(op, grad):
    grad = as_dense(grad)
    return grad, None, -_gathered(grad, op, op.inputs[1])


@family.gradient("TensorScatterMax", "TensorScatterMin")
def _tensor_scatter_extreme_grad(op, grad):
    """Shared equally among the tensor's element and the updates equal to the result (as
    TensorFlow does at ties)."""
    x, indices, updates = op.inputs
    out = op.outputs[0]
    grad = as_dense(grad)
    policy = op.get_attr("bad_indices_policy")
    dtype = grad.dtype.base_dtype
    from_x = apply_op("Cast", apply_op("Equal", x, out), DstT=dtype)
    from_updates = apply_op("Cast", apply_op("Equal", updates, _gathered(out, op, indices)), DstT=dtype)
    shares = from_x + apply_op("ScatterNd", indices, from_updates, _index_shape(x, indices), bad_indices_policy=policy)
    per_share = grad / shares
    return per_share * from_x, None, _gathered(per_share, op, indices) * from_updates


@family.gradient("TensorStridedSliceUpdate")
def _tensor_strided_slice_update_grad(op, grad):
    """The input's gradient outside the slice; the slice's, summed to the value's shape (the
    value is broadcast to the slice)."""
    _, begin, end, strides, value = op.inputs
    grad = as_dense(grad)
    dvalue = apply_op("StridedSlice", grad, begin, end, strides, **_masks(op))
    dx = apply_op("TensorStridedSliceUpdate", grad, begin, end, strides, apply_op("ZerosLike", dvalue), **_masks(op))
    return dx, None, None, None, _summed_to(dvalue, value, dvalue.shape)


# -- reversing, diagonals, bands ----------------------------------------------------------------

@family.gradient("ReverseV2")
def _reverse_grad(op, grad):
    return apply_op("ReverseV2", as_dense(grad), op.inputs[1]), None


@family.gradient("MatrixDiag")
def _matrix_diag_grad(op, grad):
    return apply_op("MatrixDiagPart", as_dense(grad))


@family.gradient("MatrixDiagPart")
def _matrix_diag_part_grad(op, grad):
    """The diagonal back on a zero matrix: MatrixDiag makes the leading k x k block (k = min of
    the matrix dims); Pad completes a non-square matrix with zero rows or columns."""
    x = op.inputs[0]
    block = apply_op("MatrixDiag", as_dense(grad))
    dims = x.shape.dims
    if dims is not None and dims[-2] is not None and dims[-1] is not None:
        if dims[-2] == dims[-1]:
            return block
        k = min(dims[-2], dims[-1])
        paddings = rules.ints([[0, 0]] * (len(dims) - 2) + [[0, dims[-2] - k], [0, dims[-1] - k]])
        return apply_op("Pad", block, paddings)
    shape = apply_op("Shape", x)
    matrix = apply_op("StridedSlice", shape, [-2], [0], [1], end_mask=1)
    extra = matrix - apply_op("Min", matrix, rules.ints(0), keep_dims=True)
    leading = apply_op("Fill", apply_op("Pack", [apply_op("Rank", x) - rules.ints(2), rules.ints(2)]),
                       rules.ints(0))
    tail = apply_op("Pack", [apply_op("ZerosLike", extra), extra], axis=1)
    return apply_op("Pad", block, apply_op("ConcatV2", [leading, tail], 0))


@family.gradient("MatrixBandPart")
def _matrix_band_part_grad(op, grad):
    return apply_op("MatrixBandPart", as_dense(grad), op.inputs[1], op.inputs[2]), None, None
