"""What the built-in families' gradient rules share (array, math, nn, sparse, ...): the public
helpers a rule of TensorFlow ops is written with, beside gradreg.autodiff.rules (which any
plugin may use: ``dense``, ``ints``, ``reshape_like``, ``shape_vector``).

    from gradreg_plugins.math import family
    from gradreg_plugins.rule_helpers import conj, dense_gradients, unbroadcast

    @family.gradient("Mul")
    @dense_gradients
    def _mul_grad(op, grad):
        x, y = op.inputs
        return unbroadcast(x, y, grad * conj(y), conj(x) * grad)

Rules are formulas over Tensors (``a * b``, ``-g``, ``g / x``) and the families' builders; these
helpers cover what an operator cannot say: conjugating only complex values, summing a broadcast
gradient back to its operand's shape (TensorFlow's ``_ReduceGradientArgs``), and a reduction's
gradient broadcast back over the reduced axes (:class:`Reduction`), which rows of an overwriting
scatter landed (:func:`landed_indices`). Whatever the static shapes
tell is computed in Python and written as Consts; Shape-based nodes are the fallback.

The onnx family's rules build ONNX ops instead: their helpers are ``gradreg_plugins.onnx.grads.common``.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op, constant
from gradreg.model import dtypes
from gradreg.model.graph import Operation, Tensor
from gradreg.model.shape_inference import constant_value
from gradreg.model.shapes import TensorShape

__all__ = ["FLOATING", "Reduction", "broadcast_axes", "conj", "dense_gradients", "is_floating", "landed_indices",
           "scalar", "unbroadcast", "unbroadcast_batch", "unbroadcast_to"]

# The dtypes gradients flow through (real and complex floating point).
FLOATING = frozenset({dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64,
                      dtypes.complex64, dtypes.complex128})


def dense_gradients(rule: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator (under ``@family.gradient``): the rule sees IndexedSlices gradients made dense.
    A rule that can pass IndexedSlices on (Add, Neg, Cast, ...) goes without it."""
    @functools.wraps(rule)
    def with_dense_gradients(op: Operation, *grads: Any) -> Any:
        return rule(op, *(rules.dense(g) for g in grads))
    return with_dense_gradients


def conj(t: Tensor) -> Tensor:
    """The complex conjugate of ``t``; ``t`` itself when it is real."""
    return apply_op("Conj", t) if t.known_dtype.is_complex else t


def scalar(value: Any, like: Any) -> Tensor:
    """A scalar Const of the dtype of ``like`` (a Tensor or a DType)."""
    dtype = like if isinstance(like, dtypes.DType) else like.known_dtype.base_dtype
    return constant(value, dtype)


def is_floating(t: Tensor) -> bool:
    """Whether ``t`` is a real or complex floating-point tensor (one gradients flow through)."""
    return t.known_dtype.base_dtype in FLOATING


def _ints(values: Any) -> Tensor:
    return rules.ints(values, dtypes.int32)


# -- summing a broadcast gradient back ----------------------------------------------------------

def broadcast_axes(x: TensorShape, y: TensorShape) -> tuple[list[int], list[int]] | None:
    """The axes (of the broadcast shape) along which the gradients of operands shaped ``x`` and
    ``y`` must be summed, as a pair of lists; None when only the run time can tell (an unknown
    dim against anything but 1). TensorFlow's _InferGradientReductionAxes."""
    if x.rank is None or y.rank is None:
        return None
    rank = max(x.rank, y.rank)
    xd = [1] * (rank - x.rank) + x.as_list()
    yd = [1] * (rank - y.rank) + y.as_list()
    x_axes, y_axes = [], []
    for axis, (a, b) in enumerate(zip(xd, yd)):
        if a == 1 and b != 1:
            x_axes.append(axis)
        elif b == 1 and a != 1:
            y_axes.append(axis)
        elif a is None or b is None:
            return None
    return x_axes, y_axes


def _sum_to_static(grad: Any, t: Tensor, axes: list[int], rank: int) -> Any:
    """``grad`` (of rank ``rank``, a broadcast of ``t``) summed back to ``t``'s shape along
    ``axes`` and the leading axes ``t`` lacks. Without any, ``grad`` passes (even sparse)."""
    if grad is None:
        return None
    lead = rank - len(t.shape.as_list())
    if not axes and lead == 0:
        return grad
    grad = rules.dense(grad)
    all_axes = sorted(set(range(lead)) | set(axes))
    if all(a < lead for a in all_axes):
        return apply_op("Sum", grad, _ints(all_axes))
    summed = apply_op("Sum", grad, _ints(all_axes), keep_dims=True)
    if lead == 0:
        return summed
    if t.shape.is_fully_defined():
        return apply_op("Reshape", summed, _ints(t.shape.dims))
    return apply_op("Squeeze", summed, squeeze_dims=list(range(lead)))


def _sum_to_dynamic(grad: Any, axes: Tensor, shape: Tensor) -> Any:
    if grad is None:
        return None
    return apply_op("Reshape", apply_op("Sum", rules.dense(grad), axes, keep_dims=True), shape)


def unbroadcast(x: Tensor, y: Tensor, gx: Any, gy: Any) -> tuple[Any, Any]:
    """The gradients ``gx``, ``gy`` (shaped like the broadcast of ``x`` and ``y``; None for
    none) summed back to the operands' shapes. TensorFlow's _ReduceGradientArgs."""
    if gx is None and gy is None:
        return gx, gy
    axes = broadcast_axes(x.shape, y.shape)
    if axes is not None:
        rank = max(len(x.shape.as_list()), len(y.shape.as_list()))
        return _sum_to_static(gx, x, axes[0], rank), _sum_to_static(gy, y, axes[1], rank)
    sx, sy = apply_op("Shape", x), apply_op("Shape", y)
    rx, ry = apply_op("BroadcastGradientArgs", sx, sy)
    return _sum_to_dynamic(gx, rx, sx), _sum_to_dynamic(gy, ry, sy)


def unbroadcast_to(x: Tensor, out: Tensor, gx: Any) -> Any:
    """``gx`` (shaped like ``out``, a broadcast of ``x`` and other operands) summed to ``x``."""
    return unbroadcast(x, out, gx, None)[0]


def unbroadcast_batch(x: Tensor, y: Tensor, gx: Any, gy: Any) -> tuple[Any, Any]:
    """Matrix-product gradients summed over the batch dims (all but the last two) their operand
    was broadcast along."""
    xs, ys = x.shape, y.shape
    if xs.rank is not None and ys.rank is not None:
        axes = broadcast_axes(xs[:-2], ys[:-2])
        if axes is not None:
            rank = max(xs.rank, ys.rank)
            return _sum_to_static(gx, x, axes[0], rank), _sum_to_static(gy, y, axes[1], rank)
    sx, sy = apply_op("Shape", x), apply_op("Shape", y)
    batch = [apply_op("StridedSlice", s, _ints([0]), _ints([-2]), _ints([1])) for s in (sx, sy)]
    rx, ry = apply_op("BroadcastGradientArgs", *batch)
    return _sum_to_dynamic(gx, rx, sx), _sum_to_dynamic(gy, ry, sy)


# -- scatters --------------------------------------------------------------------------------------

def landed_indices(indices: Tensor, prefix_shape: Tensor | None, policy: bytes = b"") -> Tensor | None:
    """For a scatter that overwrites (the last write to a row lands, as on TensorFlow's CPU): its
    indices [..., depth] with the rows a later write overwrote replaced by -1, so that GatherNd
    with the IGNORE policy reads zeros for them. None when no row can repeat.

    With constant indices this is worked out while building the graph. Otherwise
    ``prefix_shape`` (the shape of the indexed dims, a vector of the indices' type) is filled
    with -1, each write's ordinal is scattered like the writes, and a write landed where its
    ordinal is the one read back."""
    known = constant_value(indices)
    index_dtype = dtypes.int64 if indices.known_dtype.base_dtype is dtypes.int64 else dtypes.int32
    if known is not None:
        known = np.asarray(known, dtype=np.int64)
        rows = known.reshape(-1, known.shape[-1]) if known.ndim else known.reshape(1, 0)
        if rows.shape[0] < 2 or np.unique(rows, axis=0).shape[0] == rows.shape[0]:
            return None
        _, first_in_reversed = np.unique(rows[::-1], axis=0, return_index=True)
        landed = np.zeros(rows.shape[0], bool)
        landed[rows.shape[0] - 1 - first_in_reversed] = True
        return constant(np.where(landed[:, None], rows, -1).reshape(known.shape).astype(index_dtype.np), index_dtype)
    if indices.known_dtype.base_dtype is not index_dtype:
        indices = apply_op("Cast", indices, DstT=index_dtype)
    assert prefix_shape is not None, "run-time indices need the shape of the indexed dims"
    batch = apply_op("StridedSlice", apply_op("Shape", indices, out_type=index_dtype), [0], [-1], [1], begin_mask=1)
    count = apply_op("Prod", batch, rules.ints([0]))
    ordinals = apply_op("Reshape", apply_op("Range", rules.ints(0, index_dtype), count, rules.ints(1, index_dtype)),
                        batch)
    unset = apply_op("Fill", prefix_shape, rules.ints(-1, index_dtype))
    written = apply_op("TensorScatterUpdate", unset, indices, ordinals, bad_indices_policy=policy)
    landed = apply_op("Equal", apply_op("GatherNd", written, indices, bad_indices_policy=policy), ordinals)
    return apply_op("SelectV2", apply_op("ExpandDims", landed, rules.ints(-1)), indices, rules.ints(-1, index_dtype))


# -- reductions ---------------------------------------------------------------------------------

class Reduction:
    """What a reduction op's gradient needs to know about its input and axes: the rank and the
    sorted non-negative axes when both are static (``static``), else graph-computed values."""

    def __init__(self, op: Operation):
        self.x: Tensor = op.inputs[0]
        self.axes_tensor: Tensor = op.inputs[1]
        self.keep_dims = bool(op.get_attr("keep_dims"))
        rank = self.x.shape.rank
        axes = constant_value(self.axes_tensor)
        self.static = rank is not None and axes is not None
        self._kept_shape: Tensor | None = None
        # With ``static``: the input's rank and dims (None where unknown), the reduced axes sorted.
        self.rank: int = rank or 0
        self.axes: list[int] = []
        self.dims: list[Any] = []
        if rank is not None and axes is not None:
            self.axes = sorted({int(a) % rank for a in np.asarray(axes).reshape(-1)}) if rank else []
            self.dims = list(self.x.shape.dims or ())

    def kept_dims(self, t: Tensor) -> Tensor:
        """``t``, shaped like the op's output, reshaped as if keep_dims were set."""
        if self.keep_dims:
            return t
        if not self.static:
            if self._kept_shape is None:
                self._kept_shape = self._dynamic_kept_shape()
            return apply_op("Reshape", t, self._kept_shape)
        if not self.axes:
            return t
        target = rules.static_reshape_dims([1 if i in self.axes else d for i, d in enumerate(self.dims)])
        if target is not None:
            return apply_op("Reshape", t, _ints(target))
        for axis in self.axes:
            t = apply_op("ExpandDims", t, _ints(axis))
        return t

    def _dynamic_kept_shape(self) -> Tensor:
        """Shape(x) with 1 at the reduced axes, computed in the graph."""
        shape = apply_op("Shape", self.x)
        rank = apply_op("Rank", self.x)
        axes = apply_op("FloorMod", apply_op("Reshape", self._int32_axes(), _ints([-1])), rank)
        positions = apply_op("ExpandDims", apply_op("Range", _ints(0), rank, _ints(1)), _ints(1))
        reduced = apply_op("Any", apply_op("Equal", positions, apply_op("ExpandDims", axes, _ints(0))), _ints(1))
        return apply_op("SelectV2", reduced, _ints(1), shape)

    def _int32_axes(self) -> Tensor:
        axes = self.axes_tensor
        return axes if axes.known_dtype.base_dtype is dtypes.int32 else apply_op("Cast", axes, DstT=dtypes.int32)

    def normalized_axes(self) -> Tensor:
        """The reduced axes as a non-negative int32 vector."""
        if self.static:
            return _ints(self.axes)
        rank = apply_op("Rank", self.x)
        return apply_op("FloorMod", apply_op("Reshape", self._int32_axes(), _ints([-1])), rank)

    def expand(self, t: Tensor) -> Tensor:
        """``t``, shaped like the op's output, broadcast to the input's shape. When the reduced
        axes lead, right-aligned broadcasting puts ``t`` in place without a reshape."""
        if self.static and self.axes and not self.keep_dims and self.axes == list(range(len(self.axes))):
            return apply_op("BroadcastTo", t, rules.shape_vector(self.x))
        return self.broadcast(self.kept_dims(t))

    def broadcast(self, t: Tensor) -> Tensor:
        """``t``, shaped with kept dims, broadcast to the input's shape."""
        if self.static:
            if not self.axes:
                return t
            if all(self.dims[a] is not None for a in self.axes):
                return apply_op("Tile", t, _ints([self.dims[i] if i in self.axes else 1 for i in range(self.rank)]))
        return apply_op("BroadcastTo", t, apply_op("Shape", self.x))

    def reduced_size(self) -> int | None:
        """The number of elements each output element reduces, when static."""
        if self.static and all(self.dims[a] is not None for a in self.axes):
            return int(np.prod([self.dims[a] for a in self.axes], dtype=np.int64))
        return None
