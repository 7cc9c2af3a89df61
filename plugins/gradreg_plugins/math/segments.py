"""Sorted segment max, min and product, and the sparse segment reductions: definitions, NumPy
kernels, shape functions and gradient rules (SegmentSum, SegmentMean and the UnsortedSegment*
ops are in ops.py, reduce_kernels.py and grads.py).

* SegmentMax / SegmentMin / SegmentProd reduce runs of rows with equal, sorted ids; a segment
  with no rows (a gap in the ids) is 0 (1 for the product), as TensorFlow's CPU kernels make it.
  Their rules are TensorFlow's: max/min share a segment's gradient equally among the rows equal
  to its extreme; the product's rule divides by the row, with the one-zero and many-zeros cases
  apart.
* SparseSegmentSum / Mean / SqrtN (and WithNumSegments) reduce rows of data picked by
  ``indices`` into sorted segments: output[s] = sum over i with segment_ids[i] = s of
  data[indices[i]], divided by the segment's count (Mean) or its square root (SqrtN). Their
  gradient scatters the output's gradient back to the picked rows, weighted the same way: the
  SparseSegment*Grad ops TensorFlow's rules emit (dense), or the *GradV2 ops (IndexedSlices
  over the distinct picked rows) when ``sparse_gradient`` is set.
* The *Grad ops are linear in their gradient input, and their adjoint is the forward reduction
  again (with as many segments as the gradient has rows), so gradreg differentiates them too
  (TensorFlow registers no rule): second derivatives through an embedding lookup work. That
  adjoint needs the segment ids sorted, as the forward ops' are.
"""
from __future__ import annotations

import numpy as np

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op, as_dense
from gradreg.model import dtypes
from gradreg.model.graph import Tensor
from gradreg.model.indexed_slices import IndexedSlices
from gradreg.model.shapes import TensorShape
from gradreg_plugins.math import family
from gradreg_plugins.math.ops import sorted_segment_shape

_REAL = "{float32, float64, int32, uint8, int16, int8, int64, bfloat16, uint16, float16, uint32, uint64}"
_NUMBER = ("{float32, float64, int32, uint8, int16, int8, complex64, int64, qint8, quint8, qint32, bfloat16, "
           "qint16, quint16, uint16, complex128, float16, uint32, uint64}")
_FLOAT = "{bfloat16, float16, float32, float64}"
_IDS = "{int32, int64}"


# -- sorted segments: SegmentMax, SegmentMin, SegmentProd ------------------------------------------------

def sorted_segment_ids(data: np.ndarray, segment_ids, op, ctx) -> tuple[np.ndarray, int]:
    """The checked ids of a sorted segment reduction and its number of segments."""
    ids = np.asarray(segment_ids).astype(np.int64)
    if ids.ndim != 1 or np.ndim(data) == 0 or ids.shape[0] != np.shape(data)[0]:
        raise ValueError(f"segment_ids should be the same size as dimension 0 of input; data shape "
                         f"{list(np.shape(data))}, segment_ids shape {list(ids.shape)}")
    if ids.size and np.any(ids[1:] < ids[:-1]):
        raise ValueError("segment ids are not increasing")
    if ids.size and ids[0] < 0:
        raise ValueError(f"segment ids must be >= 0, got {ids[0]}")
    n = int(ids[-1]) + 1 if ids.size else 0
    ctx.check_shape((n,) + np.shape(data)[1:], op)
    return ids, n


def _sorted_reduction(ufunc, empty):
    def factory(op, ctx):
        def compute(data, segment_ids):
            ids, n = sorted_segment_ids(data, segment_ids, op, ctx)
            out = np.full((n,) + data.shape[1:], empty, dtype=data.dtype)
            if ids.size:
                starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
                out[ids[starts]] = ufunc.reduceat(data, starts, axis=0)
            return out
        return compute
    return factory


for _name, _api, _types, _ufunc, _empty in (("SegmentMax", "segment_max", _REAL, np.maximum, 0),
                                            ("SegmentMin", "segment_min", _REAL, np.minimum, 0),
                                            ("SegmentProd", "segment_prod", _NUMBER, np.multiply, 1)):
    family.op(_name, inputs=["data: T", "segment_ids: Tindices"], outputs=["output: T"],
              attrs=[f"T: {_types}", f"Tindices: {_IDS}"], shape=sorted_segment_shape, api=_api)
    family.kernel(_name)(_sorted_reduction(_ufunc, _empty))


def _gather_rows(params: Tensor, ids: Tensor) -> Tensor:
    return apply_op("GatherV2", params, ids, rules.ints(0))


@family.gradient("SegmentMax", "SegmentMin")
def _segment_extreme_grad(op, grad):
    """A segment's gradient shared equally by its rows equal to the segment's extreme."""
    data, ids = op.inputs
    grad = as_dense(grad)
    selected = apply_op("Equal", data, _gather_rows(op.outputs[0], ids))
    count = apply_op("SegmentSum", apply_op("Cast", selected, DstT=grad.dtype.base_dtype), ids)
    shared = _gather_rows(grad / count, ids)
    return apply_op("SelectV2", selected, shared, apply_op("ZerosLike", data)), None


@family.gradient("SegmentProd")
def _segment_prod_grad(op, grad):
    """The product of the segment's other rows: prod / x without zeros; with one zero in the
    segment, the product of its non-zero rows for the zero and 0 for the others; with several
    zeros, 0 everywhere."""
    data, ids = op.inputs
    grad = as_dense(grad)
    is_zero = apply_op("Equal", data, apply_op("ZerosLike", data))
    zeros = apply_op("SegmentSum", apply_op("Cast", is_zero, DstT=dtypes.int32), ids)
    grad = apply_op("SelectV2", apply_op("Greater", zeros, rules.ints(1)), apply_op("ZerosLike", grad), grad)
    non_zero = apply_op("SelectV2", is_zero, apply_op("OnesLike", data), data)
    non_zero_prod = _gather_rows(apply_op("SegmentProd", non_zero, ids), ids)
    partial = apply_op("SelectV2", is_zero, non_zero_prod, _gather_rows(op.outputs[0], ids) / non_zero)
    return _gather_rows(grad, ids) * partial, None


# -- sparse segments ---------------------------------------------------------------------------------------

def _sparse_segment_shape(ctx):
    data, indices, ids = ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2)
    for name, s in (("indices", indices), ("segment_ids", ids)):
        if s.rank not in (None, 1):
            raise ctx.error(f"{name} must be a vector, got shape {s}")
    if not indices.is_compatible_with(ids):
        raise ctx.error(f"indices {indices} and segment_ids {ids} must have the same length")
    if data.rank == 0:
        raise ctx.error("data must have rank >= 1")
    if ctx.num_inputs == 4:
        if ctx.input_shape(3).rank not in (None, 0):
            raise ctx.error(f"num_segments must be a scalar, got shape {ctx.input_shape(3)}")
        value = ctx.input_value(3)
        segments = None if value is None else int(value)
    else:
        value = ctx.input_value(2)
        segments = None if value is None else (int(np.asarray(value)[-1]) + 1 if np.size(value) else 0)
    if data.rank is None:
        return TensorShape(None)
    return TensorShape([segments]).concatenate(data[1:])


def _segment_weights(ids: np.ndarray, n: int, norm: str | None, dtype) -> np.ndarray | None:
    """Per segment, what its sum is multiplied by: 1/count (mean), 1/sqrt(count) (sqrtn)."""
    if norm is None:
        return None
    counts = np.maximum(np.bincount(ids, minlength=n)[:n], 1).astype(np.float64)
    return (1.0 / (counts if norm == "mean" else np.sqrt(counts))).astype(dtype)


def _sparse_segment_kernel(norm: str | None, with_num_segments: bool):
    def factory(op, ctx):
        def compute(data, indices, segment_ids, *num_segments):
            picks = np.asarray(indices).astype(np.int64)
            ids = np.asarray(segment_ids).astype(np.int64)
            if picks.ndim != 1 or ids.shape != picks.shape:
                raise ValueError(f"indices and segment_ids should be vectors of the same length, got shapes "
                                 f"{list(picks.shape)} and {list(ids.shape)}")
            if np.ndim(data) == 0:
                raise ValueError("data must be at least 1-D")
            if ids.size and np.any(ids[1:] < ids[:-1]):
                raise ValueError("segment ids are not increasing")
            if ids.size and ids[0] < 0:
                raise ValueError(f"segment ids must be >= 0, got {ids[0]}")
            if with_num_segments:
                n = int(np.asarray(num_segments[0]))
                if ids.size and ids[-1] >= n:
                    raise ValueError("segment ids must be < num_segments")
            else:
                n = int(ids[-1]) + 1 if ids.size else 0
            bad = np.flatnonzero((picks < 0) | (picks >= data.shape[0]))
            if bad.size:
                raise ValueError(f"Bad: indices[{bad[0]}] == {picks[bad[0]]} out of range [0, {data.shape[0]})")
            out = np.zeros(ctx.check_shape((n,) + data.shape[1:], op), dtype=data.dtype)
            np.add.at(out, ids, data[picks])
            weights = _segment_weights(ids, n, norm, data.dtype)
            if weights is not None:
                out *= weights.reshape((n,) + (1,) * (data.ndim - 1))
            return out
        return compute
    return factory


_SPARSE = {"SparseSegmentSum": (None, _REAL), "SparseSegmentMean": ("mean", _FLOAT),
           "SparseSegmentSqrtN": ("sqrtn", _FLOAT)}
for _name, (_norm, _types) in _SPARSE.items():
    _common = [f"T: {_types}", f"Tidx: {_IDS} = int32"]
    family.op(_name, inputs=["data: T", "indices: Tidx", "segment_ids: Tsegmentids"], outputs=["output: T"],
              attrs=_common + [f"Tsegmentids: {_IDS} = int32", "sparse_gradient: bool = false"],
              shape=_sparse_segment_shape)
    family.kernel(_name)(_sparse_segment_kernel(_norm, with_num_segments=False))
    family.op(_name + "WithNumSegments", inputs=["data: T", "indices: Tidx", "segment_ids: Tsegmentids",
                                                 "num_segments: Tnumsegments"], outputs=["output: T"],
              attrs=_common + [f"Tnumsegments: {_IDS} = int32", f"Tsegmentids: {_IDS} = int32",
                               "sparse_gradient: bool = false"], shape=_sparse_segment_shape)
    family.kernel(_name + "WithNumSegments")(_sparse_segment_kernel(_norm, with_num_segments=True))


def _first_dim(t: Tensor) -> Tensor:
    """The first dim of ``t`` as an int32 scalar: a Const when static."""
    dims = t.shape.as_list() if t.shape.rank else None
    if dims is not None and dims[0] is not None:
        return rules.ints(dims[0], dtypes.int32)
    return apply_op("StridedSlice", apply_op("Shape", t), [0], [1], [1], shrink_axis_mask=1)


def _sparse_segment_grad(op, grad):
    """The gradient scattered back to the picked rows of data, weighted as the segment was:
    SparseSegment*Grad (dense), or SparseSegment*GradV2 (IndexedSlices) with sparse_gradient."""
    data, indices, ids = op.inputs[:3]
    base = op.type.replace("WithNumSegments", "")
    grad = as_dense(grad)
    rest = [None] * (len(op.inputs) - 1)
    if op.get_attr("sparse_gradient"):
        values, unique = apply_op(base + "GradV2", grad, indices, ids, _first_dim(data))
        return [IndexedSlices(values, unique, rules.shape_vector(data))] + rest
    return [apply_op(base + "Grad", grad, indices, ids, _first_dim(data))] + rest


for _name in _SPARSE:
    family.gradient(_name, _name + "WithNumSegments")(_sparse_segment_grad)


# -- the gradient ops: SparseSegment*Grad and *GradV2 ------------------------------------------------------

def _grad_op_shape(ctx):
    grad, indices, ids = ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2)
    if not indices.is_compatible_with(ids) or indices.rank not in (None, 1):
        raise ctx.error(f"indices {indices} and segment_ids {ids} must be vectors of the same length")
    rows = ctx.input_value(3)
    rows = None if rows is None else int(rows)
    if grad.rank is None:
        return TensorShape(None)
    return TensorShape([rows]).concatenate(grad[1:])


def _grad_v2_shape(ctx):
    values = _grad_op_shape(ctx)
    rows = TensorShape([None])
    return [rows.concatenate(values[1:]) if values.rank is not None else values, rows]


def _scattered_back(grad, indices, segment_ids, norm):
    """(picked rows, their weighted gradients): grad[segment_ids[i]] times segment_ids[i]'s weight."""
    picks = np.asarray(indices).astype(np.int64)
    ids = np.asarray(segment_ids).astype(np.int64)
    if picks.ndim != 1 or ids.shape != picks.shape:
        raise ValueError(f"indices and segment_ids should be vectors of the same length, got shapes "
                         f"{list(picks.shape)} and {list(ids.shape)}")
    n = grad.shape[0]
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        raise ValueError("Invalid number of segments")
    rows = grad[ids]
    weights = _segment_weights(ids, n, norm, grad.dtype)
    if weights is not None:
        rows = rows * weights[ids].reshape((-1,) + (1,) * (grad.ndim - 1))
    return picks, rows


def _grad_kernel(norm: str | None):
    def factory(op, ctx):
        def compute(grad, indices, segment_ids, output_dim0):
            picks, rows = _scattered_back(grad, indices, segment_ids, norm)
            dim0 = int(np.asarray(output_dim0))
            bad = np.flatnonzero((picks < 0) | (picks >= dim0))
            if bad.size:
                raise ValueError(f"Index {picks[bad[0]]} out of range [0, {dim0})")
            out = np.zeros(ctx.check_shape((dim0,) + grad.shape[1:], op), dtype=grad.dtype)
            np.add.at(out, picks, rows)
            return out
        return compute
    return factory


def _grad_v2_kernel(norm: str | None):
    def factory(op, ctx):
        index_dtype = op.get_attr("Tidx").storage

        def compute(grad, indices, segment_ids, dense_output_dim0):
            picks, rows = _scattered_back(grad, indices, segment_ids, norm)
            dim0 = int(np.asarray(dense_output_dim0))
            bad = np.flatnonzero((picks < 0) | (picks >= dim0))
            if bad.size:
                raise ValueError(f"Index {picks[bad[0]]} out of range [0, {dim0})")
            unique, position = np.unique(picks, return_inverse=True)
            out = np.zeros((unique.size,) + grad.shape[1:], dtype=grad.dtype)
            np.add.at(out, position.reshape(-1), rows)
            return out, unique.astype(index_dtype)
        return compute
    return factory


_GRAD_ATTRS = [f"T: {_FLOAT}", f"Tidx: {_IDS} = int32", f"Tsegmentids: {_IDS} = int32"]
for _name, (_norm, _) in _SPARSE.items():
    family.op(_name + "Grad", inputs=["grad: T", "indices: Tidx", "segment_ids: Tsegmentids", "output_dim0: int32"],
              outputs=["output: T"], attrs=_GRAD_ATTRS, shape=_grad_op_shape)
    family.kernel(_name + "Grad")(_grad_kernel(_norm))
    family.op(_name + "GradV2", inputs=["grad: T", "indices: Tidx", "segment_ids: Tsegmentids",
                                        "dense_output_dim0: int32"],
              outputs=["output: T", "sorted_unique_indices: Tidx"], attrs=_GRAD_ATTRS, shape=_grad_v2_shape)
    family.kernel(_name + "GradV2")(_grad_v2_kernel(_norm))


@family.gradient("SparseSegmentSumGrad", "SparseSegmentMeanGrad", "SparseSegmentSqrtNGrad")
def _sparse_segment_grad_grad(op, grad):
    """The adjoint of scattering back: the forward reduction, one segment per row of the
    gradient input."""
    g, indices, ids, _ = op.inputs
    forward = op.type[:-len("Grad")] + "WithNumSegments"
    return apply_op(forward, as_dense(grad), indices, ids, _first_dim(g)), None, None, None


@family.gradient("SparseSegmentSumGradV2", "SparseSegmentMeanGradV2", "SparseSegmentSqrtNGradV2")
def _sparse_segment_grad_v2_grad(op, grad, _unique_grad):
    """As for *Grad: the rows the op wrote (one per sorted unique index) put back in place in a
    dense_output_dim0-row tensor, then the forward reduction over the original indices."""
    g, indices, ids, dim0 = op.inputs
    unique = apply_op("ExpandDims", op.outputs[1], rules.ints(-1))
    row_shape = apply_op("StridedSlice", apply_op("Shape", grad, out_type=unique.known_dtype.base_dtype),
                         [1], [0], [1], end_mask=1)
    dense_shape = apply_op("ConcatV2", [apply_op("Cast", apply_op("Reshape", dim0, rules.ints([1])),
                                                 DstT=unique.known_dtype.base_dtype), row_shape], rules.ints(0))
    dense = apply_op("ScatterNd", unique, as_dense(grad), dense_shape)
    forward = op.type[:-len("GradV2")] + "WithNumSegments"
    return apply_op(forward, dense, indices, ids, _first_dim(g)), None, None, None
