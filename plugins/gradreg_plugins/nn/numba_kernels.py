"""Numba kernels of the nn family (imported only when the numba backend is first used).

Activations and their gradients are elementwise descriptions for gradreg.backends.numba
(fused with their neighbours, or their NumPy kernels alone); so is BiasAdd with its
channels last. BiasAdd, BiasAddGrad (channels last), Softmax and LogSoftmax are compiled
loops over float32/float64 where they run alone, as they measured faster than NumPy
(bench: 1.5-3x; BiasAddGrad over few channels more).
Compiled kernels are Tiered (gradreg.registry.kernels): the NumPy kernel runs until
``build`` (which compiles, see gradreg.backends.numba.jit) has made the loop's.
Every compiled loop here is built as a native kernel (nn/native_kernels: the same loop,
compiled by LLVM in tens of milliseconds with the GIL released) where native kernels are
available, and by numba otherwise.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from gradreg import kernel_support as ks
from gradreg.kernel_support import compile_module, elementwise, native_loop, numba_available
from gradreg.model import dtypes
from gradreg.registry import get_registry
from gradreg.registry.kernels import ShapeMemo, Tiered
from gradreg_plugins.nn import conv as conv_kernels
from gradreg_plugins.nn import family, pooling
from gradreg_plugins.nn.kernels import SELU_ALPHA, SELU_SCALE
from gradreg_plugins.nn.windows import text

try:    # the native loops import llvmlite, which may be missing where numba is
    from gradreg_plugins.nn import native_kernels
except ImportError:
    native_kernels = None  # type: ignore[assignment]

_FLOATS = (dtypes.float32, dtypes.float64)


def describe(op_type: str, expr: str, cost: int = 1, accepts=None, consts=None) -> None:
    """Register ``expr`` as the elementwise description of ``op_type``; ``consts(op)`` gives
    named constants from the node's attrs."""
    options = {"cost": cost}
    if accepts is not None:
        options["accepts"] = accepts

    def factory(op, ctx):
        return elementwise(op, ctx, expr, **options, **(consts(op) if consts else {}))
    family.kernel(op_type, backend="numba")(factory)


def _selu_consts(op) -> dict:
    return {"scale": SELU_SCALE, "scale_alpha": SELU_SCALE * SELU_ALPHA}


def _alpha(op) -> dict:
    return {"alpha": op.get_attr("alpha")}


def _softplus_threshold(op) -> dict:
    """TensorFlow's log(epsilon) + 2: beyond it softplus(x) is x or exp(x) to machine precision."""
    return {"threshold": float(np.log(np.finfo(op.get_attr("T").storage).eps) + 2)}


# -- activations and their gradients (NumPy broadcasts scalars in all of them) -------------------

describe("Relu", "{where}({0} < {=0}, {=0}, {0})")
describe("Relu6", "{minimum}({maximum}({0}, {=0}), {=6})", cost=2)
describe("Elu", "{where}({0} < {=0}, {expm1}({0}), {0})", cost=3)
describe("Selu", "{where}({0} < {=0}, {scale_alpha} * {expm1}({0}), {scale} * {0})", cost=5, consts=_selu_consts)
describe("Softplus", "{where}({0} > -{threshold}, {0}, {where}({0} < {threshold}, {exp}({0}), "
                     "{log}({exp}({0}) + {=1})))", cost=7, consts=_softplus_threshold)
describe("Softsign", "{0} / ({=1} + abs({0}))", cost=3)
describe("LeakyRelu", "{where}({0} > {=0}, {0}, {0} * {alpha})", cost=3, consts=_alpha)

# g * (f > 0) as NumPy computes it: an infinite g times 0 is NaN.
describe("ReluGrad", "{0} * {where}({1} > {=0}, {=1}, {=0})", cost=3)
describe("Relu6Grad", "{0} * {where}(({1} > {=0}) & ({1} < {=6}), {=1}, {=0})", cost=5)
describe("EluGrad", "{where}({1} < {=0}, {0} * ({1} + {=1}), {0})", cost=4)
describe("SeluGrad", "{where}({1} < {=0}, {0} * ({1} + {scale_alpha}), {0} * {scale})", cost=4,
         consts=_selu_consts)
describe("SoftplusGrad", "{0} / ({exp}(-{1}) + {=1})", cost=4)
describe("SoftsignGrad", "{0} / (({=1} + abs({1})) * ({=1} + abs({1})))", cost=5)
describe("LeakyReluGrad", "{where}({1} > {=0}, {0}, {0} * {alpha})", cost=3, consts=_alpha)


# -- compiled loops ------------------------------------------------------------------------------

# Compiled through gradreg.backends.numba (disk cache; {exp} & co. are its fast float32
# functions in the float32 module).
_LOOPS = """
@njit(cache=True, nogil=True)
def bias_add_last(value, bias, out):
    # out[i, c] = value[i, c] + bias[c]
    for i in range(value.shape[0]):
        for c in range(value.shape[1]):
            out[i, c] = value[i, c] + bias[c]


@njit(cache=True, nogil=True)
def bias_add_middle(value, bias, out):
    # out[i, c, k] = value[i, c, k] + bias[c]
    for i in range(value.shape[0]):
        for c in range(value.shape[1]):
            b = bias[c]
            for k in range(value.shape[2]):
                out[i, c, k] = value[i, c, k] + b


@njit(cache=True, nogil=True)
def bias_add_grad_last(grad, out):
    # out[c] = the sum of grad[:, c], row after row as NumPy adds them
    out[:] = 0
    for i in range(grad.shape[0]):
        for c in range(grad.shape[1]):
            out[c] += grad[i, c]


@njit(inline="always")
def _sum(values):
    # four running sums, so the additions pipeline
    s0 = s1 = s2 = s3 = {=0}
    n = values.shape[0]
    j = 0
    while j + 4 <= n:
        s0 += values[j]
        s1 += values[j + 1]
        s2 += values[j + 2]
        s3 += values[j + 3]
        j += 4
    while j < n:
        s0 += values[j]
        j += 1
    return (s0 + s1) + (s2 + s3)


@njit(inline="always", error_model="numpy")
def _exp_shifted(row, out):
    # out = exp(row - max(row)); returns (max(row), sum(out)). The max is a loop of its own:
    # row.max() took numba 0.5-1 s more to compile (its generic reduction), a NaN kept as
    # NumPy's max keeps it.
    m = row[0]
    for j in range(1, row.shape[0]):
        v = row[j]
        if v > m or v != v:
            m = v
    for j in range(row.shape[0]):
        out[j] = {exp}(row[j] - m)
    return m, _sum(out)


@njit(cache=True, nogil=True, error_model="numpy")
def softmax(x, out):
    for i in range(x.shape[0]):
        m, total = _exp_shifted(x[i], out[i])
        inv = {=1} / total
        for j in range(x.shape[1]):
            out[i, j] = out[i, j] * inv


@njit(cache=True, nogil=True, error_model="numpy")
def log_softmax(x, out):
    for i in range(x.shape[0]):
        m, total = _exp_shifted(x[i], out[i])
        log_total = {log}(total)
        for j in range(x.shape[1]):
            out[i, j] = (x[i, j] - m) - log_total
"""


@functools.cache
def _loops(dtype: np.dtype):
    return compile_module(_LOOPS, dtype)


def _native(builder: str, *args):
    """The loop native_kernels' ``builder`` builds for ``args``, compiled now; None where it
    cannot (numba's runs then: kernel_support.native_loop)."""
    return native_loop(getattr(native_kernels, builder, None), *args)


# The shapes of the arrays numba's loops of _LOOPS are first called with (which compiles them).
_LOOP_SAMPLES = {"bias_add_last": ((1, 1), (1,), (1, 1)), "bias_add_middle": ((1, 1, 1), (1,), (1, 1, 1)),
                 "bias_add_grad_last": ((1, 1), (1,)), "softmax": ((1, 1), (1, 1)), "log_softmax": ((1, 1), (1, 1))}


def _loop(dtype: np.dtype, name: str):
    """The loop ``name`` of _LOOPS for arrays of ``dtype``, compiled now: native, else numba's."""
    loop = _native("loop", dtype, name)
    if loop is None:
        loop = getattr(_loops(dtype), name)
        loop(*(np.zeros(shape, dtype) for shape in _LOOP_SAMPLES[name]))   # compiled now
    return loop


def _three_dims(shape: tuple, axis: int) -> tuple[int, int, int]:
    """``shape`` as (before axis, axis, after axis). (math.prod: NumPy's prod took 3.5 us a
    call, and BiasAdd's compiled kernel, which asks this at each call, ran the slim ResNet's
    (8, 10) logits in 9.4 us against 2.0 us for NumPy's add.)"""
    axis %= len(shape)
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def _numpy_kernel(op, ctx):
    return get_registry().kernel_factory(op.type, "numpy")(op, ctx)


def _float_node(op) -> bool:
    """Whether the compiled loops can run the node (float32/float64, numba installed)."""
    return op.get_attr("T") in _FLOATS and numba_available()


def _channels_last(op) -> bool:
    return op.type == "BiasAddV1" or text(op.get_attr("data_format")) != "NCHW"


@family.kernel("BiasAdd", backend="numba")
@family.kernel("BiasAddV1", backend="numba")
def _bias_add(op, ctx):
    if not _float_node(op):
        return None
    last = _channels_last(op)
    axis = -1 if last else 1
    checked = _numpy_kernel(op, ctx)   # its checks and messages on bad shapes
    storage = op.get_attr("T").storage

    def build():
        loop = _loop(storage, "bias_add_last" if last else "bias_add_middle")

        def bias_add(value, bias):
            if value.ndim < 2 or bias.ndim != 1 or bias.shape[0] != value.shape[axis]:
                return checked(value, bias)
            out = np.empty(value.shape, value.dtype)
            dims = _three_dims(value.shape, axis)[:2] if last else _three_dims(value.shape, axis)
            loop(np.ascontiguousarray(value).reshape(dims), ks.writable(np.ascontiguousarray(bias)), out.reshape(dims))
            return out
        return bias_add
    tiered = Tiered(checked, build, f"{op.type} {op.name}", weight=_work(op))
    value, bias = op.inputs
    if last and bias.shape.rank == 1 and (value.shape.rank or 0) >= 2:
        # Channels last, the bias is a row of the value: fused with its neighbours (a batch
        # norm and an activation after a convolution: one pass instead of one per op); on its
        # own, the compiled loop.
        return elementwise(op, ctx, "{0} + {1}", accepts=ks.accept_arrays, unfused=tiered) or tiered
    return tiered


@family.kernel("BiasAddGrad", backend="numba")
def _bias_add_grad(op, ctx):
    # Summing the middle axis (NCHW) NumPy does as fast, pairwise.
    if not _float_node(op) or not _channels_last(op):
        return None
    checked = _numpy_kernel(op, ctx)
    storage = op.get_attr("T").storage

    def build():
        loop = _loop(storage, "bias_add_grad_last")

        def bias_add_grad(grad):
            if grad.ndim < 2:
                return checked(grad)
            out = np.empty(grad.shape[-1], grad.dtype)
            loop(np.ascontiguousarray(grad).reshape(-1, grad.shape[-1]), out)
            return out
        return bias_add_grad
    return Tiered(checked, build, f"{op.type} {op.name}", weight=_work(op))


def _row_kernel(name: str):
    def factory(op, ctx):
        if not _float_node(op):
            return None
        checked = _numpy_kernel(op, ctx)
        storage = op.get_attr("T").storage

        def build():
            loop = _loop(storage, name)

            def compute(x):
                if x.ndim == 0:
                    return checked(x)
                out = np.empty(x.shape, x.dtype)
                if x.size:
                    rows = x.shape[-1]
                    loop(np.ascontiguousarray(x).reshape(-1, rows), out.reshape(-1, rows))
                return out
            return compute
        return Tiered(checked, build, f"{op.type} {op.name}", weight=_work(op))
    return factory


family.kernel("Softmax", backend="numba")(_row_kernel("softmax"))
family.kernel("LogSoftmax", backend="numba")(_row_kernel("log_softmax"))


# -- depthwise convolution ------------------------------------------------------------------------

# NHWC; f is (kh, kw, c, multiplier); output channel c * multiplier + k. Each loop covers the
# batch entries n0..n1 (the kernel splits the batch over threads: gradreg.kernel_support)
# and skips the taps that fall in the padding instead of padding the input. The innermost
# loops (TAP_FORWARD & co.) come in two forms: for a multiplier of 1 (every MobileNet's: a
# channel's taps are one row) and the general one. Each form is a module of its own, and a node
# compiles only the one loop it runs (its kind; its multiplier's form when the graph says it):
# each loop is about half a second of numba.
_DEPTHWISE = """
@njit(cache=True, nogil=True)
def forward(x, f, out, sh, sw, dh, dw, top, left, n0, n1):
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    kh, kw, m = f.shape[0], f.shape[1], f.shape[3]
    for n in range(n0, n1):
        for oh in range(out.shape[1]):
            for ow in range(out.shape[2]):
                o = out[n, oh, ow]
                o[:] = {=0}
                for i in range(kh):
                    ih = oh * sh + i * dh - top
                    if ih < 0 or ih >= h:
                        continue
                    for j in range(kw):
                        iw = ow * sw + j * dw - left
                        if iw < 0 or iw >= w:
                            continue
                        xr = x[n, ih, iw]
                        fr = f[i, j]
                        TAP_FORWARD


@njit(cache=True, nogil=True)
def backprop_input(dy, f, dx, sh, sw, dh, dw, top, left, n0, n1):
    h, w, c = dx.shape[1], dx.shape[2], dx.shape[3]
    kh, kw, m = f.shape[0], f.shape[1], f.shape[3]
    for n in range(n0, n1):
        dx[n] = {=0}
        for oh in range(dy.shape[1]):
            for ow in range(dy.shape[2]):
                g = dy[n, oh, ow]
                for i in range(kh):
                    ih = oh * sh + i * dh - top
                    if ih < 0 or ih >= h:
                        continue
                    for j in range(kw):
                        iw = ow * sw + j * dw - left
                        if iw < 0 or iw >= w:
                            continue
                        d = dx[n, ih, iw]
                        fr = f[i, j]
                        TAP_INPUT


@njit(cache=True, nogil=True)
def backprop_filter(x, dy, df, sh, sw, dh, dw, top, left, n0, n1):
    # df: this part's sum, (kh, kw, c, m)
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    kh, kw, m = df.shape[0], df.shape[1], df.shape[3]
    df[:] = {=0}
    for n in range(n0, n1):
        for oh in range(dy.shape[1]):
            for ow in range(dy.shape[2]):
                g = dy[n, oh, ow]
                for i in range(kh):
                    ih = oh * sh + i * dh - top
                    if ih < 0 or ih >= h:
                        continue
                    for j in range(kw):
                        iw = ow * sw + j * dw - left
                        if iw < 0 or iw >= w:
                            continue
                        xr = x[n, ih, iw]
                        fr = df[i, j]
                        TAP_FILTER
"""

# The innermost loops: True, a multiplier of 1; False, any multiplier.
_DEPTHWISE_TAPS = {
    True: {"TAP_FORWARD": ["for k in range(c):", "    o[k] += xr[k] * fr[k, 0]"],
           "TAP_INPUT": ["for k in range(c):", "    d[k] += g[k] * fr[k, 0]"],
           "TAP_FILTER": ["for k in range(c):", "    fr[k, 0] += xr[k] * g[k]"]},
    False: {"TAP_FORWARD": ["for k in range(c):", "    v = xr[k]", "    for q in range(m):",
                            "        o[k * m + q] += v * fr[k, q]"],
            "TAP_INPUT": ["for k in range(c):", "    s = {=0}", "    for q in range(m):",
                          "        s += g[k * m + q] * fr[k, q]", "    d[k] += s"],
            "TAP_FILTER": ["for k in range(c):", "    v = xr[k]", "    for q in range(m):",
                           "        fr[k, q] += v * g[k * m + q]"]},
}


def _depthwise_source(multiplier_one: bool) -> str:
    source = _DEPTHWISE
    for marker, lines in _DEPTHWISE_TAPS[multiplier_one].items():
        source = source.replace(marker, ("\n" + " " * 24).join(lines))
    return source


# A thread gets at least this many flops of a depthwise convolution, in this many pieces.
_DEPTHWISE_FLOPS_PER_THREAD = 1.5e6
PIECES_PER_THREAD = 4


_DEPTHWISE_NAMES = {"forward": "forward", "input": "backprop_input", "filter": "backprop_filter"}


@functools.cache
def _depthwise_loop(dtype: np.dtype, kind: str, multiplier_one: bool):
    """The compiled loop of ``kind`` for arrays of ``dtype``, for a multiplier of 1 or the
    general one (which takes any multiplier), compiled now: native, else numba's."""
    native = _native("depthwise_loop", dtype, kind, multiplier_one)
    if native is not None:
        return native
    module = compile_module(_depthwise_source(multiplier_one), dtype)
    loop = getattr(module, _DEPTHWISE_NAMES[kind])
    one = np.zeros((1, 1, 1, 1), dtype)
    loop(one, one, one.copy(), 1, 1, 1, 1, 0, 0, 0, 1)       # compiled now, for 4-d arrays of ``dtype``
    return loop


def depthwise_variants(op, kind: str) -> tuple[bool, ...]:
    """Which of a depthwise node's loops to compile (True: the multiplier-1 one, False: the
    general one): by the multiplier its filter's static shape gives, both when it is unknown."""
    filt = conv_kernels.filter_tensor(op, kind)
    multiplier = filt.shape.as_list()[3] if filt.shape.rank == 4 else None
    if multiplier is None:
        return (True, False)
    return (multiplier == 1,)


def _geometry_args(conv) -> tuple:
    (sh, sw), (dh, dw) = conv.g.strides, conv.g.dilations
    return sh, sw, dh, dw, conv.top, conv.left


def _split_batch(n: int, work: float, work_per_thread: float, run) -> list:
    """``run(n0, n1)`` over a batch of ``n``, split over the threads ``work`` earns."""
    threads = min(ks.threads_for(work, work_per_thread), n)
    if threads <= 1:
        return [run(0, n)]
    # a few pieces a thread, taken as they come (a thread kept off its core leaves its pieces)
    pieces = ks.split(n, min(n, PIECES_PER_THREAD * threads))
    return ks.parallel(lambda i: run(*pieces[i]), len(pieces), threads)


def _batch_parts(conv, run) -> list:
    """``run(n0, n1)`` over the batch, split over the threads the convolution's size earns."""
    return _split_batch(conv.n, conv.flops, _DEPTHWISE_FLOPS_PER_THREAD, run)


def _depthwise_factory(kind: str):
    def factory(op, ctx):
        if not _float_node(op) or not numba_available():
            return None
        checked = _numpy_kernel(op, ctx)
        setup = conv_kernels.depthwise_setup(op, ctx, kind)
        fmt, storage = conv_kernels.layout_of(op), op.get_attr("T").storage
        variants = depthwise_variants(op, kind)

        def build():
            loops = {one: _depthwise_loop(storage, kind, one) for one in variants}
            general = loops.get(False)

            def loop_for(multiplier: int):
                # None: a multiplier the graph did not say, whose loop is not built (NumPy runs it)
                return loops.get(True, general) if multiplier == 1 else general
            compute = {"forward": _forward, "input": _input, "filter": _filter}[kind]
            return lambda *args: compute(loop_for, setup, fmt, storage, checked, *args)
        # ~18 flops an element (a 3x3 window): NumPy's tap-by-tap version is slowest here
        return Tiered(checked, build, f"{op.type} {op.name}", weight=18 * _work(op))
    return factory


def _work(op) -> float:
    """A node's output elements (a weight for which compiled kernel to build first)."""
    return float(max((t.shape.num_elements() or 0 for t in (*op.inputs, *op.outputs)), default=0))


def _usable(conv, storage, *arrays) -> bool:
    """Whether the loops take these arrays (else the NumPy kernel runs, raising its errors)."""
    return not conv.empty and all(a.dtype == storage for a in arrays)


def _forward(loop_for, setup, fmt, storage, checked, *args):
    conv, x, f = setup(*args)
    loop = loop_for(f.shape[3])
    if loop is None or not _usable(conv, storage, x, f):
        return checked(*args)
    x, f = np.ascontiguousarray(x), ks.writable(np.ascontiguousarray(f))
    out = np.empty((conv.n, conv.oh, conv.ow, conv.out_channels), storage)
    geometry = _geometry_args(conv)
    _batch_parts(conv, lambda n0, n1: loop(x, f, out, *geometry, n0, n1))
    return out if fmt == "NHWC" else out.transpose(0, 3, 1, 2)


def _input(loop_for, setup, fmt, storage, checked, *args):
    conv, f, dy = setup(*args)
    loop = loop_for(f.shape[3])
    if loop is None or not _usable(conv, storage, f, dy):
        return checked(*args)
    f, dy = ks.writable(np.ascontiguousarray(f)), np.ascontiguousarray(dy)
    dx = np.empty((conv.n, conv.h, conv.w, conv.c), storage)
    geometry = _geometry_args(conv)
    _batch_parts(conv, lambda n0, n1: loop(dy, f, dx, *geometry, n0, n1))
    return dx if fmt == "NHWC" else dx.transpose(0, 3, 1, 2)


def _filter(loop_for, setup, fmt, storage, checked, *args):
    conv, x, dy, shape = setup(*args)
    loop = loop_for(shape[3])
    if loop is None or not _usable(conv, storage, x, dy):
        return checked(*args)
    x, dy = np.ascontiguousarray(x), np.ascontiguousarray(dy)
    geometry = _geometry_args(conv)

    def run(n0, n1):
        df = np.empty(shape, storage)
        loop(x, dy, df, *geometry, n0, n1)
        return df
    partial = _batch_parts(conv, run)
    return partial[0] if len(partial) == 1 else np.sum(partial, axis=0, dtype=storage)


# -- Conv2D and its backprops: compiled loops for the forms that beat im2col (nn/conv.py) ---------

_CONV_LOOPS = """
@njit(cache=True, nogil=True)
def gather(z, out, sh, sw, dh, dw, top, left):
    n, oh, ow, o = out.shape
    h, w, kh, kw = z.shape[1], z.shape[2], z.shape[3], z.shape[4]
    for b in range(n):
        for y in range(oh):
            for x in range(ow):
                dst = out[b, y, x]
                dst[:] = {=0}
                for i in range(kh):
                    ih = y * sh + i * dh - top
                    if ih < 0 or ih >= h:
                        continue
                    for j in range(kw):
                        iw = x * sw + j * dw - left
                        if iw < 0 or iw >= w:
                            continue
                        src = z[b, ih, iw, i, j]
                        for k in range(o):
                            dst[k] += src[k]


@njit(cache=True, nogil=True)
def spread(dy, d, sh, sw, dh, dw, top, left):
    n, oh, ow, o = dy.shape
    h, w, kh, kw = d.shape[1], d.shape[2], d.shape[3], d.shape[4]
    d[:] = {=0}
    for b in range(n):
        for y in range(oh):
            for x in range(ow):
                src = dy[b, y, x]
                for i in range(kh):
                    ih = y * sh + i * dh - top
                    if ih < 0 or ih >= h:
                        continue
                    for j in range(kw):
                        iw = x * sw + j * dw - left
                        if iw < 0 or iw >= w:
                            continue
                        dst = d[b, ih, iw, i, j]
                        for k in range(o):
                            dst[k] = src[k]


@njit(cache=True, nogil=True)
def col2im(cols, dx, sh, sw, dh, dw, top, left):
    n, oh, ow, kh, kw, c = cols.shape
    h, w = dx.shape[1], dx.shape[2]
    for b in range(n):
        dx[b] = {=0}
        for y in range(oh):
            for x in range(ow):
                for i in range(kh):
                    ih = y * sh + i * dh - top
                    if ih < 0 or ih >= h:
                        continue
                    for j in range(kw):
                        iw = x * sw + j * dw - left
                        if iw < 0 or iw >= w:
                            continue
                        src = cols[b, y, x, i, j]
                        dst = dx[b, ih, iw]
                        for k in range(c):
                            dst[k] += src[k]
"""


_CONV_SAMPLES = {"gather": ((1,) * 6, (1,) * 4), "spread": ((1,) * 4, (1,) * 6), "col2im": ((1,) * 6, (1,) * 4)}


@functools.cache
def _conv_loop(dtype: np.dtype, name: str):
    """The compiled loop ``name`` for arrays of ``dtype``, compiled now (the others are not):
    native, else numba's."""
    native = _native("conv_loop", dtype, name)
    if native is not None:
        return native
    loop = getattr(compile_module(_CONV_LOOPS, dtype), name)
    loop(*(np.zeros(shape, dtype) for shape in _CONV_SAMPLES[name]), 1, 1, 1, 1, 0, 0)
    return loop


# A convolution kernel's compiled loop, by kind: (the NumPy kernel factory's argument, the loop).
_CONV_FORMS = {"forward": ("gather", "gather"), "input": ("scatter", "col2im"), "filter": ("spread", "spread")}


def _direct_loop(dtype: np.dtype, form: conv_kernels.DirectForm):
    """The direct loop ``form`` of a convolution kernel (conv.direct_form: an input backprop
    runs a forward loop over the input's channels) as conv.DirectLoop, compiled now; None where
    native kernels are unavailable."""
    loop = _native("direct_conv_loop", dtype, form.loop, form.channels, form.block)
    if loop is None:
        return None
    outputs = form.block if form.loop == "filter_wide" else 0     # (its accumulators: one an output channel)
    return conv_kernels.DirectLoop(loop, form.channels, np.dtype(dtype), outputs)


def _conv_factory(kernel_factory, kind: str):
    """The NumPy kernel until the compiled loops are built; then the same kernel given the
    compiled loop of its ``kind``, which it uses for the convolutions where that form is faster
    (nn/conv.py says which and gives the figures): the direct loop (native only) for the few
    output channels its static shapes show (conv.direct_form), else the loop of _CONV_FORMS
    (Conv2D and its filter backprop with few output channels a input channel, strided input
    backprops and those with few input channels). None (the NumPy kernel alone) for a node
    whose static shapes say neither runs: a 1x1 convolution, a strided Conv2D with many
    channels (nothing to compile)."""
    def factory(op, ctx):
        if not _float_node(op):
            return None
        direct = conv_kernels.direct_form(op, kind)      # built where native kernels are available
        may_run = conv_kernels.compiled_loop_may_run(op, kind)
        if direct is None and not may_run:
            return None
        checked = _numpy_kernel(op, ctx)
        storage = op.get_attr("T").storage
        argument, loop = _CONV_FORMS[kind]

        def build():
            if direct is not None:
                built = _direct_loop(storage, direct)
                if built is not None:
                    return kernel_factory(op, ctx, direct=built)
            if not may_run:
                return kernel_factory(op, ctx)
            return kernel_factory(op, ctx, **{argument: _conv_loop(storage, loop)})
        return Tiered(checked, build, f"{op.type} {op.name}", weight=9 * _work(op))
    return factory


family.kernel("Conv2D", backend="numba")(_conv_factory(conv_kernels.conv2d, "forward"))
family.kernel("Conv2DBackpropInput", backend="numba")(_conv_factory(conv_kernels.conv2d_backprop_input, "input"))
family.kernel("Conv2DBackpropFilter", backend="numba")(_conv_factory(conv_kernels.conv2d_backprop_filter, "filter"))
family.kernel("DepthwiseConv2dNative", backend="numba")(_depthwise_factory("forward"))
family.kernel("DepthwiseConv2dNativeBackpropInput", backend="numba")(_depthwise_factory("input"))
family.kernel("DepthwiseConv2dNativeBackpropFilter", backend="numba")(_depthwise_factory("filter"))


# -- max pooling's gradient -----------------------------------------------------------------------

# NHWC. Each window's gradient goes to its argmax, by TensorFlow's rule (nn/pooling.py: the
# first tap inside the input, then a later one only when strictly greater). Batch entries
# n0..n1: the kernel splits the batch over threads. ``best`` and ``at`` are a row of scratch.
_MAX_POOL_GRAD = """
@njit(cache=True, nogil=True)
def max_pool_grad(x, g, dx, sh, sw, kh, kw, top, left, n0, n1, best, at):
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    for n in range(n0, n1):
        dx[n] = {=0}
        for oy in range(g.shape[1]):
            for ox in range(g.shape[2]):
                found = False
                for i in range(kh):
                    iy = oy * sh + i - top
                    if iy < 0 or iy >= h:
                        continue
                    for j in range(kw):
                        ix = ox * sw + j - left
                        if ix < 0 or ix >= w:
                            continue
                        xr = x[n, iy, ix]
                        where = iy * w + ix
                        if not found:
                            for k in range(c):
                                best[k] = xr[k]
                                at[k] = where
                            found = True
                        else:
                            for k in range(c):
                                if best[k] < xr[k]:
                                    best[k] = xr[k]
                                    at[k] = where
                if found:
                    gr = g[n, oy, ox]
                    for k in range(c):
                        dx[n, at[k] // w, at[k] % w, k] += gr[k]
"""

# A thread gets at least this many input elements of a max pooling's gradient.
_POOL_ELEMENTS_PER_THREAD = 1 << 18


@functools.cache
def _pool_loop(dtype: np.dtype):
    """max_pool_grad for arrays of ``dtype``, compiled now: native, else numba's."""
    native = _native("max_pool_grad_loop", dtype)
    if native is not None:
        return native
    loop = compile_module(_MAX_POOL_GRAD, dtype).max_pool_grad
    one = np.zeros((1, 1, 1, 1), dtype)
    loop(one, one, one.copy(), 1, 1, 1, 1, 0, 0, 0, 1, np.zeros(1, dtype), np.zeros(1, np.int64))
    return loop


def _nhwc_pooling(op, ctx):
    """(geometry, window, the NumPy kernel) of a float pooling node in NHWC, whose compiled
    loop serves; None for the others (the NumPy kernel alone)."""
    if not _float_node(op):
        return None
    geometry, window = pooling.static_geometry(op)
    if geometry.fmt != "NHWC":
        return None
    return geometry, window, _numpy_kernel(op, ctx)


@family.kernel("MaxPoolGrad", backend="numba")
def _max_pool_grad(op, ctx):
    found = _nhwc_pooling(op, ctx)
    if found is None:
        return None
    geometry, window, checked = found
    storage = op.get_attr("T").storage
    (sh, sw), (kh, kw) = geometry.strides, window

    def build():
        loop = _pool_loop(storage)

        def max_pool_grad(orig_input, orig_output, grad):
            if not (type(orig_input) is np.ndarray and type(grad) is np.ndarray and orig_input.ndim == 4
                    and orig_input.dtype == storage and grad.dtype == storage and orig_input.size):
                return checked(orig_input, orig_output, grad)
            pool = pooling.Pool(geometry, orig_input.shape, window, ctx, op)
            if grad.shape != pool.out_shape or np.ndim(orig_output) != 4:
                return checked(orig_input, orig_output, grad)     # its error
            x, g = np.ascontiguousarray(orig_input), np.ascontiguousarray(grad)
            dx = np.empty(x.shape, storage)
            c = x.shape[3]
            _split_batch(x.shape[0], x.size, _POOL_ELEMENTS_PER_THREAD,
                         lambda n0, n1: loop(x, g, dx, sh, sw, kh, kw, pool.top, pool.left, n0, n1,
                                             np.empty(c, storage), np.empty(c, np.int64)))
            return dx
        return max_pool_grad
    # the NumPy kernel makes ~8 passes a tap: the slowest of a CNN's step for its size
    return Tiered(checked, build, f"{op.type} {op.name}", weight=8 * kh * kw * _work(op))


# -- average pooling and its gradient (native loops only) -----------------------------------------

def _avg_pool_sizes(orig_input_shape) -> tuple[int, ...] | None:
    """AvgPoolGrad's orig_input_shape as 4 sizes; None where the NumPy kernel should judge it."""
    value = np.asarray(orig_input_shape)
    if value.ndim != 1 or value.size != 4 or value.dtype.kind not in "iu":
        return None
    sizes = tuple(int(v) for v in value)
    return sizes if min(sizes) > 0 else None


class _AvgPooling:
    """A node's AvgPool or AvgPoolGrad by its native loop; what the loop does not take goes to
    the NumPy kernel (``checked``), which also raises the errors."""

    def __init__(self, op, ctx, geometry, window, loop, checked):
        self.op, self.ctx, self.loop, self.checked = op, ctx, loop, checked
        self.geometry, self.window = geometry, window
        self.storage = op.get_attr("T").storage
        self.known = ShapeMemo()

    def _window_of(self, shape: tuple):
        """(pool, counts) for an input of ``shape``, worked out once a shape (counts: ~60 us)."""
        def make():
            pool = pooling.Pool(self.geometry, shape, self.window, self.ctx, self.op)
            return pool, np.ascontiguousarray(pool.counts(self.storage)[0, :, :, 0])
        return self.known.get(shape, make)

    def _usable(self, a) -> bool:
        return type(a) is np.ndarray and a.ndim == 4 and a.dtype == self.storage and a.size > 0

    def _run(self, pool, counts, a: np.ndarray, out: np.ndarray) -> np.ndarray:
        (sh, sw), (kh, kw) = self.geometry.strides, self.window
        _split_batch(out.shape[0], kh * kw * pool.n * pool.oh * pool.ow * pool.c, _POOL_ELEMENTS_PER_THREAD,
                     lambda n0, n1: self.loop(a, counts, out, sh, sw, kh, kw, pool.top, pool.left, n0, n1))
        return out

    def forward(self, value):
        if not self._usable(value):
            return self.checked(value)
        pool, counts = self._window_of(value.shape)
        if 0 in pool.out_shape:
            return self.checked(value)
        return self._run(pool, counts, np.ascontiguousarray(value), np.empty(pool.out_shape, self.storage))

    def grad(self, orig_input_shape, grad):
        sizes = _avg_pool_sizes(orig_input_shape)
        if sizes is None or not self._usable(grad):
            return self.checked(orig_input_shape, grad)
        pool, counts = self._window_of(sizes)
        if grad.shape != pool.out_shape:
            return self.checked(orig_input_shape, grad)     # its error
        return self._run(pool, counts, np.ascontiguousarray(grad), np.empty(sizes, self.storage))


def _avg_pool_factory(kind: str):
    """AvgPool ("forward") or AvgPoolGrad ("grad") in NHWC by nn/native_kernels' loop (the
    NumPy kernel's operations in its order, so its bits): the NumPy kernel passes each tap over
    whole arrays, which for a few channels (a slim DenseNet's 10) are rows too short for NumPy's
    loops (0.3 ms for the loop's 0.06, a 2x2 pooling of (8, 32, 32, 10)). The NumPy kernel runs
    until the loop is built, where native kernels are unavailable, and for whatever the loop
    does not take."""
    def factory(op, ctx):
        found = _nhwc_pooling(op, ctx)
        if found is None:
            return None
        geometry, window, checked = found

        def build():
            loop = _native("avg_pool_loop", op.get_attr("T").storage, kind)
            if loop is None:
                return checked
            pooling_ = _AvgPooling(op, ctx, geometry, window, loop, checked)
            return pooling_.forward if kind == "forward" else pooling_.grad
        return Tiered(checked, build, f"{op.type} {op.name}", weight=2 * window[0] * window[1] * _work(op))
    return factory


family.kernel("AvgPool", backend="numba")(_avg_pool_factory("forward"))
family.kernel("AvgPoolGrad", backend="numba")(_avg_pool_factory("grad"))
