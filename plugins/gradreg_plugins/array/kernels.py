"""NumPy kernels of the array family (see gradreg.registry.kernels for the contract).

Invalid runtime inputs raise ValueError/IndexError with TensorFlow's wording; the plan turns
them into an ExecutionError naming the node. Kernels whose output can outgrow their inputs
check the element limit before allocating.
"""
from __future__ import annotations

import math

import numpy as np

from gradreg.errors import FeedError, UnknownOpError, describe_node
from gradreg.model.shape_inference import constant_value
from gradreg.registry.kernels import IDENTITY, Constant, variant_zeros_like
from gradreg_plugins.array import family, slicing

kernel = family.kernel


def _storage(dtype) -> np.dtype:
    return dtype.base_dtype.storage


def _out_storage(op, i: int = 0) -> np.dtype:
    return _storage(op.outputs[i].dtype)


def _shape_str(shape) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def _vector(value, what: str) -> list[int]:
    value = np.asarray(value)
    if value.ndim != 1:
        raise ValueError(f"{what} must be a vector, got shape {_shape_str(value.shape)}")
    return [int(v) for v in value]


def _scalar(value, what: str):
    value = np.asarray(value)
    if value.ndim != 0:
        raise ValueError(f"{what} must be a scalar, got shape {_shape_str(value.shape)}")
    return value.item()


def _axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise IndexError(f"Expected {what} in the range [{-rank}, {rank}), but got {axis}")
    return axis + rank if axis < 0 else axis


def _outputs(values):
    """A list-output kernel's result: the plan binds a single output directly, not a 1-tuple."""
    values = tuple(values)
    return values[0] if len(values) == 1 else values


def _zero_of(dtype: np.dtype):
    """The fill value of new elements: 0 of the type, or b"" for strings."""
    return b"" if np.dtype(dtype) == np.dtype(object) else np.zeros((), dtype)


# -- sources and identities ----------------------------------------------------------------------

@kernel("Const")
def _const(op, ctx):
    value = op.get_attr("value")
    ctx.check_elements(value.size, op)
    return Constant(value)


@kernel("Placeholder")
def _placeholder(op, ctx):
    raise FeedError(f"placeholder '{op.name}' ({op.get_attr('dtype').name}, shape {op.get_attr('shape')}) "
                    f"must be fed")


for _op_type in ("Identity", "IdentityN", "Snapshot", "StopGradient", "PreventGradient",
                 "PlaceholderWithDefault"):
    family.kernel(_op_type)(lambda op, ctx: IDENTITY)


@kernel("CheckNumerics")
def _check_numerics(op, ctx):
    message = op.get_attr("message").decode("utf-8", "replace")

    def check(x):
        if np.isfinite(x).all():
            return x
        nan, inf = bool(np.isnan(x).any()), bool(np.isinf(x).any())
        what = "Inf and NaN" if nan and inf else "NaN" if nan else "Inf"
        raise ValueError(f"{message} : Tensor had {what} values")
    return check


@kernel("CheckNumericsV2")
def _check_numerics_v2(op, ctx):
    """As CheckNumerics, telling -Inf from +Inf."""
    message = op.get_attr("message").decode("utf-8", "replace")

    def check(x):
        if np.isfinite(x).all():
            return x
        found = [name for name, hit in (("-Inf", np.isneginf(x).any()), ("+Inf", np.isposinf(x).any()),
                                        ("NaN", np.isnan(x).any())) if hit]
        raise ValueError(f"{message} : Tensor had {' and '.join(found)} values")
    return check


@kernel("EnsureShape")
def _ensure_shape(op, ctx):
    expected = op.get_attr("shape")
    source = op.inputs[0].name

    def check(x):
        if not expected.is_compatible_with(x.shape):
            wanted = "<unknown>" if expected.rank is None else \
                "[" + ",".join("?" if d is None else str(d) for d in expected.dims) + "]"
            raise ValueError(f"Shape of tensor {source} {_shape_str(x.shape)} is not compatible with "
                             f"expected shape {wanted}.")
        return x
    return check


# -- shapes ------------------------------------------------------------------------------------

@kernel("Shape")
def _shape(op, ctx):
    dtype = _out_storage(op)
    return lambda x: np.array(np.shape(x), dtype=dtype)


@kernel("ShapeN")
def _shape_n(op, ctx):
    dtype = _out_storage(op)
    return lambda *xs: _outputs(np.array(np.shape(x), dtype=dtype) for x in xs)


@kernel("Size")
def _size(op, ctx):
    dtype = _out_storage(op)
    return lambda x: np.array(np.size(x), dtype=dtype)


family.simple_kernel("Rank", lambda x: np.array(np.ndim(x), dtype=np.int32))

# -- reshaping ---------------------------------------------------------------------------------


def reshape_target(input_shape: tuple, sizes) -> tuple[int, ...]:
    """The output shape of Reshape, resolving one -1 exactly as TensorFlow's ReshapeOp does
    (zero-sized dims are left out of the product so other dims can still be inferred)."""
    sizes = np.asarray(sizes)
    if sizes.ndim > 1:
        raise ValueError(f"sizes input must be 1-D, not {_shape_str(sizes.shape)}")
    sizes = [int(s) for s in sizes.reshape(-1)]
    product, unknown, has_zero, dims = 1, -1, False, []
    for d, size in enumerate(sizes):
        if size == -1:
            if unknown != -1:
                raise ValueError(f"Only one input size may be -1, not both {unknown} and {d}")
            unknown = d
            dims.append(1)
        elif size < 0:
            raise ValueError(f"Size {d} must be non-negative, not {size}")
        else:
            has_zero |= size == 0
            product *= size if size else 1
            dims.append(size)
    n = math.prod(input_shape)
    if unknown != -1:
        counted, input_has_zero = 1, False
        for d in input_shape:
            if d > 0 or not has_zero:
                counted *= d
            else:
                input_has_zero = True
        missing = counted // product
        if not input_has_zero and product * missing != counted:
            raise ValueError(f"Input to reshape is a tensor with {counted} values, but the requested shape "
                             f"requires a multiple of {product}")
        dims[unknown] = missing
    if math.prod(dims) != n:
        raise ValueError(f"Input to reshape is a tensor with {n} values, but the requested shape has "
                         f"{math.prod(dims)}")
    return tuple(dims)


def _reshape(x, shape):
    return np.reshape(x, reshape_target(np.shape(x), shape))


@kernel("Reshape")
def _reshape_kernel(op, ctx):
    out = op.outputs[0].shape
    if not out.is_fully_defined():
        return _reshape
    # The output shape is known while building the graph (a constant target or a known input
    # size): only the element count is left to check, which ndarray.reshape does.
    target = tuple(out.dims)

    def reshape(x, shape):
        try:
            return x.reshape(target)
        except (AttributeError, ValueError):
            return _reshape(x, shape)
    return reshape


def _expand_dims(x, dim):
    dim = np.asarray(dim)
    if dim.size != 1:
        raise ValueError(f"'dim' must be a tensor with a single value, got shape {_shape_str(dim.shape)}")
    d, rank = int(dim.reshape(-1)[0]), np.ndim(x)
    if not -rank - 1 <= d <= rank:
        raise ValueError(f"Tried to expand dim index {d} for tensor with {rank} dimensions.")
    return np.expand_dims(x, d + rank + 1 if d < 0 else d)


family.simple_kernel("ExpandDims", _expand_dims)


@kernel("Squeeze")
def _squeeze(op, ctx):
    wanted = list(op.get_attr("squeeze_dims"))

    def squeeze(x):
        if not wanted:
            return np.reshape(x, [d for d in x.shape if d != 1])
        axes = {_axis(a, x.ndim, "squeeze dim") for a in wanted}
        for a in axes:
            if x.shape[a] != 1:
                raise ValueError(f"Can not squeeze dim[{a}], expected a dimension of 1, got {x.shape[a]}")
        return np.reshape(x, [d for i, d in enumerate(x.shape) if i not in axes])
    return squeeze


def _permutation(perm, rank: int) -> list[int]:
    perm = _vector(perm, "perm")
    if len(perm) != rank:
        raise ValueError(f"transpose expects a vector of size {rank}. But input(1) is a vector of size "
                         f"{len(perm)}")
    for d in perm:
        if not 0 <= d < rank:
            raise ValueError(f"{d} is out of range [0 .. {rank})")
    for i in range(rank):
        if i not in perm:
            raise ValueError(f"{i} is missing from {{{','.join(map(str, perm))}}}.")
    return perm


family.simple_kernel("Transpose", lambda x, perm: np.transpose(x, _permutation(perm, np.ndim(x))))


def _conjugate_transpose(x, perm):
    y = np.transpose(x, _permutation(perm, np.ndim(x)))
    return np.conj(y) if y.dtype.kind == "c" else y


family.simple_kernel("ConjugateTranspose", _conjugate_transpose)

# -- joining and splitting ---------------------------------------------------------------------


def _concat(values, axis) -> np.ndarray:
    return np.concatenate(values, axis=concat_axis(values, axis))


def concat_axis(values, axis) -> int:
    """ConcatV2's axis, normalized, once ``values`` are checked to be concatenable along it
    (TensorFlow's errors)."""
    axis = int(_scalar(axis, "axis"))
    first = np.shape(values[0])
    rank = len(first)
    if rank == 0:
        raise ValueError("Can't concatenate scalars (use tf.stack instead)")
    axis = _axis(axis, rank, "axis")
    for i, v in enumerate(values[1:], 1):
        shape = np.shape(v)
        if len(shape) != rank:
            raise ValueError(f"ConcatOp : Ranks of all input tensors should match: shape[0] = {_shape_str(first)} "
                             f"vs. shape[{i}] = {_shape_str(shape)}")
        for j, (a, b) in enumerate(zip(first, shape)):
            if j != axis and a != b:
                raise ValueError(f"ConcatOp : Dimension {j} in both shapes must be equal: shape[0] = "
                                 f"{_shape_str(first)} vs. shape[{i}] = {_shape_str(shape)}")
    return axis


family.simple_kernel("ConcatV2", lambda *args: _concat(args[:-1], args[-1]))
family.simple_kernel("Concat", lambda axis, *values: _concat(values, axis))


@kernel("ConcatOffset")
def _concat_offset(op, ctx):
    dtype = _out_storage(op)

    def offsets(concat_dim, *shapes):
        shapes = [_vector(s, f"shape {i}") for i, s in enumerate(shapes)]
        rank = len(shapes[0])
        cdim = int(_scalar(concat_dim, "concat_dim"))
        axis = cdim + rank if cdim < 0 else cdim
        if not 0 <= axis < rank:
            raise ValueError(f"Concat dim is out of range: {cdim} vs. {rank}")
        out, offset = [], 0
        for i, shape in enumerate(shapes):
            if len(shape) != rank:
                raise ValueError(f"input {i} should contain {rank} elements, but got {len(shape)}")
            if any(a != b for j, (a, b) in enumerate(zip(shape, shapes[0])) if j != axis):
                # TensorFlow prints these shapes as vectors, space-separated
                raise ValueError(f"All dimensions except {axis} must match. Input {i} has shape "
                                 f"[{' '.join(map(str, shape))}] and doesn't match input 0 with shape "
                                 f"[{' '.join(map(str, shapes[0]))}].")
            vector = np.zeros(rank, dtype=dtype)
            vector[axis] = offset
            offset += shape[axis]
            out.append(vector)
        return _outputs(out)
    return offsets


@kernel("Split")
def _split(op, ctx):
    num = op.get_attr("num_split")

    def split(split_dim, x):
        axis = _axis(int(_scalar(split_dim, "split_dim")), np.ndim(x), "split_dim")
        if x.shape[axis] % num:
            raise ValueError(f"Number of ways to split should evenly divide the split dimension, but got "
                             f"split_dim {axis} (size = {x.shape[axis]}) and num_split {num}")
        return _outputs(np.split(x, num, axis=axis))
    return split


@kernel("SplitV")
def _split_v(op, ctx):
    num = op.get_attr("num_split")

    def split_v(x, size_splits, split_dim):
        axis = _axis(int(_scalar(split_dim, "split_dim")), np.ndim(x), "split_dim")
        sizes = _vector(size_splits, "size_splits")
        if len(sizes) != num:
            raise ValueError(f"Number of ways to split should match the number of size_splits: {num} vs "
                             f"{len(sizes)}")
        sizes = _split_sizes(sizes, x.shape[axis])
        return _outputs(np.split(x, np.cumsum(sizes[:-1]), axis=axis))
    return split_v


def _split_sizes(sizes: list[int], total: int) -> list[int]:
    unknown = [i for i, s in enumerate(sizes) if s == -1]
    if len(unknown) > 1:
        raise ValueError(f"There can only be one -1 in the input: {sizes}")
    if any(s < -1 for s in sizes):
        raise ValueError(f"Split size at index {[i for i, s in enumerate(sizes) if s < -1][0]} must be >= 0. "
                         f"Got: {min(sizes)}")
    known = sum(s for s in sizes if s >= 0)
    if (unknown and known > total) or (not unknown and known != total):
        raise ValueError(f"Determined shape must either match input shape along split_dim exactly if fully "
                         f"specified, or be less than the size of the input along split_dim if not fully "
                         f"specified.  Got: {known}")
    if unknown:
        sizes = list(sizes)
        sizes[unknown[0]] = total - known
    return sizes


@kernel("Pack")
def _pack(op, ctx):
    axis = op.get_attr("axis")
    if op.inputs and all(t.shape.rank == 0 for t in op.inputs) and axis in (0, -1) \
            and op.outputs[0].dtype is not None and op.outputs[0].dtype.storage.kind in "biuf":
        # Scalars by their static shapes (a loop counter packed into a slice's begin): one array.
        storage = op.outputs[0].dtype.storage
        return lambda *values: np.array(values, dtype=storage)

    def pack(*values):
        first = np.shape(values[0])
        for i, v in enumerate(values[1:], 1):
            if np.shape(v) != first:
                raise ValueError(f"Shapes of all inputs must match: values[0].shape = {_shape_str(first)} != "
                                 f"values[{i}].shape = {_shape_str(np.shape(v))}")
        rank = len(first) + 1
        return np.stack(values, axis=_axis(axis, rank))
    return pack


@kernel("Unpack")
def _unpack(op, ctx):
    num, axis = op.get_attr("num"), op.get_attr("axis")

    def unpack(x):
        a = _axis(axis, np.ndim(x))
        if x.shape[a] != num:
            raise ValueError(f"Input shape axis {a} must equal {num}, got shape {_shape_str(x.shape)}")
        return _outputs(np.moveaxis(x, a, 0))
    return unpack


# -- slicing -----------------------------------------------------------------------------------


def _slice(x, begin, size):
    rank = np.ndim(x)
    begin, size = np.asarray(begin), np.asarray(size)
    if begin.shape != (rank,) or size.shape != (rank,):
        raise ValueError(f"Expected begin and size arguments to be 1-D tensors of size {rank}, but got shapes "
                         f"{_shape_str(begin.shape)} and {_shape_str(size.shape)} instead.")
    index = []
    for i, (b, s, d) in enumerate(zip(begin.tolist(), size.tolist(), x.shape)):
        s = d - b if s == -1 else s
        if d == 0:
            if b != 0 or s != 0:
                raise ValueError(f"Expected begin[{i}] == 0 (got {b}) and size[{i}] == 0 (got {s}) when "
                                 f"input.dim_size({i}) == 0")
        elif not 0 <= b <= d:
            raise ValueError(f"Expected begin[{i}] in [0, {d}], but got {b}")
        elif not s >= 0 or b + s > d:
            raise ValueError(f"Expected size[{i}] in [0, {d - b}], but got {s}")
        index.append(slice(b, b + s))
    return x[tuple(index)] if rank else x


family.simple_kernel("Slice", _slice)


def _slice_spec(dims, begin, end, strides, masks) -> slicing.SliceSpec:
    parts = [np.asarray(v) for v in (begin, end, strides)]
    if any(p.ndim != 1 for p in parts) or not parts[0].shape == parts[1].shape == parts[2].shape:
        raise ValueError("Expected begin, end, and strides to be 1D equal size tensors, but got shapes "
                         + ", ".join(_shape_str(p.shape) for p in parts) + " instead.")
    begin_list, end_list, strides_list = (p.tolist() for p in parts)
    return slicing.resolve(dims, begin_list, end_list, strides_list, masks)


def _bounds(begin, end, strides) -> tuple[list, list, list] | None:
    """begin, end, strides as lists of ints when they are equal-length vectors, else None."""
    if type(begin) is not np.ndarray or type(end) is not np.ndarray or type(strides) is not np.ndarray \
            or begin.ndim != 1 or begin.shape != end.shape or begin.shape != strides.shape:
        return None
    return begin.tolist(), end.tolist(), strides.tolist()


@kernel("StridedSlice")
def _strided_slice(op, ctx):
    masks = slicing.Masks.of(op)

    def strided_slice(x, begin, end, strides):
        bounds = _bounds(begin, end, strides)
        index = slicing.basic_index(np.shape(x), *bounds, masks) if bounds is not None else None
        if index is not None:      # most slices: NumPy indexing as it is (a view)
            return np.asarray(x)[index]
        spec = _slice_spec(np.shape(x), begin, end, strides, masks)
        return np.reshape(np.asarray(x)[spec.numpy_index()], spec.final_shape)

    if slicing.reads_one_row(op):
        # x[t]: one index into the first axis (a TensorFlow loop's ``xs[t]``; end is ignored
        # for a shrunk axis): 1.5 us a call where the general path takes 4.5. Anything else,
        # an index out of range included, takes the general path and its errors.
        def first_axis_item(x, begin, end, strides):
            if type(x) is np.ndarray and x.ndim and type(begin) is np.ndarray and begin.shape == (1,):
                b, d = int(begin[0]), x.shape[0]
                if -d <= b < d:
                    return x[b]
            return strided_slice(x, begin, end, strides)
        return first_axis_item
    return strided_slice


@kernel("StridedSliceGrad")
def _strided_slice_grad(op, ctx):
    masks = slicing.Masks.of(op)

    def strided_slice_grad(shape, begin, end, strides, dy):
        dims = ctx.check_shape(_vector(shape, "shape"), op)
        bounds = _bounds(begin, end, strides)
        index = slicing.basic_index(dims, *bounds, masks) if bounds is not None else None
        out = np.zeros(dims, dtype=dy.dtype) if dy.dtype != np.dtype(object) else np.full(dims, b"", dtype=object)
        if index is not None:
            target = out[index]
            if np.shape(dy) != target.shape:
                raise ValueError(f"shape of dy was {_shape_str(np.shape(dy))} instead of {_shape_str(target.shape)}")
            out[index] = dy
            return out
        spec = _slice_spec(dims, begin, end, strides, masks)
        if list(np.shape(dy)) != spec.final_shape:
            raise ValueError(f"shape of dy was {_shape_str(np.shape(dy))} instead of "
                             f"{_shape_str(spec.final_shape)}")
        out[spec.numpy_index()] = np.reshape(dy, spec.processing_shape)
        return out
    return strided_slice_grad


@kernel("TensorStridedSliceUpdate")
def _tensor_strided_slice_update(op, ctx):
    masks = slicing.Masks.of(op)

    def update(x, begin, end, strides, value):
        spec = _slice_spec(np.shape(x), begin, end, strides, masks)
        value = np.asarray(value)
        try:   # the value broadcasts to the slice's (final) shape, as TensorFlow's kernel allows
            placed = np.broadcast_to(value, spec.final_shape)
        except ValueError:
            raise ValueError(f"Cannot broadcast value of shape {_shape_str(value.shape)} to the slice's shape "
                             f"{_shape_str(spec.final_shape)}") from None
        out = np.array(x)
        out[spec.numpy_index()] = np.reshape(placed, spec.processing_shape)
        return out
    return update


# -- padding, tiling, filling, broadcasting ----------------------------------------------------------


def _padding_matrix(x, paddings) -> np.ndarray:
    pads = np.asarray(paddings)
    if pads.shape != (np.ndim(x), 2):
        raise ValueError(f"paddings must be a matrix with 2 columns and a row per input dimension "
                         f"({np.ndim(x)}), got shape {_shape_str(pads.shape)}")
    return pads.astype(np.int64)


def _paddings(x, paddings) -> np.ndarray:
    pads = _padding_matrix(x, paddings)
    for lo, hi in pads.tolist():
        if lo < 0 or hi < 0:
            raise ValueError(f"Paddings must be non-negative: {lo} {hi}")
    return pads.astype(np.int64)


def _pad_constant(op, ctx, x, paddings, value):
    pads = _paddings(x, paddings)
    dims = tuple(int(d + lo + hi) for d, (lo, hi) in zip(x.shape, pads))
    ctx.check_elements(int(np.prod(dims, dtype=np.int64)), op)
    out = np.full(dims, value, dtype=x.dtype)
    out[tuple(slice(int(lo), int(lo) + d) for d, (lo, _) in zip(x.shape, pads))] = x
    return out


@kernel("Pad")
def _pad(op, ctx):
    return lambda x, paddings: _pad_constant(op, ctx, x, paddings, _zero_of(x.dtype))


@kernel("PadV2")
def _pad_v2(op, ctx):
    return lambda x, paddings, value: _pad_constant(op, ctx, x, paddings, _scalar(value, "constant_values"))


@kernel("MirrorPad")
def _mirror_pad(op, ctx):
    mode = op.get_attr("mode").decode()
    reflect = mode == "REFLECT"   # REFLECT leaves out the edge, so it has one value less to mirror

    def mirror_pad(x, paddings):
        pads = _paddings(x, paddings)
        for d, (lo, hi) in zip(x.shape, pads.tolist()):
            if reflect and (lo >= d or hi >= d):
                raise ValueError(f"paddings must be less than the dimension size: {lo}, {hi} not less than {d}")
            if not reflect and (lo > d or hi > d):
                raise ValueError(f"paddings must be no greater than the dimension size: {lo}, {hi} greater than {d}")
        ctx.check_elements(int(np.prod([d + lo + hi for d, (lo, hi) in zip(x.shape, pads)], dtype=np.int64)), op)
        return np.pad(x, pads, mode=mode.lower())
    return mirror_pad


@kernel("MirrorPadGrad")
def _mirror_pad_grad(op, ctx):
    """Folds the mirrored borders of a MirrorPad output back onto the values they copy (summing)."""
    reflect = op.get_attr("mode") == b"REFLECT"
    dtype = op.get_attr("T")
    if not dtype.is_numeric:
        raise UnknownOpError(f"{describe_node(op.name, op.type)}: MirrorPadGrad is not defined for "
                             f"{dtype.name} (TensorFlow has no kernel for it)")

    def mirror_pad_grad(x, paddings):
        pads = _padding_matrix(x, paddings).tolist()
        for d, (lo, hi) in zip(x.shape, pads):   # TensorFlow's checks, in its order
            if lo < 0 or hi < 0:
                raise ValueError(f"Paddings must be non-negative: {lo}, {hi}")
            if lo + hi >= d:
                raise ValueError(f"Total paddings must be less than the input dimension size: {lo + hi} was not "
                                 f"less than {d}")
            out = d - lo - hi
            if reflect and (lo >= out or hi >= out):
                raise ValueError(f"paddings must be less than the output dimension size: {lo}, {hi} not less "
                                 f"than {out}")
            if not reflect and (lo > out or hi > out):
                raise ValueError(f"paddings must be no greater than the output dimension size: {lo}, {hi} "
                                 f"greater than {out}")
        for axis, (lo, hi) in enumerate(pads):
            x = _fold_borders(x, axis, lo, hi, reflect)
        return np.array(x)
    return mirror_pad_grad


def _fold_borders(x: np.ndarray, axis: int, lo: int, hi: int, reflect: bool) -> np.ndarray:
    """Along ``axis``: the middle of ``x`` plus its two borders added back in mirror order (REFLECT
    mirrors around the edge element, so a border starts one element further in)."""
    n = x.shape[axis]
    m = n - lo - hi
    before = (slice(None),) * axis
    core = np.array(x[before + (slice(lo, lo + m),)])
    edge = 1 if reflect else 0
    if lo:
        core[before + (slice(edge, edge + lo),)] += np.flip(x[before + (slice(0, lo),)], axis)
    if hi:
        core[before + (slice(m - edge - hi, m - edge),)] += np.flip(x[before + (slice(lo + m, n),)], axis)
    return core


@kernel("Tile")
def _tile(op, ctx):
    def tile(x, multiples):
        reps = _vector(multiples, "multiples")
        if len(reps) != np.ndim(x):
            raise ValueError(f"Expected multiples argument to be a vector of length {np.ndim(x)} but got length "
                             f"{len(reps)}")
        if any(m < 0 for m in reps):
            raise ValueError(f"Expected multiples to be non-negative, got {reps}")
        ctx.check_shape([d * m for d, m in zip(np.shape(x), reps)], op)
        return np.tile(x, reps) if reps else np.array(x)
    return tile


@kernel("Fill")
def _fill(op, ctx):
    def fill(dims, value):
        dims = _vector(dims, "dims")
        for d in dims:
            if d < 0:
                raise ValueError(f"Dimension {d} must be >= 0")
        shape = ctx.check_shape(dims, op)
        value = np.asarray(value)
        _scalar(value, "value")
        return np.full(shape, value, dtype=value.dtype)
    return fill


@kernel("ZerosLike")
def _zeros_like(op, ctx):
    if op.outputs[0].dtype.kind == "v":   # a TensorList: the same list with zero elements
        return lambda x: variant_zeros_like(x, op)

    def zeros_like(x):
        ctx.check_elements(np.size(x), op)
        return np.full(np.shape(x), _zero_of(x.dtype), dtype=x.dtype)
    return zeros_like


@kernel("OnesLike")
def _ones_like(op, ctx):
    def ones_like(x):
        ctx.check_elements(np.size(x), op)
        return np.ones_like(x)
    return ones_like


@kernel("BroadcastTo")
def _broadcast_to(op, ctx):
    def broadcast_to(x, shape):
        dims = ctx.check_shape(_vector(shape, "shape"), op)
        source = list(np.shape(x))
        if _broadcast_shapes(source, list(dims)) != list(dims):   # only x may be broadcast
            raise ValueError(f"Unable to broadcast tensor of shape {_shape_str(source)} to tensor of shape "
                             f"{_shape_str(dims)}")
        return np.array(np.broadcast_to(x, dims))
    return broadcast_to


def _broadcast_shapes(s0: list[int], s1: list[int]) -> list[int]:
    rank = max(len(s0), len(s1))
    a, b = [1] * (rank - len(s0)) + s0, [1] * (rank - len(s1)) + s1
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"Incompatible shapes: {_shape_str(s0)} vs. {_shape_str(s1)}")
        out.append(y if x == 1 else x)
    return out


@kernel("BroadcastArgs")
def _broadcast_args(op, ctx):
    dtype = _out_storage(op)
    return lambda s0, s1: np.array(_broadcast_shapes(_vector(s0, "s0"), _vector(s1, "s1")), dtype=dtype)


@kernel("BroadcastGradientArgs")
def _broadcast_gradient_args(op, ctx):
    dtype = _out_storage(op)

    def gradient_args(s0, s1):
        """The axes each input was broadcast along (padded with leading 1s to the common rank):
        where its dim is 1. Identical shapes reduce over nothing (TensorFlow's BCast fast path)."""
        a, b = _vector(s0, "s0"), _vector(s1, "s1")
        _broadcast_shapes(a, b)
        if a == b:
            return np.zeros(0, dtype), np.zeros(0, dtype)
        rank = max(len(a), len(b))
        r = []
        for s in (a, b):
            padded = [1] * (rank - len(s)) + s
            r.append(np.array([i for i, d in enumerate(padded) if d == 1], dtype=dtype))
        return tuple(r)
    return gradient_args


# -- gathering and scattering ------------------------------------------------------------------------


def _check_indices(indices: np.ndarray, limit: int) -> None:
    bad = (indices < 0) | (indices >= limit)
    if bad.any():
        where = np.argwhere(bad)[0]
        raise IndexError(f"indices[{','.join(map(str, where))}] = {indices[tuple(where)]} is not in [0, {limit})")


def gather(params: np.ndarray, indices: np.ndarray, axis: int, batch_dims: int, op, ctx) -> np.ndarray:
    """GatherV2: params.shape[:axis] + indices.shape[batch_dims:] + params.shape[axis + 1:]."""
    if params.ndim == 0:
        raise ValueError("params must be at least 1 dimensional")
    axis = _axis(axis, params.ndim)
    if not -indices.ndim <= batch_dims <= indices.ndim:
        raise ValueError(f"Expected batch_dims in the range [{-indices.ndim}, {indices.ndim}], but got {batch_dims}")
    batch_dims = batch_dims + indices.ndim if batch_dims < 0 else batch_dims
    if batch_dims > axis:
        raise ValueError(f"batch_dims ({batch_dims}) must be less than or equal to axis ({axis}).")
    for i in range(batch_dims):
        if params.shape[i] != indices.shape[i]:
            raise ValueError(f"params.shape[{i}]: {params.shape[i]} should be equal to indices.shape[{i}]: "
                             f"{indices.shape[i]}")
    _check_indices(indices, params.shape[axis])
    out_shape = params.shape[:axis] + indices.shape[batch_dims:] + params.shape[axis + 1:]
    ctx.check_elements(int(np.prod(out_shape, dtype=np.int64)), op)
    if batch_dims == 0:
        return np.take(params, indices, axis=axis)
    # Flatten to [batch, outer, axis dim, inner] and pick per batch row.
    def count(dims):
        return int(np.prod(dims, dtype=np.int64))
    batch = count(params.shape[:batch_dims])
    flat_params = params.reshape(batch, count(params.shape[batch_dims:axis]), params.shape[axis],
                                 count(params.shape[axis + 1:]))
    flat_indices = indices.reshape(batch, count(indices.shape[batch_dims:]))
    picked = flat_params[np.arange(batch)[:, None], :, flat_indices]   # [batch, n, outer, inner]
    return picked.transpose(0, 2, 1, 3).reshape(out_shape)


@kernel("GatherV2")
def _gather_v2(op, ctx):
    batch_dims = op.get_attr("batch_dims")
    static_axis = constant_value(op.inputs[2])
    if batch_dims == 0 and static_axis is not None and int(static_axis) == 0:
        # A row of a value nothing writes to (a constant or a feed) can be a view of it; a
        # variable's row is copied, as a later update must not change it.
        view = _never_written(op.inputs[0])

        def gather_rows(params, indices, axis):
            # Rows of params (the embedding lookup / time-step read); one index is checked cheaply.
            if not (isinstance(indices, (int, np.integer)) or (type(indices) is np.ndarray and not indices.ndim)):
                return gather(params, np.asarray(indices), 0, 0, op, ctx)
            i = int(indices)
            if not 0 <= i < params.shape[0]:
                raise IndexError(f"indices = {i} is not in [0, {params.shape[0]})")
            return params[i] if view else params[i].copy()
        return gather_rows
    return lambda params, indices, axis: gather(params, np.asarray(indices), int(_scalar(axis, "axis")),
                                                batch_dims, op, ctx)


def _never_written(t) -> bool:
    """Whether ``t`` is a Const or Placeholder value (through Identity and loop Enters): no op
    writes into it while a plan runs."""
    for _ in range(64):
        op = t.op
        if op.type in ("Const", "Placeholder"):
            return True
        if op.type not in ("Identity", "Enter") or not op.inputs:
            return False
        t = op.inputs[0]
    return False


@kernel("Gather")
def _gather_v1(op, ctx):
    return lambda params, indices: gather(params, np.asarray(indices), 0, 0, op, ctx)


def _bad_index_policy(op) -> bool:
    """Whether bad indices are skipped (IGNORE) rather than raising (the CPU default)."""
    policy = op.get_attr("bad_indices_policy").decode()
    if policy not in ("", "DEFAULT", "ERROR", "IGNORE"):
        raise ValueError(f"unknown bad_indices_policy '{policy}'")
    return policy == "IGNORE"


def _nd_rows(indices: np.ndarray, shape: tuple, ignore: bool, what: str) -> tuple[np.ndarray, np.ndarray]:
    """indices [..., depth] as rows [n, depth] and a mask of rows that index into ``shape``;
    raises for the first bad row unless bad rows are ignored."""
    depth = indices.shape[-1]
    rows = indices.reshape(int(np.prod(indices.shape[:-1], dtype=np.int64)), depth).astype(np.int64)
    good: np.ndarray = np.asarray(((rows >= 0) & (rows < np.array(shape[:depth], dtype=np.int64))).all(axis=1))
    if not ignore and not good.all():
        i = int(np.argmin(good))
        raise IndexError(f"indices[{i}] = [{', '.join(map(str, rows[i]))}] does not index into {what} "
                         f"{_shape_str(shape)}")
    return rows, good


def gather_nd(params: np.ndarray, indices, ignore: bool, op, ctx) -> np.ndarray:
    """GatherNd: the slices of params at the rows of indices [..., depth] (zeros for bad rows
    when ``ignore``)."""
    indices = np.asarray(indices)
    if indices.ndim == 0:
        raise ValueError("indices must be at least a vector")
    depth = indices.shape[-1]
    if depth > params.ndim:
        raise ValueError(f"index innermost dimension length must be <= params rank; saw: {depth} vs. "
                         f"{params.ndim}")
    out_shape = indices.shape[:-1] + params.shape[depth:]
    ctx.check_elements(int(np.prod(out_shape, dtype=np.int64)), op)
    rows, good = _nd_rows(indices, params.shape, ignore, "param shape")
    if not depth:   # each (empty) index row selects all of params
        return np.array(np.broadcast_to(params, out_shape))
    picked = params[tuple(np.where(good, rows.T, 0))]
    if not good.all():
        picked = np.where(good.reshape((-1,) + (1,) * (picked.ndim - 1)), picked, _zero_of(params.dtype))
    return picked.reshape(out_shape)


@kernel("GatherNd")
def _gather_nd(op, ctx):
    ignore = _bad_index_policy(op)
    return lambda params, indices: gather_nd(params, indices, ignore, op, ctx)


def _updates_for(indices: np.ndarray, updates: np.ndarray, shape: tuple) -> np.ndarray:
    """updates as [rows, *slice shape], checking it has shape indices.shape[:-1] + shape[depth:]."""
    if indices.ndim == 0:
        raise ValueError("indices must be at least a vector")
    depth = indices.shape[-1]
    if depth > len(shape):
        raise ValueError(f"Index innermost dimension length must be <= output rank; saw: {depth} vs. {len(shape)}")
    expected = indices.shape[:-1] + tuple(shape[depth:])
    if updates.shape != expected:
        raise ValueError(f"updates has shape {_shape_str(updates.shape)}, but indices of shape "
                         f"{_shape_str(indices.shape)} into shape {_shape_str(shape)} need {_shape_str(expected)}")
    return updates.reshape((int(np.prod(indices.shape[:-1], dtype=np.int64)),) + tuple(shape[depth:]))


def scatter_nd_into(target: np.ndarray, indices, updates, ignore: bool, combine) -> np.ndarray:
    """Combine rows of updates into ``target`` in place, at the rows of indices: ``combine`` is a
    ufunc (np.add, np.maximum, ...; repeated rows combine in turn) or None to overwrite (where
    rows repeat, the last update lands, as on TensorFlow's CPU)."""
    indices = np.asarray(indices)
    rows_of_updates = _updates_for(indices, updates, target.shape)
    rows, good = _nd_rows(indices, target.shape, ignore, "shape")
    if not good.all():
        rows, rows_of_updates = rows[good], rows_of_updates[good]
    if combine is not None:
        combine.at(target, tuple(rows.T), rows_of_updates)
        return target
    if rows.shape[1] and rows.shape[0] > 1:
        flat = np.ravel_multi_index(tuple(rows.T), target.shape[:rows.shape[1]])
        _, first_in_reversed = np.unique(flat[::-1], return_index=True)
        if first_in_reversed.size < flat.size:   # keep the last update of each repeated row
            last = flat.size - 1 - first_in_reversed
            rows, rows_of_updates = rows[last], rows_of_updates[last]
    elif rows.shape[0] > 1:   # depth 0: every update overwrites the whole tensor
        rows, rows_of_updates = rows[-1:], rows_of_updates[-1:]
    target[tuple(rows.T)] = rows_of_updates
    return target


@kernel("ScatterNd")
def _scatter_nd(op, ctx):
    ignore = _bad_index_policy(op)

    def scatter_nd(indices, updates, shape):
        dims = ctx.check_shape(_vector(shape, "shape"), op)
        out = np.full(dims, _zero_of(updates.dtype), dtype=updates.dtype)
        return scatter_nd_into(out, indices, updates, ignore, np.add)
    return scatter_nd


def _tensor_scatter(op_type: str, combine) -> None:
    @kernel(op_type)
    def factory(op, ctx):
        ignore = _bad_index_policy(op)
        return lambda tensor, indices, updates: scatter_nd_into(np.array(tensor), indices, updates, ignore, combine)


_tensor_scatter("TensorScatterUpdate", None)
_tensor_scatter("TensorScatterAdd", np.add)
_tensor_scatter("TensorScatterSub", np.subtract)
_tensor_scatter("TensorScatterMax", np.maximum)
_tensor_scatter("TensorScatterMin", np.minimum)
_tensor_scatter("ScatterNdNonAliasingAdd", np.add)


# -- permutations, sets, selection ------------------------------------------------------------------


def _invert_permutation(x):
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"invert_permutation expects x to be a vector, got shape {_shape_str(x.shape)}")
    n = x.size
    bad = (x < 0) | (x >= n)
    if bad.any():
        raise ValueError(f"{x[bad][0]} is not between 0 and {n}")
    counts = np.bincount(x, minlength=n)
    if (counts > 1).any():
        raise ValueError(f"{int(np.argmax(counts > 1))} is duplicated in the input.")
    y = np.empty_like(x)
    y[x] = np.arange(n, dtype=x.dtype)
    return y


family.simple_kernel("InvertPermutation", _invert_permutation)


@kernel("ListDiff")
def _list_diff(op, ctx):
    idx_dtype = _out_storage(op, 1)

    def list_diff(x, y):
        if np.ndim(x) != 1 or np.ndim(y) != 1:
            raise ValueError(f"x and y must be 1-D, got shapes {_shape_str(np.shape(x))} and "
                             f"{_shape_str(np.shape(y))}")
        keep = ~np.isin(x, y)
        return x[keep], np.flatnonzero(keep).astype(idx_dtype)
    return list_diff


@kernel("Where")
def _where(op, ctx):
    def where(x):
        if np.ndim(x) == 0:
            raise ValueError("WhereOp : Unhandled input dimensions: 0")
        ctx.check_elements(np.count_nonzero(x) * np.ndim(x), op)
        return np.argwhere(x).astype(np.int64)
    return where


def _reverse(x, axis):
    axes = [_axis(a, np.ndim(x)) for a in _vector(axis, "axis")]
    for a in axes:
        if axes.count(a) > 1:
            raise ValueError(f"axis {a} specified more than once.")
    return np.flip(x, axis=tuple(axes)) if axes else x


family.simple_kernel("ReverseV2", _reverse)


@kernel("OneHot")
def _one_hot(op, ctx):
    axis = op.get_attr("axis")
    dtype = _out_storage(op)

    def one_hot(indices, depth, on_value, off_value):
        depth = int(_scalar(depth, "depth"))
        if depth < 0:
            raise ValueError(f"depth must be non-negative, got: {depth}")
        on, off = _scalar(on_value, "on_value"), _scalar(off_value, "off_value")
        rank = np.ndim(indices)
        if not -1 <= axis <= rank:
            raise ValueError(f"Expected axis to be -1 or between [0, {rank}].  But received: {axis}")
        where = rank if axis == -1 else axis
        out_shape = list(np.shape(indices))
        out_shape.insert(where, depth)
        ctx.check_elements(int(np.prod(out_shape, dtype=np.int64)), op)
        classes = np.arange(depth).reshape([depth if i == where else 1 for i in range(rank + 1)])
        hot = np.expand_dims(np.asarray(indices).astype(np.int64), where) == classes
        return np.where(hot, np.asarray(on, dtype), np.asarray(off, dtype))
    return one_hot


@kernel("Unique")
def _unique(op, ctx):
    idx_dtype = _out_storage(op, 1)

    def unique(x):
        if np.ndim(x) != 1:
            raise ValueError(f"unique expects a 1D vector, got shape {_shape_str(np.shape(x))}")
        # TensorFlow lists values in order of first occurrence; np.unique sorts them.
        kwargs = {"equal_nan": False} if x.dtype.kind in "fc" else {}
        values, first, inverse = np.unique(x, return_index=True, return_inverse=True, **kwargs)
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        return values[order], rank[inverse.reshape(-1)].astype(idx_dtype)
    return unique


# -- matrix diagonals and bands (the V1 forms) -------------------------------------------------------

@kernel("MatrixDiag")
def _matrix_diag(op, ctx):
    def matrix_diag(diagonal):
        if np.ndim(diagonal) < 1:
            raise ValueError("input must be at least 1-dim")
        n = diagonal.shape[-1]
        ctx.check_elements(np.size(diagonal) * n, op)
        out = np.full(diagonal.shape + (n,), _zero_of(diagonal.dtype), dtype=diagonal.dtype)
        i = np.arange(n)
        out[..., i, i] = diagonal
        return out
    return matrix_diag


def _matrix_diag_part(x):
    if np.ndim(x) < 2:
        raise ValueError(f"input must be at least 2-dim, received shape: {_shape_str(np.shape(x))}")
    return np.diagonal(x, axis1=-2, axis2=-1).copy()


family.simple_kernel("MatrixDiagPart", _matrix_diag_part)


def _matrix_band_part(x, num_lower, num_upper):
    if np.ndim(x) < 2:
        raise ValueError(f"input must be at least 2-dim, received shape: {_shape_str(np.shape(x))}")
    rows, cols = x.shape[-2:]
    lower, upper = int(_scalar(num_lower, "num_lower")), int(_scalar(num_upper, "num_upper"))
    if lower > rows:
        raise ValueError(f"num_lower must be negative or less or equal to number of rows ({rows}) got: {lower}")
    if upper > cols:
        raise ValueError(f"num_upper must be negative or less or equal to number of columns ({cols}) got: {upper}")
    offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]   # column minus row
    band = ((lower < 0) | (-offset <= lower)) & ((upper < 0) | (offset <= upper))
    return np.where(band, x, _zero_of(x.dtype))


family.simple_kernel("MatrixBandPart", _matrix_band_part)


def _bound(side: str):
    """LowerBound (side "left") / UpperBound ("right"): each row of values searched in the same
    row of sorted_inputs."""
    def factory(op, ctx):
        out = _out_storage(op)

        def search(sorted_inputs, values):
            if np.ndim(sorted_inputs) != 2 or np.ndim(values) != 2:
                raise ValueError(f"sorted_inputs and values must be matrices, got shapes "
                                 f"{_shape_str(np.shape(sorted_inputs))} and {_shape_str(np.shape(values))}")
            if sorted_inputs.shape[0] != values.shape[0]:
                raise ValueError(f"Leading dim_size of both tensors must match: {sorted_inputs.shape[0]} vs "
                                 f"{values.shape[0]}")
            rows = [np.searchsorted(s, v, side=side) for s, v in zip(sorted_inputs, values)]
            return np.array(rows, out).reshape(values.shape)
        return search
    return factory


kernel("LowerBound")(_bound("left"))
kernel("UpperBound")(_bound("right"))
