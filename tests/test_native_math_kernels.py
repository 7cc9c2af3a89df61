"""The math family's native scatters (math/native_kernels) give the numba scatters' values
(math/numba_kernels).

Each native scatter and the numba one compiled from numba_kernels' source (compile_module, as
numba_kernels builds them where native kernels are not available) run on the same random rows
and ids (repeated ids, negative ids skipped, ids of int32 and int64), for float32, float64,
int32 and int64 rows, into outputs filled alike; float rows hold NaN, infinities and signed
zeros. Both combine the rows in the same order by the same operations, so the results are
compared bit for bit (NaN equal to NaN).
"""
from __future__ import annotations

import numpy as np
import pytest

from gradreg.kernel_support import compile_module

pytest.importorskip("numba")
native_kernels = pytest.importorskip("gradreg_plugins.math.native_kernels")
if not native_kernels.available():
    pytest.skip("native kernels are not available here", allow_module_level=True)

from gradreg_plugins.math import numba_kernels  # noqa: E402  (after the skips)

DATA_TYPES = [np.float32, np.float64, np.int32, np.int64]
ID_TYPES = [np.int32, np.int64]
COMBINES = ["add", "max", "min", "mul"]


def _numba(combine: str):
    return getattr(compile_module(numba_kernels._SCATTER_ADD), "scatter_" + combine)


def _case(data, ids_type, rows: int, width: int, segments: int):
    rng = np.random.default_rng(rows * 7 + width)
    ids = rng.integers(-2, segments, rows).astype(ids_type)
    if np.dtype(data).kind == "f":
        values = (rng.standard_normal((rows, width)) * 3).astype(data)
        if values.size >= 8:
            flat = values.reshape(-1)
            flat[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, np.nan]
        start = np.full((segments, width), 1.5, data)
        if start.size > 2:
            start.reshape(-1)[1] = np.nan
    else:
        values = rng.integers(-50, 50, (rows, width)).astype(data)
        start = np.full((segments, width), 3, data)
    return start, ids, values


@pytest.mark.parametrize("data", DATA_TYPES)
@pytest.mark.parametrize("ids_type", ID_TYPES)
@pytest.mark.parametrize("combine", COMBINES)
@pytest.mark.parametrize("rows, width, segments", [(50, 4, 7), (200, 1, 3), (9, 33, 5), (0, 3, 2), (5, 0, 2)])
def test_scatters(data, ids_type, combine, rows, width, segments):
    start, ids, values = _case(data, ids_type, rows, width, segments)
    results = []
    with np.errstate(all="ignore"):
        for loop in (native_kernels.scatter_loop(data, ids_type, combine), _numba(combine)):
            out = start.copy()
            loop(out, ids, values)
            results.append(out)
    np.testing.assert_array_equal(*results)


def test_integer_overflow_wraps_as_numbas():
    start = np.array([[2 ** 31 - 1, -2 ** 31]], np.int32)
    ids = np.array([0, 0], np.int64)
    values = np.array([[1, -1], [2 ** 30, 3]], np.int32)
    results = []
    for combine in ("add", "mul"):
        for loop in (native_kernels.scatter_loop(np.int32, np.int64, combine), _numba(combine)):
            out = start.copy()
            loop(out, ids, values)
            results.append(out)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[2], results[3])


def test_read_only_ids_and_rows():
    ids, rows = np.array([1, 0, 1], np.int64), np.ones((3, 2))
    ids.flags.writeable = rows.flags.writeable = False
    out = np.zeros((2, 2))
    native_kernels.scatter_loop(np.float64, np.int64, "add")(out, ids, rows)
    np.testing.assert_array_equal(out, [[1, 1], [2, 2]])


def test_other_types_are_unsupported():
    with pytest.raises(native_kernels.Unsupported):
        native_kernels.scatter_loop(np.float16, np.int64, "add")
    with pytest.raises(native_kernels.Unsupported):
        native_kernels.scatter_loop(np.float32, np.uint8, "add")


# -- numba_kernels takes the native loops ----------------------------------------------------------------

def test_numba_kernels_build_the_native_loops():
    assert numba_kernels._scatter_loop("max", np.dtype(np.float32), np.dtype(np.int32)) \
        is native_kernels.scatter_loop(np.float32, np.int32, "max")


def test_scatter_add_rows_takes_any_arrays():
    """Native where the arrays fit it; numba's for rows of another type or a strided output."""
    ids = np.array([0, 2, 0, -1], np.int64)[::1]
    rows = np.arange(8.0).reshape(4, 2)
    want = np.zeros((3, 2))
    np.add.at(want, ids[:3], rows[:3])
    for out, r, i in [(np.zeros((3, 2)), rows, ids), (np.zeros((3, 2)), rows.astype(np.float32), ids),
                      (np.zeros((3, 4))[:, ::2], rows, ids), (np.zeros((3, 2)), rows, np.repeat(ids, 2)[::2])]:
        numba_kernels.scatter_add_rows(out, i, r)
        np.testing.assert_array_equal(out, want)


def test_numba_kernels_fall_back_to_numba(monkeypatch):
    numba = numba_kernels._scatter_module().scatter_min

    def unsupported(*args):
        raise native_kernels.Unsupported("no native form")
    monkeypatch.setattr(native_kernels, "scatter_loop", unsupported)
    assert numba_kernels._scatter_loop("min", np.dtype(np.float64), np.dtype(np.int64)) is numba
    monkeypatch.setattr(native_kernels, "available", lambda: False)
    assert numba_kernels._scatter_loop("min", np.dtype(np.float64), np.dtype(np.int64)) is numba
    out = np.zeros((2, 1))
    numba_kernels.scatter_add_rows(out, np.array([1, 1], np.int64), np.ones((2, 1)))
    np.testing.assert_array_equal(out, [[0], [2]])
