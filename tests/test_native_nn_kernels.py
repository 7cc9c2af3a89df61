"""The nn family's native loops (nn/native_kernels) give the numba loops' values (nn/numba_kernels).

Each native loop and the numba loop compiled from numba_kernels' source (compile_module, as
numba_kernels builds them where native kernels are not available) run on the same random
inputs, float32 and float64: odd sizes, strides 1 and 2, dilations, padding before the input
(top/left > 0), multipliers 1 and 3, a batch range n0..n1 inside the batch. Both loops do the
same operations in the same order (the float32 exp and log of softmax are the same polynomials
in both), so the results are compared bit for bit (NaN equal to NaN).
"""
from __future__ import annotations

import numpy as np
import pytest

from gradreg.kernel_support import compile_module

pytest.importorskip("numba")
native_kernels = pytest.importorskip("gradreg_plugins.nn.native_kernels")
if not native_kernels.available():
    pytest.skip("native kernels are not available here", allow_module_level=True)

from gradreg_plugins.nn import numba_kernels  # noqa: E402  (after the skips)

DTYPES = [np.float32, np.float64]

# (strides, dilations, top, left)
GEOMETRIES = [((1, 1), (1, 1), 0, 0), ((1, 1), (1, 1), 1, 1), ((2, 2), (1, 1), 1, 0), ((1, 2), (2, 1), 2, 1),
              ((2, 1), (2, 2), 0, 2)]
# (n, n0, n1): the whole batch and a range inside it
BATCHES = [(3, 0, 3), (5, 1, 4)]


def _numba(source: str, dtype, name: str):
    return getattr(compile_module(source, np.dtype(dtype)), name)


def _random(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def _out_size(size: int, k: int, stride: int, dilation: int, before: int) -> int:
    """An output size whose windows reach past both ends of the input (what SAME padding and more give)."""
    return (size + 2 * before + 1 - (k - 1) * dilation - 1) // stride + 2


def _run_both(native, numba, inputs, outputs, *scalars):
    """Both loops on ``inputs`` and copies of ``outputs`` (filled alike, so entries a loop does not
    write compare equal); the outputs each wrote."""
    results = []
    for loop in (native, numba):
        outs = [o.copy() for o in outputs]
        loop(*inputs, *outs, *scalars)
        results.append(outs)
    return results


def _assert_same(results) -> None:
    for got, want in zip(*results):
        np.testing.assert_array_equal(got, want)


# -- bias addition, softmax ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, shapes", [
    ("bias_add_last", [(7, 5), (5,)]), ("bias_add_last", [(1, 1), (1,)]),
    ("bias_add_middle", [(3, 5, 7), (5,)]), ("bias_add_middle", [(2, 1, 9), (1,)]),
])
def test_bias_add(dtype, name, shapes):
    rng = np.random.default_rng(1)
    value, bias = (_random(rng, s, dtype) for s in shapes)
    results = _run_both(native_kernels.loop(dtype, name), _numba(numba_kernels._LOOPS, dtype, name),
                        [value, bias], [np.full(shapes[0], 9.0, dtype)])
    _assert_same(results)
    np.testing.assert_array_equal(results[0][0], value + (bias if name == "bias_add_last" else bias[:, None]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(13, 5), (1000, 3), (1, 1), (0, 4)])
def test_bias_add_grad(dtype, shape):
    rng = np.random.default_rng(2)
    grad = _random(rng, shape, dtype) * 100
    results = _run_both(native_kernels.loop(dtype, "bias_add_grad_last"),
                        _numba(numba_kernels._LOOPS, dtype, "bias_add_grad_last"),
                        [grad], [np.full(shape[1], 9.0, dtype)])
    _assert_same(results)


def _softmax_input(dtype, n: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((10, n)) * 30).astype(dtype)
    x[1] = rng.uniform(-120, 90, n)             # float32 exp's clamps and its subnormal results
    x[2, 0] = np.nan                            # the max NaN from the first value on
    x[3, -1] = 1e3                              # the max last
    x[4] = -np.inf                              # all -inf: -inf - -inf is NaN, as NumPy's
    x[5, n // 2] = np.inf
    x[6] = 0.0
    x[7, -1] = np.nan                           # a NaN last
    x[8] = x[8] * 1e-40                         # subnormal values (float32)
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 33, 1001])
def test_softmax(dtype, name, n):
    """Every row length's four running sums and the rest; the special rows of
    tests/test_numba_kernels' softmax test."""
    x = _softmax_input(dtype, n)
    with np.errstate(all="ignore"):
        results = _run_both(native_kernels.loop(dtype, name), _numba(numba_kernels._LOOPS, dtype, name),
                            [x], [np.full(x.shape, 9.0, dtype)])
    _assert_same(results)
    assert np.isnan(results[0][0][2]).all() and np.isnan(results[0][0][4]).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_of_no_rows(dtype):
    out = np.empty((0, 3), dtype)
    native_kernels.loop(dtype, "softmax")(np.empty((0, 3), dtype), out)
    native_kernels.loop(dtype, "log_softmax")(np.empty((4, 0), dtype), np.empty((4, 0), dtype))


# -- depthwise convolution ----------------------------------------------------------------------------

def _depthwise_case(dtype, kind: str, multiplier: int, geometry, batch):
    """(inputs, outputs, scalars) of the depthwise loop of ``kind``: x (n, 7, 6, 3), f (3, 2, 3, m)."""
    (sh, sw), (dh, dw), top, left = geometry
    n, n0, n1 = batch
    h, w, c, kh, kw = 7, 6, 3, 3, 2
    oh, ow = _out_size(h, kh, sh, dh, top), _out_size(w, kw, sw, dw, left)
    rng = np.random.default_rng(4)
    x = _random(rng, (n, h, w, c), dtype)
    f = _random(rng, (kh, kw, c, multiplier), dtype)
    dy = _random(rng, (n, oh, ow, c * multiplier), dtype)
    scalars = (sh, sw, dh, dw, top, left, n0, n1)
    if kind == "forward":
        return [x, f], [np.full((n, oh, ow, c * multiplier), 9.0, dtype)], scalars
    if kind == "input":
        return [dy, f], [np.full((n, h, w, c), 9.0, dtype)], scalars
    return [x, dy], [np.full(f.shape, 9.0, dtype)], scalars


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["forward", "input", "filter"])
@pytest.mark.parametrize("multiplier_one, multiplier", [(True, 1), (False, 1), (False, 3)])
@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("batch", BATCHES)
def test_depthwise(dtype, kind, multiplier_one, multiplier, geometry, batch):
    inputs, outputs, scalars = _depthwise_case(dtype, kind, multiplier, geometry, batch)
    numba = _numba(numba_kernels._depthwise_source(multiplier_one), dtype, numba_kernels._DEPTHWISE_NAMES[kind])
    results = _run_both(native_kernels.depthwise_loop(dtype, kind, multiplier_one), numba, inputs, outputs, *scalars)
    _assert_same(results)
    n0, n1 = scalars[-2:]
    if kind != "filter":        # the batch entries outside n0..n1 left as they were
        assert (results[0][0][:n0] == 9).all() and (results[0][0][n1:] == 9).all()


# -- Conv2D's loops ---------------------------------------------------------------------------------------

def _conv_case(dtype, name: str, geometry, n: int):
    (sh, sw), (dh, dw), top, left = geometry
    h, w, c, kh, kw, o = 7, 5, 3, 3, 2, 4
    oh, ow = _out_size(h, kh, sh, dh, top), _out_size(w, kw, sw, dw, left)
    rng = np.random.default_rng(6)
    scalars = (sh, sw, dh, dw, top, left)
    if name == "gather":
        return [_random(rng, (n, h, w, kh, kw, o), dtype)], [np.full((n, oh, ow, o), 9.0, dtype)], scalars
    if name == "spread":
        return [_random(rng, (n, oh, ow, o), dtype)], [np.full((n, h, w, kh, kw, o), 9.0, dtype)], scalars
    return [_random(rng, (n, oh, ow, kh, kw, c), dtype)], [np.full((n, h, w, c), 9.0, dtype)], scalars


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["gather", "spread", "col2im"])
@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("n", [1, 3])
def test_conv(dtype, name, geometry, n):
    inputs, outputs, scalars = _conv_case(dtype, name, geometry, n)
    results = _run_both(native_kernels.conv_loop(dtype, name), _numba(numba_kernels._CONV_LOOPS, dtype, name),
                        inputs, outputs, *scalars)
    _assert_same(results)


# -- Conv2D's direct form ----------------------------------------------------------------------------------

class _Limits:
    def check_elements(self, *args):
        pass

    def check_shape(self, *args):
        pass


def _guarded(rng, shape, dtype):
    """A random C-contiguous array whose memory has a batch entry of NaN before and after it: a
    direct loop reading outside the array would carry a NaN into its result."""
    big = np.full((shape[0] + 2, *shape[1:]), np.nan, dtype)
    big[1:-1] = _random(rng, shape, dtype)
    return big[1:-1]


# (strides, dilations, padding, explicit pads)
DIRECT_GEOMETRIES = [((1, 1), (1, 1), "SAME", ()), ((1, 1), (1, 1), "VALID", ()), ((2, 2), (1, 1), "SAME", ()),
                     ((1, 2), (2, 1), "SAME", ()), ((2, 1), (1, 2), "VALID", ()),
                     ((1, 1), (1, 1), "EXPLICIT", ((0, 0), (2, 0), (0, 3), (0, 0))),
                     ((1, 1), (2, 2), "EXPLICIT", ((0, 0), (3, 1), (1, 2), (0, 0)))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geometry", DIRECT_GEOMETRIES)
@pytest.mark.parametrize("c, out, window, size", [(3, 8, (3, 3), (9, 23)), (16, 4, (3, 3), (6, 19)),
                                                 (5, 6, (2, 3), (7, 13)), (1, 1, (3, 2), (4, 5)),
                                                 (4, 16, (1, 1), (5, 6)), (12, 10, (3, 3), (5, 14)),
                                                 (12, 2, (3, 3), (5, 14))])
def test_direct_conv(dtype, geometry, c, out, window, size):
    """Conv2D and its backprops by the direct loops (nn/conv.py's direct form) against the
    NumPy forms: widths whose inside columns leave every rest of a block (4, 2, 1), windows
    reaching into the padding on every side, strides, dilations, channels from 1 to 16 (10 and
    12: vectors in parts of 8 and 2, 8 and 4 lanes), a 1x1 strided window, the filter gradient
    in vectors of the input's channels where they are few outputs (16 -> 4, 12 -> 2); inputs
    whose memory is guarded by NaN."""
    from gradreg_plugins.nn import conv
    from gradreg_plugins.nn.windows import Geometry
    strides, dilations, padding, explicit = geometry
    if padding == "EXPLICIT":
        pads = (explicit[1], explicit[2])
    else:
        pads = ((0, 0), (0, 0))
    g = Geometry("NHWC", strides, dilations, padding, pads)
    n = 3
    try:
        c_ = conv._Conv(g, (n, *size, c), window, 1, out, _Limits(), None)
    except ValueError:
        pytest.skip("no output for this window")
    if c_.empty:
        pytest.skip("no output for this window")
    rng = np.random.default_rng(11)
    x = _guarded(rng, (n, *size, c), dtype)
    f = _guarded(rng, (*window, c, out), dtype)
    dy = _guarded(rng, (n, c_.oh, c_.ow, out), dtype)
    itemsize = np.dtype(dtype).itemsize
    t = np.dtype(dtype)
    forward = conv.DirectLoop(native_kernels.direct_conv_loop(t, "forward", out, conv.direct_block(out, itemsize)),
                              out, t)
    backward = conv.DirectLoop(native_kernels.direct_conv_loop(t, "forward", c, conv.direct_block(c, itemsize)), c, t)
    filt = conv.DirectLoop(native_kernels.direct_conv_loop(t, "filter", out, conv.direct_block(out, itemsize, c)),
                           out, t)
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    direct_y = conv._forward(c_, x, f, dtype, direct=forward)
    np.testing.assert_allclose(direct_y, conv._forward(c_, x, f, dtype), **tol)
    want_df = conv._backprop_filter(c_, x, dy, dtype)
    direct_df = conv._backprop_filter(c_, x, dy, dtype, direct=filt)
    np.testing.assert_allclose(direct_df, want_df, **tol)
    if (c, out) in ((16, 4), (12, 2)):
        assert conv._filter_wide(c, out, itemsize) is (dtype == np.float32 or c == 12)
    if conv._filter_wide(c, out, itemsize):
        wide = conv.DirectLoop(native_kernels.direct_conv_loop(t, "filter_wide", c, out), c, t, out)
        np.testing.assert_allclose(conv._backprop_filter(c_, x, dy, dtype, direct=wide), want_df, **tol)
        assert conv._direct_takes(wide, c_, c, x, dy) is (not c_.pointwise)
    want_dx = conv._backprop_input(c_, f, dy, dtype)
    np.testing.assert_allclose(conv._backprop_input(c_, f, dy, dtype, direct=backward), want_dx, **tol)
    # the direct form ran (it gives other roundings than im2col's products: not bit-equal everywhere)
    assert conv._direct_takes(forward, c_, out, x, f) is (not c_.pointwise)
    assert conv._direct_takes(filt, c_, out, x, dy) is (not c_.pointwise)


@pytest.mark.parametrize("dtype", DTYPES)
def test_direct_conv_padding_wider_than_the_output(dtype):
    """Explicit padding wider than the output (an input one column wide, three columns of
    padding before a 3x3 window): no output column has every tap inside, and the loop writes
    none past the output's end (the memory after it is checked)."""
    from gradreg_plugins.nn import conv
    from gradreg_plugins.nn.windows import Geometry
    g = Geometry("NHWC", (1, 1), (1, 1), "EXPLICIT", ((3, 0), (3, 0)))
    n, channels = 2, 4
    c_ = conv._Conv(g, (n, 3, 1, 5), (3, 3), 1, channels, _Limits(), None)
    assert (c_.oh, c_.ow) == (4, 2) and conv._inside(1, c_.ow, 1, 0, 3) == (2, 2)
    rng = np.random.default_rng(13)
    t = np.dtype(dtype)
    x, f = _guarded(rng, (n, 3, 1, 5), t), _guarded(rng, (3, 3, 5, channels), t)
    direct = conv.DirectLoop(native_kernels.direct_conv_loop(t, "forward", channels, conv.direct_block(channels, 4)),
                             channels, t)
    memory = np.full((n + 1, c_.oh, c_.ow, channels), 7.0, t)
    got = conv._correlate(c_, x, f, memory[:n], (1, 1), (3, 3), direct)
    assert (memory[n] == 7.0).all()
    np.testing.assert_allclose(got, conv._forward(c_, x, f, dtype), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_direct_conv_splits_the_batch(monkeypatch, dtype):
    """A convolution large enough for two threads: the batch in pieces, the filter gradient's
    parts added, the values those of one thread."""
    from gradreg_plugins.nn import conv
    from gradreg_plugins.nn.windows import Geometry
    g = Geometry("NHWC", (1, 1), (1, 1), "SAME", ((0, 0), (0, 0)))
    c_ = conv._Conv(g, (8, 32, 32, 8), (3, 3), 1, 8, _Limits(), None)
    rng = np.random.default_rng(12)
    t = np.dtype(dtype)
    x, f, dy = _random(rng, (8, 32, 32, 8), t), _random(rng, (3, 3, 8, 8), t), _random(rng, (8, 32, 32, 8), t)
    block = conv.direct_block(8, t.itemsize)
    forward = conv.DirectLoop(native_kernels.direct_conv_loop(t, "forward", 8, block), 8, t)
    filt = conv.DirectLoop(native_kernels.direct_conv_loop(t, "filter", 8, conv.direct_block(8, t.itemsize, 8)), 8, t)
    results = []
    for threads in ("1", "2"):
        monkeypatch.setenv("GRADREG_THREADS", threads)
        parts = []
        monkeypatch.setattr(conv.ks, "parallel", lambda fn, count, threads_, real=conv.ks.parallel, seen=parts:
                            seen.append(count) or real(fn, count, threads_))
        results.append((conv._forward(c_, x, f, dtype, direct=forward),
                        conv._backprop_filter(c_, x, dy, dtype, direct=filt)))
        monkeypatch.undo()
        assert bool(parts) is (threads == "2")
    np.testing.assert_array_equal(results[0][0], results[1][0])
    scale = np.abs(results[0][1]).max()      # sums of 8192 products, in another order
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=tol, atol=tol * scale)


def test_direct_form_by_static_shapes():
    """Which kind of a Conv2D node gets a direct loop, by its static shapes (conv.direct_form)."""
    import gradreg as gr
    from gradreg_plugins.nn import conv

    def forms(shape, filt, strides, dtype=gr.float32):
        graph = gr.Graph()
        with graph.as_default():
            x = gr.placeholder(dtype, shape)
            y = gr.apply_op("Conv2D", x, gr.placeholder(dtype, filt), strides=strides, padding="SAME")
            if None in shape + filt:
                return conv.direct_form(y.op, "forward")
            dy = gr.placeholder(dtype, y.shape)
            dx = gr.apply_op("Conv2DBackpropInput", gr.constant(shape), gr.placeholder(dtype, filt), dy,
                             strides=strides, padding="SAME")
            df = gr.apply_op("Conv2DBackpropFilter", x, gr.constant(filt), dy, strides=strides, padding="SAME")
        return conv.direct_form(y.op, "forward"), conv.direct_form(dx.op, "input"), conv.direct_form(df.op, "filter")
    one = [1, 1, 1, 1]
    # the filter gradient of a few output channels: vectors of the input's channels (filter_wide)
    assert forms([2, 8, 8, 16], [3, 3, 16, 4], one) == (("forward", 4, 8), ("forward", 16, 4),
                                                        ("filter_wide", 16, 4))
    assert forms([2, 8, 8, 16], [3, 3, 16, 4], one, gr.float64)[2] == ("filter", 4, 8)   # 32 bytes: a register
    assert forms([2, 8, 8, 32], [3, 3, 32, 4], one)[2] == ("filter", 4, 8)     # 4 vectors of 4 registers: too many
    assert forms([2, 8, 8, 3], [3, 3, 3, 8], [1, 2, 2, 1]) == (("forward", 8, 8), None,   # strided: no input form
                                                           ("filter", 8, 3))
    assert forms([2, 8, 8, 8], [3, 3, 8, 8], one, gr.float64) == (("forward", 8, 4), ("forward", 8, 4),
                                                                  ("filter", 8, 4))
    assert forms([2, 8, 8, 16], [1, 1, 16, 4], one) == (None, None, None)              # pointwise: a product
    assert forms([2, 8, 8, 64], [3, 3, 64, 64], one) == (None, None, None)             # 256 bytes of channels
    assert forms([2, 8, 8, 32], [3, 3, 32, 32], one) == (("forward", 32, 2), ("forward", 32, 2),
                                                         None)                         # 4 KiB a tap's gradient
    assert forms([2, 8, 8, None], [3, 3, None, 4], one) is None                        # unknown channels
    assert forms([2, 8, 8, 4], [3, 3, 4, 4], one, gr.float16) == (None, None, None)
    # accumulators: 8 registers of 32 bytes, a vector's part of a power of two lanes one at least
    assert [conv.direct_block(n, 4) for n in (1, 3, 4, 8, 10, 14, 16, 24, 32)] == [8, 4, 8, 8, 4, 2, 4, 2, 2]
    assert [conv.direct_block(n, 8) for n in (3, 4, 8, 16)] == [4, 8, 4, 2]
    assert conv.direct_block(4, 4, limit=3) == 3


# -- average pooling -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("window, strides, padding", [((2, 2), (2, 2), "VALID"), ((3, 3), (1, 1), "SAME"),
                                                      ((3, 2), (2, 1), "SAME"), ((2, 3), (1, 2), "VALID"),
                                                      ((3, 3), (2, 2), "SAME")])
@pytest.mark.parametrize("shape", [(3, 7, 9, 10), (2, 5, 4, 1)])
def test_avg_pool(monkeypatch, dtype, window, strides, padding, shape):
    """AvgPool and AvgPoolGrad by the native loops (the numba backend's kernels, from the first
    call) give the NumPy kernels' bits: the same sums in the same order."""
    import gradreg as gr
    from gradreg.backends.numba import jit
    rng = np.random.default_rng(9)
    graph = gr.Graph()
    ksize, step = [1, *window, 1], [1, *strides, 1]
    with graph.as_default():
        x = gr.placeholder(dtype, shape)
        y = gr.apply_op("AvgPool", x, ksize=ksize, strides=step, padding=padding)
        g = gr.placeholder(dtype, y.shape)
        dx = gr.apply_op("AvgPoolGrad", gr.constant(list(shape)), g, ksize=ksize, strides=step, padding=padding)
    values = {x: _random(rng, shape, dtype)}
    values[g] = _random(rng, gr.Session(graph, backend="numpy").run(y, values).shape, dtype)
    want = gr.Session(graph, backend="numpy").run([y, dx], values)
    ran = []
    real = native_kernels.avg_pool_loop

    def counted(dtype_, kind):
        loop = real(dtype_, kind)
        return lambda *args: ran.append(kind) or loop(*args)
    monkeypatch.setattr(native_kernels, "avg_pool_loop", counted)
    monkeypatch.setenv("GRADREG_JIT", "eager")
    session = gr.Session(graph, backend="numba")
    plan = session.plan_for([y, dx], list(values))
    assert sorted(t.name.split()[0] for _, t in plan.upgrades) == ["AvgPool", "AvgPoolGrad"]
    for _ in range(2):
        for got, expected in zip(session.run([y, dx], values), want):
            np.testing.assert_array_equal(got, expected)
    assert jit.wait_for_kernels(60)
    assert {"forward", "grad"} <= set(ran)


# -- max pooling's gradient -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("strides, window, top, left", [((1, 1), (3, 3), 1, 1), ((2, 2), (3, 2), 0, 1),
                                                        ((2, 1), (2, 2), 0, 0), ((1, 2), (3, 3), 2, 0)])
@pytest.mark.parametrize("batch", BATCHES)
def test_max_pool_grad(dtype, strides, window, top, left, batch):
    """Ties (values rounded to few levels: the first tap inside the input wins, a later one only
    when strictly greater) and NaN inputs."""
    (sh, sw), (kh, kw) = strides, window
    n, n0, n1 = batch
    h, w, c = 7, 6, 5
    oh, ow = _out_size(h, kh, sh, 1, top), _out_size(w, kw, sw, 1, left)
    rng = np.random.default_rng(7)
    x = np.round(rng.standard_normal((n, h, w, c)) * 2).astype(dtype)
    x[0, 2, 3, 1] = np.nan
    g = _random(rng, (n, oh, ow, c), dtype)
    results = []
    numba = _numba(numba_kernels._MAX_POOL_GRAD, dtype, "max_pool_grad")
    for loop in (native_kernels.max_pool_grad_loop(dtype), numba):
        dx = np.full(x.shape, 9.0, dtype)
        loop(x, g, dx, sh, sw, kh, kw, top, left, n0, n1, np.empty(c, dtype), np.empty(c, np.int64))
        results.append([dx])
    _assert_same(results)
    assert (results[0][0][:n0] == 9).all() and (results[0][0][n1:] == 9).all()


# -- numba_kernels takes the native loops ----------------------------------------------------------------

def test_numba_kernels_build_the_native_loops():
    from gradreg_plugins.nn import conv
    f32 = np.dtype(np.float32)
    assert numba_kernels._loop(f32, "softmax") is native_kernels.loop(f32, "softmax")
    assert numba_kernels._depthwise_loop(f32, "input", True) is native_kernels.depthwise_loop(f32, "input", True)
    assert numba_kernels._conv_loop(f32, "col2im") is native_kernels.conv_loop(f32, "col2im")
    assert numba_kernels._pool_loop(f32) is native_kernels.max_pool_grad_loop(f32)
    direct = numba_kernels._direct_loop(f32, conv.DirectForm("forward", 16, 4))
    assert direct.run is native_kernels.direct_conv_loop(f32, "forward", 16, 4)     # an input backprop's
    assert (direct.channels, direct.dtype, direct.outputs) == (16, f32, 0)
    wide = numba_kernels._direct_loop(f32, conv.DirectForm("filter_wide", 16, 4))
    assert wide.run is native_kernels.direct_conv_loop(f32, "filter_wide", 16, 4)
    assert (wide.channels, wide.outputs) == (16, 4)


def test_numba_kernels_fall_back_to_numba(monkeypatch):
    f64 = np.dtype(np.float64)
    numba = numba_kernels._loops(f64).bias_add_last

    def unsupported(*args):
        raise native_kernels.Unsupported("no native form")
    monkeypatch.setattr(native_kernels, "loop", unsupported)
    assert numba_kernels._loop(f64, "bias_add_last") is numba
    monkeypatch.setattr(native_kernels, "available", lambda: False)
    assert numba_kernels._loop(f64, "bias_add_last") is numba
    assert numba.signatures        # compiled by its first call
