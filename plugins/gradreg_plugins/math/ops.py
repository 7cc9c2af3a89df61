"""Math op definitions and shape functions (hand-written builders are in api.py).

Signatures are TensorFlow's, type lists copied from its op registry."""
from __future__ import annotations

import numpy as np

from gradreg.errors import ShapeError
from gradreg.model import shape_fns as sf
from gradreg.model.shapes import TensorShape, broadcast_static
from gradreg_plugins.math import family
from gradreg_plugins.math import numerics as nm

op = family.op

_FLOAT = "bfloat16, float16, float32, float64"
_COMPLEX = "complex64, complex128"
_SIGNED = "int8, int16, int32, int64"
_UNSIGNED = "uint8, uint16, uint32, uint64"
_NUMBER = ("float32, float64, int32, uint8, int16, int8, complex64, int64, qint8, quint8, qint32, bfloat16, "
           "qint16, quint16, uint16, complex128, float16, uint32, uint64")
_REAL = "float32, float64, int32, uint8, int16, int8, int64, bfloat16, uint16, float16, uint32, uint64"
_TIDX = "Tidx: {int32, int64} = int32"


def _t(types: str) -> str:
    return f"T: {{{types}}}"


# -- unary elementwise ----------------------------------------------------------------------

def _unary(name, types, api=None, out="T", foldable=False, linear=False):
    op(name, inputs=["x: T"], outputs=[f"y: {out}"], attrs=[_t(types)], shape=sf.unchanged, api=api,
       foldable=foldable, linear=linear)


_FLOAT_COMPLEX = f"{_FLOAT}, {_COMPLEX}"
_unary("Abs", f"{_FLOAT}, {_SIGNED}", foldable=True)
_unary("Neg", f"{_FLOAT}, {_SIGNED}, {_COMPLEX}", api=("negative", "neg"), foldable=True, linear=True)
_unary("Sign", f"{_FLOAT}, {_SIGNED}, {_COMPLEX}", api="sign", foldable=True)
_unary("Square", f"{_FLOAT}, {_SIGNED}, {_UNSIGNED}, {_COMPLEX}", api="square", foldable=True)
_unary("Reciprocal", f"{_FLOAT}, {_SIGNED}, {_COMPLEX}", api="reciprocal")
_unary("Inv", f"{_FLOAT}, {_SIGNED}, {_COMPLEX}")
_unary("Round", f"{_FLOAT}, {_SIGNED}, {_COMPLEX}")
for _name, _api in [("Sqrt", "sqrt"), ("Rsqrt", "rsqrt"), ("Exp", "exp"), ("Expm1", "expm1"), ("Log", "log"),
                    ("Log1p", "log1p"), ("Sin", "sin"), ("Cos", "cos"), ("Tan", "tan"), ("Asin", "asin"),
                    ("Acos", "acos"), ("Atan", "atan"), ("Sinh", "sinh"), ("Cosh", "cosh"), ("Tanh", "tanh"),
                    ("Asinh", "asinh"), ("Acosh", "acosh"), ("Atanh", "atanh"), ("Sigmoid", "sigmoid")]:
    _unary(_name, _FLOAT_COMPLEX, api=_api)
for _name, _api in [("Floor", "floor"), ("Ceil", "ceil"), ("Rint", "rint"), ("Erf", "erf"), ("Erfc", "erfc"),
                    ("Lgamma", "lgamma"), ("Digamma", "digamma")]:
    _unary(_name, _FLOAT, api=_api)
for _name, _api in [("IsFinite", "is_finite"), ("IsNan", "is_nan"), ("IsInf", "is_inf")]:
    _unary(_name, _FLOAT, api=_api, out="bool")
op("LogicalNot", inputs=["x: bool"], outputs=["y: bool"], shape=sf.unchanged, api="logical_not", foldable=True)

_COMPLEX_PART = ["T: {complex64, complex128} = complex64", "Tout: {float32, float64} = float32"]
for _name in ("Real", "Imag", "Angle"):
    op(_name, inputs=["input: T"], outputs=["output: Tout"], attrs=_COMPLEX_PART, shape=sf.unchanged)
op("ComplexAbs", inputs=["x: T"], outputs=["y: Tout"], attrs=_COMPLEX_PART, shape=sf.unchanged)
op("Conj", inputs=["input: T"], outputs=["output: T"], attrs=["T: {complex64, complex128, variant} = complex64"],
   shape=sf.unchanged)


# -- binary elementwise -----------------------------------------------------------------------

def _binary(name, types, api=None, out="T", inputs=("x", "y"), **fields):
    op(name, inputs=[f"{i}: T" for i in inputs], outputs=[f"z: {out}"], attrs=[_t(types)],
       shape=sf.broadcast_binary, api=api, **fields)


_ARITH = f"{_FLOAT}, uint8, int8, uint16, int16, int32, uint32, uint64, int64, {_COMPLEX}"
_binary("AddV2", f"{_FLOAT}, {_UNSIGNED}, {_SIGNED}, {_COMPLEX}", commutative=True, aggregate=True, foldable=True)
_binary("Add", f"{_FLOAT}, uint8, {_SIGNED}, {_COMPLEX}, string", foldable=True)
_binary("Sub", _ARITH, api=("subtract", "sub"), foldable=True)
_binary("Mul", _ARITH, api=("multiply", "mul"), commutative=True, foldable=True)
_binary("Div", _ARITH, foldable=True)
_binary("RealDiv", _ARITH, foldable=True)
_binary("FloorDiv", _ARITH, foldable=True)   # gradreg.floordiv: api.py (scope "floordiv")
_binary("TruncateDiv", _ARITH, api="truncatediv", foldable=True)
_binary("FloorMod", f"{_SIGNED}, {_UNSIGNED}, {_FLOAT}", api=("floormod", "mod"), foldable=True)
_binary("TruncateMod", f"int32, int64, {_FLOAT}", api="truncatemod", foldable=True)
_binary("Mod", f"int32, int64, {_FLOAT}", foldable=True)
_binary("DivNoNan", _FLOAT_COMPLEX)
_binary("MulNoNan", _FLOAT_COMPLEX, api="multiply_no_nan")
_binary("Pow", f"{_FLOAT}, {_SIGNED}, {_COMPLEX}", api="pow")
_MINMAX = f"{_FLOAT}, {_SIGNED}, {_UNSIGNED}"
_binary("Maximum", _MINMAX, api="maximum", foldable=True)
_binary("Minimum", _MINMAX, api="minimum", foldable=True)
_binary("SquaredDifference", f"{_FLOAT}, int32, int64, {_COMPLEX}", api="squared_difference", commutative=True)
_binary("Atan2", _FLOAT, api="atan2", inputs=("y", "x"))
for _name, _api in [("Xlogy", "xlogy"), ("Xdivy", "xdivy"), ("Xlog1py", "xlog1py")]:
    _binary(_name, _FLOAT_COMPLEX, api=_api)
op("Complex", inputs=["real: T", "imag: T"], outputs=["out: Tout"],
   attrs=["T: {float32, float64} = float32", "Tout: {complex64, complex128} = complex64"],
   shape=sf.broadcast_binary)

for _name, _api in [("Less", "less"), ("LessEqual", "less_equal"), ("Greater", "greater"),
                    ("GreaterEqual", "greater_equal")]:
    _binary(_name, _REAL, api=_api, out="bool", foldable=True)


def _equality_shape(ctx):
    """Broadcast shapes. With incompatible_shape_error=false, shapes that cannot broadcast give
    a scalar: known when both shapes are, else the rank is unknown (TensorFlow's shape function
    assumes unknown dims broadcast, and its kernel then returns a scalar anyway)."""
    x, y = ctx.input_shape(0), ctx.input_shape(1)
    try:
        shape = broadcast_static(x, y)
    except ShapeError as exc:
        if ctx.attr("incompatible_shape_error"):
            raise ctx.error(str(exc)) from None
        return TensorShape([])
    if ctx.attr("incompatible_shape_error") or (x.is_fully_defined() and y.is_fully_defined()):
        return shape
    return TensorShape(None)


for _name, _api in [("Equal", "equal"), ("NotEqual", "not_equal")]:
    op(_name, inputs=["x: T", "y: T"], outputs=["z: bool"], attrs=["T: type", "incompatible_shape_error: bool = true"],
       shape=_equality_shape, api=_api, commutative=True, foldable=True)
for _name, _api in [("LogicalAnd", "logical_and"), ("LogicalOr", "logical_or")]:
    op(_name, inputs=["x: bool", "y: bool"], outputs=["z: bool"], shape=sf.broadcast_binary, api=_api,
       commutative=True, foldable=True)


op("ApproximateEqual", inputs=["x: T", "y: T"], outputs=["z: bool"],
   attrs=[_t(_NUMBER), "tolerance: float = 9.999999747378752e-06"], shape=sf.merge_inputs, commutative=True)


# -- selection, sums, clipping ---------------------------------------------------------------------

def _select_shape(ctx):
    """Select (v1): t and e share a shape; the condition is a scalar, a vector as long as t's
    first dimension, or t's shape (TensorFlow's shape function)."""
    try:
        out = ctx.input_shape(1).merge_with(ctx.input_shape(2))
    except ShapeError as exc:
        raise ctx.error(f"'t' and 'e' must have the same shape: {exc}") from None
    cond = ctx.input_shape(0)
    if cond.rank is None or out.rank is None or cond.rank == 0:
        return out
    try:
        if cond.rank == 1 and out.rank > 0:
            cond.merge_with([out.dims[0]])
            return out
        return out.merge_with(cond)
    except ShapeError as exc:
        raise ctx.error(f"condition must be a scalar, a vector or of the shape of 't': {exc}") from None


op("Select", inputs=["condition: bool", "t: T", "e: T"], outputs=["output: T"], attrs=["T: type"],
   shape=_select_shape, foldable=True)
op("SelectV2", inputs=["condition: bool", "t: T", "e: T"], outputs=["output: T"], attrs=["T: type"],
   shape=sf.broadcast_all, foldable=True)
op("AddN", inputs=["inputs: N * T"], outputs=["sum: T"], attrs=["N: int >= 1", _t(f"{_NUMBER}, variant")],
   shape=sf.merge_inputs, commutative=True, aggregate=True, foldable=True)


def _clip_shape(ctx):
    shape = ctx.input_shape(0)
    for i in (1, 2):
        bound = ctx.input_shape(i)
        if bound.rank not in (None, 0) and not bound.is_compatible_with(shape):
            raise ctx.error(f"clip_value_min and clip_value_max must be scalars or of the input's shape {shape}; "
                            f"got {bound}")
    return shape


op("ClipByValue", inputs=["t: T", "clip_value_min: T", "clip_value_max: T"], outputs=["output: T"],
   attrs=[_t(_NUMBER)], shape=_clip_shape)

for _name in ("TanhGrad", "SigmoidGrad", "SqrtGrad", "RsqrtGrad", "ReciprocalGrad", "InvGrad"):
    op(_name, inputs=["y: T", "dy: T"], outputs=["z: T"], attrs=[_t(_FLOAT_COMPLEX)], shape=sf.merge_inputs)


# -- reductions and scans -------------------------------------------------------------------------

def _reduction_shape(ctx):
    return sf.reduction(ctx, "keep_dims")


_MINMAX_REDUCE = f"{_REAL}, qint8, quint8, qint32, qint16, quint16"
for _name, _types in [("Sum", _NUMBER), ("Mean", _NUMBER), ("Prod", _NUMBER), ("EuclideanNorm", _NUMBER),
                      ("Max", _MINMAX_REDUCE), ("Min", _MINMAX_REDUCE)]:
    op(_name, inputs=["input: T", "reduction_indices: Tidx"], outputs=["output: T"],
       attrs=["keep_dims: bool = false", _t(_types), _TIDX], shape=_reduction_shape,
       foldable=_name != "EuclideanNorm", linear=_name == "Sum")
for _name in ("All", "Any"):
    op(_name, inputs=["input: bool", "reduction_indices: Tidx"], outputs=["output: bool"],
       attrs=["keep_dims: bool = false", _TIDX], shape=_reduction_shape, foldable=True)


def _arg_reduction_shape(ctx):
    """Input 0 without the dimension named by input 1 (a scalar)."""
    shape = ctx.input_shape(0)
    if ctx.input_shape(1).rank not in (None, 0, 1):
        raise ctx.error(f"dimension must be a scalar, got shape {ctx.input_shape(1)}")
    if shape.rank is None:
        return TensorShape(None)
    if shape.rank == 0:
        raise ctx.error("input must have rank >= 1")
    value = ctx.input_value(1)
    if value is None:
        return TensorShape([None] * (shape.rank - 1))
    axis = sf.normalize_axis(int(np.asarray(value).reshape(-1)[0]), shape.rank, ctx)
    return TensorShape(shape.dims[:axis] + shape.dims[axis + 1:])


_ARG_T = f"{_REAL}, qint8, quint8, qint32, qint16, quint16, bool"
op("ArgMax", inputs=["input: T", "dimension: Tidx"], outputs=["output: output_type"],
   attrs=[_t(_ARG_T), "Tidx: {int16, int32, int64} = int32", "output_type: {int16, uint16, int32, int64} = int64"],
   shape=_arg_reduction_shape, foldable=True)
op("ArgMin", inputs=["input: T", "dimension: Tidx"], outputs=["output: output_type"],
   attrs=[_t(_ARG_T), _TIDX, "output_type: {int32, int64} = int64"], shape=_arg_reduction_shape, foldable=True)


def _scan_shape(ctx):
    shape = ctx.input_shape(0)
    if ctx.input_shape(1).rank not in (None, 0):
        raise ctx.error(f"axis must be a scalar, got shape {ctx.input_shape(1)}")
    axis = ctx.input_value(1)
    if axis is not None and shape.rank is not None:
        sf.normalize_axis(int(axis), shape.rank, ctx)
    return shape


for _name in ("Cumsum", "Cumprod"):
    op(_name, inputs=["x: T", "axis: Tidx"], outputs=["out: T"],
       attrs=["exclusive: bool = false", "reverse: bool = false", _t(_NUMBER), _TIDX], shape=_scan_shape,
       foldable=True)


# -- products -------------------------------------------------------------------------------

def _inner_dims_agree(ctx, k1, k2, a, b):
    if k1 is not None and k2 is not None and k1 != k2:
        raise ctx.error(f"dimensions must be equal, but are {k1} and {k2} for shapes {a} and {b}")


def _matmul_shape(ctx):
    try:
        a, b = ctx.input_shape(0).with_rank(2), ctx.input_shape(1).with_rank(2)
    except ShapeError as exc:
        raise ctx.error(str(exc)) from None
    ta, tb = ctx.attr("transpose_a"), ctx.attr("transpose_b")
    m, k1 = (a.dims[1], a.dims[0]) if ta else a.dims
    k2, n = (b.dims[1], b.dims[0]) if tb else b.dims
    _inner_dims_agree(ctx, k1, k2, a, b)
    return TensorShape([m, n])


def _batch_matmul_shape(ctx, broadcast: bool):
    a, b = ctx.input_shape(0), ctx.input_shape(1)
    try:
        a, b = a.with_rank_at_least(2), b.with_rank_at_least(2)
    except ShapeError as exc:
        raise ctx.error(str(exc)) from None
    if a.rank is None or b.rank is None:
        return TensorShape(None)
    m, k1 = (a.dims[-1], a.dims[-2]) if ctx.attr("adj_x") else a.dims[-2:]
    k2, n = (b.dims[-1], b.dims[-2]) if ctx.attr("adj_y") else b.dims[-2:]
    _inner_dims_agree(ctx, k1, k2, a, b)
    try:
        if broadcast:
            batch = broadcast_static(a[:-2], b[:-2])
        else:
            batch = a[:-2].merge_with(b[:-2])
    except ShapeError as exc:
        raise ctx.error(f"batch dimensions do not match: {exc}") from None
    return batch.concatenate([m, n])


_MATMUL_FLAGS = ["adj_x: bool = false", "adj_y: bool = false", "grad_x: bool = false", "grad_y: bool = false"]
op("MatMul", inputs=["a: T", "b: T"], outputs=["product: T"],
   attrs=["transpose_a: bool = false", "transpose_b: bool = false",
          _t(f"{_FLOAT}, int32, int64, {_UNSIGNED}, {_COMPLEX}"), "grad_a: bool = false", "grad_b: bool = false"],
   shape=_matmul_shape)
op("BatchMatMul", inputs=["x: T", "y: T"], outputs=["output: T"],
   attrs=[_t(f"{_FLOAT}, int32, int64, {_COMPLEX}")] + _MATMUL_FLAGS,
   shape=lambda ctx: _batch_matmul_shape(ctx, broadcast=False))
op("BatchMatMulV2", inputs=["x: T", "y: T"], outputs=["output: T"],
   attrs=[_t(f"{_FLOAT}, int16, int32, int64, {_UNSIGNED}, {_COMPLEX}")] + _MATMUL_FLAGS,
   shape=lambda ctx: _batch_matmul_shape(ctx, broadcast=True))
_V3_IN = f"{_FLOAT}, uint8, int8, int16, int32, int64, {_COMPLEX}"
op("BatchMatMulV3", inputs=["x: Ta", "y: Tb"], outputs=["output: Tout"],
   attrs=[f"Ta: {{{_V3_IN}}}", f"Tb: {{{_V3_IN}}}", f"Tout: {{{_FLOAT}, int16, int32, int64, {_COMPLEX}}}"]
   + _MATMUL_FLAGS, shape=lambda ctx: _batch_matmul_shape(ctx, broadcast=True))


def _einsum_shape(ctx):
    try:
        terms, rhs = nm.parse_einsum(ctx.attr("equation").decode(), ctx.num_inputs)
        dims = nm.einsum_output_dims(terms, rhs, [s.dims for s in ctx.input_shapes])
    except ValueError as exc:
        raise ctx.error(str(exc)) from None
    return TensorShape(dims)


op("Einsum", inputs=["inputs: N * T"], outputs=["output: T"], attrs=["equation: string", "N: int >= 1", "T: type"],
   shape=_einsum_shape)


def _square_matrices(ctx) -> TensorShape:
    shape = ctx.input_shape(0)
    if shape.rank is not None:
        if shape.rank < 2:
            raise ctx.error(f"input must have rank >= 2, got shape {shape}")
        if shape.dims[-1] is not None and shape.dims[-2] is not None and shape.dims[-1] != shape.dims[-2]:
            raise ctx.error(f"input must be (batches of) square matrices, got shape {shape}")
    return shape


op("MatrixInverse", inputs=["input: T"], outputs=["output: T"],
   attrs=["adjoint: bool = false", "T: {float64, float32, float16, complex64, complex128}"], shape=_square_matrices)
op("MatrixDeterminant", inputs=["input: T"], outputs=["output: T"],
   attrs=["T: {float16, float32, float64, complex64, complex128}"],
   shape=lambda ctx: _square_matrices(ctx)[:-2])


# -- casts and sequences ----------------------------------------------------------------------------

op("Cast", inputs=["x: SrcT"], outputs=["y: DstT"], attrs=["SrcT: type", "DstT: type", "Truncate: bool = false"],
   shape=sf.unchanged, foldable=True)


def _scalar_inputs(ctx, names, first=0):
    for i, name in enumerate(names, start=first):
        if ctx.input_shape(i).rank not in (None, 0):
            raise ctx.error(f"{name} must be a scalar, got shape {ctx.input_shape(i)}")


def _range_shape(ctx):
    _scalar_inputs(ctx, ("start", "limit", "delta"))
    values = [ctx.input_value(i) for i in range(3)]
    if any(v is None for v in values):
        return TensorShape([None])
    try:
        return TensorShape([nm.range_size(*(v[()] for v in values), ctx.output_dtype().storage)])
    except ValueError as exc:
        raise ctx.error(str(exc)) from None


op("Range", inputs=["start: Tidx", "limit: Tidx", "delta: Tidx"], outputs=["output: Tidx"],
   attrs=[f"Tidx: {{{_FLOAT}, {_SIGNED}, uint16, uint32, uint64}} = int32"], shape=_range_shape, foldable=True)


def _linspace_shape(ctx):
    _scalar_inputs(ctx, ("start", "stop", "num"))
    num = ctx.input_value(2)
    if num is None:
        return TensorShape([None])
    if int(num) <= 0:
        raise ctx.error(f"Requires num > 0: {int(num)}")
    return TensorShape([int(num)])


op("LinSpace", inputs=["start: T", "stop: T", "num: Tidx"], outputs=["output: T"], attrs=[_t(_FLOAT), _TIDX],
   shape=_linspace_shape)


# -- segments -------------------------------------------------------------------------------------

def _unsorted_segment_shape(ctx):
    data, ids = ctx.input_shape(0), ctx.input_shape(1)
    if ctx.input_shape(2).rank not in (None, 0):
        raise ctx.error(f"num_segments must be a scalar, got shape {ctx.input_shape(2)}")
    num = ctx.input_value(2)
    first = None if num is None else int(num)
    if data.rank is None or ids.rank is None:
        return TensorShape(None)
    if ids.rank > data.rank or not data[:ids.rank].is_compatible_with(ids):
        raise ctx.error(f"data shape {data} does not start with segment_ids shape {ids}")
    return TensorShape([first]).concatenate(data[ids.rank:])


def sorted_segment_shape(ctx):
    """[last id + 1] + data.shape[1:] for the sorted segment ops (their ids ascend)."""
    data, ids = ctx.input_shape(0), ctx.input_shape(1)
    if ids.rank not in (None, 1):
        raise ctx.error(f"segment_ids must be a vector, got shape {ids}")
    if data.rank is None:
        return TensorShape(None)
    if data.rank == 0:
        raise ctx.error("data must have rank >= 1")
    if ids.rank == 1 and not data[:1].is_compatible_with(ids):
        raise ctx.error(f"segment_ids shape {ids} does not match the first dimension of data shape {data}")
    values = ctx.input_value(1)
    if values is None:
        segments = None
    else:
        segments = int(values[-1]) + 1 if values.size else 0   # the ids are sorted
    return TensorShape([segments]).concatenate(data[1:])


for _name, _api, _types, _index in [
        ("UnsortedSegmentSum", "unsorted_segment_sum", _NUMBER, "{int16, int32, int64}"),
        ("UnsortedSegmentProd", "unsorted_segment_prod", _NUMBER, "{int32, int64}"),
        ("UnsortedSegmentMax", "unsorted_segment_max", _REAL, "{int32, int64}"),
        ("UnsortedSegmentMin", "unsorted_segment_min", _REAL, "{int32, int64}")]:
    op(_name, inputs=["data: T", "segment_ids: Tindices", "num_segments: Tnumsegments"], outputs=["output: T"],
       attrs=[_t(_types), f"Tindices: {_index}", "Tnumsegments: {int32, int64} = int32"],
       shape=_unsorted_segment_shape, api=_api)
for _name, _api in [("SegmentSum", "segment_sum"), ("SegmentMean", "segment_mean")]:
    op(_name, inputs=["data: T", "segment_ids: Tindices"], outputs=["output: T"],
       attrs=[_t(_NUMBER), "Tindices: {int32, int64}"], shape=sorted_segment_shape, api=_api)
