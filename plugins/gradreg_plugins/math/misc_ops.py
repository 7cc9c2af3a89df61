"""More of the math family's op types: CumulativeLogsumexp, NextAfter, AccumulateNV2 and
SparseMatMul — definitions, shape functions, NumPy kernels and gradient rules (TensorFlow's:
math_grad.py, math_ops.py).

SparseMatMul's sparsity flags are hints for TensorFlow's kernel; the values are a float32 matrix
product, and its gradient is built from MatMul (TensorFlow's picks MatMul or SparseMatMul by the
same hints, with the same values). AccumulateNV2 has no kernel in TensorFlow (a graph rewrite
replaces it before running); gradreg runs it as AddN.
"""
from __future__ import annotations

import numpy as np

from gradreg.build.builders import apply_op, constant
from gradreg.model import dtypes
from gradreg.model import shape_fns as sf
from gradreg.model.shapes import TensorShape
from gradreg_plugins.math import family
from gradreg_plugins.math.kernels import binary, kernel
from gradreg_plugins.rule_helpers import dense_gradients, unbroadcast

op = family.op
_NUMBER = ("float32, float64, int32, uint8, int16, int8, complex64, int64, qint8, quint8, qint32, bfloat16, "
           "qint16, quint16, uint16, complex128, float16, uint32, uint64")


# -- CumulativeLogsumexp -------------------------------------------------------------------------------

def _scan_shape(ctx) -> TensorShape:
    if ctx.input_shape(1).rank not in (None, 0):
        raise ctx.error(f"axis must be a scalar, got shape {ctx.input_shape(1)}")
    return ctx.input_shape(0)


op("CumulativeLogsumexp", inputs=["x: T", "axis: Tidx"], outputs=["out: T"],
   attrs=["exclusive: bool = false", "reverse: bool = false", "T: {bfloat16, float16, float32, float64}",
          "Tidx: {int32, int64} = int32"], shape=_scan_shape)


@kernel("CumulativeLogsumexp")
def _cumulative_logsumexp(op, ctx):
    exclusive, reverse = bool(op.get_attr("exclusive")), bool(op.get_attr("reverse"))

    def compute(x, axis):
        if np.ndim(axis) != 0:
            raise ValueError(f"axis must be a scalar, got shape {list(np.shape(axis))}")
        a = int(axis)
        if not -x.ndim <= a < max(x.ndim, 1):
            raise ValueError(f"axis {a} is out of range for a tensor of rank {x.ndim}")
        work = x.astype(np.float32) if x.dtype == np.float16 else x
        if reverse:
            work = np.flip(work, a)
        out = np.logaddexp.accumulate(work, axis=a) if work.size else work.copy()
        if exclusive and out.shape[a]:   # log(0) first, then the sums before each element
            head = np.full_like(np.take(out, [0], axis=a), -np.inf)
            out = np.concatenate([head, np.take(out, np.arange(out.shape[a] - 1), axis=a)], axis=a)
        out = np.flip(out, a) if reverse else out
        return out.astype(x.dtype, copy=False)
    return compute


@family.gradient("CumulativeLogsumexp")
@dense_gradients
def _cumulative_logsumexp_grad(op, grad):
    """exp(x) times the reverse cumulative sum of grad / exp(out), in log space with the
    cotangent split by sign (TensorFlow's rule): log(0) is the type's lowest finite value so
    that lowest - (-inf) stays finite."""
    x, axis = op.inputs
    out = op.outputs[0]
    exclusive, reverse = op.get_attr("exclusive"), op.get_attr("reverse")
    dtype = grad.dtype.base_dtype
    lowest = constant(_lowest(dtype), dtype)
    zero = constant(0, dtype)

    def part(log_magnitude):
        summed = apply_op("CumulativeLogsumexp", log_magnitude - out, axis, exclusive=exclusive, reverse=not reverse)
        return apply_op("Exp", summed + x)
    positive = apply_op("SelectV2", apply_op("Greater", grad, zero), apply_op("Log", grad), lowest)
    negative = apply_op("SelectV2", apply_op("Less", grad, zero), apply_op("Log", -grad), lowest)
    return part(positive) - part(negative), None


def _lowest(dtype: dtypes.DType) -> float:
    """The type's lowest finite value (bfloat16's own, though gradreg stores it as float32)."""
    if dtype is dtypes.bfloat16:
        return -3.3895313892515355e38
    return float(np.finfo(dtype.storage).min)


# -- NextAfter -------------------------------------------------------------------------------------------

op("NextAfter", inputs=["x1: T", "x2: T"], outputs=["output: T"], attrs=["T: {float64, float32} = float32"],
   shape=sf.broadcast_binary)
binary("NextAfter", np.nextafter)


@family.gradient("NextAfter")
@dense_gradients
def _next_after_grad(op, grad):
    """TensorFlow's convention: 1 for x1 (the result is x1 up to one ulp), 0 for x2."""
    x1, x2 = op.inputs
    return unbroadcast(x1, x2, grad, apply_op("ZerosLike", grad))


# -- AccumulateNV2 -----------------------------------------------------------------------------------------

def _accumulate_shape(ctx) -> TensorShape:
    shape = sf.merge_inputs(ctx)
    declared = ctx.attr("shape")
    declared = declared if isinstance(declared, TensorShape) else TensorShape(declared)
    if not shape.is_compatible_with(declared):
        raise ctx.error(f"the inputs' shape {shape} does not match the shape attr {declared}")
    return shape.merge_with(declared)


op("AccumulateNV2", inputs=["inputs: N * T"], outputs=["sum: T"],
   attrs=["N: int >= 1", f"T: {{{_NUMBER}}}", "shape: shape"], shape=_accumulate_shape, commutative=True,
   aggregate=True)


@kernel("AccumulateNV2")
def _accumulate_n(op, ctx):
    def compute(*inputs):
        first = inputs[0]
        if any(np.shape(x) != np.shape(first) for x in inputs):
            raise ValueError(f"inputs must have the same shape: {[list(np.shape(x)) for x in inputs]}")
        total = np.array(first, copy=True)
        for x in inputs[1:]:
            total = total + x
        return total.astype(first.dtype, copy=False)
    return compute


@family.gradient("AccumulateNV2")
@dense_gradients
def _accumulate_n_grad(op, grad):
    return [grad] * len(op.inputs)


# -- SparseMatMul ------------------------------------------------------------------------------------------------

op("SparseMatMul", inputs=["a: Ta", "b: Tb"], outputs=["product: float32"],
   attrs=["transpose_a: bool = false", "transpose_b: bool = false", "a_is_sparse: bool = false",
          "b_is_sparse: bool = false", "Ta: {float32, bfloat16} = float32", "Tb: {float32, bfloat16} = float32"],
   shape=lambda ctx: _matmul_shape(ctx))


def _matmul_shape(ctx) -> TensorShape:
    a, b = ctx.input_shape(0), ctx.input_shape(1)
    for name, s in (("a", a), ("b", b)):
        if s.rank not in (None, 2):
            raise ctx.error(f"{name} must be a matrix, got shape {s}")
    m = None if a.rank is None else a.dims[1 if ctx.attr("transpose_a") else 0]
    n = None if b.rank is None else b.dims[0 if ctx.attr("transpose_b") else 1]
    k1 = None if a.rank is None else a.dims[0 if ctx.attr("transpose_a") else 1]
    k2 = None if b.rank is None else b.dims[1 if ctx.attr("transpose_b") else 0]
    if k1 is not None and k2 is not None and k1 != k2:
        raise ctx.error(f"inner dimensions must agree: {a} and {b}")
    return TensorShape([m, n])


@kernel("SparseMatMul")
def _sparse_matmul(op, ctx):
    ta, tb = bool(op.get_attr("transpose_a")), bool(op.get_attr("transpose_b"))

    def compute(a, b):
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError(f"a and b must be matrices: shapes {list(a.shape)}, {list(b.shape)}")
        a = (a.T if ta else a).astype(np.float32, copy=False)
        b = (b.T if tb else b).astype(np.float32, copy=False)
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"Matrix size-incompatible: In[0]: {list(a.shape)}, In[1]: {list(b.shape)}")
        ctx.check_shape((a.shape[0], b.shape[1]), op)
        return a @ b
    return compute


def _float32(t):
    return t if t.dtype.base_dtype is dtypes.float32 else apply_op("Cast", t, DstT=dtypes.float32)


def _product(left, right, out_type, transpose_a=False, transpose_b=False):
    product = apply_op("MatMul", _float32(left), _float32(right), transpose_a=transpose_a, transpose_b=transpose_b)
    return product if out_type is dtypes.float32 else apply_op("Cast", product, DstT=out_type)


@family.gradient("SparseMatMul")
@dense_gradients
def _sparse_matmul_grad(op, grad):
    """The MatMul rule, each gradient cast back to its input's type."""
    a, b = op.inputs
    ta, tb = op.get_attr("transpose_a"), op.get_attr("transpose_b")
    type_a, type_b = a.dtype.base_dtype, b.dtype.base_dtype
    if not ta and not tb:
        return _product(grad, b, type_a, transpose_b=True), _product(a, grad, type_b, transpose_a=True)
    if not ta and tb:
        return _product(grad, b, type_a), _product(grad, a, type_b, transpose_a=True)
    if ta and not tb:
        return _product(b, grad, type_a, transpose_b=True), _product(a, grad, type_b)
    return (_product(b, grad, type_a, transpose_a=True, transpose_b=True),
            _product(grad, a, type_b, transpose_a=True, transpose_b=True))

