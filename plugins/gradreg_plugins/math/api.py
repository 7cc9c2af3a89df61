"""Builders of the math family whose Python signature differs from the op's inputs
(``gradreg.<name>``), following TensorFlow's Python API: argument order and defaults,
dtype conversion of Python operands, the op chosen per dtype, composite graphs, seeds."""
from __future__ import annotations

import numpy as np

from gradreg.build.builders import apply_op, constant, conversion_scope, convert_to_tensor, graph_of, op_scope
from gradreg.model import dtypes
from gradreg.model.graph import Tensor
from gradreg_plugins.math import family
from gradreg_plugins.math import numerics as nm

api = family.api_function


def _is_tensor(value) -> bool:
    return isinstance(value, Tensor) or hasattr(value, "_gradreg_tensor_")


def _convert_pair(x, y, graph=None):
    """Both operands as Tensors; a Python operand takes the other operand's dtype when it can
    (TensorFlow's binary operator conversion)."""
    graph = graph or graph_of((x, y))
    if not _is_tensor(x) and _is_tensor(y):
        y = convert_to_tensor(y, graph=graph)
        return convert_to_tensor(x, graph=graph, name="x", preferred_dtype=y.dtype.base_dtype), y
    x = convert_to_tensor(x, graph=graph, name="x")
    return x, convert_to_tensor(y, graph=graph, name="y", preferred_dtype=x.dtype.base_dtype)


def _same_dtype_pair(x, y, what: str):
    x, y = _convert_pair(x, y)
    if x.dtype.base_dtype is not y.dtype.base_dtype:
        raise TypeError(f"{what}: x and y must have the same dtype, got {x.dtype.name} != {y.dtype.name}")
    return x, y


# -- arithmetic -------------------------------------------------------------------------------

@api("add")
def add(x, y, name=None):
    """x + y: AddV2, or Add for strings (concatenation)."""
    with op_scope(name, "Add", (x, y)) as name:
        x, y = _convert_pair(x, y)
        return apply_op("Add" if x.dtype.base_dtype is dtypes.string else "AddV2", x, y, name=name)


# Integer division results are floats: narrow integers to float32, wide ones to float64.
_TRUEDIV_TYPES = {
    dtypes.uint8: dtypes.float32, dtypes.int8: dtypes.float32, dtypes.uint16: dtypes.float32,
    dtypes.int16: dtypes.float32, dtypes.uint32: dtypes.float64, dtypes.int32: dtypes.float64,
    dtypes.uint64: dtypes.float64, dtypes.int64: dtypes.float64,
}


def _as_quotient_type(x, y, what: str):
    x, y = _same_dtype_pair(x, y, what)
    dtype = x.dtype.base_dtype
    target = _TRUEDIV_TYPES.get(dtype)
    if target is None and not (dtype.is_floating or dtype.is_complex):
        raise TypeError(f"{what}: invalid dtype {dtype.name}")
    if target is not None:
        x, y = cast(x, target), cast(y, target)
    return x, y


@api("truediv")
def truediv(x, y, name=None):
    """x / y with Python 3 semantics: integers are cast to float (RealDiv)."""
    with op_scope(name, "truediv", (x, y)) as name:
        x, y = _as_quotient_type(x, y, "truediv")
        return apply_op("RealDiv", x, y, name=name)


api("divide")(truediv)


@api("div")
def div(x, y, name=None):
    """x / y with Python 2 semantics (tf.compat.v1.div): RealDiv for floats and complex numbers,
    FloorDiv for integers. The Div op itself is gradreg.raw_ops.Div."""
    with op_scope(name, "div", (x, y)) as name:
        x, y = _same_dtype_pair(x, y, "div")
        dtype = x.dtype.base_dtype
        return apply_op("RealDiv" if dtype.is_floating or dtype.is_complex else "FloorDiv", x, y, name=name)


@api("floordiv")
def floordiv(x, y, name=None):
    """x // y: FloorDiv (floor(x / y) for floats), named as TensorFlow's (scope "floordiv")."""
    with op_scope(name, "floordiv", (x, y)) as name:
        return apply_op("FloorDiv", x, y, name=name)


@api("div_no_nan")
def div_no_nan(x, y, name=None):
    """x / y, 0 where y is 0; integers are cast to float as in truediv."""
    with op_scope(name, "div_no_nan", (x, y)) as name:
        x, y = _as_quotient_type(x, y, "div_no_nan")
        return apply_op("DivNoNan", x, y, name=name)


@api("abs")
def abs_(x, name=None):
    """|x|; ComplexAbs (a real result) for complex x."""
    with op_scope(name, "Abs", (x,)) as name:
        x = convert_to_tensor(x, name="x")
        if x.dtype.is_complex:
            return apply_op("ComplexAbs", x, Tout=x.dtype.base_dtype.real_dtype, name=name)
        return apply_op("Abs", x, name=name)


@api("round")
def round_(x, name=None):
    """Round half to even; integers are returned as they are."""
    with conversion_scope(name, "Round", (x,)) as name:
        x = convert_to_tensor(x, name="x")
        return x if x.dtype.is_integer else apply_op("Round", x, name=name)


@api("logical_xor")
def logical_xor(x, y, name="LogicalXor"):
    """(x or y) and not (x and y), as TensorFlow composes it."""
    return apply_op("LogicalAnd", apply_op("LogicalOr", x, y),
                    apply_op("LogicalNot", apply_op("LogicalAnd", x, y)), name=name)


@api("complex")
def complex_(real, imag, name=None):
    """real + i * imag: complex64 from float32 parts, complex128 from float64 parts."""
    with op_scope(name, "Complex", (real, imag)) as name:
        real = convert_to_tensor(real, name="real")
        imag = convert_to_tensor(imag, name="imag", preferred_dtype=real.dtype.base_dtype)
        kinds = {(dtypes.float32, dtypes.float32): dtypes.complex64,
                 (dtypes.float64, dtypes.float64): dtypes.complex128}
        tout = kinds.get((real.dtype.base_dtype, imag.dtype.base_dtype))
        if tout is None:
            raise TypeError(f"complex: real and imag must both be float32 or both float64, got "
                            f"{real.dtype.name} and {imag.dtype.name}")
        return apply_op("Complex", real, imag, Tout=tout, name=name)


@api("real")
def real(input, name=None):  # noqa: A002  (TensorFlow's argument name)
    with op_scope(name, "Real", (input,)) as name:
        input = convert_to_tensor(input, name="input")
        if input.dtype.is_complex:
            return apply_op("Real", input, Tout=input.dtype.base_dtype.real_dtype, name=name)
        if input.dtype.is_numeric:
            return input
        raise TypeError(f"real: input must be numeric, got {input.dtype.name}")


@api("imag")
def imag(input, name=None):  # noqa: A002  (TensorFlow's argument name)
    """The imaginary part; zeros for a real input."""
    with op_scope(name, "Imag", (input,)) as name:
        input = convert_to_tensor(input, name="input")
        if input.dtype.is_complex:
            return apply_op("Imag", input, Tout=input.dtype.base_dtype.real_dtype, name=name)
        return apply_op("ZerosLike", input, name=name)


@api("conj")
def conj(x, name=None):
    """The complex conjugate; real numbers are returned as they are."""
    with conversion_scope(name, "Conj", (x,)) as name:
        x = convert_to_tensor(x, name="x")
        if x.dtype.is_complex or x.dtype.base_dtype is dtypes.variant:
            return apply_op("Conj", x, name=name)
        if x.dtype.is_floating or x.dtype.is_integer:
            return x
        raise TypeError(f"conj: expected a numeric or variant tensor, got {x.dtype.name}")


@api("angle")
def angle(input, name=None):  # noqa: A002  (TensorFlow's argument name)
    """The argument of complex numbers; pi for negative and 0 for other real numbers."""
    with op_scope(name, "Angle", (input,)) as name:
        input = convert_to_tensor(input, name="input")
        if input.dtype.is_complex:
            return apply_op("Angle", input, Tout=input.dtype.base_dtype.real_dtype, name=name)
        dtype = input.dtype.base_dtype
        return apply_op("SelectV2", apply_op("Less", input, constant(0, dtype)), constant(np.pi, dtype),
                        constant(0, dtype), name=name)


@api("add_n")
def add_n(inputs, name=None):
    """The sum of a list of tensors of one shape and dtype (AddN; one input is returned as is)."""
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise ValueError("add_n: inputs must be a non-empty list of tensors with the same dtype and shape")
    inputs = [convert_to_tensor(t) for t in inputs]
    if len(inputs) == 1:
        return apply_op("Identity", inputs[0], name=name) if name else inputs[0]
    return apply_op("AddN", inputs, name=name)


@api("clip_by_value")
def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    """max(min(t, clip_value_max), clip_value_min), as TensorFlow builds it (Minimum, Maximum)."""
    with op_scope(name, "clip_by_value", (t, clip_value_min, clip_value_max)) as name:
        values = convert_to_tensor(t, name="t")
        t_min = apply_op("Minimum", values, clip_value_max)
        t_max = apply_op("Maximum", t_min, clip_value_min, name=name)
    for result in (t_min, t_max):
        if not values.shape.is_compatible_with(result.shape):
            raise ValueError(f"clip_by_value: the clip values would broadcast t of shape {values.shape} "
                             f"to {result.shape}")
    return t_max


@api("count_nonzero")
def count_nonzero(input, axis=None, keepdims=False, dtype=dtypes.int64, name=None):  # noqa: A002  (TensorFlow's argument name)
    """The number of non-zero elements (along ``axis``), as ``dtype``. (As in TensorFlow, the
    result is named after its last op inside the scope ``count_nonzero``, not ``name``.)"""
    with op_scope(name, "count_nonzero", (input,)):
        input = convert_to_tensor(input, name="input")
        if input.dtype.base_dtype is dtypes.bool_:
            predicate = input
        else:
            predicate = apply_op("NotEqual", input, constant(0, input.dtype.base_dtype, name="zeros"))
        counts = reduce_sum(cast(predicate, dtypes.int64), axis=axis, keepdims=keepdims)
        return cast(counts, dtype)


# -- reductions ---------------------------------------------------------------------------------

def _alias(value, old_value, name: str, old_name: str):
    if old_value is None:
        return value
    if value is not None and value is not False:
        raise ValueError(f"cannot pass both {name} and its deprecated alias {old_name}")
    return old_value


def _all_axes(x: Tensor):
    """The axis input reducing every dimension: a Const from the static rank, else Range(0, Rank(x))."""
    rank = x.shape.rank
    if rank:
        return constant(np.arange(rank, dtype=np.int32), graph=x.graph)
    return range_(0, apply_op("Rank", x))


def _reduce(op_type: str, input_tensor, axis, keepdims, name, reduction_indices, keep_dims):
    axis = _alias(axis, reduction_indices, "axis", "reduction_indices")
    keepdims = bool(_alias(keepdims, keep_dims, "keepdims", "keep_dims"))
    with conversion_scope(name, op_type, (input_tensor,)) as name:
        x = convert_to_tensor(input_tensor, name="input")
    axes = _all_axes(x) if axis is None else axis
    return apply_op(op_type, x, axes, keep_dims=keepdims, name=name)


def _reduction_builder(api_name: str, op_type: str):
    def builder(input_tensor, axis=None, keepdims=False, name=None, reduction_indices=None, keep_dims=None):
        return _reduce(op_type, input_tensor, axis, keepdims, name, reduction_indices, keep_dims)
    builder.__name__ = builder.__qualname__ = api_name
    builder.__doc__ = (f"{op_type} of ``input_tensor`` over ``axis`` (None: every dimension), keeping the "
                       f"reduced dimensions as 1 when ``keepdims``.")
    api(api_name)(builder)
    return builder


reduce_sum = _reduction_builder("reduce_sum", "Sum")
_reduction_builder("reduce_mean", "Mean")
_reduction_builder("reduce_prod", "Prod")
_reduction_builder("reduce_max", "Max")
_reduction_builder("reduce_min", "Min")
_reduction_builder("reduce_all", "All")
_reduction_builder("reduce_any", "Any")
_reduction_builder("reduce_euclidean_norm", "EuclideanNorm")


def _arg_builder(api_name: str, op_type: str):
    def builder(input, axis=None, output_type=dtypes.int64, name=None, dimension=None):  # noqa: A002  (TensorFlow's argument name)
        axis = _alias(axis, dimension, "axis", "dimension")
        return apply_op(op_type, input, 0 if axis is None else axis, output_type=output_type, name=name)
    builder.__name__ = builder.__qualname__ = api_name
    builder.__doc__ = f"{op_type}: the index of the extreme value along ``axis`` (default 0)."
    api(api_name)(builder)


_arg_builder("argmax", "ArgMax")
_arg_builder("argmin", "ArgMin")


def _scan_builder(api_name: str, op_type: str):
    def builder(x, axis=0, exclusive=False, reverse=False, name=None):
        return apply_op(op_type, x, axis, exclusive=exclusive, reverse=reverse, name=name)
    builder.__name__ = builder.__qualname__ = api_name
    builder.__doc__ = f"{op_type} along ``axis``, optionally exclusive and/or reversed."
    api(api_name)(builder)


_scan_builder("cumsum", "Cumsum")
_scan_builder("cumprod", "Cumprod")


# -- products --------------------------------------------------------------------------------------

@api("matmul")
def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False, a_is_sparse=False,
           b_is_sparse=False, output_type=None, grad_a=False, grad_b=False, name=None):
    """a @ b: MatMul for matrices, BatchMatMulV2 (broadcasting batch dims) for higher or unknown
    ranks, BatchMatMulV3 when ``output_type`` differs from the inputs'. The sparsity hints change
    nothing (the result is the same)."""
    if transpose_a and adjoint_a:
        raise ValueError("Only one of transpose_a and adjoint_a can be True.")
    if transpose_b and adjoint_b:
        raise ValueError("Only one of transpose_b and adjoint_b can be True.")
    with op_scope(name, "MatMul", (a, b)) as name:
        a = convert_to_tensor(a, name="a")
        b = convert_to_tensor(b, name="b", graph=a.graph, preferred_dtype=a.dtype.base_dtype)
        return _matmul(a, b, transpose_a, transpose_b, adjoint_a, adjoint_b, output_type, grad_a, grad_b, name)


def _matmul(a, b, transpose_a, transpose_b, adjoint_a, adjoint_b, output_type, grad_a, grad_b, name):
    output_type = None if output_type is None else dtypes.as_dtype(output_type)
    use_v3 = output_type is not None and output_type is not a.dtype.base_dtype
    batched = a.shape.rank is None or a.shape.rank > 2 or b.shape.rank is None or b.shape.rank > 2
    if batched:
        # The batch ops have no plain transpose: conjugate, then take the adjoint.
        if transpose_a:
            a, adjoint_a = conj(a), True
        if transpose_b:
            b, adjoint_b = conj(b), True
        flags = dict(adj_x=adjoint_a, adj_y=adjoint_b, grad_x=grad_a, grad_y=grad_b)
    else:
        # MatMul has no adjoint: conjugate, then transpose.
        if adjoint_a:
            a, transpose_a = conj(a), True
        if adjoint_b:
            b, transpose_b = conj(b), True
        flags = dict(adj_x=transpose_a, adj_y=transpose_b, grad_x=grad_a, grad_y=grad_b)
    if use_v3:
        return apply_op("BatchMatMulV3", a, b, Tout=output_type, name=name, **flags)
    if batched:
        return apply_op("BatchMatMulV2", a, b, name=name, **flags)
    return apply_op("MatMul", a, b, transpose_a=transpose_a, transpose_b=transpose_b, grad_a=grad_a,
                    grad_b=grad_b, name=name)


def _implicit_output(terms: list[str]) -> str:
    """numpy's implicit einsum output: the ellipsis, then the labels used once, sorted."""
    labels = "".join(terms).replace(".", "")
    once = sorted(c for c in set(labels) if labels.count(c) == 1)
    return ("." if any("." in t for t in terms) else "") + "".join(once)


def _contraction_steps(terms: list[str], rhs: str) -> list[tuple[str, str, str]]:
    """Left-to-right pairwise contractions (TensorFlow's Einsum op takes one or two inputs):
    each step keeps the labels a later input or the output still needs."""
    steps = []
    current = terms[0]
    for k in range(1, len(terms)):
        if k == len(terms) - 1:
            out = rhs
        else:
            needed = set("".join(terms[k + 1:]) + rhs)
            seen = ""
            for c in current + terms[k]:
                if c != "." and c in needed and c not in seen:
                    seen += c
            out = ("." if "." in current + terms[k] else "") + seen
        steps.append((current, terms[k], out))
        current = out
    return steps


def _equation(*parts: str) -> str:
    *inputs, out = parts
    return ",".join(t.replace(".", "...") for t in inputs) + "->" + out.replace(".", "...")


@api("einsum")
def einsum(equation, *inputs, name=None, **kwargs):
    """Einstein summation (NumPy's notation, implicit output allowed). Three or more inputs are
    contracted pairwise, left to right."""
    kwargs.pop("optimize", None)
    if kwargs:
        raise TypeError(f"einsum: unexpected arguments {sorted(kwargs)}")
    if not inputs:
        raise ValueError("einsum: at least one input is required")
    equation = equation.replace(" ", "")
    if "->" not in equation:
        lhs = equation.replace("...", ".")
        equation = equation + "->" + _implicit_output(lhs.split(",")).replace(".", "...")
    terms, rhs = nm.parse_einsum(equation, len(inputs))
    # As TensorFlow's: the Einsum nodes go inside the scope "einsum" (none takes its name).
    with op_scope(name, "einsum", inputs):
        tensors = [convert_to_tensor(t) for t in inputs]
        if len(tensors) <= 2:
            return apply_op("Einsum", tensors, equation=_equation(*terms, rhs))
        result = tensors[0]
        for (left, right, out), operand in zip(_contraction_steps(terms, rhs), tensors[1:]):
            result = apply_op("Einsum", [result, operand], equation=_equation(left, right, out))
        return result


# -- casts and sequences ------------------------------------------------------------------------------

@api("cast")
def cast(x, dtype, name=None):
    """x converted to ``dtype`` (a Cast node; none when x already has that dtype)."""
    base = dtypes.as_dtype(dtype).base_dtype
    if isinstance(x, Tensor) and x.dtype.base_dtype is base:
        return x
    with op_scope(name, "Cast", (x,)) as name:
        x = convert_to_tensor(x, name="x")
        if x.dtype.base_dtype is base:
            return x
        return apply_op("Cast", x, DstT=base, name=name)


_RANGE_TYPES = [dtypes.int32, dtypes.int64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]


@api("range")
def range_(start, limit=None, delta=1, dtype=None, name="range"):
    """[start, start + delta, ...) up to ``limit`` (``range(n)`` counts from 0); the dtype is
    ``dtype`` or the widest of the arguments' (int32 < int64 < float16 < bfloat16 < float32 < float64)."""
    if limit is None:
        start, limit = 0, start
    graph = graph_of((start, limit, delta))
    with op_scope(name, "Range", (start, limit, delta)) as name:
        args = []
        for value, arg_name in ((start, "start"), (limit, "limit"), (delta, "delta")):
            args.append(value if _is_tensor(value) else
                        convert_to_tensor(value, dtype=dtype, name=arg_name, graph=graph))
        if dtype is None:
            kinds = [t.dtype.base_dtype for t in args]
            for k in kinds:
                if k not in _RANGE_TYPES:
                    raise TypeError(f"range: unsupported dtype {k.name}")
            target = max(kinds, key=_RANGE_TYPES.index)
        else:
            target = dtypes.as_dtype(dtype).base_dtype
        start, limit, delta = (cast(t, target) for t in args)
        return apply_op("Range", start, limit, delta, name=name)


@api("linspace")
def linspace(start, stop, num, name=None, axis=0):
    """``num`` evenly spaced values from ``start`` to ``stop`` inclusive (scalar start and stop)."""
    with op_scope(name, "linspace", (start, stop)) as name:
        start = convert_to_tensor(start, name="start")
        stop = convert_to_tensor(stop, name="stop", graph=start.graph, preferred_dtype=start.dtype.base_dtype)
        if axis != 0 or start.shape.rank not in (None, 0) or stop.shape.rank not in (None, 0):
            raise ValueError("linspace: gradreg supports scalar start and stop only (axis=0)")
        return apply_op("LinSpace", start, stop, num, name=name)


api("lin_space")(linspace)


# -- random -------------------------------------------------------------------------------------

DEFAULT_GRAPH_SEED = 87654321
_MAXINT32 = 2 ** 31 - 1


def get_seed(graph, op_seed):
    """The (seed, seed2) attrs of a random op, as tf.compat.v1.get_seed: the graph seed and the
    op seed (a per-graph counter when only the graph seed is set; DEFAULT_GRAPH_SEED when only
    the op seed is). Neither set: (0, 0), fresh randomness."""
    if graph.seed is not None:
        if op_seed is None:
            op_seed = len(graph)
        seeds = (graph.seed % _MAXINT32, op_seed % _MAXINT32)
    elif op_seed is not None:
        seeds = (DEFAULT_GRAPH_SEED, op_seed % _MAXINT32)
    else:
        return 0, 0
    return (0, _MAXINT32) if seeds == (0, 0) else seeds


def _shape_tensor(shape, graph):
    """A shape argument as an int32 (int64 when needed) vector tensor."""
    if _is_tensor(shape):
        return convert_to_tensor(shape, graph=graph)
    items = list(shape) if isinstance(shape, (list, tuple)) else shape
    if isinstance(items, list) and any(_is_tensor(d) for d in items):
        return apply_op("Pack", [d if _is_tensor(d) else constant(d, dtypes.int32, graph=graph) for d in items])
    values = np.asarray(items, dtype=np.int64)
    fits = values.size == 0 or (values.max() <= np.iinfo(np.int32).max and values.min() >= np.iinfo(np.int32).min)
    return constant(values, dtypes.int32 if fits else dtypes.int64, name="shape", graph=graph)


@api("random_uniform")
def random_uniform(shape, minval=0, maxval=None, dtype=dtypes.float32, seed=None, name=None):
    """Uniform values in [minval, maxval) (maxval defaults to 1 for floats and is required for
    integers)."""
    dtype = dtypes.as_dtype(dtype)
    if maxval is None:
        if dtype.is_integer:
            raise ValueError(f"random_uniform: maxval is required for integer dtype {dtype.name}")
        maxval = 1
    graph = graph_of((shape, minval, maxval))
    # As TensorFlow names them: inside the scope, and only the integer op and the shifted
    # result take its name (a [0, 1) float result is ".../RandomUniform", a scaled one ".../Mul").
    with op_scope(name, "random_uniform", (shape, minval, maxval)) as name:
        shape = _shape_tensor(shape, graph)
        # Unit bounds given as Python ints need no arithmetic (and no tensors).
        minval_is_zero = isinstance(minval, int) and minval == 0
        maxval_is_one = isinstance(maxval, int) and maxval == 1
        if not minval_is_zero or not maxval_is_one or dtype.is_integer:
            minval = convert_to_tensor(minval, dtype=dtype, name="min", graph=graph)
            maxval = convert_to_tensor(maxval, dtype=dtype, name="max", graph=graph)
        seed1, seed2 = get_seed(graph, seed)
        if dtype.is_integer:
            return apply_op("RandomUniformInt", shape, minval, maxval, seed=seed1, seed2=seed2, name=name)
        result = apply_op("RandomUniform", shape, dtype=dtype, seed=seed1, seed2=seed2)
        if minval_is_zero:
            return result if maxval_is_one else apply_op("Mul", result, maxval)
        with graph.name_scope("sub") as sub:
            width = apply_op("Sub", maxval, minval, name=sub)
        with graph.name_scope("mul") as mul:
            scaled = apply_op("Mul", result, width, name=mul)
        return apply_op("AddV2", scaled, minval, name=name)


def _normal(op_type: str, default_name: str, shape, mean, stddev, dtype, seed, name):
    dtype = dtypes.as_dtype(dtype)
    graph = graph_of((shape, mean, stddev))
    with op_scope(name, default_name, (shape, mean, stddev)) as name:
        shape = _shape_tensor(shape, graph)
        mean = convert_to_tensor(mean, dtype=dtype, name="mean", graph=graph)
        stddev = convert_to_tensor(stddev, dtype=dtype, name="stddev", graph=graph)
        seed1, seed2 = get_seed(graph, seed)
        values = apply_op(op_type, shape, dtype=dtype, seed=seed1, seed2=seed2)
        with graph.name_scope("mul") as mul:
            scaled = apply_op("Mul", values, stddev, name=mul)
        return apply_op("AddV2", scaled, mean, name=name)


@api("random_normal")
def random_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None):
    """Normally distributed values."""
    return _normal("RandomStandardNormal", "random_normal", shape, mean, stddev, dtype, seed, name)


@api("truncated_normal")
def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None):
    """Normally distributed values, those beyond two standard deviations drawn again."""
    return _normal("TruncatedNormal", "truncated_normal", shape, mean, stddev, dtype, seed, name)
