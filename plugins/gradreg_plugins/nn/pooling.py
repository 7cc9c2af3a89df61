"""Kernels of 2-D pooling: MaxPool, AvgPool and their gradients (including MaxPoolGradGrad
and the V2 ops taking ksize/strides as inputs).

Each kernel loops over the window's taps, not over elements: tap (i, j) of every output
position is one strided slice of the padded input, so a pass is a few whole-array
operations per tap. The tie and NaN rules are TensorFlow's CPU kernels':

* MaxPool starts from the type's lowest finite value and ignores NaN (an all-NaN or
  all -inf window gives the lowest value);
* MaxPoolGrad recomputes each window's argmax from orig_input, ignoring orig_output: the
  first tap (row-major) is taken, then a later tap replaces it only when strictly greater,
  so ties go to the first maximum and a leading NaN wins;
* MaxPoolGradGrad picks the first tap equal to orig_output (none: 0).
"""
from __future__ import annotations

import numpy as np

from gradreg_plugins.nn.kernels import kernel, node_error, storage, widen
from gradreg_plugins.nn.windows import Geometry, array_from_nhwc, array_to_nhwc, layout, spatial_pair, to_nhwc


class Pool:
    """One pooling window over an NHWC input: output size, pads, and each tap's strided slice
    of the padded input with the output positions at which it lies inside the input."""

    def __init__(self, geometry: Geometry, shape, ksize, ctx, op):
        self.n, self.h, self.w, self.c = shape
        self.kh, self.kw = ksize
        self.sh, self.sw = geometry.strides
        (self.oh, self.top, self.bottom), (self.ow, self.left, self.right) = geometry.output_hw(
            self.h, self.w, ksize)
        self.padded_shape = (self.n, self.h + self.top + self.bottom, self.w + self.left + self.right, self.c)
        ctx.check_elements(self.n * self.oh * self.ow * self.c, op)
        ctx.check_elements(int(np.prod(self.padded_shape)), op)

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return self.n, self.oh, self.ow, self.c

    @property
    def padless(self) -> bool:
        return not (self.top or self.bottom or self.left or self.right)

    def pad(self, x: np.ndarray, fill) -> np.ndarray:
        if self.padless:
            return x
        return np.pad(x, ((0, 0), (self.top, self.bottom), (self.left, self.right), (0, 0)), constant_values=fill)

    def crop(self, padded: np.ndarray) -> np.ndarray:
        return padded[:, self.top:self.top + self.h, self.left:self.left + self.w, :]

    def _inside(self, tap: int, out_size: int, stride: int, pad: int, size: int) -> np.ndarray:
        position = np.arange(out_size) * stride + tap - pad
        return (position >= 0) & (position < size)

    def taps(self):
        """(tap index, slice of the padded input, [1, oh, ow, 1] mask of output positions whose
        tap lies inside the input, or None when all do), in row-major window order."""
        for i in range(self.kh):
            rows_inside = self._inside(i, self.oh, self.sh, self.top, self.h)
            rows = slice(i, i + self.oh * self.sh, self.sh)
            for j in range(self.kw):
                cols_inside = self._inside(j, self.ow, self.sw, self.left, self.w)
                inside = rows_inside[:, None] & cols_inside[None, :]
                mask = None if inside.all() else inside[None, :, :, None]
                yield i * self.kw + j, (slice(None), rows, slice(j, j + self.ow * self.sw, self.sw)), mask

    def counts(self, dtype) -> np.ndarray:
        """[1, oh, ow, 1]: how many taps of each window lie inside the input (AvgPool's divisor)."""
        rows = np.asarray(np.sum([self._inside(i, self.oh, self.sh, self.top, self.h) for i in range(self.kh)],
                                 axis=0, dtype=np.int64))
        cols = np.asarray(np.sum([self._inside(j, self.ow, self.sw, self.left, self.w) for j in range(self.kw)],
                                 axis=0, dtype=np.int64))
        return (rows[:, None] * cols[None, :])[None, :, :, None].astype(dtype)

    def check(self, name: str, a: np.ndarray, shape) -> None:
        if a.shape != tuple(shape):
            raise ValueError(f"{name} has shape {list(a.shape)} (NHWC), expected {list(shape)}")

    def argmax(self, x: np.ndarray) -> np.ndarray:
        """Each window's argmax tap, by TensorFlow's MaxPoolGrad rule (see the module docstring)."""
        padded = self.pad(x, 0)
        best = np.zeros(self.out_shape, x.dtype)
        arg = np.full(self.out_shape, -1, np.int32)
        for k, where, inside in self.taps():
            values = padded[where]
            take = (arg < 0) | (best < values)
            if inside is not None:
                take &= inside
            best = np.where(take, values, best)
            arg = np.where(take, k, arg)
        return arg


def _lowest(dtype: np.dtype):
    return np.finfo(dtype).min if dtype.kind == "f" else np.iinfo(dtype).min


def _check_rank4(**arrays) -> None:
    for name, a in arrays.items():
        if a.ndim != 4:
            raise ValueError(f"{name} must be 4-dimensional, got shape {list(a.shape)}")


def static_geometry(op) -> tuple[Geometry, tuple[int, int]]:
    try:
        geometry = Geometry.from_op(op)
        return geometry, spatial_pair(op.get_attr("ksize"), geometry.fmt, "ksize")
    except ValueError as exc:
        raise node_error(op, str(exc)) from None


def _pool_factory(compute, with_window_inputs: bool):
    """A kernel factory for a pooling op whose window comes from its attrs, or (V2 ops) from
    its last two inputs, ksize and strides. ``compute(pool, fmt, *arrays)`` gets the NHWC window."""
    def factory(op, ctx):
        if with_window_inputs:
            try:
                fmt = layout(op.get_attr("data_format"))
            except ValueError as exc:
                raise node_error(op, str(exc)) from None

            def run(*args):
                *arrays, ksize, strides = args
                geometry = Geometry.from_op(op, strides=np.asarray(strides).reshape(-1))
                window = spatial_pair(np.asarray(ksize).reshape(-1), fmt, "ksize")
                return compute(geometry, window, ctx, op, *arrays)
            return run
        geometry, window = static_geometry(op)
        return lambda *arrays: compute(geometry, window, ctx, op, *arrays)
    return factory


# -- forward ----------------------------------------------------------------------------------

def _max_pool(geometry, window, ctx, op, x):
    _check_rank4(input=x)
    x = array_to_nhwc(x, geometry.fmt)
    pool = Pool(geometry, x.shape, window, ctx, op)
    lowest = _lowest(x.dtype)
    padded = pool.pad(x, lowest)
    out = np.full(pool.out_shape, lowest, x.dtype)
    maximum = np.fmax if x.dtype.kind == "f" else np.maximum
    for _, where, _ in pool.taps():
        maximum(out, padded[where], out=out)
    return array_from_nhwc(out, geometry.fmt)


def _avg_pool(geometry, window, ctx, op, x):
    _check_rank4(value=x)
    x = array_to_nhwc(x, geometry.fmt)
    pool = Pool(geometry, x.shape, window, ctx, op)
    padded = pool.pad(widen(x), 0)
    total = np.zeros(pool.out_shape, padded.dtype)
    for _, where, _ in pool.taps():
        total += padded[where]
    out = (total / pool.counts(total.dtype)).astype(x.dtype, copy=False)
    return array_from_nhwc(out, geometry.fmt)


kernel("MaxPool")(_pool_factory(_max_pool, with_window_inputs=False))
kernel("MaxPoolV2")(_pool_factory(_max_pool, with_window_inputs=True))
kernel("AvgPool")(_pool_factory(_avg_pool, with_window_inputs=False))


# -- gradients ---------------------------------------------------------------------------

def _max_pool_grad(geometry, window, ctx, op, orig_input, orig_output, grad):
    _check_rank4(orig_input=orig_input, orig_output=orig_output, grad=grad)
    x, g = array_to_nhwc(orig_input, geometry.fmt), array_to_nhwc(grad, geometry.fmt)
    pool = Pool(geometry, x.shape, window, ctx, op)
    pool.check("grad", g, pool.out_shape)
    arg = pool.argmax(x)
    g = widen(g)
    padded = np.zeros(pool.padded_shape, g.dtype)
    zero = g.dtype.type(0)
    for k, where, _ in pool.taps():
        padded[where] += np.where(arg == k, g, zero)
    return array_from_nhwc(pool.crop(padded).astype(orig_input.dtype, copy=False), geometry.fmt)


def _max_pool_grad_grad(geometry, window, ctx, op, orig_input, orig_output, grad):
    _check_rank4(orig_input=orig_input, orig_output=orig_output, grad=grad)
    x, y, g = (array_to_nhwc(a, geometry.fmt) for a in (orig_input, orig_output, grad))
    pool = Pool(geometry, x.shape, window, ctx, op)
    pool.check("orig_output", y, pool.out_shape)
    pool.check("grad", g, x.shape)
    padded_x, padded_g = pool.pad(x, 0), pool.pad(g, 0)
    out = np.zeros(pool.out_shape, g.dtype)
    found = np.zeros(pool.out_shape, bool)
    for _, where, inside in pool.taps():
        hit = ~found & (padded_x[where] == y)
        if inside is not None:
            hit &= inside
        out = np.where(hit, padded_g[where], out)
        found |= hit
    return array_from_nhwc(out, geometry.fmt)


def _avg_pool_grad(geometry, window, ctx, op, orig_input_shape, grad):
    _check_rank4(grad=grad)
    sizes = [int(v) for v in np.asarray(orig_input_shape).reshape(-1)]
    if np.ndim(orig_input_shape) != 1 or len(sizes) != 4:
        raise ValueError(f"orig_input_shape must be a vector of 4 sizes, got {np.asarray(orig_input_shape).tolist()}")
    shape = to_nhwc(ctx.check_shape(sizes, op), geometry.fmt)
    g = array_to_nhwc(grad, geometry.fmt)
    pool = Pool(geometry, shape, window, ctx, op)
    pool.check("grad", g, pool.out_shape)
    share = widen(g)
    share = share / pool.counts(share.dtype)
    padded = np.zeros(pool.padded_shape, share.dtype)
    for _, where, _ in pool.taps():
        padded[where] += share
    return array_from_nhwc(pool.crop(padded).astype(storage(op), copy=False), geometry.fmt)


kernel("MaxPoolGrad")(_pool_factory(_max_pool_grad, with_window_inputs=False))
kernel("MaxPoolGradV2")(_pool_factory(_max_pool_grad, with_window_inputs=True))
kernel("MaxPoolGradGrad")(_pool_factory(_max_pool_grad_grad, with_window_inputs=False))
kernel("MaxPoolGradGradV2")(_pool_factory(_max_pool_grad_grad, with_window_inputs=True))
kernel("AvgPoolGrad")(_pool_factory(_avg_pool_grad, with_window_inputs=False))


# -- with argmax ---------------------------------------------------------------------------------
# MaxPoolWithArgmax also returns where each maximum is, as a flat index into the NHWC input
# ((y * width + x) * channels + c, plus b * height * width * channels with include_batch_in_index);
# the first maximum in window order wins, as TensorFlow's CPU kernel (which replaces it only by
# a strictly greater value). The gradient ops scatter to (and gather from) those positions.

def _argmax_geometry(op) -> tuple[Geometry, tuple[int, int]]:
    try:
        geometry = Geometry.from_op(op)
        return geometry, spatial_pair(op.get_attr("ksize"), geometry.fmt, "ksize")
    except ValueError as exc:
        raise node_error(op, str(exc)) from None


def _positions(pool: Pool, tap: int) -> tuple[np.ndarray, np.ndarray]:
    """Input (row, column) of window tap ``tap`` at every output position: [oh, 1], [1, ow]."""
    i, j = divmod(tap, pool.kw)
    rows = np.arange(pool.oh) * pool.sh + i - pool.top
    cols = np.arange(pool.ow) * pool.sw + j - pool.left
    return rows[:, None], cols[None, :]


def max_pool_with_argmax(pool: Pool, x: np.ndarray, include_batch: bool):
    padded = pool.pad(x, _lowest(x.dtype))
    best = np.full(pool.out_shape, _lowest(x.dtype), x.dtype)
    arg = np.full(pool.out_shape, -1, np.int64)
    channel = np.arange(pool.c)
    for k, where, inside in pool.taps():
        values = padded[where]
        take = (arg < 0) | (values > best)
        if inside is not None:
            take &= inside
        rows, cols = _positions(pool, k)
        flat = ((rows * pool.w + cols)[None, :, :, None] * pool.c + channel)
        best = np.where(take, values, best)
        arg = np.where(take, flat, arg)
    if include_batch:
        arg = arg + (np.arange(pool.n) * pool.h * pool.w * pool.c)[:, None, None, None]
    return best, arg


def _flat_argmax(argmax: np.ndarray, shape, include_batch: bool) -> np.ndarray:
    """argmax as indices into the whole flattened input, checked."""
    n, h, w, c = shape
    flat = argmax.astype(np.int64)
    if not include_batch:
        flat = flat + (np.arange(n) * h * w * c).reshape(-1, 1, 1, 1)
    if flat.size and (flat.min() < 0 or flat.max() >= n * h * w * c):
        raise ValueError(f"argmax has values outside the input of shape {list(shape)}")
    return flat


@kernel("MaxPoolWithArgmax")
def _max_pool_with_argmax(op, ctx):
    geometry, window = _argmax_geometry(op)
    include_batch = bool(op.get_attr("include_batch_in_index"))
    index_dtype = storage(op, 1)

    def compute(x):
        _check_rank4(input=x)
        pool = Pool(geometry, x.shape, window, ctx, op)
        out, arg = max_pool_with_argmax(pool, x, include_batch)
        return out, arg.astype(index_dtype)
    return compute


@kernel("MaxPoolGradWithArgmax")
def _max_pool_grad_with_argmax(op, ctx):
    geometry, window = _argmax_geometry(op)
    include_batch = bool(op.get_attr("include_batch_in_index"))

    def compute(x, grad, argmax):
        _check_rank4(input=x, grad=grad, argmax=argmax)
        pool = Pool(geometry, x.shape, window, ctx, op)
        pool.check("grad", grad, pool.out_shape)
        pool.check("argmax", argmax, pool.out_shape)
        flat = _flat_argmax(argmax, x.shape, include_batch)
        g = widen(grad)
        out = np.bincount(flat.reshape(-1), weights=g.reshape(-1), minlength=x.size) if g.dtype.kind == "f" else None
        if out is None:
            out = np.zeros(x.size, g.dtype)
            np.add.at(out, flat.reshape(-1), g.reshape(-1))
        return out.reshape(x.shape).astype(x.dtype, copy=False)
    return compute


@kernel("MaxPoolGradGradWithArgmax")
def _max_pool_grad_grad_with_argmax(op, ctx):
    geometry, window = _argmax_geometry(op)
    include_batch = bool(op.get_attr("include_batch_in_index"))

    def compute(x, grad, argmax):
        _check_rank4(input=x, grad=grad, argmax=argmax)
        pool = Pool(geometry, x.shape, window, ctx, op)
        pool.check("grad", grad, x.shape)
        pool.check("argmax", argmax, pool.out_shape)
        return grad.reshape(-1)[_flat_argmax(argmax, x.shape, include_batch)]
    return compute
