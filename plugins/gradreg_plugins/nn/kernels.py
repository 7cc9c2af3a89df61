"""NumPy kernels of the nn family: activations and their gradients, softmax and cross
entropies, bias addition, L2 loss, top-k membership, batch and local response
normalization (convolution and pooling kernels are in ``conv`` and ``pooling``).
See gradreg.registry.kernels for the kernel contract.

Reductions over float16 (softmax, sums, statistics) are computed in float32 and rounded
once at the end; bfloat16 values, held in float32 arrays, are rounded to bfloat16 on output.
"""
from __future__ import annotations

import numpy as np

from gradreg.errors import ExecutionError, describe_node
from gradreg.model import dtypes
from gradreg_plugins.nn import family
from gradreg_plugins.nn.ops import BATCH_NORM_FORMATS
from gradreg_plugins.nn.windows import text

SELU_SCALE = 1.0507009873554804934193349852946
SELU_ALPHA = 1.6732632423543772848170429916717


def node_error(op, message: str) -> ExecutionError:
    """An error about a node's attrs, raised while its kernel is being prepared."""
    return ExecutionError(f"{describe_node(op.name, op.type)}: {message}", op.name, op.type)


def widen(x: np.ndarray) -> np.ndarray:
    """float16 arrays as float32 (the precision TensorFlow computes half reductions in)."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def storage(op, index: int = 0) -> np.dtype:
    """The NumPy dtype of output ``index`` of ``op``."""
    return op.outputs[index].dtype.base_dtype.storage


def round_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), still as float32."""
    a = np.asarray(values, dtype=np.float32)
    bits = a.view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)).view(np.float32)
    return np.where(np.isnan(a), a, rounded)


def kernel(op_type: str):
    """``family.kernel`` for this family: bfloat16 outputs, computed in float32 arrays, are
    rounded to bfloat16 as TensorFlow's kernels produce them."""
    def register(factory):
        def rounding_factory(op, ctx):
            compute = factory(op, ctx)
            rounded = [t.dtype.base_dtype is dtypes.bfloat16 for t in op.outputs]
            if not callable(compute) or not any(rounded):
                return compute
            if len(rounded) == 1:
                return lambda *args: round_bfloat16(compute(*args))
            return lambda *args: tuple(round_bfloat16(v) if r else v for v, r in zip(compute(*args), rounded))
        family.kernel(op_type)(rounding_factory)
        return factory
    return register


def simple_kernel(op_type: str, fn) -> None:
    """Register ``fn(*inputs)`` as the kernel of ``op_type`` whatever the node's attrs."""
    kernel(op_type)(lambda op, ctx: fn)


def _shape_list(x) -> str:
    return "[" + ",".join(str(d) for d in np.shape(x)) + "]"


# -- activations ---------------------------------------------------------------------------

# NumPy's own float types: np.clip's loop runs them 2-3x faster than np.maximum against a
# scalar (NumPy 2.4, 74k float32: 10.6 against 28 us), with the same values (NaN kept; -0.0
# stays -0.0, which compares equal to maximum's 0.0). Other
# types (integers, ml_dtypes' bfloat16, which has no clip loop) keep maximum and minimum.
_CLIPPED = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64))


def _relu(x):
    if x.dtype in _CLIPPED:
        return np.clip(x, x.dtype.type(0), x.dtype.type(np.inf))
    return np.maximum(x, x.dtype.type(0))


def _relu6(x):
    if x.dtype in _CLIPPED:
        return np.clip(x, x.dtype.type(0), x.dtype.type(6))
    return np.minimum(np.maximum(x, x.dtype.type(0)), x.dtype.type(6))


simple_kernel("Relu", _relu)
simple_kernel("Relu6", _relu6)
simple_kernel("Elu", lambda x: np.where(x < 0, np.expm1(x), x))
simple_kernel("Softsign", lambda x: x / (1 + np.abs(x)))


@kernel("Selu")
def _selu(op, ctx):
    dt = storage(op)
    scale, scale_alpha = dt.type(SELU_SCALE), dt.type(SELU_SCALE * SELU_ALPHA)
    return lambda x: np.where(x < 0, scale_alpha * np.expm1(x), scale * x)


def _softplus_threshold(op) -> float:
    """TensorFlow's log(epsilon) + 2 of the node's type: beyond it, softplus(x) is x or exp(x)
    to machine precision."""
    t = op.get_attr("T")
    eps = 2.0 ** -7 if t == dtypes.bfloat16 else float(np.finfo(t.storage).eps)
    return float(np.log(eps) + 2)


@kernel("Softplus")
def _softplus(op, ctx):
    threshold = storage(op).type(_softplus_threshold(op))

    def softplus(x):
        e = np.exp(x)
        return np.where(x > -threshold, x, np.where(x < threshold, e, np.log(e + 1)))
    return softplus


@kernel("LeakyRelu")
def _leaky_relu(op, ctx):
    alpha = storage(op).type(op.get_attr("alpha"))
    return lambda x: np.where(x > 0, x, x * alpha)


simple_kernel("ReluGrad", lambda g, f: g * (f > 0).astype(g.dtype))
simple_kernel("Relu6Grad", lambda g, f: g * ((f > 0) & (f < 6)).astype(g.dtype))
simple_kernel("EluGrad", lambda g, y: np.where(y < 0, g * (y + 1), g))
simple_kernel("SoftplusGrad", lambda g, f: g / (np.exp(-f) + 1))
simple_kernel("SoftsignGrad", lambda g, f: g / np.square(1 + np.abs(f)))


@kernel("SeluGrad")
def _selu_grad(op, ctx):
    dt = storage(op)
    scale, scale_alpha = dt.type(SELU_SCALE), dt.type(SELU_SCALE * SELU_ALPHA)
    return lambda g, y: np.where(y < 0, g * (y + scale_alpha), g * scale)


@kernel("LeakyReluGrad")
def _leaky_relu_grad(op, ctx):
    alpha = storage(op).type(op.get_attr("alpha"))
    return lambda g, f: np.where(f > 0, g, g * alpha)


# -- softmax and cross entropy -----------------------------------------------------------

def _shifted_logits(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(logits - max, sum(exp(logits - max))) along the last axis: exp never overflows."""
    shifted = logits - logits.max(axis=-1, keepdims=True, initial=-np.inf)
    return shifted, np.exp(shifted).sum(axis=-1, keepdims=True)


def _softmax(x):
    shifted, total = _shifted_logits(widen(x))
    return (np.exp(shifted) / total).astype(x.dtype, copy=False)


def _log_softmax(x):
    shifted, total = _shifted_logits(widen(x))
    return (shifted - np.log(total)).astype(x.dtype, copy=False)


simple_kernel("Softmax", _softmax)
simple_kernel("LogSoftmax", _log_softmax)


@kernel("SoftmaxCrossEntropyWithLogits")
def _softmax_xent(op, ctx):
    def xent(features, labels):
        try:
            shape = np.broadcast_shapes(features.shape, labels.shape)
        except ValueError:
            raise ValueError(f"logits and labels must be broadcastable: logits_size={_shape_list(features)} "
                             f"labels_size={_shape_list(labels)}") from None
        if len(shape) != 2:
            raise ValueError("logits and labels must be either 2-dimensional, or broadcasted to be 2-dimensional")
        ctx.check_elements(shape[0] * shape[1], op)
        dtype = features.dtype
        logits = np.broadcast_to(widen(features), shape)
        labels = np.broadcast_to(widen(labels), shape)
        shifted, total = _shifted_logits(logits)
        loss = np.sum(labels * (np.log(total) - shifted), axis=1)
        backprop = np.exp(shifted) / total - labels
        return loss.astype(dtype, copy=False), backprop.astype(dtype, copy=False)
    return xent


def _summarize(values: np.ndarray, limit: int = 10) -> str:
    shown = " ".join(str(v) for v in values[:limit])
    return shown + (" ..." if values.size > limit else "")


@kernel("SparseSoftmaxCrossEntropyWithLogits")
def _sparse_softmax_xent(op, ctx):
    def xent(features, labels):
        if features.ndim != 2:
            raise ValueError(f"logits must be 2-D, but got shape {_shape_list(features)}")
        if labels.ndim != 1 or labels.shape[0] != features.shape[0]:
            raise ValueError(f"logits and labels must have the same first dimension, got logits shape "
                             f"{_shape_list(features)} and labels shape {_shape_list(labels)}")
        batch, classes = features.shape
        if classes == 0 and batch:
            raise ValueError(f"Must have at least one class, but got logits shape {_shape_list(features)}")
        bad = (labels < 0) | (labels >= classes)
        if bad.any():
            raise ValueError(f"Received a label value of {labels[bad][0]} which is outside the valid range of "
                             f"[0, {classes}).  Label values: {_summarize(labels)}")
        shifted, total = _shifted_logits(widen(features))
        rows = np.arange(batch)
        loss = np.log(total[:, 0]) - shifted[rows, labels]
        backprop = np.exp(shifted) / total
        backprop[rows, labels] -= 1
        return loss.astype(features.dtype, copy=False), backprop.astype(features.dtype, copy=False)
    return xent


# -- bias --------------------------------------------------------------------------------

def _bias_axis(op) -> int:
    nchw = op.type != "BiasAddV1" and text(op.get_attr("data_format")) == "NCHW"
    return 1 if nchw else -1


@kernel("BiasAdd")
@kernel("BiasAddV1")
def _bias_add(op, ctx):
    axis = _bias_axis(op)

    def bias_add(value, bias):
        if value.ndim < 2:
            raise ValueError(f"value must be at least 2-D, got shape {_shape_list(value)}")
        if bias.ndim != 1 or bias.shape[0] != value.shape[axis]:
            raise ValueError(f"Must provide as many biases as the channel dimension of the input tensor: "
                             f"bias shape {_shape_list(bias)}, value shape {_shape_list(value)}")
        shape = [1] * value.ndim
        shape[axis] = bias.shape[0]
        return value + bias.reshape(shape)
    return bias_add


@kernel("BiasAddGrad")
def _bias_add_grad(op, ctx):
    axis = _bias_axis(op)

    def bias_add_grad(grad):
        if grad.ndim < 2:
            raise ValueError(f"out_backprop must be at least 2-D, got shape {_shape_list(grad)}")
        axes = tuple(i for i in range(grad.ndim) if i != axis % grad.ndim)
        wide = widen(grad)
        return np.sum(wide, axis=axes, dtype=wide.dtype).astype(grad.dtype, copy=False)
    return bias_add_grad


# -- losses and metrics ------------------------------------------------------------------

def _l2_loss(t):
    wide = widen(t)
    return np.asarray(np.sum(np.square(wide), dtype=wide.dtype) / 2, dtype=t.dtype)


simple_kernel("L2Loss", _l2_loss)


def _in_top_k(predictions: np.ndarray, targets: np.ndarray, k) -> np.ndarray:
    """TensorFlow's rule: the target is in the top k when fewer than k classes score strictly
    higher; an out-of-range target or any non-finite score in the row gives False."""
    if predictions.ndim != 2:
        raise ValueError(f"predictions must be 2-dimensional, got shape {_shape_list(predictions)}")
    if targets.ndim != 1 or targets.shape[0] != predictions.shape[0]:
        raise ValueError(f"First dimension of predictions {predictions.shape[0]} must match length of "
                         f"targets {_shape_list(targets)}")
    batch, classes = predictions.shape
    in_range = (targets >= 0) & (targets < classes)
    if classes == 0:
        return np.zeros(batch, dtype=bool)
    target_scores = predictions[np.arange(batch), np.where(in_range, targets, 0)]
    higher = np.count_nonzero(predictions > target_scores[:, None], axis=1)
    finite = np.isfinite(predictions).all(axis=1)
    return in_range & finite & (higher < k)


@kernel("InTopKV2")
def _in_top_k_v2(op, ctx):
    def in_top_k(predictions, targets, k):
        if np.ndim(k) != 0:
            raise ValueError(f"k must be 0-D, got shape {_shape_list(k)}")
        return _in_top_k(predictions, targets, int(k))
    return in_top_k


@kernel("InTopK")
def _in_top_k_v1(op, ctx):
    k = op.get_attr("k")
    return lambda predictions, targets: _in_top_k(predictions, targets, k)


# -- batch normalization -------------------------------------------------------------------

def _batch_norm_layout(op) -> tuple[int, int]:
    """(rank, channel axis) of the node's data_format."""
    return BATCH_NORM_FORMATS[text(op.get_attr("data_format"))]


def _check_channels(x: np.ndarray, rank: int, axis: int, vectors: dict) -> tuple[int, list[int]]:
    if x.ndim != rank:
        raise ValueError(f"x must be {rank}-dimensional, got shape {_shape_list(x)}")
    channels = x.shape[axis]
    for name, v in vectors.items():
        if v.shape != (channels,):
            raise ValueError(f"{name} must be a vector of size {channels} (the channel dimension), "
                             f"got shape {_shape_list(v)}")
    shape = [1] * rank
    shape[axis] = channels
    return channels, shape


@kernel("FusedBatchNorm")
@kernel("FusedBatchNormV2")
@kernel("FusedBatchNormV3")
def _fused_batch_norm(op, ctx):
    rank, axis = _batch_norm_layout(op)
    epsilon = op.get_attr("epsilon")
    factor = op.get_attr("exponential_avg_factor")
    training = op.get_attr("is_training")
    u = storage(op, 1)

    def batch_norm(x, scale, offset, mean, variance):
        vectors = {"scale": scale, "offset": offset}
        if not training or factor != 1 or mean.size or variance.size:
            vectors.update(mean=mean, variance=variance)
        channels, shape = _check_channels(x, rank, axis, vectors)
        xf = x.astype(np.float32)
        reduce_axes = tuple(i for i in range(rank) if i != axis % rank)
        if training:
            count = x.size // max(channels, 1)
            used_mean = xf.mean(axis=reduce_axes, dtype=np.float64).astype(np.float32)
            used_var = np.square(xf - used_mean.reshape(shape)).mean(axis=reduce_axes, dtype=np.float64)
            used_var = used_var.astype(np.float32)
            # The running statistics use the unbiased variance (Bessel's correction).
            batch_mean, batch_var = used_mean, used_var * np.float32(count / max(count - 1, 1))
            if factor != 1:
                keep = np.float32(1 - factor)
                batch_mean = keep * mean + np.float32(factor) * batch_mean
                batch_var = keep * variance + np.float32(factor) * batch_var
        else:
            used_mean, used_var = mean.astype(np.float32), variance.astype(np.float32)
            batch_mean, batch_var = used_mean, used_var
        inv = (1 / np.sqrt(used_var + np.float32(epsilon))) * scale
        y = (xf - used_mean.reshape(shape)) * inv.reshape(shape) + offset.reshape(shape)
        outputs = (y.astype(x.dtype, copy=False), batch_mean.astype(u, copy=False), batch_var.astype(u, copy=False),
                   used_mean.astype(u, copy=False), used_var.astype(u, copy=False), np.zeros((), u))
        return outputs[:n_outputs]
    n_outputs = len(op.outputs)
    return batch_norm


@kernel("FusedBatchNormGrad")
@kernel("FusedBatchNormGradV2")
@kernel("FusedBatchNormGradV3")
def _fused_batch_norm_grad(op, ctx):
    rank, axis = _batch_norm_layout(op)
    epsilon = np.float32(op.get_attr("epsilon"))
    training = op.get_attr("is_training")
    u = storage(op, 1)

    def batch_norm_grad(dy, x, scale, mean, variance, _reserve_3=None):
        _, shape = _check_channels(x, rank, axis, {"scale": scale, "reserve_space_1": mean,
                                                   "reserve_space_2": variance})
        if dy.shape != x.shape:
            raise ValueError(f"y_backprop and x must have the same shape, got {_shape_list(dy)} and "
                             f"{_shape_list(x)}")
        reduce_axes = tuple(i for i in range(rank) if i != axis % rank)
        dyf, xf = dy.astype(np.float32), x.astype(np.float32)
        inv = (1 / np.sqrt(variance.astype(np.float32) + epsilon)).reshape(shape)
        x_hat = (xf - mean.reshape(shape)) * inv
        offset_backprop = dyf.sum(axis=reduce_axes, dtype=np.float64)
        scale_backprop = (dyf * x_hat).sum(axis=reduce_axes, dtype=np.float64)
        coef = scale.reshape(shape) * inv
        if training:
            count = x.size // max(x.shape[axis], 1)
            dx = coef * (dyf - (offset_backprop / count).reshape(shape)
                         - x_hat * (scale_backprop / count).reshape(shape))
        else:
            dx = coef * dyf
        empty = np.zeros((0,), u)
        return (dx.astype(x.dtype, copy=False), scale_backprop.astype(u), offset_backprop.astype(u), empty, empty)
    return batch_norm_grad


def _global_norm_args(op, t, vectors: dict):
    _check_channels(t, 4, -1, vectors)
    return np.asarray(op.get_attr("variance_epsilon"), t.dtype), bool(op.get_attr("scale_after_normalization"))


@kernel("BatchNormWithGlobalNormalization")
def _global_norm(op, ctx):
    def compute(t, m, v, beta, gamma):
        epsilon, scaled = _global_norm_args(op, t, {"m": m, "v": v, "beta": beta, "gamma": gamma})
        inv = 1 / np.sqrt(v + epsilon)
        return (t - m) * (inv * gamma if scaled else inv) + beta
    return compute


@kernel("BatchNormWithGlobalNormalizationGrad")
def _global_norm_grad(op, ctx):
    def compute(t, m, v, gamma, backprop):
        epsilon, scaled = _global_norm_args(op, t, {"m": m, "v": v, "gamma": gamma})
        if backprop.shape != t.shape:
            raise ValueError(f"backprop must be shaped like t, got {_shape_list(backprop)} and {_shape_list(t)}")
        inv = 1 / np.sqrt(v + epsilon)
        factor = inv * gamma if scaled else inv
        axes = (0, 1, 2)
        centered = t - m
        db = backprop.sum(axis=axes)
        dm = -db * factor
        dv = (backprop * centered).sum(axis=axes) * (-0.5 * inv ** 3) * (gamma if scaled else 1)
        dg = (backprop * centered).sum(axis=axes) * inv if scaled else np.zeros_like(gamma)
        return backprop * factor, dm.astype(t.dtype), dv.astype(t.dtype), db, dg.astype(t.dtype)
    return compute


# -- local response normalization ---------------------------------------------------------

def _depth_window_sum(values: np.ndarray, radius: int) -> np.ndarray:
    """sum(values[..., d - radius : d + radius + 1]) for every depth d (clipped at the edges),
    from a float64 running sum."""
    depth = values.shape[-1]
    running = np.cumsum(values, axis=-1, dtype=np.float64)
    index = np.arange(depth)
    upper = running[..., np.minimum(index + radius, depth - 1)]
    lower_index = index - radius - 1
    lower = np.where(lower_index >= 0, running[..., np.maximum(lower_index, 0)], 0.0)
    return upper - lower


def _lrn_attrs(op) -> tuple[int, float, float, float]:
    radius = op.get_attr("depth_radius")
    if radius < 0:
        raise node_error(op, f"depth_radius {radius} must be nonnegative")
    return radius, op.get_attr("bias"), op.get_attr("alpha"), op.get_attr("beta")


def _check_rank4(**arrays) -> None:
    for name, a in arrays.items():
        if a.ndim != 4:
            raise ValueError(f"{name} must be 4-dimensional, got shape {_shape_list(a)}")


@kernel("LRN")
def _lrn(op, ctx):
    radius, bias, alpha, beta = _lrn_attrs(op)

    def lrn(x):
        _check_rank4(input=x)
        xf = x.astype(np.float64)
        norm = bias + alpha * _depth_window_sum(np.square(xf), radius)
        return (xf * norm ** -beta).astype(x.dtype)
    return lrn


@kernel("LRNGrad")
def _lrn_grad(op, ctx):
    radius, bias, alpha, beta = _lrn_attrs(op)

    def lrn_grad(grads, image, output):
        _check_rank4(input_grads=grads, input_image=image, output_image=output)
        if not grads.shape == image.shape == output.shape:
            raise ValueError(f"input_grads, input_image and output_image must have the same shape, got "
                             f"{_shape_list(grads)}, {_shape_list(image)} and {_shape_list(output)}")
        g, x, y = (a.astype(np.float64) for a in (grads, image, output))
        norm = bias + alpha * _depth_window_sum(np.square(x), radius)
        # d out_j / d in_k = [k == j] norm_j^-beta - 2 alpha beta in_k out_j / norm_j over the window.
        spread = _depth_window_sum(y * g / norm, radius)
        return (g * norm ** -beta - 2 * alpha * beta * x * spread).astype(grads.dtype)
    return lrn_grad
