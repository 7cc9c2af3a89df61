"""NumPy kernels of the math family's elementwise ops: unary functions, binary arithmetic,
comparisons, selection, gradient helpers and Cast (see gradreg.registry.kernels for the
contract). Reductions, products, sequences and random ops live in the sibling modules."""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from gradreg.errors import ExecutionError, describe_node
from gradreg.model import dtypes
from gradreg.registry.kernels import IDENTITY, broadcasting, variant_add, variant_conj
from gradreg_plugins.math import family
from gradreg_plugins.math import numerics as nm


def kernel(op_type: str):
    """``family.kernel`` for this family: bfloat16 results, which NumPy computes in float32,
    are rounded to bfloat16 as TensorFlow's kernels do."""
    def register(factory):
        def rounding_factory(op, ctx):
            compute = factory(op, ctx)
            if callable(compute) and any(t.dtype is dtypes.bfloat16 for t in op.outputs):
                return lambda *args: nm.round_bfloat16(compute(*args))
            return compute
        family.kernel(op_type)(rounding_factory)
        return factory
    return register


def unsupported(op, message: str) -> ExecutionError:
    """The error for an attr combination gradreg cannot run (raised when the plan is compiled)."""
    return ExecutionError(f"{describe_node(op.name, op.type)}: {message}", op.name, op.type)


def is_int(dtype) -> bool:
    return dtype.kind in "iuq"


def unary(op_type: str, fn) -> None:
    kernel(op_type)(lambda op, ctx: fn)


def unary_by_type(op_type: str, choose) -> None:
    """A unary kernel picked once per node from its ``T`` attr: ``choose(dtype) -> fn``."""
    kernel(op_type)(lambda op, ctx: choose(op.get_attr("T")))


def binary(op_type: str, fn) -> None:
    kernel(op_type)(lambda op, ctx: broadcasting(fn, op, ctx))


def binary_by_type(op_type: str, choose) -> None:
    """A broadcasting binary kernel picked from the node's ``T``; ``choose`` may return None
    for types TensorFlow has no kernel for."""
    def factory(op, ctx):
        dtype = op.get_attr("T")
        fn = choose(dtype)
        if fn is None:
            raise unsupported(op, f"{op.type} is not defined for {dtype.name} (TensorFlow has no kernel for it)")
        return broadcasting(fn, op, ctx)
    kernel(op_type)(factory)


# -- unary ---------------------------------------------------------------------------------

for _op_type, _fn in {
    "Abs": np.abs, "Neg": np.negative, "Sign": np.sign, "Square": np.square, "Sqrt": np.sqrt,
    "Exp": np.exp, "Expm1": np.expm1, "Log": np.log, "Log1p": np.log1p,
    "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos, "Atan": np.arctan,
    "Sinh": np.sinh, "Cosh": np.cosh, "Tanh": np.tanh, "Asinh": np.arcsinh, "Acosh": np.arccosh,
    "Atanh": np.arctanh, "Floor": np.floor, "Ceil": np.ceil, "Rint": np.rint,
    "IsFinite": np.isfinite, "IsNan": np.isnan, "IsInf": np.isinf, "LogicalNot": np.logical_not,
}.items():
    unary(_op_type, _fn)


def _rsqrt(x):
    return np.reciprocal(np.sqrt(x))


def _sigmoid(x):
    if x.dtype.kind == "c":
        return 1 / (1 + np.exp(-x))
    # exp of a non-positive argument never overflows
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def check_divisor(y) -> None:
    if np.any(y == 0):
        raise ValueError("Integer division by zero")


def _checked_divisor(fn):
    """An integer division-like ``fn`` that refuses a zero divisor, as TensorFlow does."""
    def compute(x, y):
        check_divisor(y)
        return fn(x, y)
    return compute


def truncating_divide(x, y):
    """Integer division rounding toward zero (C semantics); TensorFlow refuses a zero divisor."""
    check_divisor(y)
    q = np.floor_divide(x, y)
    if q.dtype.kind == "i":
        q = q + ((np.remainder(x, y) != 0) & ((x < 0) != (y < 0))).astype(q.dtype)
    return q


def _reciprocal(dtype):
    if is_int(dtype):
        return lambda x: truncating_divide(np.ones_like(x), x)
    return np.reciprocal


def _round(dtype):
    # Round half to even (np.round); integers are already round.
    return (lambda x: x) if is_int(dtype) else np.round


def _via_float64(fn):
    """A float64 special function applied to any float type (computed in float64, rounded back)."""
    def compute(x):
        return fn(x.astype(np.float64)).astype(x.dtype)
    return compute


unary("Rsqrt", _rsqrt)
unary("Sigmoid", _sigmoid)
unary_by_type("Reciprocal", _reciprocal)
unary_by_type("Inv", _reciprocal)
unary_by_type("Round", _round)
unary("Erf", _via_float64(nm.erf))
unary("Erfc", _via_float64(nm.erfc))
unary("Lgamma", _via_float64(nm.lgamma))
unary("Digamma", _via_float64(nm.digamma))


def _complex_part(fn):
    def factory(op, ctx):
        tout = op.get_attr("Tout").storage
        return lambda x: np.asarray(fn(x)).astype(tout, copy=False)
    return factory


kernel("Real")(_complex_part(np.real))
kernel("Imag")(_complex_part(np.imag))
kernel("Angle")(_complex_part(np.angle))
kernel("ComplexAbs")(_complex_part(np.abs))


@kernel("Conj")
def _conj(op, ctx):
    if op.get_attr("T") is dtypes.variant:    # a variant that can be conjugated (CSR matrices)
        return lambda value: variant_conj(value, op)
    return np.conj


# -- binary arithmetic -----------------------------------------------------------------------

binary("AddV2", np.add)
binary("Add", np.add)   # also concatenates strings (object arrays of bytes)
binary("Sub", np.subtract)
binary("Mul", np.multiply)
binary("Maximum", np.maximum)   # NaN wins, as in TensorFlow
binary("Minimum", np.minimum)
binary("Atan2", np.arctan2)


def _divide(dtype):
    return truncating_divide if is_int(dtype) else np.divide


def _floor_divide(dtype):
    if is_int(dtype):
        return _checked_divisor(np.floor_divide)
    if dtype.is_complex:
        return None
    # floor(x / y), not Python's floor division (which gives 1.0 // 0.1 == 9.0)
    return lambda x, y: np.floor(np.divide(x, y))


def _floor_mod(dtype):
    if is_int(dtype):
        return _checked_divisor(np.remainder)

    def compute(x, y):
        # TensorFlow: the C remainder, moved into the divisor's sign.
        r = np.fmod(x, y)
        return np.where((r != 0) & ((y < 0) != (r < 0)), r + y, r)
    return compute


def _truncate_divide(dtype):
    if is_int(dtype):
        return truncating_divide
    if dtype.is_complex:
        return None
    return lambda x, y: np.trunc(np.divide(x, y))


def _truncate_mod(dtype):
    if is_int(dtype):
        return _checked_divisor(np.fmod)
    return np.fmod


def _pow(dtype):
    if not is_int(dtype):
        return np.power

    def compute(x, y):
        if np.any(y < 0):
            raise ValueError("Integers to negative integer powers are not allowed")
        return np.power(x, y)
    return compute


def _zero_where(condition_of, value_of):
    """``x op y`` except 0 where ``condition_of(x, y)`` (DivNoNan, MulNoNan, Xlogy, ...)."""
    def compute(x, y):
        value = value_of(x, y)
        return np.where(condition_of(x, y), np.zeros((), value.dtype), value)
    return compute


def _squared_difference(dtype):
    if dtype.is_complex:
        return lambda x, y: (lambda d: d * np.conj(d))(x - y)
    return lambda x, y: np.square(x - y)


def _complex(op, ctx):
    tout = op.get_attr("Tout").storage

    def compute(real, imag):
        out = np.empty(np.broadcast_shapes(np.shape(real), np.shape(imag)), dtype=tout)
        out.real = real
        out.imag = imag
        return out
    return broadcasting(compute, op, ctx)


binary_by_type("Div", _divide)
binary_by_type("RealDiv", _divide)
binary_by_type("FloorDiv", _floor_divide)
binary_by_type("FloorMod", _floor_mod)
binary_by_type("TruncateDiv", _truncate_divide)
binary_by_type("TruncateMod", _truncate_mod)
binary_by_type("Mod", _truncate_mod)
binary_by_type("Pow", _pow)
binary_by_type("SquaredDifference", _squared_difference)
binary("DivNoNan", _zero_where(lambda x, y: y == 0, np.divide))
binary("MulNoNan", _zero_where(lambda x, y: y == 0, np.multiply))
binary("Xlogy", _zero_where(lambda x, y: x == 0, lambda x, y: x * np.log(y)))
binary("Xdivy", _zero_where(lambda x, y: x == 0, np.divide))
binary("Xlog1py", _zero_where(lambda x, y: x == 0, lambda x, y: x * np.log1p(y)))
kernel("Complex")(_complex)


# -- comparisons and logic ---------------------------------------------------------------------

_COMPARISONS: dict[str, Any] = {"Less": np.less, "LessEqual": np.less_equal, "Greater": np.greater,
                                "GreaterEqual": np.greater_equal, "LogicalAnd": np.logical_and,
                                "LogicalOr": np.logical_or}
for _op_type, _binary_fn in _COMPARISONS.items():
    binary(_op_type, _binary_fn)


def _equality(fn, when_incompatible: bool):
    def factory(op, ctx):
        if op.get_attr("incompatible_shape_error"):
            return broadcasting(fn, op, ctx)
        guarded = broadcasting(fn, op, ctx)

        def compute(x, y):
            try:
                np.broadcast_shapes(np.shape(x), np.shape(y))
            except ValueError:
                return np.array(when_incompatible)   # TensorFlow's answer for shapes that cannot broadcast
            return guarded(x, y)
        return compute
    return factory


kernel("Equal")(_equality(np.equal, False))
kernel("NotEqual")(_equality(np.not_equal, True))


@kernel("ApproximateEqual")
def _approximate_equal(op, ctx):
    tolerance = op.get_attr("tolerance")

    def compute(x, y):
        if np.shape(x) != np.shape(y):
            raise ValueError(f"x and y must be of the same shape: {list(np.shape(x))} vs {list(np.shape(y))}")
        return np.abs(x - y) <= tolerance   # TensorFlow's kernel compares with <=
    return compute


# -- selection, sums, clipping -----------------------------------------------------------------

def _select(condition, t, e):
    """Select (v1): the condition is t's shape, a scalar (picks all of t or e), or a vector
    picking rows of t and e; no other broadcasting."""
    t_shape, e_shape = np.shape(t), np.shape(e)
    if t_shape != e_shape:
        raise ValueError(f"'t' and 'e' must have the same shape: {list(t_shape)} vs {list(e_shape)}")
    c_shape = np.shape(condition)
    if c_shape == t_shape:
        return np.where(condition, t, e)
    if not c_shape:
        return t if condition else e
    if len(c_shape) == 1 and len(t_shape) >= 1 and c_shape[0] == t_shape[0]:
        return np.where(np.reshape(condition, c_shape + (1,) * (len(t_shape) - 1)), t, e)
    raise ValueError(f"'condition' must be a scalar, a vector of length {t_shape[0] if t_shape else 1} "
                     f"or of shape {list(t_shape)}; got shape {list(c_shape)}")


kernel("Select")(lambda op, ctx: _select)
binary("SelectV2", np.where)


@kernel("AddN")
def _add_n(op, ctx):
    if op.get_attr("T") is dtypes.variant:   # TensorLists, ONNX sequences and optionals
        return _add_n_variant(op)

    def compute(*inputs):
        shape = np.shape(inputs[0])
        for x in inputs[1:]:
            if np.shape(x) != shape:
                raise ValueError(f"inputs must have the same shape: {list(shape)} vs {list(np.shape(x))}")
        return functools.reduce(np.add, inputs)
    return compute


def _add_n_variant(op):
    """AddN of variant values: a family's VariantValue (the control-flow family's TensorLists)
    adds itself (variant_add); Python lists of arrays (ONNX sequences, as the onnx family holds
    them: the gradients of a sequence with several consumers) and optionals (None or an array)
    are summed element by element."""
    def add(a, b):
        if a is None or b is None:
            return b if a is None else a
        if hasattr(a, "add") or (isinstance(a, np.ndarray) and a.dtype == object):
            return variant_add(a, b, op)
        if isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                raise ValueError(f"sequences of lengths {len(a)} and {len(b)} cannot be added")
            return [add(x, y) for x, y in zip(a, b)]
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            return a + b
        raise unsupported(op, f"AddN of variant values of type {type(a).__name__} is not supported")
    return lambda *inputs: functools.reduce(add, inputs)


def _clip_by_value(t, low, high):
    shape = np.shape(t)
    for name, bound in (("clip_value_min", low), ("clip_value_max", high)):
        if np.ndim(bound) and np.shape(bound) != shape:
            raise ValueError(f"{name} must be a scalar or have the input's shape {list(shape)}; "
                             f"got {list(np.shape(bound))}")
    # min then max, as TensorFlow: NaN stays NaN and min > max gives min.
    return np.maximum(np.minimum(t, high), low)


kernel("ClipByValue")(lambda op, ctx: _clip_by_value)


# -- gradient helpers: f(y, dy) with y the forward output ------------------------------------------

def _gradient_helper(op_type: str, real_fn, complex_fn) -> None:
    @kernel(op_type)
    def factory(op, ctx):
        fn = complex_fn if op.get_attr("T").is_complex else real_fn
        y_shape, dy_shape = op.inputs[0].shape, op.inputs[1].shape
        if y_shape.is_fully_defined() and y_shape == dy_shape:
            return fn   # the shapes agree by construction

        def compute(y, dy):
            if np.shape(y) != np.shape(dy):
                raise ValueError(f"y and dy must have the same shape: {list(np.shape(y))} vs {list(np.shape(dy))}")
            return fn(y, dy)
        return compute


# TensorFlow conjugates complex y for Tanh and Sigmoid in the gradient rule, not in these ops.
_gradient_helper("TanhGrad", lambda y, dy: dy * (1 - y * y), lambda y, dy: dy * (1 - y * y))
_gradient_helper("SigmoidGrad", lambda y, dy: dy * (y * (1 - y)), lambda y, dy: dy * (y * (1 - y)))
_gradient_helper("SqrtGrad", lambda y, dy: dy * 0.5 / y, lambda y, dy: dy * 0.5 / np.conj(y))
_gradient_helper("RsqrtGrad", lambda y, dy: dy * (-0.5 * y * y * y), lambda y, dy: dy * np.conj(-0.5 * y * y * y))
_gradient_helper("ReciprocalGrad", lambda y, dy: -dy * (y * y), lambda y, dy: -dy * np.conj(y * y))
_gradient_helper("InvGrad", lambda y, dy: -dy * (y * y), lambda y, dy: -dy * np.conj(y * y))


# -- Cast --------------------------------------------------------------------------------------

def cast_array(x: np.ndarray, src, dst, truncate: bool) -> np.ndarray:
    """``x`` (of gradreg dtype ``src``) converted to ``dst`` with TensorFlow's rules."""
    x = np.asarray(x)
    if dst.is_bool:
        return (x.real if src.is_complex else x) != 0   # complex: the real part decides, as TF
    if src.is_complex and not dst.is_complex:
        x = x.real
    storage = dst.storage
    if is_int(dst):
        return nm.float_to_int(x, storage) if x.dtype.kind == "f" else x.astype(storage)
    if dst is dtypes.bfloat16:
        if x.dtype.kind == "f" and truncate:
            narrowed = nm.truncate_float(x, np.dtype(np.float32)) if x.dtype.itemsize > 4 else x.astype(np.float32)
            return nm.truncate_bfloat16(narrowed)
        return nm.round_bfloat16(x.astype(np.float32))
    if truncate and x.dtype.kind == "f" and x.dtype.itemsize > storage.itemsize and storage.kind == "f":
        return nm.truncate_float(x, storage)
    return x.astype(storage)


@kernel("Cast")
def _cast(op, ctx):
    src, dst, truncate = op.get_attr("SrcT"), op.get_attr("DstT"), op.get_attr("Truncate")
    if src is dst:
        return IDENTITY
    for t in (src, dst):
        if t.kind in "srvx":
            raise unsupported(op, f"Cast from {src.name} to {dst.name} is not supported")
    return lambda x: cast_array(x, src, dst, truncate)
