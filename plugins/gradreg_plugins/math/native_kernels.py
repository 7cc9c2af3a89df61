"""The math family's compiled scatters as native kernels (gradreg.native): numba_kernels'
scatter loops (_SCATTER_ADD) written again for the tracer and compiled by LLVM, which takes
tens of milliseconds with the GIL released where numba holds the GIL for half a second a loop.

:func:`scatter_loop` returns ``scatter_add``, ``scatter_max``, ``scatter_min`` or
``scatter_mul`` for one data type (float32, float64, int32, int64) and one id type (int32,
int64), taking the same arguments as numba's, ``(out, ids, rows)``: ``out`` (2-D, updated in
place), ``ids`` (1-D, negative ids skipped) and ``rows`` (2-D, one row an id), all
C-contiguous. Rows are combined in order, by the same operations as numba's (a NaN on either
side of a max or min stays), so the results are its bits. Each loop is built, and compiled, on
its first request only.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from gradreg.native import Kernel, Unsupported, Value, available

__all__ = ["Unsupported", "available", "scatter_loop"]

Loop = Callable[..., None]

_DATA_TYPES = (np.float32, np.float64, np.int32, np.int64)
_ID_TYPES = (np.int32, np.int64)


def _add(k: Kernel, old: Value, v: Value) -> Value:
    return old + v


def _mul(k: Kernel, old: Value, v: Value) -> Value:
    return old * v


def _max(k: Kernel, old: Value, v: Value) -> Value:
    return k.where((v > old) | (v != v), v, old)


def _min(k: Kernel, old: Value, v: Value) -> Value:
    return k.where((v < old) | (v != v), v, old)


_COMBINE: dict[str, Callable[[Kernel, Value, Value], Value]] = {"add": _add, "mul": _mul, "max": _max, "min": _min}


def _scatter(k: Kernel, data: np.dtype, ids_type: np.dtype, combine: str) -> None:
    # scatter_<combine>(out, ids, rows): out[ids[i]] = combine(out[ids[i]], rows[i]) for ids >= 0
    out, ids, rows = k.array(data, 2), k.array(ids_type, 1), k.array(data, 2)
    step = _COMBINE[combine]
    for i in k.range(ids.shape[0]):
        j = ids[i]
        with k.if_(j >= 0):
            target, source = out.sub(j), rows.sub(i)
            for c in k.range(rows.shape[1]):
                target[c] = step(k, target[c], source[c])


def scatter_loop(data: Any, ids: Any, combine: str) -> Loop:
    """numba_kernels' ``scatter_<combine>`` (add, max, min, mul) for rows of ``data`` and ids of
    ``ids`` (dtypes), compiled now."""
    return _scatter_loop(np.dtype(data), np.dtype(ids), combine)


@functools.cache
def _scatter_loop(data: np.dtype, ids: np.dtype, combine: str) -> Loop:
    if data not in _DATA_TYPES or ids not in _ID_TYPES or combine not in _COMBINE:
        raise Unsupported(f"scatter_{combine} of {data} rows, {ids} ids")
    k = Kernel(f"scatter_{combine}_{data.name}_{ids.name}")
    _scatter(k, data, ids, combine)
    return k.compile()
