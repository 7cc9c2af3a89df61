"""General matrix products that accumulate into an existing matrix, c = alpha * op(a) op(b) + c,
through the CBLAS interface of the BLAS NumPy itself loaded (OpenBLAS in NumPy's wheels).

NumPy's products always write a new array. An SGD update of a layer's weights by their
gradient's product (``w -= lr * x^T dy``) then makes the gradient, reads it back and reads and
writes the weights again; BLAS's gemm does it in one pass with beta = 1 (784x512 weights:
724 vs 808 us). :func:`gemm` is that call, found by ctypes in the library threadpoolctl
reports as NumPy's BLAS; :func:`available` says whether it was found (not for BLAS builds
without a CBLAS interface named as OpenBLAS names it).
"""
from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


@functools.cache
def _gemm_functions() -> dict[np.dtype, Any]:
    """NumPy's BLAS's cblas_sgemm and cblas_dgemm by element type ({} if it has none)."""
    from threadpoolctl import ThreadpoolController  # imported when an update first needs it
    for lc in ThreadpoolController().lib_controllers:
        if lc.user_api != "blas" or lc.internal_api != "openblas":
            continue
        for prefix in ("scipy_", ""):
            for suffix, integer in (("64_", ctypes.c_int64), ("_64", ctypes.c_int64), ("", ctypes.c_int)):
                functions = {}
                for letter, dtype, real in (("s", np.float32, ctypes.c_float), ("d", np.float64, ctypes.c_double)):
                    fn = getattr(lc.dynlib, f"{prefix}cblas_{letter}gemm{suffix}", None)
                    if fn is None:
                        break
                    fn.restype = None
                    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer, integer, real,
                                   ctypes.c_void_p, integer, ctypes.c_void_p, integer, real, ctypes.c_void_p,
                                   integer]
                    functions[np.dtype(dtype)] = fn
                if len(functions) == 2:
                    return functions
    return {}


def available(dtype: np.dtype) -> bool:
    """Whether :func:`gemm` can run for ``dtype`` (float32 or float64, NumPy's BLAS being OpenBLAS)."""
    return np.dtype(dtype) in _gemm_functions()


def _operand(x: np.ndarray, transposed: bool) -> tuple[np.ndarray, bool] | None:
    """``x`` as a C-contiguous matrix and whether it enters transposed; None if it is neither
    C- nor F-contiguous."""
    if x.flags.c_contiguous:
        return x, transposed
    if x.flags.f_contiguous:
        return x.T, not transposed
    return None


def gemm(c: np.ndarray, a: np.ndarray, b: np.ndarray, alpha: float, ta: bool, tb: bool) -> bool:
    """``c += alpha * op(a) @ op(b)`` in place (op transposes when ``ta``/``tb``); c is
    C-contiguous, a, b and c of one type the BLAS has, their shapes checked by the caller.
    False (nothing done) when an operand is neither C- nor F-contiguous or the type is missing."""
    gemm_fn = _gemm_functions().get(c.dtype)
    left, right = _operand(a, ta), _operand(b, tb)
    if gemm_fn is None or left is None or right is None or not c.flags.c_contiguous:
        return False
    (a, ta), (b, tb) = left, right
    m, n = c.shape
    k = a.shape[0] if ta else a.shape[1]
    gemm_fn(_ROW_MAJOR, _TRANS if ta else _NO_TRANS, _TRANS if tb else _NO_TRANS, m, n, k, alpha,
            a.ctypes.data, max(1, a.shape[1]), b.ctypes.data, max(1, b.shape[1]), 1.0, c.ctypes.data, max(1, n))
    return True
