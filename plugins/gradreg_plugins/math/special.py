"""Special functions: definitions, kernels (scipy.special, computed in float64) and gradient
rules of Erfinv, Ndtri, the Bessel functions, Spence, Dawsn, Expint, the Fresnel integrals,
Igamma / Igammac (and the IgammaGradA they differentiate through), RandomGammaGrad, Betainc,
Zeta and Polygamma.

The rules are TensorFlow's formulas (math_grad.py), emitting the same op types, except where
TensorFlow gives no gradient although the function has one; gradreg's rules there, derived
here and checked against finite differences (tests/test_special_grads.py, the op sweep's
TENSORFLOW_WRONG entries):

* Betainc w.r.t. a and b (TensorFlow: None). With the series
  I_x(a, b) = x^a (1-x)^b / (a B(a, b)) sum_n c_n x^n, c_n = (a+b)_n / (a+1)_n,
  every term is a product of exponentials of lgamma differences, so its derivatives are digamma
  differences: d log c_n / da = psi(a+b+n) - psi(a+b) - psi(a+1+n) + psi(a+1), d/db =
  psi(a+b+n) - psi(a+b); the prefactor's are log x - 1/a - psi(a) + psi(a+b) and log(1-x) -
  psi(b) + psi(a+b). Where x > (a+1)/(a+b+2) the series is evaluated at the reflection
  I_x(a, b) = 1 - I_{1-x}(b, a), where its terms decrease from the start, so the partials swap
  and change sign. The sum runs over a tensor axis as long as the slowest element needs (the
  first of 8, 16, ..., 1024 terms whose tail bound is negligible; see _betainc_term_index), at
  most ``BETAINC_MAX_TERMS``: beyond that (a + b in the thousands with x at the reflection
  point) the derivative is truncated.
* Zeta w.r.t. x (TensorFlow: None): d/dx zeta(x, q) = -sum_k log(q+k) (q+k)^-x, from the
  Euler-Maclaurin formula with the first ``ZETA_TERMS`` terms summed and Bernoulli corrections
  at q + ZETA_TERMS, each term differentiated in x.
* BesselI1 at x = 0: 1/2 (I1(x) = x/2 + O(x^3)); TensorFlow imputes 1 there.
* Polygamma w.r.t. its order: None, as TensorFlow (the order is a whole number).

IgammaGradA and RandomGammaGrad, the ops these rules (and RandomGamma's) emit, have no gradient,
as in TensorFlow: differentiating them again is an error, not a silent zero.
"""
from __future__ import annotations

import numpy as np

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op, constant
from gradreg.model import shape_fns as sf
from gradreg.model.graph import Tensor
from gradreg_plugins._lazy import LazyModule
from gradreg_plugins.math import family
from gradreg_plugins.math import special_numerics as sn
from gradreg_plugins.math.kernels import binary, kernel
from gradreg_plugins.rule_helpers import dense_gradients, unbroadcast, unbroadcast_to

sc = LazyModule("scipy.special")

_FLOAT = "T: {bfloat16, float16, float32, float64}"

# op type -> its float64 function (TensorFlow's values where scipy's differ outside the domain).
UNARY = {
    "Erfinv": sc.erfinv, "Ndtri": sc.ndtri, "Dawsn": sc.dawsn, "Spence": sc.spence, "Expint": sn.expint,
    "FresnelCos": lambda x: sc.fresnel(x)[1], "FresnelSin": lambda x: sc.fresnel(x)[0],
    "BesselI0": sc.i0, "BesselI0e": sc.i0e, "BesselI1": sc.i1, "BesselI1e": sc.i1e,
    "BesselJ0": sc.j0, "BesselJ1": sc.j1, "BesselY0": sn.bessel_y0, "BesselY1": sn.bessel_y1,
    "BesselK0": sn.bessel_k0, "BesselK0e": sn.bessel_k0e, "BesselK1": sn.bessel_k1, "BesselK1e": sn.bessel_k1e,
}
BINARY = {   # op type -> (input names, function)
    "Igamma": (("a", "x"), sn.igamma, _FLOAT), "Igammac": (("a", "x"), sn.igammac, _FLOAT),
    "IgammaGradA": (("a", "x"), sn.igamma_grad_a, "T: {float32, float64}"),
    "RandomGammaGrad": (("alpha", "sample"), sn.random_gamma_grad, "T: {float32, float64}"),
    "Zeta": (("x", "q"), sn.zeta, "T: {float32, float64}"),
    "Polygamma": (("a", "x"), sn.polygamma, "T: {float32, float64}"),
}
BETAINC_MAX_TERMS = 1024
ZETA_TERMS = 10


def _in_float64(fn):
    """``fn`` computed in float64 and rounded to the inputs' type (bfloat16: see kernels.kernel)."""
    def compute(*args):
        with np.errstate(all="ignore"):
            out = fn(*(np.asarray(a, np.float64) for a in args))
        return np.asarray(out).astype(args[0].dtype, copy=False)
    return compute


for _name, _fn in UNARY.items():
    family.op(_name, inputs=["x: T"], outputs=["y: T"], attrs=[_FLOAT], shape=sf.unchanged)
    kernel(_name)(lambda op, ctx, fn=_fn: _in_float64(fn))
for _name, ((_first, _second), _fn, _types) in BINARY.items():
    family.op(_name, inputs=[f"{_first}: T", f"{_second}: T"], outputs=["z: T" if _name != "RandomGammaGrad"
                                                                       else "output: T"],
              attrs=[_types], shape=sf.broadcast_binary)
    binary(_name, _in_float64(_fn))


def _betainc_shape(ctx):
    """a, b and x: one shape, or scalars beside it (TensorFlow broadcasts nothing else)."""
    shapes = [s for s in ctx.input_shapes if s.rank != 0]
    out = shapes[0] if shapes else ctx.input_shape(0)
    for s in shapes[1:]:
        if not out.is_compatible_with(s):
            raise ctx.error(f"shapes of a, b and x must be equal or scalars: {ctx.input_shapes}")
        out = out.merge_with(s)
    return out


family.op("Betainc", inputs=["a: T", "b: T", "x: T"], outputs=["z: T"], attrs=["T: {float32, float64}"],
          shape=_betainc_shape)


@kernel("Betainc")
def _betainc_kernel(op, ctx):
    compute = _in_float64(sn.betainc)

    def betainc(a, b, x):
        shapes = {np.shape(v) for v in (a, b, x) if np.ndim(v)}
        if len(shapes) > 1:
            raise ValueError(f"Shapes of a, b and x must be equal or scalars: {[list(np.shape(v)) for v in (a, b, x)]}")
        return compute(a, b, x)
    return betainc


# -- gradients ---------------------------------------------------------------------------------------

def _c(value, like: Tensor) -> Tensor:
    return constant(value, like.known_dtype.base_dtype)


def _where(condition, yes, no) -> Tensor:
    return apply_op("SelectV2", condition, yes, no)


def _call(op_type: str, *args) -> Tensor:
    return apply_op(op_type, *args)


@family.gradient("Erfinv")
@dense_gradients
def _erfinv_grad(op, grad):
    """sqrt(pi)/2 exp(erfinv(x)^2)."""
    return grad * _c(np.sqrt(np.pi) / 2, grad) * _call("Exp", _call("Square", op.outputs[0]))


@family.gradient("Ndtri")
@dense_gradients
def _ndtri_grad(op, grad):
    """sqrt(2 pi) exp(ndtri(x)^2 / 2)."""
    return grad * _c(np.sqrt(2 * np.pi), grad) * _call("Exp", _call("Square", op.outputs[0]) / _c(2, grad))


@family.gradient("Dawsn")
@dense_gradients
def _dawsn_grad(op, grad):
    """1 - 2 x dawsn(x)."""
    x, y = op.inputs[0], op.outputs[0]
    return grad * (_c(1, x) - _c(2, x) * x * y)


@family.gradient("Expint")
@dense_gradients
def _expint_grad(op, grad):
    """exp(x) / x."""
    x = op.inputs[0]
    return grad * _call("Exp", x) / x


@family.gradient("FresnelCos")
@dense_gradients
def _fresnel_cos_grad(op, grad):
    x = op.inputs[0]
    return grad * _call("Cos", _c(np.pi / 2, x) * _call("Square", x))


@family.gradient("FresnelSin")
@dense_gradients
def _fresnel_sin_grad(op, grad):
    x = op.inputs[0]
    return grad * _call("Sin", _c(np.pi / 2, x) * _call("Square", x))


@family.gradient("Spence")
@dense_gradients
def _spence_grad(op, grad):
    """log(x) / (1 - x), -1 at x = 1 (the limit)."""
    x = op.inputs[0]
    partial = _call("Log", x) / (_c(1, x) - x)
    return grad * _where(_call("Equal", x, _c(1, x)), _c(-1, x), partial)


@family.gradient("BesselI0")
@dense_gradients
def _bessel_i0_grad(op, grad):
    return grad * _call("BesselI1", op.inputs[0])


@family.gradient("BesselI0e")
@dense_gradients
def _bessel_i0e_grad(op, grad):
    """I1e(x) - sign(x) I0e(x)."""
    x, y = op.inputs[0], op.outputs[0]
    return grad * (_call("BesselI1e", x) - _call("Sign", x) * y)


@family.gradient("BesselI1")
@dense_gradients
def _bessel_i1_grad(op, grad):
    """I0(x) - I1(x)/x; 1/2 at 0 (TensorFlow imputes 1 there: see the module docstring)."""
    x, y = op.inputs[0], op.outputs[0]
    return grad * _where(_call("Equal", x, _c(0, x)), _c(0.5, x), _call("BesselI0", x) - _call("Div", y, x))


@family.gradient("BesselI1e")
@dense_gradients
def _bessel_i1e_grad(op, grad):
    """I0e(x) - I1e(x) (sign(x) + 1/x); 1/2 at 0."""
    x, y = op.inputs[0], op.outputs[0]
    main = _call("BesselI0e", x) - y * (_call("Sign", x) + _call("Reciprocal", x))
    return grad * _where(_call("Equal", x, _c(0, x)), _c(0.5, x), main)


@family.gradient("BesselK0")
@dense_gradients
def _bessel_k0_grad(op, grad):
    return grad * -_call("BesselK1", op.inputs[0])


@family.gradient("BesselK0e")
@dense_gradients
def _bessel_k0e_grad(op, grad):
    return grad * (op.outputs[0] - _call("BesselK1e", op.inputs[0]))


@family.gradient("BesselK1")
@dense_gradients
def _bessel_k1_grad(op, grad):
    x, y = op.inputs[0], op.outputs[0]
    return grad * (-_call("BesselK0", x) - _call("Div", y, x))


@family.gradient("BesselK1e")
@dense_gradients
def _bessel_k1e_grad(op, grad):
    x, y = op.inputs[0], op.outputs[0]
    return grad * (y * (_c(1, x) - _call("Reciprocal", x)) - _call("BesselK0e", x))


@family.gradient("BesselJ0")
@dense_gradients
def _bessel_j0_grad(op, grad):
    return grad * -_call("BesselJ1", op.inputs[0])


@family.gradient("BesselJ1")
@dense_gradients
def _bessel_j1_grad(op, grad):
    """J0(x) - J1(x)/x; 1/2 at 0."""
    x, y = op.inputs[0], op.outputs[0]
    return grad * _where(_call("Equal", x, _c(0, x)), _c(0.5, x), _call("BesselJ0", x) - _call("Div", y, x))


@family.gradient("BesselY0")
@dense_gradients
def _bessel_y0_grad(op, grad):
    return grad * -_call("BesselY1", op.inputs[0])


@family.gradient("BesselY1")
@dense_gradients
def _bessel_y1_grad(op, grad):
    x, y = op.inputs[0], op.outputs[0]
    return grad * (_call("BesselY0", x) - _call("Div", y, x))


def _igamma_partials(op):
    """(dP/da, dP/dx) of P(a, x): IgammaGradA and the gamma density exp(-x + (a-1) log x - lgamma a)."""
    a, x = op.inputs
    partial_a = apply_op("IgammaGradA", a, x)
    partial_x = _call("Exp", -x + (a - _c(1, a)) * _call("Log", x) - _call("Lgamma", a))
    return partial_a, partial_x


@family.gradient("Igamma")
@dense_gradients
def _igamma_grad(op, grad):
    partial_a, partial_x = _igamma_partials(op)
    return unbroadcast(*op.inputs, partial_a * grad, partial_x * grad)


@family.gradient("Igammac")
@dense_gradients
def _igammac_grad(op, grad):
    """Q = 1 - P."""
    partial_a, partial_x = _igamma_partials(op)
    return unbroadcast(*op.inputs, -(partial_a * grad), -(partial_x * grad))


@family.gradient("Polygamma")
@dense_gradients
def _polygamma_grad(op, grad):
    """d/dx psi^(n)(x) = psi^(n+1)(x); no gradient for the order n (a whole number)."""
    n, x = op.inputs
    return unbroadcast(n, x, None, apply_op("Polygamma", n + _c(1, n), x) * grad)


@family.gradient("Zeta")
@dense_gradients
def _zeta_grad(op, grad):
    """(d/dx: see zeta_x_derivative, d/dq = -x zeta(x+1, q))."""
    x, q = op.inputs
    partial_q = -x * apply_op("Zeta", x + _c(1, x), q)
    return unbroadcast(x, q, zeta_x_derivative(x, q) * grad, partial_q * grad)


# Bernoulli numbers B_2j / (2j)!, j = 1..7, for the Euler-Maclaurin corrections.
_BERNOULLI_OVER_FACTORIAL = [1 / 12, -1 / 720, 1 / 30240, -1 / 1209600, 1 / 47900160, -691 / 1307674368000,
                             1 / 74724249600]


def zeta_x_derivative(x: Tensor, q: Tensor) -> Tensor:
    """d/dx zeta(x, q) in standard ops. With w = q + N (N = ZETA_TERMS):
    zeta = sum_{k<N} (q+k)^-x + w^(1-x)/(x-1) + w^-x/2 + sum_j B_2j/(2j)! (x)_(2j-1) w^(-x-2j+1),
    (x)_m the rising factorial; each term differentiated in x. For q > 0, x > 1 the truncation
    error is below 1e-15 relative."""
    one = _c(1, x)
    shifts = constant(np.arange(ZETA_TERMS, dtype=x.known_dtype.base_dtype.storage), x.known_dtype.base_dtype)
    bases = apply_op("ExpandDims", q, rules.ints(-1)) + shifts
    log_bases = _call("Log", bases)
    powers = _call("Exp", -apply_op("ExpandDims", x, rules.ints(-1)) * log_bases)
    head = -_call("Sum", log_bases * powers, rules.ints(-1))
    w = q + _c(ZETA_TERMS, q)
    log_w = _call("Log", w)
    x_minus_1 = x - one
    integral = _call("Exp", -x_minus_1 * log_w) * (-log_w / x_minus_1 - one / _call("Square", x_minus_1))
    half = -log_w * _call("Exp", -x * log_w) / _c(2, x)
    corrections = []
    rising, rising_log_derivative = x, one / x    # (x)_1 and d log (x)_1 / dx
    for j, coefficient in enumerate(_BERNOULLI_OVER_FACTORIAL, start=1):
        if j > 1:   # (x)_(2j-1) = (x)_(2j-3) (x + 2j - 3) (x + 2j - 2)
            for i in (2 * j - 3, 2 * j - 2):
                factor = x + _c(i, x)
                rising = rising * factor
                rising_log_derivative = rising_log_derivative + one / factor
        power = _call("Exp", -(x + _c(2 * j - 1, x)) * log_w)
        corrections.append(_c(coefficient, x) * rising * power * (rising_log_derivative - log_w))
    return apply_op("AddN", [head, integral, half] + corrections)


@family.gradient("Betainc")
@dense_gradients
def _betainc_grad(op, grad):
    """(dI/da, dI/db) from betainc_parameter_derivatives; dI/dx = x^(a-1) (1-x)^(b-1) / B(a, b)
    (TensorFlow's, with xlogy / xlog1py so the tails at a = 1 or b = 1 are right)."""
    a, b, x = op.inputs
    out = op.outputs[0]
    log_beta = _call("Lgamma", a) + _call("Lgamma", b) - _call("Lgamma", a + b)
    one = _c(1, x)
    partial_x = _call("Exp", _call("Xlog1py", b - one, -x) + _call("Xlogy", a - one, x) - log_beta)
    partial_a, partial_b = betainc_parameter_derivatives(a, b, x)
    return (unbroadcast_to(a, out, partial_a * grad), unbroadcast_to(b, out, partial_b * grad),
            unbroadcast_to(x, out, partial_x * grad))


def betainc_parameter_derivatives(a: Tensor, b: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """(dI_x(a, b)/da, dI_x(a, b)/db) in standard ops (see the module docstring)."""
    one = _c(1, x)
    zeros = _call("ZerosLike", a + b + x)       # the broadcast shape
    a, b, x = a + zeros, b + zeros, x + zeros
    reflect = _call("Greater", x, (a + one) / (a + b + _c(2, x)))
    p, r, y = _where(reflect, b, a), _where(reflect, a, b), _where(reflect, one - x, x)
    d_first, d_second = _betainc_series_derivatives(p, r, y)
    partial_a = _where(reflect, -d_second, d_first)
    partial_b = _where(reflect, -d_first, d_second)
    # At x = 0 and x = 1, I is 0 or 1 whatever a and b.
    edge = _call("LogicalOr", _call("Equal", x, _c(0, x)), _call("Equal", x, one))
    return _where(edge, zeros, partial_a), _where(edge, zeros, partial_b)


def _betainc_series_derivatives(a: Tensor, b: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """dI/da and dI/db by the series, for x <= (a+1)/(a+b+2) (x = 0 is masked by the caller)."""
    one = _c(1, x)
    tiny = _c(np.finfo(x.known_dtype.base_dtype.storage).tiny, x)
    safe_x = _call("Maximum", x, tiny)
    n = _betainc_term_index(a, b, safe_x)                       # [N]
    col = lambda t: apply_op("ExpandDims", t, rules.ints(-1))  # noqa: E731
    a_n, b_n, x_n = col(a), col(b), col(safe_x)
    ab = a + b
    log_terms = (_call("Lgamma", a_n + b_n + n) - col(_call("Lgamma", ab)) - _call("Lgamma", a_n + one + n)
                 + col(_call("Lgamma", a + one)) + _call("Xlogy", n, x_n))
    terms = _call("Exp", log_terms)
    psi_abn = _call("Digamma", a_n + b_n + n) - col(_call("Digamma", ab))
    d_log_terms_a = psi_abn - _call("Digamma", a_n + one + n) + col(_call("Digamma", a + one))
    last = rules.ints(-1)
    series = _call("Sum", terms, last)
    series_a = _call("Sum", terms * d_log_terms_a, last)
    series_b = _call("Sum", terms * psi_abn, last)
    log_beta = _call("Lgamma", a) + _call("Lgamma", b) - _call("Lgamma", ab)
    log_prefactor = a * _call("Log", safe_x) + b * _call("Log1p", -x) - _call("Log", a) - log_beta
    prefactor = _call("Exp", log_prefactor)
    value = prefactor * series
    psi_ab = _call("Digamma", ab)
    d_prefactor_a = _call("Log", safe_x) - one / a - _call("Digamma", a) + psi_ab
    d_prefactor_b = _call("Log1p", -x) - _call("Digamma", b) + psi_ab
    return value * d_prefactor_a + prefactor * series_a, value * d_prefactor_b + prefactor * series_b


# Candidate series lengths: each element takes the first that makes its tail negligible.
_BETAINC_LENGTHS = (8, 16, 32, 64, 128, 256, 512, BETAINC_MAX_TERMS)


def _betainc_term_index(a: Tensor, b: Tensor, x: Tensor) -> Tensor:
    """0, 1, ..., N-1 in x's type, N the number of series terms the slowest element needs. Term
    n+1 is term n times r_n = x (a+b+n) / (a+1+n), which moves monotonically toward x; after
    term n every ratio is at most q = max(r_n, x) < 1, so the tail is below t_n q / (1 - q). An
    element needs the first candidate length n with log t_n + log(q / (1 - q)) < log(eps)
    (t_0 = 1 bounds the sum from below); N is the largest over the elements, at most
    BETAINC_MAX_TERMS."""
    one = _c(1, x)
    dtype = x.known_dtype.base_dtype
    n = constant(np.array(_BETAINC_LENGTHS, dtype.storage), dtype)
    col = lambda t: apply_op("ExpandDims", t, rules.ints(-1))  # noqa: E731
    a_n, b_n, x_n = col(a), col(b), col(x)
    log_term = (_call("Lgamma", a_n + b_n + n) - _call("Lgamma", a_n + b_n) - _call("Lgamma", a_n + one + n)
                + _call("Lgamma", a_n + one) + n * _call("Log", x_n))
    ratio = _call("Maximum", x_n * (a_n + b_n + n) / (a_n + one + n), x_n)
    ratio = _call("Minimum", ratio, _c(1 - 1e-12, x))
    tail = log_term + _call("Log", ratio / (one - ratio))
    eps = np.finfo(dtype.storage).eps * 0.1
    enough = _call("Less", tail, _c(np.log(eps), x))
    lengths = _call("SelectV2", enough, n + _op_zeros(x_n), _c(BETAINC_MAX_TERMS, x))
    count = _call("Max", _call("Reshape", _call("Min", lengths, rules.ints(-1)), rules.ints([-1])), rules.ints(0))
    return apply_op("Range", _c(0, x), _call("Maximum", count, one), one)


def _op_zeros(t: Tensor) -> Tensor:
    return apply_op("ZerosLike", t)
