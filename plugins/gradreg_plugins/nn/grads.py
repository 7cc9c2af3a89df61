"""Gradient rules of the nn family: ``rule(op, *grads) -> one gradient per input``.

The rules emit the op types TensorFlow's nn_grad.py emits (ReluGrad, BiasAddGrad,
Conv2DBackpropInput/Filter, MaxPoolGrad, LRNGrad, FusedBatchNormGradV3, ...), so a
differentiated graph imports into TensorFlow, and every emitted op has a rule here or in the
math and array families, so gradients of gradients work. Where TensorFlow's rule is
incomplete the rules here are exact (noted at each rule): cross-entropy labels also receive
the backprop output's gradient, cross-entropy inputs broadcast to [batch, classes] get
their gradients summed back, and LRNGrad, SoftsignGrad and MaxPoolGradGradV2 have rules.
FusedBatchNorm (V1, V2, V3): the batch_mean / batch_variance outputs (and the reserve spaces)
pass their cotangents back to x in training mode, and to the mean and variance inputs with an
exponential average factor; in inference mode the mean and variance inputs get their
gradients, through y and through the statistics outputs that pass them on, and so do the
population statistics of FusedBatchNormGrad*'s second derivatives. TensorFlow gives all of
these none (tests/test_op_sweep.py lists the cases as TENSORFLOW_WRONG).
"""
from __future__ import annotations

import numpy as np

from gradreg.build.builders import apply_op
from gradreg.errors import GradientError, NoGradientError, describe_node
from gradreg.model import dtypes
from gradreg.model.shapes import TensorShape
from gradreg_plugins.nn import family
from gradreg_plugins.nn.ops import BATCH_NORM_FORMATS
from gradreg_plugins.nn.windows import text
from gradreg_plugins.rule_helpers import scalar, unbroadcast_to

_HALF = (dtypes.float16, dtypes.bfloat16)


# -- helpers ------------------------------------------------------------------------------------

def _shape(t):
    """``t``'s shape as an int32 constant when it is known statically, else a Shape node."""
    if t.shape.is_fully_defined():
        return np.array(t.shape.as_list(), np.int32)
    return apply_op("Shape", t)


def _zeros_like(t):
    return apply_op("ZerosLike", t)


def _is_zero(t) -> bool:
    """Whether ``t`` is known to be zero: the engine passes ZerosLike for an output whose
    gradient nobody sent, and the terms it would feed can then be skipped (TensorFlow's
    ``_is_zeros_tensor``)."""
    return t.op.type == "ZerosLike"


def _copy_attrs(op, target_type: str, **overrides) -> dict:
    """The non-type attrs of ``op`` that ``target_type`` also has (strides, padding, data
    format, ...), with ``overrides``; type attrs are inferred from the new node's inputs."""
    specs = op.graph.definition_for(target_type).attr_specs
    attrs = {name: op.get_attr(name) for name, spec in op.definition.attr_specs.items()
             if name in specs and spec.kind != "type"}
    attrs.update(overrides)
    return attrs


def _sum(x, axes, keep_dims: bool = False):
    return apply_op("Sum", x, np.array(axes, np.int32), keep_dims=keep_dims)


def _mean(x, axes):
    return apply_op("Mean", x, np.array(axes, np.int32), keep_dims=True)


def _static_reduction_axes(shape: TensorShape, out: TensorShape) -> list[int] | None:
    """The axes along which a gradient shaped ``out`` (a broadcast of ``shape``) sums back to
    ``shape``; None when the static shapes cannot tell (an unknown dim may be a broadcast 1)."""
    if shape.rank is None or out.rank is None:
        return None
    lead = out.rank - shape.rank
    axes = list(range(lead))
    for i, d in enumerate(shape.as_list()):
        o = out.as_list()[lead + i]
        if d == 1 and o != 1:
            if o is None:
                return None
            axes.append(lead + i)
        elif d is None and o != 1:
            return None
    return axes


def _widen(x):
    """Half-precision values as float32: second derivatives are computed in float32, as
    TensorFlow computes batch norm's."""
    return apply_op("Cast", x, DstT=dtypes.float32) if x.dtype.base_dtype in _HALF else x


def _narrow(x, dtype):
    """``x`` cast back to ``dtype`` (None stays None)."""
    if x is None or x.dtype.base_dtype is dtype:
        return x
    return apply_op("Cast", x, DstT=dtype)


def _constant(value: float, like):
    return np.asarray(value, like.dtype.base_dtype.storage)


def _add_all(terms):
    """The sum of the non-None ``terms`` (None if there are none)."""
    terms = [t for t in terms if t is not None]
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else apply_op("AddN", terms)


# -- activations ----------------------------------------------------------------------------------

@family.gradient("Relu")
def _relu_grad(op, grad):
    return apply_op("ReluGrad", grad, op.outputs[0])


@family.gradient("Relu6")
def _relu6_grad(op, grad):
    return apply_op("Relu6Grad", grad, op.outputs[0])


@family.gradient("Elu")
def _elu_grad(op, grad):
    return apply_op("EluGrad", grad, op.outputs[0])


@family.gradient("Selu")
def _selu_grad(op, grad):
    return apply_op("SeluGrad", grad, op.outputs[0])


@family.gradient("Softplus")
def _softplus_grad(op, grad):
    # grad * sigmoid(x), as the SoftplusGrad op (TensorFlow builds Sigmoid and Mul): its own
    # rule then gives the second derivative.
    return apply_op("SoftplusGrad", grad, op.inputs[0])


@family.gradient("Softsign")
def _softsign_grad(op, grad):
    return apply_op("SoftsignGrad", grad, op.inputs[0])


@family.gradient("LeakyRelu")
def _leaky_relu_grad(op, grad):
    return apply_op("LeakyReluGrad", grad, op.inputs[0], alpha=op.get_attr("alpha"))


# -- second derivatives of activations ------------------------------------------------------------
# Each XGrad(gradients, features) is linear in ``gradients`` (with XGrad itself as adjoint);
# piecewise-linear activations have no curvature, so ``features`` gets zeros.

@family.gradient("ReluGrad")
def _relu_grad_grad(op, grad):
    x = op.inputs[1]
    return apply_op("ReluGrad", grad, x), _zeros_like(x)


@family.gradient("Relu6Grad")
def _relu6_grad_grad(op, grad):
    x = op.inputs[1]
    return apply_op("Relu6Grad", grad, x), _zeros_like(x)


@family.gradient("LeakyReluGrad")
def _leaky_relu_grad_grad(op, grad):
    x = op.inputs[1]
    return apply_op("LeakyReluGrad", grad, x, alpha=op.get_attr("alpha")), _zeros_like(x)


def _exponential_grad_grad(op_type: str):
    """EluGrad and SeluGrad take the activation's output y: for y < 0 the backprop is
    g * (y + c), whose derivative in y is g."""
    def rule(op, grad):
        g, y = op.inputs
        negative = apply_op("Less", y, _constant(0, y))
        return (apply_op(op_type, grad, y),
                apply_op("SelectV2", negative, grad * g, _constant(0, y)))
    return rule


family.gradient("EluGrad")(_exponential_grad_grad("EluGrad"))
family.gradient("SeluGrad")(_exponential_grad_grad("SeluGrad"))


@family.gradient("SoftplusGrad")
def _softplus_grad_grad(op, grad):
    # SoftplusGrad(g, x) = g * sigmoid(x); sigmoid'(x) = 1 / (exp(-x) + 2 + exp(x)), which
    # tends to 0 (not NaN) when an exp overflows.
    g, x = op.inputs
    curvature = apply_op("Exp", -x) + _constant(2, x) + apply_op("Exp", x)
    return apply_op("SoftplusGrad", grad, x), grad * g / curvature


@family.gradient("SoftsignGrad")
def _softsign_grad_grad(op, grad):
    # SoftsignGrad(g, x) = g / (1 + |x|)^2, whose derivative in x is -2 sign(x) g / (1 + |x|)^3
    # (TensorFlow has no rule for SoftsignGrad).
    g, x = op.inputs
    scaled = apply_op("SoftsignGrad", grad * g, x)
    factor = apply_op("Sign", x) * _constant(-2, x) / (apply_op("Abs", x) + _constant(1, x))
    return apply_op("SoftsignGrad", grad, x), scaled * factor


# -- softmax and cross entropy --------------------------------------------------------------------

@family.gradient("Softmax")
def _softmax_grad(op, grad):
    # The Jacobian is diag(s) - s s^T: (grad - <grad, s>) * s along the last axis.
    s = op.outputs[0]
    inner = _sum(grad * s, [-1], keep_dims=True)
    return (grad - inner) * s


@family.gradient("LogSoftmax")
def _log_softmax_grad(op, grad):
    s = apply_op("Exp", op.outputs[0])
    return grad - _sum(grad, [-1], keep_dims=True) * s


def _softmax_jvp(grad, s):
    """(grad - <grad, s>) * s: the softmax Jacobian (symmetric) applied to ``grad``, rows of
    a [batch, classes] matrix."""
    inner = _sum(grad * s, [1], keep_dims=True)
    return (grad - inner) * s


def _xent_logits_grad(op, logits, grad_loss, grad_backprop):
    """The logits' gradient of a cross entropy whose outputs are (loss, softmax - labels):
    grad_loss * backprop, plus the backprop output's own gradient through the softmax."""
    grad = apply_op("ExpandDims", grad_loss, np.int32(-1)) * op.outputs[1]
    if _is_zero(grad_backprop):
        return grad
    return grad + _softmax_jvp(grad_backprop, apply_op("Softmax", logits))


@family.gradient("SoftmaxCrossEntropyWithLogits")
def _softmax_xent_grad(op, grad_loss, grad_backprop):
    # Features and labels may broadcast to [batch, classes]: the gradients are computed on the
    # broadcast matrix (softmax of the broadcast logits) and summed back to each input.
    # Unlike TensorFlow's rule, the labels also get the backprop output's gradient (-grad).
    features, labels = op.inputs
    full = op.outputs[1]
    features_axes = _static_reduction_axes(features.shape, full.shape)
    logits = features if features_axes == [] else apply_op("BroadcastTo", features, _shape(full))
    d_features = _xent_logits_grad(op, logits, grad_loss, grad_backprop)
    d_labels = apply_op("ExpandDims", grad_loss, np.int32(-1)) * -apply_op("LogSoftmax", logits)
    if not _is_zero(grad_backprop):
        d_labels = d_labels - grad_backprop
    return unbroadcast_to(features, full, d_features), unbroadcast_to(labels, full, d_labels)


@family.gradient("SparseSoftmaxCrossEntropyWithLogits")
def _sparse_softmax_xent_grad(op, grad_loss, grad_backprop):
    return _xent_logits_grad(op, op.inputs[0], grad_loss, grad_backprop), None


# -- bias ---------------------------------------------------------------------------------------

@family.gradient("BiasAdd")
def _bias_add_grad(op, grad):
    return grad, apply_op("BiasAddGrad", grad, data_format=op.get_attr("data_format"))


@family.gradient("BiasAddV1")
def _bias_add_v1_grad(op, grad):
    # BiasAddV1 adds along the last axis, which BiasAddGrad's default NHWC format sums over.
    return grad, apply_op("BiasAddGrad", grad)


@family.gradient("BiasAddGrad")
def _bias_add_grad_grad(op, grad):
    # BiasAddGrad sums out_backprop down to its channel axis: its adjoint broadcasts the
    # [channels] gradient back (along the last axis, or axis 1 in NCHW).
    out_backprop = op.inputs[0]
    if text(op.get_attr("data_format")) == "NCHW":
        rank = out_backprop.shape.rank
        if rank is not None:
            target = np.array([-1] + [1] * (rank - 2), np.int32)
        else:
            spatial = apply_op("Slice", apply_op("Shape", out_backprop), np.array([2], np.int32),
                               np.array([-1], np.int32))
            target = apply_op("ConcatV2", [np.array([-1], np.int32), apply_op("OnesLike", spatial)], 0)
        grad = apply_op("Reshape", grad, target)
    return apply_op("BroadcastTo", grad, _shape(out_backprop))


# -- convolution --------------------------------------------------------------------------------
# Conv2D is bilinear in (input, filter); its backprop ops are the two adjoints, so each of
# the three ops' gradients are the other two.

def _conv_family(forward: str, backprop_input: str, backprop_filter: str) -> None:
    @family.gradient(forward)
    def _forward_grad(op, grad):
        x, f = op.inputs
        return (apply_op(backprop_input, _shape(x), f, grad, **_copy_attrs(op, backprop_input)),
                apply_op(backprop_filter, x, _shape(f), grad, **_copy_attrs(op, backprop_filter)))

    @family.gradient(backprop_input)
    def _backprop_input_grad(op, grad):
        _, f, dy = op.inputs
        return (None,
                apply_op(backprop_filter, grad, _shape(f), dy, **_copy_attrs(op, backprop_filter)),
                apply_op(forward, grad, f, **_copy_attrs(op, forward)))

    @family.gradient(backprop_filter)
    def _backprop_filter_grad(op, grad):
        x, _, dy = op.inputs
        return (apply_op(backprop_input, _shape(x), grad, dy, **_copy_attrs(op, backprop_input)),
                None,
                apply_op(forward, x, grad, **_copy_attrs(op, forward)))


_conv_family("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")
_conv_family("DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter")
_conv_family("Conv3D", "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2")


# The V1 3-D backprops read sizes off a tensor's shape (and have no data_format); TensorFlow
# has no rules for them: these are the V2 ones'.

@family.gradient("Conv3DBackpropInput")
def _conv3d_backprop_input_v1_grad(op, grad):
    _, f, dy = op.inputs
    return (None,
            apply_op("Conv3DBackpropFilterV2", grad, _shape(f), dy, **_copy_attrs(op, "Conv3DBackpropFilterV2")),
            apply_op("Conv3D", grad, f, **_copy_attrs(op, "Conv3D")))


@family.gradient("Conv3DBackpropFilter")
def _conv3d_backprop_filter_v1_grad(op, grad):
    x, _, dy = op.inputs
    return (apply_op("Conv3DBackpropInputV2", _shape(x), grad, dy, **_copy_attrs(op, "Conv3DBackpropInputV2")),
            None,
            apply_op("Conv3D", x, grad, **_copy_attrs(op, "Conv3D")))


# -- pooling ------------------------------------------------------------------------------------

@family.gradient("MaxPool")
def _max_pool_grad(op, grad):
    return apply_op("MaxPoolGrad", op.inputs[0], op.outputs[0], grad, **_copy_attrs(op, "MaxPoolGrad"))


@family.gradient("MaxPoolV2")
def _max_pool_v2_grad(op, grad):
    x, ksize, strides = op.inputs
    return (apply_op("MaxPoolGradV2", x, op.outputs[0], grad, ksize, strides, **_copy_attrs(op, "MaxPoolGradV2")),
            None, None)


@family.gradient("AvgPool")
def _avg_pool_grad(op, grad):
    return apply_op("AvgPoolGrad", _shape(op.inputs[0]), grad, **_copy_attrs(op, "AvgPoolGrad"))


@family.gradient("AvgPoolGrad")
def _avg_pool_grad_grad(op, grad):
    # AvgPoolGrad is the adjoint of AvgPool (a linear map), and the other way round.
    return None, apply_op("AvgPool", grad, **_copy_attrs(op, "AvgPool"))


# MaxPoolGrad (routing each window's gradient to its argmax) and MaxPoolGradGrad (gathering
# at each window's argmax) are adjoint linear maps in ``grad``; the argmax is locally constant
# in the inputs, which get zeros.

@family.gradient("MaxPoolGrad")
def _max_pool_grad_grad(op, grad):
    orig_input, orig_output, _ = op.inputs
    if text(op.get_attr("padding")) == "EXPLICIT":
        gathered = _explicit_max_pool_grad_grad(op, grad)
    else:
        gathered = apply_op("MaxPoolGradGrad", orig_input, orig_output, grad, **_copy_attrs(op, "MaxPoolGradGrad"))
    return _zeros_like(orig_input), _zeros_like(orig_output), gathered


def _explicit_max_pool_grad_grad(op, grad):
    """MaxPoolGradGrad has no EXPLICIT padding: pad the input (with the lowest value, which no
    window maximum picks) and its gradient (with zeros) and gather with VALID windows."""
    orig_input, orig_output, _ = op.inputs
    pads = np.array(op.get_attr("explicit_paddings"), np.int32).reshape(4, 2)
    dtype = orig_input.dtype.base_dtype
    lowest = np.finfo(dtype.storage).min if dtype.is_floating else np.iinfo(dtype.storage).min
    padded_input = apply_op("PadV2", orig_input, pads, np.asarray(lowest, dtype.storage))
    padded_grad = apply_op("Pad", grad, pads)
    return apply_op("MaxPoolGradGrad", padded_input, orig_output, padded_grad,
                    **_copy_attrs(op, "MaxPoolGradGrad", padding="VALID"))


@family.gradient("MaxPoolGradV2")
def _max_pool_grad_v2_grad(op, grad):
    orig_input, orig_output, _, ksize, strides = op.inputs
    gathered = apply_op("MaxPoolGradGradV2", orig_input, orig_output, grad, ksize, strides,
                        **_copy_attrs(op, "MaxPoolGradGradV2"))
    return _zeros_like(orig_input), _zeros_like(orig_output), gathered, None, None


@family.gradient("MaxPoolGradGrad")
def _max_pool_grad_grad_grad(op, grad):
    orig_input, orig_output, _ = op.inputs
    routed = apply_op("MaxPoolGrad", orig_input, orig_output, grad, **_copy_attrs(op, "MaxPoolGrad"))
    return _zeros_like(orig_input), _zeros_like(orig_output), routed


@family.gradient("MaxPoolGradGradV2")
def _max_pool_grad_grad_v2_grad(op, grad):
    # TensorFlow has no rule for MaxPoolGradGradV2; this is MaxPoolGradGrad's, with the
    # window as inputs.
    orig_input, orig_output, _, ksize, strides = op.inputs
    routed = apply_op("MaxPoolGradV2", orig_input, orig_output, grad, ksize, strides,
                      **_copy_attrs(op, "MaxPoolGradV2"))
    return _zeros_like(orig_input), _zeros_like(orig_output), routed, None, None


def _argmax_attrs(op) -> dict:
    return {name: op.get_attr(name) for name in ("ksize", "strides", "padding", "include_batch_in_index")}


@family.gradient("MaxPoolWithArgmax")
def _max_pool_with_argmax_grad(op, grad, _argmax_grad):
    return apply_op("MaxPoolGradWithArgmax", op.inputs[0], grad, op.outputs[1], **_argmax_attrs(op))


# The argmax gradient ops scatter to and gather from the argmax positions: adjoint linear maps
# in grad (TensorFlow has a rule for the first only).

@family.gradient("MaxPoolGradWithArgmax")
def _max_pool_grad_with_argmax_grad(op, grad):
    x, _, argmax = op.inputs
    return _zeros_like(x), apply_op("MaxPoolGradGradWithArgmax", x, grad, argmax, **_argmax_attrs(op)), None


@family.gradient("MaxPoolGradGradWithArgmax")
def _max_pool_grad_grad_with_argmax_grad(op, grad):
    x, _, argmax = op.inputs
    return _zeros_like(x), apply_op("MaxPoolGradWithArgmax", x, grad, argmax, **_argmax_attrs(op)), None


@family.gradient("AvgPool3D")
def _avg_pool3d_grad(op, grad):
    return apply_op("AvgPool3DGrad", _shape(op.inputs[0]), grad, **_copy_attrs(op, "AvgPool3DGrad"))


@family.gradient("AvgPool3DGrad")
def _avg_pool3d_grad_grad(op, grad):
    return None, apply_op("AvgPool3D", grad, **_copy_attrs(op, "AvgPool3D"))


@family.gradient("MaxPool3D")
def _max_pool3d_grad(op, grad):
    return apply_op("MaxPool3DGrad", op.inputs[0], op.outputs[0], grad, **_copy_attrs(op, "MaxPool3DGrad"))


@family.gradient("MaxPool3DGrad")
def _max_pool3d_grad_grad(op, grad):
    orig_input, orig_output, _ = op.inputs
    gathered = apply_op("MaxPool3DGradGrad", orig_input, orig_output, grad, **_copy_attrs(op, "MaxPool3DGradGrad"))
    return _zeros_like(orig_input), _zeros_like(orig_output), gathered


@family.gradient("MaxPool3DGradGrad")
def _max_pool3d_grad_grad_grad(op, grad):
    orig_input, orig_output, _ = op.inputs
    routed = apply_op("MaxPool3DGrad", orig_input, orig_output, grad, **_copy_attrs(op, "MaxPool3DGrad"))
    return _zeros_like(orig_input), _zeros_like(orig_output), routed


# -- losses -------------------------------------------------------------------------------------

@family.gradient("L2Loss")
def _l2_loss_grad(op, grad):
    return op.inputs[0] * grad


family.not_differentiable("InTopK", "InTopKV2")


# -- batch normalization --------------------------------------------------------------------------

_BATCH_NORM_GRAD = {"FusedBatchNorm": "FusedBatchNormGrad", "FusedBatchNormV2": "FusedBatchNormGradV2",
                    "FusedBatchNormV3": "FusedBatchNormGradV3"}


def _fused_batch_norm_grad(op, grad_y, *statistics_grads):
    # y through FusedBatchNormGrad* as TensorFlow; then what TensorFlow leaves out: the
    # cotangents of the statistics outputs (functions of x in training mode, of the mean and
    # variance inputs otherwise) and, in inference mode, the mean and variance inputs' gradients
    # through y.
    if op.outputs[1].dtype.base_dtype is not dtypes.float32:
        raise GradientError(f"cannot differentiate {describe_node(op.name, op.type)} with U="
                            f"{op.outputs[1].dtype.name}: {_BATCH_NORM_GRAD[op.type]} takes float32 statistics")
    dx, dscale, doffset = _batch_norm_y_grad(op, grad_y)
    grads = [None if _is_zero(g) else g for g in statistics_grads]
    layout = _BatchNormLayout(op)
    if op.get_attr("is_training"):
        dx, d_mean, d_variance = _batch_statistics_grad(op, layout, dx, grads)
    else:
        d_mean, d_variance = _inference_statistics_grad(op, layout, grad_y, grads)
    return dx, dscale, doffset, d_mean, d_variance


def _batch_norm_y_grad(op, grad_y):
    """(dx, dscale, doffset) of y alone, by the FusedBatchNormGrad op of the node's version."""
    x, scale, _, mean, variance = op.inputs
    grad_op = _BATCH_NORM_GRAD[op.type]
    attrs = _copy_attrs(op, grad_op)
    if op.get_attr("is_training"):
        reserve_1, reserve_2 = op.outputs[3], op.outputs[4]
        to_channels_last = None
    else:
        reserve_1, reserve_2 = mean, variance
        # TensorFlow's CPU kernel backpropagates inference mode in channels-last layouts only.
        to_channels_last = _CHANNELS_LAST.get(text(attrs["data_format"]))
        if to_channels_last is not None:
            attrs["data_format"], perm = to_channels_last
            grad_y, x = (apply_op("Transpose", t, np.array(perm, np.int32)) for t in (grad_y, x))
    extra = [op.outputs[5]] if op.type == "FusedBatchNormV3" else []
    dx, dscale, doffset, _, _ = apply_op(grad_op, grad_y, x, scale, reserve_1, reserve_2, *extra, **attrs)
    if to_channels_last is not None:
        dx = apply_op("Transpose", dx, np.array(np.argsort(to_channels_last[1]), np.int32))
    return dx, dscale, doffset


def _per_channel_count(layout, x):
    """The number of values per channel (float32): Size(x) / channels."""
    if x.shape.is_fully_defined():
        dims = x.shape.as_list()
        return np.float32(np.prod(dims) // max(dims[layout.axis], 1))
    channels = apply_op("StridedSlice", apply_op("Shape", x), np.array([layout.axis], np.int32),
                        np.array([layout.axis + 1], np.int32), np.array([1], np.int32), shrink_axis_mask=1)
    size = apply_op("Cast", apply_op("Size", x), DstT=dtypes.float32)
    return size / apply_op("Maximum", apply_op("Cast", channels, DstT=dtypes.float32), np.float32(1))


def _batch_statistics_grad(op, layout, dx, grads):
    """Training mode. batch_mean = (1 - f) mean + f mu and batch_variance = (1 - f) variance +
    f n / (n - 1) sigma^2 (f the exponential average factor; f = 1 leaves the inputs unused), the
    reserve spaces mu and sigma^2, with mu and sigma^2 (biased) the statistics of x per channel:
    d mu / dx = 1 / n, d sigma^2 / dx = 2 (x - mu) / n."""
    g_mean, g_variance, g_mu, g_sigma2 = (list(grads) + [None] * 4)[:4]
    x = op.inputs[0]
    factor = np.float32(op.get_attr("exponential_avg_factor"))
    n = _per_channel_count(layout, x)
    d_mu = _add_all([None if g_mean is None else g_mean * factor, g_mu])
    bessel = (n / max(n - 1, np.float32(1)) if isinstance(n, np.floating)
              else n / apply_op("Maximum", n - np.float32(1), np.float32(1)))
    d_sigma2 = _add_all([None if g_variance is None else g_variance * (factor * bessel), g_sigma2])
    terms = []
    xf = _widen(x)
    if d_mu is not None:
        terms.append(layout.channels(d_mu / n))
    if d_sigma2 is not None:
        centered = xf - layout.channels(op.outputs[3])
        terms.append(centered * layout.channels(d_sigma2 * (np.float32(2) / n)))
    for term in terms:     # broadcasting sums (a [channels] term, an x-shaped one)
        dx = _widen(dx) + term
    dx = _narrow(dx, x.dtype.base_dtype)
    unused = factor == 1
    d_mean = None if unused or g_mean is None else g_mean * (np.float32(1) - factor)
    d_variance = None if unused or g_variance is None else g_variance * (np.float32(1) - factor)
    return dx, d_mean, d_variance


def _inference_statistics_grad(op, layout, grad_y, grads):
    """Inference mode: y = (x - mean) scale r + offset, r = rsqrt(variance + epsilon), and the
    statistics outputs pass the inputs through:
    d mean = -sum(g) scale r, d variance = -sum(g (x - mean)) scale r^3 / 2."""
    x, scale, _, mean, variance = op.inputs
    g = _widen(grad_y)
    r = apply_op("Rsqrt", variance + np.float32(op.get_attr("epsilon")))
    d_mean = -_sum(g, layout.axes) * scale * r
    centered = _widen(x) - layout.channels(mean)
    d_variance = _sum(g * centered, layout.axes) * scale * (r * r * r) * np.float32(-0.5)
    # batch_mean and reserve_space_1 pass the mean through, batch_variance and reserve_space_2
    # the variance.
    g_mean, g_variance, g_reserve_1, g_reserve_2 = (list(grads) + [None] * 4)[:4]
    return _add_all([d_mean, g_mean, g_reserve_1]), _add_all([d_variance, g_variance, g_reserve_2])


for _forward in _BATCH_NORM_GRAD:
    family.gradient(_forward)(_fused_batch_norm_grad)


_CHANNELS_LAST = {"NCHW": ("NHWC", [0, 2, 3, 1]), "NCDHW": ("NDHWC", [0, 2, 3, 4, 1])}


class _BatchNormLayout:
    """A batch norm node's reduction axes (all but the channel axis) and the reshaping of
    per-channel vectors to broadcast against x."""

    def __init__(self, op):
        self.rank, axis = BATCH_NORM_FORMATS[text(op.get_attr("data_format"))]
        self.axis = axis % self.rank
        self.axes = [i for i in range(self.rank) if i != self.axis]

    def channels(self, v):
        if self.axis == self.rank - 1:
            return v
        shape = [1] * self.rank
        shape[self.axis] = -1
        return apply_op("Reshape", v, np.array(shape, np.int32))


def _fused_batch_norm_grad_grad(op, grad_dx, grad_dscale, grad_doffset, *_reserve_grads):
    # TensorFlow differentiates a composite of its formulas with a tape; here the derivatives
    # are written out. In training mode the statistics are functions of x (recomputed from it),
    # so the reserve-space inputs get no gradient, as in TensorFlow. In inference mode they are
    # the population mean and variance, which get theirs (TensorFlow gives none). Half types:
    # float32 math.
    g, x, scale, reserve_1, reserve_2 = op.inputs[:5]
    layout = _BatchNormLayout(op)
    epsilon = np.float32(op.get_attr("epsilon"))
    upstream = (None if _is_zero(grad_dx) else _widen(grad_dx),
                None if _is_zero(grad_dscale) else layout.channels(grad_dscale),
                None if _is_zero(grad_doffset) else layout.channels(grad_doffset))
    d_mean = d_variance = None
    if op.get_attr("is_training"):
        d_g, d_x, d_scale = _batch_norm_training_grad_grad(layout, _widen(g), _widen(x), scale, epsilon, *upstream)
    else:
        d_g, d_x, d_scale, d_mean, d_variance = _batch_norm_inference_grad_grad(
            layout, _widen(g), _widen(x), scale, reserve_1, reserve_2, epsilon, *upstream)
    dtype = x.dtype.base_dtype
    rest = [None] * (len(op.inputs) - 5)
    return (_narrow(d_g, dtype), _narrow(d_x, dtype), d_scale, d_mean, d_variance, *rest)


for _grad_op in _BATCH_NORM_GRAD.values():
    family.gradient(_grad_op)(_fused_batch_norm_grad_grad)


def _plus_per_channel(terms: list, c, like):
    """The sum of x-shaped ``terms`` plus the per-channel ``c`` (either may be missing),
    shaped like ``like``."""
    total = _add_all(terms)
    if c is None:
        return total
    return apply_op("BroadcastTo", c, _shape(like)) if total is None else total + c


def _batch_norm_training_grad_grad(layout, g, x, scale, epsilon, a, b, c):
    """Gradients in (g, x, scale) of L = <a, dx> + <b, dscale> + <c, doffset> (a, b, c: the
    upstream gradients, None when zero), where, with means over the reduction axes,
    xh = (x - mean(x)) r, r = rsqrt(mean((x - mean(x))^2) + epsilon) and the projection
    P(t) = t - mean(t) - xh mean(t xh) (symmetric):
        dx = scale r P(g),  dscale = sum(g xh),  doffset = sum(g).
    Through (xh, r): dL/dx = r (P(G) - xh r R / m), G = dL/dxh at fixed r, R = dL/dr at
    fixed xh, m the count per channel.
    """
    def mean(t):
        return _mean(t, layout.axes)

    def project(t):
        return t - mean(t) - xh * mean(t * xh)

    centered = x - mean(x)
    r = apply_op("Rsqrt", mean(apply_op("Square", centered)) + epsilon)
    xh = centered * r
    gamma = layout.channels(scale)
    gamma_r = gamma * r
    d_g, grad_xh = [], []
    d_scale = r_term = None
    if a is not None:
        a_pg = a * project(g)
        d_g.append(gamma_r * project(a))
        d_scale = _sum(a_pg * r, layout.axes)
        grad_xh.append(-(gamma_r * (a * mean(g * xh) + g * mean(a * xh))))
        r_term = xh * r * gamma * mean(a_pg)          # xh r R / m, with R = scale sum(a P(g))
    if b is not None:
        d_g.append(b * xh)
        grad_xh.append(b * g)
    d_x = None
    if grad_xh:
        inner = project(_add_all(grad_xh))
        d_x = r * (inner if r_term is None else inner - r_term)
    return _plus_per_channel(d_g, c, g), d_x, d_scale


def _batch_norm_inference_grad_grad(layout, g, x, scale, mean, variance, epsilon, a, b, c):
    """With the population statistics given: dx = g scale r, dscale = sum(g (x - mean) r),
    doffset = sum(g), r = rsqrt(variance + epsilon); also the statistics' gradients,
    d mean = -sum(b g) r and d variance = -r^3 / 2 (scale sum(a g) + sum(b g (x - mean)))."""
    r_vector = apply_op("Rsqrt", variance + epsilon)
    r = layout.channels(r_vector)
    centered = x - layout.channels(mean)
    xh = centered * r
    d_g = [a * layout.channels(scale) * r] if a is not None else []
    if b is not None:
        d_g.append(b * xh)
    d_x = b * g * r if b is not None else None
    d_scale = _sum(a * g * r, layout.axes) if a is not None else None
    d_mean = None if b is None else -_sum(b * g, layout.axes) * r_vector
    slopes = []
    if a is not None:
        slopes.append(_sum(a * g, layout.axes) * scale)
    if b is not None:
        slopes.append(_sum(b * g * centered, layout.axes))
    d_variance = None if not slopes else _add_all(slopes) * (r_vector * r_vector * r_vector) * np.float32(-0.5)
    return _plus_per_channel(d_g, c, g), d_x, d_scale, d_mean, d_variance


@family.gradient("BatchNormWithGlobalNormalization")
def _global_norm_grad(op, grad):
    # As TensorFlow: dx, dm, dv, dbeta, dgamma from the Grad op (TensorFlow 2.21 refuses to build
    # either op, removed at GraphDef version 9: the rule is checked numerically).
    t, m, v, _, gamma = op.inputs
    attrs = {"variance_epsilon": op.get_attr("variance_epsilon"),
             "scale_after_normalization": op.get_attr("scale_after_normalization")}
    return tuple(apply_op("BatchNormWithGlobalNormalizationGrad", t, m, v, gamma, grad, **attrs))


# -- local response normalization -----------------------------------------------------------------

def _lrn_attrs(op) -> tuple[int, float, float, float]:
    return op.get_attr("depth_radius"), op.get_attr("bias"), op.get_attr("alpha"), op.get_attr("beta")


@family.gradient("LRN")
def _lrn_grad(op, grad):
    radius, bias, alpha, beta = _lrn_attrs(op)
    return apply_op("LRNGrad", grad, op.inputs[0], op.outputs[0], depth_radius=radius, bias=bias, alpha=alpha,
                    beta=beta)


def _depth_window_sum(v, radius: int):
    """S(v): the sum of v[..., d - radius : d + radius + 1] (clipped at the edges) for every
    depth d, as a SAME convolution of the depth axis with a ones filter."""
    depth = v.shape[-1] if v.shape.rank is not None else None
    if depth is not None:
        columns = np.array([-1, depth, 1, 1], np.int32)
    else:
        last = apply_op("Slice", apply_op("Shape", v), np.array([3], np.int32), np.array([1], np.int32))
        columns = apply_op("ConcatV2", [np.array([-1], np.int32), last, np.array([1, 1], np.int32)], 0)
    ones = np.ones((2 * radius + 1, 1, 1, 1), v.dtype.base_dtype.storage)
    summed = apply_op("Conv2D", apply_op("Reshape", v, columns), ones, strides=[1, 1, 1, 1], padding="SAME")
    return apply_op("Reshape", summed, _shape(v))


@family.gradient("LRNGrad")
def _lrn_grad_grad(op, grad):
    # TensorFlow has no rule for LRNGrad. With N = bias + alpha S(x^2) and S the depth window
    # sum, LRNGrad(g, x, y) = g N^-beta - 2 alpha beta x S(y g / N); its derivatives against
    # an upstream h, in float32 for half types:
    #   d_g = h N^-beta - 2 alpha beta y S(x h) / N
    #   d_y = -2 alpha beta g S(x h) / N
    #   d_x = -2 alpha beta (x S(h g N^(-beta-1) - 2 alpha y g S(x h) / N^2) + h S(y g / N))
    radius, bias, alpha, beta = _lrn_attrs(op)
    dtype = op.inputs[0].dtype.base_dtype
    g, x, y = (_widen(t) for t in op.inputs)
    h = _widen(grad)

    def const(value):
        return scalar(value, x)

    norm = _depth_window_sum(apply_op("Square", x), radius) * const(alpha) + const(bias)
    s_xh_by_norm = _depth_window_sum(x * h, radius) / norm
    k = const(-2 * alpha * beta)
    d_g = h * apply_op("Pow", norm, const(-beta)) + k * y * s_xh_by_norm
    d_y = k * g * s_xh_by_norm
    yg_by_norm = y * g / norm
    inner = h * g * apply_op("Pow", norm, const(-beta - 1)) - const(2 * alpha) * yg_by_norm * s_xh_by_norm
    d_x = k * (x * _depth_window_sum(inner, radius) + h * _depth_window_sum(yg_by_norm, radius))
    return _narrow(d_g, dtype), _narrow(d_x, dtype), _narrow(d_y, dtype)


def refuse_second_derivative(op_type: str, why: str) -> None:
    """Register a rule for ``op_type`` that raises NoGradientError: TensorFlow has no rule for it
    either, and a NotDifferentiable declaration would make its derivatives silently zero."""
    def rule(op, *grads):
        raise NoGradientError(f"No gradient defined for operation '{op.name}' (op type: {op.type}): {why}")
    family.gradient(op_type)(rule)


refuse_second_derivative("BatchNormWithGlobalNormalizationGrad",
                         "the op is deprecated (TensorFlow 2.21 refuses to build it) and has no second derivative")
