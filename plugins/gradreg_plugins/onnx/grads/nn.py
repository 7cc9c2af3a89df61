"""Gradients of convolution, pooling and normalization ops.

Window ops need static spatial sizes (the input's, the filter's): their geometry (auto_pad,
ceil_mode) is resolved when the gradient is built. Where gradreg's rule is simplest as "the
gradient of an equivalent composition", it uses :func:`through`: AveragePool and LpPool as a
depthwise Conv of ones (scaled by the op's own divisor), InstanceNormalization,
inference-mode BatchNormalization, LRN and LpNormalization spelled out. LayerNormalization has
its closed form (a few nodes where differentiating its decomposition takes ~40).
"""
from __future__ import annotations

import numpy as np

from gradreg.model.shape_inference import constant_value
from gradreg_plugins.onnx import family
from gradreg_plugins.onnx.grads.common import (
    axis_of,
    const_like,
    fail,
    ints,
    neg,
    ones_like,
    onnx_op,
    per_input,
    reduce_to,
    scatter_add_flat,
    shape_of,
    static_dims,
    static_rank,
    through,
)
from gradreg_plugins.onnx.nodes import onnx_inputs
from gradreg_plugins.onnx.windows import attr_list, geometry, transpose_geometry


def _spatial(op, x) -> tuple[int, ...]:
    """x's spatial sizes (after batch and channels), which must be static."""
    dims = x.shape.dims
    if dims is None or any(d is None for d in dims[2:]):
        raise fail(op, f"the input's spatial sizes must be known (shape {x.shape})")
    return tuple(int(d) for d in dims[2:] if d is not None)


def _channels(op, x) -> int:
    dims = x.shape.dims
    if dims is None or len(dims) < 2 or dims[1] is None:
        raise fail(op, f"the input's channel count must be known (shape {x.shape})")
    return int(dims[1])


def _filter_grad(x, g, strides, dilations, pads, kernel, group: int):
    """dW[o, c, k] = sum over batch and positions p of g[n, o, p] x_padded[n, c, p * stride + k * dilation]:
    a Conv of x (channels as batch) by g (batch as channels), strides and dilations swapped. With
    groups, one grouped Conv where sizes are static (x as [c, group * batch] channels, g as
    [group * o, batch] filters), else one Conv per group."""
    n = len(kernel)
    perm = [1, 0] + list(range(2, 2 + n))
    x_sizes, g_sizes = _static_spatial(x), _static_spatial(g)
    x_channels, g_channels = _static_channels(x), _static_channels(g)
    if group > 1 and None not in (x_sizes, g_sizes, x_channels, g_channels):
        assert x_sizes is not None and g_sizes is not None and x_channels is not None and g_channels is not None
        c, o = x_channels // group, g_channels // group
        spatial = list(range(3, 3 + n))
        xs = onnx_op("Reshape", x, ints([0, group, c, *x_sizes], g, "grouped"))
        xs = onnx_op("Reshape", onnx_op("Transpose", xs, perm=[2, 1, 0, *spatial]), ints([c, -1, *x_sizes], g, "shape"))
        gs = onnx_op("Reshape", g, ints([0, group, o, *g_sizes], g, "grouped"))
        gs = onnx_op("Reshape", onnx_op("Transpose", gs, perm=[1, 2, 0, *spatial]),
                     ints([group * o, -1, *g_sizes], g, "shape"))
        out = onnx_op("Conv", xs, gs, None, strides=list(dilations), dilations=list(strides), pads=list(pads),
                      group=group)
        return onnx_op("Transpose", _kernel_part(out, x_sizes, g_sizes, strides, dilations, pads, kernel), perm=perm)
    xs = onnx_op("Split", x, axis=1, num_outputs=group, outputs=group) if group > 1 else (x,)
    gs = onnx_op("Split", g, axis=1, num_outputs=group, outputs=group) if group > 1 else (g,)
    parts = []
    for xi, gi in zip(xs, gs):
        out = onnx_op("Conv", onnx_op("Transpose", xi, perm=perm), onnx_op("Transpose", gi, perm=perm), None,
                      strides=list(dilations), dilations=list(strides), pads=list(pads))
        parts.append(onnx_op("Transpose", _kernel_part(out, x_sizes, g_sizes, strides, dilations, pads, kernel),
                             perm=perm))
    return parts[0] if group == 1 else onnx_op("Concat", *parts, axis=0)


def _kernel_part(out, x_sizes, g_sizes, strides, dilations, pads, kernel):
    """The first ``kernel`` positions of the filter-gradient Conv's output: a Slice, or nothing
    where static sizes show the Conv makes exactly those (the padded input fits the windows)."""
    n = len(kernel)
    if x_sizes is not None and g_sizes is not None:
        made = [(size + pads[i] + pads[i + n] - s * (p - 1) - 1) // d + 1
                for i, (size, p, s, d) in enumerate(zip(x_sizes, g_sizes, strides, dilations))]
        if made == list(kernel):
            return out
    return onnx_op("Slice", out, ints([0] * n, out, "starts"), ints(list(kernel), out, "ends"),
                   ints(list(range(2, 2 + n)), out, "axes"))


def _static_spatial(t) -> tuple[int, ...] | None:
    dims = t.shape.dims
    if dims is None or len(dims) < 3 or any(d is None for d in dims[2:]):
        return None
    return tuple(int(d) for d in dims[2:] if d is not None)


def _static_channels(t) -> int | None:
    dims = t.shape.dims
    return int(dims[1]) if dims is not None and len(dims) >= 2 and dims[1] is not None else None


def _bias_grad(g, n_spatial: int):
    return onnx_op("ReduceSum", g, ints([0] + list(range(2, 2 + n_spatial)), g, "axes"), keepdims=0)


@family.gradient("onnx::Conv")
def _conv_grad(op, g):
    """dX is a ConvTranspose of g by the filter whose output_padding restores X's size; dW a Conv of
    X by g (_filter_grad); dB g summed over batch and positions."""
    x, w, b = (onnx_inputs(op) + [None])[:3]
    kernel = tuple(static_dims(op, w, "the filter")[2:])
    n = len(kernel)
    group = int(op.get_attr("group"))
    dims = x.shape.dims
    if dims is None or any(d is None for d in dims[2:]):
        return per_input(op, _conv_grad_dynamic(op, g, x, w, b, kernel, group))
    geo = geometry(op, _spatial(op, x), kernel)
    output_padding = [s + geo.pads[i] + geo.pads[i + n] - ((o - 1) * st + e)
                      for i, (s, o, st, e) in enumerate(zip(_spatial(op, x), geo.out, geo.strides, geo.effective))]
    dx = onnx_op("ConvTranspose", g, w, None, strides=list(geo.strides), pads=list(geo.pads),
                 dilations=list(geo.dilations), group=group, output_padding=output_padding, kernel_shape=list(kernel))
    dw = _filter_grad(x, g, geo.strides, geo.dilations, geo.pads, kernel, group)
    return per_input(op, (dx, dw, (_bias_grad(g, n) if b is not None else None)))


def _conv_grad_dynamic(op, g, x, w, b, kernel: tuple[int, ...], group: int):
    """Spatial sizes known only at run time (explicit pads): the ConvTranspose's output is padded at
    the end to X's size, computed in the graph."""
    n = len(kernel)
    auto = op.get_attr("auto_pad") or b"NOTSET"
    if auto not in (b"NOTSET", b"VALID"):
        raise fail(op, f"auto_pad {auto.decode()} needs the input's spatial sizes (shape {x.shape})")
    pads = list(attr_list(op, "pads", 2 * n, 0)) if auto == b"NOTSET" else [0] * (2 * n)
    strides, dilations = list(attr_list(op, "strides", n, 1)), list(attr_list(op, "dilations", n, 1))
    dx = onnx_op("ConvTranspose", g, w, None, strides=strides, pads=pads, dilations=dilations, group=group,
                 kernel_shape=list(kernel))
    missing = onnx_op("Sub", onnx_op("Shape", x, start=2), onnx_op("Shape", dx, start=2))
    dx = onnx_op("Pad", dx, onnx_op("Concat", ints([0] * (n + 2), g, "begins"), ints([0, 0], g, "batch_channels"),
                                    missing, axis=0))
    dw = _filter_grad(x, g, strides, dilations, pads, kernel, group)
    return dx, dw, (_bias_grad(g, n) if b is not None else None)


@family.gradient("onnx::ConvTranspose")
def _conv_transpose_grad(op, g):
    """ConvTranspose is the adjoint of a Conv by the same filter: dX = Conv(g, W) with the same
    strides, dilations and (resolved) pads; dW the filter gradient of that Conv with the roles of
    input and output swapped."""
    x, w, b = (onnx_inputs(op) + [None])[:3]
    in_sizes = _spatial(op, x)
    kernel = tuple(static_dims(op, w, "the filter")[2:])
    n = len(kernel)
    strides = attr_list(op, "strides", n, 1)
    dilations = attr_list(op, "dilations", n, 1)
    effective = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    begins, out_sizes = transpose_geometry(op, in_sizes, effective, strides)
    output_padding = attr_list(op, "output_padding", n, 0)
    full = [st * (i - 1) + p + e for i, st, p, e in zip(in_sizes, strides, output_padding, effective)]
    ends = [f - o - b for f, o, b in zip(full, out_sizes, begins)]
    if min(begins + ends) < 0:
        raise fail(op, f"an output larger than the full transposed convolution (pads {begins + ends}) is not "
                       f"differentiated")
    pads = list(begins) + list(ends)
    group = int(op.get_attr("group"))
    dx = onnx_op("Conv", g, w, None, strides=list(strides), dilations=list(dilations), pads=pads, group=group,
                 kernel_shape=list(kernel))
    dw = _filter_grad(g, x, strides, dilations, pads, kernel, group)
    return per_input(op, (dx, dw, (_bias_grad(g, n) if b is not None else None)))


# -- pooling --------------------------------------------------------------------------------------------

@family.gradient("onnx::MaxPool")
def _max_pool_grad(op, g, *unused):
    """The output gradient added at the argmax positions a second MaxPool computes (row-major
    flat indices into the whole input, whatever the node's storage_order)."""
    x = op.inputs[0]
    attrs = {k: op.get_attr(k) for k in ("kernel_shape", "strides", "pads", "dilations", "auto_pad", "ceil_mode")
             if op.get_attr(k) is not None}
    if isinstance(attrs.get("auto_pad"), bytes):
        attrs["auto_pad"] = attrs["auto_pad"].decode()
    _, indices = onnx_op("MaxPool", x, outputs=[True, True], **attrs)
    return per_input(op, scatter_add_flat(x, indices, g))


def _pooling_conv(op, x, kernel: tuple[int, ...], ceil_mode: bool):
    """A depthwise Conv of ones summing each pooling window: (conv builder, its geometry). Its end
    pads are extended so that ceil_mode windows reaching past the padding are kept."""
    spatial = _spatial(op, x)
    geo = geometry(op, spatial, kernel, ceil_mode)
    n = len(kernel)
    channels = _channels(op, x)
    ends = [max(geo.pads[n + i], (o - 1) * st + e - s - geo.pads[i])
            for i, (o, st, e, s) in enumerate(zip(geo.out, geo.strides, geo.effective, spatial))]
    pads = list(geo.pads[:n]) + ends

    def window_sums(t):
        ones = const_like(np.ones([channels, 1] + list(kernel)), t, "window")
        return onnx_op("Conv", t, ones, None, strides=list(geo.strides), dilations=list(geo.dilations), pads=pads,
                       group=channels)
    return window_sums


def _pool_attrs(op, names) -> dict:
    attrs = {}
    for name in names:
        value = op.get_attr(name) if op.has_attr(name) else None
        if value is not None:
            attrs[name] = value.decode() if isinstance(value, bytes) else value
    return attrs


@family.gradient("onnx::AveragePool")
def _average_pool_grad(op, g):
    """y = window sums / D: the sums are a depthwise Conv of ones; 1 / D (which count_include_pad,
    ceil_mode and the padding decide) is read off the op itself: AveragePool(ones) = in-bounds
    count / D."""
    x = op.inputs[0]
    kernel = tuple(op.get_attr("kernel_shape"))
    sums = _pooling_conv(op, x, kernel, bool(op.get_attr("ceil_mode")))

    def build(t):
        ones = ones_like(t)
        counts = sums(ones)
        mean_of_ones = onnx_op("AveragePool", ones, **_pool_attrs(
            op, ("kernel_shape", "strides", "pads", "dilations", "auto_pad", "ceil_mode", "count_include_pad")))
        empty = onnx_op("Equal", counts, const_like(0, counts))
        scale = onnx_op("Where", empty, const_like(0, counts),
                        onnx_op("Div", mean_of_ones, onnx_op("Where", empty, const_like(1, counts), counts)))
        return onnx_op("Mul", sums(t), scale)
    return per_input(op, through(op, [g], build))


@family.gradient("onnx::LpPool")
def _lp_pool_grad(op, g):
    """y = (window sum of |x|^p)^(1/p)."""
    x = op.inputs[0]
    p = float(op.get_attr("p"))
    sums = _pooling_conv(op, x, tuple(op.get_attr("kernel_shape")), bool(op.get_attr("ceil_mode")))
    return per_input(op, through(op, [g], lambda t: onnx_op("Pow", sums(_abs_pow(t, p)), const_like(1 / p, t))))


def _abs_pow(t, p: float):
    if p == 2:
        return onnx_op("Mul", t, t)
    if p == 1:
        return onnx_op("Abs", t)
    return onnx_op("Pow", onnx_op("Abs", t), const_like(p, t))


def _spatial_axes(op, x, g):
    return ints(list(range(2, static_rank(op, x))), g, "spatial")


@family.gradient("onnx::GlobalAveragePool")
def _global_average_pool_grad(op, g):
    x = op.inputs[0]
    count = onnx_op("Div", onnx_op("Cast", onnx_op("Size", x), to=g.dtype),
                    onnx_op("Cast", onnx_op("Size", op.outputs[0]), to=g.dtype))
    return per_input(op, onnx_op("Div", onnx_op("Expand", g, shape_of(x)), count))


@family.gradient("onnx::GlobalMaxPool")
def _global_max_pool_grad(op, g):
    """To the positions holding the maximum, split evenly among ties."""
    x, y = op.inputs[0], op.outputs[0]
    mask = onnx_op("Cast", onnx_op("Equal", x, y), to=g.dtype)
    count = onnx_op("ReduceSum", mask, _spatial_axes(op, x, g), keepdims=1)
    return per_input(op, onnx_op("Mul", g, onnx_op("Div", mask, count)))


@family.gradient("onnx::GlobalLpPool")
def _global_lp_pool_grad(op, g):
    p = float(op.get_attr("p"))
    grads = through(op, [g], lambda t: onnx_op("Pow", onnx_op("ReduceSum", _abs_pow(t, p), _spatial_axes(op, t, g),
                                                              keepdims=1), const_like(1 / p, t)))
    return per_input(op, grads)


# -- normalization --------------------------------------------------------------------------------------

def _normalized(x, axes, epsilon: float):
    """(x - mean) / sqrt(var + epsilon) over ``axes``, with the mean and 1 / sqrt(var + epsilon)."""
    mean = onnx_op("ReduceMean", x, axes, keepdims=1)
    centered = onnx_op("Sub", x, mean)
    variance = onnx_op("ReduceMean", onnx_op("Mul", centered, centered), axes, keepdims=1)
    inv_std = onnx_op("Reciprocal", onnx_op("Sqrt", onnx_op("Add", variance, const_like(epsilon, x))))
    return onnx_op("Mul", centered, inv_std), mean, inv_std


@family.gradient("onnx::BatchNormalization")
def _batch_norm_grad(op, g, *unused):
    """Inference mode (running statistics as inputs): an affine map per channel, differentiable in
    all five inputs. Training mode normalizes by the batch's statistics, which depend on x too;
    the running statistics it outputs pass no gradient."""
    x = op.inputs[0]
    rank = static_rank(op, x)
    per_channel = ints([-1] + [1] * (rank - 2), g, "per_channel")
    epsilon = op.get_attr("epsilon")
    if op.get_attr("training_mode"):
        def training(x, scale, bias, mean, var):
            normalized, _, _ = _normalized(x, ints([0] + list(range(2, rank)), x, "axes"), epsilon)
            return onnx_op("Add", onnx_op("Mul", normalized, onnx_op("Reshape", scale, per_channel)),
                           onnx_op("Reshape", bias, per_channel))
        grads = through(op, [g], training)
        return per_input(op, grads[:3] + [None, None])

    def inference(x, scale, bias, mean, var):
        inv = onnx_op("Reciprocal", onnx_op("Sqrt", onnx_op("Add", var, const_like(epsilon, var))))
        centered = onnx_op("Sub", x, onnx_op("Reshape", mean, per_channel))
        return onnx_op("Add", onnx_op("Mul", centered, onnx_op("Reshape", onnx_op("Mul", scale, inv), per_channel)),
                       onnx_op("Reshape", bias, per_channel))
    return per_input(op, through(op, [g], inference))


@family.gradient("onnx::InstanceNormalization")
def _instance_norm_grad(op, g):
    x = op.inputs[0]
    rank = static_rank(op, x)
    per_channel = ints([-1] + [1] * (rank - 2), g, "per_channel")

    def build(x, scale, bias):
        normalized, _, _ = _normalized(x, ints(list(range(2, rank)), x, "axes"), op.get_attr("epsilon"))
        return onnx_op("Add", onnx_op("Mul", normalized, onnx_op("Reshape", scale, per_channel)),
                       onnx_op("Reshape", bias, per_channel))
    return per_input(op, through(op, [g], build))


@family.gradient("onnx::LayerNormalization")
def _layer_norm_grad(op, g, g_mean=None, g_inv_std=None):
    """y = n scale + bias, n = (x - mean) r, r = 1 / sqrt(var + epsilon) over the axes from ``axis`` on:
    dx = r (gn - mean(gn) - n mean(gn n)) with gn = g scale (mean over those axes), plus what reaches the
    Mean and InvStdDev outputs: d mean / dx = 1 / N, dr / dx = -r^2 n / N. n, mean and r come from a
    LayerNormalization of scale 1 (statistics in stash_type's precision, as the forward's)."""
    x, scale, bias = (onnx_inputs(op) + [None])[:3]
    rank = static_rank(op, x)
    axis = axis_of(op, rank)
    axes = ints(list(range(axis, rank)), x, "axes")
    normalized, inv_std = _layer_statistics(op, x, scale, axis, axes)
    terms, dscale, dbias = [], None, None
    if g is not None:
        gn = onnx_op("Mul", g, scale)
        centered = onnx_op("Sub", gn, onnx_op("ReduceMean", gn, axes, keepdims=1))
        along = onnx_op("Mul", normalized, onnx_op("ReduceMean", onnx_op("Mul", gn, normalized), axes, keepdims=1))
        terms.append(onnx_op("Mul", onnx_op("Sub", centered, along), inv_std))
        dscale = reduce_to(onnx_op("Mul", g, normalized), scale)
        dbias = reduce_to(g, bias) if bias is not None else None
    if g_mean is not None or g_inv_std is not None:
        count = _normalized_count(x, axis)
        if g_mean is not None:
            terms.append(onnx_op("Expand", onnx_op("Div", _as_type_of(g_mean, x), count), shape_of(x)))
        if g_inv_std is not None:
            slope = onnx_op("Div", onnx_op("Mul", inv_std, inv_std), count)
            terms.append(neg(onnx_op("Mul", onnx_op("Mul", _as_type_of(g_inv_std, x), slope), normalized)))
    dx = (terms[0] if len(terms) == 1 else onnx_op("Sum", *terms)) if terms else None
    return per_input(op, (dx, dscale, dbias))


def _layer_statistics(op, x, scale, axis: int, axes):
    """(x - mean) r and r, from a LayerNormalization of scale 1 whose statistics are outputs when
    ONNX lets them be of the stash type (float, bfloat16), else spelled out in x's type."""
    epsilon, stash = op.get_attr("epsilon"), int(op.get_attr("stash_type"))
    if stash not in _STATISTICS_TYPES:
        normalized, _, inv_std = _normalized(x, axes, epsilon)
        return normalized, inv_std
    normalized, _, inv_std = onnx_op("LayerNormalization", x, _ones_shaped_like(scale), axis=axis, epsilon=epsilon,
                                     stash_type=stash, outputs=3)
    return normalized, _as_type_of(inv_std, x)


_STATISTICS_TYPES = (1, 16)    # LayerNormalization's Mean and InvStdDev: float, bfloat16


def _as_type_of(t, like):
    return t if t.dtype.base_dtype is like.dtype.base_dtype else onnx_op("Cast", t, to=like.dtype.base_dtype)


def _normalized_count(x, axis: int):
    """N, the number of elements each normalization is over, in x's dtype."""
    dims = x.shape.dims
    if dims is not None and None not in dims[axis:]:
        return const_like(int(np.prod([int(d) for d in dims[axis:] if d is not None])), x, "count")
    sizes = onnx_op("Slice", onnx_op("Shape", x), ints([axis], x, "start"), ints([np.iinfo(np.int64).max], x, "end"))
    return onnx_op("Cast", onnx_op("ReduceProd", sizes, keepdims=0), to=x.dtype.base_dtype)


def _ones_shaped_like(t):
    """Ones of t's shape: a Const when it is known (a scale's), else ConstantOfShape."""
    if t.shape.is_fully_defined():
        return const_like(np.ones([int(d) for d in t.shape.as_list() if d is not None]), t, "ones")
    return ones_like(t)


@family.gradient("onnx::MeanVarianceNormalization")
def _mean_variance_normalization_grad(op, g):
    """y = (x - mean) / sqrt(var + 1e-9) over ``axes`` (the function body's float32 epsilon does not
    differentiate float64 inputs)."""
    axes = ints([int(a) for a in (op.get_attr("axes") or (0, 2, 3))], g, "axes")
    return per_input(op, through(op, [g], lambda t: _normalized(t, axes, 1e-9)[0]))


@family.gradient("onnx::LRN")
def _lrn_grad(op, g):
    """y = x / (bias + alpha / size * (sum of x^2 over nearby channels))^beta; the channel sum is a
    Conv of ones along the channel axis (moved to a spatial position)."""
    x = op.inputs[0]
    rank = static_rank(op, x)
    size = int(op.get_attr("size"))
    alpha, beta, bias = op.get_attr("alpha"), op.get_attr("beta"), op.get_attr("bias")
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2

    def build(t):
        squares = onnx_op("Unsqueeze", onnx_op("Mul", t, t), ints([1], t, "axis"))     # (N, 1, C, ...)
        ones = const_like(np.ones([1, 1, size] + [1] * (rank - 2)), t, "window")
        pads = [before] + [0] * (rank - 2) + [after] + [0] * (rank - 2)
        sums = onnx_op("Squeeze", onnx_op("Conv", squares, ones, None, pads=pads), ints([1], t, "axis"))
        base = onnx_op("Add", const_like(bias, t), onnx_op("Mul", const_like(alpha / size, t), sums))
        return onnx_op("Div", t, onnx_op("Pow", base, const_like(beta, t)))
    return per_input(op, through(op, [g], build))


@family.gradient("onnx::LpNormalization")
def _lp_normalization_grad(op, g):
    x = op.inputs[0]
    axes = ints([axis_of(op, static_rank(op, x))], g, "axis")
    p = int(op.get_attr("p"))

    def build(t):
        norm = onnx_op("ReduceL2" if p == 2 else "ReduceL1", t, axes, keepdims=1)
        return onnx_op("Div", t, norm)
    return per_input(op, through(op, [g], build))


@family.gradient("onnx::Col2Im")
def _col2im_grad(op, g):
    """Col2Im adds each column's entries into the image: its adjoint reads the image's windows
    back (im2col), a Conv by one-hot filters (one per channel and kernel position)."""
    columns, image_shape, block_shape = op.inputs
    block = constant_value(block_shape)
    if block is None:
        raise fail(op, "the block shape must be constant")
    kernel = [int(k) for k in np.asarray(block).reshape(-1)]
    n = len(kernel)
    k_total = int(np.prod(kernel))
    channels_times_k = _channels(op, columns)
    channels = channels_times_k // k_total
    one_hot = np.zeros([channels * k_total, channels] + kernel)
    for c in range(channels):
        for j, position in enumerate(np.ndindex(*kernel)):
            one_hot[(c * k_total + j, c) + position] = 1
    strides = attr_list(op, "strides", n, 1)
    dilations = attr_list(op, "dilations", n, 1)
    pads = attr_list(op, "pads", 2 * n, 0)
    windows = onnx_op("Conv", g, const_like(one_hot, g, "one_hot"), None, strides=list(strides),
                      dilations=list(dilations), pads=list(pads))
    return per_input(op, (onnx_op("Reshape", windows, shape_of(columns)), None, None))
