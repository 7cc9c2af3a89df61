"""Fused elementwise loops as native kernels: the loops gradreg.backends.numba.codegen writes
for numba, traced instead (gradreg.backends.native.dsl) and compiled by LLVM.

Each op's description is a scalar expression template (gradreg.backends.numba.description);
:func:`lower` evaluates it on traced values with numba's typing of scalars (an int and a
float32 give a float64, as in NumPy) and the math library's functions (mathlib, the float32
ones the same polynomials as numba's). The kernels take the arguments numba's loops take, so
gradreg.backends.numba.kernels calls either:

* static (:func:`static_loop`): ``fused(lo, hi, n1, ..., *inputs, *outputs)``, every shape
  known, scalar inputs as NumPy scalars, arrays C-contiguous;
* general (:func:`general_loop`): ``fused(n, m, *inputs, *outputs)`` over flattened values,
  scalars as 1-element arrays, rows of ``m`` elements.

``sin`` and ``cos`` in float32 are numba's polynomials with its guard: a loop that met an
argument beyond 1024 (or not finite) runs again with the C library's functions. NumPy's other
functions are the C library's, as numba calls them. A template using what has no native form
here raises
:class:`~gradreg.backends.native.dsl.Unsupported`: numba builds that group, as before.
"""
from __future__ import annotations

import ast
import functools
import math
import string
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from gradreg.backends.native import mathlib
from gradreg.backends.native.dsl import BOOL, F32, F64, I32, I64, Array, Kernel, Type, Unsupported, Value, type_of
from gradreg.backends.numba.codegen import GUARDED, ROW, SCALAR, guarded, literal, row_dims
from gradreg.model import dtypes

if TYPE_CHECKING:
    from gradreg.backends.numba.kernels import FusedGroup
    from gradreg.model.graph import Tensor


class _Names(string.Formatter):
    """Fills a template with names: input i -> ``x{i}``, constants as numba's source writes
    them (``np.float32(0.5)``), library functions by their own name."""

    def __init__(self, dtype: np.dtype, consts: Sequence[tuple[str, float]]):
        self.dtype, self.consts = np.dtype(dtype), dict(consts)

    def get_field(self, key: str, args: Any, kwargs: Any) -> tuple[Any, str]:
        return self.get_value(key, args, kwargs), key

    def get_value(self, key: Any, args: Any, kwargs: Any) -> str:
        if isinstance(key, int) or key.isdigit():
            return f"x{int(key)}"
        if key.startswith("="):
            return literal(float(key[1:]), self.dtype)
        if key in self.consts:
            return literal(self.consts[key], self.dtype)
        return key     # a library function: lowered by name


def promote(a: Type, b: Type) -> Type:
    """numba's (and NumPy's) type of an arithmetic operation on scalars of types ``a`` and ``b``."""
    if a is b:
        return a
    if F64 in (a, b):
        return F64
    if F32 in (a, b):
        return F32 if BOOL in (a, b) else F64      # float32 and an int: float64
    return I64


def _same(x: Value, y: Value, t: Type | None = None) -> tuple[Value, Value]:
    t = t or promote(x.type, y.type)
    return x.cast(t), y.cast(t)


def _float(x: Value) -> Value:
    return x if x.type.is_float else x.cast(F64)


def _where(k: Kernel, c: Value, a: Value, b: Value) -> Value:
    a, b = _same(a, b)
    return k.where(c.cast(BOOL), a, b)


def _maximum(k: Kernel, x: Value, y: Value) -> Value:
    x, y = _same(x, y)
    return k.where((x >= y) | (x != x), x, y) if x.type.is_float else k.where(x >= y, x, y)


def _minimum(k: Kernel, x: Value, y: Value) -> Value:
    x, y = _same(x, y)
    return k.where((x <= y) | (x != x), x, y) if x.type.is_float else k.where(x <= y, x, y)


def _floormod(k: Kernel, x: Value, y: Value) -> Value:
    x, y = _same(x, y)
    if not x.type.is_float:
        raise Unsupported("floormod of ints")
    r = Value(k, x.type, k.b.frem(x.ir, y.ir))
    return k.where((r != 0.0) & ((y < 0.0) != (r < 0.0)), r + y, r)


def _fmod(k: Kernel, x: Value, y: Value) -> Value:
    x, y = _same(_float(x), _float(y))
    return Value(k, x.type, k.b.frem(x.ir, y.ir))     # C's fmod: the sign of x


def _expm1(k: Kernel, x: Value) -> Value:
    if x.type is F64:
        return k.libm("expm1", x)
    series = x + x * x * (k.const(0.5, F32) + x * (k.const(1.6666667e-1, F32) + x * (
        k.const(4.1666668e-2, F32) + x * (k.const(8.3333338e-3, F32) + x * (
            k.const(1.3888889e-3, F32) + x * k.const(1.9841270e-4, F32))))))
    return k.where(k.intrinsic("llvm.fabs", x) < 0.3, series, mathlib.exp(x) - 1.0)


def _log1p(k: Kernel, x: Value) -> Value:
    if x.type is F64:
        return k.libm("log1p", x)
    u = x + 1.0
    d = u - 1.0
    scaled = mathlib.log(u) * (x / k.where(d != 0.0, d, 1.0))
    y = k.where(d == 0.0, x, scaled)
    return k.where(x == float("inf"), x, y)


def _tanh(k: Kernel, x: Value) -> Value:
    if x.type is F64:
        return k.libm("tanh", x)
    z = x * x
    small = ((((k.const(-5.70498872745e-3, F32) * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z
              + 1.33314422036e-1) * z - 3.33332819422e-1) * z * x + x
    ax = k.intrinsic("llvm.fabs", x)
    large = 1.0 - k.const(2.0, F32) / (mathlib.exp(ax + ax) + 1.0)
    large = k.where(x < 0.0, -large, large)
    return k.where(ax < 0.625, small, large)


def _sigmoid(k: Kernel, x: Value) -> Value:
    if x.type is F32:
        e = mathlib.exp(-k.intrinsic("llvm.fabs", x))
        r = k.const(1.0, F32) / (e + 1.0)
        return k.where(x >= 0.0, r, e * r)
    x = _float(x)
    e = k.intrinsic("llvm.exp", -k.intrinsic("llvm.fabs", x))
    return k.where(x >= 0.0, k.const(1.0, F64) / (e + 1.0), e / (e + 1.0))


def _sign(k: Kernel, x: Value) -> Value:
    if not x.type.is_float:
        raise Unsupported("sign of an int")
    return k.where(x > 0.0, 1.0, k.where(x < 0.0, -1.0, x))     # 0 stays 0 (and -0), NaN stays NaN


def _unary_math(name: str) -> Callable[[Kernel, Value], Value]:
    def f(k: Kernel, x: Value) -> Value:
        x = _float(x)
        return getattr(mathlib, name)(x)
    return f


def _intrinsic(name: str) -> Callable[[Kernel, Value], Value]:
    def f(k: Kernel, x: Value) -> Value:
        return k.intrinsic(name, _float(x))
    return f


def _c_math(name: str) -> Callable[..., Value]:
    """The C library's ``name`` (``namef`` on float32), as numba calls it for np.<ufunc> on a
    scalar of that type."""
    def f(k: Kernel, *args: Value) -> Value:
        values = [_float(a) for a in args]
        if len(values) == 2:
            values = list(_same(values[0], values[1]))
        return k.libm(name + ("f" if values[0].type is F32 else ""), *values)
    return f


def _through_float64(name: str) -> Callable[[Kernel, Value], Value]:
    """numba mathlib's float32 erf, erfc and lgamma: the C library's float64 function."""
    def f(k: Kernel, x: Value) -> Value:
        x = _float(x)
        return k.libm(name, x.cast(F64)).cast(x.type)
    return f


def _abs(k: Kernel, x: Value) -> Value:
    if x.type.is_float:
        return k.intrinsic("llvm.fabs", x)
    if x.type.is_bool:
        return x
    return k.where(x < 0, -x, x)


def _isfinite(k: Kernel, x: Value) -> Value:
    x = _float(x)
    return k.intrinsic("llvm.fabs", x) < float("inf")


def _isinf(k: Kernel, x: Value) -> Value:
    x = _float(x)
    return k.intrinsic("llvm.fabs", x) == float("inf")


# What a template's calls may name: the library functions, builtins and np.* attributes.
_FUNCTIONS: dict[str, Callable[..., Value]] = {
    "where": _where, "maximum": _maximum, "minimum": _minimum, "floormod": _floormod,
    "exp": _unary_math("exp"), "log": _unary_math("log"), "expm1": lambda k, x: _expm1(k, _float(x)),
    "log1p": lambda k, x: _log1p(k, _float(x)), "tanh": lambda k, x: _tanh(k, _float(x)),
    "sigmoid": _sigmoid, "abs": _abs,
    "np.sqrt": _intrinsic("llvm.sqrt"), "np.floor": _intrinsic("llvm.floor"), "np.trunc": _intrinsic("llvm.trunc"),
    "np.ceil": _intrinsic("llvm.ceil"), "np.rint": _intrinsic("llvm.rint"), "np.fmod": _fmod,
    "np.exp": _unary_math("exp"), "np.log": _unary_math("log"), "np.sign": _sign,
    "np.isfinite": _isfinite, "np.isinf": _isinf, "np.abs": _abs,
    "np.sin": _intrinsic("llvm.sin"), "np.cos": _intrinsic("llvm.cos"), "np.tan": _c_math("tan"),
    "np.arcsin": _c_math("asin"), "np.arccos": _c_math("acos"), "np.arctan": _c_math("atan"),
    "np.sinh": _c_math("sinh"), "np.cosh": _c_math("cosh"), "np.arcsinh": _c_math("asinh"),
    "np.arccosh": _c_math("acosh"), "np.arctanh": _c_math("atanh"), "np.arctan2": _c_math("atan2"),
    "np.power": _c_math("pow"), "np.expm1": _c_math("expm1"), "np.log1p": _c_math("log1p"),
    "np.tanh": _c_math("tanh"),
    "erf": _through_float64("erf"), "erfc": _through_float64("erfc"), "lgamma": _through_float64("lgamma"),
}
_CASTS = {"np.float32": F32, "np.float64": F64, "np.bool_": BOOL, "np.int64": I64, "np.int32": I32}
_CONSTANTS = {"np.nan": math.nan, "np.inf": math.inf}


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


class _Lower:
    """Evaluates a filled template's syntax tree on traced values."""

    def __init__(self, k: Kernel, names: dict[str, Value], exact: bool = False):
        self.k, self.names, self.exact = k, names, exact

    def __call__(self, node: ast.expr) -> Value:
        handler = {ast.Constant: self.constant, ast.Name: self.name, ast.Attribute: self.name,
                   ast.UnaryOp: self.unary, ast.BinOp: self.binop, ast.Compare: self.compare,
                   ast.IfExp: self.ifexp, ast.Call: self.call}.get(type(node))
        if handler is None:
            raise Unsupported(f"the expression {ast.dump(node)[:60]}")
        return handler(node)

    def constant(self, node: Any) -> Value:
        v, k = node.value, self.k
        if isinstance(v, bool):
            return k.const(v, BOOL)
        if isinstance(v, int):
            return k.const(v, I64)
        if isinstance(v, float):
            return k.const(v, F64)
        raise Unsupported(f"the constant {v!r}")

    def name(self, node: Any) -> Value:
        name = _dotted(node)
        if name in self.names:
            return self.names[name]
        if name in _CONSTANTS:
            return self.k.const(_CONSTANTS[name], F64)
        raise Unsupported(f"the name {name}")

    def unary(self, node: Any) -> Value:
        x = self(node.operand)
        if isinstance(node.op, ast.USub):
            return -x if x.type is not BOOL else -(x.cast(I64))
        if isinstance(node.op, ast.UAdd):
            return x
        if isinstance(node.op, ast.Not) or isinstance(node.op, ast.Invert) and x.type is BOOL:
            return ~(x.cast(BOOL))
        raise Unsupported(f"the operator {type(node.op).__name__}")

    def binop(self, node: Any) -> Value:
        return self.binary(node.op, self(node.left), self(node.right))

    def compare(self, node: Any) -> Value:
        if len(node.ops) != 1:
            raise Unsupported("a chained comparison")
        x, y = _same(self(node.left), self(node.comparators[0]))
        op = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}.get(
            type(node.ops[0]))
        if op is None:
            raise Unsupported(f"the comparison {type(node.ops[0]).__name__}")
        return x.compare(y, op)

    def ifexp(self, node: Any) -> Value:
        return _where(self.k, self(node.test), self(node.body), self(node.orelse))

    def call(self, node: Any) -> Value:
        name = _dotted(node.func)
        if node.keywords:
            raise Unsupported(f"keywords in a call of {name}")
        args = [self(a) for a in node.args]
        if name in _CASTS and len(args) == 1:
            return args[0].cast(_CASTS[name])
        if name in ("sin", "cos") and len(args) == 1:
            x = _float(args[0])
            if x.type is F32 and not self.exact:
                return _sin_cos_f32(self.k, x, 0 if name == "sin" else 1)
            return self.k.intrinsic(f"llvm.{name}", x)     # the C library's (float32: sinf, cosf)
        if name in _FUNCTIONS:
            return _FUNCTIONS[name](self.k, *args)
        raise Unsupported(f"the function {name}")

    def binary(self, op: ast.operator, x: Value, y: Value) -> Value:
        if isinstance(op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
            if x.type.is_float or y.type.is_float:
                raise Unsupported("a bitwise operation on floats")
            t = BOOL if x.type is BOOL and y.type is BOOL else I64
            x, y = x.cast(t), y.cast(t)
            return {ast.BitAnd: x.__and__, ast.BitOr: x.__or__, ast.BitXor: x.__xor__}[type(op)](y)
        t = promote(x.type, y.type)
        if t is BOOL:
            t = I64
        if isinstance(op, ast.Div) and not t.is_float:
            t = F64
        x, y = x.cast(t), y.cast(t)
        if isinstance(op, ast.Add):
            return x + y
        if isinstance(op, ast.Sub):
            return x - y
        if isinstance(op, ast.Mult):
            return x * y
        if isinstance(op, ast.Div):
            return x / y
        raise Unsupported(f"the operator {type(op).__name__}")


@functools.lru_cache(maxsize=4096)
def _parsed(template: str, dtype: np.dtype, consts: tuple[tuple[str, float], ...], arity: int) -> ast.expr:
    text = _Names(dtype, consts).format(template, *range(arity))
    return ast.parse(text, mode="eval").body


def lower(k: Kernel, template: str, dtype: Any, consts: Sequence[tuple[str, float]], args: Sequence[Value],
          exact: bool = False) -> Value:
    """The value of an op's expression ``template`` (with constants of ``dtype``) on ``args``;
    ``exact``: the C library's sin and cos, not the float32 polynomials (codegen.GUARDED)."""
    tree = _parsed(template, np.dtype(dtype), tuple(consts), len(args))
    return _Lower(k, {f"x{i}": a for i, a in enumerate(args)}, exact)(tree)


# pi/2 as the sum of three float32s (numba's mathlib: _PIO2_1, _PIO2_2, _PIO2_3)
_PIO2 = (1.5707963705062866, -4.371139e-08, -1.7763568e-15)


def _sin_cos_f32(k: Kernel, x: Value, quadrant: int) -> Value:
    """numba mathlib's _sin_cos_f32: sin (quadrant 0) or cos (1) for |x| <= 1024, the same
    operations in the same order (x - k pi/2 in three fused multiply-adds, Cephes' polynomials)."""
    kf = k.intrinsic("llvm.floor", x * 0.63661975 + 0.5)
    r = x
    for part in _PIO2:
        r = k.intrinsic("llvm.fma", -kf, k.const(part, F32), r)
    q = (kf.cast(I32) + quadrant) & 3
    z = r * r
    s = r + r * z * (k.const(-1.6666654611e-1, F32) + z * (k.const(8.3321608736e-3, F32)
                                                            + z * k.const(-1.9515295891e-4, F32)))
    c = (k.const(1.0, F32) - z * 0.5) + z * z * (k.const(4.166664568298827e-2, F32) + z * (
        k.const(-1.388731625493765e-3, F32) + z * k.const(2.443315711809948e-5, F32)))
    y = k.where((q & 1) == 0, s, c)
    return k.where(q >= 2, -y, y)


def _op_values(k: Kernel, group: FusedGroup, state: dict[Tensor, int], values: dict[Tensor, Value],
               scalar: bool, exact: bool = False, guards: list[Value] | None = None) -> None:
    """Each op's value (into ``values``): those whose state is SCALAR when ``scalar`` (with
    the exact functions, as numba's source computes them before its loop), else the others, in
    the group's order; each cast to its tensor's type as numba's source does. ``guards``
    collects the inputs of the float32 ops that use a GUARDED function (codegen's rule)."""
    for op, description in zip(group.ops, group.descriptions):
        out = op.outputs[0]
        if (state[out] == SCALAR) != scalar:
            continue
        args = [values[t] for t in op.inputs]
        if guards is not None and np.dtype(description.dtype) == np.float32 \
                and any("{" + name + "}" in description.expr for name in GUARDED):
            guards.extend(args)
        v = lower(k, description.expr, description.dtype, description.consts, args, exact or scalar)
        if out.dtype is dtypes.bool_:
            if v.type is not BOOL:
                raise Unsupported("a bool output of a non-bool expression")
        else:
            v = v.cast(type_of(out.known_dtype.storage))
        values[out] = v


def _storage(t: Tensor) -> Any:
    return np.bool_ if t.dtype is dtypes.bool_ else t.known_dtype.storage


def _body(k: Kernel, group: FusedGroup, state: dict[Tensor, int], values: dict[Tensor, Value],
          arrays: dict[Tensor, Array], outputs: list[Array], start: Value, stop: Value, m: Value) -> None:
    """The loop over the flattened elements start..stop (rows of ``m`` when a value is a row)."""
    _op_values(k, group, state, values, scalar=True)
    scalar_outputs = [state[t] == SCALAR for t in group.loop_outputs]
    for o, t, is_scalar in zip(outputs, group.loop_outputs, scalar_outputs):
        if is_scalar:
            o[k.int(0)] = values[t]
    # float32 sin/cos hold for |x| <= 1024: the loop flags a larger (or non-finite) argument and,
    # if one was, runs again with the C library's functions (codegen.GUARDED, numba's loops' rule)
    big = k.var(k.const(False, BOOL)) if guarded(group, state) else None

    sums = _Sums(k, group, outputs)

    def elements(i: Value, c: Value, exact: bool) -> None:
        inner = dict(values)
        for t, a in arrays.items():
            inner[t] = a[c] if state[t] == ROW else a[i]
        guards: list[Value] | None = [] if big is not None and not exact else None
        _op_values(k, group, state, inner, scalar=False, exact=exact, guards=guards)
        for v in guards or ():
            assert big is not None
            big.value = big.value | ~(_abs(k, v) <= k.const(GUARDED["sin"], v.type))
        for o, t, is_scalar in zip(outputs, group.loop_outputs, scalar_outputs):
            if t in sums.acc:
                sums.add(t, c, inner[t])
            elif not is_scalar:
                o[c if state[t] == ROW else i] = inner[t]

    by_rows = ROW in state.values() or bool(sums.acc)
    sums.clear()
    _elements(k, by_rows, start, stop, m, lambda i, c: elements(i, c, False))
    if big is not None:
        with k.if_(big.value):
            sums.clear()
            _elements(k, by_rows, start, stop, m, lambda i, c: elements(i, c, True))
    sums.fold(m)


# The longest row a loop sums (FusedGroup.sums): its float64 sums are on the loop's stack.
SUMMED_ROW_MAX = 256


class _Sums:
    """A loop's summed values (FusedGroup.sums): each row added into float64 sums on the
    stack, stored into the output row at the end."""

    def __init__(self, k: Kernel, group: FusedGroup, outputs: list[Array]):
        self.k = k
        self.acc = {t: k.local(np.float64, SUMMED_ROW_MAX) for t in group.loop_outputs if t in group.sums}
        self.outputs = {t: o for t, o in zip(group.loop_outputs, outputs) if t in group.sums}

    def clear(self) -> None:
        for acc in self.acc.values():
            for j in self.k.range(SUMMED_ROW_MAX):
                acc[j] = self.k.const(0.0, F64)

    def add(self, t: Tensor, c: Value, value: Value) -> None:
        acc = self.acc[t]
        acc[c] = acc[c] + value.cast(F64)

    def fold(self, m: Value) -> None:
        for t, acc in self.acc.items():
            out = self.outputs[t]
            for c in self.k.range(m):
                out[c] = acc[c].cast(type_of(_storage(t)))


def _elements(k: Kernel, by_rows: bool, start: Value, stop: Value, m: Value,
              body: Callable[[Value, Value], None]) -> None:
    """``body(i, c)`` over the flattened elements start..stop: i the element, c its place in a
    row of ``m`` when ``by_rows`` (else i again)."""
    if by_rows:
        safe = k.where(m == 0, 1, m)
        first = k.where(m == 0, 0, Value(k, I64, k.b.sdiv(start.ir, safe.ir)))
        last = k.where(m == 0, 0, Value(k, I64, k.b.sdiv(stop.ir, safe.ir)))
        for r in k.range(first, last):
            base = r * m
            for c in k.range(m):
                body(base + c, c)
    else:
        for i in k.range(start, stop):
            body(i, i)


_lock = threading.Lock()
_built: dict[Any, Callable[..., None]] = {}


def _cached(key: Any, make: Callable[[], Callable[..., None]]) -> Callable[..., None]:
    """One compile for groups that differ only in their sizes (a network's repeated blocks)."""
    with _lock:
        if key in _built:
            return _built[key]
    kernel = make()
    with _lock:
        return _built.setdefault(key, kernel)


def _signature(group: FusedGroup, state: dict[Tensor, int], static: bool) -> tuple[Any, ...]:
    """What a loop's code depends on: its ops' templates and constants, how each value varies
    and its type, and how the ops connect (the sizes are arguments)."""
    index = {t: k for k, t in enumerate(group.inputs)}
    def form(t: Tensor) -> tuple[int, ...]:     # static loops: ranks and row lengths (general ones flatten)
        if not static:
            return ()
        return len(t.shape.as_tuple()), len(row_dims(t.shape.as_tuple())) if state[t] == ROW else 0
    parts: list[Any] = [tuple((state[t], str(_storage(t)), *form(t)) for t in group.inputs)]
    for op, description in zip(group.ops, group.descriptions):
        index[op.outputs[0]] = len(index)
        parts.append((description.expr, str(np.dtype(description.dtype)), description.consts,
                      tuple(index[t] for t in op.inputs), str(_storage(op.outputs[0]))))
    parts.append(tuple(index[t] for t in group.loop_outputs))
    parts.append(tuple((index[t], len(s.axes)) for t, s in group.sums.items()))
    return tuple(parts)


def static_key(group: FusedGroup, state: dict[Tensor, int]) -> tuple[Any, ...]:
    """What identifies the group's static loop: groups of one key share one compile."""
    return "static", len(group.loop_outputs[0].shape.as_tuple()), _signature(group, state, True)


def static_loop(group: FusedGroup, state: dict[Tensor, int]) -> Callable[..., None]:
    """``fused(lo, hi, n1, ..., *inputs, *outputs)`` for a group whose shapes are all known
    (codegen.static_states): the outer dim's rows lo..hi, the inner extents n1..."""
    key = static_key(group, state)
    return _cached(key, lambda: _build_static(group, state, key[1]))


# Both builders mark a fused loop's arrays distinct: they are distinct or the same (an input
# handed over as an output, which the plan does for whole arrays only: numba/kernels._sole_owner),
# never overlapping at an offset, and each element is read before its own result is written,
# so LLVM may take them as distinct (noalias) and drop its checks for overlap at each row. Rows
# of 12-20 channels ran 1.2-3x faster (a (8192, 16) loop with two rows broadcast: 99 -> 33 us).
def _build_static(group: FusedGroup, state: dict[Tensor, int], rank: int) -> Callable[..., None]:
    k = Kernel("fused", distinct=True)
    lo, hi = k.int_param(), k.int_param()
    extents = [k.int_param() for _ in range(1, rank)]
    values: dict[Tensor, Value] = {}
    arrays: dict[Tensor, Array] = {}
    for t in group.inputs:
        if state[t] == SCALAR:
            values[t] = k.scalar(_storage(t))
        else:
            arrays[t] = k.array(_storage(t), len(t.shape.as_tuple()))
    outputs = [k.array(_storage(t), 1 if t in group.sums else rank) for t in group.loop_outputs]
    inner = k.int(1)
    for n in extents:
        inner = inner * n
    m = inner
    rows = [t for t in group.inputs if state[t] == ROW]
    # the dims a row spans: a row input's, or those a Sum keeps (the same: grouping._absorb_sums)
    spans = {len(row_dims(t.shape.as_tuple())) for t in rows} | {rank - len(s.axes) for s in group.sums.values()}
    if len(spans) > 1:
        raise Unsupported("rows of different lengths")     # numba's nested loops index each its own way
    if spans:
        m = k.int(1)
        for n in extents[rank - 1 - spans.pop():]:
            m = m * n
    flat = {t: a.flat() for t, a in arrays.items()}
    _body(k, group, state, values, flat, [o.flat() for o in outputs], lo * inner, hi * inner, m)
    return k.compile()


def general_loop(group: FusedGroup, state: dict[Tensor, int]) -> Callable[..., None]:
    """``fused(n, m, *inputs, *outputs)`` over flattened values (codegen.generate_source's)."""
    if group.sums:
        raise Unsupported("sums in a general loop")
    return _cached(("general", _signature(group, state, False)), lambda: _build_general(group, state))


def _build_general(group: FusedGroup, state: dict[Tensor, int]) -> Callable[..., None]:
    k = Kernel("fused", distinct=True)
    n, m = k.int_param(), k.int_param()
    arrays = {t: k.array(_storage(t), 1) for t in group.inputs}
    outputs = [k.array(_storage(t), 1) for t in group.loop_outputs]
    values = {t: a[k.int(0)] for t, a in arrays.items() if state[t] == SCALAR}
    loop_arrays = {t: a for t, a in arrays.items() if state[t] != SCALAR}
    _body(k, group, state, values, loop_arrays, outputs, k.int(0), n, m)
    return k.compile()
