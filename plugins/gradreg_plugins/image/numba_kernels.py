"""Numba kernels of the image family's resizes (imported only when the numba backend is first used).

A resize is two 1-D tap tables (gradreg_plugins.image.sampling): the compiled loops make one
pass along the rows and one along the columns, mixing whole channel vectors with each tap's
weight (the adjoint loops add each gradient back onto the pixels it came from), where the
NumPy kernels make two sparse matrix products with transposes around them. Measured with
bench/image_ops.py (8 x 64 x 64 x 64 float32 images to 128 x 128, medians, ms, NumPy -> numba):
bilinear 16 -> 11 and its gradient 26 -> 10, bicubic 18 -> 14 and 28 -> 11, nearest-neighbour
gradient 20 -> 8, area 14 -> 9 (TensorFlow, threaded: 3, 9, 3, 14). The nearest-neighbour
forward is one NumPy gather already as fast. Validation, taps and dtypes are the NumPy kernels'.
Every loop is built as a native kernel (image/native_kernels: the same loop, compiled by LLVM
in tens of milliseconds with the GIL released) where native kernels are available, and by
numba otherwise.
"""
from __future__ import annotations

import functools

import numpy as np

from gradreg.kernel_support import compile_module, native_loop, numba_available, writable
from gradreg_plugins.image import family, kernels, sampling

try:    # the native loops import llvmlite, which may be missing where numba is
    from gradreg_plugins.image import native_kernels
except ImportError:
    native_kernels = None  # type: ignore[assignment]

_LOOPS = """
@njit(cache=True, nogil=True)
def rows(images, index, weight, out):
    # out[b, y] = sum over taps i of weight[y, i] images[b, index[y, i]]  (whole image rows)
    for b in range(images.shape[0]):
        for y in range(index.shape[0]):
            target = out[b, y]
            for i in range(index.shape[1]):
                source = images[b, index[y, i]]
                w = weight[y, i]
                for x in range(target.shape[0]):
                    for c in range(target.shape[1]):
                        target[x, c] += w * source[x, c]


@njit(cache=True, nogil=True)
def cols(images, index, weight, out):
    # out[b, y, x] = sum over taps j of weight[x, j] images[b, y, index[x, j]]
    for b in range(images.shape[0]):
        for y in range(images.shape[1]):
            row = images[b, y]
            target_row = out[b, y]
            for x in range(index.shape[0]):
                target = target_row[x]
                for j in range(index.shape[1]):
                    source = row[index[x, j]]
                    w = weight[x, j]
                    for c in range(target.shape[0]):
                        target[c] += w * source[c]


@njit(cache=True, nogil=True)
def rows_adjoint(grads, index, weight, out):
    for b in range(grads.shape[0]):
        for y in range(index.shape[0]):
            source = grads[b, y]
            for i in range(index.shape[1]):
                target = out[b, index[y, i]]
                w = weight[y, i]
                for x in range(source.shape[0]):
                    for c in range(source.shape[1]):
                        target[x, c] += w * source[x, c]


@njit(cache=True, nogil=True)
def cols_adjoint(grads, index, weight, out):
    for b in range(grads.shape[0]):
        for y in range(grads.shape[1]):
            row = grads[b, y]
            target_row = out[b, y]
            for x in range(index.shape[0]):
                source = row[x]
                for j in range(index.shape[1]):
                    target = target_row[index[x, j]]
                    w = weight[x, j]
                    for c in range(source.shape[0]):
                        target[c] += w * source[c]
"""


@functools.cache
def _loops(dtype: type):
    return compile_module(_LOOPS, dtype)


def _native(builder: str, *args):
    """The loop native_kernels' ``builder`` builds for ``args``, compiled now; None where it
    cannot (numba's runs then: kernel_support.native_loop)."""
    return native_loop(getattr(native_kernels, builder, None), *args)


def _loop(dtype: type, name: str):
    """The loop ``name`` of _LOOPS for images of ``dtype``: native (compiled now), else numba's
    (compiled on its first call)."""
    loop = _native("loop", dtype, name)
    return loop if loop is not None else getattr(_loops(dtype), name)


def _apply(values: np.ndarray, rows: sampling.Taps, cols: sampling.Taps, work: type, adjoint: bool) -> np.ndarray:
    """The numba version of sampling.resample (or its adjoint), computed in ``work``: one pass
    along the rows and one along the columns, as the NumPy kernels (fewer taps than mixing
    both at once)."""
    n, _, _, channels = values.shape
    values = writable(np.ascontiguousarray(values, dtype=work))    # a Const image is read-only
    row_table: tuple[np.ndarray, np.ndarray] = (writable(np.ascontiguousarray(rows.index)), rows.weight.astype(work))
    col_table: tuple[np.ndarray, np.ndarray] = (writable(np.ascontiguousarray(cols.index)), cols.weight.astype(work))
    middle: np.ndarray
    out: np.ndarray
    if adjoint:
        middle = np.zeros((n, rows.out_size, cols.in_size, channels), work)
        out = np.zeros((n, rows.in_size, cols.in_size, channels), work)
        if values.size and out.size:
            _loop(work, "cols_adjoint")(values, *col_table, middle)
            _loop(work, "rows_adjoint")(middle, *row_table, out)
        return out
    middle = np.zeros((n, rows.out_size, cols.in_size, channels), work)
    out = np.zeros((n, rows.out_size, cols.out_size, channels), work)
    if values.size and out.size:
        _loop(work, "rows")(values, *row_table, middle)
        _loop(work, "cols")(middle, *col_table, out)
    return out


def _resize(op, ctx):
    if not numba_available() or op.type == "ResizeNearestNeighbor":
        return None      # nearest neighbour forward is one gather: NumPy's fancy indexing
    align, half = kernels.resize_flags(op)
    out_dtype = kernels.storage(op)

    def resize(images, size):
        kernels.check_input_image(images)
        out_hw = kernels.read_size(size)
        ctx.check_elements(images.shape[0] * out_hw[0] * out_hw[1] * images.shape[3], op)
        rows, cols = kernels.resize_taps(op.type, images.shape[1:3], out_hw, align, half)
        return _apply(images, rows, cols, np.float32, adjoint=False).astype(out_dtype, copy=False)
    return resize


for _name in ("ResizeBilinear", "ResizeBicubic", "ResizeArea", "ResizeNearestNeighbor"):
    family.kernel(_name, backend="numba")(_resize)


def _resize_grad(op, ctx):
    # float32 / float64 gradients only: half types and integers keep their NumPy kernels.
    if not numba_available() or op.outputs[0].dtype.base_dtype.name not in ("float32", "float64"):
        return None
    align, half = kernels.resize_flags(op)
    out_dtype = kernels.storage(op)
    work = kernels.compute_dtype(out_dtype)
    numpy_kernel = kernels.resize_grad_kernel(op, ctx)

    def resize_grad(grads, original_or_size):
        if op.type == "ResizeNearestNeighborGrad":
            kernels.check_image(grads)
            in_hw = kernels.read_size(original_or_size)
        else:
            kernels.check_image(grads, "input_grad")
            kernels.check_image(original_or_size, "original_image")
            in_hw = original_or_size.shape[1:3]
        if 0 in grads.shape[1:3] or 0 in in_hw:
            return numpy_kernel(grads, original_or_size)     # its checks and messages
        ctx.check_elements(grads.shape[0] * in_hw[0] * in_hw[1] * grads.shape[3], op)
        rows, cols = kernels.resize_taps(kernels.GRAD_OF[op.type], in_hw, grads.shape[1:3], align, half)
        return _apply(grads, rows, cols, work, adjoint=True).astype(out_dtype, copy=False)
    return resize_grad


for _name in ("ResizeBilinearGrad", "ResizeBicubicGrad", "ResizeNearestNeighborGrad"):
    family.kernel(_name, backend="numba")(_resize_grad)
