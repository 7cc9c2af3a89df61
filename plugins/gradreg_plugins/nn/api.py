"""Python builders of the nn family whose signatures differ from the ops' inputs: they take
TensorFlow's ``tf.nn`` arguments (in TensorFlow's order) and build the nodes TensorFlow's
own Python functions build, using the array and math families' ops where TensorFlow does
(Transpose for a softmax axis, Reshape to flatten cross-entropy inputs, Cast for half
precision, the elementwise ops of sigmoid cross entropy)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gradreg.build.builders import api_function, apply_op, convert_to_tensor, op_scope
from gradreg.errors import GradregError
from gradreg.model import dtypes
from gradreg_plugins.nn import family

api = family.api_function

_HALF = (dtypes.float16, dtypes.bfloat16)


# -- helpers ----------------------------------------------------------------------------------

def _get_sequence(value, n: int, channel_index: int, name: str) -> list[int]:
    """TensorFlow's _get_sequence: an int or a list of 1, n or n + 2 ints as a full per-dimension
    list (1 for batch and channels)."""
    if value is None:
        value = [1]
    elif not isinstance(value, Sequence):
        value = [value]
    value = [int(v) for v in value]
    if len(value) == n + 2:
        return value
    if len(value) == 1:
        value = value * n
    elif len(value) != n:
        raise GradregError(f"{name} should be of length 1, {n} or {n + 2} but was {len(value)}")
    return [1, 1] + value if channel_index == 1 else [1] + value + [1]


def _convert_padding(padding, expected_length: int = 4) -> tuple[str, list[int]]:
    """A padding string, or explicit per-dimension [before, after] pairs as EXPLICIT padding."""
    if isinstance(padding, str) and padding.upper() == "EXPLICIT":
        raise GradregError("'EXPLICIT' is not a valid value for padding: to use explicit padding, "
                           "padding must be a list of [before, after] pairs")
    if not isinstance(padding, (list, tuple)):
        return padding, []
    if len(padding) != expected_length:
        raise GradregError(f"when padding is a list, it must have length {expected_length}, got {len(padding)}")
    explicit: list[int] = []
    for i, pair in enumerate(padding):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise GradregError(f"padding[{i}] must be a [before, after] pair, got {pair!r}")
        explicit.extend(int(p) for p in pair)
    return "EXPLICIT", explicit


def _channel_index(data_format: str) -> int:
    return 1 if data_format.startswith("NC") else 3


def _cast(x, dtype):
    return api_function("cast")(x, dtype)


def _static_rank(x, what: str) -> int:
    rank = x.shape.rank
    if rank is None:
        raise GradregError(f"{what}: the rank of {x.name} must be known statically")
    return rank


def _normalize_axis(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise GradregError(f"{what}: axis {axis} is out of range for a tensor of rank {rank}")
    return axis % rank


def _flatten_outer_dims(x, rank: int):
    """``x`` reshaped to [-1, last dim] (TensorFlow's _flatten_outer_dims)."""
    last = x.shape[-1]
    if last is None:
        last = apply_op("Slice", apply_op("Shape", x), [rank - 1], [1])
        target = apply_op("ConcatV2", [[-1], last], 0)
    else:
        target = [-1, last]
    return apply_op("Reshape", x, target)


def _leading_shape(x, rank: int):
    """The shape of ``x`` without its last dimension, as a constant when it is known."""
    leading = x.shape[:-1]
    if leading.is_fully_defined():
        return np.array(leading.as_list(), np.int32)
    return apply_op("Slice", apply_op("Shape", x), [0], [rank - 1])


# -- activations and softmax --------------------------------------------------------------------

@api("leaky_relu")
def leaky_relu(features, alpha=0.2, name=None):
    """tf.nn.leaky_relu: LeakyRelu (integer features are cast to float32 first)."""
    with op_scope(name, "LeakyRelu", (features,)) as name:
        features = convert_to_tensor(features, name="features")
        if features.dtype.is_integer:
            features = _cast(features, dtypes.float32)
        if isinstance(alpha, np.ndarray):
            alpha = alpha.item()
        return apply_op("LeakyRelu", features, alpha=float(alpha), name=name)


def _softmax_like(op_type: str, logits, axis, name):
    """``op_type`` (which works on the last axis) over ``axis``: TensorFlow swaps ``axis`` with
    the last dimension, applies the op and swaps back (the result is named ``transpose`` unless
    named, as TensorFlow's; gradreg's permutation is a Const)."""
    logits = convert_to_tensor(logits)
    axis = -1 if axis is None else int(axis)
    rank = logits.shape.rank
    if axis == -1 or (rank is not None and axis == rank - 1):
        return apply_op(op_type, logits, name=name)
    rank = _static_rank(logits, op_type)
    axis = _normalize_axis(axis, rank, op_type)
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    transpose = api_function("transpose")
    swapped = apply_op(op_type, transpose(logits, perm))
    out = transpose(swapped, perm, name=name)
    out.set_shape(logits.shape)
    return out


@api("softmax")
def softmax(logits, axis=None, name=None):
    """tf.nn.softmax: Softmax over ``axis`` (default: the last)."""
    return _softmax_like("Softmax", logits, axis, name)


@api("log_softmax")
def log_softmax(logits, axis=None, name=None):
    """tf.nn.log_softmax: LogSoftmax over ``axis`` (default: the last)."""
    return _softmax_like("LogSoftmax", logits, axis, name)


# -- cross entropies ----------------------------------------------------------------------

@api("softmax_cross_entropy_with_logits")
def softmax_cross_entropy_with_logits(labels, logits, axis=-1, name=None):
    """tf.nn.softmax_cross_entropy_with_logits (v2): the per-example loss only. Classes lie
    along ``axis``; other ranks than 2 are flattened to a matrix and the loss reshaped back.
    Half-precision logits are computed in float32, as TensorFlow does. The nodes go in the scope
    ``softmax_cross_entropy_with_logits`` whose name the SoftmaxCrossEntropyWithLogits node takes
    (TensorFlow reshapes its result even for matrices; gradreg only for other ranks)."""
    with op_scope(name, "softmax_cross_entropy_with_logits", (logits, labels)) as name:
        logits = convert_to_tensor(logits, name="logits")
        labels = convert_to_tensor(labels, name="labels")
        return _softmax_cross_entropy(labels, logits, axis, name)


def _softmax_cross_entropy(labels, logits, axis, name):
    precise = _cast(logits, dtypes.float32) if logits.dtype.base_dtype in _HALF else logits
    labels = _cast(labels, precise.dtype.base_dtype)
    rank = _static_rank(logits, "softmax_cross_entropy_with_logits")
    static = logits.shape.as_list()
    if rank == 0:
        raise GradregError("softmax_cross_entropy_with_logits: logits must have at least one dimension")
    axis = _normalize_axis(axis, rank, "softmax_cross_entropy_with_logits")
    if axis != rank - 1:   # move the class axis to the end
        perm = [i for i in range(rank) if i != axis] + [axis]
        precise, labels = apply_op("Transpose", precise, perm), apply_op("Transpose", labels, perm)
    if rank == 2:
        cost, _ = apply_op("SoftmaxCrossEntropyWithLogits", precise, labels, name=name)
    else:
        flat_logits, flat_labels = _flatten_outer_dims(precise, rank), _flatten_outer_dims(labels, rank)
        cost, _ = apply_op("SoftmaxCrossEntropyWithLogits", flat_logits, flat_labels, name=name)
        cost = apply_op("Reshape", cost, _leading_shape(precise, rank))
        del static[axis]
        cost.set_shape(static)
    return _cast(cost, logits.dtype.base_dtype)


@api("sparse_softmax_cross_entropy_with_logits")
def sparse_softmax_cross_entropy_with_logits(labels, logits, name=None):
    """tf.nn.sparse_softmax_cross_entropy_with_logits: the per-example loss for integer class
    ``labels`` of shape logits.shape[:-1]. As TensorFlow's, the nodes go in the scope ``name``
    (default SparseSoftmaxCrossEntropyWithLogits) and the op inside it is named ``name`` too."""
    with op_scope(name, "SparseSoftmaxCrossEntropyWithLogits", (labels, logits)):
        labels = convert_to_tensor(labels)
        logits = convert_to_tensor(logits)
        return _sparse_softmax_cross_entropy(labels, logits, name)


def _sparse_softmax_cross_entropy(labels, logits, name):
    precise = _cast(logits, dtypes.float32) if logits.dtype.base_dtype in _HALF else logits
    labels_shape, logits_shape = labels.shape, logits.shape
    if labels_shape.rank == 0:
        raise GradregError(f"Logits cannot be scalars - received shape {logits_shape}")
    if labels_shape.rank is not None and logits_shape.rank is not None:
        if labels_shape.rank != logits_shape.rank - 1:
            raise GradregError(f"Rank mismatch: Rank of labels (received {labels_shape.rank}) should equal rank "
                               f"of logits minus 1 (received {logits_shape.rank})")
        if not labels_shape.is_compatible_with(logits_shape[:-1]):
            raise GradregError(f"Shape mismatch: The shape of labels (received {labels_shape}) should equal the "
                               f"shape of logits except for the last dimension (received {logits_shape})")
    if logits_shape.rank == 2:
        cost, _ = apply_op("SparseSoftmaxCrossEntropyWithLogits", precise, labels, name=name)
    else:
        rank = _static_rank(logits, "sparse_softmax_cross_entropy_with_logits")
        cost, _ = apply_op("SparseSoftmaxCrossEntropyWithLogits", _flatten_outer_dims(precise, rank),
                           apply_op("Reshape", labels, [-1]))
        target = (np.array(labels_shape.as_list(), np.int32) if labels_shape.is_fully_defined()
                  else apply_op("Shape", labels))
        cost = apply_op("Reshape", cost, target)
        cost.set_shape(labels_shape)
    return _cast(cost, logits.dtype.base_dtype)


@api("sigmoid_cross_entropy_with_logits")
def sigmoid_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """tf.nn.sigmoid_cross_entropy_with_logits: max(x, 0) - x * z + log(1 + exp(-|x|)), built
    from the same elementwise ops as TensorFlow."""
    if labels is None or logits is None:
        raise GradregError("sigmoid_cross_entropy_with_logits needs both labels and logits")
    with op_scope(name, "logistic_loss", (logits, labels)) as name:
        logits = convert_to_tensor(logits, name="logits")
        labels = convert_to_tensor(labels, dtype=logits.dtype.base_dtype, name="labels")
        if not labels.shape.is_compatible_with(logits.shape):
            raise GradregError(f"logits and labels must have the same shape, received ({logits.shape} vs "
                               f"{labels.shape})")
        zeros = api_function("zeros_like")(logits)
        cond = logits >= zeros
        relu_logits = apply_op("Select", cond, logits, zeros)
        neg_abs_logits = apply_op("Select", cond, -logits, logits)
        return api_function("add")(relu_logits - logits * labels, apply_op("Log1p", apply_op("Exp", neg_abs_logits)),
                                   name=name)


# -- bias, convolution, pooling ---------------------------------------------------------------

@api("bias_add")
def bias_add(value, bias, data_format=None, name=None):
    """tf.nn.bias_add: BiasAdd; ``data_format`` "N...C" adds along the last axis, "NC..." along axis 1."""
    if data_format is None:
        data_format = "NHWC"
    elif data_format.startswith("NC"):
        data_format = "NCHW"
    elif data_format.startswith("N") and data_format.endswith("C"):
        data_format = "NHWC"
    else:
        raise GradregError(f"data_format must be of the form `N...C` or `NC...`, got {data_format!r}")
    with op_scope(name, "BiasAdd", (value, bias)) as name:
        value = convert_to_tensor(value, name="input")
        bias = convert_to_tensor(bias, dtype=value.dtype.base_dtype, name="bias")
        return apply_op("BiasAdd", value, bias, data_format=data_format, name=name)


@api("conv2d")
def conv2d(input, filters, strides, padding, data_format="NHWC", dilations=None, name=None):  # noqa: A002  (TensorFlow's argument name)
    """tf.nn.conv2d: Conv2D. ``strides``/``dilations``: an int or 1, 2 or 4 ints; ``padding``:
    "SAME", "VALID" or explicit [before, after] pairs for the 4 dimensions."""
    channel = _channel_index(data_format)
    padding, explicit = _convert_padding(padding)
    return apply_op("Conv2D", input, filters, strides=_get_sequence(strides, 2, channel, "strides"),
                    padding=padding, explicit_paddings=explicit, data_format=data_format,
                    dilations=_get_sequence(dilations, 2, channel, "dilations"), name=name)


@api("conv2d_transpose")
def conv2d_transpose(input, filters, output_shape, strides, padding="SAME", data_format="NHWC",  # noqa: A002  (TensorFlow's argument name)
                     dilations=None, name=None):
    """tf.nn.conv2d_transpose: Conv2DBackpropInput producing ``output_shape``."""
    channel = _channel_index(data_format)
    padding, explicit = _convert_padding(padding)
    with op_scope(name, "conv2d_transpose", (input, filters, output_shape)) as name:
        return apply_op("Conv2DBackpropInput", output_shape, filters, input,
                        strides=_get_sequence(strides, 2, channel, "strides"), padding=padding,
                        explicit_paddings=explicit, data_format=data_format,
                        dilations=_get_sequence(dilations, 2, channel, "dilations"), name=name)


def _pool(op_type: str, scope: str, input, ksize, strides, padding, data_format, name,  # noqa: A002  (TensorFlow's argument name)
          explicit_ok: bool):
    """A pooling op in the scope ``scope`` (TensorFlow's Python function's), named after it."""
    if data_format is None:
        data_format = "NHWC"
    if isinstance(padding, (list, tuple)) and not explicit_ok:
        raise GradregError(f"{op_type} does not support explicit padding")
    channel = _channel_index(data_format)
    padding, explicit = _convert_padding(padding)
    attrs = {"explicit_paddings": explicit} if explicit_ok else {}
    with op_scope(name, scope, (input,)) as name:
        return apply_op(op_type, input, ksize=_get_sequence(ksize, 2, channel, "ksize"),
                        strides=_get_sequence(strides, 2, channel, "strides"), padding=padding,
                        data_format=data_format, name=name, **attrs)


def _check_pool_rank(input, data_format, what: str):  # noqa: A002  (TensorFlow's argument name)
    """tf.nn.max_pool/avg_pool dispatch on the input's rank; gradreg has the 2-D ops only."""
    input = convert_to_tensor(input)
    rank = input.shape.rank
    spatial = rank - 2 if rank is not None else (len(data_format) - 2 if data_format else None)
    if spatial is None:
        raise GradregError(f"{what}: input must have a static rank or a data format must be given")
    if spatial != 2:
        raise GradregError(f"{what}: only 2-D pooling (4-D inputs) is supported, got {spatial} spatial dimensions")
    return input


@api("max_pool2d")
def max_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):  # noqa: A002  (TensorFlow's argument name)
    """tf.nn.max_pool2d: MaxPool. ``padding`` may be explicit [before, after] pairs."""
    return _pool("MaxPool", "MaxPool2d", input, ksize, strides, padding, data_format, name, explicit_ok=True)


@api("max_pool")
def max_pool(input, ksize, strides, padding, data_format=None, name=None):  # noqa: A002  (TensorFlow's argument name)
    """tf.nn.max_pool for 4-D inputs (MaxPool)."""
    input = _check_pool_rank(input, data_format, "max_pool")
    return _pool("MaxPool", "MaxPool", input, ksize, strides, padding, data_format, name, explicit_ok=True)


@api("avg_pool2d")
def avg_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):  # noqa: A002  (TensorFlow's argument name)
    """tf.nn.avg_pool2d: AvgPool (SAME windows average only the positions inside the input)."""
    return _pool("AvgPool", "AvgPool2D", input, ksize, strides, padding, data_format, name, explicit_ok=False)


@api("avg_pool")
def avg_pool(input, ksize, strides, padding, data_format=None, name=None):  # noqa: A002  (TensorFlow's argument name)
    """tf.nn.avg_pool for 4-D inputs (AvgPool)."""
    input = _check_pool_rank(input, data_format, "avg_pool")
    return _pool("AvgPool", "AvgPool", input, ksize, strides, padding, data_format, name, explicit_ok=False)


# -- metrics and normalization -----------------------------------------------------------------

@api("in_top_k")
def in_top_k(targets, predictions, k, name=None):
    """tf.math.in_top_k / tf.nn.in_top_k (v2 argument order): InTopKV2, in the scope ``name``
    (default in_top_k) and named ``name`` inside it, as TensorFlow's."""
    with op_scope(name, "in_top_k", (predictions, targets)):
        return apply_op("InTopKV2", predictions, targets, k, name=name)


@api("fused_batch_norm")
def fused_batch_norm(x, scale, offset, mean=None, variance=None, epsilon=0.001, data_format="NHWC",
                     is_training=True, name=None, exponential_avg_factor=1.0):
    """tf.compat.v1.nn.fused_batch_norm: FusedBatchNormV3, returning (y, mean, variance)."""
    if (not is_training or exponential_avg_factor != 1.0) and (mean is None or variance is None):
        raise GradregError("Both mean and variance must be a 1D tensor when is_training is False or "
                           "exponential_avg_factor != 1.0")
    mean = np.zeros(0, np.float32) if mean is None else mean
    variance = np.zeros(0, np.float32) if variance is None else variance
    y, batch_mean, batch_variance, _, _, _ = apply_op(
        "FusedBatchNormV3", x, scale, offset, mean, variance, epsilon=float(epsilon),
        exponential_avg_factor=float(exponential_avg_factor), data_format=data_format,
        is_training=bool(is_training), name=name)
    return y, batch_mean, batch_variance
