"""GridSample, written once over a small set of array operations and run two ways: on NumPy
arrays (the op's kernel; onnx.reference loops in Python over every output element and rounds the
coordinates to float32) and on onnx tensors (the decomposition its gradient differentiates:
interpolation weights are functions of the grid, pixel reads GatherElements of X).

Semantics (ONNX GridSample-22, N-d): the grid's last axis holds (x, y[, z]), the spatial axes in
reverse; coordinates are denormalized to pixels (align_corners: -1 and 1 are the corner pixels'
centres, else their outer edges); a coordinate outside [lo, hi] (the pixel centres with
align_corners, else the image's edges) is clamped to the pixels (border; not for "cubic", whose
neighbours are clamped one by one, as onnxruntime and PyTorch do) or reflected (reflection);
"nearest" rounds half to even, "linear" blends the 2 neighbours per axis, "cubic" the 4 (Keys,
A = -0.75); a neighbour outside the image reads 0 (zeros), the nearest edge pixel (border) or its
reflection.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from gradreg_plugins.onnx.nodes import input_layout

CUBIC_A = -0.75


class NumpyArrays:
    """The array operations on NumPy arrays."""

    def const(self, value: float, like: Any) -> Any:
        return np.asarray(value, dtype=like.dtype)

    add, sub, mul, div = (staticmethod(f) for f in (np.add, np.subtract, np.multiply, np.divide))
    floor, rint, less, greater, logical_or, logical_and, where = (staticmethod(f) for f in (
        np.floor, np.rint, np.less, np.greater, np.logical_or, np.logical_and, np.where))

    def clip(self, x: Any, low: float, high: float) -> Any:
        return np.clip(x, low, high)

    def mod2(self, n: Any) -> Any:
        return np.mod(n, 2)

    def gather(self, x: np.ndarray, index: Any, spatial: Sequence[int]) -> Any:
        """x[n, c, index[n, o...]] over the flattened spatial axes: (N, C, O...)."""
        n, c = x.shape[:2]
        flat = x.reshape(n, c, -1)
        idx = index.astype(np.int64).reshape(n, 1, -1)
        taken = np.take_along_axis(flat, np.broadcast_to(idx, (n, c, idx.shape[-1])), axis=2)
        return taken.reshape((n, c) + index.shape[1:])

    def expand_channels(self, w: Any) -> Any:
        return w[:, None]


def denormalize(a: Any, coord: Any, length: int, align_corners: bool) -> Any:
    one = a.const(1, coord)
    if align_corners:
        return a.mul(a.div(a.add(coord, one), a.const(2, coord)), a.const(length - 1, coord))
    return a.div(a.sub(a.mul(a.add(coord, one), a.const(length, coord)), one), a.const(2, coord))


def reflect(a: Any, x: Any, low: float, high: float) -> Any:
    """x reflected off the nearer bound until it lies in [low, high]."""
    span = a.const(high - low, x)
    below = a.less(x, a.const(low, x))
    above = a.greater(x, a.const(high, x))
    distance = a.where(below, a.sub(a.const(low, x), x), a.sub(x, a.const(high, x)))
    turns = a.floor(a.div(distance, span))
    rest = a.sub(distance, a.mul(turns, span))
    even = a.less(a.mod2(turns), a.const(0.5, x))
    from_low = a.add(a.const(low, x), rest)
    from_high = a.sub(a.const(high, x), rest)
    inside = a.where(below, a.where(even, from_low, from_high), a.where(even, from_high, from_low))
    return a.where(a.logical_or(below, above), inside, x)


def _cubic_weights(a: Any, f: Any) -> list[Any]:
    A = CUBIC_A
    one, two = a.const(1, f), a.const(2, f)

    def outer(t: Any) -> Any:   # |t| in [1, 2]
        return a.sub(a.mul(a.add(a.mul(a.sub(a.mul(a.const(A, f), t), a.const(5 * A, f)), t), a.const(8 * A, f)), t),
                     a.const(4 * A, f))

    def inner(t: Any) -> Any:   # |t| in [0, 1]
        return a.add(a.mul(a.mul(a.sub(a.mul(a.const(A + 2, f), t), a.const(A + 3, f)), t), t), one)
    return [outer(a.add(f, one)), inner(f), inner(a.sub(one, f)), outer(a.sub(two, f))]


def _taps(a: Any, x: Any, mode: str) -> list[tuple[Any, Any]]:
    """(neighbour position, weight) pairs along one axis."""
    if mode == "nearest":
        return [(x, None)]
    x0 = a.floor(x)
    f = a.sub(x, x0)
    if mode == "linear":
        return [(x0, a.sub(a.const(1, f), f)), (a.add(x0, a.const(1, x0)), f)]
    return [(a.add(x0, a.const(offset, x0)), w) for offset, w in zip((-1, 0, 1, 2), _cubic_weights(a, f))]


def _read(a: Any, position: Any, length: int, padding: str, low: float, high: float) -> tuple[Any, Any]:
    """(pixel index, validity weight or None) of an integral position along one axis."""
    if padding == "zeros":
        valid = a.logical_and(a.less(a.const(-0.5, position), position), a.less(position, a.const(length - 0.5,
                                                                                                   position)))
        return a.clip(position, 0, length - 1), valid
    if padding == "border":
        return a.clip(position, 0, length - 1), None
    return a.clip(reflect(a, position, low, high), 0, length - 1), None


def grid_sample(a: Any, x: Any, grid_coords: Sequence[Any], spatial: Sequence[int], mode: str, padding: str,
                align_corners: bool, cast_weight: Any = None, pixels: bool = False) -> Any:
    """GridSample of x (N, C, spatial...) at the coordinates ``grid_coords`` (one (N, O...) array
    per spatial axis, in the spatial axes' order, normalized to [-1, 1], or in pixels if ``pixels``)."""
    per_axis = []
    for coord, length in zip(grid_coords, spatial):
        low, high = (0.0, length - 1.0) if align_corners else (-0.5, length - 0.5)
        pos = coord if pixels else denormalize(a, coord, length, align_corners)
        if mode == "nearest":
            pos = a.rint(pos)
        out = a.logical_or(a.less(pos, a.const(low, pos)), a.greater(pos, a.const(high, pos)))
        if padding == "border" and mode != "cubic":   # cubic pads each neighbour, not the coordinate
            pos = a.where(out, a.clip(pos, 0, length - 1), pos)
        elif padding == "reflection":
            pos = a.where(out, reflect(a, pos, low, high), pos)
        taps = []
        for position, weight in _taps(a, pos, mode):
            index, valid = _read(a, position, length, padding, low, high)
            if valid is not None:
                valid = cast_weight(valid, pos) if cast_weight is not None else valid.astype(pos.dtype)
                weight = valid if weight is None else a.mul(weight, valid)
            taps.append((index, weight))
        per_axis.append(taps)
    strides = [int(np.prod(spatial[d + 1:])) for d in range(len(spatial))]
    total = None
    for combo in itertools.product(*per_axis):
        flat, weight = None, None
        for (index, w), stride in zip(combo, strides):
            term = a.mul(index, a.const(stride, index)) if stride != 1 else index
            flat = term if flat is None else a.add(flat, term)
            if w is not None:
                weight = w if weight is None else a.mul(weight, w)
        value = a.gather(x, flat, spatial)
        if weight is not None:
            value = a.mul(value, a.expand_channels(weight))
        total = value if total is None else a.add(total, value)
    return total


def attributes(op: Any) -> tuple[str, str, bool]:
    """(mode, padding_mode, align_corners) with the old mode names (bilinear, bicubic) mapped."""
    def text(name: str, default: str) -> str:
        value = op.get_attr(name)
        return value.decode() if isinstance(value, bytes) else (value or default)
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(text("mode", "linear"), text("mode", "linear"))
    return mode, text("padding_mode", "zeros"), bool(op.get_attr("align_corners"))


def kernel_factory(op: Any, ctx: Any) -> Any:
    """The NumPy kernel of a GridSample node."""
    mode, padding, align_corners = attributes(op)
    arrays = NumpyArrays()

    def compute(x: np.ndarray, grid: np.ndarray) -> np.ndarray:
        k = x.ndim - 2
        coords = [grid[..., k - 1 - d].astype(np.float64) for d in range(k)]
        out = grid_sample(arrays, x.astype(np.float64), coords, x.shape[2:], mode, padding, align_corners)
        return np.asarray(out).astype(x.dtype, copy=False)
    return compute


# -- DeformConv: GridSample's bilinear sampling at offset kernel taps, then a grouped product --------------

def deform_geometry(op: Any, x_shape: Sequence[int], w_shape: Sequence[int]) -> dict[str, Any]:
    """DeformConv's attributes resolved for static input and filter shapes (2-d)."""
    kernel = [int(k) for k in (op.get_attr("kernel_shape") or w_shape[2:])]
    n = len(kernel)

    def ints(name: str, fill: int, count: int) -> list[int]:
        value = op.get_attr(name)
        return [int(v) for v in value] if value else [fill] * count
    strides, dilations, pads = ints("strides", 1, n), ints("dilations", 1, n), ints("pads", 0, 2 * n)
    out = [(s + pads[i] + pads[i + n] - ((k - 1) * d + 1)) // st + 1
           for i, (s, k, d, st) in enumerate(zip(x_shape[2:], kernel, dilations, strides))]
    return {"kernel": kernel, "strides": strides, "dilations": dilations, "pads": pads, "out": out,
            "group": int(op.get_attr("group") or 1), "offset_group": int(op.get_attr("offset_group") or 1)}


def tap_positions(geo: dict[str, Any], axis: int) -> np.ndarray:
    """Each kernel tap's and output position's sampling coordinate along spatial ``axis`` before the
    offsets: shape (kernel_h, kernel_w, out_h, out_w) (broadcast over the other axis)."""
    kernel, out = geo["kernel"], geo["out"]
    tap = np.arange(kernel[axis]) * geo["dilations"][axis]
    start = np.arange(out[axis]) * geo["strides"][axis] - geo["pads"][axis]
    grid = tap[:, None] + start[None, :]                              # (k, o) along this axis
    return _spread(grid, axis, kernel, out)


def _spread(grid: np.ndarray, axis: int, kernel: Sequence[int], out: Sequence[int]) -> np.ndarray:
    full = np.zeros((kernel[0], kernel[1], out[0], out[1]))
    if axis == 0:
        return full + grid[:, None, :, None]
    return full + grid[None, :, None, :]


def deform_conv_kernel(op: Any, ctx: Any) -> Any:
    """The NumPy kernel of a 2-d DeformConv (onnx.reference loops in Python over every product)."""
    arrays = NumpyArrays()

    def compute(*args: Any) -> np.ndarray:
        layout = input_layout(op) + [None, None]
        x, w, offset = args[0], args[1], args[2]
        b = args[layout[3]] if layout[3] is not None else None
        mask = args[layout[4]] if layout[4] is not None else None
        geo = deform_geometry(op, x.shape, w.shape)
        n, c = x.shape[:2]
        og = geo["offset_group"]
        kh, kw = geo["kernel"]
        oh, ow = geo["out"]
        off = offset.astype(np.float64).reshape(n * og, kh, kw, 2, oh, ow)
        coords = [tap_positions(geo, 0)[None] + off[:, :, :, 0], tap_positions(geo, 1)[None] + off[:, :, :, 1]]
        sampled = grid_sample(arrays, x.astype(np.float64).reshape(n * og, c // og, *x.shape[2:]), coords,
                              x.shape[2:], "linear", "zeros", True, pixels=True)    # (n og, c / og, kh, kw, oh, ow)
        if mask is not None:
            sampled = sampled * mask.astype(np.float64).reshape(n * og, 1, kh, kw, oh, ow)
        group = geo["group"]
        columns = sampled.reshape(n, group, (c // group) * kh * kw, oh * ow)
        filters = w.astype(np.float64).reshape(group, w.shape[0] // group, -1)
        result = np.einsum("gok,ngkp->ngop", filters, columns).reshape(n, w.shape[0], oh, ow)
        if b is not None:
            result = result + b.reshape(1, -1, 1, 1)
        return result.astype(x.dtype, copy=False)
    return compute
