"""Spatial rearrangements: SpaceToBatchND / BatchToSpaceND (and their 4-D V1 forms), DepthToSpace /
SpaceToDepth, ExtractImagePatches / ExtractVolumePatches — definitions, shape functions, NumPy
kernels and gradient rules together.

Each is a reshaping permutation (with zero padding or cropping) whose adjoint is its partner:
SpaceToBatchND's gradient is BatchToSpaceND with the paddings as crops and the other way round,
DepthToSpace's is SpaceToDepth. A patch extraction copies each input pixel into every patch that
covers it; its gradient sums the patches back, with an UnsortedSegmentSum keyed by the patches
of an image of pixel numbers (padding reads number -1, which the sum drops), so the gradient
graph is made of TensorFlow ops. Unlike TensorFlow's rule for ExtractVolumePatches (a sparse
matrix product), gradreg's uses the same segment sum; the numbers are int64, exact at any size.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op
from gradreg.errors import ShapeError
from gradreg.model import dtypes
from gradreg.model.shape_inference import constant_value
from gradreg.model.shapes import TensorShape
from gradreg_plugins.nn import family
from gradreg_plugins.nn.kernels import kernel, node_error
from gradreg_plugins.nn.windows import output_dim, text

op = family.op
_INDEX = "{int32, int64}"


def _ints(ctx, i: int) -> np.ndarray | None:
    value = ctx.input_value(i)
    return None if value is None else np.asarray(value, np.int64)


def _shape_error(ctx, fn):
    """Run ``fn()``, turning the ValueErrors of the shared size arithmetic into node errors."""
    try:
        return fn()
    except (ValueError, ShapeError) as exc:
        raise ctx.error(str(exc)) from None


# -- SpaceToBatchND / BatchToSpaceND -------------------------------------------------------------

def _block_args(block: np.ndarray, pads: np.ndarray, what: str) -> tuple[list[int], list[tuple[int, int]]]:
    """block_shape [M] and paddings/crops [M, 2], checked."""
    block, pads = np.asarray(block), np.asarray(pads)
    if block.ndim != 1:
        raise ValueError(f"block_shape must be 1-D, got shape {list(block.shape)}")
    m = block.shape[0]
    if pads.shape != (m, 2):
        raise ValueError(f"{what} must have shape [{m}, 2], got {list(pads.shape)}")
    if (block < 1).any():
        raise ValueError(f"block_shape must be positive, got {block.tolist()}")
    if (pads < 0).any():
        raise ValueError(f"{what} must be non-negative, got {pads.tolist()}")
    return [int(b) for b in block], [(int(a), int(b)) for a, b in pads]


def space_to_batch(x: np.ndarray, block, paddings) -> np.ndarray:
    block, pads = _block_args(block, paddings, "paddings")
    m = len(block)
    if x.ndim < m + 1:
        raise ValueError(f"input rank should be >= {m + 1} instead of {x.ndim}")
    padded = np.pad(x, [(0, 0)] + pads + [(0, 0)] * (x.ndim - m - 1))
    spatial = padded.shape[1:m + 1]
    for size, b, i in zip(spatial, block, range(m)):
        if size % b:
            raise ValueError(f"padded_shape[{i}]={size} is not divisible by block_shape[{i}]={b}")
    batch, rest = x.shape[0], padded.shape[m + 1:]
    split = [batch] + [d for size, b in zip(spatial, block) for d in (size // b, b)] + list(rest)
    order = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + list(range(2 * m + 1, len(split)))
    out = padded.reshape(split).transpose(order)
    return out.reshape([batch * int(np.prod(block))] + [size // b for size, b in zip(spatial, block)] + list(rest))


def batch_to_space(x: np.ndarray, block, crops) -> np.ndarray:
    block, crops = _block_args(block, crops, "crops")
    m = len(block)
    if x.ndim < m + 1:
        raise ValueError(f"input rank should be >= {m + 1} instead of {x.ndim}")
    blocks = int(np.prod(block))
    if x.shape[0] % blocks:
        raise ValueError(f"Input batch dimension ({x.shape[0]}) is not divisible by product of block sizes ({blocks})")
    batch, spatial, rest = x.shape[0] // blocks, x.shape[1:m + 1], x.shape[m + 1:]
    split = list(block) + [batch] + list(spatial) + list(rest)
    order = [m] + [d for i in range(m) for d in (m + 1 + i, i)] + list(range(2 * m + 1, len(split)))
    full = x.reshape(split).transpose(order).reshape([batch] + [s * b for s, b in zip(spatial, block)] + list(rest))
    index = [slice(None)]
    for size, (start, stop) in zip(full.shape[1:m + 1], crops):
        if start + stop > size:
            raise ValueError(f"crops {crops} are larger than the block-expanded size {size}")
        index.append(slice(start, size - stop))
    return full[tuple(index)]


def _batch_space_shape(ctx, to_batch: bool, block_index: int | None, block_size: int = 0):
    """Shape of SpaceToBatch(ND) / BatchToSpace(ND): block sizes and paddings/crops from their
    constant inputs (or the V1 ops' block_size attr); unknown what they leave unknown."""
    x = ctx.input_shape(0)
    pads = _ints(ctx, ctx.num_inputs - 1)
    block: np.ndarray | None
    m: int | None
    if block_index is None:
        block, m = np.array([block_size, block_size]), 2
    else:
        block = _ints(ctx, block_index)
        block_shape = ctx.input_shape(block_index)
        m = block.size if block is not None else (block_shape[0] if block_shape.rank == 1 else None)
    if x.rank is None or m is None:
        return TensorShape(None)
    if x.rank < m + 1:
        raise ctx.error(f"input rank should be >= {m + 1} instead of {x.rank}")
    dims = x.as_list()
    if block is None:
        return TensorShape([None] * (m + 1) + dims[m + 1:])
    blocks = int(np.prod(block))
    pads = None if pads is None else pads.reshape(m, 2)
    out = [None if dims[0] is None else (dims[0] * blocks if to_batch else dims[0] // blocks)]
    for i, (size, b) in enumerate(zip(dims[1:m + 1], block)):
        if size is None or pads is None:
            out.append(None)
        elif to_batch:
            out.append((size + int(pads[i].sum())) // int(b))
        else:
            out.append(size * int(b) - int(pads[i].sum()))
    return TensorShape(out + dims[m + 1:])


op("SpaceToBatchND", inputs=["input: T", "block_shape: Tblock_shape", "paddings: Tpaddings"], outputs=["output: T"],
   attrs=["T: type", f"Tblock_shape: {_INDEX} = int32", f"Tpaddings: {_INDEX} = int32"],
   shape=lambda ctx: _batch_space_shape(ctx, True, 1), linear=True)
op("BatchToSpaceND", inputs=["input: T", "block_shape: Tblock_shape", "crops: Tcrops"], outputs=["output: T"],
   attrs=["T: type", f"Tblock_shape: {_INDEX} = int32", f"Tcrops: {_INDEX} = int32"],
   shape=lambda ctx: _batch_space_shape(ctx, False, 1), linear=True)
op("SpaceToBatch", inputs=["input: T", "paddings: Tpaddings"], outputs=["output: T"],
   attrs=["T: type", f"Tpaddings: {_INDEX} = int32", "block_size: int >= 2"],
   shape=lambda ctx: _batch_space_shape(ctx, True, None, ctx.attr("block_size")), linear=True)
op("BatchToSpace", inputs=["input: T", "crops: Tidx"], outputs=["output: T"],
   attrs=["T: type", "block_size: int >= 2", f"Tidx: {_INDEX} = int32"],
   shape=lambda ctx: _batch_space_shape(ctx, False, None, ctx.attr("block_size")), linear=True)

kernel("SpaceToBatchND")(lambda op, ctx: space_to_batch)
kernel("BatchToSpaceND")(lambda op, ctx: batch_to_space)


@kernel("SpaceToBatch")
def _space_to_batch_v1(op, ctx):
    block = np.array([op.get_attr("block_size")] * 2)

    def compute(x, paddings):
        if x.ndim != 4:
            raise ValueError(f"input must be 4-D, got shape {list(x.shape)}")
        return space_to_batch(x, block, paddings)
    return compute


@kernel("BatchToSpace")
def _batch_to_space_v1(op, ctx):
    block = np.array([op.get_attr("block_size")] * 2)

    def compute(x, crops):
        if x.ndim != 4:
            raise ValueError(f"input must be 4-D, got shape {list(x.shape)}")
        return batch_to_space(x, block, crops)
    return compute


def _v1_block(op):
    return rules.ints([op.get_attr("block_size")] * 2)


def _fresh(t):
    """``t`` as a new Const when its value is known (a block shape, paddings): the gradient op
    then depends on nothing of the forward graph but its gradient, which lets loop gradients
    sum its per-iteration contributions after the loop (it is declared linear)."""
    value = constant_value(t)
    return t if value is None else rules.ints(value, t.dtype.base_dtype)


@family.gradient("SpaceToBatchND")
def _space_to_batch_nd_grad(op, grad):
    _, block, paddings = op.inputs
    return apply_op("BatchToSpaceND", rules.dense(grad), _fresh(block), _fresh(paddings)), None, None


@family.gradient("BatchToSpaceND")
def _batch_to_space_nd_grad(op, grad):
    _, block, crops = op.inputs
    return apply_op("SpaceToBatchND", rules.dense(grad), _fresh(block), _fresh(crops)), None, None


@family.gradient("SpaceToBatch")
def _space_to_batch_grad(op, grad):
    return apply_op("BatchToSpaceND", rules.dense(grad), _v1_block(op), _fresh(op.inputs[1])), None


@family.gradient("BatchToSpace")
def _batch_to_space_grad(op, grad):
    return apply_op("SpaceToBatchND", rules.dense(grad), _v1_block(op), _fresh(op.inputs[1])), None


# -- DepthToSpace / SpaceToDepth -------------------------------------------------------------------

def _depth_format(op) -> str:
    fmt = text(op.get_attr("data_format"))
    if fmt == "NCHW_VECT_C":
        raise node_error(op, "data_format NCHW_VECT_C (qint8 vectors) is not supported")
    return fmt


def depth_to_space(x: np.ndarray, bs: int, fmt: str) -> np.ndarray:
    if x.ndim != 4:
        raise ValueError(f"input rank should be 4 instead of {x.ndim}")
    if fmt == "NCHW":
        return space_rearranged(x.transpose(0, 2, 3, 1), bs, to_space=True).transpose(0, 3, 1, 2)
    return space_rearranged(x, bs, to_space=True)


def space_to_depth(x: np.ndarray, bs: int, fmt: str) -> np.ndarray:
    if x.ndim != 4:
        raise ValueError(f"input rank should be 4 instead of {x.ndim}")
    if fmt == "NCHW":
        return space_rearranged(x.transpose(0, 2, 3, 1), bs, to_space=False).transpose(0, 3, 1, 2)
    return space_rearranged(x, bs, to_space=False)


def space_rearranged(x: np.ndarray, bs: int, to_space: bool) -> np.ndarray:
    """NHWC: depth (i * bs + j) * C' + c of pixel (h, w) <-> channel c of pixel (h bs + i, w bs + j)."""
    n, h, w, c = x.shape
    if to_space:
        if c % (bs * bs):
            raise ValueError(f"Input depth dimension {c} should be divisible by: {bs * bs}")
        return x.reshape(n, h, w, bs, bs, c // (bs * bs)).transpose(0, 1, 3, 2, 4, 5).reshape(
            n, h * bs, w * bs, c // (bs * bs))
    if h % bs or w % bs:
        raise ValueError(f"Image width {w} and height {h} should be divisible by block_size: {bs}")
    return x.reshape(n, h // bs, bs, w // bs, bs, c).transpose(0, 1, 3, 2, 4, 5).reshape(
        n, h // bs, w // bs, c * bs * bs)


def _depth_space_shape(ctx):
    fmt, bs = text(ctx.attr("data_format")), ctx.attr("block_size")
    shape = ctx.input_shape(0)
    if shape.rank is not None and shape.rank != 4:
        raise ctx.error(f"input must be 4-D, got shape {shape}")
    n, a, b, c = shape.with_rank(4).as_list()
    h, w, d = (b, c, a) if fmt == "NCHW" else (a, b, c)
    if ctx.op.type == "DepthToSpace":
        if d is not None and d % (bs * bs):
            raise ctx.error(f"Input depth dimension {d} should be divisible by: {bs * bs}")
        h, w = (None if h is None else h * bs), (None if w is None else w * bs)
        d = None if d is None else d // (bs * bs)
    else:
        for size in (h, w):
            if size is not None and size % bs:
                raise ctx.error(f"Image width {w} and height {h} should be divisible by block_size: {bs}")
        h, w = (None if h is None else h // bs), (None if w is None else w // bs)
        d = None if d is None else d * bs * bs
    return TensorShape([n, d, h, w] if fmt == "NCHW" else [n, h, w, d])


_DEPTH_ATTRS = ["T: type", "block_size: int >= 2", "data_format: {'NHWC', 'NCHW', 'NCHW_VECT_C'} = 'NHWC'"]
op("DepthToSpace", inputs=["input: T"], outputs=["output: T"], attrs=_DEPTH_ATTRS, shape=_depth_space_shape,
   linear=True)
op("SpaceToDepth", inputs=["input: T"], outputs=["output: T"], attrs=_DEPTH_ATTRS, shape=_depth_space_shape,
   linear=True)


@kernel("DepthToSpace")
def _depth_to_space(op, ctx):
    fmt, bs = _depth_format(op), op.get_attr("block_size")
    return lambda x: depth_to_space(x, bs, fmt)


@kernel("SpaceToDepth")
def _space_to_depth(op, ctx):
    fmt, bs = _depth_format(op), op.get_attr("block_size")
    return lambda x: space_to_depth(x, bs, fmt)


@family.gradient("DepthToSpace")
def _depth_to_space_grad(op, grad):
    return apply_op("SpaceToDepth", rules.dense(grad), block_size=op.get_attr("block_size"),
                    data_format=op.get_attr("data_format"))


@family.gradient("SpaceToDepth")
def _space_to_depth_grad(op, grad):
    return apply_op("DepthToSpace", rules.dense(grad), block_size=op.get_attr("block_size"),
                    data_format=op.get_attr("data_format"))


# -- patches ----------------------------------------------------------------------------------------

def _window(values, rank: int, name: str) -> list[int]:
    """The spatial entries of a ksizes/strides/rates attr (batch and depth entries must be 1)."""
    values = [int(v) for v in values]
    if len(values) != rank or values[0] != 1 or values[-1] != 1:
        raise ValueError(f"{name} {values}: expected {rank} entries with 1 for the batch and depth dimensions")
    if min(values) < 1:
        raise ValueError(f"{name} {values} must be positive")
    return values[1:-1]


class _Patches:
    """A patch extraction's spatial geometry: per spatial dim the window, stride, rate, output
    size and padding, by TensorFlow's windowed-output arithmetic."""

    def __init__(self, op):
        rank = 4 if op.type == "ExtractImagePatches" else 5
        self.ksizes = _window(op.get_attr("ksizes"), rank, "ksizes")
        self.strides = _window(op.get_attr("strides"), rank, "strides")
        self.rates = _window(op.get_attr("rates"), rank, "rates") if rank == 4 else [1] * 3
        self.padding = text(op.get_attr("padding"))

    def dims(self, sizes, static: bool = False):
        return [output_dim(s, k, st, r, self.padding, (0, 0), static)
                for s, k, st, r in zip(sizes, self.ksizes, self.strides, self.rates)]

    def extract(self, x: np.ndarray, ctx, op) -> np.ndarray:
        dims = self.dims(x.shape[1:-1])
        outs = [d[0] for d in dims]
        depth = int(np.prod(self.ksizes)) * x.shape[-1]
        ctx.check_elements(x.shape[0] * int(np.prod(outs)) * depth, op)
        if 0 in x.shape or 0 in outs:
            return np.zeros([x.shape[0]] + outs + [depth], x.dtype)
        padded = np.pad(x, [(0, 0)] + [(before, after) for _, before, after in dims] + [(0, 0)])
        effective = [(k - 1) * r + 1 for k, r in zip(self.ksizes, self.rates)]
        spatial = tuple(range(1, x.ndim - 1))
        windows = sliding_window_view(padded, effective, axis=spatial)   # n, spatial..., c, windows...
        index = [slice(None)] + [slice(0, o * s, s) for o, s in zip(outs, self.strides)] + [slice(None)]
        index += [slice(None, None, r) for r in self.rates]
        windows = windows[tuple(index)]
        k = len(spatial)
        order = [0] + list(range(1, k + 1)) + list(range(k + 2, 2 * k + 2)) + [k + 1]   # taps, then depth
        return windows.transpose(order).reshape([x.shape[0]] + outs + [depth])


def _patches_shape(ctx):
    rank = 4 if ctx.op.type == "ExtractImagePatches" else 5
    shape = ctx.input_shape(0)
    if shape.rank is not None and shape.rank != rank:
        raise ctx.error(f"input must be {rank}-D, got shape {shape}")
    dims = shape.with_rank(rank).as_list()
    patches = _shape_error(ctx, lambda: _Patches(ctx.op))
    outs = _shape_error(ctx, lambda: [d[0] for d in patches.dims(dims[1:-1], static=True)])
    depth = None if dims[-1] is None else int(np.prod(patches.ksizes)) * dims[-1]
    return TensorShape([dims[0]] + outs + [depth])


op("ExtractImagePatches", inputs=["images: T"], outputs=["patches: T"],
   attrs=["ksizes: list(int) >= 4", "strides: list(int) >= 4", "rates: list(int) >= 4",
          "T: {bfloat16, float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, "
          "complex64, complex128, bool}", "padding: {'SAME', 'VALID'}"],
   shape=_patches_shape, linear=True)
op("ExtractVolumePatches", inputs=["input: T"], outputs=["patches: T"],
   attrs=["ksizes: list(int) >= 5", "strides: list(int) >= 5",
          "T: {float32, float64, int32, uint8, int16, int8, int64, bfloat16, uint16, float16, uint32, uint64}",
          "padding: {'SAME', 'VALID'}"],
   shape=_patches_shape, linear=True)


@kernel("ExtractImagePatches")
@kernel("ExtractVolumePatches")
def _extract_patches(op, ctx):
    try:
        patches = _Patches(op)
    except ValueError as exc:
        raise node_error(op, str(exc)) from None
    rank = 4 if op.type == "ExtractImagePatches" else 5

    def compute(x):
        if x.ndim != rank:
            raise ValueError(f"input must be {rank}-D, got shape {list(x.shape)}")
        return patches.extract(x, ctx, op)
    return compute


@family.gradient("ExtractImagePatches", "ExtractVolumePatches")
def _extract_patches_grad(op, grad):
    # Number the input's pixels (0, 1, ...: one image's worth, as int64), extract their patches
    # with the node's attrs (padding reads -1 after the shift), and sum every patch entry's
    # gradient into the pixel it holds.
    x = op.inputs[0]
    rank = x.shape.rank if x.shape.rank is not None else (4 if op.type == "ExtractImagePatches" else 5)
    shape = apply_op("Shape", x, out_type=dtypes.int64)
    dims = apply_op("Unpack", shape, num=rank, axis=0)
    batch, spatial, channels = dims[0], dims[1:-1], dims[-1]
    pixels = spatial[0]
    for d in spatial[1:]:
        pixels = pixels * d
    numbers = apply_op("Reshape", apply_op("Range", np.int64(1), pixels + np.int64(1), np.int64(1)),
                       apply_op("Pack", [np.int64(1)] + spatial + [np.int64(1)], axis=0))
    attrs = {name: op.get_attr(name) for name in op.definition.attr_specs if name != "T"}
    segment = apply_op("Reshape", apply_op(op.type, numbers, **attrs) - np.int64(1), rules.ints([-1]))
    out_spatial = apply_op("StridedSlice", apply_op("Shape", op.outputs[0], out_type=dtypes.int64), rules.ints([1]),
                           rules.ints([rank - 1]), rules.ints([1]))
    taps = int(np.prod([int(v) for v in op.get_attr("ksizes")]))
    # grad: [batch, out..., taps * channels] -> [out..., taps, batch, channels] -> rows per tap.
    one = rules.ints([1], dtypes.int64)
    split = apply_op("ConcatV2", [apply_op("Reshape", batch, one), out_spatial, rules.ints([taps], dtypes.int64),
                                  apply_op("Reshape", channels, one)], 0)
    k = rank - 2
    order = list(range(1, k + 2)) + [0, k + 2]
    rows = apply_op("Transpose", apply_op("Reshape", rules.dense(grad), split), rules.ints(order))
    rows = apply_op("Reshape", rows, apply_op("Pack", [np.int64(-1), batch * channels], axis=0))
    summed = apply_op("UnsortedSegmentSum", rows, segment, pixels)
    summed = apply_op("Reshape", summed, apply_op("ConcatV2", [apply_op("Pack", spatial, axis=0),
                                                                apply_op("Pack", [batch, channels], axis=0)], 0))
    return apply_op("Transpose", summed, rules.ints([k] + list(range(k)) + [k + 1]))


# -- data format conversions --------------------------------------------------------------------------
# Integer helpers TensorFlow's layout optimizer inserts when it converts a graph between NHWC and
# NCHW: DataFormatDimMap maps axis numbers, DataFormatVecPermute permutes per-dimension vectors
# (shapes, paddings). Not differentiable (integers), as in TensorFlow.

def _formats(op) -> tuple[str, str]:
    src, dst = text(op.get_attr("src_format")), text(op.get_attr("dst_format"))
    if len(src) not in (4, 5) or sorted(src) != sorted(dst):
        raise node_error(op, f"src_format {src!r} and dst_format {dst!r} must be permutations of 4 or 5 "
                             f"dimensions of one another")
    return src, dst


@kernel("DataFormatDimMap")
def _data_format_dim_map(op, ctx):
    src, dst = _formats(op)
    table = np.array([dst.index(letter) for letter in src])

    def compute(x):
        rank = len(src)
        if np.any((x < -rank) | (x >= rank)):
            raise ValueError(f"dimension values must be in [{-rank}, {rank}), got {np.asarray(x).tolist()}")
        return table[np.asarray(x) % rank].astype(x.dtype)
    return compute


@kernel("DataFormatVecPermute")
def _data_format_vec_permute(op, ctx):
    src, dst = _formats(op)

    def compute(x):
        if x.shape[:1] == (len(src),) and x.ndim in (1, 2) and (x.ndim == 1 or x.shape[1] == 2):
            order = [src.index(letter) for letter in dst]
        elif x.shape[:1] == (len(src) - 2,) and x.ndim in (1, 2):
            spatial_src = [c for c in src if c not in "NC"]
            order = [spatial_src.index(c) for c in dst if c not in "NC"]
        else:
            raise ValueError(f"input must be a vector or a [n, 2] matrix with n = {len(src)} (or {len(src) - 2} "
                             f"spatial entries), got shape {list(x.shape)}")
        return x[order]
    return compute


_FORMAT_ATTRS = ["T: {int32, int64} = int32", "src_format: string = 'NHWC'", "dst_format: string = 'NCHW'"]
op("DataFormatDimMap", inputs=["x: T"], outputs=["y: T"], attrs=_FORMAT_ATTRS, shape=lambda ctx: ctx.input_shape(0),
   foldable=True)
op("DataFormatVecPermute", inputs=["x: T"], outputs=["y: T"], attrs=_FORMAT_ATTRS,
   shape=lambda ctx: ctx.input_shape(0), foldable=True)
family.not_differentiable("DataFormatDimMap", "DataFormatVecPermute")
