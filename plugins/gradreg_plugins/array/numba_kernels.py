"""Numba kernels of the array family (imported only when the numba backend is first used).

ScatterNd and TensorScatterAdd, whose NumPy kernels add with the slow ``np.add.at`` over index
tuples, flatten each index to a row of the output and run the math family's compiled
scatter-add (same order of additions, so the same values; a native kernel where native
kernels are available, math/native_kernels, numba's otherwise). Inputs the fast path does not take
(other types, IGNORE policy, bad indices or shapes) go to the NumPy kernel, which also raises
the errors.

ConcatV2 along the last axis copies each input's columns into the output's rows by a native
loop (array/native_kernels): np.concatenate's row-at-a-time copy is slow for a few columns.
"""
from __future__ import annotations

import math

import numpy as np

from gradreg.kernel_support import native_loop, numba_available
from gradreg.model import dtypes
from gradreg.registry import get_registry
from gradreg.registry.kernels import Tiered
from gradreg_plugins.array import family
from gradreg_plugins.array.kernels import concat_axis
from gradreg_plugins.math.numba_kernels import scatter_add_rows

try:    # the native loop imports llvmlite, which may be missing where numba is
    from gradreg_plugins.array import native_kernels
except ImportError:
    native_kernels = None  # type: ignore[assignment]

_TYPES = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64)


def _numpy_kernel(op, ctx):
    return get_registry().kernel_factory(op.type, "numpy")(op, ctx)


def _fast_path(op) -> bool:
    policy = op.get_attr("bad_indices_policy").decode() if op.has_attr("bad_indices_policy") else ""
    return op.get_attr("T") in _TYPES and policy in ("", "DEFAULT", "ERROR") and numba_available()


def _flat_rows(indices: np.ndarray, dims: tuple, updates: np.ndarray) -> tuple[np.ndarray, int, int] | None:
    """(row of each update, rows, row width) of well-formed inputs, else None."""
    if indices.ndim < 1 or indices.dtype.kind not in "iu" or not 1 <= indices.shape[-1] <= len(dims):
        return None
    depth = indices.shape[-1]
    if updates.shape != indices.shape[:-1] + tuple(dims[depth:]):
        return None
    points = indices.reshape(-1, depth)
    if points.size and ((points < 0).any() or (points >= np.asarray(dims[:depth])).any()):
        return None
    rows = math.prod(dims[:depth])
    flat = np.ravel_multi_index(tuple(points.T), dims[:depth]) if points.size else np.zeros(0, np.int64)
    return flat.astype(np.int64), rows, math.prod(dims[depth:])


def _tiered(op, checked, compute) -> Tiered:
    """``compute`` once the scatter-add is compiled for the node's rows (ids as int64): until
    then, and where the build fails, the NumPy kernel."""
    data_type = op.get_attr("T").storage

    def build():
        scatter_add_rows(np.zeros((1, 1), data_type), np.zeros(1, np.int64), np.zeros((1, 1), data_type))
        return compute
    return Tiered(checked, build, f"{op.type} {op.name}")


def _scatter_into(out: np.ndarray, flat: np.ndarray, rows: int, width: int, updates: np.ndarray) -> np.ndarray:
    scatter_add_rows(out.reshape(rows, width), flat, np.ascontiguousarray(updates).reshape(flat.size, width))
    return out


@family.kernel("ScatterNd", backend="numba")
def _scatter_nd(op, ctx):
    if not _fast_path(op):
        return None
    checked = _numpy_kernel(op, ctx)

    def compute(indices, updates, shape):
        indices, updates = np.asarray(indices), np.asarray(updates)
        dims = tuple(int(d) for d in np.asarray(shape).reshape(-1))
        plan = _flat_rows(indices, dims, updates) if all(d >= 0 for d in dims) else None
        if plan is None or math.prod(dims) > ctx.max_elements:
            return checked(indices, updates, shape)
        return _scatter_into(np.zeros(dims, updates.dtype), *plan, updates)
    return _tiered(op, checked, compute)


@family.kernel("TensorScatterAdd", backend="numba")
def _tensor_scatter_add(op, ctx):
    if not _fast_path(op):
        return None
    checked = _numpy_kernel(op, ctx)

    def compute(tensor, indices, updates):
        tensor, indices, updates = np.asarray(tensor), np.asarray(indices), np.asarray(updates)
        plan = _flat_rows(indices, tensor.shape, updates) if updates.dtype == tensor.dtype else None
        if plan is None:
            return checked(tensor, indices, updates)
        return _scatter_into(np.array(tensor, order="C"), *plan, updates)
    return _tiered(op, checked, compute)


# -- ConcatV2 along the last axis: a native loop (array/native_kernels) ---------------------------

# Concatenations of fewer elements go to np.concatenate: its per-row cost is what the loop saves.
CONCAT_ELEMENTS = 4096


@family.kernel("ConcatV2", backend="numba")
def _concat_v2(op, ctx):
    """ConcatV2 along the last axis of arrays of one type by the native column copy, once it
    is built (np.concatenate copies a row of each input at a time: slow for a few channels);
    everything else, and every error, the NumPy kernel's."""
    if op.get_attr("T") not in _TYPES or native_kernels is None:
        return None
    checked = _numpy_kernel(op, ctx)
    storage = op.get_attr("T").storage

    def build():
        loop = native_loop(native_kernels.copy_columns_loop, storage)
        if loop is None:
            return checked

        def concat(*args):
            values, axis = args[:-1], args[-1]
            if not all(type(v) is np.ndarray and v.dtype == storage for v in values):
                return checked(*args)
            try:
                last = concat_axis(values, axis) == values[0].ndim - 1
            except ValueError:
                return checked(*args)      # its error
            width = sum(v.shape[-1] for v in values)
            rows = values[0].size // values[0].shape[-1] if values[0].shape[-1] else 0
            if not last or values[0].ndim < 2 or rows * width < CONCAT_ELEMENTS:
                return checked(*args)
            out = np.empty((*values[0].shape[:-1], width), storage)
            target = out.reshape(rows, width)
            first = 0
            for v in values:
                if v.shape[-1]:
                    loop(np.ascontiguousarray(v).reshape(rows, v.shape[-1]), target, first)
                first += v.shape[-1]
            return out
        return concat
    return Tiered(checked, build, f"{op.type} {op.name}")
