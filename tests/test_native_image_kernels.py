"""The image family's native resize loops (image/native_kernels) give the numba loops' values
(image/numba_kernels).

Each native loop and the numba loop compiled from numba_kernels' source (compile_module, as
numba_kernels builds them where native kernels are not available) run on the same random
images and tap tables (the taps of bilinear, bicubic, area and nearest-neighbour resizes, up
and down, from image/kernels.resize_taps), float32 and float64, into outputs filled alike.
Both add the taps' products in the same order, so the results are compared bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

from gradreg.kernel_support import compile_module

pytest.importorskip("numba")
native_kernels = pytest.importorskip("gradreg_plugins.image.native_kernels")
if not native_kernels.available():
    pytest.skip("native kernels are not available here", allow_module_level=True)

from gradreg_plugins.image import kernels, numba_kernels  # noqa: E402  (after the skips)

DTYPES = [np.float32, np.float64]
RESIZES = ["ResizeBilinear", "ResizeBicubic", "ResizeArea", "ResizeNearestNeighbor"]
# (input height, width) -> (output height, width)
SIZES = [((5, 6), (7, 9)), ((9, 8), (4, 3)), ((1, 1), (3, 2)), ((4, 7), (4, 7))]


def _numba(dtype, name: str):
    return getattr(compile_module(numba_kernels._LOOPS, np.dtype(dtype)), name)


def _taps(op_type: str, in_hw, out_hw):
    return kernels.resize_taps(op_type, in_hw, out_hw, False, op_type != "ResizeArea")


def _run_both(dtype, name, images, index, weight, out_shape):
    results = []
    for loop in (native_kernels.loop(dtype, name), _numba(dtype, name)):
        out = np.full(out_shape, 0.25, dtype)
        loop(images, index, weight.astype(dtype), out)
        results.append(out)
    np.testing.assert_array_equal(*results)
    return results[0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op_type", RESIZES)
@pytest.mark.parametrize("in_hw, out_hw", SIZES)
def test_resize_loops(dtype, op_type, in_hw, out_hw):
    rng = np.random.default_rng(3)
    n, c = 2, 3
    rows, cols = _taps(op_type, in_hw, out_hw)
    images = rng.standard_normal((n, *in_hw, c)).astype(dtype)
    images[0, 0, 0, 0] = np.nan
    middle = _run_both(dtype, "rows", images, rows.index, rows.weight, (n, rows.out_size, cols.in_size, c))
    _run_both(dtype, "cols", middle, cols.index, cols.weight, (n, rows.out_size, cols.out_size, c))
    grads = rng.standard_normal((n, rows.out_size, cols.out_size, c)).astype(dtype)
    middle = _run_both(dtype, "cols_adjoint", grads, cols.index, cols.weight, (n, rows.out_size, cols.in_size, c))
    _run_both(dtype, "rows_adjoint", middle, rows.index, rows.weight, (n, rows.in_size, cols.in_size, c))


@pytest.mark.parametrize("dtype", DTYPES)
def test_read_only_images(dtype):
    rows, cols = _taps("ResizeBilinear", (3, 4), (5, 5))
    images = np.ones((1, 3, 4, 2), dtype)
    images.flags.writeable = False
    out = np.zeros((1, rows.out_size, 4, 2), dtype)
    native_kernels.loop(dtype, "rows")(images, rows.index, rows.weight.astype(dtype), out)
    np.testing.assert_allclose(out, 1.0, rtol=1e-6)


def test_other_dtypes_are_unsupported():
    with pytest.raises(native_kernels.Unsupported):
        native_kernels.loop(np.float16, "rows")


# -- numba_kernels takes the native loops ----------------------------------------------------------------

def test_numba_kernels_build_the_native_loops():
    assert numba_kernels._loop(np.float32, "cols") is native_kernels.loop(np.float32, "cols")


def test_numba_kernels_fall_back_to_numba(monkeypatch):
    numba = numba_kernels._loops(np.float64).rows_adjoint

    def unsupported(*args):
        raise native_kernels.Unsupported("no native form")
    monkeypatch.setattr(native_kernels, "loop", unsupported)
    assert numba_kernels._loop(np.float64, "rows_adjoint") is numba
    monkeypatch.setattr(native_kernels, "available", lambda: False)
    assert numba_kernels._loop(np.float64, "rows_adjoint") is numba
