"""Array op definitions and their static shape functions (the Python builders are in api.py).

Shape functions follow TensorFlow's C++ shape functions (tensorflow/core/ops/array_ops.cc):
they use constant inputs (axes, shapes, paddings, ...) when known and otherwise return what
is known (the rank, some dims), raising ctx.error for inputs TensorFlow rejects statically.
"""
from __future__ import annotations

import numpy as np

from gradreg.errors import ShapeError
from gradreg.model import shape_fns as sf
from gradreg.model.shapes import TensorShape
from gradreg.model.tensor_util import checked_shape
from gradreg_plugins.array import family, slicing

op = family.op

_INDEX = "{int32, int64}"


def _ints(ctx, i: int) -> list[int] | None:
    """Input ``i`` as a flat list of Python ints, if it is known while building the graph."""
    value = ctx.input_value(i)
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def _scalar_int(ctx, i: int) -> int | None:
    value = ctx.input_value(i)
    if value is None:
        return None
    if np.size(value) != 1:
        raise ctx.error(f"input {i} must be a scalar, got shape {list(np.shape(value))}")
    return int(np.asarray(value).reshape(-1)[0])


def _normalize(ctx, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise ctx.error(f"{what} {axis} is out of range [{-rank}, {rank})")
    return axis % rank


def _merge(ctx, a: TensorShape, b: TensorShape, what: str) -> TensorShape:
    try:
        return a.merge_with(b)
    except ShapeError as exc:
        raise ctx.error(f"{what}: {exc}") from None


def _with_rank(ctx, i: int, rank: int) -> TensorShape:
    try:
        return ctx.input_shape(i).with_rank(rank)
    except ShapeError as exc:
        raise ctx.error(f"input {i}: {exc}") from None


# -- sources ---------------------------------------------------------------------------

def _placeholder_with_default_shape(ctx):
    # The output has the declared shape (a feed may be any shape compatible with it), but the
    # default value must be compatible with it.
    declared = ctx.attr("shape")
    if not ctx.input_shape(0).is_compatible_with(declared):
        raise ctx.error(f"default value of shape {ctx.input_shape(0)} is incompatible with the declared "
                        f"shape {declared}")
    return declared


def _const_shape(ctx):
    known = ctx.known_attr("value")
    if known is not None:
        return TensorShape(known.shape)
    # Read the shape off the TensorProto, checking its content fits: decoding the value
    # (possibly large weights) is not needed.
    proto = ctx.tensor_attr_proto("value")
    if proto is None:
        raise ctx.error("Const has no 'value' attr")
    dims, dtype = checked_shape(proto, f"node '{ctx.name}' (op Const)")
    declared = ctx.attr("dtype")
    if dtype is not declared:
        # TensorFlow refuses such a node; running it would give a value of the other type.
        raise ctx.error(f"attr 'value' holds a {dtype.name} tensor but attr 'dtype' is {declared.name}")
    return TensorShape(dims)


op("Const", outputs=["output: dtype"], attrs=["value: tensor", "dtype: type"], shape=_const_shape)
op("Placeholder", outputs=["output: dtype"], attrs=["dtype: type", "shape: shape = ?"],
   shape=lambda ctx: ctx.attr("shape"))
op("PlaceholderWithDefault", inputs=["input: dtype"], outputs=["output: dtype"],
   attrs=["dtype: type", "shape: shape"], shape=_placeholder_with_default_shape)

# -- identities and checks ---------------------------------------------------------------------

op("Identity", inputs=["input: T"], outputs=["output: T"], attrs=["T: type"], shape=sf.unchanged,
   api="identity", foldable=True, linear=True)
op("IdentityN", inputs=["input: T"], outputs=["output: T"], attrs=["T: list(type) >= 1"],
   shape=sf.unchanged_all, api="identity_n")
op("Snapshot", inputs=["input: T"], outputs=["output: T"], attrs=["T: type"], shape=sf.unchanged)
op("StopGradient", inputs=["input: T"], outputs=["output: T"], attrs=["T: type"], shape=sf.unchanged,
   api="stop_gradient", foldable=True)
op("PreventGradient", inputs=["input: T"], outputs=["output: T"], attrs=["T: type", "message: string = ''"],
   shape=sf.unchanged)
op("CheckNumerics", inputs=["tensor: T"], outputs=["output: T"],
   attrs=["T: {bfloat16, float16, float32, float64}", "message: string"], shape=sf.unchanged, stateful=True)
op("CheckNumericsV2", inputs=["tensor: T"], outputs=["output: T"],
   attrs=["T: {bfloat16, float16, float32, float64}", "message: string"], shape=sf.unchanged, stateful=True)
op("EnsureShape", inputs=["input: T"], outputs=["output: T"], attrs=["shape: shape", "T: type"],
   shape=lambda ctx: _merge(ctx, ctx.input_shape(0), ctx.attr("shape"), "EnsureShape"))

# -- shapes ------------------------------------------------------------------------------------

op("Shape", inputs=["input: T"], outputs=["output: out_type"],
   attrs=["T: type", "out_type: {int32, int64} = int32"], shape=sf.vector_of_rank, foldable=True)
op("ShapeN", inputs=["input: N * T"], outputs=["output: N * out_type"],
   attrs=["N: int >= 1", "T: type", "out_type: {int32, int64} = int32"],
   shape=lambda ctx: [TensorShape([s.rank]) for s in ctx.input_shapes], foldable=True)
op("Size", inputs=["input: T"], outputs=["output: out_type"],
   attrs=["T: type", "out_type: {int32, int64} = int32"], shape=sf.scalar, foldable=True)
op("Rank", inputs=["input: T"], outputs=["output: int32"], attrs=["T: type"], shape=sf.scalar, foldable=True)

# -- reshaping ---------------------------------------------------------------------------------


def _reshape_shape(ctx):
    value = ctx.input_value(1)
    if value is not None:
        if np.ndim(value) == 0:
            if int(value) != -1:
                raise ctx.error("shape must be rank 1, or a scalar -1")
            return TensorShape(None)
        sizes = [int(v) for v in np.asarray(value).reshape(-1)]
        if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
            raise ctx.error(f"shape {sizes} may hold at most one -1 and no other negative size")
    out = ctx.input_as_shape(1)
    source = ctx.input_shape(0)
    if out.rank is None or source.rank is None:
        return out
    return _infer_reshape_dim(ctx, source, out)


def _known_product(shape: TensorShape) -> tuple[int, list[int]]:
    """The product of the known dims and the positions of the unknown ones."""
    product, unknown = 1, []
    for i, d in enumerate(shape.as_list()):
        if d is None:
            unknown.append(i)
        else:
            product *= d
    return product, unknown


def _infer_reshape_dim(ctx, source: TensorShape, out: TensorShape) -> TensorShape:
    """TensorFlow's SetOutputShapeForReshape: check element counts when both are known, infer
    the single unknown output dim when the input's element count is known."""
    in_known, in_unknown = _known_product(source)
    out_known, out_unknown = _known_product(out)
    if len(in_unknown) > 1 or len(out_unknown) > 1:
        return out
    if not in_unknown and not out_unknown:
        if in_known != out_known:
            raise ctx.error(f"Cannot reshape a tensor with {in_known} elements to shape {out} "
                            f"({out_known} elements)")
    elif not in_unknown and out_known > 0:
        if in_known % out_known:
            raise ctx.error(f"Cannot reshape a tensor with {in_known} elements to shape {out}: "
                            f"{in_known} is not divisible by {out_known}")
        dims = out.as_list()
        dims[out_unknown[0]] = in_known // out_known
        return TensorShape(dims)
    elif in_unknown and not out_unknown and in_known != 0 and out_known % in_known:
        raise ctx.error(f"Cannot reshape a tensor of shape {source} to shape {out}: {out_known} "
                        f"elements is not a multiple of {in_known}")
    return out


def _expand_dims_shape(ctx):
    source = ctx.input_shape(0)
    value = ctx.input_value(1)
    if value is None or source.rank is None:
        return TensorShape(None)
    if np.size(value) != 1:
        raise ctx.error(f"'dim' must be a tensor with a single value, got shape {list(np.shape(value))}")
    dim = int(np.asarray(value).reshape(-1)[0])
    rank = source.rank
    if not -rank - 1 <= dim <= rank:
        raise ctx.error(f"Tried to expand dim index {dim} for tensor with {rank} dimensions.")
    dim = dim + rank + 1 if dim < 0 else dim
    dims = list(source.dims)
    dims.insert(dim, 1)
    return TensorShape(dims)


def _squeeze_shape(ctx):
    source = ctx.input_shape(0)
    if source.rank is None:
        return source
    rank = source.rank
    axes = {_normalize(ctx, a, rank, "squeeze dim") for a in ctx.attr("squeeze_dims")}
    dims = []
    for i, d in enumerate(source.dims):
        if axes:
            if i in axes:
                if d is not None and d != 1:
                    raise ctx.error(f"Can not squeeze dim[{i}], expected a dimension of 1, got {d}")
                continue
        elif d is None:
            return TensorShape(None)   # without squeeze_dims, an unknown dim may or may not be 1
        elif d == 1:
            continue
        dims.append(d)
    return TensorShape(dims)


def _transpose_shape(ctx):
    source = ctx.input_shape(0)
    perm = _ints(ctx, 1)
    perm_shape = _with_rank(ctx, 1, 1)
    rank = source.rank if source.rank is not None else perm_shape[0]
    if perm is not None:
        rank = len(perm) if rank is None else rank
        if len(perm) != rank:
            raise ctx.error(f"transpose expects a vector of size {rank}, but perm has {len(perm)} entries")
        for p in perm:
            if not -rank <= p < rank:   # the kernel checks the rest (a permutation of [0, rank))
                raise ctx.error(f"perm dim {p} is out of range of input rank {rank}")
        if source.rank is None:
            return TensorShape([None] * rank)
        return TensorShape([source.dims[p] for p in perm])
    return TensorShape(None if rank is None else [None] * rank)


op("Reshape", inputs=["tensor: T", "shape: Tshape"], outputs=["output: T"],
   attrs=["T: type", f"Tshape: {_INDEX} = int32"], shape=_reshape_shape, foldable=True, linear=True)
op("ExpandDims", inputs=["input: T", "dim: Tdim"], outputs=["output: T"],
   attrs=["T: type", f"Tdim: {_INDEX} = int32"], shape=_expand_dims_shape, foldable=True)
op("Squeeze", inputs=["input: T"], outputs=["output: T"],
   attrs=["T: type", "squeeze_dims: list(int) >= 0 = []"], shape=_squeeze_shape, foldable=True)
op("Transpose", inputs=["x: T", "perm: Tperm"], outputs=["y: T"],
   attrs=["T: type", f"Tperm: {_INDEX} = int32"], shape=_transpose_shape, foldable=True, linear=True)
op("ConjugateTranspose", inputs=["x: T", "perm: Tperm"], outputs=["y: T"],
   attrs=["T: type", f"Tperm: {_INDEX} = int32"], shape=_transpose_shape)

# -- joining and splitting ---------------------------------------------------------------------


def _concat_shape(ctx, axis: int | None, shapes: list[TensorShape]) -> TensorShape:
    ranks = {s.rank for s in shapes if s.rank is not None}
    if len(ranks) > 1:
        raise ctx.error(f"ConcatOp: inputs have different ranks: {[str(s) for s in shapes]}")
    if not ranks:
        return TensorShape(None)
    rank = ranks.pop()
    if rank == 0:
        raise ctx.error("Can't concatenate scalars (use tf.stack instead)")
    if axis is None:
        return TensorShape([None] * rank)
    axis = _normalize(ctx, axis, rank)
    dims: list = []
    for j in range(rank):
        column = [s.as_list()[j] for s in shapes if s.rank is not None]
        if j == axis:
            known = len(column) == len(shapes) and None not in column
            dims.append(sum(column) if known else None)
            continue
        merged = None
        for d in column:
            if d is not None and merged is not None and d != merged:
                raise ctx.error(f"Dimension {j} in both shapes must be equal, but are {merged} and {d}. "
                                f"Shapes are {[str(s) for s in shapes]}")
            merged = d if d is not None else merged
        dims.append(merged)
    return TensorShape(dims)


def _concat_v2_shape(ctx):
    n = ctx.num_inputs - 1
    return _concat_shape(ctx, _scalar_int(ctx, n), ctx.input_shapes[:n])


def _concat_v1_shape(ctx):
    return _concat_shape(ctx, _scalar_int(ctx, 0), ctx.input_shapes[1:])


def _split_shape(ctx):
    num = ctx.attr("num_split")
    source = ctx.input_shape(1)
    axis = _scalar_int(ctx, 0)
    if source.rank is None:
        return [TensorShape(None)] * num
    if axis is None:
        return [TensorShape([None] * source.rank)] * num
    axis = _normalize(ctx, axis, source.rank)
    dims = list(source.dims)
    if dims[axis] is not None:
        if dims[axis] % num:
            raise ctx.error(f"Number of ways to split should evenly divide the split dimension, but got "
                            f"split_dim {axis} (size = {dims[axis]}) and num_split {num}")
        dims[axis] //= num
    return [TensorShape(dims)] * num


def _split_v_shape(ctx):
    num = ctx.attr("num_split")
    source = ctx.input_shape(0)
    axis = _scalar_int(ctx, 2)
    sizes = _ints(ctx, 1)
    if sizes is not None and len(sizes) != num:
        raise ctx.error(f"size_splits has {len(sizes)} entries but num_split is {num}")
    if source.rank is None:
        return [TensorShape(None)] * num
    if axis is None:
        return [TensorShape([None] * source.rank)] * num
    axis = _normalize(ctx, axis, source.rank)
    if sizes is None:
        return [TensorShape(source.dims[:axis] + (None,) + source.dims[axis + 1:])] * num
    total = source.dims[axis]
    sizes = _resolve_split_sizes(ctx, sizes, total)
    return [TensorShape(source.dims[:axis] + (s,) + source.dims[axis + 1:]) for s in sizes]


def _resolve_split_sizes(ctx, sizes: list[int], total: int | None) -> list:
    if sizes.count(-1) > 1:
        raise ctx.error(f"size_splits {sizes} may hold at most one -1")
    if any(s < -1 for s in sizes):
        raise ctx.error(f"size_splits {sizes} holds a negative size")
    known = sum(s for s in sizes if s >= 0)
    if total is None:
        return [None if s == -1 else s for s in sizes]
    if (-1 in sizes and known > total) or (-1 not in sizes and known != total):
        raise ctx.error(f"Determined shape must either match input shape along split_dim exactly if fully "
                        f"specified, or be less than the size of the input along split_dim if not fully "
                        f"specified. Got: {known}")
    return [total - known if s == -1 else s for s in sizes]


def _pack_shape(ctx):
    shape = sf.merge_inputs(ctx)
    if shape.rank is None:
        return TensorShape(None)
    rank = shape.rank + 1
    axis = ctx.attr("axis")
    axis = _normalize(ctx, axis, rank)
    dims = list(shape.dims)
    dims.insert(axis, ctx.num_inputs)
    return TensorShape(dims)


def _unpack_shape(ctx):
    num = ctx.attr("num")
    source = ctx.input_shape(0)
    if source.rank is None:
        return [TensorShape(None)] * num
    axis = _normalize(ctx, ctx.attr("axis"), source.rank)
    if source.dims[axis] is not None and source.dims[axis] != num:
        raise ctx.error(f"Dimension must be {num} but is {source.dims[axis]} for unpacking along axis {axis}")
    return [TensorShape(source.dims[:axis] + source.dims[axis + 1:])] * num


def _concat_offset_shape(ctx):
    return [ctx.input_shape(i) for i in range(1, ctx.num_inputs)]


op("ConcatV2", inputs=["values: N * T", "axis: Tidx"], outputs=["output: T"],
   attrs=["N: int >= 2", "T: type", f"Tidx: {_INDEX} = int32"], shape=_concat_v2_shape, foldable=True)
op("Concat", inputs=["concat_dim: int32", "values: N * T"], outputs=["output: T"],
   attrs=["N: int >= 2", "T: type"], shape=_concat_v1_shape, foldable=True)
op("ConcatOffset", inputs=["concat_dim: int32", "shape: N * shape_type"], outputs=["offset: N * shape_type"],
   attrs=["N: int >= 2", f"shape_type: {_INDEX} = int32"], shape=_concat_offset_shape, foldable=True)
op("Split", inputs=["split_dim: int32", "value: T"], outputs=["output: num_split * T"],
   attrs=["num_split: int >= 1", "T: type"], shape=_split_shape)
op("SplitV", inputs=["value: T", "size_splits: Tlen", "split_dim: int32"], outputs=["output: num_split * T"],
   attrs=["num_split: int >= 1", "T: type", "Tlen: {int8, int32, int64} = int64"], shape=_split_v_shape)
op("Pack", inputs=["values: N * T"], outputs=["output: T"], attrs=["N: int >= 1", "T: type", "axis: int = 0"],
   shape=_pack_shape, foldable=True)
op("Unpack", inputs=["value: T"], outputs=["output: num * T"], attrs=["num: int >= 0", "T: type", "axis: int = 0"],
   shape=_unpack_shape, foldable=True)

# -- slicing -----------------------------------------------------------------------------------


def _slice_shape(ctx):
    source = ctx.input_shape(0)
    begin = _ints(ctx, 1)
    sizes = ctx.input_as_shape(2)   # partially known sizes; -1 reads as unknown
    rank = source.rank
    for i in (1, 2):
        length = _with_rank(ctx, i, 1)[0]
        if rank is None:
            rank = length
        elif length is not None and length != rank:
            raise ctx.error(f"Expected begin and size arguments to be 1-D tensors of size {rank}, "
                            f"but got shape {TensorShape([length])}")
    if rank is None:
        return TensorShape(None)
    values = _ints(ctx, 2)
    if values is None or begin is None:
        return sizes if sizes.rank is not None else TensorShape([None] * rank)
    dims = source.dims if source.dims is not None else (None,) * rank
    out: list[int | None] = []
    for i, (b, size, d) in enumerate(zip(begin, values, dims)):
        if size < -1:
            raise ctx.error(f"Out of bounds slicing on dimension {i} of length {d}: sizes vector cannot be < -1, "
                            f"but was {size}")
        if size >= 0:
            out.append(size)
        elif d is None:
            out.append(None)
        elif d - b < 0:
            raise ctx.error(f"Negative dimension size caused by subtracting {b} from {d}")
        else:
            out.append(d - b)
    return TensorShape(out)


def _strided_slice_shape(ctx):
    source = ctx.input_shape(0)
    strides = _ints(ctx, 3)
    if source.rank is None or strides is None:
        return TensorShape(None)
    try:
        spec = slicing.resolve(source.dims, _ints(ctx, 1), _ints(ctx, 2), strides, slicing.Masks.of(ctx.op))
    except (ValueError, IndexError) as exc:
        raise ctx.error(str(exc)) from None
    return TensorShape(spec.final_shape)


_MASKS = ["begin_mask: int = 0", "end_mask: int = 0", "ellipsis_mask: int = 0", "new_axis_mask: int = 0",
          "shrink_axis_mask: int = 0"]
op("Slice", inputs=["input: T", "begin: Index", "size: Index"], outputs=["output: T"],
   attrs=["T: type", f"Index: {_INDEX}"], shape=_slice_shape, foldable=True)
op("StridedSlice", inputs=["input: T", "begin: Index", "end: Index", "strides: Index"], outputs=["output: T"],
   attrs=["T: type", "Index: {int16, int32, int64}"] + _MASKS, shape=_strided_slice_shape, foldable=True)
op("StridedSliceGrad", inputs=["shape: Index", "begin: Index", "end: Index", "strides: Index", "dy: T"],
   outputs=["output: T"], attrs=["T: type", f"Index: {_INDEX}"] + _MASKS,
   shape=lambda ctx: ctx.input_as_shape(0))

op("TensorStridedSliceUpdate", inputs=["input: T", "begin: Index", "end: Index", "strides: Index", "value: T"],
   outputs=["output: T"], attrs=["T: type", f"Index: {_INDEX}"] + _MASKS, shape=sf.unchanged)

# -- padding, tiling, filling, broadcasting ----------------------------------------------------------


def _pad_shape(ctx, fold: bool = False):
    """The padded shape; with ``fold`` (MirrorPadGrad), the shape the padding is folded back into."""
    source = ctx.input_shape(0)
    pads_shape = _with_rank(ctx, 1, 2)
    rank = source.rank if source.rank is not None else pads_shape[0]
    if pads_shape[0] is not None and rank is not None and pads_shape[0] != rank:
        raise ctx.error(f"The first dimension of paddings must be the rank of inputs {rank}, "
                        f"got paddings shape {pads_shape}")
    if pads_shape[1] is not None and pads_shape[1] != 2:
        raise ctx.error(f"paddings must have shape [n, 2], got {pads_shape}")
    if ctx.num_inputs == 3 and ctx.input_shape(2).rank not in (None, 0):
        raise ctx.error(f"constant_values must be a scalar, got shape {ctx.input_shape(2)}")
    pads = ctx.input_value(1)
    if rank is None:
        return TensorShape(None)
    if pads is None:
        return TensorShape([None] * rank)
    pads = np.asarray(pads)
    if pads.shape != (rank, 2):
        raise ctx.error(f"paddings must have shape [{rank}, 2], got {list(pads.shape)}")
    if (pads < 0).any():
        raise ctx.error(f"Paddings must be non-negative: {pads.tolist()}")
    dims = source.dims if source.dims is not None else (None,) * rank
    out: list[int | None] = []
    for d, (lo, hi) in zip(dims, pads.tolist()):
        if d is None:
            out.append(None)
        elif not fold:
            out.append(d + lo + hi)
        elif d < lo + hi:
            raise ctx.error(f"Negative dimension size caused by subtracting {lo + hi} from {d}")
        else:
            out.append(d - lo - hi)
    return TensorShape(out)


def _multiply_dims(a, b):
    """Dimension product as TensorFlow's shape inference does it: 1 and 0 win over unknown."""
    if a == 1 or b == 1:
        return b if a == 1 else a
    if a == 0 or b == 0:
        return 0
    return None if a is None or b is None else a * b


def _tile_shape(ctx):
    source = ctx.input_shape(0)
    multiples = ctx.input_as_shape(1)
    length = _with_rank(ctx, 1, 1)[0]
    rank = source.rank if source.rank is not None else length
    if rank is not None and length is not None and rank != length:
        raise ctx.error(f"Expected multiples argument to be a vector of length {rank} but got length {length}")
    if rank is None:
        return TensorShape(None)
    values = _ints(ctx, 1)
    if values is not None and any(m < 0 for m in values):
        raise ctx.error(f"Expected multiples to be non-negative, got {values}")
    dims = source.dims if source.rank is not None else (None,) * rank
    factors = multiples.dims if multiples.rank is not None else (None,) * rank
    return TensorShape([_multiply_dims(d, m) for d, m in zip(dims, factors)])


def _fill_shape(ctx):
    if ctx.input_shape(1).rank not in (None, 0):
        raise ctx.error(f"value must be a scalar, got shape {ctx.input_shape(1)}")
    _with_rank(ctx, 0, 1)
    dims = _ints(ctx, 0)
    if dims is not None and any(d < -1 for d in dims):   # -1 is only an unknown dim statically
        raise ctx.error(f"dims must be non-negative, got {dims}")
    return ctx.input_as_shape(0)


def _broadcast_to_shape(ctx):
    _with_rank(ctx, 1, 1)
    out = ctx.input_as_shape(1)
    source = ctx.input_shape(0)
    if out.rank is None or source.rank is None:
        return out
    if source.rank > out.rank:
        raise ctx.error(f"Rank of input ({source.rank}) must be no greater than rank of output shape "
                        f"({out.rank}).")
    dims = list(out.dims)
    for i in range(1, source.rank + 1):
        d = source.dims[-i]
        if d is not None and d > 1:   # only a dim of 1 broadcasts; others must match
            if dims[-i] is not None and dims[-i] != d:
                raise ctx.error(f"Unable to broadcast tensor of shape {source} to tensor of shape {out}")
            dims[-i] = d
    return TensorShape(dims)


def _broadcast_args_shape(ctx):
    a, b = _with_rank(ctx, 0, 1)[0], _with_rank(ctx, 1, 1)[0]
    return TensorShape([None if a is None or b is None else max(a, b)])


op("Pad", inputs=["input: T", "paddings: Tpaddings"], outputs=["output: T"],
   attrs=["T: type", f"Tpaddings: {_INDEX} = int32"], shape=_pad_shape)
op("PadV2", inputs=["input: T", "paddings: Tpaddings", "constant_values: T"], outputs=["output: T"],
   attrs=["T: type", f"Tpaddings: {_INDEX} = int32"], shape=_pad_shape)
op("MirrorPad", inputs=["input: T", "paddings: Tpaddings"], outputs=["output: T"],
   attrs=["T: type", f"Tpaddings: {_INDEX} = int32", "mode: {'REFLECT', 'SYMMETRIC'}"], shape=_pad_shape)
op("MirrorPadGrad", inputs=["input: T", "paddings: Tpaddings"], outputs=["output: T"],
   attrs=["T: type", f"Tpaddings: {_INDEX} = int32", "mode: {'REFLECT', 'SYMMETRIC'}"],
   shape=lambda ctx: _pad_shape(ctx, fold=True))
op("Tile", inputs=["input: T", "multiples: Tmultiples"], outputs=["output: T"],
   attrs=["T: type", f"Tmultiples: {_INDEX} = int32"], shape=_tile_shape, foldable=True)
op("Fill", inputs=["dims: index_type", "value: T"], outputs=["output: T"],
   attrs=["T: type", f"index_type: {_INDEX} = int32"], shape=_fill_shape, foldable=True)
op("ZerosLike", inputs=["x: T"], outputs=["y: T"], attrs=["T: type"], shape=sf.unchanged, foldable=True)
op("OnesLike", inputs=["x: T"], outputs=["y: T"],
   attrs=["T: {bfloat16, float16, float32, float64, int8, uint8, int16, uint16, int32, uint32, int64, uint64, "
          "complex64, complex128, bool}"], shape=sf.unchanged, foldable=True)
op("BroadcastTo", inputs=["input: T", "shape: Tidx"], outputs=["output: T"],
   attrs=["T: type", f"Tidx: {_INDEX} = int32"], shape=_broadcast_to_shape)
op("BroadcastArgs", inputs=["s0: T", "s1: T"], outputs=["r0: T"], attrs=[f"T: {_INDEX} = int32"],
   shape=_broadcast_args_shape, api="broadcast_dynamic_shape", foldable=True)
op("BroadcastGradientArgs", inputs=["s0: T", "s1: T"], outputs=["r0: T", "r1: T"],
   attrs=[f"T: {_INDEX} = int32"], shape=lambda ctx: [TensorShape([None])] * 2, foldable=True)

# -- gathering and scattering ------------------------------------------------------------------------


def _gather_v2_shape(ctx):
    params, indices = ctx.input_shape(0), ctx.input_shape(1)
    if params.rank == 0:
        raise ctx.error("params must be at least 1 dimensional")
    batch_dims = ctx.attr("batch_dims")
    axis = _scalar_int(ctx, 2)
    if params.rank is None or indices.rank is None:
        return TensorShape(None)
    if axis is None:
        batch_dims = batch_dims + indices.rank if batch_dims < 0 else batch_dims
        return TensorShape([None] * (params.rank + indices.rank - 1 - batch_dims))
    axis = _normalize(ctx, axis, params.rank)
    batch_dims = _gather_batch_dims(ctx, batch_dims, indices.rank, axis)
    return TensorShape(params.dims[:axis] + indices.dims[batch_dims:] + params.dims[axis + 1:])


def _gather_batch_dims(ctx, batch_dims: int, indices_rank: int, axis: int) -> int:
    if not -indices_rank <= batch_dims <= indices_rank:
        raise ctx.error(f"Expected batch_dims in the range [{-indices_rank}, {indices_rank}], but got {batch_dims}")
    batch_dims = batch_dims + indices_rank if batch_dims < 0 else batch_dims
    if batch_dims > axis:
        raise ctx.error(f"batch_dims ({batch_dims}) must be less than or equal to axis ({axis}).")
    return batch_dims


def _gather_v1_shape(ctx):
    params, indices = ctx.input_shape(0), ctx.input_shape(1)
    if params.rank == 0:
        raise ctx.error("params must be at least 1 dimensional")
    return indices.concatenate(params[1:])


def _gather_nd_shape(ctx):
    params, indices = ctx.input_shape(0), ctx.input_shape(1)
    if indices.rank == 0:
        raise ctx.error("indices must be at least a vector")
    if params.rank is None or indices.rank is None or indices.dims[-1] is None:
        return TensorShape(None)
    depth = indices.dims[-1]
    if depth > params.rank:
        raise ctx.error(f"index innermost dimension length must be <= params rank; saw: {depth} vs. "
                        f"{params.rank}")
    return TensorShape(indices.dims[:-1] + params.dims[depth:])


def _check_scatter_updates(ctx, indices: TensorShape, updates: TensorShape, target: TensorShape) -> None:
    """updates must have shape indices.shape[:-1] + target.shape[index depth:]."""
    depth = indices[-1] if indices.rank else None
    if depth is None or updates.rank is None or target.rank is None:
        return
    if depth > target.rank:
        raise ctx.error(f"index depth {depth} exceeds the rank {target.rank} of the output")
    expected = TensorShape(indices.as_list()[:-1] + target.as_list()[depth:])
    if not expected.is_compatible_with(updates):
        raise ctx.error(f"updates has shape {updates}, expected {expected} (indices {indices}, "
                        f"output {target})")


def _scatter_nd_shape(ctx):
    target = ctx.input_as_shape(2)
    _check_scatter_updates(ctx, ctx.input_shape(0), ctx.input_shape(1), target)
    return target


def _tensor_scatter_shape(ctx):
    target = ctx.input_shape(0)
    _check_scatter_updates(ctx, ctx.input_shape(1), ctx.input_shape(2), target)
    return target


_POLICY = "bad_indices_policy: string = ''"
op("GatherV2", inputs=["params: Tparams", "indices: Tindices", "axis: Taxis"], outputs=["output: Tparams"],
   attrs=["batch_dims: int = 0", "Tparams: type", "Tindices: {int16, int32, int64}", f"Taxis: {_INDEX}"],
   shape=_gather_v2_shape, foldable=True)
op("Gather", inputs=["params: Tparams", "indices: Tindices"], outputs=["output: Tparams"],
   attrs=["validate_indices: bool = true", "Tparams: type", f"Tindices: {_INDEX}"],
   shape=_gather_v1_shape, foldable=True)
op("GatherNd", inputs=["params: Tparams", "indices: Tindices"], outputs=["output: Tparams"],
   attrs=["Tparams: type", "Tindices: {int16, int32, int64}", _POLICY], shape=_gather_nd_shape)
op("ScatterNd", inputs=["indices: Tindices", "updates: T", "shape: Tindices"], outputs=["output: T"],
   attrs=["T: type", "Tindices: {int16, int32, int64}", _POLICY], shape=_scatter_nd_shape)
op("TensorScatterUpdate", inputs=["tensor: T", "indices: Tindices", "updates: T"], outputs=["output: T"],
   attrs=["T: type", "Tindices: {int16, int32, int64, uint16}", _POLICY], shape=_tensor_scatter_shape,
   api="tensor_scatter_nd_update")
op("TensorScatterAdd", inputs=["tensor: T", "indices: Tindices", "updates: T"], outputs=["output: T"],
   attrs=["T: type", f"Tindices: {_INDEX}", _POLICY], shape=_tensor_scatter_shape,
   api="tensor_scatter_nd_add")
for _name, _api in (("TensorScatterSub", "tensor_scatter_nd_sub"), ("TensorScatterMax", "tensor_scatter_nd_max"),
                   ("TensorScatterMin", "tensor_scatter_nd_min")):
    op(_name, inputs=["tensor: T", "indices: Tindices", "updates: T"], outputs=["output: T"],
       attrs=["T: type", f"Tindices: {_INDEX}", _POLICY], shape=_tensor_scatter_shape, api=_api)
op("ScatterNdNonAliasingAdd", inputs=["input: T", "indices: Tindices", "updates: T"], outputs=["output: T"],
   attrs=["T: {float32, float64, int32, uint8, int16, int8, complex64, int64, qint8, quint8, qint32, bfloat16, "
          "qint16, quint16, uint16, complex128, float16, uint32, uint64, bool}", f"Tindices: {_INDEX}", _POLICY],
   shape=_tensor_scatter_shape)

# -- permutations, sets, selection ------------------------------------------------------------------


def _where_shape(ctx):
    rank = ctx.input_shape(0).rank
    return TensorShape([None, rank])


def _list_diff_shape(ctx):
    _with_rank(ctx, 0, 1)
    _with_rank(ctx, 1, 1)
    return [TensorShape([None])] * 2


def _one_hot_shape(ctx):
    indices = ctx.input_shape(0)
    axis = ctx.attr("axis")
    depth = _scalar_int(ctx, 1)
    if depth is not None and depth < 0:
        raise ctx.error(f"depth must be non-negative, got: {depth}")
    if indices.rank is None:
        return TensorShape(None)
    if not -1 <= axis <= indices.rank:
        raise ctx.error(f"Expected axis to be -1 or between [0, {indices.rank}].  But received: {axis}")
    dims = list(indices.dims)
    dims.insert(indices.rank if axis == -1 else axis, depth)
    return TensorShape(dims)


op("InvertPermutation", inputs=["x: T"], outputs=["y: T"], attrs=[f"T: {_INDEX} = int32"],
   shape=lambda ctx: _with_rank(ctx, 0, 1), api="invert_permutation", foldable=True)
op("ListDiff", inputs=["x: T", "y: T"], outputs=["out: T", "idx: out_idx"],
   attrs=["T: type", f"out_idx: {_INDEX} = int32"], shape=_list_diff_shape, foldable=True)
op("Where", inputs=["input: T"], outputs=["index: int64"],
   attrs=["T: {float32, float64, int32, uint8, int16, int8, complex64, int64, qint8, quint8, qint32, bfloat16, "
          "qint16, quint16, uint16, complex128, float16, uint32, uint64, bool} = bool"], shape=_where_shape)
op("ReverseV2", inputs=["tensor: T", "axis: Tidx"], outputs=["output: T"],
   attrs=[f"Tidx: {_INDEX} = int32", "T: {uint8, int8, uint16, int16, int32, uint32, int64, uint64, bool, "
          "bfloat16, float16, float32, float64, complex64, complex128, string}"], shape=sf.unchanged,
   api="reverse")
op("OneHot", inputs=["indices: TI", "depth: int32", "on_value: T", "off_value: T"], outputs=["output: T"],
   attrs=["axis: int = -1", "T: type", "TI: {uint8, int8, int32, int64} = int64"], shape=_one_hot_shape)
op("Unique", inputs=["x: T"], outputs=["y: T", "idx: out_idx"], attrs=["T: type", f"out_idx: {_INDEX} = int32"],
   shape=lambda ctx: [TensorShape([None]), _with_rank(ctx, 0, 1)])


def _bound_shape(ctx):
    """LowerBound/UpperBound: one row of sorted values per row of queries, the queries' shape."""
    _with_rank(ctx, 0, 2)
    return _with_rank(ctx, 1, 2)


# What tf.searchsorted builds (TensorFlow registers no gradient: the outputs are positions).
for _name in ("LowerBound", "UpperBound"):
    op(_name, inputs=["sorted_inputs: T", "values: T"], outputs=["output: out_type"],
       attrs=["T: type", f"out_type: {_INDEX} = int32"], shape=_bound_shape)

# -- matrix diagonals and bands (the V1 forms) -------------------------------------------------------


def _matrix_diag_shape(ctx):
    source = ctx.input_shape(0)
    if source.rank == 0:
        raise ctx.error("input must be at least 1-dim")
    if source.rank is None:
        return TensorShape(None)
    return TensorShape(source.dims + source.dims[-1:])


def _matrix_diag_part_shape(ctx):
    source = ctx.input_shape(0)
    if source.rank is not None and source.rank < 2:
        raise ctx.error(f"input must be at least 2-dim, received shape {source}")
    if source.rank is None:
        return TensorShape(None)
    rows, cols = source.dims[-2:]
    return TensorShape(source.dims[:-2] + (None if rows is None or cols is None else min(rows, cols),))


def _matrix_band_part_shape(ctx):
    source = ctx.input_shape(0)
    if source.rank is not None and source.rank < 2:
        raise ctx.error(f"input must be at least 2-dim, received shape {source}")
    for i in (1, 2):
        if ctx.input_shape(i).rank not in (None, 0):
            raise ctx.error(f"input {i} must be a scalar, got shape {ctx.input_shape(i)}")
    return source


op("MatrixDiag", inputs=["diagonal: T"], outputs=["output: T"], attrs=["T: type"], shape=_matrix_diag_shape,
   api="matrix_diag")
op("MatrixDiagPart", inputs=["input: T"], outputs=["diagonal: T"], attrs=["T: type"],
   shape=_matrix_diag_part_shape, api="matrix_diag_part")
op("MatrixBandPart", inputs=["input: T", "num_lower: Tindex", "num_upper: Tindex"], outputs=["band: T"],
   attrs=["T: type", f"Tindex: {_INDEX} = int64"], shape=_matrix_band_part_shape, api="matrix_band_part")
