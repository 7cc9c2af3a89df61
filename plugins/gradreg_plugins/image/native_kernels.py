"""The image family's resize loops as native kernels (gradreg.native): numba_kernels' loops
(_LOOPS) written again for the tracer and compiled by LLVM, which takes tens of milliseconds
with the GIL released where numba holds the GIL for half a second a loop.

:func:`loop` returns ``rows``, ``cols``, ``rows_adjoint`` or ``cols_adjoint`` for images of one
dtype (float32 or float64), taking the same arguments as numba's, ``(images, index, weight,
out)``: 4-D NHWC images, the taps' int64 ``index`` and ``weight`` (of the images' dtype) tables,
the 4-D ``out`` the taps are added into, all C-contiguous. Each tap's products are added in
the same order as numba's, so the results are its bits. Each loop is built, and compiled, on
its first request only.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from gradreg.native import Array, Kernel, Unsupported, available, compile_loop

__all__ = ["Unsupported", "available", "loop"]

Loop = Callable[..., None]


def _params(k: Kernel, dtype: np.dtype) -> tuple[Array, Array, Array, Array]:
    return k.array(dtype, 4), k.array(np.int64, 2), k.array(dtype, 2), k.array(dtype, 4)


def _rows(k: Kernel, dtype: np.dtype) -> None:
    # out[b, y] += sum over taps i of weight[y, i] images[b, index[y, i]]  (whole image rows)
    images, index, weight, out = _params(k, dtype)
    for b in k.range(images.shape[0]):
        for y in k.range(index.shape[0]):
            target = out.sub(b, y)
            for i in k.range(index.shape[1]):
                source = images.sub(b, index[y, i])
                w = weight[y, i]
                for x in k.range(target.shape[0]):
                    for c in k.range(target.shape[1]):
                        target[x, c] = target[x, c] + w * source[x, c]


def _cols(k: Kernel, dtype: np.dtype) -> None:
    # out[b, y, x] += sum over taps j of weight[x, j] images[b, y, index[x, j]]
    images, index, weight, out = _params(k, dtype)
    for b in k.range(images.shape[0]):
        for y in k.range(images.shape[1]):
            row = images.sub(b, y)
            target_row = out.sub(b, y)
            for x in k.range(index.shape[0]):
                target = target_row.sub(x)
                for j in k.range(index.shape[1]):
                    source = row.sub(index[x, j])
                    w = weight[x, j]
                    for c in k.range(target.shape[0]):
                        target[c] = target[c] + w * source[c]


def _rows_adjoint(k: Kernel, dtype: np.dtype) -> None:
    grads, index, weight, out = _params(k, dtype)
    for b in k.range(grads.shape[0]):
        for y in k.range(index.shape[0]):
            source = grads.sub(b, y)
            for i in k.range(index.shape[1]):
                target = out.sub(b, index[y, i])
                w = weight[y, i]
                for x in k.range(source.shape[0]):
                    for c in k.range(source.shape[1]):
                        target[x, c] = target[x, c] + w * source[x, c]


def _cols_adjoint(k: Kernel, dtype: np.dtype) -> None:
    grads, index, weight, out = _params(k, dtype)
    for b in k.range(grads.shape[0]):
        for y in k.range(grads.shape[1]):
            row = grads.sub(b, y)
            target_row = out.sub(b, y)
            for x in k.range(index.shape[0]):
                source = row.sub(x)
                for j in k.range(index.shape[1]):
                    target = target_row.sub(index[x, j])
                    w = weight[x, j]
                    for c in k.range(source.shape[0]):
                        target[c] = target[c] + w * source[c]


_LOOPS: dict[str, Callable[[Kernel, np.dtype], None]] = {
    "rows": _rows, "cols": _cols, "rows_adjoint": _rows_adjoint, "cols_adjoint": _cols_adjoint}


def loop(dtype: Any, name: str) -> Loop:
    """numba_kernels' resize loop ``name`` of _LOOPS for images of ``dtype``, compiled now."""
    return _loop(np.dtype(dtype), name)


@functools.cache
def _loop(dtype: np.dtype, name: str) -> Loop:
    return compile_loop(f"resize_{name}", dtype, _LOOPS[name])
