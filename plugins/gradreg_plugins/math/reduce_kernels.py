"""NumPy kernels of the math family's reductions, arg-reductions, scans and segment ops."""
from __future__ import annotations

import numpy as np

from gradreg import kernel_support as ks
from gradreg.model import dtypes
from gradreg.model.shape_inference import constant_value
from gradreg.registry.kernels import ShapeMemo
from gradreg_plugins.math import numerics as nm
from gradreg_plugins.math.kernels import is_int, kernel


def reduction_axes(axes, rank: int) -> tuple[int, ...]:
    """The reduction_indices input as normalized axes; ValueError (TensorFlow's wording) for an
    axis out of range or named twice."""
    out: list[int] = []
    for a in np.asarray(axes).reshape(-1).tolist():
        if not -rank <= a < rank:
            raise ValueError(f"Invalid reduction dimension {a} for input with {rank} dimensions")
        a %= rank
        if a in out:
            raise ValueError(f"Invalid reduction arguments: Axes contains duplicate dimension: {a}")
        out.append(a)
    return tuple(out)


def _accumulator(dtype: np.dtype) -> np.dtype:
    """float16 sums accumulate in float32 (as TensorFlow's reducers), other types in themselves."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _sum(x, axes, keep):
    return np.sum(x, axis=axes, keepdims=keep, dtype=_accumulator(x.dtype)).astype(x.dtype, copy=False)


def _count(x, axes) -> int:
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


def _mean(x, axes, keep):
    n = _count(x, axes)
    if x.dtype.kind in "iu":
        # A wide accumulator, then division rounding toward zero (0 for an empty reduction).
        wide = np.uint64 if x.dtype.kind == "u" else np.int64
        total = np.sum(x, axis=axes, keepdims=keep, dtype=wide)
        if n == 0:
            return np.zeros_like(total, dtype=x.dtype)
        q = total // wide(n)
        if x.dtype.kind == "i":
            q = q + ((total % n != 0) & (total < 0)).astype(wide)
        return q.astype(x.dtype)
    total = np.sum(x, axis=axes, keepdims=keep, dtype=_accumulator(x.dtype))
    return (total / total.dtype.type(n)).astype(x.dtype, copy=False)   # 0/0 is NaN, as TensorFlow


def _prod(x, axes, keep):
    return np.prod(x, axis=axes, keepdims=keep, dtype=x.dtype)


def _lowest(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype: np.dtype):
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


def _max(x, axes, keep):
    # NaN propagates; an empty reduction gives -inf (lowest integer), as TensorFlow.
    return np.max(x, axis=axes, keepdims=keep, initial=_lowest(x.dtype))


def _min(x, axes, keep):
    return np.min(x, axis=axes, keepdims=keep, initial=_highest(x.dtype))


def _all(x, axes, keep):
    return np.all(x, axis=axes, keepdims=keep)


def _any(x, axes, keep):
    return np.any(x, axis=axes, keepdims=keep)


def _euclidean_norm(x, axes, keep):
    if x.dtype.kind == "c":
        return np.sqrt(np.sum(x * np.conj(x), axis=axes, keepdims=keep))
    if x.dtype.kind in "iu":
        squares = np.sum(x * x, axis=axes, keepdims=keep, dtype=x.dtype)
        return nm.float_to_int(np.sqrt(squares.astype(np.float64)), x.dtype)
    squares = np.sum(np.square(x.astype(_accumulator(x.dtype))), axis=axes, keepdims=keep)
    return np.sqrt(squares).astype(x.dtype, copy=False)


# OpenBLAS's gemv is threaded from m*n >= 2304 * GEMM_MULTITHREAD_THRESHOLD (4) elements on.
GEMV_THREADED = 9216
# A sum gets a second BLAS thread from twice this many elements on (4 MB of float32). Once
# woken for a product, OpenBLAS's threads spin on the other core for a while, where gradreg's
# own kernels split their work (a CNN step): below this a sum gains less from the thread than
# the step loses (bench/foreign_cnn.py, three processes a contender: slim ResNet in float64
# 16.50 -> 15.68 ms, slim DenseNet 26.79 -> 25.47 ms from 4608 elements a thread before; the
# MLP step, whose products keep those threads busy anyway, 6.35 / 6.51 ms and 5.51 / 5.40 ms).
SUM_ELEMENTS_PER_THREAD = 1 << 19


def _outer_sum(axes: tuple[int, ...], rank: int, keep: bool):
    """For a sum over the leading or the trailing axes (a layer's per-channel sums, the
    gradient of a bias): the product with a vector of ones, which BLAS makes 5-20x faster
    than np.add.reduce over leading axes. None for other axes."""
    k = len(axes)
    if not 0 < k < rank:
        return None
    leading = tuple(sorted(axes)) == tuple(range(k))
    if not leading and tuple(sorted(axes)) != tuple(range(rank - k, rank)):
        return None
    # Per input shape and dtype: the matrix's shape, the vector of ones, the result's shape.
    known = ShapeMemo(16)

    def setup(x) -> tuple[tuple[int, int], np.ndarray, tuple[int, ...]]:
        n = 1
        for a in axes:
            n *= x.shape[a]
        kept = tuple((1 if keep else None) if i in axes else d for i, d in enumerate(x.shape))
        return ((n, x.size // n) if leading else (x.size // n, n), np.ones(n, x.dtype),
                tuple(d for d in kept if d is not None))

    def outer(x):
        matrix, vector, result = known.get((x.shape, x.dtype), lambda: setup(x))
        # OpenBLAS runs a product with a vector on all its threads from GEMV_THREADED
        # elements on; there gradreg's threads take its parts instead, BLAS on one thread in
        # each (ks.product: OpenBLAS's threads spin long after a call), and nothing is set
        # below it (setting BLAS's thread count costs 10-30 us, more than a small sum).
        if x.size >= GEMV_THREADED:
            threads = ks.threads_for(x.size, SUM_ELEMENTS_PER_THREAD)
            total = ks.product(vector, x.reshape(matrix), threads) if leading else \
                ks.product(x.reshape(matrix), vector, threads)
        else:
            total = np.dot(vector, x.reshape(matrix)) if leading else np.dot(x.reshape(matrix), vector)
        return total.reshape(result)
    return outer


def _reduction(op_type: str, fn) -> None:
    @kernel(op_type)
    def factory(op, ctx):
        keep = bool(op.get_attr("keep_dims"))
        static_axes = constant_value(op.inputs[1])
        rank = op.inputs[0].shape.rank
        if static_axes is not None and rank is not None:
            # Axes known when the plan is compiled: normalize them once.
            axes = reduction_axes(static_axes, rank)
            if op_type == "Sum":
                outer = _outer_sum(axes, rank, keep)

                def summed(x, _axes):
                    if x.ndim != rank:
                        return fn(x, reduction_axes(static_axes, x.ndim), keep)
                    if x.dtype == np.float16:
                        return fn(x, axes, keep)
                    if outer is not None and x.dtype.kind == "f" and x.size and x.flags.c_contiguous:
                        return outer(x)
                    return np.add.reduce(x, axis=axes, keepdims=keep, dtype=x.dtype)
                return summed
            return lambda x, _axes: fn(x, axes if x.ndim == rank else reduction_axes(static_axes, x.ndim), keep)

        def compute(x, axes):
            return fn(x, reduction_axes(axes, np.ndim(x)), keep)
        return compute


for _op_type, _fn in {"Sum": _sum, "Mean": _mean, "Prod": _prod, "Max": _max, "Min": _min,
                      "All": _all, "Any": _any, "EuclideanNorm": _euclidean_norm}.items():
    _reduction(_op_type, _fn)


def scalar_axis(axis, rank: int, what: str = "axis") -> int:
    values = np.asarray(axis).reshape(-1)
    if values.size != 1:
        raise ValueError(f"{what} must be a scalar, got shape {list(np.shape(axis))}")
    a = int(values[0])
    if not -rank <= a < rank:
        raise ValueError(f"Expected {what} in the range [{-rank}, {rank}), but got {a}")
    return a % rank


def _arg_reduction(op_type: str, pick, nan_becomes: float) -> None:
    @kernel(op_type)
    def factory(op, ctx):
        out_type = op.get_attr("output_type").storage

        def compute(x, dimension):
            axis = scalar_axis(dimension, np.ndim(x), "dimension")
            if x.shape[axis] == 0:
                raise ValueError(f"Reduction axis {axis} is empty in shape {list(x.shape)}")
            if x.dtype.kind == "f":
                # TensorFlow's comparisons never pick a NaN; ties keep the first index.
                x = np.where(np.isnan(x), nan_becomes, x)
            return np.asarray(pick(x, axis=axis)).astype(out_type)
        return compute


_arg_reduction("ArgMax", np.argmax, -np.inf)
_arg_reduction("ArgMin", np.argmin, np.inf)


# -- scans ---------------------------------------------------------------------------------------

def _scan(op_type: str, accumulate, identity: int) -> None:
    @kernel(op_type)
    def factory(op, ctx):
        exclusive, reverse = bool(op.get_attr("exclusive")), bool(op.get_attr("reverse"))

        def compute(x, axis):
            if np.ndim(axis) != 0:
                raise ValueError(f"axis must be a scalar, got shape {list(np.shape(axis))}")
            a = scalar_axis(axis, np.ndim(x))
            if reverse:
                x = np.flip(x, a)
            out = accumulate(x, axis=a, dtype=x.dtype)
            if exclusive and out.shape[a]:   # (an empty axis stays empty)
                head = np.full_like(np.take(out, [0], axis=a), identity)
                out = np.concatenate([head, np.take(out, np.arange(out.shape[a] - 1), axis=a)], axis=a)
            return np.flip(out, a) if reverse else out
        return compute


_scan("Cumsum", np.cumsum, 0)
_scan("Cumprod", np.cumprod, 1)


# -- segments ---------------------------------------------------------------------------------------

def _fill_values(dtype) -> dict:
    """Each unsorted segment reduction's value for an empty segment: TensorFlow's
    numeric_limits lowest()/max() (finite, not infinities) for max and min."""
    storage = dtype.storage
    if dtype is dtypes.bfloat16:
        low, high = -nm.BFLOAT16_MAX, nm.BFLOAT16_MAX
    elif storage.kind == "f":
        low, high = np.finfo(storage).min, np.finfo(storage).max
    elif storage.kind in "iu":
        low, high = np.iinfo(storage).min, np.iinfo(storage).max
    else:
        return {"UnsortedSegmentSum": 0, "UnsortedSegmentProd": 1, "UnsortedSegmentMax": None,
                "UnsortedSegmentMin": None}
    return {"UnsortedSegmentSum": 0, "UnsortedSegmentProd": 1, "UnsortedSegmentMax": low,
            "UnsortedSegmentMin": high}


def _unsorted_segment(op_type: str, ufunc) -> None:
    @kernel(op_type)
    def factory(op, ctx):
        dtype = op.get_attr("T")
        fill = _fill_values(dtype)[op_type]

        def compute(data, segment_ids, num_segments):
            if np.ndim(num_segments) != 0:
                raise ValueError(f"num_segments must be a scalar, got shape {list(np.shape(num_segments))}")
            n = int(num_segments)
            if n < 0:
                raise ValueError(f"num_segments must be non-negative, got {n}")
            ids_shape = np.shape(segment_ids)
            if np.shape(data)[:len(ids_shape)] != ids_shape:
                raise ValueError(f"data.shape = {list(np.shape(data))} does not start with "
                                 f"segment_ids.shape = {list(ids_shape)}")
            inner = np.shape(data)[len(ids_shape):]
            ctx.check_shape((n,) + inner, op)
            ids = np.asarray(segment_ids).reshape(-1)
            too_big = np.flatnonzero(ids >= n)
            if too_big.size:
                i = int(too_big[0])
                raise ValueError(f"segment_ids[{i}] = {ids[i]} is out of range [0, {n})")
            keep = ids >= 0   # negative ids are dropped
            rows = np.reshape(data, (ids.size,) + inner)[keep]
            out = np.full((n,) + inner, fill, dtype=data.dtype)
            ufunc.at(out, ids[keep], rows)
            return out
        return compute


_unsorted_segment("UnsortedSegmentSum", np.add)
_unsorted_segment("UnsortedSegmentProd", np.multiply)
_unsorted_segment("UnsortedSegmentMax", np.maximum)
_unsorted_segment("UnsortedSegmentMin", np.minimum)


def _sorted_segments(data, segment_ids, ctx, op):
    """(ids, number of segments) for the sorted segment ops, checked as TensorFlow does."""
    ids = np.asarray(segment_ids)
    if ids.ndim != 1 or np.ndim(data) == 0 or ids.shape[0] != np.shape(data)[0]:
        raise ValueError(f"segment_ids should be a vector of the size of data's first dimension; "
                         f"data shape {list(np.shape(data))}, segment_ids shape {list(ids.shape)}")
    if ids.size == 0:
        n = 0
    else:
        if np.any(np.diff(ids) < 0):
            raise ValueError("segment ids are not increasing")
        if ids[0] < 0:
            raise ValueError(f"Segment id {ids[0]} out of range [0, {ids[-1] + 1}), possibly because "
                             f"'segment_ids' input is not sorted.")
        n = int(ids[-1]) + 1
    ctx.check_shape((n,) + np.shape(data)[1:], op)
    return ids, n


def _segment_totals(data, segment_ids, ctx, op):
    """Per segment, the sum of its rows of ``data``; and the checked ids and segment count."""
    ids, n = _sorted_segments(data, segment_ids, ctx, op)
    total = np.zeros((n,) + data.shape[1:], dtype=data.dtype)
    np.add.at(total, ids, data)
    return total, ids, n


@kernel("SegmentSum")
def _segment_sum(op, ctx):
    return lambda data, segment_ids: _segment_totals(data, segment_ids, ctx, op)[0]


@kernel("SegmentMean")
def _segment_mean(op, ctx):
    def compute(data, segment_ids):
        total, ids, n = _segment_totals(data, segment_ids, ctx, op)
        counts = np.bincount(ids, minlength=n).reshape((n,) + (1,) * (data.ndim - 1))
        divisor = np.maximum(counts, 1).astype(data.dtype)   # an empty segment's sum is 0 and stays 0
        if is_int(dtypes.as_dtype(data.dtype)):
            q = total // divisor
            if data.dtype.kind == "i":
                q = q + ((total % divisor != 0) & (total < 0)).astype(data.dtype)
            return q
        return total / divisor
    return compute
