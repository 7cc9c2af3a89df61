"""The array family's native loop (gradreg.native): columns copied between rows, what a
concatenation along the last axis does.

NumPy copies an input into a slice of the last axis of the output one row at a time, with a
call of its inner loop a row: for a few channels (a slim DenseNet's concatenation of 16 and 4
channels over 8192 positions) that is ~0.2 ms where the copy itself takes ~0.02. The loop is
built, and compiled, on its first request for a dtype only; it copies bits (a float's NaN
payload too).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from gradreg.native import Kernel, Unsupported, available

__all__ = ["Unsupported", "available", "copy_columns_loop"]

Loop = Callable[..., None]


def copy_columns_loop(dtype: Any) -> Loop:
    """``copy_columns(src, dst, first)`` for 2-D C-contiguous arrays of ``dtype`` (float32,
    float64, int32, int64) with as many rows: ``dst[:, first:first + src.shape[1]] = src``,
    compiled now. The caller keeps the columns inside ``dst``: the loop does not check."""
    return _copy_columns_loop(np.dtype(dtype))


@functools.cache
def _copy_columns_loop(dtype: np.dtype) -> Loop:
    if dtype not in (np.float32, np.float64, np.int32, np.int64):
        raise Unsupported(f"copy_columns of {dtype}")
    k = Kernel(f"copy_columns_{dtype.name}", distinct=True)
    src, dst = k.array(dtype, 2), k.array(dtype, 2)
    first = k.int_param()
    for r in k.range(src.shape[0]):
        row, target = src.sub(r), dst.sub(r)
        for j in k.range(src.shape[1]):
            target[first + j] = row[j]
    return k.compile()
