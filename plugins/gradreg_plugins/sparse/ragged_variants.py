"""Ragged tensors encoded as DT_VARIANT scalars: RaggedTensorToVariant, RaggedTensorFromVariant
and RaggedTensorToVariantGradient — what ``tf.map_fn`` over the rows of a ragged tensor builds
(each row is one variant element of a vector, unstacked into a TensorArray or TensorList, decoded
in the loop body, encoded again, and stacked back).

An encoding (:class:`RaggedVariant`) holds a ragged tensor's nested row splits and flat values. A
ragged tensor encoded as a batch (``batched_input``) gives a vector of encodings, one per row,
each of ragged rank one less (a ragged rank 1 tensor's rows are plain tensors: encodings of
ragged rank 0); gradreg holds such a vector as a NumPy object array. Decoding a vector (or any
array) of encodings stacks them back: the array's dims become uniform outer ragged dims, each
element's outer dimension the next ragged one.

Zeros of an encoding keep its splits (TensorFlow's ZerosLike of RaggedTensorVariant); two
encodings of one structure add their values. The rules are TensorFlow's
(ragged_conversion_ops.py): the gradient of a decoding is the encoding of the values' gradient
with the decoded splits, and that of an encoding is RaggedTensorToVariantGradient, which
concatenates the values of each encoded gradient (an element no gradient reached counts as zeros
of its row's size).
"""
from __future__ import annotations

import numpy as np

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op
from gradreg.errors import GradientError, describe_node
from gradreg.model.shapes import SCALAR, TensorShape
from gradreg_plugins.sparse import family

op = family.op
kernel = family.kernel


class RaggedVariant:
    """One encoded ragged tensor: ``splits`` (a tuple of 1-D arrays, outermost first; empty for a
    plain tensor) and ``values``."""

    __slots__ = ("splits", "values")

    def __init__(self, splits, values: np.ndarray):
        self.splits = tuple(splits)
        self.values = values

    @property
    def ragged_rank(self) -> int:
        return len(self.splits)

    def zeros_like(self) -> RaggedVariant:
        return RaggedVariant(self.splits, np.zeros_like(self.values))

    def add(self, other) -> RaggedVariant:
        """The sum of two encodings of one structure (their values added)."""
        if not isinstance(other, RaggedVariant):
            raise ValueError(f"cannot add a ragged tensor encoding and {other!r}")
        if other.ragged_rank != self.ragged_rank or any(
                not np.array_equal(a, b) for a, b in zip(self.splits, other.splits)):
            raise ValueError("cannot add ragged tensor encodings with different row splits")
        if np.shape(other.values) != np.shape(self.values):
            raise ValueError(f"cannot add ragged tensor encodings with values of shapes "
                             f"{list(np.shape(self.values))} and {list(np.shape(other.values))}")
        return RaggedVariant(self.splits, self.values + other.values)

    def __repr__(self) -> str:
        return f"<ragged tensor encoding, ragged rank {self.ragged_rank}, values {list(np.shape(self.values))}>"


# -- definitions -----------------------------------------------------------------------------------------------

def _to_variant_shape(ctx):
    if not ctx.attr("batched_input"):
        return SCALAR
    if ctx.attr("RAGGED_RANK") == 0:
        raise ctx.error("batched_input needs a ragged tensor (RAGGED_RANK >= 1)")
    splits = ctx.input_shape(0)
    rows = splits.dims[0] - 1 if splits.rank == 1 and splits.dims[0] is not None else None
    return TensorShape([rows])


op("RaggedTensorToVariant", inputs=["rt_nested_splits: RAGGED_RANK * Tsplits", "rt_dense_values: Tvalues"],
   outputs=["encoded_ragged: variant"],
   attrs=["RAGGED_RANK: int >= 0", "Tvalues: type", "Tsplits: {int32, int64} = int64", "batched_input: bool"],
   shape=_to_variant_shape)
op("RaggedTensorFromVariant", inputs=["encoded_ragged: variant"],
   outputs=["output_nested_splits: output_ragged_rank * Tsplits", "output_dense_values: Tvalues"],
   attrs=["input_ragged_rank: int >= -1", "output_ragged_rank: int >= 0", "Tvalues: type",
          "Tsplits: {int32, int64} = int64"],
   shape=lambda ctx: [TensorShape([None])] * ctx.attr("output_ragged_rank") + [TensorShape(None)])
op("RaggedTensorToVariantGradient", inputs=["encoded_ragged_grad: variant", "row_splits: Tsplits",
                                            "dense_values_shape: int32"],
   outputs=["dense_values_grad: Tvalues"], attrs=["Tvalues: type", "Tsplits: {int32, int64} = int64"],
   shape=lambda ctx: ctx.input_as_shape(2))


# -- kernels ---------------------------------------------------------------------------------------------------

def unbatch(splits: list[np.ndarray], values: np.ndarray) -> list[RaggedVariant]:
    """The rows of a ragged tensor, each encoded with ragged rank one less."""
    outer = np.asarray(splits[0], np.int64)
    rows = []
    for start, limit in zip(outer[:-1].tolist(), outer[1:].tolist()):
        inner = []
        for level in splits[1:]:
            level = np.asarray(level)
            piece = level[start:limit + 1]
            inner.append(piece - piece[0])
            start, limit = int(piece[0]), int(piece[-1])
        rows.append(RaggedVariant(inner, values[start:limit]))
    return rows


@kernel("RaggedTensorToVariant")
def _to_variant(op, ctx):
    rank, batched = op.get_attr("RAGGED_RANK"), op.get_attr("batched_input")

    def encode(*args):
        splits, values = [np.asarray(s) for s in args[:rank]], np.asarray(args[rank])
        if not batched:
            return RaggedVariant(splits, values)
        if not splits:
            raise ValueError("batched_input needs a ragged tensor (RAGGED_RANK >= 1)")
        rows = unbatch(splits, values)
        out = np.empty(len(rows), dtype=object)
        out[:] = rows
        return out
    return encode


def _decoded(encoded, input_rank: int, dtype, split_dtype) -> list[RaggedVariant]:
    flat = [encoded] if not isinstance(encoded, np.ndarray) else list(encoded.reshape(-1))
    for i, element in enumerate(flat):
        if not isinstance(element, RaggedVariant):
            raise ValueError(f"Input Variant element at index {i} doesn't hold a RaggedTensorVariant: {element!r}")
        if element.ragged_rank != input_rank:
            raise ValueError(f"Encoded input RaggedTensorVariant has ragged_rank={element.ragged_rank}.  Expected "
                             f"ragged_rank={input_rank}.")
        if np.asarray(element.values).dtype != dtype.storage:
            raise ValueError(f"Expected values Tensor dtype: {dtype.name}, found: {np.asarray(element.values).dtype}")
        if any(np.asarray(s).dtype != split_dtype.storage for s in element.splits):
            raise ValueError(f"Expected row_splits Tensor dtype: {split_dtype.name}")
    return flat


def stack(components: list[RaggedVariant], dims: tuple[int, ...], input_rank: int, output_rank: int,
          split_storage) -> tuple[list[np.ndarray], np.ndarray]:
    """The encodings of an array of shape ``dims`` stacked into one ragged tensor: (splits, values)."""
    if output_rank == 0:
        if not components:
            return [], np.zeros([0])
        shapes = {np.shape(c.values) for c in components}
        if len(shapes) != 1:
            raise ValueError("All flat_values must have compatible shapes.")
        return [], np.stack([c.values for c in components])
    splits = [np.arange(dims[i] + 1, dtype=np.int64) * dims[i + 1] for i in range(len(dims) - 1)]
    sizes = [len(c.splits[0]) - 1 if input_rank and c.splits else np.shape(c.values)[0] for c in components]
    splits.append(np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]))
    for level in range(input_rank):
        pieces, offset = [np.zeros(1, np.int64)], 0
        for c in components:
            if c.splits:
                pieces.append(np.asarray(c.splits[level], np.int64)[1:] + offset)
                offset = int(pieces[-1][-1]) if len(pieces[-1]) else offset
        splits.append(np.concatenate(pieces))
    values = [np.asarray(c.values) for c in components]
    if len({v.shape[1:] for v in values}) > 1 or len({v.ndim for v in values}) > 1:
        raise ValueError("All flat_values must have compatible shapes.  If you are using tf.map_fn, then you may "
                         "need to specify an explicit fn_output_signature with appropriate ragged_rank, and/or "
                         "convert output tensors to RaggedTensors.")
    return [s.astype(split_storage) for s in splits], np.concatenate(values) if values else np.zeros([0])


@kernel("RaggedTensorFromVariant")
def _from_variant(op, ctx):
    input_rank, output_rank = op.get_attr("input_ragged_rank"), op.get_attr("output_ragged_rank")
    dtype, split_dtype = op.get_attr("Tvalues"), op.get_attr("Tsplits")

    def decode(encoded):
        dims = tuple(np.shape(encoded)) if isinstance(encoded, np.ndarray) else ()
        rank = input_rank
        if rank == -1:
            rank = max(output_rank - len(dims), 0) if output_rank == 0 else output_rank - len(dims)
            if rank < 0:
                raise ValueError(f"Inferred input_ragged_rank (output_ragged_rank - encoded_variant.dims()) must be "
                                 f">= 0, found output_ragged_rank: {output_rank}, encoded_variant.dims(): {len(dims)}")
        if not ((output_rank == 0 and rank == 0) or output_rank == len(dims) + rank):
            raise ValueError(f"output_ragged_rank must be equal to input_ragged_rank + encoded_ragged.dims(); "
                             f"output_ragged_rank: {output_rank}, input_ragged_rank: {rank}, encoded_variant.dims(): "
                             f"{len(dims)}.")
        components = _decoded(encoded, rank, dtype, split_dtype)
        if not dims:
            splits, values = list(components[0].splits), components[0].values
        else:
            splits, values = stack(components, dims, rank, output_rank, split_dtype.storage)
        values = np.asarray(values, dtype.storage)
        return (*splits, values) if splits else values     # one output: the bare value
    return decode


@kernel("RaggedTensorToVariantGradient")
def _to_variant_gradient(op, ctx):
    dtype = op.get_attr("Tvalues")

    def gradient(encoded, row_splits, shape):
        row_splits = np.asarray(row_splits).reshape(-1)
        shape = [int(d) for d in np.asarray(shape).reshape(-1)]
        flat = [encoded] if not isinstance(encoded, np.ndarray) else list(encoded.reshape(-1))
        pieces = []
        for i, element in enumerate(flat):
            if isinstance(element, RaggedVariant):
                pieces.append(np.asarray(element.values, dtype.storage))
            else:   # no gradient reached this element: zeros of its row's size (TensorFlow)
                pieces.append(np.zeros([int(row_splits[i + 1] - row_splits[i]), *shape[1:]], dtype.storage))
        if len(pieces) == 1:
            return pieces[0]
        return np.concatenate([p.reshape(-1) for p in pieces]).reshape(shape)
    return gradient


# -- rules ------------------------------------------------------------------------------------------------------

@family.gradient("RaggedTensorFromVariant")
def _from_variant_grad(op, *grads):
    values_grad = grads[-1]
    if values_grad is None:
        return [None]
    rank = op.inputs[0].shape.rank
    if rank is None:
        batched = op.get_attr("output_ragged_rank") > 0
    elif rank in (0, 1):
        batched = rank == 1
    else:
        raise GradientError(f"{describe_node(op.name, op.type)}: unable to compute the gradient: RaggedTensorToVariant "
                            f"can only encode a scalar or a vector (the encoding has rank {rank})")
    return [apply_op("RaggedTensorToVariant", list(op.outputs[:-1]), rules.dense(values_grad), batched_input=batched,
                     Tsplits=op.get_attr("Tsplits"))]


@family.gradient("RaggedTensorToVariant")
def _to_variant_grad(op, encoded_grad):
    ragged_rank = len(op.inputs) - 1
    if encoded_grad is None:
        return [None] * len(op.inputs)
    values = op.inputs[-1]
    split_dtype = op.get_attr("Tsplits")
    row_splits = op.inputs[0] if ragged_rank else rules.ints(0, split_dtype)
    values_grad = apply_op("RaggedTensorToVariantGradient", encoded_grad, row_splits, apply_op("Shape", values),
                           Tvalues=op.get_attr("Tvalues"))
    return [None] * ragged_rank + [values_grad]

