"""Python builders of the array family, with TensorFlow's Python argument order and its
graph-building choices (a Const where TensorFlow folds one, Pack for lists holding Tensors,
Pad versus PadV2 versus MirrorPad, ...). Builders TensorFlow spells exactly like the op's
inputs are generated from the op table (``api=`` in ops.py) instead."""
from __future__ import annotations

import builtins
import numbers
from typing import Any

import numpy as np

from gradreg.build.builders import apply_op, constant, convert_to_tensor, graph_of, op_scope
from gradreg.model import dtypes
from gradreg.model.graph import Tensor
from gradreg.model.shapes import TensorShape
from gradreg_plugins.array import family

api = family.api_function

api("constant")(constant)


def _contains_tensor(value) -> bool:
    if isinstance(value, Tensor):
        return True
    return isinstance(value, (list, tuple)) and any(_contains_tensor(v) for v in value)


# Python values given to apply_op become Consts (a list holding Tensors a Pack) inside the op's
# scope, named after the input ("Reshape/shape"), as TensorFlow's generated builders name them.


# -- sources and identities ----------------------------------------------------------------------

@api("placeholder")
def placeholder(dtype, shape=None, name=None):
    """A Placeholder node of ``dtype`` and static ``shape`` (None: unknown rank), fed at run time."""
    return apply_op("Placeholder", dtype=dtypes.as_dtype(dtype), shape=TensorShape(shape), name=name)


@api("placeholder_with_default")
def placeholder_with_default(input, shape, name=None):  # noqa: A002  (TensorFlow's argument name)
    """``input`` unless the node is fed a value compatible with ``shape``."""
    return apply_op("PlaceholderWithDefault", input, shape=TensorShape(shape), name=name)


@api("prevent_gradient")
def prevent_gradient(input, message="", name=None):  # noqa: A002  (TensorFlow's argument name)
    """``input``, but differentiating through it is an error carrying ``message``."""
    return apply_op("PreventGradient", input, message=message, name=name)


@api("check_numerics")
def check_numerics(tensor, message, name=None):
    """``tensor``, raising at run time (with ``message``) if it holds NaN or Inf."""
    return apply_op("CheckNumerics", tensor, message=message, name=name)


@api("ensure_shape")
def ensure_shape(x, shape, name=None):
    """``x``, checked at run time to have a shape compatible with ``shape``."""
    return apply_op("EnsureShape", x, shape=TensorShape(shape), name=name)


# -- shapes ------------------------------------------------------------------------------------

@api("shape")
def shape(input, out_type=dtypes.int32, name=None):  # noqa: A002  (TensorFlow's argument name)
    """The shape of ``input`` as a vector; a Const when the static shape is fully known."""
    with op_scope(name, "Shape", (input,)) as name:
        value = convert_to_tensor(input)
        if out_type is None:   # TensorFlow's shape_internal: int64 only if a dimension needs it
            if value.shape.is_fully_defined():
                dims = list(value.shape.dims)
                wide = any(d >= 2 ** 31 for d in dims)
                return constant(dims, dtypes.int64 if wide else dtypes.int32, name="shape_as_tensor",
                                graph=value.graph)
            out_type = dtypes.int32
        out_type = dtypes.as_dtype(out_type)
        if value.shape.is_fully_defined():
            return constant(list(value.shape.dims), out_type, name=name, graph=value.graph)
        return apply_op("Shape", value, out_type=out_type, name=name)


@api("shape_n")
def shape_n(input, out_type=dtypes.int32, name=None):  # noqa: A002  (TensorFlow's argument name)
    """The shapes of a list of tensors (one ShapeN node)."""
    return apply_op("ShapeN", list(input), out_type=dtypes.as_dtype(out_type), name=name)


@api("size")
def size(input, out_type=dtypes.int32, name=None):  # noqa: A002  (TensorFlow's argument name)
    """The number of elements of ``input``; a Const when statically known."""
    with op_scope(name, "Size", (input,)) as name:
        value = convert_to_tensor(input)
        out_type = dtypes.as_dtype(out_type)
        static = value.shape
        if static.is_fully_defined() or (static.rank is not None and 0 in static.dims):
            count = 0 if 0 in static.dims else static.num_elements()
            return constant(count, out_type, name=name, graph=value.graph)
        return apply_op("Size", value, out_type=out_type, name=name)


@api("rank")
def rank(input, name=None):  # noqa: A002  (TensorFlow's argument name)
    """The rank of ``input`` as an int32 scalar; a Const when statically known."""
    with op_scope(name, "Rank", (input,)) as name:
        value = convert_to_tensor(input)
        if value.shape.rank is not None:
            return constant(value.shape.rank, dtypes.int32, name=name, graph=value.graph)
        return apply_op("Rank", value, name=name)


# -- reshaping ---------------------------------------------------------------------------------

@api("reshape")
def reshape(tensor, shape, name=None):
    """``tensor`` with its elements arranged in ``shape`` (one entry may be -1)."""
    return apply_op("Reshape", tensor, shape, name=name)


@api("expand_dims")
def expand_dims(input, axis, name=None):  # noqa: A002  (TensorFlow's argument name)
    """``input`` with a dimension of 1 inserted at ``axis``."""
    return apply_op("ExpandDims", input, axis, name=name)


@api("squeeze")
def squeeze(input, axis=None, name=None):  # noqa: A002  (TensorFlow's argument name)
    """``input`` without its size-1 dimensions (only those in ``axis`` when given)."""
    if axis is None:
        axis = []
    elif isinstance(axis, numbers.Integral):
        axis = [axis]
    return apply_op("Squeeze", input, squeeze_dims=[int(a) for a in axis], name=name)


@api("transpose")
def transpose(a, perm=None, conjugate=False, name="transpose"):
    """``a`` with its dimensions permuted by ``perm`` (default: reversed); ``conjugate`` also
    conjugates complex values (ConjugateTranspose)."""
    with op_scope(name, "transpose", (a,)) as name:
        a = convert_to_tensor(a, name="a")
        op_type = "ConjugateTranspose" if conjugate and a.dtype.is_complex else "Transpose"
        if perm is None:
            if a.shape.rank is None:
                perm = apply_op("Range", apply_op("Rank", a) - 1, -1, -1)
            else:
                perm = np.arange(a.shape.rank - 1, -1, -1, dtype=np.int32)
        return apply_op(op_type, a, perm, name=name)


# -- joining and splitting ---------------------------------------------------------------------

@api("concat")
def concat(values, axis, name="concat"):
    """``values`` joined along ``axis`` (one value: an Identity of it, as in TensorFlow)."""
    if not isinstance(values, (list, tuple)):
        values = [values]
    if len(values) == 1:
        # TensorFlow's: a scope of the name holding a Const of the axis, the Identity inside it.
        with op_scope(name, "concat", values):
            axis = convert_to_tensor(axis, dtypes.int32, name="concat_dim")
            if axis.shape.rank not in (None, 0):
                raise ValueError(f"concat: axis must be a scalar, got {axis!r}")
            return apply_op("Identity", values[0], name=name)
    return apply_op("ConcatV2", list(values), axis, name=name)


@api("split")
def split(value, num_or_size_splits, axis=0, num=None, name="split"):
    """``value`` split along ``axis`` into ``num_or_size_splits`` equal parts (an int) or parts
    of the given sizes (a vector; ``num`` is its length when not statically known)."""
    if isinstance(num_or_size_splits, numbers.Integral) and not isinstance(num_or_size_splits, bool):
        return apply_op("Split", axis, value, num_split=int(num_or_size_splits), name=name)
    size_splits = convert_to_tensor(num_or_size_splits)
    if size_splits.shape.rank == 0:
        raise ValueError("Rank-0 tensors are not supported as the num_or_size_splits argument to split. "
                         f"Argument provided: {num_or_size_splits!r}")
    if num is None:
        num = size_splits.shape[0] if size_splits.shape.rank is not None else None
        if num is None:
            raise ValueError(f"Cannot infer argument `num` from shape {size_splits.shape}")
    return apply_op("SplitV", value, size_splits, axis, num_split=int(num), name=name)


@api("stack")
def stack(values, axis=0, name="stack"):
    """``values`` (same shape) stacked along a new dimension ``axis``."""
    values = list(values)
    if axis == 0:   # TensorFlow's: a Const, or the Pack its conversion of the list makes
        return convert_to_tensor(values, name=name, graph=graph_of(values))
    first = values[0]
    rank = first.shape.rank if isinstance(first, Tensor) else np.ndim(first)
    if rank is not None and not -(rank + 1) <= axis < rank + 1:
        raise ValueError(f"Argument `axis` = {axis} not in range [{-(rank + 1)}, {rank + 1})")
    return apply_op("Pack", values, axis=axis, name=name)


@api("unstack")
def unstack(value, num=None, axis=0, name="unstack"):
    """The slices of ``value`` along ``axis`` (``num`` of them; inferred from the static shape)."""
    value = convert_to_tensor(value)
    if num is None:
        static = value.shape
        if static.rank is None:
            raise ValueError(f"Cannot infer argument `num` from shape {static}")
        if not -static.rank <= axis < static.rank:
            raise ValueError(f"Argument `axis` = {axis} not in range [{-static.rank}, {static.rank})")
        num = static.dims[axis]
        if num is None:
            raise ValueError(f"Cannot infer argument `num` from shape {static}")
    return apply_op("Unpack", value, num=int(num), axis=axis, name=name)


# -- slicing -----------------------------------------------------------------------------------

@api("slice")
def slice(input_, begin, size, name=None):  # noqa: A001  (TensorFlow's name)
    """The block of ``input_`` starting at ``begin`` with ``size`` (-1: to the end)."""
    return apply_op("Slice", input_, begin, size, name=name)


@api("strided_slice")
def strided_slice(input_, begin, end, strides=None, begin_mask=0, end_mask=0, ellipsis_mask=0,
                  new_axis_mask=0, shrink_axis_mask=0, name=None):
    """TensorFlow's strided_slice: python-style slicing with the five bit masks."""
    if strides is None:
        strides = ones_like(begin)
    return apply_op("StridedSlice", input_, begin, end, strides, begin_mask=begin_mask,
                    end_mask=end_mask, ellipsis_mask=ellipsis_mask, new_axis_mask=new_axis_mask,
                    shrink_axis_mask=shrink_axis_mask, name=name)


_SLICE_TYPE_ERROR = ("Only integers, slices (`:`), ellipsis (`...`), gradreg.newaxis (`None`) and scalar "
                     "int32/int64 tensors are valid indices")
_INDEX_DTYPES = (dtypes.int16, dtypes.int32, dtypes.int64)


def _check_index(index) -> None:
    if isinstance(index, numbers.Integral) and not isinstance(index, (bool, np.bool_)):
        return
    if isinstance(index, Tensor) and index.known_dtype.base_dtype in _INDEX_DTYPES and index.shape.rank in (None, 0):
        return
    raise TypeError(f"{_SLICE_TYPE_ERROR}, got {index!r}")


def _slice_spec(key) -> tuple[list, list, list, dict]:
    """Python indexing as StridedSlice's begin/end/strides lists and masks (TensorFlow's
    _slice_helper): a slice fills all three (a missing bound sets the mask bit), an int or
    scalar Tensor shrinks its axis, Ellipsis and None (newaxis) take a placeholder entry."""
    begin: list[Any] = []
    end: list[Any] = []
    strides: list[Any] = []
    masks = dict(begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0)
    for i, s in enumerate(key):
        bit = 1 << i
        if isinstance(s, builtins.slice):
            for part, target, mask, default in ((s.start, begin, "begin_mask", 0), (s.stop, end, "end_mask", 0),
                                                (s.step, strides, None, 1)):
                if part is None:
                    target.append(default)
                    if mask:
                        masks[mask] |= bit
                else:
                    _check_index(part)
                    target.append(part)
        elif s is Ellipsis or s is None:
            begin.append(0)
            end.append(0)
            strides.append(1)
            masks["ellipsis_mask" if s is Ellipsis else "new_axis_mask"] |= bit
        else:
            _check_index(s)
            begin.append(s)
            end.append(s + 1)
            strides.append(1)
            masks["shrink_axis_mask"] |= bit
    return begin, end, strides, masks


def _index_dtype(parts: list) -> dtypes.DType:
    """int64 if any index is an int64 Tensor or too big for int32, else int32 (TensorFlow casts
    all three vectors to int64 when one of them is)."""
    for v in parts:
        if isinstance(v, Tensor):
            if v.known_dtype.base_dtype is dtypes.int64:
                return dtypes.int64
        elif not -2**31 <= int(v) < 2**31:
            return dtypes.int64
    return dtypes.int32


def _index_vector(values: list, dtype: dtypes.DType, graph) -> Tensor:
    """begin, end or strides as a vector: TensorFlow's stack() of them ("stack", a Const or a
    Pack of Consts named by position)."""
    values = [apply_op("Cast", v, DstT=dtype) if isinstance(v, Tensor) and v.known_dtype.base_dtype is not dtype
              else v for v in values]
    return convert_to_tensor(values, dtype, name="stack", graph=graph)


@api("_slice_helper")
def _slice_helper(tensor, slice_spec, name=None):
    """``tensor[slice_spec]``: one StridedSlice node, as TensorFlow builds it."""
    if (isinstance(slice_spec, (bool, np.bool_))
            or (isinstance(slice_spec, Tensor) and slice_spec.dtype.base_dtype is dtypes.bool_)
            or (isinstance(slice_spec, np.ndarray) and slice_spec.dtype == np.bool_)):
        raise TypeError("boolean mask indexing is not supported by gradreg; use gradreg.where and gradreg.gather_nd")
    if not isinstance(slice_spec, (list, tuple)):
        slice_spec = [slice_spec]
    tensor = convert_to_tensor(tensor)
    begin, end, strides, masks = _slice_spec(slice_spec)
    # As TensorFlow's: the scope "strided_slice" whatever the name (the name is a variable's).
    with op_scope(None, "strided_slice", [tensor]) as scope:
        if begin:
            dtype = _index_dtype(begin + end + strides)
            vectors = [_index_vector(v, dtype, tensor.graph) for v in (begin, end, strides)]
        else:
            vectors = [constant(np.zeros(0, np.int32), name="Const", graph=tensor.graph)] * 3
        return apply_op("StridedSlice", tensor, *vectors, name=scope, **masks)


# -- padding, tiling, filling, broadcasting ----------------------------------------------------------

@api("pad")
def pad(tensor, paddings, mode="CONSTANT", constant_values=0, name=None):
    """``tensor`` padded by ``paddings`` ([rank, 2]): with ``constant_values`` (Pad, or PadV2 when
    not zero), or mirrored ("REFLECT" / "SYMMETRIC", MirrorPad)."""
    mode = str(mode).upper()
    if mode == "CONSTANT":
        if (not isinstance(constant_values, Tensor) and np.ndim(constant_values) == 0
                and constant_values == np.zeros_like(constant_values)):
            return apply_op("Pad", tensor, paddings, name=name)
        return apply_op("PadV2", tensor, paddings, constant_values, name=name)
    if mode in ("REFLECT", "SYMMETRIC"):
        return apply_op("MirrorPad", tensor, paddings, mode=mode, name=name)
    raise ValueError('Value of argument `mode` expected to be one of "CONSTANT", "REFLECT", or "SYMMETRIC". '
                     f"Received `mode` = {mode}")


@api("tile")
def tile(input, multiples, name=None):  # noqa: A002  (TensorFlow's argument name)
    """``input`` repeated ``multiples[i]`` times along each dimension i."""
    return apply_op("Tile", input, multiples, name=name)


@api("fill")
def fill(dims, value, name=None):
    """A tensor of shape ``dims`` filled with the scalar ``value``."""
    return apply_op("Fill", dims, value, name=name)


@api("broadcast_to")
def broadcast_to(input, shape, name=None):  # noqa: A002  (TensorFlow's argument name)
    """``input`` broadcast (NumPy rules, towards ``shape`` only) to ``shape``."""
    return apply_op("BroadcastTo", input, shape, name=name)


def _filled(shape, dtype, value, name, default: str, graph=None) -> Tensor:
    """zeros/ones as TensorFlow builds them, in the scope ``default``: a Const when the shape is
    static and small (under 1000 elements), else a Fill of a ``Const`` (the shape a
    ``shape_as_tensor`` Const when static)."""
    dtype = dtypes.as_dtype(dtype)
    if dtype is dtypes.bool_:
        value = bool(value)
    elif dtype is dtypes.string and value == 0:
        value = b""
    graph = graph or graph_of(shape)
    with op_scope(name, default, (shape,)) as name:
        if not isinstance(shape, Tensor):
            dims = None if _contains_tensor(shape) else TensorShape(shape).as_tuple()
            if dims is not None and None not in dims:
                if int(np.prod(dims, dtype=np.int64)) < 1000:
                    return constant(value, dtype, shape=dims, name=name, graph=graph)
                wide = max(dims) >= 2**31
                shape = constant(list(dims), dtypes.int64 if wide else dtypes.int32, name="shape_as_tensor",
                                 graph=graph)
            else:
                shape = convert_to_tensor(shape, dtypes.int32, graph=graph)
        if not shape.shape.rank:   # a scalar or a shape of unknown rank: made a vector
            shape = reshape(shape, [-1])
        fill_value = constant(value, dtype, name="Const", graph=graph)
        return apply_op("Fill", shape, fill_value, name=name)


@api("zeros")
def zeros(shape, dtype=dtypes.float32, name=None):
    """A tensor of ``shape`` filled with zeros of ``dtype``."""
    return _filled(shape, dtype, 0, name, "zeros")


@api("ones")
def ones(shape, dtype=dtypes.float32, name=None):
    """A tensor of ``shape`` filled with ones of ``dtype``."""
    return _filled(shape, dtype, 1, name, "ones")


@api("zeros_like")
def zeros_like(input, dtype=None, name=None):  # noqa: A002  (TensorFlow's argument name)
    """Zeros with the shape of ``input`` (and its dtype unless ``dtype`` is given), as TensorFlow
    builds them: zeros() of the static shape when it is fully known, of shape(input) when the
    dtype changes, else the ZerosLike op."""
    with op_scope(name, "zeros_like", (input,)) as name:
        value = convert_to_tensor(input, name="tensor")
        own = value.known_dtype.base_dtype
        dtype = None if dtype is None else dtypes.as_dtype(dtype)
        if value.shape.is_fully_defined() and own is not dtypes.variant:
            return _filled(value.shape.dims, dtype or own, 0, name, "zeros", value.graph)
        if dtype is not None and dtype is not own and dtype is not dtypes.variant:
            return _filled(shape(value, out_type=None), dtype, 0, name, "zeros", value.graph)
        return apply_op("ZerosLike", value, name=name)


@api("ones_like")
def ones_like(input, dtype=None, name=None):  # noqa: A002  (TensorFlow's argument name)
    """Ones with the shape of ``input`` (and its dtype unless ``dtype`` is given), as TensorFlow 2
    builds them: ones() of the static shape when it is fully known, of shape(input) when the
    dtype changes, else the OnesLike op."""
    with op_scope(name, "ones_like", (input,)) as name:
        value = convert_to_tensor(input, name="tensor")
        own = value.known_dtype.base_dtype
        dtype = None if dtype is None else dtypes.as_dtype(dtype)
        if value.shape.is_fully_defined() and own is not dtypes.variant:
            return _filled(value.shape.dims, dtype or own, 1, name, "ones", value.graph)
        if dtype is not None and dtype is not own and dtype is not dtypes.variant:
            return _filled(shape(value, out_type=None), dtype, 1, name, "ones", value.graph)
        return apply_op("OnesLike", value, name=name)


# -- gathering and scattering ------------------------------------------------------------------------

@api("gather")
def gather(params, indices, validate_indices=None, axis=None, batch_dims=0, name=None):
    """Slices of ``params`` along ``axis`` (default: ``batch_dims``) at ``indices`` (GatherV2).
    ``validate_indices`` is ignored, as in TensorFlow (indices are always checked)."""
    if axis is None:
        axis = batch_dims
    return apply_op("GatherV2", params, indices, axis, batch_dims=int(batch_dims), name=name)


@api("gather_nd")
def gather_nd(params, indices, batch_dims=0, name=None):
    """Slices of ``params`` at the index vectors in the last dimension of ``indices``."""
    if batch_dims != 0:
        raise ValueError("gradreg.gather_nd supports batch_dims=0 only")
    return apply_op("GatherNd", params, indices, name=name)


@api("scatter_nd")
def scatter_nd(indices, updates, shape, name=None):
    """Zeros of ``shape`` with ``updates`` added at ``indices``."""
    return apply_op("ScatterNd", indices, updates, shape, name=name)


# -- permutations, sets, selection ------------------------------------------------------------------

@api("setdiff1d")
def setdiff1d(x, y, index_dtype=dtypes.int32, name=None):
    """The values of ``x`` not in ``y`` (in order) and their positions in ``x`` (ListDiff)."""
    return apply_op("ListDiff", x, y, out_idx=dtypes.as_dtype(index_dtype), name=name)


@api("where")
def where(condition, x=None, y=None, name=None):
    """With ``condition`` alone: the coordinates of its true (non-zero) elements, int64 [n, rank]
    (Where). With ``x`` and ``y``: elements of ``x`` where ``condition`` holds, else of ``y``,
    broadcasting all three (SelectV2)."""
    if x is None and y is None:
        with op_scope(name, "Where", (condition,)) as name:
            condition = convert_to_tensor(condition, preferred_dtype=dtypes.bool_, name="condition")
            return apply_op("Where", condition, name=name)
    if x is None or y is None:
        raise ValueError("x and y must both be non-None or both be None.")
    return apply_op("SelectV2", condition, x, y, name=name)


@api("one_hot")
def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None):
    """A one-hot encoding of ``indices`` along a new dimension ``axis`` (default last) of size
    ``depth``: ``on_value`` (default 1) at each index, ``off_value`` (default 0) elsewhere."""
    dtype = None if dtype is None else dtypes.as_dtype(dtype)
    graph = graph_of((indices, depth, on_value, off_value))
    with op_scope(name, "one_hot", (indices, depth, on_value, off_value)) as name:
        on, off = (None if v is None else convert_to_tensor(v, preferred_dtype=dtype, graph=graph)
                   for v in (on_value, off_value))
        for value, what in ((on, "on_value"), (off, "off_value")):
            if value is not None and dtype is not None and value.dtype.base_dtype is not dtype:
                raise TypeError(f"dtype {value.dtype.name} of {what} does not match dtype parameter {dtype.name}")
        if dtype is None:
            dtype = (on.dtype.base_dtype if on is not None else off.dtype.base_dtype if off is not None
                     else dtypes.float32)
        on = on if on is not None else constant(1, dtype, name="on_value", graph=graph)
        off = off if off is not None else constant(0, dtype, name="off_value", graph=graph)
        if on.dtype.base_dtype is not off.dtype.base_dtype:
            raise TypeError(f"dtype {on.dtype.name} of on_value does not match dtype {off.dtype.name} of off_value")
        return apply_op("OneHot", indices, depth, on, off, axis=-1 if axis is None else int(axis), name=name)


@api("unique")
def unique(x, out_idx=dtypes.int32, name=None):
    """The distinct values of the vector ``x`` in order of first occurrence, and for each
    element of ``x`` the position of its value among them."""
    return apply_op("Unique", x, out_idx=dtypes.as_dtype(out_idx), name=name)
