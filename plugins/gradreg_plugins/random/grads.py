"""Gradient rules of the random ops, as TensorFlow registers them: the samplers are
NotDifferentiable (a gradient reaching them stops there), except the gamma samplers, which are
differentiable in alpha (implicit reparameterization: RandomGammaGrad(alpha, sample), the
derivative of a sample holding its CDF fixed, summed over the sample dims), and the
parameterized truncated normal sampler, differentiable in its four parameters the same way.
TensorFlow registers nothing for StatelessRandomGetKeyCounter, StatelessRandomGetKeyCounterAlg,
StatelessRandomGetAlg and RandomUniformInt, and neither does gradreg: their outputs are
integers, so no gradient reaches them unless a caller feeds one."""
from __future__ import annotations

import numpy as np

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op, constant
from gradreg.model.graph import Tensor
from gradreg_plugins.random import family

family.not_differentiable(
    "StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal",
    "StatelessRandomUniformInt", "StatelessRandomUniformFullInt",
    "StatelessRandomUniformV2", "StatelessRandomNormalV2", "StatelessTruncatedNormalV2",
    "StatelessRandomUniformIntV2", "StatelessRandomUniformFullIntV2", "StatelessMultinomial",
    "RandomUniform", "RandomStandardNormal", "TruncatedNormal",
)


def _alpha_grad(alpha: Tensor, sample: Tensor, grad: Tensor, sample_dims) -> Tensor:
    """sum over the leading ``sample_dims`` of grad * RandomGammaGrad(alpha, sample), alpha
    broadcast against the samples (sample_dims: an int when static, else a scalar tensor)."""
    if isinstance(sample_dims, int):
        if alpha.shape.is_fully_defined():
            target = rules.ints([1] * sample_dims + alpha.shape.as_list())
        else:
            target = apply_op("ConcatV2", [rules.ints([1] * sample_dims), apply_op("Shape", alpha)], rules.ints(0))
        axes = rules.ints(list(range(sample_dims)))
    else:
        ones = apply_op("Fill", apply_op("Reshape", sample_dims, rules.ints([1])), rules.ints(1))
        target = apply_op("ConcatV2", [ones, apply_op("Shape", alpha)], rules.ints(0))
        axes = apply_op("Range", rules.ints(0), sample_dims, rules.ints(1))
    partial = apply_op("RandomGammaGrad", apply_op("Reshape", alpha, target), sample)
    return apply_op("Sum", grad * partial, axes)


def _sample_dims(shape: Tensor, minus: Tensor | int = 0):
    """The length of the shape input (less ``minus``): an int when static, else a tensor."""
    length = shape.shape.as_list()[0] if shape.shape.rank == 1 else None
    if length is not None and isinstance(minus, int):
        return length - minus
    count = apply_op("Size", shape)
    return count if isinstance(minus, int) and minus == 0 else count - minus


@family.gradient("RandomGamma")
def _random_gamma_grad(op, grad):
    """The samples have the shape input's dims followed by alpha's."""
    shape, alpha = op.inputs
    return None, _alpha_grad(alpha, op.outputs[0], rules.dense(grad), _sample_dims(shape))


def _stateless_gamma_grad(op, grad, shape: Tensor, alpha: Tensor):
    """The samples' shape ends with alpha's: the leading dims are sample dims."""
    rank = alpha.shape.rank
    minus = rank if rank is not None else apply_op("Rank", alpha)
    return _alpha_grad(alpha, op.outputs[0], rules.dense(grad), _sample_dims(shape, minus))


@family.gradient("StatelessRandomGammaV2")
def _stateless_random_gamma_v2_grad(op, grad):
    shape, _, alpha = op.inputs
    return None, None, _stateless_gamma_grad(op, grad, shape, alpha)


@family.gradient("StatelessRandomGammaV3")
def _stateless_random_gamma_v3_grad(op, grad):
    shape, _, _, _, alpha = op.inputs
    return None, None, None, None, _stateless_gamma_grad(op, grad, shape, alpha)


# -- StatelessParameterizedTruncatedNormal ---------------------------------------------------------

def _ndtr(x: Tensor) -> Tensor:
    """The standard normal CDF as TensorFlow's rule writes it: from erf near 0, erfc in the tails."""
    half_sqrt_2 = constant(0.5 * np.sqrt(2.0), x.known_dtype)
    w = x * half_sqrt_2
    z = apply_op("Abs", w)
    tails = apply_op("SelectV2", apply_op("Greater", w, constant(0.0, x.known_dtype)), 2.0 - apply_op("Erfc", z),
                     apply_op("Erfc", z))
    return 0.5 * apply_op("SelectV2", apply_op("Less", z, half_sqrt_2), 1.0 + apply_op("Erf", w), tails)


def _summed_to(grad: Tensor, extra_dims: Tensor, broadcast_shape: Tensor, param: Tensor) -> Tensor:
    """``grad`` (the samples' shape) summed over the sample dims, then over the dims ``param``
    was broadcast along, in ``param``'s shape."""
    per_batch = apply_op("Sum", grad, extra_dims)
    shape = apply_op("Shape", param)
    _, axes = apply_op("BroadcastGradientArgs", broadcast_shape, shape)
    return apply_op("Reshape", apply_op("Sum", per_batch, axes, keep_dims=True), shape)


@family.gradient("StatelessParameterizedTruncatedNormal")
def _stateless_parameterized_truncated_normal_grad(op, grad):
    """Implicit reparameterization (TensorFlow's rule): with s the standardized sample, d/dmean = 1,
    d/dstddev = s, and the bounds' derivatives from the truncated CDF c of s, clipped to
    [tiny, 1 - eps]: d/dmaxval = exp((s^2 - hi^2) / 2) c, d/dminval = exp((s^2 - lo^2) / 2) (1 - c)."""
    shape, _, mean, stddev, minval, maxval = op.inputs
    grad = rules.dense(grad)
    dtype = mean.known_dtype
    info = np.finfo(dtype.storage)
    lo, hi, sample = (minval - mean) / stddev, (maxval - mean) / stddev, (op.outputs[0] - mean) / stddev
    cdf = (_ndtr(sample) - _ndtr(lo)) / (_ndtr(hi) - _ndtr(lo))
    cdf = apply_op("Maximum", apply_op("Minimum", cdf, constant(1 - info.eps, dtype)), constant(info.tiny, dtype))
    squared = sample * sample
    dmaxval = apply_op("Exp", 0.5 * (squared - hi * hi) + apply_op("Log", cdf))
    dminval = apply_op("Exp", 0.5 * (squared - lo * lo) + apply_op("Log1p", -cdf))
    broadcast_shape = apply_op("Shape", mean)
    for param in (stddev, minval, maxval):
        broadcast_shape = apply_op("BroadcastArgs", apply_op("Shape", param), broadcast_shape)
    extra = apply_op("Size", shape) - apply_op("Size", broadcast_shape)
    extra_dims = apply_op("Range", rules.ints(0), extra, rules.ints(1))
    return (None, None, _summed_to(grad, extra_dims, broadcast_shape, mean),
            _summed_to(grad * sample, extra_dims, broadcast_shape, stddev),
            _summed_to(grad * dminval, extra_dims, broadcast_shape, minval),
            _summed_to(grad * dmaxval, extra_dims, broadcast_shape, maxval))
