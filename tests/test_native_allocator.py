"""The plan allocator (gradreg.backends.native.allocator): a NumPy memory handler, set only
during gradreg's calls, that keeps freed blocks for the next allocation of their size."""
from __future__ import annotations

import importlib
import threading

import numpy as np
import pytest

import gradreg as gr
from gradreg.backends import native
from gradreg.backends.native import allocator

pytestmark = pytest.mark.skipif(not native.available() or not allocator.prepare(),
                                reason="no native compiler, or a NumPy without memory handlers")

_MULTIARRAY = importlib.import_module("numpy._core.multiarray" if hasattr(np, "_core") else "numpy.core.multiarray")


def handler_name(array: np.ndarray | None = None) -> str:
    return str(_MULTIARRAY.get_handler_name(array) if array is not None else _MULTIARRAY.get_handler_name())


@pytest.fixture
def limit():
    """The allocator's limit, put back after the test."""
    before = allocator.counters()["limit"]
    yield
    allocator.set_limit(before)


def test_set_in_the_block_only_and_put_back_after_an_error():
    outside = handler_name()
    with allocator.using():
        assert handler_name() == "gradreg_plan_allocator"
        inside = np.ones(100_000)
    assert handler_name() == outside
    assert handler_name(inside) == "gradreg_plan_allocator"      # an array keeps its handler
    assert handler_name(np.ones(100_000)) == outside
    with pytest.raises(ValueError), allocator.using():
        raise ValueError("in the block")
    assert handler_name() == outside
    # another thread's context is its own
    seen = []
    with allocator.using():
        t = threading.Thread(target=lambda: seen.append(handler_name()))
        t.start()
        t.join()
    assert seen == [outside]


def test_a_freed_block_serves_the_next_array_of_its_size():
    size = 50_000 + 17                        # 400 KB of float64: kept (MIN_BYTES to MAX_BLOCK)
    with allocator.using():
        a = np.arange(size, dtype=np.float64)
        address = a.__array_interface__["data"][0]
        del a
        before = allocator.counters()
        b = np.empty(size)
        assert b.__array_interface__["data"][0] == address
        after = allocator.counters()
        assert after["hits"] == before["hits"] + 1
        assert after["kept"] == before["kept"] - size * 8
        b[:] = 3.0
        np.testing.assert_array_equal(b * 2 + 1, np.full(size, 7.0))
        c = np.empty(size + 1)                # another size: not that block
        assert c.__array_interface__["data"][0] != address
        small = np.arange(100)                # below MIN_BYTES: malloc's, never kept
        np.testing.assert_array_equal(small[::-1][:3], [99, 98, 97])


def test_the_block_freed_last_comes_back_first():
    """(the likeliest to be in the caches still, as with malloc's free lists)"""
    with allocator.using():
        first, second = np.empty(30_000), np.empty(30_000)
        addresses = [a.__array_interface__["data"][0] for a in (first, second)]
        del first
        del second
        assert np.empty(30_000).__array_interface__["data"][0] == addresses[1]


def test_zeros_from_a_kept_block_are_zeros():
    with allocator.using():
        dirty = np.full(70_000, np.nan)
        address = dirty.__array_interface__["data"][0]
        del dirty
        clean = np.zeros(70_000)              # calloc: the kept block, cleared
        assert clean.__array_interface__["data"][0] == address
        assert not clean.any()


def test_a_size_beyond_memory_is_a_memory_error():
    with allocator.using():
        with pytest.raises(MemoryError):
            np.empty(2**62 // 8 + 1)          # (the header would have wrapped the size round)
        with pytest.raises(MemoryError):
            np.zeros(2**62 // 8 + 1)
        a = np.ones(10)
        with pytest.raises(MemoryError):
            a.resize(2**62 // 8 + 1, refcheck=False)


def test_a_resized_array_keeps_its_values():
    with allocator.using():
        a = np.arange(20_000, dtype=np.float64)
        a.resize(200_000, refcheck=False)     # realloc: the header moves with the block
        np.testing.assert_array_equal(a[:20_000], np.arange(20_000))
        assert not a[20_000:].any()
        del a
        b = np.empty(200_000)                 # the resized block, kept at its new size
        b[:] = 1.0
        assert b.sum() == 200_000


def test_what_it_keeps_stays_within_its_limit(limit):
    allocator.set_limit(1 << 20)
    with allocator.using():
        for k in range(12):                   # 12 sizes of ~200 KB: 2.4 MB freed in all
            a = np.ones(25_000 + k)
            del a
            assert allocator.counters()["kept"] <= 1 << 20
        assert allocator.counters()["kept"] > 600_000       # the last few kept
        allocator.set_limit(0)
        a = np.ones(10_000)                   # freed: every kept block goes back to malloc
        del a
    assert allocator.counters()["kept"] == 0


def test_no_more_than_its_slots_are_kept(limit):
    allocator.set_limit(1 << 40)
    with allocator.using():
        arrays = [np.empty(5_000 + k) for k in range(allocator.SLOTS + 20)]
        total = sum(a.nbytes for a in arrays)
        del arrays
        kept = allocator.counters()["kept"]
        assert 0 < kept < total               # the 20 oldest went back to malloc
        allocator.set_limit(0)
        del kept
        np.ones(5_000)


def test_a_plans_arrays_come_from_it_from_the_second_call_and_the_caller_keeps_numpys():
    pytest.importorskip("numba")
    g = gr.Graph()
    with g.as_default():
        x = gr.placeholder(gr.float32, [256, 256], name="x")
        y = gr.tanh(gr.matmul(x, x)) * 2.0
        (dx,) = gr.gradients(gr.reduce_sum(y), [x])
    session = gr.Session(g, backend="numba")
    run = session.make_callable([y, dx], [x])
    value = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    outside = handler_name()
    first = run(value)
    assert handler_name() == outside
    hits = allocator.counters()["hits"]
    for _ in range(4):
        got = run(value)
        assert handler_name() == outside
        assert handler_name(np.asarray(got[1])) == "gradreg_plan_allocator"
    assert allocator.counters()["hits"] > hits          # the calls reuse what the last one freed
    for a, b in zip(first, got):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_off_with_gradreg_malloc_default(monkeypatch):
    """GRADREG_MALLOC=default: NumPy's allocator throughout (checked in a new process, as the
    allocator is made once)."""
    import subprocess
    import sys
    code = ("from gradreg.backends.native import allocator; import numpy as np; "
            "print(allocator.prepare())")
    monkeypatch.setenv("GRADREG_MALLOC", "default")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
