"""The nn family's compiled loops as native kernels (gradreg.backends.native): numba_kernels'
loops written again for the tracer and compiled by LLVM, which takes tens of milliseconds with
the GIL released where numba holds the GIL for half a second a loop.

Each builder returns the loop numba_kernels compiles from source, for arrays of one dtype
(float32 or float64), taking the same arguments (arrays C-contiguous, of that dtype and of the
loop's rank) and computing the same values by the same operations in the same order: the
float results are the numba loop's bits (softmax's float32 exp and log are the numba math
library's polynomials, mathlib's ports of them; float64's are the C library's, as numba's).
Each loop is built, and compiled, on its first request only:

* :func:`loop`: ``bias_add_last``, ``bias_add_middle``, ``bias_add_grad_last``, ``softmax``,
  ``log_softmax`` (numba_kernels._LOOPS);
* :func:`depthwise_loop`: a depthwise convolution's ``forward``, ``input`` (backprop_input) or
  ``filter`` (backprop_filter) loop, the multiplier-1 or the general form (_DEPTHWISE);
* :func:`conv_loop`: ``gather``, ``spread`` or ``col2im`` (_CONV_LOOPS);
* :func:`direct_conv_loop`: Conv2D's direct loops, forward or filter backprop, for a few
  output channels: native only (explicit SIMD, fused multiply-adds), with no numba twin;
* :func:`max_pool_grad_loop`: max pooling's gradient (_MAX_POOL_GRAD);
* :func:`avg_pool_loop`: average pooling and its gradient, native only, the NumPy kernels'
  operations in their order.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from gradreg.native import BOOL, I64, Array, Kernel, Unsupported, Value, available, compile_loop, mathlib

__all__ = ["Unsupported", "available", "avg_pool_loop", "conv_loop", "depthwise_loop", "direct_conv_loop", "loop",
           "max_pool_grad_loop"]

Loop = Callable[..., None]


# Loops whose arrays LLVM is not told are distinct: spread's copies of a few channels became
# calls of memcpy when it was (103 against 89 us for numba's, an (8, 16, 16, 4) gradient).
_MAY_ALIAS = {"spread"}


def _compile(name: str, dtype: np.dtype, write: Callable[[Kernel, np.dtype], None], unroll: bool = True) -> Loop:
    """The loop ``write`` traces, for arrays of ``dtype`` (float32 and float64 only, as
    numba_kernels'), compiled now. Every caller gives the loops distinct arrays (outputs made
    for the call), and LLVM is told so (``distinct``): without checking for overlaps at run time
    it vectorizes more of them, and the convolutions' small ones ran up to 2x faster (gather 53
    against 100 us at (8, 16, 16, 3, 3, 4); col2im, the depthwise loops 5-30%). ``unroll``:
    LLVM's loop unroller (gradreg.native's Kernel)."""
    return compile_loop(name, dtype, write, distinct=name not in _MAY_ALIAS, unroll=unroll)


# -- bias addition, softmax (numba_kernels._LOOPS) ------------------------------------------------

def _bias_add_last(k: Kernel, dtype: np.dtype) -> None:
    value, bias, out = k.array(dtype, 2), k.array(dtype, 1), k.array(dtype, 2)
    for i in k.range(value.shape[0]):
        for c in k.range(value.shape[1]):
            out[i, c] = value[i, c] + bias[c]


def _bias_add_middle(k: Kernel, dtype: np.dtype) -> None:
    value, bias, out = k.array(dtype, 3), k.array(dtype, 1), k.array(dtype, 3)
    for i in k.range(value.shape[0]):
        for c in k.range(value.shape[1]):
            b = bias[c]
            for j in k.range(value.shape[2]):
                out[i, c, j] = value[i, c, j] + b


def _bias_add_grad_last(k: Kernel, dtype: np.dtype) -> None:
    grad, out = k.array(dtype, 2), k.array(dtype, 1)
    k.fill(out, 0.0)
    for i in k.range(grad.shape[0]):
        for c in k.range(grad.shape[1]):
            out[c] = out[c] + grad[i, c]


def _sum(k: Kernel, values: Array) -> Value:
    """numba_kernels' _sum: four running sums over the quads, the rest into the first."""
    sums = [k.var(k.const(0, values.type)) for _ in range(4)]
    n = values.shape[0]
    quads = n >> 2
    for q in k.range(quads):
        j = q * 4
        for s, var in enumerate(sums):
            var.value = var.value + values[j + s]
    for j in k.range(quads * 4, n):
        sums[0].value = sums[0].value + values[j]
    s0, s1, s2, s3 = (var.value for var in sums)
    return (s0 + s1) + (s2 + s3)


def _exp_shifted(k: Kernel, row: Array, out: Array) -> tuple[Value, Value]:
    """out = exp(row - max(row)); (max(row), sum(out)). The max keeps a NaN, as NumPy's."""
    m = k.var(row[0])
    for j in k.range(1, row.shape[0]):
        v = row[j]
        m.value = k.where((v > m.value) | (v != v), v, m.value)
    top = m.value
    for j in k.range(row.shape[0]):
        out[j] = mathlib.exp(row[j] - top)
    return top, _sum(k, out)


def _row_loop(k: Kernel, dtype: np.dtype, log: bool) -> None:
    x, out = k.array(dtype, 2), k.array(dtype, 2)
    # An empty row (never passed: the kernel skips empty arrays) reads nothing here.
    with k.if_(x.shape[1] > 0):
        for i in k.range(x.shape[0]):
            m, total = _exp_shifted(k, x.sub(i), out.sub(i))
            if log:
                log_total = mathlib.log(total)
                for j in k.range(x.shape[1]):
                    out[i, j] = (x[i, j] - m) - log_total
            else:
                inv = 1.0 / total
                for j in k.range(x.shape[1]):
                    out[i, j] = out[i, j] * inv


_LOOPS: dict[str, Callable[[Kernel, np.dtype], None]] = {
    "bias_add_last": _bias_add_last,
    "bias_add_middle": _bias_add_middle,
    "bias_add_grad_last": _bias_add_grad_last,
    "softmax": lambda k, dtype: _row_loop(k, dtype, False),
    "log_softmax": lambda k, dtype: _row_loop(k, dtype, True),
}


def loop(dtype: Any, name: str) -> Loop:
    """numba_kernels' loop ``name`` of _LOOPS for arrays of ``dtype``, compiled now."""
    return _loop(np.dtype(dtype), name)


@functools.cache
def _loop(dtype: np.dtype, name: str) -> Loop:
    return _compile(name, dtype, _LOOPS[name])


# -- windows --------------------------------------------------------------------------------------

class _Geometry:
    """A window loop's int parameters: strides, dilations, the padding before (top, left)."""

    def __init__(self, k: Kernel):
        self.sh, self.sw, self.dh, self.dw, self.top, self.left = (k.int_param() for _ in range(6))


def _taps(k: Kernel, g: _Geometry, y: Value, x: Value, kh: Value, kw: Value, h: Value,
          w: Value) -> Iterator[tuple[Value, Value, Value, Value]]:
    """(i, j, ih, iw) of the taps of output (y, x) inside the h x w input: the numba loops'
    ``for i ...: ih = ...; if outside: continue; for j ...`` (the body after the yield is traced once)."""
    for i in k.range(kh):
        ih = y * g.sh + i * g.dh - g.top
        with k.if_((ih >= 0) & (ih < h)):
            for j in k.range(kw):
                iw = x * g.sw + j * g.dw - g.left
                with k.if_((iw >= 0) & (iw < w)):
                    yield i, j, ih, iw


# -- depthwise convolution (numba_kernels._DEPTHWISE) ---------------------------------------------

# NHWC; f is (kh, kw, c, multiplier). Each tap function is the innermost loop of its kind
# (_DEPTHWISE_TAPS), for a multiplier of 1 (one) or any.

def _tap_forward(k: Kernel, one: bool, c: Value, m: Value, o: Array, xr: Array, fr: Array) -> None:
    for ch in k.range(c):
        if one:
            o[ch] = o[ch] + xr[ch] * fr[ch, 0]
        else:
            v = xr[ch]
            for q in k.range(m):
                o[ch * m + q] = o[ch * m + q] + v * fr[ch, q]


def _tap_input(k: Kernel, one: bool, c: Value, m: Value, d: Array, g: Array, fr: Array) -> None:
    for ch in k.range(c):
        if one:
            d[ch] = d[ch] + g[ch] * fr[ch, 0]
        else:
            s = k.var(k.const(0, d.type))
            for q in k.range(m):
                s.value = s.value + g[ch * m + q] * fr[ch, q]
            d[ch] = d[ch] + s.value


def _tap_filter(k: Kernel, one: bool, c: Value, m: Value, fr: Array, xr: Array, g: Array) -> None:
    for ch in k.range(c):
        if one:
            fr[ch, 0] = fr[ch, 0] + xr[ch] * g[ch]
        else:
            v = xr[ch]
            for q in k.range(m):
                fr[ch, q] = fr[ch, q] + v * g[ch * m + q]


def _depthwise_forward(k: Kernel, dtype: np.dtype, one: bool) -> None:
    # forward(x, f, out, sh, sw, dh, dw, top, left, n0, n1)
    x, f, out = (k.array(dtype, 4) for _ in range(3))
    geometry = _Geometry(k)
    n0, n1 = k.int_param(), k.int_param()
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    kh, kw, m = f.shape[0], f.shape[1], f.shape[3]
    for n in k.range(n0, n1):
        for oh in k.range(out.shape[1]):
            for ow in k.range(out.shape[2]):
                o = out.sub(n, oh, ow)
                k.fill(o, 0.0)
                for i, j, ih, iw in _taps(k, geometry, oh, ow, kh, kw, h, w):
                    _tap_forward(k, one, c, m, o, x.sub(n, ih, iw), f.sub(i, j))


def _depthwise_input(k: Kernel, dtype: np.dtype, one: bool) -> None:
    # backprop_input(dy, f, dx, sh, sw, dh, dw, top, left, n0, n1)
    dy, f, dx = (k.array(dtype, 4) for _ in range(3))
    geometry = _Geometry(k)
    n0, n1 = k.int_param(), k.int_param()
    h, w, c = dx.shape[1], dx.shape[2], dx.shape[3]
    kh, kw, m = f.shape[0], f.shape[1], f.shape[3]
    for n in k.range(n0, n1):
        k.fill(dx.sub(n), 0.0)
        for oh in k.range(dy.shape[1]):
            for ow in k.range(dy.shape[2]):
                g = dy.sub(n, oh, ow)
                for i, j, ih, iw in _taps(k, geometry, oh, ow, kh, kw, h, w):
                    _tap_input(k, one, c, m, dx.sub(n, ih, iw), g, f.sub(i, j))


def _depthwise_filter(k: Kernel, dtype: np.dtype, one: bool) -> None:
    # backprop_filter(x, dy, df, sh, sw, dh, dw, top, left, n0, n1); df: this part's sum
    x, dy, df = (k.array(dtype, 4) for _ in range(3))
    geometry = _Geometry(k)
    n0, n1 = k.int_param(), k.int_param()
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    kh, kw, m = df.shape[0], df.shape[1], df.shape[3]
    k.fill(df, 0.0)
    for n in k.range(n0, n1):
        for oh in k.range(dy.shape[1]):
            for ow in k.range(dy.shape[2]):
                g = dy.sub(n, oh, ow)
                for i, j, ih, iw in _taps(k, geometry, oh, ow, kh, kw, h, w):
                    _tap_filter(k, one, c, m, df.sub(i, j), x.sub(n, ih, iw), g)


_DEPTHWISE: dict[str, Callable[[Kernel, np.dtype, bool], None]] = {
    "forward": _depthwise_forward, "input": _depthwise_input, "filter": _depthwise_filter}


def depthwise_loop(dtype: Any, kind: str, multiplier_one: bool) -> Loop:
    """numba_kernels' depthwise loop of ``kind`` ("forward", "input", "filter") for arrays of
    ``dtype``, the multiplier-1 form or the general one, compiled now."""
    return _depthwise_loop(np.dtype(dtype), kind, bool(multiplier_one))


@functools.cache
def _depthwise_loop(dtype: np.dtype, kind: str, multiplier_one: bool) -> Loop:
    return _compile(f"depthwise_{kind}_{'one' if multiplier_one else 'any'}", dtype,
                    lambda k, dtype: _DEPTHWISE[kind](k, dtype, multiplier_one))


# -- Conv2D's loops (numba_kernels._CONV_LOOPS) ---------------------------------------------------

def _gather(k: Kernel, dtype: np.dtype) -> None:
    # gather(z, out, sh, sw, dh, dw, top, left)
    z, out = k.array(dtype, 6), k.array(dtype, 4)
    geometry = _Geometry(k)
    n, oh, ow, o = out.shape
    h, w, kh, kw = z.shape[1], z.shape[2], z.shape[3], z.shape[4]
    for b in k.range(n):
        for y in k.range(oh):
            for x in k.range(ow):
                dst = out.sub(b, y, x)
                k.fill(dst, 0.0)
                for i, j, ih, iw in _taps(k, geometry, y, x, kh, kw, h, w):
                    src = z.sub(b, ih, iw, i, j)
                    for ch in k.range(o):
                        dst[ch] = dst[ch] + src[ch]


def _spread(k: Kernel, dtype: np.dtype) -> None:
    # spread(dy, d, sh, sw, dh, dw, top, left)
    dy, d = k.array(dtype, 4), k.array(dtype, 6)
    geometry = _Geometry(k)
    n, oh, ow, o = dy.shape
    h, w, kh, kw = d.shape[1], d.shape[2], d.shape[3], d.shape[4]
    k.fill(d, 0.0)
    for b in k.range(n):
        for y in k.range(oh):
            for x in k.range(ow):
                src = dy.sub(b, y, x)
                for i, j, ih, iw in _taps(k, geometry, y, x, kh, kw, h, w):
                    dst = d.sub(b, ih, iw, i, j)
                    for ch in k.range(o):
                        dst[ch] = src[ch]


def _col2im(k: Kernel, dtype: np.dtype) -> None:
    # col2im(cols, dx, sh, sw, dh, dw, top, left)
    cols, dx = k.array(dtype, 6), k.array(dtype, 4)
    geometry = _Geometry(k)
    n, oh, ow, kh, kw, c = cols.shape
    h, w = dx.shape[1], dx.shape[2]
    for b in k.range(n):
        k.fill(dx.sub(b), 0.0)
        for y in k.range(oh):
            for x in k.range(ow):
                for i, j, ih, iw in _taps(k, geometry, y, x, kh, kw, h, w):
                    src = cols.sub(b, y, x, i, j)
                    dst = dx.sub(b, ih, iw)
                    for ch in k.range(c):
                        dst[ch] = dst[ch] + src[ch]


_CONV: dict[str, Callable[[Kernel, np.dtype], None]] = {"gather": _gather, "spread": _spread, "col2im": _col2im}


def conv_loop(dtype: Any, name: str) -> Loop:
    """numba_kernels' Conv2D loop ``name`` ("gather", "spread", "col2im") for arrays of
    ``dtype``, compiled now."""
    return _conv_loop(np.dtype(dtype), name)


@functools.cache
def _conv_loop(dtype: np.dtype, name: str) -> Loop:
    return _compile(name, dtype, _CONV[name])


# -- Conv2D, direct: a few output channels (nn/conv.py's direct form; no numba twin) --------------

# A position's output channels are one vector; a loop holds ``block`` of them (forward:
# positions side by side in a row; filter: input channels of one tap), each a chain of
# multiply-adds that the others' overlap (nn/conv.py's direct_block chooses it).


class _DirectForward:
    """The direct forward loop's body (see _direct_forward), a row of outputs at a time."""

    def __init__(self, k: Kernel, dtype: np.dtype, channels: int, block: int):
        self.k, self.block = k, block
        self.x, self.f, self.out = (k.array(dtype, 4) for _ in range(3))
        self.geometry = _Geometry(k)
        self.n0, self.n1, self.x0, self.x1 = (k.int_param() for _ in range(4))
        self.vec = k.vector(self.x.type, channels)

    def accumulate(self, sums: list, rows: list[Array], taps: Array) -> None:
        """Each position's sum += its row of inputs times the tap's weights, channel by channel."""
        vec = self.vec
        for ch in self.k.range(self.x.shape[3]):
            weights = vec.load(taps, ch, 0)
            for p, row in enumerate(rows):
                sums[p].value = vec.fma(vec.splat(row[ch]), weights, sums[p].value)

    def accumulate_one(self, sums: list, row: Array, taps: Array) -> None:
        """One position's sum, in ``block`` parts over the channels: as many chains of
        multiply-adds overlap as side by side (a single chain ran a border position ~8x slower)."""
        k, vec, block, c = self.k, self.vec, self.block, self.x.shape[3]
        parts = k.quotient(c, block)
        for b in k.range(parts):
            for q in range(block):
                ch = b * block + q
                sums[q].value = vec.fma(vec.splat(row[ch]), vec.load(taps, ch, 0), sums[q].value)
        for ch in k.range(parts * block, c):
            sums[0].value = vec.fma(vec.splat(row[ch]), vec.load(taps, ch, 0), sums[0].value)

    def side_by_side(self, n: Value, y: Value, first: Value, count: int) -> None:
        """Outputs first..first+count of row y, each tap's column inside x (its row checked)."""
        k, g, x, vec = self.k, self.geometry, self.x, self.vec
        sums = [vec.var(vec.zero()) for _ in range(count)]
        for i in k.range(self.f.shape[0]):
            ih = y * g.sh + i * g.dh - g.top
            with k.if_((ih >= 0) & (ih < x.shape[1])):
                for j in k.range(self.f.shape[1]):
                    rows = [x.sub(n, ih, (first + p) * g.sw + j * g.dw - g.left) for p in range(count)]
                    self.accumulate(sums, rows, self.f.sub(i, j))
        for p in range(count):
            vec.store(sums[p].value, self.out, n, y, first + p, 0)

    def one(self, n: Value, y: Value, at: Value) -> None:
        """Output ``at`` of row y, each tap checked."""
        k, x, f, vec = self.k, self.x, self.f, self.vec
        sums = [vec.var(vec.zero()) for _ in range(self.block)]
        for i, j, ih, iw in _taps(k, self.geometry, y, at, f.shape[0], f.shape[1], x.shape[1], x.shape[2]):
            self.accumulate_one(sums, x.sub(n, ih, iw), f.sub(i, j))
        values = [s.value for s in sums]
        while len(values) > 1:
            values = [vec.add(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                      for i in range(0, len(values), 2)]
        vec.store(values[0], self.out, n, y, at, 0)

    def row(self, n: Value, y: Value, blocks: Value) -> None:
        k, block, x0, x1 = self.k, self.block, self.x0, self.x1
        for at in k.range(x0):
            self.one(n, y, at)
        for b in k.range(blocks):
            self.side_by_side(n, y, x0 + b * block, block)
        # the rest of the columns inside, fewer side by side: 4, 2, 1 as their count's bits
        rest = x1 - x0 - blocks * block
        column = k.var(x0 + blocks * block)
        for bit in (4, 2, 1):
            if bit < block:
                with k.if_((rest & bit) != 0):
                    self.side_by_side(n, y, column.value, bit)
                    column.value = column.value + bit
        for at in k.range(x1, self.out.shape[2]):
            self.one(n, y, at)


def _direct_forward(k: Kernel, dtype: np.dtype, channels: int, block: int) -> None:
    # forward(x, f, out, sh, sw, dh, dw, top, left, n0, n1, x0, x1): f (kh, kw, c, channels),
    # out (n, oh, ow, channels). Outputs in columns x0..x1 have every tap's column inside x
    # (the caller computes them): there ``block`` positions side by side at a time (the last
    # few 4, 2, 1 at a time), each row of taps checked; the others one at a time, each tap
    # checked (a tap in the padding adds zero), the position's sum in ``block`` parts.
    body = _DirectForward(k, dtype, channels, block)
    blocks = k.quotient(body.x1 - body.x0, block)
    for n in k.range(body.n0, body.n1):
        for y in k.range(body.out.shape[1]):
            body.row(n, y, blocks)


def _direct_filter(k: Kernel, dtype: np.dtype, channels: int, block: int) -> None:
    # filter(x, dy, df, sh, sw, dh, dw, top, left, n0, n1, y0, y1, x0, x1): dy (n, oh, ow,
    # channels), df (kh, kw, c, channels) this part's sum. Tap (i, j) is inside x for the
    # outputs in rows y0[i]..y1[i] and columns x0[j]..x1[j] (int64 arrays the caller computes):
    # only those are summed, unchecked.
    x, dy, df = (k.array(dtype, 4) for _ in range(3))
    geometry = _Geometry(k)
    n0, n1 = k.int_param(), k.int_param()
    y0, y1, x0, x1 = (k.array(np.int64, 1) for _ in range(4))
    c, kh, kw = x.shape[3], df.shape[0], df.shape[1]
    sh, sw, dh, dw, top, left = geometry.sh, geometry.sw, geometry.dh, geometry.dw, geometry.top, geometry.left
    vec = k.vector(x.type, channels)

    def inputs(i: Value, j: Value, c0: Value, count: int) -> None:
        sums = [vec.var(vec.zero()) for _ in range(count)]
        for n in k.range(n0, n1):
            for y in k.range(y0[i], y1[i]):
                for at in k.range(x0[j], x1[j]):
                    g = vec.load(dy, n, y, at, 0)
                    row = x.sub(n, y * sh + i * dh - top, at * sw + j * dw - left)
                    for q in range(count):
                        sums[q].value = vec.fma(vec.splat(row[c0 + q]), g, sums[q].value)
        for q in range(count):
            vec.store(sums[q].value, df, i, j, c0 + q, 0)

    blocks = k.quotient(c, block)
    for i in k.range(kh):
        for j in k.range(kw):
            for b in k.range(blocks):
                inputs(i, j, b * block, block)
            for c0 in k.range(blocks * block, c):
                inputs(i, j, c0, 1)


def _direct_filter_wide(k: Kernel, dtype: np.dtype, channels: int, block: int) -> None:
    # filter_wide(x, dy, df, ...): the filter loop's arguments, for ``block`` output channels
    # (a few: as vectors, they would fill part of a register) and ``channels`` input channels:
    # each tap's gradient is ``block`` vectors of the input's channels, each input row loaded
    # once and multiplied by each output channel's gradient.
    x, dy, df = (k.array(dtype, 4) for _ in range(3))
    geometry = _Geometry(k)
    n0, n1 = k.int_param(), k.int_param()
    y0, y1, x0, x1 = (k.array(np.int64, 1) for _ in range(4))
    sh, sw, dh, dw, top, left = geometry.sh, geometry.sw, geometry.dh, geometry.dw, geometry.top, geometry.left
    vec = k.vector(x.type, channels)
    lanes = k.local(dtype, channels)
    for i in k.range(df.shape[0]):
        for j in k.range(df.shape[1]):
            sums = [vec.var(vec.zero()) for _ in range(block)]
            for n in k.range(n0, n1):
                for y in k.range(y0[i], y1[i]):
                    for at in k.range(x0[j], x1[j]):
                        row = vec.load(x, n, y * sh + i * dh - top, at * sw + j * dw - left, 0)
                        g = dy.sub(n, y, at)
                        for o in range(block):
                            sums[o].value = vec.fma(row, vec.splat(g[o]), sums[o].value)
            for o in range(block):       # df[i, j, :, o]: strided, through the stack
                vec.store(sums[o].value, lanes, 0)
                for c in k.range(channels):
                    df[i, j, c, o] = lanes[c]


_DIRECT: dict[str, Callable[[Kernel, np.dtype, int, int], None]] = {
    "forward": _direct_forward, "filter": _direct_filter, "filter_wide": _direct_filter_wide}


def direct_conv_loop(dtype: Any, kind: str, channels: int, block: int) -> Loop:
    """The direct convolution loop of ``kind`` ("forward", "filter", "filter_wide") for arrays
    of ``dtype`` whose output channels (forward) or filter gradient's (filter) number
    ``channels``, holding ``block`` accumulators (nn/conv.direct_block), compiled now;
    "filter_wide": vectors of ``channels`` input channels, one for each of ``block`` output
    channels."""
    return _direct_conv_loop(np.dtype(dtype), kind, int(channels), int(block))


@functools.cache
def _direct_conv_loop(dtype: np.dtype, kind: str, channels: int, block: int) -> Loop:
    if channels < 1 or block < 1:
        raise Unsupported(f"a direct loop of {channels} channels, {block} a block")
    # Unrolled by hand (a block of accumulators), the direct loops are compiled without LLVM's
    # unroller, which only made more code: the slim ResNet's direct loops compiled in 0.78-0.92 s
    # in all instead of 1.21-1.52 s, the slim DenseNet's in 0.98-1.13 s instead of 1.54-1.84 s,
    # and ran as fast or faster (one thread, the slim ResNet's Conv2D 0.81-0.89 ms a step
    # against 1.02-1.11; docs/benchmarks.md, 2026-12-02).
    return _compile(f"direct_{kind}_{channels}x{block}", dtype,
                    lambda k, dtype: _DIRECT[kind](k, dtype, channels, block), unroll=False)


# -- average pooling (native only: nn/pooling's NumPy kernels' values, in their order) -----------

class _Window:
    """A pooling loop's int parameters: strides, window, padding before (no dilations)."""

    def __init__(self, k: Kernel):
        self.sh, self.sw, self.kh, self.kw, self.top, self.left = (k.int_param() for _ in range(6))
        self.dh = self.dw = 1


def _avg_pool(k: Kernel, dtype: np.dtype) -> None:
    # avg_pool(x, counts, out, sh, sw, kh, kw, top, left, n0, n1): counts (oh, ow), the taps of
    # each window inside x. Each output the sum of its taps inside x in window order, divided
    # by their count: pooling._avg_pool's operations (its taps in the padding add zeros).
    x, counts, out = k.array(dtype, 4), k.array(dtype, 2), k.array(dtype, 4)
    window = _Window(k)
    n0, n1 = k.int_param(), k.int_param()
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    for n in k.range(n0, n1):
        for y in k.range(out.shape[1]):
            for at in k.range(out.shape[2]):
                o = out.sub(n, y, at)
                k.fill(o, 0.0)
                for _, _, iy, ix in _taps(k, window, y, at, window.kh, window.kw, h, w):   # type: ignore[arg-type]
                    row = x.sub(n, iy, ix)
                    for ch in k.range(c):
                        o[ch] = o[ch] + row[ch]
                divisor = counts[y, at]
                for ch in k.range(c):
                    o[ch] = o[ch] / divisor


def _avg_pool_grad(k: Kernel, dtype: np.dtype) -> None:
    # avg_pool_grad(g, counts, dx, sh, sw, kh, kw, top, left, n0, n1): each output's gradient
    # over its count added to the inputs its taps read, tap by tap in window order (as
    # pooling._avg_pool_grad's passes, so each input's sum in the same order).
    g, counts, dx = k.array(dtype, 4), k.array(dtype, 2), k.array(dtype, 4)
    window = _Window(k)
    n0, n1 = k.int_param(), k.int_param()
    h, w, c = dx.shape[1], dx.shape[2], dx.shape[3]
    oh, ow = g.shape[1], g.shape[2]
    for n in k.range(n0, n1):
        k.fill(dx.sub(n), 0.0)
        for i in k.range(window.kh):
            for j in k.range(window.kw):
                for y in k.range(oh):
                    iy = y * window.sh + i - window.top
                    with k.if_((iy >= 0) & (iy < h)):
                        for at in k.range(ow):
                            ix = at * window.sw + j - window.left
                            with k.if_((ix >= 0) & (ix < w)):
                                src, dst, divisor = g.sub(n, y, at), dx.sub(n, iy, ix), counts[y, at]
                                for ch in k.range(c):
                                    dst[ch] = dst[ch] + src[ch] / divisor


_AVG_POOL: dict[str, Callable[[Kernel, np.dtype], None]] = {"forward": _avg_pool, "grad": _avg_pool_grad}


def avg_pool_loop(dtype: Any, kind: str) -> Loop:
    """Average pooling's loop of ``kind`` ("forward", "grad") for arrays of ``dtype``, compiled now."""
    return _avg_pool_loop(np.dtype(dtype), kind)


@functools.cache
def _avg_pool_loop(dtype: np.dtype, kind: str) -> Loop:
    return _compile(f"avg_pool_{kind}", dtype, _AVG_POOL[kind])


# -- max pooling's gradient (numba_kernels._MAX_POOL_GRAD) ----------------------------------------

def _floor_div_mod(a: Value, b: Value) -> tuple[Value, Value]:
    """Python's (a // b, a % b) of int64 values (numba's: the quotient floored, the remainder
    of the divisor's sign)."""
    k = a.k
    q = Value(k, I64, k.b.sdiv(a.ir, b.ir))
    r = Value(k, I64, k.b.srem(a.ir, b.ir))
    adjust = (r != 0) & ((r < 0) != (b < 0))
    return q - adjust.cast(I64), r + k.where(adjust, b, 0)


def _max_pool_grad(k: Kernel, dtype: np.dtype) -> None:
    # max_pool_grad(x, g, dx, sh, sw, kh, kw, top, left, n0, n1, best, at)
    x, g, dx = (k.array(dtype, 4) for _ in range(3))
    sh, sw, kh, kw, top, left, n0, n1 = (k.int_param() for _ in range(8))
    best, at = k.array(dtype, 1), k.array(np.int64, 1)
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    for n in k.range(n0, n1):
        k.fill(dx.sub(n), 0.0)
        for oy in k.range(g.shape[1]):
            for ox in k.range(g.shape[2]):
                found = k.var(k.const(False, BOOL))
                for i in k.range(kh):
                    iy = oy * sh + i - top
                    with k.if_((iy >= 0) & (iy < h)):
                        for j in k.range(kw):
                            ix = ox * sw + j - left
                            with k.if_((ix >= 0) & (ix < w)):
                                xr = x.sub(n, iy, ix)
                                where = iy * w + ix
                                first = ~found.value
                                with k.if_(first):
                                    for ch in k.range(c):
                                        best[ch] = xr[ch]
                                        at[ch] = where
                                    found.value = True
                                with k.if_(~first):
                                    for ch in k.range(c):
                                        b, v = best[ch], xr[ch]
                                        greater = b < v
                                        best[ch] = k.where(greater, v, b)
                                        at[ch] = k.where(greater, where, at[ch])
                with k.if_(found.value):
                    gr = g.sub(n, oy, ox)
                    for ch in k.range(c):
                        row, column = _floor_div_mod(at[ch], w)
                        dx[n, row, column, ch] = dx[n, row, column, ch] + gr[ch]


def max_pool_grad_loop(dtype: Any) -> Loop:
    """numba_kernels' max_pool_grad for arrays of ``dtype`` (``best`` of ``dtype``, ``at`` of
    int64), compiled now."""
    return _max_pool_grad_loop(np.dtype(dtype))


@functools.cache
def _max_pool_grad_loop(dtype: np.dtype) -> Loop:
    return _compile("max_pool_grad", dtype, _max_pool_grad)
