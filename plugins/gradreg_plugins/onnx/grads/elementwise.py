"""Gradients of the elementwise ops: arithmetic (broadcasting inputs get their gradient summed
back by reduce_to), the unary functions and activations (y = f(x): dx = g f'(x)), selection
(Where, Max, Min, Clip) and casts."""
from __future__ import annotations

import numpy as np

from gradreg.model.shape_inference import constant_value
from gradreg_plugins.onnx import family
from gradreg_plugins.onnx.grads.common import (
    axis_of,
    const_like,
    fail,
    ints,
    is_float,
    neg,
    onnx_op,
    per_input,
    reduce_to,
    static_dims,
    static_rank,
    through,
)
from gradreg_plugins.onnx.nodes import onnx_inputs


def _mul(*factors):
    out = factors[0]
    for f in factors[1:]:
        out = onnx_op("Mul", out, f)
    return out


def _where(cond, a, b):
    return onnx_op("Where", cond, a, b)


# -- arithmetic ----------------------------------------------------------------------------------------

@family.gradient("onnx::Add")
def _add_grad(op, g):
    a, b = op.inputs
    return per_input(op, (reduce_to(g, a), reduce_to(g, b)))


@family.gradient("onnx::Sub")
def _sub_grad(op, g):
    a, b = op.inputs
    return per_input(op, (reduce_to(g, a), reduce_to(neg(g), b)))


@family.gradient("onnx::Mul")
def _mul_grad(op, g):
    a, b = op.inputs
    return per_input(op, (reduce_to(onnx_op("Mul", g, b), a), reduce_to(onnx_op("Mul", g, a), b)))


@family.gradient("onnx::Div")
def _div_grad(op, g):
    a, b = op.inputs
    da = onnx_op("Div", g, b)
    db = neg(onnx_op("Mul", da, onnx_op("Div", a, b)))      # -g a / b^2
    return per_input(op, (reduce_to(da, a), reduce_to(db, b)))


@family.gradient("onnx::Neg")
def _neg_grad(op, g):
    return per_input(op, neg(g))


@family.gradient("onnx::Identity")
def _identity_grad(op, g):
    return per_input(op, g)


@family.gradient("onnx::Sum")
def _sum_grad(op, g):
    return per_input(op, tuple(reduce_to(g, x) for x in op.inputs))


@family.gradient("onnx::Mean")
def _mean_grad(op, g):
    share = onnx_op("Div", g, const_like(float(len(op.inputs)), g))
    return per_input(op, tuple(reduce_to(share, x) for x in op.inputs))


@family.gradient("onnx::Pow")
def _pow_grad(op, g):
    x, p = op.inputs
    y = op.outputs[0]
    p_as_x = p if p.dtype is x.dtype else onnx_op("Cast", p, to=x.dtype)
    dx = _mul(g, p_as_x, onnx_op("Pow", x, onnx_op("Sub", p_as_x, const_like(1, p_as_x))))
    dp = None
    if is_float(p):
        # d/dp x^p = x^p log x, for x > 0 (taken as 0 elsewhere, where x^p is not differentiable in p)
        safe = _where(onnx_op("Greater", x, const_like(0, x)), x, const_like(1, x))
        dp = reduce_to(onnx_op("Cast", _mul(g, y, onnx_op("Log", safe)), to=p.dtype), p)
    return per_input(op, (reduce_to(dx, x), dp))


@family.gradient("onnx::Mod")
def _mod_grad(op, g):
    """Floating Mod is fmod: y = a - trunc(a / b) b, so da = g and db = -g trunc(a / b)."""
    a, b = op.inputs
    if not is_float(a):
        return per_input(op, (None, None))
    ratio = onnx_op("Div", a, b)
    trunc = onnx_op("Mul", onnx_op("Sign", ratio), onnx_op("Floor", onnx_op("Abs", ratio)))
    return per_input(op, (reduce_to(g, a), reduce_to(neg(onnx_op("Mul", g, trunc)), b)))


def _shares_of_extremum(op, g):
    """Max/Min: the gradient goes to the inputs equal to the output, split evenly among ties."""
    y = op.outputs[0]
    masks = [onnx_op("Cast", onnx_op("Equal", x, y), to=g.dtype) for x in op.inputs]
    count = masks[0] if len(masks) == 1 else onnx_op("Sum", *masks)
    share = onnx_op("Div", g, count)
    return per_input(op, tuple(reduce_to(onnx_op("Mul", share, m), x) for m, x in zip(masks, op.inputs)))


family.gradient("onnx::Max")(_shares_of_extremum)
family.gradient("onnx::Min")(_shares_of_extremum)


# -- unary functions -----------------------------------------------------------------------------------

def _unary(op_type: str, derivative):
    """Register dx = g * derivative(x, y) for y = op(x)."""
    def rule(op, g, *unused):
        return per_input(op, onnx_op("Mul", g, derivative(op.inputs[0], op.outputs[0], op)))
    rule.__name__ = f"_{op_type.lower()}_grad"
    family.gradient(f"onnx::{op_type}")(rule)


def _one(x):
    return const_like(1, x)


def _sqrt_of(x):
    return onnx_op("Sqrt", x)


def _square(x):
    return onnx_op("Mul", x, x)


_unary("Exp", lambda x, y, op: y)
_unary("Log", lambda x, y, op: onnx_op("Reciprocal", x))
_unary("Sqrt", lambda x, y, op: onnx_op("Div", const_like(0.5, y), y))
_unary("Reciprocal", lambda x, y, op: neg(_square(y)))
_unary("Abs", lambda x, y, op: onnx_op("Sign", x))
_unary("Sin", lambda x, y, op: onnx_op("Cos", x))
_unary("Cos", lambda x, y, op: neg(onnx_op("Sin", x)))
_unary("Tan", lambda x, y, op: onnx_op("Add", _one(y), _square(y)))
_unary("Asin", lambda x, y, op: onnx_op("Reciprocal", _sqrt_of(onnx_op("Sub", _one(x), _square(x)))))
_unary("Acos", lambda x, y, op: neg(onnx_op("Reciprocal", _sqrt_of(onnx_op("Sub", _one(x), _square(x))))))
_unary("Atan", lambda x, y, op: onnx_op("Reciprocal", onnx_op("Add", _one(x), _square(x))))
_unary("Sinh", lambda x, y, op: onnx_op("Cosh", x))
_unary("Cosh", lambda x, y, op: onnx_op("Sinh", x))
_unary("Tanh", lambda x, y, op: onnx_op("Sub", _one(y), _square(y)))
_unary("Asinh", lambda x, y, op: onnx_op("Reciprocal", _sqrt_of(onnx_op("Add", _square(x), _one(x)))))
_unary("Acosh", lambda x, y, op: onnx_op("Reciprocal", _sqrt_of(onnx_op("Sub", _square(x), _one(x)))))
_unary("Atanh", lambda x, y, op: onnx_op("Reciprocal", onnx_op("Sub", _one(x), _square(x))))
_unary("Sigmoid", lambda x, y, op: onnx_op("Mul", y, onnx_op("Sub", _one(y), y)))
_unary("Erf", lambda x, y, op: onnx_op("Mul", const_like(2 / np.sqrt(np.pi), x), onnx_op("Exp", neg(_square(x)))))
_unary("Softplus", lambda x, y, op: onnx_op("Sigmoid", x))
_unary("Softsign", lambda x, y, op: onnx_op("Reciprocal", _square(onnx_op("Add", _one(x), onnx_op("Abs", x)))))


def _positive(x):
    return onnx_op("Greater", x, const_like(0, x))


# -- activations ---------------------------------------------------------------------------------------

@family.gradient("onnx::Relu")
def _relu_grad(op, g):
    return per_input(op, _where(_positive(op.inputs[0]), g, const_like(0, g)))


@family.gradient("onnx::LeakyRelu")
def _leaky_relu_grad(op, g):
    x = op.inputs[0]
    return per_input(op, _where(_positive(x), g, onnx_op("Mul", g, const_like(op.get_attr("alpha"), g))))


@family.gradient("onnx::Elu")
def _elu_grad(op, g):
    """y = alpha (exp(x) - 1) for x < 0: dy/dx = y + alpha there, 1 elsewhere."""
    x, y = op.inputs[0], op.outputs[0]
    below = onnx_op("Less", x, const_like(0, x))
    return per_input(op, _where(below, onnx_op("Mul", g, onnx_op("Add", y, const_like(op.get_attr("alpha"), y))), g))


@family.gradient("onnx::Selu")
def _selu_grad(op, g):
    """y = gamma alpha (exp(x) - 1) for x <= 0, gamma x above."""
    x, y = op.inputs[0], op.outputs[0]
    alpha, gamma = op.get_attr("alpha"), op.get_attr("gamma")
    below = onnx_op("Not", _positive(x))
    return per_input(op, (_where(below, onnx_op("Mul", g, onnx_op("Add", y, const_like(alpha * gamma, y))),
                   onnx_op("Mul", g, const_like(gamma, g))),))


@family.gradient("onnx::Celu")
def _celu_grad(op, g):
    """y = max(0, x) + min(0, alpha (exp(x / alpha) - 1)): exp(x / alpha) below 0, 1 above."""
    x = op.inputs[0]
    alpha = op.get_attr("alpha")
    slope = onnx_op("Exp", onnx_op("Div", x, const_like(alpha, x)))
    return per_input(op, _where(onnx_op("Less", x, const_like(0, x)), onnx_op("Mul", g, slope), g))


@family.gradient("onnx::ThresholdedRelu")
def _thresholded_relu_grad(op, g):
    x = op.inputs[0]
    return per_input(op, _where(onnx_op("Greater", x, const_like(op.get_attr("alpha"), x)), g, const_like(0, g)))


@family.gradient("onnx::Shrink")
def _shrink_grad(op, g):
    """Passes where |x| > lambd (y = x -+ bias there), zero in between."""
    x = op.inputs[0]
    lambd = op.get_attr("lambd")
    outside = onnx_op("Or", onnx_op("Less", x, const_like(-lambd, x)), onnx_op("Greater", x, const_like(lambd, x)))
    return per_input(op, _where(outside, g, const_like(0, g)))


@family.gradient("onnx::HardSigmoid")
def _hard_sigmoid_grad(op, g):
    x = op.inputs[0]
    alpha, beta = op.get_attr("alpha"), op.get_attr("beta")
    return per_input(op, _hard_sigmoid_slope(x, g, alpha, beta))


def _hard_sigmoid_slope(x, g, alpha: float, beta: float):
    """g alpha where 0 < alpha x + beta < 1, else 0."""
    z = onnx_op("Add", onnx_op("Mul", x, const_like(alpha, x)), const_like(beta, x))
    inside = onnx_op("And", onnx_op("Greater", z, const_like(0, z)), onnx_op("Less", z, const_like(1, z)))
    return _where(inside, onnx_op("Mul", g, const_like(alpha, g)), const_like(0, g))


@family.gradient("onnx::HardSwish")
def _hard_swish_grad(op, g):
    """y = x hs(x), hs = HardSigmoid(alpha 1/6, beta 0.5): dy = hs(x) + x hs'(x)."""
    x = op.inputs[0]
    hs = onnx_op("HardSigmoid", x, alpha=1 / 6, beta=0.5)
    dx = onnx_op("Add", onnx_op("Mul", g, hs), _hard_sigmoid_slope(x, onnx_op("Mul", g, x), 1 / 6, 0.5))
    return per_input(op, dx)


@family.gradient("onnx::Swish")
def _swish_grad(op, g):
    """y = x s(a x): dy = s + a x s (1 - s)."""
    x = op.inputs[0]
    alpha = op.get_attr("alpha")
    s = onnx_op("Sigmoid", onnx_op("Mul", x, const_like(alpha, x)))
    slope = onnx_op("Add", s, _mul(const_like(alpha, x), x, s, onnx_op("Sub", _one(s), s)))
    return per_input(op, onnx_op("Mul", g, slope))


@family.gradient("onnx::Mish")
def _mish_grad(op, g):
    """y = x tanh(softplus(x)): dy = t + x (1 - t^2) sigmoid(x)."""
    x = op.inputs[0]
    t = onnx_op("Tanh", onnx_op("Softplus", x))
    slope = onnx_op("Add", t, _mul(x, onnx_op("Sub", _one(t), _square(t)), onnx_op("Sigmoid", x)))
    return per_input(op, onnx_op("Mul", g, slope))


@family.gradient("onnx::PRelu")
def _prelu_grad(op, g):
    x, slope = op.inputs
    below = onnx_op("Less", x, const_like(0, x))
    zero = const_like(0, g)
    dx = _where(below, onnx_op("Mul", g, slope), g)
    dslope = _where(below, onnx_op("Mul", g, x), zero)
    return per_input(op, (reduce_to(dx, x), reduce_to(dslope, slope)))


@family.gradient("onnx::Gelu")
def _gelu_grad(op, g):
    """Gelu(x) = x Phi(x): Phi + x phi = (1 + erf(u) + x sqrt(2 / pi) exp(-u^2)) / 2 with u = x / sqrt 2.
    The tanh form is x s with s = sigmoid(v), v = 2 sqrt(2 / pi) (x + 0.044715 x^3): s (1 + x (1 - s) v')."""
    x = op.inputs[0]
    if op.get_attr("approximate") == b"tanh":
        c, k = 2 * np.sqrt(2 / np.pi), 0.044715
        x2 = _square(x)
        v = onnx_op("Mul", x, onnx_op("Add", onnx_op("Mul", x2, const_like(c * k, x)), const_like(c, x)))
        dv = onnx_op("Add", onnx_op("Mul", x2, const_like(3 * c * k, x)), const_like(c, x))
        s = onnx_op("Sigmoid", v)
        rest = _mul(x, onnx_op("Sub", _one(x), s), dv)
        return per_input(op, _mul(g, s, onnx_op("Add", rest, _one(x))))
    u = onnx_op("Mul", x, const_like(2 ** -0.5, x))
    # sqrt(2 / pi) exp(-u^2) as one Exp: exp(log(sqrt(2 / pi)) - u^2)
    density = onnx_op("Exp", onnx_op("Sub", const_like(0.5 * np.log(2 / np.pi), x), _square(u)))
    twice = onnx_op("Sum", _one(x), onnx_op("Erf", u), onnx_op("Mul", x, density))
    return per_input(op, onnx_op("Mul", onnx_op("Mul", g, const_like(0.5, g)), twice))


@family.gradient("onnx::Clip")
def _clip_grad(op, g):
    """y = min(max(x, low), high): x gets the gradient where it is strictly inside the bounds (as
    torch's clamp), a bound where the output is that bound."""
    x, low, high = (onnx_inputs(op) + [None, None])[:3]
    zero = const_like(0, g)
    dx, dlow, dhigh = g, None, None
    clipped_low = x
    if low is not None:
        clipped_low = onnx_op("Max", x, onnx_op("CastLike", low, x))
        dx = _where(onnx_op("Greater", x, low), g, zero)
        dlow = _where(onnx_op("Less", x, low), g, zero)
    if high is not None:
        below_high = onnx_op("Less", clipped_low, high)
        dx = _where(below_high, dx, zero)
        dlow = _where(below_high, dlow, zero) if dlow is not None else None
        dhigh = reduce_to(_where(onnx_op("Greater", clipped_low, high), g, zero), high)
    return per_input(op, (dx, (reduce_to(dlow, low) if dlow is not None else None), dhigh))


@family.gradient("onnx::Where")
def _where_grad(op, g):
    cond, a, b = op.inputs
    zero = const_like(0, g)
    return per_input(op, (None, reduce_to(_where(cond, g, zero), a), reduce_to(_where(cond, zero, g), b)))


@family.gradient("onnx::Cast")
def _cast_grad(op, g):
    x = op.inputs[0]
    if not is_float(x):
        return per_input(op, None)
    return per_input(op, onnx_op("Cast", g, to=x.dtype))


@family.gradient("onnx::CastLike")
def _cast_like_grad(op, g):
    x = op.inputs[0]
    return per_input(op, (onnx_op("CastLike", g, x) if is_float(x) else None, None))


@family.gradient("onnx::Dropout")
def _dropout_grad(op, g, *unused):
    """Inference mode (training_mode absent, or a constant false): the identity. In training mode
    the kept elements scale by 1 / (1 - ratio); the mask output says which were kept."""
    x, ratio, training = (onnx_inputs(op) + [None, None])[:3]
    if training is None or _is_constant_false(training):
        return per_input(op, g)
    if len(op.outputs) < 2:
        raise fail(op, "training-mode Dropout needs its mask output to be differentiated")
    mask = onnx_op("Cast", op.outputs[1], to=g.dtype)
    rate = onnx_op("CastLike", ratio, g) if ratio is not None else const_like(0.5, g)
    scale = onnx_op("Div", const_like(1, g), onnx_op("Sub", const_like(1, g), rate))
    # ratio 0 keeps everything unscaled; the mask is then all ones
    return per_input(op, _mul(g, mask, scale))


def _is_constant_false(t) -> bool:
    value = constant_value(t)
    return value is not None and not bool(np.asarray(value).reshape(-1)[0])


@family.gradient("onnx::DequantizeLinear")
def _dequantize_linear_grad(op, g):
    """y = (x - zero_point) scale: only the scale is differentiable (x and the zero point are
    integers); its gradient sums over the elements each scale value multiplies."""
    return per_input(op, through(op, [g], lambda x, scale, zero_point=None: _dequantized(op, g, x, scale, zero_point)))


def _dequantized(op, g, x, scale, zero_point):
    """DequantizeLinear's output recomputed from Cast, Sub and Mul (per tensor, per axis or blocked)."""
    values = onnx_op("Cast", x, to=g.dtype)
    if zero_point is not None:
        values = onnx_op("Sub", values, onnx_op("Cast", zero_point, to=g.dtype))
    factor = scale if scale.dtype is g.dtype else onnx_op("Cast", scale, to=g.dtype)
    if scale.shape.rank != 0:
        rank = static_rank(op, x)
        axis = axis_of(op, rank)
        block = int(op.get_attr("block_size") or 0)
        if block:
            dims = static_dims(op, x)
            per_block = list(dims)
            per_block[axis] = -(-dims[axis] // block)
            repeated = onnx_op("Expand", onnx_op("Unsqueeze", factor, ints([axis + 1], x, "axes")),
                               ints(per_block[:axis + 1] + [block] + per_block[axis + 1:], x, "blocked"))
            merged = per_block[:axis] + [per_block[axis] * block] + per_block[axis + 1:]
            factor = onnx_op("Slice", onnx_op("Reshape", repeated, ints(merged, x, "merged")),
                             ints([0], x, "start"), ints([dims[axis]], x, "end"), ints([axis], x, "axis"))
        elif scale.shape.rank == 1:
            factor = onnx_op("Reshape", factor, ints([-1] + [1] * (rank - 1 - axis), x, "per_axis"))
    return onnx_op("Mul", values, factor)


__all__: list[str] = []
