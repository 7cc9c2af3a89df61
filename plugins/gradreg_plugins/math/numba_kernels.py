"""Numba kernels of the math family (imported only when the numba backend is first used).

The elementwise ops are described for gradreg.backends.numba (a scalar expression each:
``{i}`` is input i, ``{=c}`` a constant in the node's float type, ``{exp}`` & co. the
fusion library); they run fused with their neighbours, or as their NumPy kernels alone.
UnsortedSegmentSum and SegmentSum, whose NumPy kernels use the slow ``np.add.at``, are
compiled scatter-adds (measured 5-25x faster; densifying IndexedSlices uses the former);
UnsortedSegmentMax / Min / Prod compiled scatters too (UnsortedSegmentMax, 200000 rows of 32
float32 into 1000: 192 ms with NumPy's ``np.maximum.at``, 3.4 ms compiled).
Every scatter is built as a native kernel (math/native_kernels: the same loop, compiled by
LLVM in tens of milliseconds with the GIL released) where native kernels are available, and
by numba otherwise.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from gradreg.kernel_support import compile_module, elementwise, native_loop, numba_available, same_shapes, writable
from gradreg.model import dtypes
from gradreg.registry import get_registry
from gradreg.registry.kernels import Tiered
from gradreg_plugins.math import family

try:    # the native loops import llvmlite, which may be missing where numba is
    from gradreg_plugins.math import native_kernels
except ImportError:
    native_kernels = None  # type: ignore[assignment]


def describe(op_type: str, expr: str, cost: int = 1, accepts=None) -> None:
    """Register ``expr`` as the elementwise description of ``op_type``."""
    options = {"cost": cost} if accepts is None else {"cost": cost, "accepts": accepts}
    family.kernel(op_type, backend="numba")(lambda op, ctx: elementwise(op, ctx, expr, **options))


# -- unary ------------------------------------------------------------------------------------

for _op_type, _expr in {
    "Neg": "-{0}", "Abs": "abs({0})", "Square": "{0} * {0}", "Sqrt": "np.sqrt({0})",
    "Exp": "{exp}({0})", "Expm1": "{expm1}({0})", "Log": "{log}({0})", "Log1p": "{log1p}({0})",
    "Tanh": "{tanh}({0})", "Sin": "{sin}({0})", "Cos": "{cos}({0})", "Tan": "np.tan({0})",
    "Asin": "np.arcsin({0})", "Acos": "np.arccos({0})", "Atan": "np.arctan({0})", "Sinh": "np.sinh({0})",
    "Cosh": "np.cosh({0})", "Asinh": "np.arcsinh({0})", "Acosh": "np.arccosh({0})", "Atanh": "np.arctanh({0})",
    "Floor": "np.floor({0})", "Ceil": "np.ceil({0})", "Rint": "np.rint({0})", "Round": "np.rint({0})",
    "Sign": "np.sign({0})", "Reciprocal": "{=1} / {0}", "Inv": "{=1} / {0}", "IsFinite": "np.isfinite({0})",
    "IsNan": "{0} != {0}", "IsInf": "np.isinf({0})", "LogicalNot": "not {0}",
}.items():
    describe(_op_type, _expr)

describe("Rsqrt", "{=1} / np.sqrt({0})", cost=2)
describe("Sigmoid", "{sigmoid}({0})", cost=8)
# NumPy computes these in float64 (as the fusion library does for float32).
for _op_type, _fn in {"Erf": "erf", "Erfc": "erfc", "Lgamma": "lgamma"}.items():
    describe(_op_type, f"{{{_fn}}}({{0}})", cost=3)


# -- binary -----------------------------------------------------------------------------------

for _op_type, _expr in {
    "AddV2": "{0} + {1}", "Add": "{0} + {1}", "Sub": "{0} - {1}", "Mul": "{0} * {1}",
    "Div": "{0} / {1}", "RealDiv": "{0} / {1}", "Maximum": "{maximum}({0}, {1})",
    "Minimum": "{minimum}({0}, {1})", "Atan2": "np.arctan2({0}, {1})", "Pow": "np.power({0}, {1})",
    "TruncateMod": "np.fmod({0}, {1})", "Mod": "np.fmod({0}, {1})",
    "Less": "{0} < {1}", "LessEqual": "{0} <= {1}", "Greater": "{0} > {1}", "GreaterEqual": "{0} >= {1}",
    "Equal": "{0} == {1}", "NotEqual": "{0} != {1}", "LogicalAnd": "{0} & {1}", "LogicalOr": "{0} | {1}",
}.items():
    describe(_op_type, _expr)

for _op_type, _expr in {
    "FloorDiv": "np.floor({0} / {1})", "TruncateDiv": "np.trunc({0} / {1})", "FloorMod": "{floormod}({0}, {1})",
    "SquaredDifference": "({0} - {1}) * ({0} - {1})",
    "DivNoNan": "{where}({1} == {=0}, {=0}, {0} / {1})", "MulNoNan": "{where}({1} == {=0}, {=0}, {0} * {1})",
    "Xlogy": "{where}({0} == {=0}, {=0}, {0} * {log}({1}))", "Xdivy": "{where}({0} == {=0}, {=0}, {0} / {1})",
    "Xlog1py": "{where}({0} == {=0}, {=0}, {0} * {log1p}({1}))",
}.items():
    describe(_op_type, _expr, cost=3)


@family.kernel("ApproximateEqual", backend="numba")
def _approximate_equal(op, ctx):
    return elementwise(op, ctx, "abs({0} - {1}) <= {tolerance}", cost=3, accepts=same_shapes,
                       tolerance=op.get_attr("tolerance"))


# -- selection, sums, clipping -------------------------------------------------------------------

def _select_accepts(flags) -> bool:
    """Select (v1): t and e of one shape; a non-scalar condition needs non-scalar t and e."""
    condition, t, e = flags
    return t == e and (condition or not t)


def _clip_accepts(flags) -> bool:
    """ClipByValue: scalar bounds, or bounds of the input's shape."""
    return not flags[0] or all(flags)


describe("Select", "{where}({0}, {1}, {2})", accepts=_select_accepts)
describe("SelectV2", "{where}({0}, {1}, {2})")
describe("ClipByValue", "{maximum}({minimum}({0}, {2}), {1})", cost=2, accepts=_clip_accepts)


@family.kernel("AddN", backend="numba")
def _add_n(op, ctx):
    expr = " + ".join(f"{{{i}}}" for i in range(len(op.inputs)))
    return elementwise(op, ctx, expr, cost=len(op.inputs) - 1, accepts=same_shapes)


# -- gradient helpers f(y, dy): the NumPy kernels require equal shapes -----------------------------

for _op_type, _expr, _cost in [
        ("TanhGrad", "{1} * ({=1} - {0} * {0})", 3), ("SigmoidGrad", "{1} * ({0} * ({=1} - {0}))", 3),
        ("SqrtGrad", "{1} * {=0.5} / {0}", 2), ("RsqrtGrad", "{1} * ({=-0.5} * {0} * {0} * {0})", 4),
        ("ReciprocalGrad", "-{1} * ({0} * {0})", 3), ("InvGrad", "-{1} * ({0} * {0})", 3)]:
    describe(_op_type, _expr, cost=_cost, accepts=same_shapes)


# -- Cast between float32, float64 and bool ---------------------------------------------------------

@family.kernel("Cast", backend="numba")
def _cast(op, ctx):
    src, dst = op.get_attr("SrcT"), op.get_attr("DstT")
    if op.get_attr("Truncate") and src is dtypes.float64 and dst is dtypes.float32:
        return None   # rounding toward zero: the NumPy kernel's job
    if dst is dtypes.bool_:
        return elementwise(op, ctx, "{0} != {=0}")
    return elementwise(op, ctx, f"np.{dst.storage.name}({{0}})")


# -- segment sums ---------------------------------------------------------------------------------

_SCATTER_ADD = """
@njit(cache=True, nogil=True)
def scatter_add(out, ids, rows):
    # out[ids[i]] += rows[i] for the ids >= 0, in order as np.add.at
    for i in range(ids.shape[0]):
        j = ids[i]
        if j >= 0:
            for k in range(rows.shape[1]):
                out[j, k] += rows[i, k]


@njit(cache=True, nogil=True)
def scatter_max(out, ids, rows):
    # out[ids[i]] = maximum(out[ids[i]], rows[i]) as np.maximum.at: a NaN on either side stays
    for i in range(ids.shape[0]):
        j = ids[i]
        if j >= 0:
            for k in range(rows.shape[1]):
                v = rows[i, k]
                if v > out[j, k] or v != v:
                    out[j, k] = v


@njit(cache=True, nogil=True)
def scatter_min(out, ids, rows):
    for i in range(ids.shape[0]):
        j = ids[i]
        if j >= 0:
            for k in range(rows.shape[1]):
                v = rows[i, k]
                if v < out[j, k] or v != v:
                    out[j, k] = v


@njit(cache=True, nogil=True)
def scatter_mul(out, ids, rows):
    for i in range(ids.shape[0]):
        j = ids[i]
        if j >= 0:
            for k in range(rows.shape[1]):
                out[j, k] *= rows[i, k]
"""


@functools.cache
def _scatter_module():
    return compile_module(_SCATTER_ADD)


def _native(builder: str, *args):
    """The loop native_kernels' ``builder`` builds for ``args``, compiled now; None where it
    cannot (numba's runs then: kernel_support.native_loop)."""
    return native_loop(getattr(native_kernels, builder, None), *args)


def _scatter_loop(combine: str, data_type, id_type):
    """The scatter (add, max, min or mul) of rows of ``data_type`` by ids of ``id_type``:
    native (compiled now), else numba's (compiled on its first call for the types)."""
    loop = _native("scatter_loop", data_type, id_type, combine)
    return loop if loop is not None else getattr(_scatter_module(), "scatter_" + combine)


def _run_scatter(combine: str, out: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> None:
    """``scatter_<combine>(out, ids, rows)``: the native loop where it takes the arrays (out
    C-contiguous, rows of its type; ids and rows made contiguous), else numba's."""
    if out.flags.c_contiguous and rows.dtype == out.dtype:
        loop = _native("scatter_loop", out.dtype, ids.dtype, combine)
        if loop is not None:
            loop(out, np.ascontiguousarray(ids), np.ascontiguousarray(rows))
            return
    # (a Const's ids or data are read-only: copied, or numba's loop would compile again for them)
    getattr(_scatter_module(), "scatter_" + combine)(out, writable(ids), writable(rows))


def _scatter_tiered(op, checked, compute, combine: str = "add") -> Tiered:
    """``compute`` once the node's scatter (add, max, min or mul) is compiled for its data and
    id types."""
    data_type, id_type = op.get_attr("T").storage, op.get_attr("Tindices").storage

    def build():
        scatter = _scatter_loop(combine, data_type, id_type)
        scatter(np.zeros((1, 1), data_type), np.zeros(1, id_type), np.zeros((1, 1), data_type))
        return compute
    return Tiered(checked, build, f"{op.type} {op.name}")


_SCATTER_TYPES = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64)


def scatter_add_rows(out: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> None:
    """out[ids[i]] += rows[i] (2-D out and rows, ids >= 0 in range; negative ids skipped), in
    order as np.add.at: the compiled scatter-add other families' numba kernels share."""
    _run_scatter("add", out, ids, rows)


def _scatter(data: np.ndarray, ids: np.ndarray, n: int, inner: tuple, combine: str = "add") -> np.ndarray:
    """Rows of ``data`` (after the ids' dims) combined into ``n`` rows of shape ``inner``
    (summed, or the max / min / product starting from TensorFlow's identity of each)."""
    width = math.prod(int(d) for d in inner)     # (NumPy's prod: 3.5 us a call)
    out = np.full((n,) + tuple(inner), _IDENTITY[combine](data.dtype), dtype=data.dtype)
    _run_scatter(combine, out.reshape(n, width), ids, np.ascontiguousarray(data).reshape(ids.size, width))
    return out


def _limits(dtype: np.dtype) -> tuple:
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    return info.min, info.max


# TensorFlow's empty segment values: 0, 1, lowest() and max() (finite) of the type.
_IDENTITY = {"add": lambda dtype: 0, "mul": lambda dtype: 1, "max": lambda dtype: _limits(dtype)[0],
             "min": lambda dtype: _limits(dtype)[1]}


def _numpy_kernel(op, ctx):
    return get_registry().kernel_factory(op.type, "numpy")(op, ctx)


def _fits(n: int, inner: tuple, ctx) -> bool:
    return n * math.prod(int(d) for d in inner) <= ctx.max_elements


# Well-formed inputs are scattered here; the NumPy kernel raises the errors of the others.

def _unsorted_segment(op, ctx, combine: str):
    if op.get_attr("T") not in _SCATTER_TYPES or not numba_available():
        return None
    checked = _numpy_kernel(op, ctx)
    rows_in_order = _RowsInOrder() if combine == "add" else None

    def compute(data, segment_ids, num_segments):
        ids = np.asarray(segment_ids)
        n = int(num_segments) if np.ndim(num_segments) == 0 else -1
        inner = data.shape[ids.ndim:]
        if n < 0 or data.shape[:ids.ndim] != ids.shape or not _fits(n, inner, ctx) \
                or (ids.size and ids.max() >= n):
            return checked(data, segment_ids, num_segments)
        if rows_in_order is not None and rows_in_order(ids, n):
            return data.reshape((n, *inner))
        return _scatter(data, ids.reshape(-1), n, inner, combine)
    return _scatter_tiered(op, checked, compute, combine)


class _RowsInOrder:
    """Whether segment ids are 0, 1, ..., n - 1: each segment's sum is then its one row, the data
    as it is (a loop gradient's rows of ``xs[t]``, one per iteration, collected in order)."""

    __slots__ = ("_range",)

    def __init__(self) -> None:
        self._range = np.arange(0)

    def __call__(self, ids: np.ndarray, n: int) -> bool:
        if ids.size != n or ids.dtype.kind not in "iu":
            return False
        if len(self._range) != n:
            self._range = np.arange(n)
        return bool(np.array_equal(ids.reshape(-1), self._range))


for _op_type, _combine in (("UnsortedSegmentSum", "add"), ("UnsortedSegmentMax", "max"),
                           ("UnsortedSegmentMin", "min"), ("UnsortedSegmentProd", "mul")):
    family.kernel(_op_type, backend="numba")(lambda op, ctx, _c=_combine: _unsorted_segment(op, ctx, _c))


@family.kernel("SegmentSum", backend="numba")
def _segment_sum(op, ctx):
    if op.get_attr("T") not in _SCATTER_TYPES or not numba_available():
        return None
    checked = _numpy_kernel(op, ctx)

    def compute(data, segment_ids):
        ids = np.asarray(segment_ids)
        n = int(ids[-1]) + 1 if ids.ndim == 1 and ids.size else 0
        if ids.ndim != 1 or data.ndim == 0 or ids.shape[0] != data.shape[0] or not _fits(n, data.shape[1:], ctx) \
                or (ids.size and (ids[0] < 0 or np.any(ids[1:] < ids[:-1]))):
            return checked(data, segment_ids)
        return _scatter(data, ids, n, data.shape[1:])
    return _scatter_tiered(op, checked, compute)
