"""Kernels reusing their large outputs from call to call (gradreg.kernel_support.Recycler): an
array comes back only once nothing references it, so values a caller kept, and views of them,
stay as they were; a loop gradient's stacked values, its hoisted product and its products of
run-time sizes, reused from call to call, give the NumPy reference's values."""
from __future__ import annotations

import numpy as np
import pytest
from rnn_reference import tanh_rnn_gradients

import gradreg as gr
from gradreg import kernel_support as ks
from gradreg.backends import memory


def test_an_array_comes_back_once_nothing_holds_it():
    recycler = ks.Recycler()
    first = recycler.empty((128, 256), np.float32)
    first[:] = 1
    held = recycler.empty((128, 256), np.float32)       # first is still held: a new array
    assert not np.shares_memory(first, held)
    address = first.ctypes.data
    del first
    again = recycler.empty((128, 256), np.float32)
    assert again.ctypes.data == address and again.shape == (128, 256) and again.dtype == np.float32
    view = again[1:]
    del again                                            # a view holds its base: not free
    other = recycler.empty((128, 256), np.float32)
    assert not np.shares_memory(other, view)
    np.testing.assert_array_equal(view, np.ones((127, 256), np.float32))


def test_another_shape_or_type_or_a_small_array_is_a_new_one():
    recycler = ks.Recycler()
    big = recycler.empty((64, 1024), np.float32)
    address = big.ctypes.data
    del big
    assert recycler.empty((64, 1024), np.float64).ctypes.data != address
    small = recycler.empty((4, 4), np.float32)
    address = small.ctypes.data
    del small
    assert all(recycler.empty((64, 1024), np.float32).shape == (64, 1024) for _ in range(3))
    assert not any(b.shape == (4, 4) for b in recycler._buffers)   # small ones are not kept


def test_an_array_over_the_limit_is_not_kept(monkeypatch):
    monkeypatch.setattr(memory, "RECYCLE_MAX_BYTES", 1 << 18)
    recycler = ks.Recycler()
    kept = recycler.empty((256, 256), np.float32)           # 256 KiB: kept
    large = recycler.empty((256, 512), np.float32)          # 512 KiB: not
    assert [b.shape for b in recycler._buffers] == [(256, 256)]
    del kept, large


STEPS, BATCH, INPUT, HIDDEN = 7, 3, 4, 5


def _rnn(graph):
    xs = gr.placeholder(gr.float64, [STEPS, BATCH, INPUT], name="xs")
    w = gr.placeholder(gr.float64, [INPUT, HIDDEN], name="w")
    u = gr.placeholder(gr.float64, [HIDDEN, HIDDEN], name="u")

    def body(t, h):
        return t + 1, gr.tanh(gr.matmul(xs[t], w) + gr.matmul(h, u))
    _, h = gr.while_loop(lambda t, h: t < STEPS, body, [0, gr.zeros([BATCH, HIDDEN], gr.float64)])
    loss = gr.reduce_sum(h * h)
    rows = gr.placeholder(gr.float64, [None, INPUT], name="rows")   # a product of run-time size, fetched
    return (xs, w, u, rows), [loss, *gr.gradients(loss, [xs, w, u]), gr.matmul(rows, w)]


def _numpy_rnn(x, w, u):
    return [*tanh_rnn_gradients(x, w, u), x.reshape(-1, INPUT) @ w]


def _inputs(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(STEPS, BATCH, INPUT))
    return x, rng.normal(0, 0.5, (INPUT, HIDDEN)), rng.normal(0, 0.5, (HIDDEN, HIDDEN)), x.reshape(-1, INPUT)


@pytest.mark.parametrize("backend", ["numpy", None])
def test_a_loop_gradients_reused_buffers_keep_the_values_a_caller_kept(graph, monkeypatch, backend):
    # Every array recycled, however small: the loop's reserved list, its stacks, the hoisted
    # product and the products after the loop come back from the call before when free.
    monkeypatch.setattr(memory, "RECYCLE_BYTES", 0)
    feeds, fetches = _rnn(graph)
    run = gr.Session(graph, backend=backend).make_callable(fetches, list(feeds))
    kept = []
    for seed in range(6):
        values = _inputs(seed)
        got = run(*values)
        if seed % 2:
            kept.append((values, got))          # the odd calls' results are held; the even ones' dropped
        for g, e in zip(got, _numpy_rnn(*values[:3])):
            np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
    for values, got in kept:                    # later calls wrote none of them
        for g, e in zip(got, _numpy_rnn(*values[:3])):
            np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
