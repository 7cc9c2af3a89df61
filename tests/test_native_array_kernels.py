"""The array family's compiled scatters (ScatterNd, TensorScatterAdd) run the math family's
native scatter-add (math/native_kernels, through math/numba_kernels.scatter_add_rows) and give
the numba scatter-add's values bit for bit: both add the rows in the same order."""
from __future__ import annotations

import numpy as np
import pytest

import gradreg as gr
from gradreg.kernel_support import compile_module
from gradreg.registry import get_registry
from gradreg.registry.kernels import Tiered

pytest.importorskip("numba")
native_kernels = pytest.importorskip("gradreg_plugins.math.native_kernels")
if not native_kernels.available():
    pytest.skip("native kernels are not available here", allow_module_level=True)

from gradreg_plugins.math import numba_kernels as math_kernels  # noqa: E402  (after the skips)


class _Ctx:
    max_elements = 10 ** 8


def _built(node):
    tiered = get_registry().kernel_factory(node.op.type, "numba")(node.op, _Ctx())
    assert isinstance(tiered, Tiered)
    return tiered.build()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_scatter_nd_and_tensor_scatter_add_run_the_native_loop(dtype, monkeypatch):
    ran = []
    original = native_kernels.scatter_loop

    def spy(*args):
        loop = original(*args)

        def run(out, ids, rows):
            ran.append(rows.dtype)
            loop(out, ids, rows)
        return run
    monkeypatch.setattr(native_kernels, "scatter_loop", spy)
    graph = gr.Graph()
    with graph.as_default():
        t = gr.as_dtype(dtype)
        scatter = gr.apply_op("ScatterNd", gr.placeholder(gr.int32, None), gr.placeholder(t, None),
                              gr.placeholder(gr.int32, [None]))
        tensor_add = gr.apply_op("TensorScatterAdd", gr.placeholder(t, None), gr.placeholder(gr.int32, None),
                                 gr.placeholder(t, None))
    rng = np.random.default_rng(5)
    indices = rng.integers(0, 4, (60, 2)).astype(np.int32)     # repeats: the order of additions shows
    updates = (rng.standard_normal((60, 5)) * 1e3).astype(dtype)
    base = (rng.standard_normal((4, 4, 5)) * 1e3).astype(dtype)
    got = _built(scatter)(indices, updates, np.array([4, 4, 5], np.int32))
    added = _built(tensor_add)(base, indices, updates)
    assert ran and all(d == np.dtype(dtype) for d in ran)
    numba = compile_module(math_kernels._SCATTER_ADD).scatter_add
    flat = np.ravel_multi_index(tuple(indices.T), (4, 4)).astype(np.int64)
    want = np.zeros((4, 4, 5), dtype)
    numba(want.reshape(16, 5), flat, updates)
    np.testing.assert_array_equal(got, want)
    want = base.copy()
    numba(want.reshape(16, 5), flat, updates)
    np.testing.assert_array_equal(added, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_concat_along_the_last_axis_copies_columns_natively(dtype, monkeypatch):
    """ConcatV2 along the last axis (axis -1 or rank - 1) by array/native_kernels' column copy:
    np.concatenate's values, NaN payloads kept; inputs of no columns, non-contiguous ones;
    other axes, small arrays, mixed types and TensorFlow's errors go to the NumPy kernel."""
    from gradreg_plugins.array import native_kernels as array_native
    copies = []
    real = array_native.copy_columns_loop

    def spy(dtype_):
        loop = real(dtype_)
        return lambda src, dst, first: copies.append((src.shape, first)) or loop(src, dst, first)
    monkeypatch.setattr(array_native, "copy_columns_loop", spy)
    graph = gr.Graph()
    t = gr.as_dtype(dtype)
    with graph.as_default():
        a, b, c = gr.placeholder(t, None), gr.placeholder(t, None), gr.placeholder(t, None)
        node = gr.apply_op("ConcatV2", [a, b, c], gr.placeholder(gr.int32, []))
    concat = _built(node)
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((8, 32, 16)) * 100).astype(dtype)
    y = (rng.standard_normal((8, 32, 8)) * 100).astype(dtype)[:, ::-1]      # not C-contiguous
    z = np.zeros((8, 32, 0), dtype)
    if dtype == np.float32:
        x[1, 2, 3] = np.frombuffer(np.uint32(0x7FC00123).tobytes(), np.float32)[0]     # a NaN with a payload
    for axis in (2, -1):
        got = concat(x, y, z, np.int32(axis))
        want = np.concatenate([x, y, z], axis=2)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()
    assert copies == [((256, 16), 0), ((256, 8), 16)] * 2
    copies.clear()
    np.testing.assert_array_equal(concat(x, x, x, np.int32(0)), np.concatenate([x, x, x], 0))   # another axis
    small = x[:, :2]
    np.testing.assert_array_equal(concat(small, small, small, np.int32(2)), np.concatenate([small] * 3, 2))
    assert copies == []
    with pytest.raises(ValueError, match="Dimension 1 in both shapes must be equal"):
        concat(x, x[:, :3], x, np.int32(2))
    with pytest.raises(ValueError, match="Ranks of all input tensors should match"):
        concat(x, x[0], x, np.int32(2))
