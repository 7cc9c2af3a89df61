"""What the onnx family's gradient rules share: their gradients by ONNX input position handed to
gradreg (:func:`per_input`), summing a broadcast gradient back, differentiating through a
decomposition, static-shape helpers.

Rules are registered as every family's are, ``@family.gradient("onnx::Op")``, with the signature
``rule(op, *output_grads)``. They think in ONNX positions, where an absent optional input keeps
its place: ``per_input(op, (dx, None, dbias))`` turns that into one gradient per op input.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gradreg.autodiff.gradients import as_dense_gradients, gradients
from gradreg.errors import GradientError, describe_node
from gradreg.model import catalog, dtypes
from gradreg.model.graph import Operation, Tensor
from gradreg.model.shape_inference import constant_value
from gradreg_plugins.onnx.build import const_like, ints, onnx_op, shape_of
from gradreg_plugins.onnx.nodes import input_layout, onnx_inputs, onnx_outputs

__all__ = ["fail", "per_input", "through", "reduce_to", "static_dims", "static_rank", "zeros_like", "ones_like",
           "const_like", "ints", "onnx_op", "shape_of", "is_float", "neg", "swap_last", "scatter_add_flat",
           "iota_like", "index_adjoint", "axis_of", "known_value"]


def per_input(op: Operation, by_position: Any) -> list[Any]:
    """A rule's gradients as gradreg takes them, one per op input. ``by_position`` holds them by
    ONNX input position (None for an absent optional input; positions past the last may be left
    off; a tensor alone is the first input's), then those of the captured values of an op with
    subgraphs."""
    if not isinstance(by_position, (tuple, list)):
        by_position = [by_position]
    layout = input_layout(op)
    out = [by_position[p] if p < len(by_position) else None for p, i in enumerate(layout) if i is not None]
    out += list(by_position[len(layout):])          # the captured values of an op with subgraphs
    return out + [None] * (len(op.inputs) - len(out))


def fail(op: Operation, message: str) -> GradientError:
    """A GradientError naming the node being differentiated."""
    return GradientError(f"gradient of {describe_node(op.name, op.type)}: {message}")


def is_float(t: Tensor | None) -> bool:
    return t is not None and t.dtype is not None and t.dtype.base_dtype.is_floating


def through(op: Operation, grads: Sequence[Any], build: Callable[..., Any],
            inputs: Sequence[Tensor | None] | None = None) -> list[Any]:
    """The op's input gradients (by ONNX position) as the gradients of ``build(*inputs)``, which
    recomputes the op's ONNX outputs (by position; None where it does not) from other ops.

    The decomposition's inputs are held constant with respect to each other (stop_gradients),
    so each gets its partial derivative even when one is computed from another."""
    inputs = list(onnx_inputs(op) if inputs is None else inputs)
    outs = build(*inputs)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    ys, grad_ys = [], []
    for t, recomputed in zip(onnx_outputs(op), outs):
        if t is None or recomputed is None:
            continue
        g = grads[op.outputs.index(t)]
        if g is not None and is_float(recomputed):
            if g.dtype.base_dtype is not recomputed.dtype.base_dtype:   # LayerNormalization's float32 statistics
                g = onnx_op("Cast", g, to=recomputed.dtype.base_dtype)
            ys.append(recomputed)
            grad_ys.append(g)
    xs = [t for t in inputs if is_float(t)]
    if not ys or not xs:
        return [None] * len(inputs)
    found = as_dense_gradients(gradients(ys, xs, grad_ys=grad_ys, stop_gradients=xs,
                                         name=op.name.split("/")[-1] + "_through"))
    by_tensor = {id(x): g for x, g in zip(xs, found)}
    return [by_tensor.get(id(t)) if t is not None else None for t in inputs]


# The onnx ops PyTorch computes shapes, sizes, scales and axes with: evaluated while a gradient is built
# when constants and static shapes determine their inputs.
_SHAPE_ARITHMETIC = frozenset(f"onnx::{name}" for name in (
    "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Floor", "Ceil", "Round", "Sqrt", "Max", "Min", "Mod", "Cast", "CastLike",
    "Concat", "Gather", "Slice", "Squeeze", "Unsqueeze", "Reshape", "Flatten", "Identity", "Equal", "Less",
    "Greater", "Not", "Where", "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin", "Range", "ConstantOfShape"))
_KNOWN_LIMIT = 4096      # elements: shapes and index vectors, never a tensor of data


def known_value(t: Tensor | None) -> np.ndarray | None:
    """t's value when constants and static shapes determine it, else None: gradreg's constant_value,
    then through onnx Shape and Size of statically shaped tensors and the shape arithmetic exporters
    write around them (Concat, Gather, Cast, Slice, ...), run by the family's NumPy kernels."""
    return None if t is None else _known(t, {})


def _known(t: Tensor, memo: dict[Tensor, Any]) -> Any:
    if t in memo:
        return memo[t]
    value = constant_value(t)
    op = t.op
    if value is None and op.type in ("onnx::Shape", "onnx::Size"):
        value = _static_shape_value(op)
    elif value is None and op.type in _SHAPE_ARITHMETIC and op.inputs:
        values = [_known(i, memo) for i in op.inputs]
        if all(v is not None and np.size(v) <= _KNOWN_LIMIT for v in values):
            result = catalog.current().fold_constant(op, values)
            result = result[t.value_index] if isinstance(result, (tuple, list)) else result
            value = None if result is None or np.size(result) > _KNOWN_LIMIT else np.asarray(result)
    memo[t] = value
    return value


def _static_shape_value(op: Operation) -> np.ndarray | None:
    dims = op.inputs[0].shape.dims
    if dims is None:
        return None
    if op.type == "onnx::Size":
        return None if None in dims else np.array(int(np.prod([int(d) for d in dims if d is not None])), np.int64)
    start = int(op.get_attr("start") or 0) if op.has_attr("start") else 0
    end = op.get_attr("end") if op.has_attr("end") else None
    picked = dims[start:None if end is None else int(end)]
    return None if None in picked else np.array([int(d) for d in picked if d is not None], np.int64)


def axis_of(op: Operation, rank: int | None, name: str = "axis") -> int:
    """The op's (possibly negative) axis attribute as a non-negative axis."""
    axis = int(op.get_attr(name))
    if axis < 0:
        if rank is None:
            raise fail(op, f"the input's rank must be known for a negative {name}")
        axis += rank
    return axis


def static_rank(op: Operation, t: Tensor, what: str = "the input") -> int:
    if t.shape.rank is None:
        raise fail(op, f"{what}'s rank must be known (shape {t.shape})")
    return int(t.shape.rank)


def static_dims(op: Operation, t: Tensor, what: str = "the input") -> list[int]:
    dims = t.shape.dims
    if dims is None or any(d is None for d in dims):
        raise fail(op, f"{what}'s shape must be known (shape {t.shape})")
    return [int(d) for d in dims if d is not None]


def reduce_to(g: Tensor, x: Tensor) -> Tensor:
    """``g`` summed over the axes along which ``x`` was broadcast to ``g``'s shape, shaped like x."""
    gd, xd = g.shape.dims, x.shape.dims
    if gd is not None and xd is not None and None not in gd and None not in xd:
        return _reduce_to_static(g, [int(d) for d in gd if d is not None], [int(d) for d in xd if d is not None])
    # Unknown shapes: pad x's shape with leading ones to g's rank and sum over every axis where it
    # is 1 (summing over an axis g has as 1 too changes nothing).
    sx, sg = shape_of(x), shape_of(g)
    missing = onnx_op("Sub", onnx_op("Size", sg), onnx_op("Size", sx))
    ones = onnx_op("ConstantOfShape", onnx_op("Unsqueeze", missing, ints([0], g, "axis")),
                   value=np.ones(1, np.int64))
    padded = onnx_op("Concat", ones, sx, axis=0)
    axes = onnx_op("Reshape", onnx_op("NonZero", onnx_op("Equal", padded, ints([1], g, "one"))),
                   ints([-1], g, "flat"))
    summed = onnx_op("ReduceSum", g, axes, keepdims=1, noop_with_empty_axes=1)
    return onnx_op("Reshape", summed, sx)


def _reduce_to_static(g: Tensor, gd: list[int], xd: list[int]) -> Tensor:
    """reduce_to for known shapes: nothing when they agree, else one ReduceSum (the leading axes
    dropped, x's size-1 axes kept), and a Reshape only when both kinds of axis are summed."""
    if gd == xd:
        return g
    lead = len(gd) - len(xd)
    ones = [lead + i for i, d in enumerate(xd) if d == 1 and gd[lead + i] != 1]
    if not ones and not lead:     # empty axes would sum everything
        return onnx_op("Reshape", g, ints(xd, g, "shape"))
    if not ones:
        return onnx_op("ReduceSum", g, ints(list(range(lead)), g, "axes"), keepdims=0)
    summed = onnx_op("ReduceSum", g, ints(list(range(lead)) + ones, g, "axes"), keepdims=1)
    return summed if lead == 0 else onnx_op("Reshape", summed, ints(xd, g, "shape"))


def zeros_like(t: Tensor, dtype: Any = None) -> Tensor:
    """Zeros of ``t``'s shape (and dtype, unless given), as ConstantOfShape(Shape(t))."""
    storage = dtypes.as_dtype(dtype if dtype is not None else t.known_dtype).base_dtype.storage
    return onnx_op("ConstantOfShape", shape_of(t), value=np.zeros(1, storage))


def ones_like(t: Tensor, dtype: Any = None) -> Tensor:
    storage = dtypes.as_dtype(dtype if dtype is not None else t.known_dtype).base_dtype.storage
    return onnx_op("ConstantOfShape", shape_of(t), value=np.ones(1, storage))


def neg(x: Tensor) -> Tensor:
    return onnx_op("Neg", x)


def swap_last(op: Operation, x: Tensor) -> Tensor:
    """x with its last two axes swapped."""
    rank = static_rank(op, x, "a matrix product's input")
    perm = list(range(rank))
    perm[-2:] = perm[-2:][::-1]
    return onnx_op("Transpose", x, perm=perm)


def iota_like(x: Tensor) -> Tensor:
    """0, 1, 2, ... in x's shape (int64): each element's flat index."""
    flat = onnx_op("Range", np.int64(0), onnx_op("Size", x), np.int64(1))
    return onnx_op("Reshape", flat, shape_of(x))


def scatter_add_flat(x: Tensor, indices: Tensor, updates: Tensor) -> Tensor:
    """Zeros shaped like ``x`` with ``updates`` added at the flat ``indices`` (same shape as updates)."""
    flat = ints([-1], updates, "flat")
    zeros = onnx_op("ConstantOfShape", onnx_op("Reshape", onnx_op("Size", x), ints([1], updates, "one")),
                    value=np.zeros(1, updates.known_dtype.base_dtype.storage))
    total = onnx_op("ScatterElements", zeros, onnx_op("Reshape", indices, flat), onnx_op("Reshape", updates, flat),
                    axis=0, reduction="add")
    return onnx_op("Reshape", total, shape_of(x))


def index_adjoint(x: Tensor, g: Tensor, select: Callable[[Tensor], Tensor]) -> Tensor:
    """The gradient of an op that only moves, copies or drops ``x``'s elements (Slice, Tile,
    Compress, GatherND, ...): ``select`` is the op applied to another tensor in x's place; it is
    applied to x's flat indices, and ``g`` is added back where each output element came from."""
    return scatter_add_flat(x, select(iota_like(x)), g)
