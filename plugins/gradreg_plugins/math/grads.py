"""Gradient rules of the math family: ``rule(op, *grads) -> one gradient per input``.

The rules follow tensorflow/python/ops/math_grad.py and linalg_grad.py (the same formulas, the
same conjugations for complex numbers, the same op types in the backward graph, so a
differentiated graph imports into TensorFlow), with static shapes used wherever they are
known: a broadcasting binary op whose operands have the same static shape passes its gradient
through; with known ranks the reduction axes are computed in Python (TensorFlow's
``_InferGradientReductionAxes``); Shape + BroadcastGradientArgs + Sum + Reshape is the fallback
for what only the run time knows. Reductions likewise reshape and tile with constants when the
shapes and axes are static.

Where this differs from TensorFlow: Mod and TruncateMod have rules (TensorFlow has none:
d/dx = 1, d/dy = -trunc(x / y)); Einsum takes any number of operands (TensorFlow's rule: one or
two); for complex inputs Cumprod, MatrixDeterminant, MulNoNan, Xlogy, Xlog1py and Xdivy
conjugate where TensorFlow's rules forget to, and SquaredDifference and EuclideanNorm keep only the real part of their
(real-valued) outputs' cotangents (TensorFlow's gradients contradict its own convention,
dL/dRe z + i dL/dIm z); Cumprod is right at zeros (TensorFlow divides by them). Otherwise
the results are TensorFlow's.
"""
from __future__ import annotations

import numpy as np

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op, constant
from gradreg.errors import GradientError, describe_node
from gradreg.model import dtypes
from gradreg.model.graph import Tensor
from gradreg.model.indexed_slices import IndexedSlices
from gradreg.model.shape_inference import constant_value
from gradreg_plugins.math import family
from gradreg_plugins.rule_helpers import (
    FLOATING,
    Reduction,
    broadcast_axes,
    conj,
    dense_gradients,
    is_floating,
    scalar,
    unbroadcast,
    unbroadcast_batch,
    unbroadcast_to,
)

# Ops whose outputs are piecewise constant, boolean or integer: no gradient flows.
family.not_differentiable(
    "Less", "LessEqual", "Greater", "GreaterEqual", "Equal", "NotEqual", "ApproximateEqual",
    "LogicalAnd", "LogicalOr", "LogicalNot", "IsFinite", "IsNan", "IsInf", "All", "Any",
    "ArgMax", "ArgMin", "Floor", "Ceil", "Round", "Rint", "FloorDiv", "TruncateDiv",
    "Range", "LinSpace",
)

def _ints(values) -> Tensor:
    return rules.ints(values, dtypes.int32)


# -- unary ----------------------------------------------------------------------------------------

@family.gradient("Abs")
@dense_gradients
def _abs_grad(op, grad):
    return grad * apply_op("Sign", op.inputs[0])


@family.gradient("Neg")
def _neg_grad(op, grad):
    if isinstance(grad, IndexedSlices):
        return IndexedSlices(-grad.values, grad.indices, grad.dense_shape)
    return -grad


@family.gradient("Sign")
@dense_gradients
def _sign_grad(op, grad):
    return apply_op("ZerosLike", op.inputs[0])


@family.gradient("Square")
@dense_gradients
def _square_grad(op, grad):
    x = conj(op.inputs[0])
    return grad * (x * scalar(2, x))


@family.gradient("Sqrt")
@dense_gradients
def _sqrt_grad(op, grad):
    return apply_op("SqrtGrad", op.outputs[0], grad)


@family.gradient("Rsqrt")
@dense_gradients
def _rsqrt_grad(op, grad):
    return apply_op("RsqrtGrad", op.outputs[0], grad)


@family.gradient("Reciprocal", "Inv")
@dense_gradients
def _reciprocal_grad(op, grad):
    return apply_op("ReciprocalGrad", op.outputs[0], grad)


@family.gradient("Exp")
@dense_gradients
def _exp_grad(op, grad):
    return grad * conj(op.outputs[0])


@family.gradient("Expm1")
@dense_gradients
def _expm1_grad(op, grad):
    return grad * apply_op("Exp", conj(op.inputs[0]))


@family.gradient("Log")
@dense_gradients
def _log_grad(op, grad):
    return grad * apply_op("Reciprocal", conj(op.inputs[0]))


@family.gradient("Log1p")
@dense_gradients
def _log1p_grad(op, grad):
    x = conj(op.inputs[0])
    return grad * apply_op("Reciprocal", scalar(1, x) + x)


@family.gradient("Sin")
@dense_gradients
def _sin_grad(op, grad):
    return grad * apply_op("Cos", conj(op.inputs[0]))


@family.gradient("Cos")
@dense_gradients
def _cos_grad(op, grad):
    return -grad * apply_op("Sin", conj(op.inputs[0]))


@family.gradient("Tan")
@dense_gradients
def _tan_grad(op, grad):
    secant = apply_op("Reciprocal", apply_op("Cos", conj(op.inputs[0])))
    return apply_op("Square", secant) * grad


def _inverse_sqrt_one_minus_square(x: Tensor) -> Tensor:
    """1 / sqrt(1 - x^2), the derivative of asin."""
    x = conj(x)
    return apply_op("Reciprocal", apply_op("Sqrt", scalar(1, x) - apply_op("Square", x)))


@family.gradient("Asin")
@dense_gradients
def _asin_grad(op, grad):
    return grad * _inverse_sqrt_one_minus_square(op.inputs[0])


@family.gradient("Acos")
@dense_gradients
def _acos_grad(op, grad):
    return -grad * _inverse_sqrt_one_minus_square(op.inputs[0])


@family.gradient("Atan")
@dense_gradients
def _atan_grad(op, grad):
    x = conj(op.inputs[0])
    return grad * apply_op("Reciprocal", scalar(1, x) + apply_op("Square", x))


@family.gradient("Sinh")
@dense_gradients
def _sinh_grad(op, grad):
    return grad * apply_op("Cosh", conj(op.inputs[0]))


@family.gradient("Cosh")
@dense_gradients
def _cosh_grad(op, grad):
    return grad * apply_op("Sinh", conj(op.inputs[0]))


@family.gradient("Tanh")
@dense_gradients
def _tanh_grad(op, grad):
    return apply_op("TanhGrad", conj(op.outputs[0]), grad)


@family.gradient("Asinh")
@dense_gradients
def _asinh_grad(op, grad):
    return grad / apply_op("Cosh", conj(op.outputs[0]))


@family.gradient("Acosh")
@dense_gradients
def _acosh_grad(op, grad):
    return grad / apply_op("Sinh", conj(op.outputs[0]))


@family.gradient("Atanh")
@dense_gradients
def _atanh_grad(op, grad):
    x = conj(op.inputs[0])
    return grad * apply_op("Reciprocal", scalar(1, x) - apply_op("Square", x))


@family.gradient("Sigmoid")
@dense_gradients
def _sigmoid_grad(op, grad):
    return apply_op("SigmoidGrad", conj(op.outputs[0]), grad)


def _gaussian(x: Tensor) -> Tensor:
    return apply_op("Exp", -apply_op("Square", conj(x)))


@family.gradient("Erf")
@dense_gradients
def _erf_grad(op, grad):
    return grad * scalar(2 / np.sqrt(np.pi), grad) * _gaussian(op.inputs[0])


@family.gradient("Erfc")
@dense_gradients
def _erfc_grad(op, grad):
    return grad * scalar(-2 / np.sqrt(np.pi), grad) * _gaussian(op.inputs[0])


@family.gradient("Lgamma")
@dense_gradients
def _lgamma_grad(op, grad):
    return grad * apply_op("Digamma", conj(op.inputs[0]))


@family.gradient("Digamma")
@dense_gradients
def _digamma_grad(op, grad):
    """Polygamma(1, x), the trigamma function."""
    x = conj(op.inputs[0])
    return grad * apply_op("Polygamma", scalar(1, x), x)


@family.gradient("Real")
@dense_gradients
def _real_grad(op, grad):
    return apply_op("Complex", grad, scalar(0, grad), Tout=op.inputs[0].dtype.base_dtype)


@family.gradient("Imag")
@dense_gradients
def _imag_grad(op, grad):
    return apply_op("Complex", scalar(0, grad), grad, Tout=op.inputs[0].dtype.base_dtype)


@family.gradient("Conj")
@dense_gradients
def _conj_grad(op, grad):
    return apply_op("Conj", grad)


@family.gradient("Angle")
@dense_gradients
def _angle_grad(op, grad):
    """-grad / (imag(x) + i real(x))."""
    x = op.inputs[0]
    complex_type = x.dtype.base_dtype
    real_type = complex_type.real_dtype
    swapped = apply_op("Complex", apply_op("Imag", x, Tout=real_type), apply_op("Real", x, Tout=real_type),
                       Tout=complex_type)
    as_complex = apply_op("Complex", grad, scalar(0, grad), Tout=complex_type)
    return -as_complex * apply_op("Reciprocal", swapped)


@family.gradient("ComplexAbs")
@dense_gradients
def _complex_abs_grad(op, grad):
    complex_type = op.inputs[0].dtype.base_dtype
    zero = scalar(0, grad)
    numerator = apply_op("Complex", grad, zero, Tout=complex_type) * op.inputs[0]
    return apply_op("DivNoNan", numerator, apply_op("Complex", op.outputs[0], zero, Tout=complex_type))


# -- the *Grad helpers: second derivatives --------------------------------------------------------

@family.gradient("TanhGrad")
@dense_gradients
def _tanh_grad_grad(op, grad):
    """z = b * (1 - a^2): dz/da = -2 a b, dz/db = 1 - a^2."""
    a, b = conj(op.inputs[0]), conj(op.inputs[1])
    return grad * scalar(-2, grad) * b * a, apply_op("TanhGrad", a, grad)


@family.gradient("SigmoidGrad")
@dense_gradients
def _sigmoid_grad_grad(op, grad):
    """z = b * a * (1 - a): dz/da = b (1 - 2 a), dz/db = a (1 - a)."""
    a, b = conj(op.inputs[0]), conj(op.inputs[1])
    gb = grad * b
    return gb - scalar(2, gb) * gb * a, apply_op("SigmoidGrad", a, grad)


@family.gradient("SqrtGrad")
@dense_gradients
def _sqrt_grad_grad(op, grad):
    """z = 0.5 b / conj(a)."""
    ga = grad / op.inputs[0]
    return -conj(ga) * op.outputs[0], scalar(0.5, ga) * ga


@family.gradient("RsqrtGrad")
@dense_gradients
def _rsqrt_grad_grad(op, grad):
    """z = -0.5 b conj(a)^3."""
    a, b = conj(op.inputs[0]), op.inputs[1]
    ga = scalar(-1.5, grad) * conj(grad) * b * apply_op("Square", a)
    return ga, apply_op("RsqrtGrad", a, grad)


@family.gradient("ReciprocalGrad", "InvGrad")
@dense_gradients
def _reciprocal_grad_grad(op, grad):
    """z = -b conj(a)^2."""
    a, b = conj(op.inputs[0]), op.inputs[1]
    return conj(grad) * scalar(-2, grad) * b * a, apply_op("ReciprocalGrad", a, grad)


# -- binary elementwise ---------------------------------------------------------------------------

@family.gradient("Add", "AddV2")
def _add_grad(op, grad):
    x, y = op.inputs
    return unbroadcast(x, y, grad, grad)


@family.gradient("Sub")
def _sub_grad(op, grad):
    x, y = op.inputs
    return unbroadcast(x, y, grad, _neg_grad(op, grad))


@family.gradient("Mul")
@dense_gradients
def _mul_grad(op, grad):
    x, y = op.inputs
    return unbroadcast(x, y, grad * conj(y), conj(x) * grad)


@family.gradient("MulNoNan")
@dense_gradients
def _mul_no_nan_grad(op, grad):
    """(grad conj(y), conj(x) grad), 0 where y (grad) is 0 (TensorFlow omits the conjugates)."""
    x, y = op.inputs
    return unbroadcast(x, y, apply_op("MulNoNan", grad, conj(y)), apply_op("MulNoNan", conj(x), grad))


@family.gradient("Div", "RealDiv")
@dense_gradients
def _div_grad(op, grad):
    x, y = op.inputs
    cx, cy = conj(x), conj(y)
    return unbroadcast(x, y, grad / cy, grad * (-cx / cy / cy))


@family.gradient("DivNoNan")
@dense_gradients
def _div_no_nan_grad(op, grad):
    x, y = op.inputs
    cx, cy = conj(x), conj(y)
    gy = grad * apply_op("DivNoNan", apply_op("DivNoNan", -cx, cy), cy)
    return unbroadcast(x, y, apply_op("DivNoNan", grad, cy), gy)


@family.gradient("FloorMod")
@dense_gradients
def _floor_mod_grad(op, grad):
    """x - floor(x / y) y: (1, -floor(x / y))."""
    x, y = op.inputs
    quotient = apply_op("FloorDiv", conj(x), conj(y))
    return unbroadcast(x, y, grad, grad * -quotient)


@family.gradient("Mod", "TruncateMod")
@dense_gradients
def _truncate_mod_grad(op, grad):
    """x - trunc(x / y) y: (1, -trunc(x / y)). The quotient is read off the op's output,
    (x - z) / y, rounded to the integer it is (TensorFlow has no float TruncateDiv kernel)."""
    x, y = op.inputs
    quotient = apply_op("Round", (x - op.outputs[0]) / y)
    return unbroadcast(x, y, grad, grad * -quotient)


@family.gradient("Pow")
@dense_gradients
def _pow_grad(op, grad):
    """(y x^(y-1), z log x); the exponent's gradient is 0 where x <= 0 (x == 0 for complex x),
    where the real logarithm is undefined, as in TensorFlow."""
    x, y = op.inputs
    cx, cy = conj(x), conj(y)
    gx = grad * cy * apply_op("Pow", cx, cy - scalar(1, cy))
    zero, one = scalar(0, x), scalar(1, x)
    usable = apply_op("NotEqual", cx, zero) if x.dtype.is_complex else apply_op("Greater", cx, zero)
    safe_x = apply_op("SelectV2", usable, cx, one)
    log_x = apply_op("SelectV2", usable, apply_op("Log", safe_x), zero)
    gy = grad * conj(op.outputs[0]) * log_x
    return unbroadcast(x, y, gx, gy)


def _maximum_minimum_grad(op, grad, selector: str):
    """The gradient goes to x where the selector holds (ties included), else to y."""
    x, y = op.inputs
    x_wins = apply_op(selector, x, y)
    zero = scalar(0, grad)
    return unbroadcast(x, y, apply_op("SelectV2", x_wins, grad, zero), apply_op("SelectV2", x_wins, zero, grad))


@family.gradient("Maximum")
@dense_gradients
def _maximum_grad(op, grad):
    return _maximum_minimum_grad(op, grad, "GreaterEqual")


@family.gradient("Minimum")
@dense_gradients
def _minimum_grad(op, grad):
    return _maximum_minimum_grad(op, grad, "LessEqual")


@family.gradient("SquaredDifference")
@dense_gradients
def _squared_difference_grad(op, grad):
    """2 grad (x - y). For complex numbers the op is |x - y|^2 = conj(x - y)(x - y), real, so
    only the real part of its cotangent counts (TensorFlow uses the whole cotangent)."""
    x, y = op.inputs
    if grad.dtype.is_complex:
        real = apply_op("Real", grad, Tout=grad.dtype.real_dtype)
        grad = apply_op("Complex", real, apply_op("ZerosLike", real), Tout=grad.dtype.base_dtype)
    gx = scalar(2, grad) * grad * (x - y)
    return unbroadcast(x, y, gx, -gx)


@family.gradient("Atan2")
@dense_gradients
def _atan2_grad(op, grad):
    """atan2(y, x): (x, -y) / (x^2 + y^2)."""
    y, x = op.inputs
    scaled = grad / (apply_op("Square", y) + apply_op("Square", x))
    return unbroadcast(y, x, x * scaled, -y * scaled)


def _x_is_nonzero(x: Tensor) -> Tensor:
    return apply_op("Cast", apply_op("NotEqual", x, scalar(0, x)), DstT=x.known_dtype.base_dtype)


@family.gradient("Xlogy")
@dense_gradients
def _xlogy_grad(op, grad):
    x, y = op.inputs
    cx, cy = conj(x), conj(y)
    partial_x = apply_op("Xlogy", _x_is_nonzero(cx), cy)
    partial_y = apply_op("Xdivy", cx, cy)
    return unbroadcast(x, y, partial_x * grad, partial_y * grad)


@family.gradient("Xlog1py")
@dense_gradients
def _xlog1py_grad(op, grad):
    x, y = op.inputs
    cx, cy = conj(x), conj(y)
    partial_x = apply_op("Xlog1py", _x_is_nonzero(cx), cy)
    partial_y = apply_op("Xdivy", cx, cy + scalar(1, cy))
    return unbroadcast(x, y, partial_x * grad, partial_y * grad)


@family.gradient("Xdivy")
@dense_gradients
def _xdivy_grad(op, grad):
    x, y = op.inputs
    cx, cy = conj(x), conj(y)
    partial_x = apply_op("Xdivy", _x_is_nonzero(cx), cy)
    partial_y = apply_op("Xdivy", -cx, apply_op("Square", cy))
    return unbroadcast(x, y, partial_x * grad, partial_y * grad)


@family.gradient("Complex")
@dense_gradients
def _complex_grad(op, grad):
    x, y = op.inputs
    real_type = x.dtype.base_dtype
    return unbroadcast(x, y, apply_op("Real", grad, Tout=real_type), apply_op("Imag", grad, Tout=real_type))


# -- selection, sums, clipping, casts --------------------------------------------------------------

@family.gradient("Select")
@dense_gradients
def _select_grad(op, grad):
    condition, t, _ = op.inputs
    zeros = apply_op("ZerosLike", t)
    return None, apply_op("Select", condition, grad, zeros), apply_op("Select", condition, zeros, grad)


@family.gradient("SelectV2")
@dense_gradients
def _select_v2_grad(op, grad):
    condition, t, e = op.inputs
    out = op.outputs[0]
    zero = scalar(0, grad)
    gt = unbroadcast_to(t, out, apply_op("SelectV2", condition, grad, zero))
    ge = unbroadcast_to(e, out, apply_op("SelectV2", condition, zero, grad))
    return None, gt, ge


@family.gradient("AddN")
def _add_n_grad(op, grad):
    return [grad] * len(op.inputs)


@family.gradient("ClipByValue")
@dense_gradients
def _clip_by_value_grad(op, grad):
    """The gradient goes to t inside the bounds, to a bound where t is beyond it."""
    t, low, high = op.inputs
    below = apply_op("Less", t, low)
    above = apply_op("Greater", t, high)
    zero = scalar(0, grad)
    gt = apply_op("SelectV2", apply_op("LogicalOr", below, above), zero, grad)
    glow = unbroadcast(t, low, None, apply_op("SelectV2", below, grad, zero))[1]
    ghigh = unbroadcast(t, high, None, apply_op("SelectV2", above, grad, zero))[1]
    return gt, glow, ghigh


@family.gradient("Cast")
def _cast_grad(op, grad):
    """Cast back between floating and complex types; no gradient to or from other types."""
    source = op.inputs[0].dtype.base_dtype
    if source not in FLOATING or grad.dtype.base_dtype not in FLOATING:
        return None
    if isinstance(grad, IndexedSlices):
        return IndexedSlices(apply_op("Cast", grad.values, DstT=source), grad.indices, grad.dense_shape)
    return apply_op("Cast", grad, DstT=source)


# -- reductions -----------------------------------------------------------------------------------

@family.gradient("Sum")
@dense_gradients
def _sum_grad(op, grad):
    r = Reduction(op)
    return r.expand(grad), None


@family.gradient("Mean")
@dense_gradients
def _mean_grad(op, grad):
    r = Reduction(op)
    sum_grad = r.expand(grad)
    size = r.reduced_size()
    if size == 1:
        return sum_grad, None
    if size is not None:
        factor = scalar(size, sum_grad)
    else:
        dims = apply_op("GatherV2", apply_op("Shape", r.x), r.normalized_axes(), _ints(0))
        factor = apply_op("Cast", apply_op("Prod", dims, _ints(0)), DstT=sum_grad.dtype.base_dtype)
    return sum_grad / factor, None


@family.gradient("Max", "Min")
@dense_gradients
def _min_max_grad(op, grad):
    """Shared equally by the elements equal to the extreme value."""
    r = Reduction(op)
    y, grad = r.kept_dims(op.outputs[0]), r.kept_dims(grad)
    indicators = apply_op("Cast", apply_op("Equal", y, r.x), DstT=grad.dtype.base_dtype)
    selected = apply_op("Sum", indicators, op.inputs[1], keep_dims=True)
    return indicators / selected * grad, None


@family.gradient("EuclideanNorm")
@dense_gradients
def _euclidean_norm_grad(op, grad):
    """x grad / norm. The norm of complex numbers is real (a complex tensor with no imaginary
    part): only its cotangent's real part counts (TensorFlow uses the whole cotangent). Real
    inputs: TensorFlow's x / (norm / grad). Complex ones: x * (grad / norm), since a complex
    division by a zero cotangent is NaN, not the infinity that makes the real form 0."""
    r = Reduction(op)
    if grad.dtype.is_complex:
        real = apply_op("Real", grad, Tout=grad.dtype.real_dtype)
        grad = apply_op("Complex", real, apply_op("ZerosLike", real), Tout=grad.dtype.base_dtype)
    norm, grad = r.kept_dims(op.outputs[0]), r.kept_dims(grad)
    if grad.dtype.is_complex:
        return r.x * (grad / norm), None
    return r.x / (norm / grad), None


@family.gradient("Prod")
@dense_gradients
def _prod_grad(op, grad):
    """The product of all other elements, as the product of two exclusive cumulative products
    (before and after each element), which is right with zeros too. The reduced axes are moved
    to the front and flattened to one, the others to a second."""
    r = Reduction(op)
    x = r.x
    grad = r.expand(grad)
    if r.static:
        reduced = r.axes
        other = [i for i in range(r.rank) if i not in reduced]
        perm = reduced + other
        permuted = x if perm == sorted(perm) else apply_op("Transpose", x, _ints(perm))
        matrix = apply_op("Reshape", permuted, _prod_matrix_shape(x, reduced, other))
        inverse = _ints(np.argsort(perm))
    else:
        shape = apply_op("Shape", x)
        reduced = r.normalized_axes()
        other = apply_op("ListDiff", apply_op("Range", _ints(0), apply_op("Rank", x), _ints(1)), reduced)[0]
        perm = apply_op("ConcatV2", [reduced, other], _ints(0))
        permuted = apply_op("Transpose", x, perm)
        sizes = [apply_op("Prod", apply_op("GatherV2", shape, part, _ints(0)), _ints(0)) for part in (reduced, other)]
        matrix = apply_op("Reshape", permuted, apply_op("Pack", sizes, axis=0))
        inverse = apply_op("InvertPermutation", perm)
    before = apply_op("Cumprod", matrix, _ints(0), exclusive=True)
    after = apply_op("Cumprod", matrix, _ints(0), exclusive=True, reverse=True)
    others = rules.reshape_like(conj(before) * conj(after), permuted)
    if permuted is not x:
        others = apply_op("Transpose", others, inverse)
    return grad * others, None


def _prod_matrix_shape(x: Tensor, reduced: list[int], other: list[int]) -> Tensor:
    """[size of the reduced dims, size of the others], for x's static shape (rank known)."""
    dims = x.shape.as_list()
    sizes: list[int | None] = []
    for part in (reduced, other):
        part_dims = [dims[i] for i in part]
        known = [d for d in part_dims if d is not None]
        sizes.append(None if len(known) != len(part_dims) else int(np.prod(known, dtype=np.int64)))
    target = rules.static_reshape_dims(sizes)
    if target is not None:
        return _ints(target)
    shape = apply_op("Shape", x)
    return apply_op("Pack", [apply_op("Prod", apply_op("GatherV2", shape, _ints(part), _ints(0)), _ints(0))
                             for part in (reduced, other)], axis=0)


@family.gradient("Cumsum")
@dense_gradients
def _cumsum_grad(op, grad):
    return apply_op("Cumsum", grad, op.inputs[1], exclusive=op.get_attr("exclusive"),
                    reverse=not op.get_attr("reverse")), None


@family.gradient("Cumprod")
@dense_gradients
def _cumprod_grad(op, grad):
    """The reverse cumulative sum of conj(prod) * grad divided by conj(x) (TensorFlow's rule,
    conjugated for complex x), exact wherever x is not 0. At the first zero of each scan the
    division fails (TensorFlow's gradient is wrong there): its gradient is the same sum over
    the products taken with that zero replaced by 1 (its derivative's factors). Zeros after
    the first get 0, which is right: an earlier factor is 0."""
    x, axis = op.inputs
    exclusive, reverse = op.get_attr("exclusive"), op.get_attr("reverse")
    is_zero = apply_op("Equal", x, scalar(0, x))
    zeros_before = apply_op("Cumsum", apply_op("Cast", is_zero, DstT=dtypes.int32), axis, exclusive=True,
                            reverse=reverse)
    first_zero = apply_op("LogicalAnd", is_zero, apply_op("Equal", zeros_before, _ints(0)))
    x_without_first_zero = apply_op("SelectV2", first_zero, scalar(1, x), x)

    def reverse_sum_of_products(factors: Tensor) -> Tensor:
        prod = apply_op("Cumprod", factors, axis, exclusive=exclusive, reverse=reverse)
        return apply_op("Cumsum", conj(prod) * grad, axis, exclusive=exclusive, reverse=not reverse)
    divided = apply_op("DivNoNan", reverse_sum_of_products(x), conj(x))
    return apply_op("SelectV2", first_zero, reverse_sum_of_products(x_without_first_zero), divided), None


# -- segments ---------------------------------------------------------------------------------------

def _gather_drop_negatives(params: Tensor, ids: Tensor | None, clipped: Tensor | None = None,
                           positive: Tensor | None = None):
    """params gathered at the segment ids, zero for negative ids (dropped by the forward op);
    also the clipped ids and the mask of non-negative ids (shaped to broadcast), for reuse."""
    if clipped is None:
        clipped = apply_op("Maximum", ids, scalar(0, ids))
    gathered: Tensor = apply_op("GatherV2", params, clipped, _ints(0))
    if positive is None:
        assert ids is not None, "the mask of non-negative ids needs the ids"
        positive = apply_op("GreaterEqual", ids, scalar(0, ids))
        if ids.shape.rank is not None and gathered.shape.rank is not None:
            for _ in range(gathered.shape.rank - ids.shape.rank):
                positive = apply_op("ExpandDims", positive, _ints(-1))
        else:
            extra = apply_op("Rank", gathered) - apply_op("Rank", ids)
            ones = apply_op("Fill", apply_op("Reshape", extra, _ints([1])), _ints(1))
            positive = apply_op("Reshape", positive, apply_op("ConcatV2", [apply_op("Shape", ids), ones], _ints(0)))
    return apply_op("SelectV2", positive, gathered, scalar(0, gathered)), clipped, positive


@family.gradient("UnsortedSegmentSum")
@dense_gradients
def _unsorted_segment_sum_grad(op, grad):
    return _gather_drop_negatives(grad, op.inputs[1])[0], None, None


@family.gradient("UnsortedSegmentMax", "UnsortedSegmentMin")
@dense_gradients
def _unsorted_segment_min_max_grad(op, grad):
    """Shared equally by the elements of a segment equal to its extreme value."""
    data, ids, count = op.inputs
    extremes, clipped, positive = _gather_drop_negatives(op.outputs[0], ids)
    selected = apply_op("LogicalAnd", apply_op("Equal", data, extremes), positive)
    shares = apply_op("UnsortedSegmentSum", apply_op("Cast", selected, DstT=grad.dtype.base_dtype), ids, count)
    gathered = _gather_drop_negatives(grad / shares, None, clipped, positive)[0]
    return apply_op("SelectV2", selected, gathered, scalar(0, gathered)), None, None


@family.gradient("UnsortedSegmentProd")
@dense_gradients
def _unsorted_segment_prod_grad(op, grad):
    """The product of the segment's other elements: prod / x without zeros; with one zero in
    the segment, the product of the non-zero elements for the zero and 0 for the others; with
    several zeros, 0."""
    data, ids, count = op.inputs
    is_zero = apply_op("Equal", data, scalar(0, data))
    zeros_per_segment = apply_op("UnsortedSegmentSum", apply_op("Cast", is_zero, DstT=dtypes.int32), ids, count)
    grad = apply_op("SelectV2", apply_op("Greater", zeros_per_segment, _ints(1)), scalar(0, grad), grad)
    non_zero = apply_op("SelectV2", is_zero, scalar(1, data), data)
    non_zero_prod = apply_op("UnsortedSegmentProd", non_zero, ids, count)
    clipped = apply_op("Maximum", ids, scalar(0, ids))
    prod = apply_op("GatherV2", op.outputs[0], clipped, _ints(0))
    prod_of_non_zero = apply_op("GatherV2", non_zero_prod, clipped, _ints(0))
    partial = apply_op("SelectV2", is_zero, prod_of_non_zero, prod / data)
    return _gather_drop_negatives(grad, ids, clipped)[0] * partial, None, None


@family.gradient("SegmentSum")
@dense_gradients
def _segment_sum_grad(op, grad):
    return apply_op("GatherV2", grad, op.inputs[1], _ints(0)), None


@family.gradient("SegmentMean")
@dense_gradients
def _segment_mean_grad(op, grad):
    data, ids = op.inputs
    if ids.shape.is_fully_defined() and data.shape.rank is not None:
        ones_shape = _ints(list(ids.shape.dims) + [1] * (data.shape.rank - 1))
    else:
        trailing = apply_op("Fill", apply_op("Reshape", apply_op("Rank", data) - _ints(1),
                                             _ints([1])), _ints(1))
        ones_shape = apply_op("ConcatV2", [apply_op("Shape", ids), trailing], _ints(0))
    ones = apply_op("Fill", ones_shape, scalar(1, grad))
    scaled = grad / apply_op("SegmentSum", ones, ids)
    return apply_op("GatherV2", scaled, ids, _ints(0)), None


# -- matrix products ----------------------------------------------------------------------------------

# (transpose_a, transpose_b) -> the products giving grad_a and grad_b: (left, right, transpose
# left, transpose right), with 'g' the output's gradient and 'a', 'b' the inputs (conjugated
# for MatMul, whose flags transpose; BatchMatMul's flags take adjoints).
_PRODUCT_GRADS = {
    (False, False): (("g", "b", False, True), ("a", "g", True, False)),
    (False, True): (("g", "b", False, False), ("g", "a", True, False)),
    (True, False): (("b", "g", False, True), ("a", "g", False, False)),
    (True, True): (("b", "g", True, True), ("g", "a", True, True)),
}


@family.gradient("MatMul")
@dense_gradients
def _matmul_grad(op, grad):
    operands = {"g": grad, "a": conj(op.inputs[0]), "b": conj(op.inputs[1])}
    plans = _PRODUCT_GRADS[(op.get_attr("transpose_a"), op.get_attr("transpose_b"))]
    out = []
    for (left, right, t_left, t_right), flag in zip(plans, ("grad_a", "grad_b")):
        out.append(apply_op("MatMul", operands[left], operands[right], transpose_a=t_left, transpose_b=t_right,
                            **{flag: True}))
    return out


@family.iteration_sum("MatMul")
def _matmul_iteration_sum(op):
    """In a loop gradient, sum_t a_t^T b_t (the gradient of a loop-invariant weight) is A^T B
    of the iterations' rows stacked: one MatMul after the loop instead of one per step."""
    a, b = op.inputs
    if not op.get_attr("transpose_a") or op.get_attr("transpose_b"):
        return None
    if not (rules.collectable(a) and rules.collectable(b) and a.shape.rank == 2 and b.shape.rank == 2):
        return None

    def build(stacked):
        rows_a = apply_op("Reshape", stacked(a), _ints([-1, a.shape.dims[1]]))
        rows_b = apply_op("Reshape", stacked(b), _ints([-1, b.shape.dims[1]]))
        return apply_op("MatMul", rows_a, rows_b, transpose_a=True)
    return [a, b], build


@family.iteration_stack("MatMul")
def _matmul_iteration_stack(op, outside):
    """a_t b for every iteration, with b loop-invariant: the iterations' a_t stacked, as rows,
    times b, one product after the loop (a loop gradient's ``dz_t W^T`` for an input read per
    iteration, which then need not be computed and kept per iteration)."""
    a, b = op.inputs
    invariant = outside(b)
    if invariant is None or op.get_attr("transpose_a") or op.control_inputs:
        return None
    if not (rules.collectable(a) and a.shape.rank == 2 and op.outputs[0].shape.is_fully_defined()):
        return None
    out_dims = op.outputs[0].shape.as_list()

    def build(stacked):
        rows = apply_op("Reshape", stacked(a), _ints([-1, a.shape.dims[1]]))
        product = apply_op("MatMul", rows, invariant, transpose_b=op.get_attr("transpose_b"))
        return apply_op("Reshape", product, _ints([-1, *out_dims]))
    return [a], build


@family.gradient("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
@dense_gradients
def _batch_matmul_grad(op, grad):
    """The adjoint products of the MatMul rule; for V2 and V3, summed over the batch dims an
    operand was broadcast along."""
    x, y = op.inputs
    operands = {"g": grad, "a": x, "b": y}
    plans = _PRODUCT_GRADS[(op.get_attr("adj_x"), op.get_attr("adj_y"))]
    grads = []
    for t, (left, right, adj_left, adj_right), flag in zip((x, y), plans, ("grad_x", "grad_y")):
        if not is_floating(t):
            grads.append(None)
            continue
        dtype = t.dtype.base_dtype
        left, right = (_as_type(operands[k], dtype) for k in (left, right))
        attrs = {"adj_x": adj_left, "adj_y": adj_right, flag: True}
        if op.type == "BatchMatMulV3":
            attrs.update(Ta=dtype, Tb=dtype, Tout=dtype)
        grads.append(apply_op(op.type, left, right, **attrs))
    if op.type == "BatchMatMul":
        return grads
    return unbroadcast_batch(x, y, *grads)


def _as_type(t: Tensor, dtype) -> Tensor:
    return t if t.known_dtype.base_dtype is dtype else apply_op("Cast", t, DstT=dtype)


@family.gradient("MatrixInverse")
@dense_gradients
def _matrix_inverse_grad(op, grad):
    """For y = inv(x): -y^H grad y^H (with adjoint: -y grad^H y, adjointed)."""
    inverse = op.outputs[0]
    adjoint = op.get_attr("adjoint")
    inner = apply_op("BatchMatMulV2", grad, inverse, adj_x=adjoint, adj_y=not adjoint)
    return -apply_op("BatchMatMulV2", inverse, inner, adj_x=not adjoint)


@family.gradient("MatrixDeterminant")
@dense_gradients
def _matrix_determinant_grad(op, grad):
    """grad * conj(det(x)) * inv(x)^H. (TensorFlow's rule omits the conj, which for complex x
    contradicts its convention: its gradient is then wrong.)"""
    x, det = op.inputs[0], op.outputs[0]
    inverse_adjoint = apply_op("MatrixInverse", x, adjoint=True)
    scale = grad * conj(det)
    for _ in range(2):
        scale = apply_op("ExpandDims", scale, _ints(-1))
    return scale * inverse_adjoint


# -- einsum -----------------------------------------------------------------------------------------

_ELLIPSIS = "..."


@family.gradient("Einsum")
@dense_gradients
def _einsum_grad(op, grad):
    """TensorFlow's rule, for any number of operands. The gradient of operand i is the einsum
    of the output's gradient with the other operands into operand i's labels; labels that
    appear only in operand i (summed by the forward op) are then broadcast back (with another
    einsum for repeated labels); ellipsis dims an operand was broadcast along are summed."""
    equation = op.get_attr("equation").decode().replace(" ", "")
    if equation.count("->") != 1:
        raise GradientError(f"{describe_node(op.name, op.type)}: cannot differentiate equation {equation!r}")
    lhs, out_subs = equation.split("->")
    terms = lhs.split(",")
    if _ELLIPSIS in out_subs:
        # The gradient's equation needs the ellipsis in every operand: one without it gets an
        # empty one (at the end), then the broadcast dims are summed away.
        terms = [t if _ELLIPSIS in t else t + _ELLIPSIS for t in terms]
    else:
        # Without one in the output, an operand's ellipsis can only be empty (the forward op
        # refuses any other).
        terms = [t.replace(_ELLIPSIS, "") for t in terms]
    inputs = list(op.inputs)
    conjugated = [conj(t) for t in inputs] if len(inputs) > 1 else inputs
    grads = []
    for i, (x, subs) in enumerate(zip(inputs, terms)):
        others = [j for j in range(len(inputs)) if j != i]
        other_labels = set(out_subs).union(*(terms[j] for j in others))
        reduced = sorted(set(subs) - other_labels - {"."})
        left = "".join(c for c in subs if c not in reduced)
        if others or left != out_subs:
            equation_i = ",".join([out_subs] + [terms[j] for j in others]) + "->" + left
            g = apply_op("Einsum", [grad] + [conjugated[j] for j in others], equation=equation_i)
        else:
            g = grad
        if reduced:
            g = _einsum_unreduce(g, left, subs, x, reduced)
        if _ELLIPSIS in out_subs:
            g = _einsum_unbroadcast(g, x, subs, op.outputs[0], out_subs)
        grads.append(g)
    return grads


def _label_axis(subs: str, label: str) -> int:
    """The axis of ``label``'s first occurrence: from the front before an ellipsis, negative
    (from the back) after it."""
    head, _, tail = subs.partition(_ELLIPSIS)
    if label in head:
        return head.index(label)
    return tail.index(label) - len(tail)


def _has_repeated_label(subs: str) -> bool:
    labels = subs.replace(".", "")
    return len(set(labels)) < len(labels)


class _Dims:
    """The dims of a tensor of known rank: ints where static, scalar int32 tensors (slices of
    one Shape node, made on first need) where not."""

    def __init__(self, t: Tensor):
        self.t = t
        self._shape = None

    def __getitem__(self, axis: int):
        d = self.t.shape.as_list()[axis]
        if d is not None:
            return d
        if self._shape is None:
            self._shape = apply_op("Shape", self.t)
        return apply_op("StridedSlice", self._shape, _ints([axis]), _ints([axis + 1]), _ints([1]),
                        shrink_axis_mask=1)


def _dims_vector(dims: list) -> Tensor:
    """A shape vector from ints and scalar int32 tensors: a Const when all are ints."""
    if not any(isinstance(d, Tensor) for d in dims):
        return _ints(dims)
    return apply_op("Pack", [d if isinstance(d, Tensor) else _ints(d) for d in dims], axis=0)


def _einsum_unreduce(g: Tensor, left: str, subs: str, x: Tensor, reduced: list[str]) -> Tensor:
    """The gradient for x (labels ``subs``) from ``g`` (labels ``left``: ``subs`` without the
    ``reduced`` labels, which the forward op summed over)."""
    axes = [_label_axis(subs, label) for label in reduced]
    if "." not in subs and not _has_repeated_label(subs):
        # g with 1 at the reduced axes, broadcast to x's shape.
        rank = len(subs)
        kept = [a % rank for a in axes]
        if x.shape.rank is not None:
            target = rules.static_reshape_dims([1 if i in kept else d for i, d in enumerate(x.shape.as_list())])
            if target is not None:
                return apply_op("BroadcastTo", apply_op("Reshape", g, _ints(target)), rules.shape_vector(x))
        shape = apply_op("Shape", x)
        ones = constant(np.isin(np.arange(rank), kept))
        return apply_op("BroadcastTo", apply_op("Reshape", g, apply_op("SelectV2", ones, _ints(1), shape)), shape)
    # Repeated labels (generalized traces) or an ellipsis (whose dims in g are the output's):
    # g broadcast along new leading axes for the reduced labels, then an einsum from
    # '<reduced><left>' to the operand's labels puts every element in place.
    if x.shape.rank is not None:
        x_dims = _Dims(x)
        reduced_dims = _dims_vector([x_dims[a] for a in axes])
    else:
        shape = apply_op("Shape", x)
        reduced_dims = apply_op("GatherV2", shape, apply_op("FloorMod", _ints(axes), apply_op("Size", shape)),
                                _ints(0))
    expanded = g
    for _ in reduced:
        expanded = apply_op("ExpandDims", expanded, _ints(0))
    known_dims = constant_value(reduced_dims)
    shape_target: Tensor
    if g.shape.is_fully_defined() and known_dims is not None:
        shape_target = _ints(list(known_dims) + g.shape.as_list())
    else:
        shape_target = apply_op("ConcatV2", [reduced_dims, apply_op("Shape", g)], _ints(0))
    broadcast = apply_op("BroadcastTo", expanded, shape_target)
    return apply_op("Einsum", [broadcast], equation="".join(reduced) + left + "->" + subs)


def _einsum_unbroadcast(g: Tensor, x: Tensor, subs: str, out: Tensor, out_subs: str) -> Tensor:
    """``g`` (x's labels, with the output's ellipsis dims) summed over the ellipsis dims x was
    broadcast along, and reshaped to x's shape."""
    start = subs.index(_ELLIPSIS)
    after = len(subs) - start - len(_ELLIPSIS)
    out_start = out_subs.index(_ELLIPSIS)
    out_after = len(out_subs) - out_start - len(_ELLIPSIS)
    if x.shape.rank is not None and out.shape.rank is not None:
        x_batch = x.shape[start:x.shape.rank - after]
        out_batch = out.shape[out_start:out.shape.rank - out_after]
        axes = broadcast_axes(x_batch, out_batch)
        if axes is not None:
            if x_batch.rank == out_batch.rank and not axes[0]:
                return g
            lead = len(out_batch.as_list()) - len(x_batch.as_list())
            summed = sorted(set(range(lead)) | set(axes[0]))
            return rules.reshape_like(apply_op("Sum", g, _ints([start + a for a in summed])), x)

    def batch_shape(t: Tensor, begin: int, trailing: int) -> Tensor:
        stop: Tensor = apply_op("StridedSlice", apply_op("Shape", t), _ints([begin]),
                                _ints([-trailing if trailing else 0]), _ints([1]), end_mask=0 if trailing else 1)
        return stop
    rx, _ = apply_op("BroadcastGradientArgs", batch_shape(x, start, after), batch_shape(out, out_start, out_after))
    return apply_op("Reshape", apply_op("Sum", g, rx + _ints(start)), apply_op("Shape", x))
