"""StridedSlice index arithmetic, shared by the kernels and the static shape function.

Follows tensorflow/core/util/strided_slice_op.cc step by step: the *sparse* spec (one entry
per element of begin/end/strides, some of them an ellipsis or a new axis) becomes a *dense*
spec (one entry per input dimension); canonical bounds per dimension give the processing
shape (what the slice selects) and the final shape (with shrunk axes dropped and new axes
inserted). Dimensions and begin/end may be unknown (None) for static shape inference.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gradreg.model.shape_inference import constant_value

_NEW_AXIS = -1
_SHRINK_AXIS = -2


@dataclass
class Masks:
    begin: int = 0
    end: int = 0
    ellipsis: int = 0
    new_axis: int = 0
    shrink_axis: int = 0

    @classmethod
    def of(cls, op) -> Masks:
        return cls(op.get_attr("begin_mask"), op.get_attr("end_mask"), op.get_attr("ellipsis_mask"),
                   op.get_attr("new_axis_mask"), op.get_attr("shrink_axis_mask"))


@dataclass
class SliceSpec:
    """The resolved slice: canonical begin/end/stride per input dimension (None where unknown),
    the processing shape and the final shape (None for unknown dims)."""
    begin: list
    end: list
    strides: list
    processing_shape: list
    final_shape: list

    def numpy_index(self) -> tuple:
        """A basic-indexing tuple selecting the processing shape (all values known)."""
        index = []
        for b, e, s, n in zip(self.begin, self.end, self.strides, self.processing_shape):
            # An empty range must not be written as slice(-1, ...): NumPy reads -1 as the last element.
            index.append(slice(0, 0) if n == 0 else slice(b, e if e >= 0 else None, s))
        return tuple(index)


def reads_one_row(op) -> bool:
    """Whether a StridedSlice node, or a StridedSliceGrad (the same attrs, begin at input 1 and
    strides at input 3), reads one index of the first axis, ``x[t]``: shrink_axis_mask 1 and no
    other mask, constant strides [1], a begin of one element (TensorFlow ignores end for a
    shrunk axis). The kernel indexes such a slice directly; loop gradients and loop hoists
    treat it as row t."""
    strides = constant_value(op.inputs[3])
    # (a begin of unknown rank has one element too: begin, end and strides are equally long)
    return (Masks.of(op) == Masks(shrink_axis=1) and strides is not None and np.ravel(strides).tolist() == [1]
            and op.inputs[1].shape.dims in (None, (1,)))


def _bit(mask: int, i: int) -> bool:
    return bool((mask >> i) & 1)


def resolve(dims: Sequence[int | None], begin: Sequence[int] | None, end: Sequence[int] | None,
            strides: Sequence[int], masks: Masks) -> SliceSpec:
    """Resolve a strided slice of an input with ``dims``. ``begin``/``end`` None mean unknown
    values. Raises ValueError/IndexError with TensorFlow's messages for invalid specs."""
    n = len(strides)
    if (begin is not None and len(begin) != n) or (end is not None and len(end) != n):
        raise ValueError("Expected begin, end, and strides to be 1D equal size tensors, but got shapes "
                         f"[{len(begin) if begin is not None else '?'}], "
                         f"[{len(end) if end is not None else '?'}], and [{n}] instead.")
    ellipsis = masks.ellipsis
    if ellipsis & (ellipsis - 1):
        raise ValueError("Multiple ellipses in slice spec not allowed")
    dense = _dense_spec(len(dims), begin, end, strides, masks)
    return _canonicalize(dims, dense, begin is not None and end is not None)


@dataclass
class _Dense:
    begin: list
    end: list
    strides: list
    begin_mask: int
    end_mask: int
    shrink_mask: int
    final_gather: list


def _dense_spec(rank: int, begin, end, strides, masks: Masks) -> _Dense:
    """Expand the ellipsis (an implicit one at the end if none) into full ranges and drop the new
    axes, giving one entry per input dimension (TensorFlow's BuildDenseSpec)."""
    sparse_dims = len(strides)
    ellipsis_mask = masks.ellipsis
    new_axes_after_ellipsis = 0
    seen = False
    for i in range(sparse_dims):
        if seen and _bit(masks.new_axis, i):
            new_axes_after_ellipsis += 1
        if _bit(ellipsis_mask, i):
            seen = True
    if not seen:
        ellipsis_mask |= 1 << sparse_dims
        sparse_dims += 1
    d = _Dense([0] * rank, [0] * rank, [1] * rank, 0, 0, 0, [])
    full = 0
    for i in range(sparse_dims):
        if _bit(ellipsis_mask, i):
            stop = min(rank - (sparse_dims - i) + 1 + new_axes_after_ellipsis, rank)
            while full < stop:
                d.begin_mask |= 1 << full
                d.end_mask |= 1 << full
                d.final_gather.append(full)
                full += 1
        elif _bit(masks.new_axis, i):
            d.final_gather.append(_NEW_AXIS)
        else:
            _dense_dim(d, full, rank, i, begin, end, strides, masks)
            full += 1
    return d


def _dense_dim(d: _Dense, full: int, rank: int, i: int, begin, end, strides, masks: Masks) -> None:
    """Sparse entry ``i`` (neither the ellipsis nor a new axis) as dense dimension ``full``."""
    if full == rank:
        if rank == 0:
            raise ValueError("Attempting to slice scalar input.")
        raise IndexError(f"Index out of range using input dim {full}; input has only {rank} dims")
    d.begin[full] = None if begin is None else int(begin[i])
    d.end[full] = None if end is None else int(end[i])
    d.strides[full] = int(strides[i])
    if _bit(masks.begin, i):
        d.begin_mask |= 1 << full
    if _bit(masks.end, i):
        d.end_mask |= 1 << full
    if _bit(masks.shrink_axis, i):
        d.final_gather.append(_SHRINK_AXIS)
        d.shrink_mask |= 1 << full
    else:
        d.final_gather.append(full)


def _canonicalize(dims, d: _Dense, bounds_known: bool) -> SliceSpec:
    """Clamp bounds into range per dimension and compute the processing and final shapes
    (TensorFlow's ValidateStridedSliceOp steps 3 and 4)."""
    begin, end, strides, processing = list(d.begin), list(d.end), list(d.strides), []
    for i, dim in enumerate(dims):
        stride = strides[i]
        if stride == 0:
            raise ValueError(f"strides[{i}] must be non-zero")
        shrink = _bit(d.shrink_mask, i)
        if dim is None:
            processing.append(1 if shrink else None)
            continue
        if shrink and stride <= 0:
            raise ValueError("only stride 1 allowed on non-range indexing.")
        masked = (_bit(d.begin_mask, i), _bit(d.end_mask, i))
        length = None
        if bounds_known:
            begin[i], end[i] = _clamped_bounds(begin[i], end[i], i, dim, stride, shrink, masked)
            length = end[i] - begin[i]
        elif shrink:
            length = 1
        elif masked[0] and masked[1]:
            length = -dim if stride < 0 else dim
        processing.append(_slice_length(length, stride))
    final = []
    for g in d.final_gather:
        if g >= 0:
            final.append(processing[g])
        elif g == _NEW_AXIS:
            final.append(1)
    return SliceSpec(begin, end, strides, processing, final)


def _clamped_bounds(begin: int, end: int, i: int, dim: int, stride: int, shrink: bool,
                    masked: tuple) -> tuple[int, int]:
    if shrink:
        index = begin + dim if begin < 0 else begin
        if index < 0 or index >= dim:
            raise IndexError(f"slice index {index} of dimension {i} out of bounds.")
        return index, index + 1
    return _clamp(begin, 0, masked, stride, dim), _clamp(end, 1, masked, stride, dim)


def _slice_length(length: int | None, stride: int) -> int | None:
    """Elements a (begin, end) range of ``length`` selects with ``stride`` (None: unknown)."""
    if length is None:
        return None
    if length == 0 or (length < 0) != (stride < 0):
        return 0
    return -(-abs(length) // abs(stride))


def _clamp(x: int, which: int, masked: tuple, stride: int, dim: int) -> int:
    """TensorFlow's canonical(): a masked bound is the full range's end; else a negative index
    counts from the end and the result is clamped into [0, dim] (stride > 0) or [-1, dim - 1]."""
    lo, hi = (0, dim) if stride > 0 else (-1, dim - 1)
    if masked[which]:
        if stride > 0:
            return (lo, hi)[which]
        return (hi, lo)[which]
    x = dim + x if x < 0 else x
    return lo if x < lo else hi if x > hi else x


def basic_index(shape: Sequence[int], begin: Sequence[int], end: Sequence[int], strides: Sequence[int],
                masks: Masks) -> tuple | None:
    """The slice as a NumPy basic-indexing tuple whose result is the final shape, for specs
    without an ellipsis or new axes and with one entry per leading dimension at most (most
    slices: ``x[t]``, ``x[:, 1:-1]``): NumPy's clamping of ranges is TensorFlow's canonical
    bounds. None for anything else (:func:`resolve` then does it step by step). Raises what
    :func:`resolve` raises for bad specs."""
    n = len(strides)
    if masks.ellipsis or masks.new_axis or n > len(shape) or len(begin) != n or len(end) != n:
        return None
    index: list[int | slice] = []
    for i in range(n):
        stride = strides[i]
        if stride == 0:
            raise ValueError(f"strides[{i}] must be non-zero")
        if (masks.shrink_axis >> i) & 1:
            if stride < 0:
                raise ValueError("only stride 1 allowed on non-range indexing.")
            dim, b = shape[i], begin[i]
            at = b + dim if b < 0 else b
            if at < 0 or at >= dim:
                raise IndexError(f"slice index {at} of dimension {i} out of bounds.")
            index.append(at)
        else:
            index.append(slice(None if (masks.begin >> i) & 1 else begin[i],
                               None if (masks.end >> i) & 1 else end[i], stride))
    return tuple(index)
