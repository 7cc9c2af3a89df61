"""Static shape inference and constant folding for shape computations.

A shape function takes an :class:`InferenceContext` and returns the output shapes
(a TensorShape or anything ``TensorShape()`` accepts; a list of them for several
outputs). It raises :class:`~gradreg.errors.ShapeError` for incompatible inputs.

:func:`constant_value` evaluates a tensor at graph-construction time when it can:
Const, Shape/Size/Rank of statically known shapes, and ops marked ``foldable`` in
the op table whose inputs are themselves constant (run with their NumPy kernel).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from gradreg.errors import GradregError, ShapeError, describe_node
from gradreg.model import catalog
from gradreg.model.shapes import TensorShape

if TYPE_CHECKING:
    from gradreg.model.dtypes import DType
    from gradreg.model.graph import Operation, Tensor

_FOLD_ELEMENT_LIMIT = 100_000
NOT_COMPUTED = object()   # a Tensor's constant-value memo before constant_value has looked


class InferenceContext:
    """What a shape function sees of the node being inferred."""

    __slots__ = ("op",)

    def __init__(self, op: Operation):
        self.op = op

    @property
    def name(self) -> str:
        return str(self.op.name)

    @property
    def num_inputs(self) -> int:
        return len(self.op.inputs)

    @property
    def num_outputs(self) -> int:
        return len(self.op.outputs)

    def input_shape(self, i: int) -> TensorShape:
        shape: TensorShape = self.op.inputs[i].shape
        return shape

    @property
    def input_shapes(self) -> list[TensorShape]:
        return [t.shape for t in self.op.inputs]

    def input_dtype(self, i: int) -> DType | None:
        return self.op.inputs[i].dtype

    def output_dtype(self, i: int = 0) -> DType | None:
        return self.op.outputs[i].dtype

    def attr(self, name: str) -> Any:
        return self.op.get_attr(name)

    def known_attr(self, name: str) -> Any:
        """The attr's Python value if it is at hand without decoding (set by a builder), else None."""
        return self.op.cached_attr(name)

    def tensor_attr_proto(self, name: str) -> Any:
        """A tensor attr as its TensorProto, undecoded (None if absent)."""
        return self.op.tensor_attr_proto(name)

    def input_value(self, i: int) -> np.ndarray | None:
        """The input's value if it is known while building the graph, else None."""
        return constant_value(self.op.inputs[i])

    def input_as_shape(self, i: int) -> TensorShape:
        """Read input ``i`` as a shape vector (as Reshape/Fill do): known entries become dims,
        -1 and unknown entries become unknown dims; unknown rank if even its length is unknown."""
        return partial_shape_value(self.op.inputs[i])

    def error(self, message: str) -> ShapeError:
        return ShapeError(f"{describe_node(self.op.name, self.op.type)}: {message}")


_SHAPE_FNS: dict[str, Any] = {}
_UNRESOLVED = object()
_MAX_DIM = 2**63 - 1


def infer_shapes(op: Operation) -> None:
    """Set the static shape of each output of ``op`` from its shape function (for an op without
    outputs, the shape function only validates its inputs)."""
    fn = _SHAPE_FNS.get(op.type, _UNRESOLVED)
    if fn is _UNRESOLVED:
        fn = catalog.current().shape_function(op.type, op.definition)
        if op.definition is not None and not op.definition.is_library_function:
            _SHAPE_FNS[op.type] = fn     # plugin op types: resolved once per process
    if fn is None:
        return
    try:
        result = fn(InferenceContext(op))
    except ShapeError as exc:
        text = str(exc)
        if op.name not in text:
            text = f"{describe_node(op.name, op.type)}: {text}"
        raise ShapeError(text) from None
    except GradregError:
        raise
    except Exception as exc:   # a shape function bug must not hide which node it was on
        raise ShapeError(f"{describe_node(op.name, op.type)}: shape inference failed: "
                         f"{type(exc).__name__}: {exc}") from exc
    if result is not None and op.outputs:
        _set_output_shapes(op, result)


def _set_output_shapes(op: Operation, result: Any) -> None:
    # One output: the result is its shape. Several: a sequence of shapes. A list-valued output
    # arg with one element may also return [TensorShape].
    if type(result) is TensorShape and result.dims is None and len(op.outputs) == 1:
        op.outputs[0].set_static_shape(result)      # the commonest case: an unknown shape
        return
    if isinstance(result, (list, tuple)) and (
            len(op.outputs) != 1 or (result and isinstance(result[0], TensorShape))):
        shapes = result
    else:
        shapes = (result,)
    if len(shapes) != len(op.outputs):
        raise ShapeError(f"{describe_node(op.name, op.type)}: shape function returned {len(shapes)} "
                         f"shapes for {len(op.outputs)} outputs")
    for t, s in zip(op.outputs, shapes):
        if s is not None:
            shape = s if type(s) is TensorShape else TensorShape(s)
            if shape.dims is not None and any(d is not None and d > _MAX_DIM for d in shape.dims):
                # A dimension past int64 (an overflowing product of attrs or constants) cannot be a
                # tensor's: TensorFlow refuses it too; here, not later when a gradient needs it.
                raise ShapeError(f"{describe_node(op.name, op.type)}: output {t.value_index} would have "
                                 f"shape {list(shape.dims)}, a dimension past int64")
            t.set_static_shape(shape)


def constant_value(tensor: Tensor) -> np.ndarray[Any, Any] | None:
    """The tensor's value if it is known while building the graph (memoized), else None."""
    cached: np.ndarray[Any, Any] | None = tensor.memoized_value()
    if cached is not NOT_COMPUTED:
        return cached
    try:
        value = _evaluate(tensor)
    except GradregError:
        value = None
    tensor.memoize_value(value)
    return value


def _evaluate(tensor: Tensor) -> np.ndarray[Any, Any] | None:
    op = tensor.op
    kind = op.type
    if kind == "Const":
        value: np.ndarray[Any, Any] = op.get_attr("value")
        return value
    if kind in ("Shape", "Size", "Rank", "ShapeN"):
        source = op.inputs[tensor.value_index if kind == "ShapeN" else 0].shape
        out_type = tensor.dtype.np if tensor.dtype is not None else None
        if kind == "Rank":
            return None if source.rank is None else np.array(source.rank, dtype=np.int32)
        if not source.is_fully_defined():
            return None
        if kind == "Size":
            return np.array(source.num_elements(), dtype=out_type)
        return np.array(source.dims, dtype=out_type)
    definition = op.definition
    if definition is None or not getattr(definition, "foldable", False) or not op.inputs:
        return None
    if op.control_inputs:
        return None
    values = []
    total = 0
    for t in op.inputs:
        v = constant_value(t)
        if v is None:
            return None
        total += np.size(v)
        if total > _FOLD_ELEMENT_LIMIT:
            return None
        values.append(v)
    result = catalog.current().fold_constant(op, values)
    if result is None:
        return None
    out = result[tensor.value_index] if len(op.outputs) > 1 else result
    out = np.asarray(out)
    return out if out.size <= _FOLD_ELEMENT_LIMIT else None


def partial_shape_value(tensor: Tensor) -> TensorShape:
    """A shape-vector tensor read as a TensorShape with whatever is statically known."""
    value = constant_value(tensor)
    if value is not None:
        if value.ndim == 0:
            return TensorShape(None)   # a scalar (TensorFlow writes -1) means "unknown rank"
        return TensorShape([None if int(d) < 0 else int(d) for d in value.reshape(-1)])
    op = tensor.op
    if op.type == "Pack" and op.get_attr("axis") == 0:
        return TensorShape([_packed_dim(t) for t in op.inputs])
    if op.type == "Shape":
        return op.inputs[0].shape
    if op.type in ("Identity", "Cast"):
        return partial_shape_value(op.inputs[0])
    if op.type == "StridedSlice" and op.inputs[0].op.type == "Shape":
        picked = _dims_of_shape_slice(op)
        if picked is not None:
            return picked
    if op.type == "ConcatV2":
        axis = constant_value(op.inputs[-1])
        if axis is not None and int(axis) in (0, -1):
            out = TensorShape(())
            for t in op.inputs[:-1]:
                out = out.concatenate(partial_shape_value(t))
            return out
    own = tensor.shape
    if own.rank == 1 and own[0] is not None:
        return TensorShape([None] * own[0])
    return TensorShape(None)


def _packed_dim(t: Tensor) -> int | None:
    """One entry of a packed shape vector: a constant, or a static dim sliced out of a Shape."""
    v = constant_value(t)
    if v is None and t.op.type == "StridedSlice" and t.op.inputs[0].op.type == "Shape":
        picked = _dims_of_shape_slice(t.op)
        return picked[0] if picked is not None and picked.rank == 1 else None
    return None if v is None or np.size(v) != 1 or int(v) < 0 else int(v)


def _dims_of_shape_slice(op: Operation) -> TensorShape | None:
    """``shape(x)[a:b]`` or ``shape(x)[i]`` (as a 1-element shape) with constant bounds: the
    static dims of x it selects, even when other dims of x are unknown."""
    source = op.inputs[0].op.inputs[0].shape
    if source.rank is None:
        return None
    bounds = [constant_value(t) for t in op.inputs[1:4]]
    if any(b is None or np.size(b) != 1 for b in bounds):
        return None
    if op.get_attr("ellipsis_mask") or op.get_attr("new_axis_mask"):
        return None
    begin, end, stride = (int(np.asarray(b).reshape(-1)[0]) for b in bounds)
    dims = source.as_list()
    if op.get_attr("shrink_axis_mask") & 1:
        index = begin + len(dims) if begin < 0 else begin
        return TensorShape([dims[index]]) if 0 <= index < len(dims) else None
    start = None if op.get_attr("begin_mask") & 1 else begin
    stop = None if op.get_attr("end_mask") & 1 else end
    return TensorShape(dims[slice(start, stop, stride)])
