"""Kernels of 2-D convolution: Conv2D, DepthwiseConv2dNative and their input/filter backprops.

Conv2D and its backprops are a grouped convolution in NHWC layout computed with im2col:
the padded input's windows (a strided view, strides and dilations in its strides) are
copied into a (groups, positions, window) matrix, a block of the batch at a time, and
multiplied with the filter by BLAS (threads chosen per call, gradreg.kernel_support). The input backprop multiplies
the other way and scatters the columns back with one strided add per filter tap (col2im).
Depthwise convolution (one group per input channel) is too thin for BLAS: it is summed tap
by tap over whole arrays here (the numba backend compiles loops for it, nn/numba_kernels).
Float16 is computed in float32.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from gradreg import kernel_support as ks
from gradreg.registry.kernels import ShapeMemo
from gradreg_plugins.nn.kernels import kernel, node_error, storage, widen
from gradreg_plugins.nn.windows import Geometry, array_from_nhwc, array_to_nhwc, to_nhwc


def pad_spatial(x: np.ndarray, top: int, bottom: int, left: int, right: int) -> np.ndarray:
    """NHWC ``x`` with zeros around its height and width (``x`` itself when no pad): a zeroed
    array and one copy, several times faster than np.pad."""
    if not (top or bottom or left or right):
        return x
    n, h, w, c = x.shape
    out = np.zeros((n, h + top + bottom, w + left + right, c), x.dtype)
    out[:, top:top + h, left:left + w, :] = x
    return out


def _geometry(op) -> Geometry:
    try:
        return Geometry.from_op(op)
    except ValueError as exc:
        raise node_error(op, str(exc)) from None


def _check_rank4(name: str, shape: tuple) -> None:
    if len(shape) != 4:
        raise ValueError(f"{name} must be 4-dimensional, got shape {list(shape)}")


def _groups(in_depth: int, filter_depth: int, out_depth: int) -> int:
    if filter_depth == 0 or in_depth % filter_depth:
        raise ValueError(f"depth of input ({in_depth}) must be a multiple of the filter's input depth "
                         f"({filter_depth})")
    groups = in_depth // filter_depth
    if out_depth % groups:
        raise ValueError(f"depth of output ({out_depth}) must be a multiple of the number of groups ({groups})")
    return groups


class _Conv:
    """One convolution's sizes in NHWC: input (n, h, w, c), window (kh, kw), groups, output
    channels, and the output size and pads the geometry gives them."""

    def __init__(self, geometry: Geometry, input_shape, window, groups: int, out_channels: int, ctx, op):
        self.g = geometry
        self.ctx, self.op = ctx, op
        self.n, self.h, self.w, self.c = input_shape
        self.kh, self.kw = window
        self.groups, self.out_channels = groups, out_channels
        (self.oh, self.top, self.bottom), (self.ow, self.left, self.right) = geometry.output_hw(
            self.h, self.w, window)
        ctx.check_elements(self.n * self.oh * self.ow * out_channels, op)
        # The im2col matrix (and col2im columns) hold every window of every output position.
        ctx.check_elements(self.n * self.oh * self.ow * self.kh * self.kw * self.c, op)
        ctx.check_elements(self.n * (self.h + self.top + self.bottom) * (self.w + self.left + self.right) * self.c, op)

    def with_batch(self, n: int) -> _Conv:
        """The same convolution over ``n`` batch entries (a block of the batch)."""
        if n == self.n:
            return self
        part = copy.copy(self)
        part.n = n
        return part

    def batch_blocks(self, bytes_per_entry: int) -> list[tuple[int, int]]:
        """The batch in blocks whose scratch (``bytes_per_entry`` each) stays within
        SCRATCH_BYTES (at least one entry a block), unless a block would then hold fewer than
        MIN_BLOCK_ROWS output positions: then blocks of about that many (within
        ROWS_SCRATCH_BYTES), of nearly equal size."""
        step = max(1, SCRATCH_BYTES // max(1, bytes_per_entry))
        positions = max(1, self.oh * self.ow)
        if step * positions < MIN_BLOCK_ROWS and self.n > step:
            most = max(step, ROWS_SCRATCH_BYTES // max(1, bytes_per_entry))
            step = min(self.n, -(-MIN_BLOCK_ROWS // positions), most)
            blocks = -(-self.n // step)
            step = -(-self.n // blocks)
        return [(i, min(self.n, i + step)) for i in range(0, self.n, step)]

    @property
    def window_bytes(self) -> int:
        """Bytes of one batch entry's im2col matrix (float32: 4 a value; ``* 2`` for float64)."""
        return self.oh * self.ow * self.kh * self.kw * self.c * 4

    @property
    def empty(self) -> bool:
        return 0 in (self.n, self.oh, self.ow, self.c, self.kh, self.kw, self.out_channels)

    def check_out_backprop(self, shape: tuple) -> None:
        """``shape`` (out_backprop's, NHWC) against the output the input and filter give."""
        expected = (self.n, self.oh, self.ow, self.out_channels)
        if tuple(shape) != expected:
            raise ValueError(f"out_backprop has shape {list(shape)} (NHWC), but the input and filter give "
                             f"an output of {list(expected)}")

    def padded(self, x: np.ndarray) -> np.ndarray:
        return pad_spatial(x, self.top, self.bottom, self.left, self.right)

    def tap(self, padded: np.ndarray, i: int, j: int) -> np.ndarray:
        """The (n, oh, ow, c) input values filter tap (i, j) meets at each output position."""
        (sh, sw), (dh, dw) = self.g.strides, self.g.dilations
        return padded[:, i * dh:i * dh + (self.oh - 1) * sh + 1:sh, j * dw:j * dw + (self.ow - 1) * sw + 1:sw, :]

    @property
    def pointwise(self) -> bool:
        """A 1x1 window over every position (no stride, no padding): the convolution is one
        matrix product of the (positions, channels) input, no im2col."""
        return (self.kh == self.kw == 1 and self.groups == 1 and self.g.strides == (1, 1)
                and self.top == self.bottom == self.left == self.right == 0)

    @property
    def flops(self) -> int:
        return 2 * self.n * self.oh * self.ow * self.out_channels * self.kh * self.kw * (self.c // self.groups)

    def windows(self, padded: np.ndarray) -> np.ndarray:
        """A view of every output position's window: (groups, n, oh, ow, kh, kw, group depth)."""
        (sh, sw), (dh, dw) = self.g.strides, self.g.dilations
        n, _, _, c = padded.shape
        sn, sy, sx, sc = padded.strides
        per_group = self.c // self.groups
        return as_strided(padded, (self.groups, n, self.oh, self.ow, self.kh, self.kw, per_group),
                          (per_group * sc, sn, sy * sh, sx * sw, sy * dh, sx * dw, sc), writeable=False)

    def im2col(self, x: np.ndarray, windows: np.ndarray | None = None, n0: int = 0) -> np.ndarray:
        """(groups, positions, kh * kw * group depth): row p holds output position p's window
        (of the batch entries n0..n0+self.n of ``windows``, made from ``x`` if not given)."""
        if windows is None:
            windows = self.windows(self.padded(x))
        return windows[:, n0:n0 + self.n].reshape(self.groups, self.n * self.oh * self.ow, -1)

    def col2im(self, cols: np.ndarray, dtype) -> np.ndarray:
        """The input-shaped sum of (groups, positions, window) columns over the windows they came from."""
        per_group = self.c // self.groups
        cols = cols.reshape(self.groups, self.n, self.oh, self.ow, self.kh, self.kw, per_group)
        cols = cols.transpose(1, 2, 3, 4, 5, 0, 6).reshape(self.n, self.oh, self.ow, self.kh, self.kw, self.c)
        padded = np.zeros((self.n, self.h + self.top + self.bottom, self.w + self.left + self.right, self.c), dtype)
        for i in range(self.kh):
            for j in range(self.kw):
                self.tap(padded, i, j)[...] += cols[:, :, :, i, j, :]
        return self.crop(padded)

    def crop(self, padded: np.ndarray) -> np.ndarray:
        return padded[:, self.top:self.top + self.h, self.left:self.left + self.w, :]

    def grouped_filter(self, f: np.ndarray) -> np.ndarray:
        """An HWIO filter (input depth per group) as (groups, kh * kw * group depth, group outputs)."""
        per_group_out = self.out_channels // self.groups
        f = f.reshape(self.kh, self.kw, self.c // self.groups, self.groups, per_group_out)
        return f.transpose(3, 0, 1, 2, 4).reshape(self.groups, -1, per_group_out)

    def grouped_out(self, dy: np.ndarray) -> np.ndarray:
        """NHWC output-shaped values as (groups, positions, group outputs)."""
        per_group_out = self.out_channels // self.groups
        return dy.reshape(-1, self.groups, per_group_out).transpose(1, 0, 2)

    def ungroup_out(self, y: np.ndarray) -> np.ndarray:
        return y.transpose(1, 0, 2).reshape(self.n, self.oh, self.ow, self.out_channels)

    def ungroup_filter(self, df: np.ndarray) -> np.ndarray:
        per_group_out = self.out_channels // self.groups
        df = df.reshape(self.groups, self.kh, self.kw, self.c // self.groups, per_group_out)
        return df.transpose(1, 2, 3, 0, 4).reshape(self.kh, self.kw, self.c // self.groups, self.out_channels)


# Products of at least this many flops per thread are cut among threads (when free).
BLAS_FLOPS_PER_THREAD = 8e6
# Convolutions of at least this many flops per thread share their batch blocks among threads
# (float64 flops count two: the slim ResNet in float64, whose 3 -> 8 channel convolutions of
# 3.5 Mflops take ~0.7 ms each, ran 2-8% faster that way, four in-process A/B runs).
BLOCK_FLOPS_PER_THREAD = 2e6
# im2col matrices are made a block of the batch at a time, each within this many bytes: a
# whole batch's would be kh*kw times the input, the largest transient of a CNN step.
SCRATCH_BYTES = 1 << 19
# ... but a block's products need rows: a block holds at least this many output positions
# (their im2col rows, the summed dimension of a filter backprop's product), its scratch then up
# to ROWS_SCRATCH_BYTES. ResNet50's 3x3 convolutions at batch 32 on one thread (the 2-vCPU Zen 4
# of docs/benchmarks.md, 2026-12-02): at 7x7x512, one entry a block (49 rows) ran the filter
# backprop at 35 GFLOP/s (each block's 4608x512 partial product summed into the total) and the
# forward at 53; with 2048 rows, 89 and 89. At 14x14x256 (196 rows) 45 -> 80-85 and 70 -> 80;
# at 28x28x128 (784 rows) 51 -> 58-66 and 62 -> 60-68.
MIN_BLOCK_ROWS = 2048
ROWS_SCRATCH_BYTES = 1 << 25


def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b (stacks of matrices; one group: plain matrices, np.dot's lighter dispatch)."""
    if a.ndim == 3 and a.shape[0] == 1 and b.shape[0] == 1:
        return np.dot(a[0], b[0])[None]
    return np.matmul(a, b)


def _matmul(a: np.ndarray, b: np.ndarray, flops: float) -> np.ndarray:
    """a @ b on the threads ``flops`` earns: gradreg's, BLAS on one thread in each part
    (kernel_support.product)."""
    threads = ks.threads_for(flops, BLAS_FLOPS_PER_THREAD)
    if threads <= 1:
        with ks.blas_threads(1):
            return _product(a, b)
    return ks.product(a, b, threads)


def _over_batch(conv: _Conv, bytes_per_entry: int, work, itemsize: int) -> list:
    """``work(part, n0, n1, product)`` for each block of the batch, in order. A large
    convolution's blocks are shared among threads when cores are free (each block's copy
    into columns and its product run in one thread, BLAS single-threaded): a block's own
    product is too small for BLAS to split well, and the copies would stay serial.
    Otherwise each block's product picks its BLAS threads (``product`` is _matmul).
    The work is counted in float32 flops: a float64 flop (``itemsize`` 8) counts two, as it
    takes about twice as long (half the values a vector, twice the bytes a value)."""
    blocks = conv.batch_blocks(bytes_per_entry)
    threads = min(len(blocks), ks.threads_for(conv.flops * itemsize / 4, BLOCK_FLOPS_PER_THREAD))
    if threads <= 1:
        return [work(conv.with_batch(n1 - n0), n0, n1, _matmul) for n0, n1 in blocks]

    def run(i: int):
        n0, n1 = blocks[i]
        return work(conv.with_batch(n1 - n0), n0, n1, lambda a, b, flops: _product(a, b))

    # Each block a part, the threads taking them as they come: a thread another process keeps
    # off its core leaves its blocks to the others.
    with ks.blas_threads(1):
        return ks.parallel(run, len(blocks), threads)


def _taps_fit(groups: int, strides: tuple, c: int, out_channels: int) -> bool:
    """Whether the tap form (_tap_forward, _tap_filter) is the faster one for these sizes:
    stride 1, one group, and at least three input channels an output channel (the slim
    DenseNet's 16 -> 4: forward 0.85 -> 0.57 ms, filter backprop 0.83 -> 0.68 ms; with as many
    channels each way it was 2x slower)."""
    return groups == 1 and strides == (1, 1) and 3 * out_channels <= c


def _scatter_fits(groups: int, strides: tuple, c: int, out_channels: int) -> bool:
    """Whether the input backprop's compiled col2im scatter (_scattered) is the faster form for
    these sizes: one group, and strides or at least twice as many output channels as input
    channels (_backprop_input gives the figures)."""
    return groups == 1 and (strides != (1, 1) or 2 * c <= out_channels)


def _by_taps(conv: _Conv, *arrays: np.ndarray) -> bool:
    """Whether the tap form runs for ``conv`` (_taps_fit) with ``arrays`` of one dtype."""
    return (_taps_fit(conv.groups, conv.g.strides, conv.c, conv.out_channels)
            and len({a.dtype for a in arrays}) == 1)


def filter_tensor(op, kind: str):
    """A convolution node's filter -- for a filter backprop ("filter"), its output, which has
    the filter's shape -- for the static shape ``kind``'s kernel will see."""
    return op.outputs[0] if kind == "filter" else op.inputs[1]


def compiled_loop_may_run(op, kind: str) -> bool:
    """Whether a convolution node's compiled loop (the numba backend's: ``kind`` "forward" the
    tap form's gather, "filter" its spread, "input" the col2im scatter) may ever be taken, as
    far as its static shapes tell: False only when they show the NumPy form is the one every
    call takes (a 1x1 convolution is one matrix product; a strided one has no tap form), so
    that no loop is compiled for nothing. Unknown sizes, or attrs the kernel will refuse: True."""
    try:
        geometry = Geometry.from_op(op)
    except ValueError:
        return True
    channel = 3 if geometry.fmt == "NHWC" else 1
    data = op.outputs[0] if kind == "input" else op.inputs[0]       # the input (or its gradient)
    filt = filter_tensor(op, kind)
    if data.shape.rank != 4 or filt.shape.rank != 4:
        return True
    c, (kh, kw, fc, oc) = data.shape.as_list()[channel], filt.shape.as_list()
    if None in (c, kh, kw, fc, oc) or not fc or c % fc:
        return True
    groups, strides = c // fc, geometry.strides
    if kh == kw == 1 and groups == 1 and strides == (1, 1) and geometry.pads == ((0, 0), (0, 0)):
        return False                     # pointwise: a matrix product, whatever the batch
    return (_scatter_fits if kind == "input" else _taps_fit)(groups, strides, c, oc)


# -- the direct form: a few output channels -------------------------------------------------

# The most bytes of a position's output channels the direct form takes (32 float32 channels,
# 16 float64). Conv2D at batch 8, 3x3, one thread, on the 2-vCPU AMD EPYC of
# docs/benchmarks.md, the direct forward loop against the forms above: float32 16 -> 4
# channels at 32x32 2.5x faster, 16 -> 16 2.3x, 32 -> 32 1.5x; float64 8 -> 8 3.7x; float32
# 64 -> 64 (256 bytes) 0.9x: there BLAS's products win.
DIRECT_BYTES = 128
# A direct filter backprop reads the output gradient once for each tap and block of input
# channels: it takes the convolutions whose tap's gradient (c * channels values) is at most
# this many bytes. float32 32 -> 32 channels (4 KiB) ran 0.7x im2col's speed; float64 16 -> 16
# (2 KiB) 1.5x, float32 16 -> 16 1.5x.
DIRECT_FILTER_BYTES = 2048
# The registers of accumulators a direct loop keeps (eight of the sixteen AVX ones): a
# position's channels are one vector (in parts of powers of two lanes: gradreg.native's
# Vector), and the loop holds ``direct_block`` of them, whose chains of multiply-adds overlap.
# At every size measured this block beat half and twice it (16 -> 4 float32 forward 0.25 ms
# against 0.37 at half; 8 -> 8 float64 0.23 against 0.36 at half and 0.61 at twice).
ACCUMULATOR_REGISTERS = 8
# Direct convolutions of at least this many flops a thread share their batch among threads
# (float64 flops count two): the loops run at 25-90 Gflop/s, so ~0.1 ms a thread.
DIRECT_FLOPS_PER_THREAD = 4e6


class DirectLoop(NamedTuple):
    """A compiled direct loop (the numba backend's, nn/native_kernels.direct_conv_loop) and the
    arrays it takes: vectors of ``channels`` elements of ``dtype``. ``run(a, b, out, sh, sw, dh,
    dw, top, left, n0, n1, ...)``: forward (input, filter, output) or filter backprop (input,
    output gradient, filter gradient), over batch entries n0..n1, then ints and arrays saying
    where each tap lies inside the input (nn/native_kernels). ``outputs``: for a filter loop
    whose vectors are the input's channels ("filter_wide"), the output channels it takes."""
    run: Callable[..., None]
    channels: int
    dtype: np.dtype
    outputs: int = 0


class DirectForm(NamedTuple):
    """The direct loop a Conv2D node's kernel takes (direct_form): nn/native_kernels'
    ``loop`` ("forward", "filter", "filter_wide") over vectors of ``channels`` holding
    ``block`` accumulators."""
    loop: str
    channels: int
    block: int


def _registers(channels: int, itemsize: int) -> int:
    """The 32-byte registers a vector of ``channels`` takes: its parts of a power of two lanes
    (gradreg.native's Vector), one register at least each."""
    return sum(max(1, bit * itemsize // 32) for bit in (1 << b for b in range(channels.bit_length()))
               if channels & bit)


def direct_block(channels: int, itemsize: int, limit: int | None = None) -> int:
    """The accumulators a direct loop over vectors of ``channels`` holds: as many as fit in
    ACCUMULATOR_REGISTERS (_registers a vector), 1 to 8, at most ``limit`` (a filter loop's
    blocks are input channels)."""
    block = max(1, min(8, ACCUMULATOR_REGISTERS // max(1, _registers(channels, itemsize))))
    return max(1, min(block, limit)) if limit else block


def direct_form(op, kind: str) -> DirectForm | None:
    """The direct loop (DirectForm) a Conv2D node's kernel of ``kind`` ("forward", "input",
    "filter") takes, by its static shapes: None where they are unknown or the direct
    form never runs (groups, a pointwise product, too many channels, a strided input
    backprop, a dtype other than float32 and float64). The input backprop is a forward loop over
    the input's channels (_direct_input)."""
    try:
        geometry = Geometry.from_op(op)
    except ValueError:
        return None
    storage_dtype = np.dtype(op.get_attr("T").storage)
    if storage_dtype not in (np.float32, np.float64):
        return None
    channel = 3 if geometry.fmt == "NHWC" else 1
    data = op.outputs[0] if kind == "input" else op.inputs[0]
    filt = filter_tensor(op, kind)
    if data.shape.rank != 4 or filt.shape.rank != 4:
        return None
    c, (kh, kw, fc, oc) = data.shape.as_list()[channel], filt.shape.as_list()
    if None in (c, kh, kw, fc, oc) or c != fc:
        return None
    if kh == kw == 1 and geometry.strides == (1, 1) and geometry.pads == ((0, 0), (0, 0)):
        # pointwise: one matrix product. The direct loops ran these 1-3% faster in MobileNetV2
        # and the slim DenseNet (forward, input backprop), not worth their builds: a module each
        # count of channels, three more for MobileNetV2 from an empty cache.
        return None
    if kind == "input" and geometry.strides != (1, 1):
        return None
    itemsize = storage_dtype.itemsize
    if kind == "filter" and _filter_wide(c, oc, itemsize):
        return DirectForm("filter_wide", c, oc)
    channels = c if kind == "input" else oc
    if channels * itemsize > DIRECT_BYTES:
        return None
    if kind == "filter" and c * oc * itemsize > DIRECT_FILTER_BYTES:
        return None
    return DirectForm("filter" if kind == "filter" else "forward", channels,
                      direct_block(channels, itemsize, c if kind == "filter" else None))


def _filter_wide(c: int, oc: int, itemsize: int) -> bool:
    """Whether a filter backprop's loop takes vectors of the input's ``c`` channels (one for each
    of the ``oc`` output channels): where the output channels fill only part of a register and
    the input's fill one, and ``oc`` such vectors fit in ACCUMULATOR_REGISTERS. Batch 8, 3x3,
    SAME, one thread, against the filter loop's vectors of the output channels: float32
    16 -> 4 at 32x32 277 -> 128 us, at 16x16 66 -> 29 us; 12 -> 4 562 -> 171 us; 8 -> 4 189 ->
    112 us; 16 -> 2 275 -> 106 us; float64 8 -> 2 168 -> 133 us. The slim DenseNet's step
    (three 16 -> 4 at 32x32, two at 16x16), both forms in turns in one process: 15.2 -> 14.5 ms."""
    return oc * itemsize < 32 <= c * itemsize and oc * _registers(c, itemsize) <= ACCUMULATOR_REGISTERS


def _direct_takes(direct: DirectLoop | None, conv: _Conv, channels: int, *arrays: np.ndarray) -> bool:
    return (direct is not None and direct.channels == channels and conv.groups == 1 and not conv.pointwise
            and all(a.dtype == direct.dtype for a in arrays))


def _inside(size: int, out: int, stride: int, tap: int, pad: int) -> tuple[int, int]:
    """The outputs (lo, hi) along one dimension whose ``tap`` (its offset in the input:
    index times dilation) lands inside an input of ``size``: lo <= o < hi, 0 <= lo <= hi <= out
    (the loops write outputs 0..lo one by one: lo never passes the output's end, even where the
    padding before is wider than the output)."""
    lo = min(out, max(0, -((tap - pad) // stride)))
    hi = min(out, (size - 1 + pad - tap) // stride + 1)
    return lo, max(lo, hi)


def _direct_batch(conv: _Conv, itemsize: int, run: Callable[[int, int], object]) -> list:
    """``run(n0, n1)`` over the batch, in pieces taken as they come by the threads the
    convolution's size earns."""
    threads = min(conv.n, ks.threads_for(conv.flops * itemsize / 4, DIRECT_FLOPS_PER_THREAD))
    if threads <= 1:
        return [run(0, conv.n)]
    pieces = ks.split(conv.n, min(conv.n, 4 * threads))
    return ks.parallel(lambda i: run(*pieces[i]), len(pieces), threads)


def _correlate(conv: _Conv, x: np.ndarray, f: np.ndarray, out: np.ndarray, strides: tuple, pads: tuple,
               direct: DirectLoop) -> np.ndarray:
    """``out`` (n, oh, ow, channels) = the correlation of NHWC ``x``, padded by ``pads`` (top,
    left) in the loop, with ``f`` (kh, kw, c, channels), by the direct forward loop: the
    output columns where every tap's column is inside ``x`` (_inside, of the first and the last
    tap) a block at a time, the others tap by tap."""
    x, f = np.ascontiguousarray(x), np.ascontiguousarray(f)
    (sh, sw), (dh, dw), (top, left) = strides, conv.g.dilations, pads
    w, ow, kw = x.shape[2], out.shape[2], f.shape[1]
    x0, x1 = _inside(w, ow, sw, 0, left)[0], _inside(w, ow, sw, (kw - 1) * dw, left)[1]
    x1 = max(x0, x1)
    _direct_batch(conv, out.itemsize, lambda n0, n1: direct.run(x, f, out, sh, sw, dh, dw, top, left, n0, n1, x0, x1))
    return out


def _direct_forward(conv: _Conv, x: np.ndarray, f: np.ndarray, direct: DirectLoop) -> np.ndarray:
    """Conv2D by the direct loop: each output position's channels summed over its window in
    vectors."""
    out = np.empty((conv.n, conv.oh, conv.ow, conv.out_channels), direct.dtype)
    return _correlate(conv, x, f, out, conv.g.strides, (conv.top, conv.left), direct)


def _transposed_pads(conv: _Conv) -> tuple[int, int, int, int] | None:
    """The pads (top, bottom, left, right) of ``dy`` under which the input backprop of a
    stride-1 convolution of one group is a forward one (every input position sees the window
    of outputs it fed); None where that does not apply (strides, groups, pads beyond the
    window)."""
    if conv.g.strides != (1, 1) or conv.groups != 1:
        return None
    (eh, ew) = conv.g.effective((conv.kh, conv.kw))
    pads = (eh - 1 - conv.top, eh - 1 - conv.bottom, ew - 1 - conv.left, ew - 1 - conv.right)
    return pads if min(pads) >= 0 else None


def _direct_input(conv: _Conv, f: np.ndarray, dy: np.ndarray, direct: DirectLoop) -> np.ndarray | None:
    """Conv2DBackpropInput of a stride-1 convolution by the direct forward loop: ``dy`` padded
    (in the loop) by _transposed_pads, correlated with the filter flipped in space and its
    channels swapped (as _transposed). None where that does not apply."""
    pads = _transposed_pads(conv)
    if pads is None:
        return None
    top, _, left, _ = pads
    weights = f[::-1, ::-1].transpose(0, 1, 3, 2)
    dx = np.empty((conv.n, conv.h, conv.w, conv.c), direct.dtype)
    return _correlate(conv, dy, weights, dx, (1, 1), (top, left), direct)


def _direct_filter(conv: _Conv, x: np.ndarray, dy: np.ndarray, direct: DirectLoop) -> np.ndarray:
    """Conv2DBackpropFilter by the direct loop: each tap's and input channel's gradient, over
    the output positions where that tap is inside the input, in vectors of the output
    channels (a part of the batch each, the parts' sums added)."""
    x, dy = np.ascontiguousarray(x), np.ascontiguousarray(dy)
    (sh, sw), (dh, dw) = conv.g.strides, conv.g.dilations
    rows = np.array([_inside(conv.h, conv.oh, sh, i * dh, conv.top) for i in range(conv.kh)], np.int64).reshape(-1, 2)
    cols = np.array([_inside(conv.w, conv.ow, sw, j * dw, conv.left) for j in range(conv.kw)], np.int64).reshape(-1, 2)
    y0, y1, x0, x1 = (np.ascontiguousarray(a) for a in (rows[:, 0], rows[:, 1], cols[:, 0], cols[:, 1]))
    shape = (conv.kh, conv.kw, conv.c, conv.out_channels)

    def run(n0: int, n1: int) -> np.ndarray:
        df = np.empty(shape, direct.dtype)
        direct.run(x, dy, df, sh, sw, dh, dw, conv.top, conv.left, n0, n1, y0, y1, x0, x1)
        return df
    return _summed(_direct_batch(conv, dy.itemsize, run))


def _tap_bytes(conv: _Conv, itemsize: int) -> int:
    """Bytes of one batch entry's tap products: every input position, kh * kw * out values."""
    return conv.h * conv.w * conv.kh * conv.kw * conv.out_channels * itemsize


def _tap_forward(conv: _Conv, x: np.ndarray, f: np.ndarray, gather) -> np.ndarray:
    """Conv2D as every input position times every tap's weights (one product a block of the
    batch, (positions, c) x (c, kh * kw * out): far fewer values than the im2col copy when out
    is small), each output then the sum of the products of its taps that fall inside the
    input, gathered by ``gather``, a compiled loop (nn/numba_kernels). No padded copy: a tap
    in the padding would add zero."""
    weights = f.transpose(2, 0, 1, 3).reshape(1, conv.c, -1)
    out = np.empty((conv.n, conv.oh, conv.ow, conv.out_channels), np.result_type(x, f))
    (sh, sw), (dh, dw) = conv.g.strides, conv.g.dilations

    def block(part: _Conv, n0: int, n1: int, product) -> None:
        z = product(x[n0:n1].reshape(1, -1, conv.c), weights, part.flops)
        gather(z.reshape(n1 - n0, conv.h, conv.w, conv.kh, conv.kw, conv.out_channels), out[n0:n1],
               sh, sw, dh, dw, conv.top, conv.left)

    _over_batch(conv, _tap_bytes(conv, out.itemsize), block, out.itemsize)
    return out


def _forward(conv: _Conv, x: np.ndarray, f: np.ndarray, dtype, gather=None, direct=None) -> np.ndarray:
    """Conv2D in NHWC: im2col, or the tap form when ``gather`` (a compiled loop, from the numba
    backend) is given and _by_taps says so, or the direct form when ``direct`` (a DirectLoop)
    takes these arrays."""
    if conv.empty:
        return np.zeros((conv.n, conv.oh, conv.ow, conv.out_channels), dtype)
    x, f = widen(x), widen(f)
    if conv.pointwise:
        y = _matmul(x.reshape(1, -1, conv.c), f.reshape(1, conv.c, conv.out_channels), conv.flops)
        return conv.ungroup_out(y).astype(dtype, copy=False)
    if _direct_takes(direct, conv, conv.out_channels, x, f):
        return _direct_forward(conv, x, f, direct).astype(dtype, copy=False)
    if gather is not None and _by_taps(conv, x, f):
        return _tap_forward(conv, np.ascontiguousarray(x), f, gather).astype(dtype, copy=False)
    weights = conv.grouped_filter(f)
    out = np.empty((conv.n, conv.oh, conv.ow, conv.out_channels), np.result_type(x, f))
    windows = conv.windows(conv.padded(x))

    def block(part: _Conv, n0: int, n1: int, product) -> None:
        out[n0:n1] = part.ungroup_out(product(part.im2col(x, windows, n0), weights, part.flops))

    _over_batch(conv, conv.window_bytes * out.itemsize // 4, block, out.itemsize)
    return out.astype(dtype, copy=False)


def _transposed(conv: _Conv, f: np.ndarray, dy: np.ndarray) -> np.ndarray | None:
    """The input backprop of a stride-1 convolution as a forward one: ``dy`` padded so that
    every input position sees the window of outputs it fed, correlated with the filter
    flipped in space and with its channels swapped. 1.5-5x faster than scattering columns
    back (col2im). None where it does not apply (_transposed_pads)."""
    pads = _transposed_pads(conv)
    if pads is None:
        return None
    top, bottom, left, right = pads
    valid = Geometry(conv.g.fmt, (1, 1), conv.g.dilations, "VALID", ((0, 0), (0, 0)))
    shape = (conv.n, conv.oh + top + bottom, conv.ow + left + right, conv.out_channels)
    inner = _Conv(valid, shape, (conv.kh, conv.kw), 1, conv.c, conv.ctx, conv.op)
    weights = inner.grouped_filter(np.ascontiguousarray(f[::-1, ::-1].transpose(0, 1, 3, 2)))
    dx = np.empty((conv.n, conv.h, conv.w, conv.c), np.result_type(f, dy))
    windows = inner.windows(pad_spatial(dy, top, bottom, left, right))

    def block(part: _Conv, n0: int, n1: int, product) -> None:
        dx[n0:n1] = product(part.im2col(dy, windows, n0), weights, part.flops).reshape(n1 - n0, conv.h, conv.w, conv.c)

    _over_batch(inner, inner.window_bytes * dx.itemsize // 4, block, dx.itemsize)
    return dx


def _scattered(conv: _Conv, f: np.ndarray, dy: np.ndarray, scatter) -> np.ndarray:
    """The input backprop as every output position's columns (dy times the filter: one
    product a block of the batch) summed into the input positions they came from by
    ``scatter``, a compiled loop (nn/numba_kernels): the im2col copy of the transposed form
    holds kh*kw*out_channels values a position, this product kh*kw*in_channels, and strides
    need no zero-stuffing."""
    weights = f.reshape(-1, conv.out_channels).T[None]     # (1, out, kh * kw * in)
    dx = np.empty((conv.n, conv.h, conv.w, conv.c), np.result_type(f, dy))
    (sh, sw), (dh, dw) = conv.g.strides, conv.g.dilations

    def block(part: _Conv, n0: int, n1: int, product) -> None:
        cols = product(dy[n0:n1].reshape(1, -1, conv.out_channels), weights, part.flops)
        scatter(cols.reshape(n1 - n0, conv.oh, conv.ow, conv.kh, conv.kw, conv.c), dx[n0:n1],
                sh, sw, dh, dw, conv.top, conv.left)

    _over_batch(conv, conv.window_bytes * dx.itemsize // 4, block, dx.itemsize)
    return dx


def _backprop_input(conv: _Conv, f: np.ndarray, dy: np.ndarray, dtype, scatter=None, direct=None) -> np.ndarray:
    """Conv2DBackpropInput in NHWC. ``direct`` (a DirectLoop: a forward loop over the input's
    channels) takes the stride-1 convolutions it was built for. ``scatter`` (a compiled col2im,
    from the numba backend) takes the convolutions where it measured faster than the transposed form: strided ones
    (0.77 -> 0.49 ms in the slim ResNet), and those with at most half as many input channels
    as output channels (3 -> 8: 1.05 -> 0.65 ms; with as many, 8 -> 8, it was slower)."""
    if conv.empty:
        return np.zeros((conv.n, conv.h, conv.w, conv.c), dtype)
    dy, f = widen(dy), widen(f)
    weights = conv.grouped_filter(f).transpose(0, 2, 1)
    if conv.pointwise:
        dx = _matmul(conv.grouped_out(dy), weights, conv.flops)
        return dx.reshape(conv.n, conv.h, conv.w, conv.c).astype(dtype, copy=False)
    if _direct_takes(direct, conv, conv.c, f, dy):
        direct_dx = _direct_input(conv, f, dy, direct)
        if direct_dx is not None:
            return direct_dx.astype(dtype, copy=False)
    if (scatter is not None and f.dtype == dy.dtype
            and _scatter_fits(conv.groups, conv.g.strides, conv.c, conv.out_channels)):
        return _scattered(conv, f, np.ascontiguousarray(dy), scatter).astype(dtype, copy=False)
    transposed = _transposed(conv, f, dy)
    if transposed is not None:
        return transposed.astype(dtype, copy=False)
    dx = np.empty((conv.n, conv.h, conv.w, conv.c), np.result_type(f, dy))

    def block(part: _Conv, n0: int, n1: int, product) -> None:
        cols = product(part.grouped_out(dy[n0:n1]), weights, part.flops)
        dx[n0:n1] = part.col2im(cols, cols.dtype)

    _over_batch(conv, conv.window_bytes * dx.itemsize // 4, block, dx.itemsize)
    return dx.astype(dtype, copy=False)


def _summed(terms: list) -> np.ndarray:
    """The sum of the batch blocks' partial filter gradients (in the first one's array; the
    batch is not empty where this is called)."""
    total = terms[0]
    for term in terms[1:]:
        np.add(total, term, out=total)
    return total


def _tap_filter(conv: _Conv, x: np.ndarray, dy: np.ndarray, spread) -> np.ndarray:
    """Conv2DBackpropFilter in the tap form: ``spread`` (a compiled loop) writes each output
    position's dy at the input positions its taps read, one column group a tap (taps in the
    padding read zeros and are left out); one product of the input with that, (c, positions) x
    (positions, kh * kw * out), a block of the batch at a time, holds every tap's filter
    gradient."""
    (sh, sw), (dh, dw) = conv.g.strides, conv.g.dilations
    dtype = np.result_type(x, dy)

    def block(part: _Conv, n0: int, n1: int, product) -> np.ndarray:
        spread_dy = np.empty((n1 - n0, conv.h, conv.w, conv.kh, conv.kw, conv.out_channels), dtype)
        spread(dy[n0:n1], spread_dy, sh, sw, dh, dw, conv.top, conv.left)
        return product(x[n0:n1].reshape(1, -1, conv.c).transpose(0, 2, 1),
                       spread_dy.reshape(1, -1, conv.kh * conv.kw * conv.out_channels), part.flops)

    df = _summed(_over_batch(conv, 2 * _tap_bytes(conv, dtype.itemsize), block, dtype.itemsize))
    return df.reshape(conv.c, conv.kh, conv.kw, conv.out_channels).transpose(1, 2, 0, 3)


def _backprop_filter(conv: _Conv, x: np.ndarray, dy: np.ndarray, dtype, spread=None, direct=None) -> np.ndarray:
    """Conv2DBackpropFilter in NHWC: im2col, or the tap form when ``spread`` (a compiled loop,
    from the numba backend) is given and _by_taps says so, or the direct form when ``direct``
    (a DirectLoop) takes these arrays."""
    if conv.empty:
        return np.zeros((conv.kh, conv.kw, conv.c // conv.groups, conv.out_channels), dtype)
    x, dy = widen(x), widen(dy)
    if conv.pointwise:
        product = _matmul(x.reshape(1, -1, conv.c).transpose(0, 2, 1), conv.grouped_out(dy), conv.flops)
        return conv.ungroup_filter(product).astype(dtype, copy=False)
    if direct is not None and direct.outputs:
        if _direct_takes(direct, conv, conv.c, x, dy) and conv.out_channels == direct.outputs:
            return _direct_filter(conv, x, dy, direct).astype(dtype, copy=False)
    elif _direct_takes(direct, conv, conv.out_channels, x, dy):
        return _direct_filter(conv, x, dy, direct).astype(dtype, copy=False)
    if spread is not None and _by_taps(conv, x, dy):
        return _tap_filter(conv, np.ascontiguousarray(x), np.ascontiguousarray(dy), spread).astype(dtype, copy=False)
    windows = conv.windows(conv.padded(x))

    def block(part: _Conv, n0: int, n1: int, product) -> np.ndarray:
        return product(part.im2col(x, windows, n0).transpose(0, 2, 1), part.grouped_out(dy[n0:n1]), part.flops)

    itemsize = np.result_type(x, dy).itemsize
    df = _summed(_over_batch(conv, conv.window_bytes * itemsize // 4, block, itemsize))
    return conv.ungroup_filter(df).astype(dtype, copy=False)


# Depthwise, tap by tap: f is (kh, kw, c, multiplier), the output's channel c * multiplier + k.
# With one output per channel (_window_sum): from this many channels, one einsum over a view of
# every position's window: 1.5-1.9x faster from 96 channels (MobileNetV2's (2, 16, 16, 144)
# stride 1: 297 -> 168 us), 1.3x slower at 16; below it, with stride 1, the taps over rows of
# (width * channels) values, the weights tiled along them (a 16-channel tap's rows were 16
# values long, a NumPy loop each).
WINDOW_EINSUM_CHANNELS = 64


def _window_sum(conv: _Conv, padded: np.ndarray, f: np.ndarray, strides, dilations, oh: int, ow: int):
    """out[n, y, x, c] = sum over taps (i, j) of padded[n, y * sh + i * dh, x * sw + j * dw, c]
    times f[i, j, c] (f: (kh, kw, c)); None where the tap by tap form is left to do it."""
    (sh, sw), (dh, dw) = strides, dilations
    n, c = padded.shape[0], padded.shape[3]
    if c >= WINDOW_EINSUM_CHANNELS:
        sn, sy, sx, sc = padded.strides
        windows = as_strided(padded, (n, oh, ow, c, conv.kh, conv.kw),
                             (sn, sy * sh, sx * sw, sc, sy * dh, sx * dw), writeable=False)
        return np.einsum("nhwcij,ijc->nhwc", windows, f)
    if (sh, sw) != (1, 1) or not padded.flags.c_contiguous:
        return None
    out = np.empty((n, oh, ow * c), np.result_type(padded, f))
    scratch = np.empty_like(out)
    for i in range(conv.kh):
        for j in range(conv.kw):
            rows = padded[:, i * dh:i * dh + oh, j * dw:j * dw + ow, :].reshape(n, oh, ow * c)
            np.multiply(rows, np.tile(f[i, j], ow), out=scratch if i or j else out)
            if i or j:
                out += scratch
    return out.reshape(n, oh, ow, c)


def depthwise_forward(conv: _Conv, x: np.ndarray, f: np.ndarray, dtype) -> np.ndarray:
    """DepthwiseConv2dNative in NHWC: the sum over taps of the tap's inputs times its weights."""
    m = f.shape[3]
    x, f = widen(x), widen(f)
    if m == 1 and not conv.empty:
        out = _window_sum(conv, conv.padded(x), f[..., 0], conv.g.strides, conv.g.dilations, conv.oh, conv.ow)
        if out is not None:
            return out.astype(dtype, copy=False)
    out = np.zeros((conv.n, conv.oh, conv.ow, conv.c, m), np.result_type(x, f))
    if conv.empty:
        return out.reshape(conv.n, conv.oh, conv.ow, -1).astype(dtype, copy=False)
    padded = conv.padded(x)
    scratch = np.empty_like(out)
    for i in range(conv.kh):
        for j in range(conv.kw):
            np.multiply(conv.tap(padded, i, j)[..., None], f[i, j], out=scratch)
            out += scratch
    return out.reshape(conv.n, conv.oh, conv.ow, -1).astype(dtype, copy=False)


def _full_pads(conv: _Conv) -> tuple[int, int, int, int] | None:
    """With stride 1, the input gradient is dy padded by these (top, bottom, left, right),
    correlated with the flipped filter; None where a side's padding exceeds the window's reach
    (the tap by tap form then)."""
    (dh, dw) = conv.g.dilations
    reach_h, reach_w = (conv.kh - 1) * dh, (conv.kw - 1) * dw
    if conv.g.strides != (1, 1) or not (0 <= conv.top <= reach_h and 0 <= conv.bottom <= reach_h
                                        and 0 <= conv.left <= reach_w and 0 <= conv.right <= reach_w):
        return None
    return reach_h - conv.top, reach_h - conv.bottom, reach_w - conv.left, reach_w - conv.right


def depthwise_backprop_input(conv: _Conv, f: np.ndarray, dy: np.ndarray, dtype) -> np.ndarray:
    m = f.shape[3]
    dy, f = widen(dy), widen(f)
    result = np.result_type(dy, f)
    pads = _full_pads(conv) if m == 1 and not conv.empty else None
    if pads is not None:
        padded_dy = pad_spatial(dy.reshape(conv.n, conv.oh, conv.ow, conv.c), *pads)
        dx = _window_sum(conv, padded_dy, f[::-1, ::-1, :, 0], (1, 1), conv.g.dilations, conv.h, conv.w)
        if dx is not None:
            return dx.astype(dtype, copy=False)
    padded = np.zeros((conv.n, conv.h + conv.top + conv.bottom, conv.w + conv.left + conv.right, conv.c), result)
    if not conv.empty:
        dy = dy.reshape(conv.n, conv.oh, conv.ow, conv.c, m)
        for i in range(conv.kh):
            for j in range(conv.kw):
                contribution = dy[..., 0] * f[i, j, :, 0] if m == 1 else np.einsum("nhwck,ck->nhwc", dy, f[i, j])
                conv.tap(padded, i, j)[...] += contribution
    return conv.crop(padded).astype(dtype, copy=False)


def depthwise_backprop_filter(conv: _Conv, x: np.ndarray, dy: np.ndarray, m: int, dtype) -> np.ndarray:
    x, dy = widen(x), widen(dy)
    df = np.zeros((conv.kh, conv.kw, conv.c, m), np.result_type(x, dy))
    if m == 1 and conv.c < WINDOW_EINSUM_CHANNELS and not conv.empty:
        # few channels: each tap's products, then their sum over the positions by BLAS
        # (ks.column_sums), not an einsum looping over rows of c values (1.8x faster at 16)
        padded, dy = conv.padded(x), dy.reshape(conv.n, conv.oh, conv.ow, conv.c)
        products = np.empty(dy.shape, df.dtype)
        for i in range(conv.kh):
            for j in range(conv.kw):
                np.multiply(conv.tap(padded, i, j), dy, out=products)
                df[i, j, :, 0] = ks.column_sums(products.reshape(-1, conv.c))
    elif not conv.empty:
        padded = conv.padded(x)
        dy = dy.reshape(conv.n, conv.oh, conv.ow, conv.c, m)
        for i in range(conv.kh):
            for j in range(conv.kw):
                df[i, j] = np.einsum("nhwc,nhwck->ck", conv.tap(padded, i, j), dy)
    return df.astype(dtype, copy=False)


def _size_vector(value: np.ndarray, name: str) -> list[int]:
    sizes = [int(v) for v in np.asarray(value).reshape(-1)]
    if np.ndim(value) != 1 or min(sizes, default=0) < 0:
        raise ValueError(f"{name} must be a vector of nonnegative sizes, got {np.asarray(value).tolist()}")
    return sizes


def _input_sizes(value: np.ndarray, fmt: str, batch: int, depth: int) -> tuple[int, int, int, int]:
    """input_sizes in NHWC order: 4 sizes in the data format's order, or the 2 spatial sizes
    (batch then comes from out_backprop and depth from the filter, as in TensorFlow)."""
    sizes = _size_vector(value, "input_sizes")
    if len(sizes) == 2:
        return batch, sizes[0], sizes[1], depth
    if len(sizes) != 4:
        raise ValueError(f"input_sizes must contain 4 values or 2 values, got {sizes}")
    return to_nhwc(sizes, fmt)


def _filter_sizes(value: np.ndarray) -> tuple[int, int, int, int]:
    sizes = _size_vector(value, "filter_sizes")
    if len(sizes) != 4:
        raise ValueError(f"filter_sizes must contain 4 values, got {sizes}")
    height, width, channels, filters = sizes
    return height, width, channels, filters


# The kernels below keep their _Conv (the checks, output size and pads worked out from the
# inputs' shapes) in a ShapeMemo: that took 10-30 us a call, and a MobileNetV2 step runs ~160
# convolution kernels of 30-60 us.
def _sizes_key(value) -> tuple:
    """A key for a sizes input (input_sizes, filter_sizes): its dtype, shape and values."""
    value = np.asarray(value)
    return value.dtype.str, value.shape, value.tobytes()


# -- Conv2D -----------------------------------------------------------------------------

@kernel("Conv2D")
def conv2d(op, ctx, gather=None, direct=None):
    """The kernel; ``gather`` and ``direct`` as in _forward (the numba backend's kernel passes them)."""
    geometry, dtype = _geometry(op), storage(op)

    known = ShapeMemo()

    def make(x_shape, f_shape) -> _Conv:
        _check_rank4("input", x_shape)
        _check_rank4("filter", f_shape)
        shape = to_nhwc(x_shape, geometry.fmt)
        kh, kw, fc, oc = f_shape
        return _Conv(geometry, shape, (kh, kw), _groups(shape[3], fc, oc), oc, ctx, op)

    def conv2d(x, f):
        conv = known.get((x.shape, f.shape), lambda: make(x.shape, f.shape))
        x = array_to_nhwc(x, geometry.fmt)
        return array_from_nhwc(_forward(conv, x, f, dtype, gather, direct), geometry.fmt)
    return conv2d



@kernel("Conv2DBackpropInput")
def conv2d_backprop_input(op, ctx, scatter=None, direct=None):
    """The kernel; ``scatter`` and ``direct`` as in _backprop_input (the numba backend's kernel passes them)."""
    geometry, dtype = _geometry(op), storage(op)

    known = ShapeMemo()

    def make(input_sizes, f_shape, dy_shape) -> _Conv:
        _check_rank4("filter", f_shape)
        _check_rank4("out_backprop", dy_shape)
        dy_shape = to_nhwc(dy_shape, geometry.fmt)
        kh, kw, fc, oc = f_shape
        shape = _input_sizes(input_sizes, geometry.fmt, dy_shape[0], fc)
        ctx.check_shape(shape, op)
        conv = _Conv(geometry, shape, (kh, kw), _groups(shape[3], fc, oc), oc, ctx, op)
        conv.check_out_backprop(dy_shape)
        return conv

    def backprop_input(input_sizes, f, dy):
        conv = known.get((_sizes_key(input_sizes), f.shape, dy.shape), lambda: make(input_sizes, f.shape, dy.shape))
        dy = array_to_nhwc(dy, geometry.fmt)
        return array_from_nhwc(_backprop_input(conv, f, dy, dtype, scatter, direct), geometry.fmt)
    return backprop_input



@kernel("Conv2DBackpropFilter")
def conv2d_backprop_filter(op, ctx, spread=None, direct=None):
    """The kernel; ``spread`` and ``direct`` as in _backprop_filter (the numba backend's kernel passes them)."""
    geometry, dtype = _geometry(op), storage(op)

    known = ShapeMemo()

    def make(x_shape, filter_sizes, dy_shape) -> _Conv:
        _check_rank4("input", x_shape)
        _check_rank4("out_backprop", dy_shape)
        x_shape, dy_shape = to_nhwc(x_shape, geometry.fmt), to_nhwc(dy_shape, geometry.fmt)
        kh, kw, fc, oc = _filter_sizes(filter_sizes)
        ctx.check_shape((kh, kw, fc, oc), op)
        conv = _Conv(geometry, x_shape, (kh, kw), _groups(x_shape[3], fc, oc), oc, ctx, op)
        conv.check_out_backprop(dy_shape)
        return conv

    def backprop_filter(x, filter_sizes, dy):
        conv = known.get((x.shape, _sizes_key(filter_sizes), dy.shape), lambda: make(x.shape, filter_sizes, dy.shape))
        x, dy = array_to_nhwc(x, geometry.fmt), array_to_nhwc(dy, geometry.fmt)
        return _backprop_filter(conv, x, dy, dtype, spread, direct)
    return backprop_filter



# -- depthwise: grouped convolution with one group per input channel -------------------------

def _depthwise_conv(geometry: Geometry, input_nhwc, filter_shape, ctx, op) -> _Conv:
    kh, kw, fc, multiplier = filter_shape
    if fc != input_nhwc[3]:
        raise ValueError(f"input depth ({input_nhwc[3]}) must equal the filter's input depth ({fc})")
    return _Conv(geometry, input_nhwc, (kh, kw), fc, fc * multiplier, ctx, op)


def depthwise_setup(op, ctx, kind: str):
    """A function checking a depthwise node's inputs and returning (_Conv, NHWC arrays):
    ``kind`` "forward" (x, f) -> (conv, x, f); "input" (input_sizes, f, dy) -> (conv, f, dy);
    "filter" (x, filter_sizes, dy) -> (conv, x, dy, filter shape). The numba kernels use it too."""
    geometry = _geometry(op)

    known = ShapeMemo()

    def make_forward(x_shape, f_shape) -> _Conv:
        _check_rank4("input", x_shape)
        _check_rank4("filter", f_shape)
        return _depthwise_conv(geometry, to_nhwc(x_shape, geometry.fmt), f_shape, ctx, op)

    def forward(x, f):
        conv = known.get((x.shape, f.shape), lambda: make_forward(x.shape, f.shape))
        return conv, array_to_nhwc(x, geometry.fmt), f

    def make_input(input_sizes, f_shape, dy_shape) -> _Conv:
        _check_rank4("filter", f_shape)
        _check_rank4("out_backprop", dy_shape)
        dy_shape = to_nhwc(dy_shape, geometry.fmt)
        shape = _input_sizes(input_sizes, geometry.fmt, dy_shape[0], f_shape[2])
        ctx.check_shape(shape, op)
        conv = _depthwise_conv(geometry, shape, f_shape, ctx, op)
        conv.check_out_backprop(dy_shape)
        return conv

    def backprop_input(input_sizes, f, dy):
        conv = known.get((_sizes_key(input_sizes), f.shape, dy.shape),
                         lambda: make_input(input_sizes, f.shape, dy.shape))
        return conv, f, array_to_nhwc(dy, geometry.fmt)

    def make_filter(x_shape, filter_sizes, dy_shape) -> tuple:
        _check_rank4("input", x_shape)
        _check_rank4("out_backprop", dy_shape)
        x_shape, dy_shape = to_nhwc(x_shape, geometry.fmt), to_nhwc(dy_shape, geometry.fmt)
        shape = _filter_sizes(filter_sizes)
        ctx.check_shape(shape, op)
        conv = _depthwise_conv(geometry, x_shape, shape, ctx, op)
        conv.check_out_backprop(dy_shape)
        return conv, shape

    def backprop_filter(x, filter_sizes, dy):
        conv, shape = known.get((x.shape, _sizes_key(filter_sizes), dy.shape),
                                lambda: make_filter(x.shape, filter_sizes, dy.shape))
        return conv, array_to_nhwc(x, geometry.fmt), array_to_nhwc(dy, geometry.fmt), shape
    return {"forward": forward, "input": backprop_input, "filter": backprop_filter}[kind]


def layout_of(op) -> str:
    return _geometry(op).fmt


@kernel("DepthwiseConv2dNative")
def _depthwise(op, ctx):
    setup, dtype, fmt = depthwise_setup(op, ctx, "forward"), storage(op), layout_of(op)

    def depthwise(x, f):
        conv, x, f = setup(x, f)
        return array_from_nhwc(depthwise_forward(conv, x, f, dtype), fmt)
    return depthwise


@kernel("DepthwiseConv2dNativeBackpropInput")
def _depthwise_backprop_input(op, ctx):
    setup, dtype, fmt = depthwise_setup(op, ctx, "input"), storage(op), layout_of(op)

    def backprop_input(input_sizes, f, dy):
        conv, f, dy = setup(input_sizes, f, dy)
        return array_from_nhwc(depthwise_backprop_input(conv, f, dy, dtype), fmt)
    return backprop_input


@kernel("DepthwiseConv2dNativeBackpropFilter")
def _depthwise_backprop_filter(op, ctx):
    setup, dtype = depthwise_setup(op, ctx, "filter"), storage(op)

    def backprop_filter(x, filter_sizes, dy):
        conv, x, dy, shape = setup(x, filter_sizes, dy)
        return depthwise_backprop_filter(conv, x, dy, shape[3], dtype)
    return backprop_filter
