"""Gradients of the resampling ops: Resize (every mode and coordinate transformation), Upsample,
GridSample, RoiAlign, MaxRoiPool and DeformConv.

Resize is linear in X and separable: along each resized axis the output is a matrix W (output
length x input length) times the input. gradreg obtains W by running the op itself (onnx's
reference implementation, at gradient-building time) on an identity matrix, so the weights are
exactly the forward pass's, for every mode, coordinate transformation, antialias, cubic
coefficient and exclude_outside setting; dX applies each W transposed. When the resized axes'
lengths and the scales or sizes are known when the gradient is built (constants, static shapes, and
the Shape/Slice/Concat arithmetic exporters compute sizes with, folded), W is a constant; otherwise
(symbolic height and width, sizes read from a Shape at run time) the gradient graph computes W with
a Resize of an identity matrix (EyeLike) at run time, so one gradient graph serves every input size.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from gradreg_plugins.onnx import family
from gradreg_plugins.onnx.grads.common import (
    const_like,
    fail,
    ints,
    known_value,
    onnx_op,
    per_input,
    static_rank,
    through,
)
from gradreg_plugins.onnx.grads.functions import function_body_grad
from gradreg_plugins.onnx.grid_sample import attributes, deform_geometry, grid_sample, tap_positions
from gradreg_plugins.onnx.nodes import attribute_values, onnx_inputs, schema_of, upsample_as_resize
from gradreg_plugins.onnx.schemas import OPSET_VERSIONS


def _probe_attrs(op) -> dict[str, Any]:
    """The op's interpolation attributes, as a two-axis Resize probing one of its axes takes them."""
    if schema_of(op).name == "Upsample":
        mode = op.get_attr("mode")
        return upsample_as_resize(mode.decode() if isinstance(mode, bytes) else (mode or "nearest"))
    attrs = {k: v for k, v in attribute_values(op).items() if k not in ("axes", "keep_aspect_ratio_policy")
             and v is not None}
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}


def _probe(op, in_len: int, scale: float, out_len: int, by_size: bool, roi: tuple[float, float] | None):
    """The matrix (in_len, out_len) the op applies along one axis: the op run by onnx.reference
    on an identity matrix (rows: basis vectors; the resized axis is the second), less its
    output on zeros (tf_crop_and_resize's extrapolated value is not part of the linear map)."""
    import onnx  # an optional dependency: only Resize's gradient runs onnx.reference
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator
    inits: list[Any] = []
    inputs = ["x", "roi", "scales", "sizes"]
    low, high = roi if roi is not None else (0.0, 1.0)
    inits.append(numpy_helper.from_array(np.array([0.0, low, 1.0, high], np.float32), "roi"))
    if by_size:
        inputs[2] = ""
        inits.append(numpy_helper.from_array(np.array([in_len, out_len], np.int64), "sizes"))
    else:
        inputs = inputs[:3]
        inits.append(numpy_helper.from_array(np.array([1.0, scale], np.float32), "scales"))
    node = helper.make_node("Resize", inputs, ["y"], **_probe_attrs(op))
    graph = helper.make_graph([node], "probe", [helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, None)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET_VERSIONS[""])])
    evaluator = ReferenceEvaluator(model)
    basis: Any = evaluator.run(None, {"x": np.eye(in_len)})
    offset: Any = evaluator.run(None, {"x": np.zeros((in_len, in_len))})
    return np.asarray(basis[0] - offset[0])


class _Resizing:
    """What a Resize (or Upsample) does along each axis: its roi/scales/sizes inputs (tensors, None
    where absent), their values where constants and static shapes determine them, the axes."""

    def __init__(self, op, x):
        self.op = op
        self.rank = static_rank(op, x)
        inputs = onnx_inputs(op) + [None, None, None]
        upsample = schema_of(op).name == "Upsample"
        roi, scales, sizes = (None, inputs[1], None) if upsample else inputs[1:4]
        self.roi, self.scales, self.sizes = (None if _empty(t) else t for t in (roi, scales, sizes))
        if self.scales is None and self.sizes is None:
            raise fail(op, "neither scales nor sizes is given")
        self.values = {name: (None if t is None else known_value(t)) for name, t in
                       (("roi", self.roi), ("scales", self.scales), ("sizes", self.sizes))}
        self.axes = list(range(self.rank)) if upsample or not op.get_attr("axes") else \
            [int(a) % self.rank for a in op.get_attr("axes")]
        self.policy = _text_attr(op, "keep_aspect_ratio_policy", "stretch")
        self.crop = _text_attr(op, "coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize"

    def known(self) -> bool:
        return all(self.values[k] is not None for k, t in (("roi", self.roi), ("scales", self.scales),
                                                            ("sizes", self.sizes)) if t is not None)


def _empty(t) -> bool:
    """An absent input, or one given as an empty tensor (older exporters' "no scales")."""
    if t is None:
        return True
    dims = t.shape.dims
    return dims is not None and len(dims) == 1 and dims[0] == 0


def _text_attr(op, name: str, default: str) -> str:
    value = op.get_attr(name) if op.has_attr(name) else None
    return value.decode() if isinstance(value, bytes) else (value or default)


def _axis_plan(op, resizing: _Resizing, x, y) -> list[tuple[int, int, float, int, bool, Any]]:
    """(axis, input length, scale, output length, whether the op gave sizes (stretched), roi) for
    each axis the op resizes, from the constant roi/scales/sizes and x's static lengths."""
    roi, scales, sizes = (resizing.values[k] for k in ("roi", "scales", "sizes"))
    axes, policy = resizing.axes, resizing.policy
    lengths = [_known(op, x.shape.dims, a) for a in axes]
    if sizes is not None:
        outs = [int(v) for v in np.asarray(sizes).reshape(-1)]
        factors = [o / n for o, n in zip(outs, lengths)]
        if policy != "stretch":
            common = min(factors) if policy == "not_larger" else max(factors)
            factors = [common] * len(axes)
            outs = [int(common * n + 0.5) for n in lengths]
    else:
        factors = [float(v) for v in np.asarray(scales).reshape(-1)]
        outs = [int(np.floor(n * f)) for n, f in zip(lengths, factors)]
    roi = None if roi is None or np.size(roi) == 0 else np.asarray(roi).reshape(-1)
    plan = []
    y_dims = y.shape.dims
    for i, (a, in_len, scale, out_len) in enumerate(zip(axes, lengths, factors, outs)):
        if y_dims is not None and y_dims[a] is not None and int(y_dims[a]) != out_len:
            raise fail(op, f"axis {a}: the output has {y_dims[a]} elements where {out_len} were expected")
        if np.isclose(scale, 1.0) and out_len == in_len and not resizing.crop:
            continue
        box = None if roi is None else (float(roi[i]), float(roi[len(axes) + i]))
        plan.append((a, in_len, scale, out_len, sizes is not None and policy == "stretch", box))
    return plan


def _known(op, dims: Any, axis: int) -> int:
    if dims is None or dims[axis] is None:
        raise fail(op, f"the input's size along resized axis {axis} must be known")
    return int(dims[axis])


def _contract(g, axis: int, rank: int, weights: Callable[[bool], Any]):
    """dX along ``axis`` from g: sum_o g[..., o, ...] w(o, i), with the weights as the matrix
    ``weights(True)`` (out x in: the op applied to the first axis of an identity) or
    ``weights(False)`` (in x out), whichever needs no transpose of g."""
    if axis == rank - 2:
        return onnx_op("MatMul", weights(False), g)
    if axis == rank - 1:
        return onnx_op("MatMul", g, weights(True))
    perm = [d for d in range(rank) if d != axis] + [axis]
    product = onnx_op("MatMul", onnx_op("Transpose", g, perm=perm), weights(True))
    return onnx_op("Transpose", product, perm=[int(p) for p in np.argsort(perm)])


def _resize_grad(op, g):
    """Along each resized axis, dX contracts g with the op's interpolation weights: constants made
    when the gradient is built if the scales or sizes and the input's lengths are known then
    (constants and static shapes determine them), else computed at run time by the op itself,
    applied to an identity matrix."""
    x, y = op.inputs[0], op.outputs[0]
    resizing = _Resizing(op, x)
    if not resizing.known() or any(x.shape.dims is None or x.shape.dims[a] is None for a in resizing.axes):
        return per_input(op, _resize_grad_at_run_time(resizing, x, g))
    dx = g
    for axis, in_len, scale, out_len, by_size, box in _axis_plan(op, resizing, x, y):
        matrix = _probe(op, in_len, scale, out_len, by_size, box)
        if matrix.shape[1] != out_len:
            # keep_aspect_ratio_policy rounds the output size where a scale alone floors it
            raise fail(op, f"axis {axis}: the interpolation of {in_len} elements to {out_len} with scale {scale} "
                           f"cannot be reproduced along one axis")
        dx = _contract(dx, axis, resizing.rank,
                       lambda first, m=matrix: const_like(m.T if first else m, g, "interpolation"))
    return per_input(op, dx)


family.gradient("onnx::Resize")(_resize_grad)
family.gradient("onnx::Upsample")(_resize_grad)


def _resize_grad_at_run_time(resizing: _Resizing, x, g):
    """The weights along each axis the op may resize, as the op's own output on an identity matrix
    (less its output on zeros for tf_crop_and_resize), with that axis's scale or size taken from
    the op's inputs at run time. Axes the scales or sizes leave alone (scale 1, or the input's own
    length) are skipped."""
    op = resizing.op
    if resizing.sizes is not None and resizing.policy != "stretch":
        raise fail(op, f"sizes known only at run time with keep_aspect_ratio_policy '{resizing.policy}' are not "
                       f"differentiated (the common scale rounds the output lengths)")
    dx = g
    for i, axis in enumerate(resizing.axes):
        if not resizing.crop and _unchanged(resizing, x, i, axis):
            continue
        dx = _contract(dx, axis, resizing.rank, functools.partial(_weights_at_run_time, resizing, x, i,
                                                                  onnx_op("Shape", x, start=axis, end=axis + 1)))
    return dx


def _weights_at_run_time(resizing: _Resizing, x, i: int, length, first: bool):
    """The op applied to an identity matrix of x's length along its i-th resized axis, along the
    matrix's first (out x in) or second (in x out) axis."""
    dtype = x.known_dtype.base_dtype
    square = onnx_op("Concat", length, length, axis=0)
    zeros = onnx_op("ConstantOfShape", square, value=np.zeros(1, dtype.storage))
    pick = ints([i], x, "index")
    order = (lambda resized, kept: (resized, kept)) if first else (lambda resized, kept: (kept, resized))
    scales = sizes = roi = None
    if resizing.sizes is not None:
        sizes = onnx_op("Concat", *order(onnx_op("Slice", resizing.sizes, pick, ints([i + 1], x, "end")), length),
                        axis=0)
    else:
        scale = onnx_op("Slice", resizing.scales, pick, ints([i + 1], x, "end"))
        sizes_one = const_like(np.ones(1), scale, "one")
        scales = onnx_op("Concat", *order(scale, sizes_one), axis=0)
    if resizing.crop and resizing.roi is not None:
        n = len(resizing.axes)
        start = onnx_op("Slice", resizing.roi, pick, ints([i + 1], x, "end"))
        stop = onnx_op("Slice", resizing.roi, ints([n + i], x, "index"), ints([n + i + 1], x, "end"))
        zero, one = const_like(np.zeros(1), start, "zero"), const_like(np.ones(1), start, "one")
        roi = onnx_op("Concat", *order(start, zero), *order(stop, one), axis=0)
    attrs = _probe_attrs(resizing.op)
    weights = onnx_op("Resize", onnx_op("EyeLike", zeros), roi, scales, sizes, **attrs)
    if resizing.crop and float(attrs.get("extrapolation_value", 0.0)) != 0.0:
        weights = onnx_op("Sub", weights, onnx_op("Resize", zeros, roi, scales, sizes, **attrs))
    return weights


def _unchanged(resizing: _Resizing, x, i: int, axis: int) -> bool:
    """Whether the i-th entry of the scales is 1, or of the sizes is x's own length along ``axis``
    (a constant, or read from x's shape), as far as the graph shows without running it."""
    if resizing.scales is not None:
        entry = _vector_entry(resizing.scales, i)
        return isinstance(entry, float) and entry == 1.0
    entry = _vector_entry(resizing.sizes, i)
    if isinstance(entry, tuple):
        return entry[0] is x and entry[1] == axis
    dims = x.shape.dims
    return entry is not None and dims is not None and dims[axis] is not None and int(dims[axis]) == entry


def _vector_entry(t, i: int, depth: int = 0) -> Any:
    """Entry i of a 1-D tensor as far as the graph shows it: a number (int or float), (tensor, axis)
    for a length read by Shape, else None. Follows Concat, Slice, Cast and Identity."""
    value = known_value(t)
    if value is not None:
        flat = np.asarray(value).reshape(-1)
        return (float(flat[i]) if flat.dtype.kind == "f" else int(flat[i])) if i < flat.size else None
    op = t.op
    if depth > 16:
        return None
    if op.type in ("onnx::Cast", "onnx::Identity"):
        entry = _vector_entry(op.inputs[0], i, depth + 1)
        return float(entry) if isinstance(entry, (int, float)) and t.known_dtype.is_floating else entry
    if op.type == "onnx::Shape":
        rank = op.inputs[0].shape.rank
        start = int(op.get_attr("start") or 0)
        if start < 0 and rank is None:
            return None
        return op.inputs[0], (start % rank if start < 0 and rank else start) + i
    if op.type == "onnx::Concat":
        for part in op.inputs:
            n = part.shape.dims[0] if part.shape.dims else None
            if n is None:
                return None
            if i < int(n):
                return _vector_entry(part, i, depth + 1)
            i -= int(n)
        return None
    if op.type == "onnx::Slice":
        return _sliced_entry(op, i, depth)
    return None


def _sliced_entry(op, i: int, depth: int) -> Any:
    """Entry i of a Slice of a vector with constant starts (step 1): the input's entry start + i."""
    data, starts, _, axes, steps = (onnx_inputs(op) + [None] * 5)[:5]
    start, n = known_value(starts), data.shape.dims[0] if data.shape.dims else None
    if start is None or n is None or not (_is_vector(axes, [0]) and _is_vector(steps, [1])):
        return None
    first = int(np.reshape(start, -1)[0])
    first = min(max(first + int(n) if first < 0 else first, 0), int(n))
    return _vector_entry(data, first + i, depth + 1)


def _is_vector(t, entries: list[int]) -> bool:
    """Whether an optional input is absent or known to hold ``entries``."""
    value = None if t is None else known_value(t)
    return t is None or (value is not None and np.reshape(value, -1).tolist() == entries)


# -- GridSample -----------------------------------------------------------------------------------------

class _OnnxArrays:
    """grid_sample's array operations as onnx ops (the decomposition the gradient differentiates)."""

    def const(self, value: float, like: Any) -> Any:
        return const_like(value, like)

    def add(self, a: Any, b: Any) -> Any:
        return onnx_op("Add", a, b)

    def sub(self, a: Any, b: Any) -> Any:
        return onnx_op("Sub", a, b)

    def mul(self, a: Any, b: Any) -> Any:
        return onnx_op("Mul", a, b)

    def div(self, a: Any, b: Any) -> Any:
        return onnx_op("Div", a, b)

    def less(self, a: Any, b: Any) -> Any:
        return onnx_op("Less", a, b)

    def greater(self, a: Any, b: Any) -> Any:
        return onnx_op("Greater", a, b)

    def logical_or(self, a: Any, b: Any) -> Any:
        return onnx_op("Or", a, b)

    def logical_and(self, a: Any, b: Any) -> Any:
        return onnx_op("And", a, b)

    def floor(self, x: Any) -> Any:
        return onnx_op("Floor", x)

    def rint(self, x: Any) -> Any:
        return onnx_op("Round", x)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return onnx_op("Where", cond, a, b)

    def clip(self, x: Any, low: float, high: float) -> Any:
        return onnx_op("Clip", x, const_like(low, x), const_like(high, x))

    def mod2(self, n: Any) -> Any:
        two = const_like(2, n)
        return onnx_op("Sub", n, onnx_op("Mul", onnx_op("Floor", onnx_op("Div", n, two)), two))

    def gather(self, x: Any, index: Any, spatial: Any) -> Any:
        flat = onnx_op("Reshape", x, np.array([0, 0, -1], np.int64))
        idx = onnx_op("Reshape", onnx_op("Cast", index, to=np.int64), np.array([0, 1, -1], np.int64))
        wanted = onnx_op("Concat", onnx_op("Shape", x, end=2), onnx_op("Shape", idx, start=2), axis=0)
        taken = onnx_op("GatherElements", flat, onnx_op("Expand", idx, wanted), axis=2)
        return onnx_op("Reshape", taken, onnx_op("Concat", onnx_op("Shape", x, end=2), onnx_op("Shape", index, start=1),
                                                 axis=0))

    def expand_channels(self, w: Any) -> Any:
        return onnx_op("Unsqueeze", w, np.array([1], np.int64))


@family.gradient("onnx::GridSample")
def _grid_sample_grad(op, g):
    """Through the sampling spelled out: d X from the pixel reads (GatherElements), d grid from the
    interpolation weights (zero for "nearest", whose weights do not depend on the grid)."""
    x = op.inputs[0]
    spatial = _spatial_sizes(op, x)
    mode, padding, align_corners = attributes(op)
    arrays = _OnnxArrays()

    def build(x, grid):
        k = len(spatial)
        coords = [onnx_op("Cast", onnx_op("Gather", grid, np.int64(k - 1 - d), axis=-1), to=x.known_dtype.base_dtype)
                  for d in range(k)]
        return grid_sample(arrays, x, coords, spatial, mode, padding, align_corners,
                           cast_weight=lambda valid, like: onnx_op("Cast", valid, to=like.known_dtype.base_dtype))
    return per_input(op, through(op, [g], build))


def _spatial_sizes(op, x) -> list[int]:
    dims = x.shape.dims
    if dims is None or any(d is None for d in dims[2:]):
        raise fail(op, f"the input's spatial sizes must be known (shape {x.shape})")
    return [int(d) for d in dims[2:] if d is not None]


# -- DeformConv -----------------------------------------------------------------------------------------

@family.gradient("onnx::DeformConv")
def _deform_conv_grad(op, g):
    """Through the deformable convolution spelled out: bilinear samples of X at the offset kernel
    taps (GridSample's sampling in pixels), times the mask, then a grouped product with W: every
    input (X, W, offset, B, mask) gets its gradient."""
    x, w = op.inputs[0], op.inputs[1]
    x_dims, w_dims = x.shape.dims, w.shape.dims
    if x_dims is None or any(d is None for d in x_dims[1:]) or w_dims is None or any(d is None for d in w_dims):
        raise fail(op, f"the input's shape (batch aside) and the filter's must be known ({x.shape}, {w.shape})")
    geo = deform_geometry(op, [1] + [int(d) for d in x_dims[1:]], [int(d) for d in w_dims])
    c, spatial = int(x_dims[1]), [int(d) for d in x_dims[2:]]
    og, group = geo["offset_group"], geo["group"]
    kh, kw = geo["kernel"]
    oh, ow = geo["out"]
    arrays = _OnnxArrays()

    def build(x, w, offset, b=None, mask=None):
        off = onnx_op("Reshape", offset, np.array([-1, kh, kw, 2, oh, ow], np.int64))
        coords = [onnx_op("Add", onnx_op("Gather", off, np.int64(axis), axis=3),
                          const_like(tap_positions(geo, axis)[None], x)) for axis in (0, 1)]
        images = onnx_op("Reshape", x, np.array([-1, c // og] + spatial, np.int64))
        sampled = grid_sample(arrays, images, coords, spatial, "linear", "zeros", True, pixels=True,
                              cast_weight=lambda valid, like: onnx_op("Cast", valid, to=like.known_dtype.base_dtype))
        if mask is not None:
            sampled = onnx_op("Mul", sampled, onnx_op("Reshape", mask, np.array([-1, 1, kh, kw, oh, ow], np.int64)))
        columns = onnx_op("Reshape", sampled, np.array([-1, group, (c // group) * kh * kw, oh * ow], np.int64))
        filters = onnx_op("Reshape", w, np.array([group, int(w_dims[0]) // group, -1], np.int64))
        out = onnx_op("Reshape", onnx_op("Einsum", filters, columns, equation="gok,ngkp->ngop"),
                      np.array([-1, int(w_dims[0]), oh, ow], np.int64))
        if b is not None:
            out = onnx_op("Add", out, onnx_op("Reshape", b, np.array([1, -1, 1, 1], np.int64)))
        return out
    return per_input(op, through(op, [g], build))


# -- RoiAlign and MaxRoiPool ----------------------------------------------------------------------------

def _column(rois, index: int):
    return onnx_op("Gather", rois, np.int64(index), axis=1)


def _arange(count, like):
    """0, 1, ..., count - 1 as floats like ``like`` (count: a scalar tensor of ``like``'s type)."""
    n = onnx_op("Cast", onnx_op("Ceil", count), to=np.int64)
    return onnx_op("Cast", onnx_op("Range", np.int64(0), n, np.int64(1)), to=like.known_dtype.base_dtype)


def _unsqueeze(t, axes: list[int]):
    return onnx_op("Unsqueeze", t, np.array(axes, np.int64))


def _roi_align_axis(op, start, size, pooled: int, length: int, sampling: int):
    """Along one axis: (sample weights per pixel, shape (R, pooled, length), and the grid counts (R,))
    of RoiAlign's bilinear samples (mirrors onnx.reference: samples outside [-1, length] weigh 0,
    others are clamped to the last pixel)."""
    half = _text_attr(op, "coordinate_transformation_mode", "half_pixel") == "half_pixel"
    if not half:
        size = onnx_op("Max", size, const_like(1, size))
    bin_size = onnx_op("Div", size, const_like(float(pooled), size))
    grid = const_like(float(sampling), size) if sampling > 0 else onnx_op("Ceil", bin_size)
    grid_r = onnx_op("Expand", grid, onnx_op("Shape", size))
    steps = _arange(onnx_op("ReduceMax", grid_r, keepdims=0), size)                      # (G,)
    safe = onnx_op("Max", grid_r, const_like(1, size))
    bins = const_like(np.arange(pooled, dtype=np.float64), size)                         # (P,)
    pos = onnx_op("Add", _unsqueeze(start, [1, 2]), onnx_op("Add", onnx_op("Mul", _unsqueeze(bins, [0, 2]),
                                                                           _unsqueeze(bin_size, [1, 2])),
                  onnx_op("Mul", _unsqueeze(onnx_op("Add", steps, const_like(0.5, steps)), [0, 1]),
                          _unsqueeze(onnx_op("Div", bin_size, safe), [1, 2]))))          # (R, P, G)
    valid = onnx_op("Less", _unsqueeze(steps, [0, 1]), _unsqueeze(grid_r, [1, 2]))
    inside = onnx_op("Not", onnx_op("Or", onnx_op("Less", pos, const_like(-1, pos)),
                                    onnx_op("Greater", pos, const_like(float(length), pos))))
    dtype = pos.known_dtype.base_dtype
    keep = onnx_op("Cast", onnx_op("And", valid, inside), to=dtype)
    clamped = onnx_op("Max", pos, const_like(0, pos))
    low = onnx_op("Floor", clamped)
    at_end = onnx_op("GreaterOrEqual", low, const_like(length - 1, low))
    last = const_like(float(length - 1), low)
    low = onnx_op("Where", at_end, last, low)
    clamped = onnx_op("Where", at_end, low, clamped)
    high = onnx_op("Where", at_end, last, onnx_op("Add", low, const_like(1, low)))
    frac = onnx_op("Sub", clamped, low)
    pixels = _unsqueeze(const_like(np.arange(length, dtype=np.float64), pos), [0, 1, 2])
    near = _unsqueeze(onnx_op("Sub", const_like(1, frac), frac), [3])
    far = _unsqueeze(frac, [3])
    weights = onnx_op("Add", onnx_op("Mul", near, onnx_op("Cast", onnx_op("Equal", _unsqueeze(low, [3]), pixels),
                                                           to=dtype)),
                      onnx_op("Mul", far, onnx_op("Cast", onnx_op("Equal", _unsqueeze(high, [3]), pixels), to=dtype)))
    return onnx_op("Mul", weights, _unsqueeze(keep, [3])), grid_r, (low, high, frac, valid,
                                                                     onnx_op("Cast", inside, to=dtype))


@family.gradient("onnx::RoiAlign")
def _roi_align_grad(op, g):
    """Through RoiAlign spelled out (onnx.reference's semantics): average pooling is a separable
    weighting of X's rows and columns (one matrix per ROI and axis); max pooling takes the largest
    weighted corner of each sample. X and the ROI coordinates get gradients."""
    x = op.inputs[0]
    height, width = _spatial_sizes(op, x)
    ph, pw = int(op.get_attr("output_height")), int(op.get_attr("output_width"))
    sampling, scale = int(op.get_attr("sampling_ratio")), float(op.get_attr("spatial_scale"))
    half = _text_attr(op, "coordinate_transformation_mode", "half_pixel") == "half_pixel"
    mode = _text_attr(op, "mode", "avg")

    def build(x, rois, batch_indices):
        offset = 0.5 if half else 0.0
        corner = [onnx_op("Sub", onnx_op("Mul", _column(rois, i), const_like(scale, rois)), const_like(offset, rois))
                  for i in range(4)]
        rows, grid_h, parts_h = _roi_align_axis(op, corner[1], onnx_op("Sub", corner[3], corner[1]), ph, height,
                                                sampling)
        cols, grid_w, parts_w = _roi_align_axis(op, corner[0], onnx_op("Sub", corner[2], corner[0]), pw, width,
                                                sampling)
        images = onnx_op("Gather", x, batch_indices, axis=0)                          # (R, C, H, W)
        if mode == "max":
            return _roi_align_max(images, parts_h, parts_w, width)
        count = onnx_op("Max", onnx_op("Mul", grid_h, grid_w), const_like(1, grid_h))
        a_y = onnx_op("ReduceSum", rows, np.array([2], np.int64), keepdims=0)         # (R, PH, H)
        a_x = onnx_op("ReduceSum", cols, np.array([2], np.int64), keepdims=0)         # (R, PW, W)
        total = onnx_op("Einsum", a_y, images, a_x, equation="rph,rchw,rqw->rcpq")
        return onnx_op("Div", total, onnx_op("Reshape", count, np.array([-1, 1, 1, 1], np.int64)))
    return per_input(op, through(op, [g], build))


def _roi_align_max(images, parts_h, parts_w, width: int):
    """max over samples of max over the four corners of (corner weight * pixel); samples past a
    ROI's grid count are left out, out-of-range samples count as 0, a ROI without samples gives 0
    (as onnx.reference)."""
    low_h, high_h, frac_h, valid_h, inside_h = parts_h
    low_w, high_w, frac_w, valid_w, inside_w = parts_w
    one = const_like(1, frac_h)
    inside = onnx_op("Mul", _unsqueeze(inside_h, [3, 4]), _unsqueeze(inside_w, [1, 2]))   # (R, PH, GH, PW, GW)
    values = []
    for y_idx, wy in ((low_h, onnx_op("Sub", one, frac_h)), (high_h, frac_h)):
        for x_idx, wx in ((low_w, onnx_op("Sub", one, frac_w)), (high_w, frac_w)):
            flat = onnx_op("Add", onnx_op("Mul", _unsqueeze(y_idx, [3, 4]), const_like(float(width), y_idx)),
                           _unsqueeze(x_idx, [1, 2]))
            weight = onnx_op("Mul", onnx_op("Mul", _unsqueeze(wy, [3, 4]), _unsqueeze(wx, [1, 2])), inside)
            picked = _OnnxArrays().gather(images, flat, None)                          # (R, C, PH, GH, PW, GW)
            values.append(onnx_op("Mul", picked, _unsqueeze(weight, [1])))
    best = onnx_op("Max", *values)
    sampled = onnx_op("And", _unsqueeze(valid_h, [1, 4, 5]), _unsqueeze(valid_w, [1, 2, 3]))   # (R, 1, PH, GH, PW, GW)
    lowest = const_like(float(np.finfo(np.float32).min), best)
    pooled = onnx_op("ReduceMax", onnx_op("Where", sampled, best, lowest), np.array([3, 5], np.int64), keepdims=0)
    any_sample = onnx_op("ReduceMax", onnx_op("Cast", sampled, to=best.dtype), np.array([3, 5], np.int64), keepdims=0)
    return onnx_op("Where", onnx_op("Greater", any_sample, const_like(0, any_sample)), pooled, const_like(0, pooled))


def _round_half_away(v):
    return onnx_op("Mul", onnx_op("Sign", v), onnx_op("Floor", onnx_op("Add", onnx_op("Abs", v), const_like(0.5, v))))


@family.gradient("onnx::MaxRoiPool")
def _max_roi_pool_grad(op, g):
    """Through ROI max pooling spelled out (gradreg_plugins.onnx.roi's rounding and bins): each bin's
    pixels gathered up to the widest bin, the others masked, then a max; the gradient reaches the
    pixels that were the maximum (the ROI coordinates only choose pixels)."""
    x = op.inputs[0]
    height, width = _spatial_sizes(op, x)
    pooled_h, pooled_w = (int(v) for v in op.get_attr("pooled_shape"))
    scale = float(op.get_attr("spatial_scale"))

    def axis(rois, first: int, pooled: int, length: int):
        start, end = (_round_half_away(onnx_op("Mul", _column(rois, i), const_like(scale, rois)))
                      for i in (first, first + 2))
        size = onnx_op("Div", onnx_op("Max", onnx_op("Add", onnx_op("Sub", end, start), const_like(1, end)),
                                      const_like(1, end)), const_like(float(pooled), end))
        index = const_like(np.arange(pooled, dtype=np.float64), size)
        lo = onnx_op("Add", onnx_op("Floor", onnx_op("Mul", _unsqueeze(index, [0]), _unsqueeze(size, [1]))),
                     _unsqueeze(start, [1]))
        hi = onnx_op("Add", onnx_op("Ceil", onnx_op("Mul", _unsqueeze(onnx_op("Add", index, const_like(1, index)), [0]),
                                                  _unsqueeze(size, [1]))), _unsqueeze(start, [1]))
        lo = onnx_op("Clip", lo, const_like(0, lo), const_like(float(length), lo))
        hi = onnx_op("Clip", hi, const_like(0, hi), const_like(float(length), hi))
        extent = onnx_op("Sub", hi, lo)                                                   # (R, P)
        steps = _arange(onnx_op("Max", onnx_op("ReduceMax", extent, keepdims=0), const_like(1, extent)), extent)
        rows = onnx_op("Add", _unsqueeze(lo, [2]), _unsqueeze(steps, [0, 1]))          # (R, P, K)
        valid = onnx_op("Less", _unsqueeze(steps, [0, 1]), _unsqueeze(extent, [2]))
        rows = onnx_op("Clip", rows, const_like(0, rows), const_like(float(length - 1), rows))
        return rows, valid, onnx_op("Greater", extent, const_like(0, extent))

    def build(x, rois):
        rows, valid_r, filled_r = axis(rois, 2, pooled_h, height)
        cols, valid_c, filled_c = axis(rois, 1, pooled_w, width)
        images = onnx_op("Gather", x, onnx_op("Cast", _column(rois, 0), to=np.int64), axis=0)
        flat = onnx_op("Add", onnx_op("Mul", _unsqueeze(rows, [3, 4]), const_like(float(width), rows)),
                       _unsqueeze(cols, [1, 2]))                                        # (R, PH, KH, PW, KW)
        picked = _OnnxArrays().gather(images, flat, None)                              # (R, C, PH, KH, PW, KW)
        inside = onnx_op("And", _unsqueeze(valid_r, [1, 4, 5]), _unsqueeze(valid_c, [1, 2, 3]))
        lowest = const_like(float(np.finfo(np.float32).min), picked)
        pooled = onnx_op("ReduceMax", onnx_op("Where", inside, picked, lowest), np.array([3, 5], np.int64),
                         keepdims=0)
        filled = onnx_op("And", _unsqueeze(filled_r, [1, 3]), _unsqueeze(filled_c, [1, 2]))
        return onnx_op("Where", filled, pooled, const_like(0, pooled))
    return per_input(op, through(op, [g], build))


# -- AffineGrid -----------------------------------------------------------------------------------------

@family.gradient("onnx::AffineGrid")
def _affine_grid_grad(op, g):
    """grid[n, ..., :] = theta[n] @ (x, y[, z], 1): d theta[n] = sum over positions of g (outer) base,
    the base coordinates fixed by the (constant) size. With a size computed at run time, through the
    op's function body."""
    theta, size = op.inputs
    value = known_value(size)
    if value is None:
        return per_input(op, function_body_grad(op, g))
    spatial = [int(s) for s in np.asarray(value).reshape(-1)[2:]]
    align = bool(op.get_attr("align_corners"))

    def axis(length: int) -> np.ndarray:
        if align:
            return np.linspace(-1, 1, length) if length > 1 else np.zeros(1)
        return (np.arange(length) * 2 + 1) / length - 1
    mesh = np.meshgrid(*[axis(n) for n in spatial], indexing="ij")
    base = np.stack(list(mesh[::-1]) + [np.ones_like(mesh[0])], axis=-1).reshape(-1, len(spatial) + 1)
    flat = onnx_op("Reshape", g, np.array([0, -1, len(spatial)], np.int64))            # (N, positions, k)
    return per_input(op, (onnx_op("Einsum", flat, const_like(base, g, "base"), equation="npj,pk->njk"), None))
