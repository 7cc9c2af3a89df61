"""One-dimensional resampling weights, TensorFlow's, and their separable application.

Every resize TensorFlow differentiates is separable: output row y mixes a few input rows with
weights that depend only on y (and the sizes and attrs), and the same holds for columns. A
:class:`Taps` holds such a 1-D map as ``index[o, k]`` / ``weight[o, k]`` (output position o reads
input ``index[o, k]`` with ``weight[o, k]``); a resize is ``rows`` applied along the height and
``cols`` along the width, its gradient the transposed maps. The weights are computed in float32
with TensorFlow's formulas (its scale and coordinate arithmetic, its clamping, the bicubic
coefficient table), so positions and weights match TensorFlow's kernels; the sums are NumPy's.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gradreg_plugins._lazy import LazyModule

if TYPE_CHECKING:
    import scipy.sparse

scipy_sparse = LazyModule("scipy.sparse")   # imported when a resampling matrix is first built

F32 = np.float32
_TINY = F32(1000) * np.finfo(np.float32).tiny   # below it, TensorFlow leaves weights unnormalized


@dataclass(frozen=True)
class Taps:
    """A linear map from ``in_size`` input positions to ``len(index)`` output positions."""
    index: np.ndarray    # (out, k) int64, within [0, in_size)
    weight: np.ndarray   # (out, k) float32
    in_size: int

    @property
    def out_size(self) -> int:
        return int(self.index.shape[0])

    @functools.cached_property
    def matrix(self) -> scipy.sparse.csr_matrix:
        """The (out, in) matrix; taps hitting the same input position add up."""
        rows = np.repeat(np.arange(self.out_size), self.index.shape[1])
        return scipy_sparse.csr_matrix((self.weight.ravel(), (rows, self.index.ravel())),
                                       shape=(self.out_size, self.in_size))


def _along(matrix, x: np.ndarray, axis: int, dtype) -> np.ndarray:
    """``matrix`` applied to axis ``axis`` of ``x`` (a sparse matrix product, in ``dtype``)."""
    moved = np.moveaxis(x, axis, 0)
    flat = np.ascontiguousarray(moved, dtype=dtype).reshape(moved.shape[0], -1)
    out = (matrix.astype(dtype) @ flat).reshape((matrix.shape[0],) + moved.shape[1:])
    return np.moveaxis(out, 0, axis)


def resample(images: np.ndarray, rows: Taps, cols: Taps, dtype) -> np.ndarray:
    """NHWC ``images`` resampled to (rows.out_size, cols.out_size), computed in ``dtype``."""
    return _along(cols.matrix, _along(rows.matrix, images, 1, dtype), 2, dtype)


def resample_adjoint(grads: np.ndarray, rows: Taps, cols: Taps, dtype) -> np.ndarray:
    """The transpose of :func:`resample`: NHWC gradients of the resized image summed back onto
    the (rows.in_size, cols.in_size) input positions they came from."""
    return _along(cols.matrix.T.tocsr(), _along(rows.matrix.T.tocsr(), grads, 1, dtype), 2, dtype)


# -- TensorFlow's coordinate arithmetic (tensorflow/core/util/image_resizer_state.h) ---------------

def resize_scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    """The float32 input step per output step."""
    if align_corners and out_size > 1:
        return F32(in_size - 1) / F32(out_size - 1)
    return F32(in_size) / F32(out_size)


def _positions(out_size: int, scale: np.float32, half_pixel: bool, shift: bool = True) -> np.ndarray:
    """Input coordinates of the output positions: i * scale, or (i + 0.5) * scale - 0.5 with
    half-pixel centers (without the -0.5 when ``shift`` is False: nearest neighbour floors it)."""
    i = np.arange(out_size, dtype=F32)
    if not half_pixel:
        return i * scale
    centers = (i + F32(0.5)) * scale
    return centers - F32(0.5) if shift else centers


def bilinear(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> Taps:
    """Two taps per output: floor and ceil of the coordinate (clamped), weighted by the distance."""
    scale = resize_scale(in_size, out_size, align_corners)
    x = _positions(out_size, scale, half_pixel)
    lower_f = np.floor(x)
    lower = np.maximum(lower_f.astype(np.int64), 0)
    upper = np.minimum(np.ceil(x).astype(np.int64), in_size - 1)
    lerp = x - lower_f
    return Taps(np.stack([lower, upper], 1), np.stack([F32(1) - lerp, lerp], 1), in_size)


def nearest(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> Taps:
    """One tap: the coordinate floored (rounded half away from zero with align_corners), clamped."""
    scale = resize_scale(in_size, out_size, align_corners)
    x = _positions(out_size, scale, half_pixel, shift=False)
    picked = np.floor(x + F32(0.5)) if align_corners else np.floor(x)   # x >= 0: roundf is floor(x + 0.5)
    index = np.minimum(picked.astype(np.int64), in_size - 1)
    if half_pixel:
        index = np.maximum(index, 0)
    return Taps(index[:, None], np.ones((out_size, 1), F32), in_size)


_TABLE_SIZE = 1024


@functools.cache
def _cubic_table(a: float) -> np.ndarray:
    """Keys' cubic convolution weights sampled at 1025 offsets, as TensorFlow tabulates them:
    column 0 for distances t in [0, 1], column 1 for 1 + t."""
    t = (np.arange(_TABLE_SIZE + 1) / _TABLE_SIZE).astype(F32).astype(np.float64)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far_t = (t + 1.0).astype(F32).astype(np.float64)
    far = ((a * far_t - 5 * a) * far_t + 8 * a) * far_t - 4 * a
    return np.stack([near, far], 1).astype(F32)


def bicubic(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> Taps:
    """Four taps around the coordinate with tabulated cubic weights (a = -0.75). With half-pixel
    centers TensorFlow uses Keys' a = -0.5 and drops taps outside the image, renormalizing."""
    scale = resize_scale(in_size, out_size, align_corners)
    x = _positions(out_size, scale, half_pixel)
    base_f = np.floor(x)
    base = base_f.astype(np.int64)
    offset = np.rint((x - base_f) * F32(_TABLE_SIZE)).astype(np.int64)
    table = _cubic_table(-0.5 if half_pixel else -0.75)
    weight = np.stack([table[offset, 1], table[offset, 0], table[_TABLE_SIZE - offset, 0],
                       table[_TABLE_SIZE - offset, 1]], 1)
    wanted = base[:, None] + np.arange(-1, 3)
    index = np.clip(wanted, 0, in_size - 1)
    if half_pixel:
        weight = np.where(index == wanted, weight, F32(0))
        weight = _normalized(weight)
    return Taps(index, weight, in_size)


def _normalized(weight: np.ndarray, tiny_rows: float = 1.0) -> np.ndarray:
    """Rows divided by their sums (float32, TensorFlow's reciprocal-multiply); a row whose sum
    is tiny is multiplied by ``tiny_rows`` instead (bicubic keeps it, ScaleAndTranslate zeroes it)."""
    total = weight.sum(axis=1, dtype=F32)
    ok = np.abs(total) >= _TINY
    inverse = np.where(ok, F32(1) / np.where(ok, total, F32(1)), F32(tiny_rows))
    return weight * inverse[:, None]


def area(in_size: int, out_size: int, align_corners: bool) -> Taps:
    """Every input cell overlapping the output cell [y, y + 1) * scale, weighted by the overlap
    and divided by the scale (ResizeArea's box average)."""
    scale = resize_scale(in_size, out_size, align_corners)
    y = np.arange(out_size, dtype=F32)
    start_f, end_f = y * scale, (y + F32(1)) * scale
    start = np.floor(start_f).astype(np.int64)
    end = np.ceil(end_f).astype(np.int64)
    width = int((end - start).max(initial=1))
    cell = start[:, None] + np.arange(width)
    cell_f = cell.astype(F32)
    overlap = np.where(cell_f < start_f[:, None],
                       np.where(cell_f + 1 > end_f[:, None], scale, cell_f + 1 - start_f[:, None]),
                       np.where(cell_f + 1 > end_f[:, None], end_f[:, None] - cell_f, F32(1)))
    weight = np.where(cell < end[:, None], overlap, F32(0)).astype(F32) / scale
    return Taps(np.clip(cell, 0, in_size - 1), weight.astype(F32), in_size)


# -- ScaleAndTranslate's sampling kernels (tensorflow/core/kernels/image/sampling_kernels.h) -------

def _lanczos(radius: float):
    def kernel(x):
        x = np.abs(x)
        pix = F32(math.pi) * x
        with np.errstate(divide="ignore", invalid="ignore"):
            value = F32(radius) * np.sin(pix) * np.sin(pix / F32(radius)) / (pix * pix)
        return np.where(x > radius, F32(0), np.where(x <= F32(1e-3), F32(1), value)).astype(F32)
    return kernel, radius


def _gaussian(x):
    x = np.abs(x)
    sigma = F32(1.5 / 3.0)
    return np.where(x >= F32(1.5), F32(0), np.exp(-x * x / (F32(2) * sigma * sigma))).astype(F32)


def _box(x):
    x = np.abs(x)
    return np.where(x < F32(0.5), F32(1), np.where(x == F32(0.5), F32(0.5), F32(0))).astype(F32)


def _triangle(x):
    x = np.abs(x)
    return np.where(x < F32(1), F32(1) - x, F32(0)).astype(F32)


def _keys_cubic(x):
    x = np.abs(x)
    far = ((F32(-0.5) * x + F32(2.5)) * x - F32(4)) * x + F32(2)
    near = (F32(1.5) * x - F32(2.5)) * x * x + F32(1)
    return np.where(x >= F32(2), F32(0), np.where(x >= F32(1), far, near)).astype(F32)


def _mitchell_cubic(x):
    x = np.abs(x)
    far = ((F32(-7.0 / 18.0) * x + F32(2)) * x - F32(10.0 / 3.0)) * x + F32(16.0 / 9.0)
    near = (F32(7.0 / 6.0) * x - F32(2)) * x * x + F32(8.0 / 9.0)
    return np.where(x >= F32(2), F32(0), np.where(x >= F32(1), far, near)).astype(F32)


SAMPLING_KERNELS = {
    "lanczos1": _lanczos(1.0), "lanczos3": _lanczos(3.0), "lanczos5": _lanczos(5.0),
    "gaussian": (_gaussian, 1.5), "box": (_box, 1.0), "triangle": (_triangle, 1.0),
    "keyscubic": (_keys_cubic, 2.0), "mitchellcubic": (_mitchell_cubic, 2.0),
}


def scale_and_translate(in_size: int, out_size: int, scale: float, translation: float, kernel_type: str,
                        antialias: bool) -> Taps:
    """ScaleAndTranslate's spans: output pixel x samples the input at (x + 0.5 - translation) /
    scale with the kernel (widened by 1 / scale when antialiasing a downscale), over the input
    pixels within its radius, weights normalized to sum 1; no taps where the sample falls
    outside the input."""
    kernel, radius = SAMPLING_KERNELS[kernel_type]
    inv_scale = F32(1.0 / float(F32(scale)))
    inv_translate = -inv_scale * F32(translation)
    kernel_scale = max(inv_scale, F32(1)) if antialias else F32(1)
    reach = F32(radius) * kernel_scale
    span = min(2 * int(math.ceil(reach)) + 1, in_size)
    sample = (np.arange(out_size, dtype=F32) + F32(0.5)) * inv_scale + inv_translate
    start = np.clip(np.ceil(sample - reach - F32(0.5)).astype(np.int64), 0, in_size - 1)
    end = np.clip(np.floor(sample + reach - F32(0.5)).astype(np.int64), 0, in_size - 1) + 1
    source = start[:, None] + np.arange(span)
    inside = (source < end[:, None]) & ((sample >= 0) & (sample <= in_size))[:, None]
    position = (source.astype(F32) + F32(0.5) - sample[:, None]) * (F32(1) / kernel_scale)
    weight = np.where(inside, kernel(position), F32(0)).astype(F32)
    return Taps(np.minimum(source, in_size - 1), _normalized(weight, tiny_rows=0.0), in_size)
