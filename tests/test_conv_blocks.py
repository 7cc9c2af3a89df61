"""Conv2D and its backprops over blocks of the batch, in one thread and shared among threads
(gradreg_plugins.nn.conv._over_batch), against an einsum reference and the adjoint identities."""
from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import gradreg as gr
from gradreg.backends import threads as gr_threads
from gradreg.backends import workers
from gradreg.registry.kernels import ShapeMemo
from gradreg_plugins.nn import conv


def _reference_conv(x, f, stride, padding):
    """NHWC x HWIO, dilation 1, by explicit windows (groups from the filter's input depth)."""
    kh, kw, per_group, out = f.shape
    h, w = x.shape[1:3]
    if padding == "SAME":
        oh, ow = -(-h // stride), -(-w // stride)
        ph, pw = max(0, (oh - 1) * stride + kh - h), max(0, (ow - 1) * stride + kw - w)
        x = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    windows = sliding_window_view(x, (kh, kw), axis=(1, 2))[:, ::stride, ::stride]   # n, oh, ow, c, kh, kw
    groups = x.shape[3] // per_group
    parts = []
    for g in range(groups):
        fg = f[..., g * (out // groups):(g + 1) * (out // groups)]
        parts.append(np.einsum("nhwcij,ijco->nhwo", windows[:, :, :, g * per_group:(g + 1) * per_group], fg))
    return np.concatenate(parts, axis=-1)


CASES = [  # x shape, filter shape, stride, padding, dtype
    ((6, 11, 9, 4), (3, 3, 4, 5), 1, "SAME", np.float32),
    ((6, 11, 9, 4), (3, 3, 4, 5), 2, "SAME", np.float64),
    ((5, 8, 8, 6), (3, 2, 6, 2), 1, "VALID", np.float64),
    ((5, 8, 8, 6), (3, 3, 3, 4), 1, "SAME", np.float32),      # two groups
]


@pytest.mark.parametrize("xs, fs, stride, padding, dtype", CASES)
def test_blocks_shared_among_threads_give_the_single_thread_values(xs, fs, stride, padding, dtype, monkeypatch):
    rng = np.random.default_rng(7)
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(dtype, xs)
        f = gr.placeholder(dtype, fs)
        strides = [1, stride, stride, 1]
        y = gr.apply_op("Conv2D", x, f, strides=strides, padding=padding)
        dy = gr.placeholder(dtype, y.shape)
        dx = gr.apply_op("Conv2DBackpropInput", gr.constant(list(xs)), f, dy, strides=strides, padding=padding)
        df = gr.apply_op("Conv2DBackpropFilter", x, gr.constant(list(fs)), dy, strides=strides, padding=padding)
    xv, fv = rng.standard_normal(xs).astype(dtype), rng.standard_normal(fs).astype(dtype)
    dyv = rng.standard_normal(tuple(y.shape.as_list())).astype(dtype)
    feeds = {x: xv, f: fv, dy: dyv}
    # One batch entry a block, every convolution large enough to share its blocks.
    monkeypatch.setattr(conv, "SCRATCH_BYTES", 1)
    monkeypatch.setattr(conv, "MIN_BLOCK_ROWS", 0)
    monkeypatch.setattr(conv.ks, "threads_for", lambda work, per_thread: 1)
    one = gr.Session(graph, backend="numpy").run([y, dx, df], feeds)
    calls = []
    real_parallel = workers.parallel

    def parallel(fn, parts, threads=None):
        calls.append(threads)
        return real_parallel(fn, parts, threads)

    monkeypatch.setattr(conv.ks, "threads_for", lambda work, per_thread: 2)
    monkeypatch.setattr(conv.ks, "parallel", parallel)
    shared = gr.Session(graph, backend="numpy").run([y, dx, df], feeds)
    assert calls and set(calls) == {2}
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for a, b in zip(one, shared):
        np.testing.assert_allclose(b, a, rtol=tol, atol=tol)
    yv, dxv, dfv = shared
    np.testing.assert_allclose(yv, _reference_conv(xv, fv, stride, padding), rtol=tol * 10, atol=tol * 10)
    # <dy, conv(x, f)> = <backprop_input(f, dy), x> = <backprop_filter(x, dy), f>
    inner = float(np.sum(dyv.astype(np.float64) * yv))
    scale = tol * 100 * max(1.0, abs(inner))
    assert abs(float(np.sum(dxv.astype(np.float64) * xv)) - inner) < scale * 10
    assert abs(float(np.sum(dfv.astype(np.float64) * fv)) - inner) < scale * 10


@pytest.mark.parametrize("a_shape, b_shape", [
    ((1, 300, 7), (1, 7, 5)), ((1, 6, 400), (1, 400, 9)), ((3, 40, 11), (3, 11, 4)), ((2, 5, 90), (2, 90, 3)),
    ((500,), (500, 6)), ((300, 8), (8,)), ((7, 300), (300,)),       # sums as products with ones
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_cut_among_gradreg_threads_never_blas_threads(a_shape, b_shape, dtype, monkeypatch):
    """kernel_support.product: the longer of the rows and the summed dimension cut among
    gradreg's threads (the rows of the result, or partial products added up), BLAS held to one
    thread in every part; the values are np.matmul's. A convolution's product goes through it."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    if a.ndim == 3 and a.shape[1] < a.shape[2]:
        a = np.ascontiguousarray(a.transpose(0, 2, 1)).transpose(0, 2, 1)   # as a filter gradient's x^T
    limits, calls = [], []
    real_parallel = workers.parallel
    blas = gr_threads._the_blas()

    def parallel(fn, parts, threads=None):
        calls.append((parts, threads))
        return real_parallel(lambda i: limits.append(blas.current()) or fn(i), parts, threads)
    monkeypatch.setattr(workers, "parallel", parallel)
    monkeypatch.setattr(conv.ks, "threads_for", lambda work, per_thread: 2)
    got = conv._matmul(a, b, 1e9) if a.ndim == 3 else conv.ks.product(a, b, 2)
    assert calls == [(2, 2)]
    assert len(limits) == 2 and all(limit <= 1 for limit in limits)     # 0: no BLAS threadpoolctl knows
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * a.shape[-1])


DIRECT = {"_direct_forward", "_direct_input", "_direct_filter"}
DIRECT_STRIDED = {"_direct_forward", "_scattered", "_direct_filter"}     # no direct input backprop
TAPS = {"_tap_forward", "_tap_filter"}
# input NHWC, filter, strides, dilations, padding, dtype, data format, forms used without the direct
# form (conv.direct_form giving None: where native kernels are not available), forms used
COMPILED_CASES = [
    ((4, 9, 11, 3), (3, 3, 3, 8), 1, 1, "SAME", np.float64, "NHWC", {"_scattered"}, DIRECT),  # few input channels
    ((4, 9, 11, 8), (3, 3, 8, 16), 2, 1, "SAME", np.float32, "NHWC", {"_scattered"}, DIRECT_STRIDED),  # strided
    ((4, 9, 11, 4), (3, 3, 4, 8), 1, 1, "SAME", np.float32, "NHWC", {"_scattered"}, DIRECT),
    ((3, 10, 10, 4), (3, 2, 4, 4), 2, 1, "VALID", np.float64, "NHWC", {"_scattered"}, DIRECT_STRIDED),
    ((3, 12, 12, 2), (3, 3, 2, 5), 1, 2, "SAME", np.float32, "NHWC", {"_scattered"}, DIRECT),  # dilated
    ((2, 8, 8, 3), (3, 3, 3, 6), 2, 1, "SAME", np.float32, "NCHW", {"_scattered"}, DIRECT_STRIDED),
    ((4, 9, 11, 16), (3, 3, 16, 4), 1, 1, "SAME", np.float32, "NHWC", TAPS, DIRECT),
    ((3, 10, 9, 12), (2, 3, 12, 4), 1, 1, "VALID", np.float64, "NHWC", TAPS, DIRECT),
    ((3, 12, 12, 9), (3, 3, 9, 3), 1, 2, "SAME", np.float64, "NHWC", TAPS, DIRECT),
    ((2, 8, 8, 12), (3, 3, 12, 2), 1, 1, "SAME", np.float32, "NCHW", TAPS, DIRECT),
    # an even window: pads 0 above, 1 below, 1 left, 2 right (the tap forms skip the taps in them)
    ((3, 9, 10, 12), (2, 4, 12, 4), 1, 1, "SAME", np.float32, "NHWC", TAPS, DIRECT),
    ((2, 9, 10, 12), (2, 4, 12, 3), 1, 2, "SAME", np.float64, "NHWC", TAPS, DIRECT),
    ((4, 9, 11, 8), (3, 3, 8, 8), 1, 1, "SAME", np.float32, "NHWC", set(), DIRECT),  # im2col throughout
    # too many channels for the direct form: the tap forms, the compiled col2im
    ((2, 6, 7, 144), (3, 3, 144, 48), 1, 1, "SAME", np.float32, "NHWC", TAPS, TAPS),
    ((2, 6, 7, 40), (3, 3, 40, 80), 1, 1, "SAME", np.float32, "NHWC", {"_scattered"}, {"_scattered"}),
]
FORMS = ("_scattered", "_tap_forward", "_tap_filter", "_direct_forward", "_direct_input", "_direct_filter")


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("xs, fs, stride, dilation, padding, dtype, fmt, forms, direct_forms", COMPILED_CASES)
def test_compiled_convolution_loops_match_numpy(xs, fs, stride, dilation, padding, dtype, fmt, forms, direct_forms,
                                                direct, monkeypatch):
    """The numba backend's Conv2D and backprops (the direct form, the tap forms and the
    compiled col2im where they are faster) give the NumPy kernels' values, satisfy <dy, conv(x,
    f)> = <dx, x> = <df, f>, and run the forms nn/conv.py chooses, in one thread and shared;
    also without the direct form (as where native kernels are not available)."""
    pytest.importorskip("numba")
    if direct:
        native_kernels = pytest.importorskip("gradreg_plugins.nn.native_kernels")
        if not native_kernels.available():
            pytest.skip("native kernels are not available here")
    else:
        monkeypatch.setattr(conv, "direct_form", lambda op, kind: None)
    from gradreg.backends.numba.jit import wait_for_kernels
    rng = np.random.default_rng(3)
    graph = gr.Graph()
    nchw = fmt == "NCHW"
    shape = (xs[0], xs[3], xs[1], xs[2]) if nchw else xs
    strides = [1, 1, stride, stride] if nchw else [1, stride, stride, 1]
    dilations = [1, 1, dilation, dilation] if nchw else [1, dilation, dilation, 1]
    options = {"strides": strides, "dilations": dilations, "padding": padding, "data_format": fmt}
    with graph.as_default():
        x = gr.placeholder(dtype, shape)
        f = gr.placeholder(dtype, fs)
        y = gr.apply_op("Conv2D", x, f, **options)
        dy = gr.placeholder(dtype, y.shape)
        dx = gr.apply_op("Conv2DBackpropInput", gr.constant(list(shape)), f, dy, **options)
        df = gr.apply_op("Conv2DBackpropFilter", x, gr.constant(list(fs)), dy, **options)
    xv, fv = rng.standard_normal(shape).astype(dtype), rng.standard_normal(fs).astype(dtype)
    dyv = rng.standard_normal(tuple(y.shape.as_list())).astype(dtype)
    feeds = {x: xv, f: fv, dy: dyv}
    want = gr.Session(graph, backend="numpy").run([y, dx, df], feeds)
    used: set[str] = set()
    for form in FORMS:
        real = getattr(conv, form)
        monkeypatch.setattr(conv, form, lambda *a, _real=real, _form=form: used.add(_form) or _real(*a))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for shared in (1, 2):
        monkeypatch.setattr(conv, "SCRATCH_BYTES", 1)
        monkeypatch.setattr(conv, "MIN_BLOCK_ROWS", 0)
        monkeypatch.setattr(conv.ks, "threads_for", lambda work, per_thread, n=shared: n)
        session = gr.Session(graph, backend="numba")
        assert wait_for_kernels(120)
        got = session.run([y, dx, df], feeds)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=tol * 10, atol=tol * 10)
    assert used == (direct_forms if direct else forms)
    yv, dxv, dfv = got
    inner = float(np.sum(dyv.astype(np.float64) * yv))
    bound = tol * 1000 * max(1.0, abs(inner))
    assert abs(float(np.sum(dxv.astype(np.float64) * xv)) - inner) < bound
    assert abs(float(np.sum(dfv.astype(np.float64) * fv)) - inner) < bound


def _blocks(n, oh, ow, bytes_per_entry):
    part = conv._Conv.__new__(conv._Conv)
    part.n, part.oh, part.ow = n, oh, ow
    return part.batch_blocks(bytes_per_entry)


def test_blocks_hold_enough_output_positions_for_their_products(monkeypatch):
    """Blocks within SCRATCH_BYTES that would hold fewer than MIN_BLOCK_ROWS positions grow to
    about that many, of nearly equal size, within ROWS_SCRATCH_BYTES; a batch the scratch
    already takes whole, or blocks already that large, stay as they were."""
    monkeypatch.setattr(conv, "SCRATCH_BYTES", 1000)
    monkeypatch.setattr(conv, "MIN_BLOCK_ROWS", 100)
    monkeypatch.setattr(conv, "ROWS_SCRATCH_BYTES", 10_000)
    # 7x7 = 49 positions an entry, 100 bytes: 10 entries within the scratch, 490 rows: kept.
    assert _blocks(32, 7, 7, 100) == [(0, 10), (10, 20), (20, 30), (30, 32)]
    # 3x3 = 9 positions, 600 bytes: one entry a block would hold 9 rows; 12 entries hold 100,
    # three blocks of 11 or 10 entries instead of 12, 12, 8.
    assert _blocks(32, 3, 3, 600) == [(0, 11), (11, 22), (22, 32)]
    # Within ROWS_SCRATCH_BYTES: 2,000 bytes an entry, at most 5 entries a block.
    assert _blocks(32, 3, 3, 2000) == [(0, 5), (5, 10), (10, 15), (15, 20), (20, 25), (25, 30), (30, 32)]
    # A batch that fits one block: one block.
    assert _blocks(4, 3, 3, 600) == [(0, 4)]
    monkeypatch.setattr(conv, "MIN_BLOCK_ROWS", 0)
    assert _blocks(5, 3, 3, 600) == [(i, i + 1) for i in range(5)]


def test_grown_blocks_give_the_values_of_one_entry_blocks(monkeypatch):
    """Forward, input and filter backprops with blocks of many entries (MIN_BLOCK_ROWS) equal
    those with one entry a block, and the einsum reference."""
    rng = np.random.default_rng(3)
    xs, fs = (9, 5, 5, 16), (3, 3, 16, 12)
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float64, xs)
        f = gr.placeholder(gr.float64, fs)
        y = gr.apply_op("Conv2D", x, f, strides=[1, 1, 1, 1], padding="SAME")
        dy = gr.placeholder(gr.float64, y.shape)
        dx = gr.apply_op("Conv2DBackpropInput", gr.constant(list(xs)), f, dy, strides=[1, 1, 1, 1], padding="SAME")
        df = gr.apply_op("Conv2DBackpropFilter", x, gr.constant(list(fs)), dy, strides=[1, 1, 1, 1], padding="SAME")
    feeds = {x: rng.standard_normal(xs), f: rng.standard_normal(fs), dy: rng.standard_normal((9, 5, 5, 12))}
    monkeypatch.setattr(conv, "SCRATCH_BYTES", 1)
    seen = []
    real = conv._Conv.batch_blocks
    monkeypatch.setattr(conv._Conv, "batch_blocks", lambda self, b: seen.append(real(self, b)) or seen[-1])
    monkeypatch.setattr(conv, "MIN_BLOCK_ROWS", 0)
    single = gr.Session(graph, backend="numpy").run([y, dx, df], feeds)
    assert seen and all(len(blocks) == 9 for blocks in seen)
    seen.clear()
    monkeypatch.setattr(conv, "MIN_BLOCK_ROWS", 100)      # 25 positions an entry: 4 entries, 3 blocks of 3
    grown = gr.Session(graph, backend="numpy").run([y, dx, df], feeds)
    assert seen and all(blocks == [(0, 3), (3, 6), (6, 9)] for blocks in seen)
    for a, b in zip(single, grown):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grown[0], _reference_conv(feeds[x], feeds[f], 1, "SAME"), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_kernels_work_shapes_out_anew_for_each_shape_and_refuse_bad_ones_every_time(backend):
    """A convolution kernel keeps what it worked out from its inputs' shapes (a ShapeMemo):
    one node fed batches of several sizes, more of them than it keeps, in turn and again, gives
    each its own values; a wrong input_sizes or out_backprop is refused on every call, not
    only the first."""
    if backend == "numba":
        pytest.importorskip("numba")
    rng = np.random.default_rng(11)
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(np.float64, [None, 7, 6, 3])
        f = gr.placeholder(np.float64, [3, 3, 3, 4])
        sizes = gr.placeholder(np.int32, [4])
        dy = gr.placeholder(np.float64, [None, 4, 3, 4])
        opts = {"strides": [1, 2, 2, 1], "padding": "SAME"}
        y = gr.apply_op("Conv2D", x, f, **opts)
        dx = gr.apply_op("Conv2DBackpropInput", sizes, f, dy, **opts)
        df = gr.apply_op("Conv2DBackpropFilter", x, gr.constant([3, 3, 3, 4]), dy, **opts)
        depth = gr.apply_op("DepthwiseConv2dNative", x, f[:, :, :, :1], **opts)
        ddx = gr.apply_op("DepthwiseConv2dNativeBackpropInput", sizes, f[:, :, :, :1], dy[..., :3], **opts)
    session = gr.Session(graph, backend=backend)
    fv = rng.standard_normal((3, 3, 3, 4))
    batches = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 2, 9, 1]        # more than a ShapeMemo keeps, then again
    assert len(set(batches)) > ShapeMemo().size
    for n in batches:
        xv, dyv = rng.standard_normal((n, 7, 6, 3)), rng.standard_normal((n, 4, 3, 4))
        feeds = {x: xv, f: fv, sizes: np.array([n, 7, 6, 3], np.int32), dy: dyv}
        yv, dxv, dfv, dv, ddxv = session.run([y, dx, df, depth, ddx], feeds)
        np.testing.assert_allclose(yv, _reference_conv(xv, fv, 2, "SAME"), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(dv, _reference_conv(xv, fv[..., :1].transpose(0, 1, 3, 2), 2, "SAME"),
                                   rtol=1e-12, atol=1e-12)
        inner = float(np.sum(dyv * yv))
        assert abs(float(np.sum(dxv * xv)) - inner) < 1e-9 * max(1.0, abs(inner))
        assert abs(float(np.sum(dfv * fv)) - inner) < 1e-9 * max(1.0, abs(inner))
        d_inner = float(np.sum(dyv[..., :3] * dv))
        assert abs(float(np.sum(ddxv * xv)) - d_inner) < 1e-9 * max(1.0, abs(d_inner))
        wrong = {**feeds, sizes: np.array([n, 9, 6, 3], np.int32)}   # a 9-row input gives 5 output rows
        for _ in range(2):
            with pytest.raises(gr.errors.ExecutionError, match="Conv2DBackpropInput") as raised:
                session.run(dx, wrong)
            assert "out_backprop has shape" in str(raised.value)
