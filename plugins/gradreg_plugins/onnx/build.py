"""Building onnx-family nodes from Python: what gradient rules (and users) call.

    >>> y = onnx_op("Gemm", a, b, None, transB=1)            # None: an absent optional input
    >>> values, indices = onnx_op("TopK", x, k, outputs=2)    # several outputs
    >>> parts = onnx_op("Split", x, sizes, outputs=3)         # a variadic output
    >>> z = onnx_op("Cast", x, to=dtypes.float64)             # a DType where ONNX wants a type code

Inputs are the ONNX op's inputs by position; Python numbers and arrays become Consts of the
type the op wants there (the type of the tensor bound to the same type parameter). The count
and type attrs of :mod:`schemas` are derived; only ONNX attributes are passed.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gradreg.build.builders import constant, graph_of
from gradreg.errors import GraphError
from gradreg.model import dtypes
from gradreg.model.dtypes import DType
from gradreg.model.graph import Tensor
from gradreg_plugins.onnx.nodes import (
    argument_attrs,
    dtype_of_element_type,
    element_dtype,
    onnx_element_type,
    tensor_dtype,
)
from gradreg_plugins.onnx.schemas import CAPTURED, schema_for

__all__ = ["onnx_op", "const_like", "shape_of", "ints"]


def onnx_op(op_type: str, *inputs: Any, outputs: int | Sequence[bool] | None = None, name: str | None = None,
            captured: Sequence[Tensor] = (), output_types: Sequence[DType] | None = None, **attributes: Any) -> Any:
    """Add an ONNX node ``op_type`` ("MatMul", or "onnx.ml::X" for another domain) and return its
    output (a tuple when it has several). ``outputs`` is the number of outputs (for a variadic
    output), or which of the schema's outputs are present; by default, every non-optional one.
    An op with subgraphs (If, Loop, Scan) takes the outer values its functions use as
    ``captured`` and the types of its variadic outputs as ``output_types``."""
    full = op_type if "::" in op_type else f"onnx::{op_type}"
    schema = schema_for(full)
    if schema is None:
        raise GraphError(f"onnx_op: unknown ONNX op '{op_type}'")
    graph = graph_of(list(inputs))
    tensors = _input_tensors(schema, list(inputs), graph)
    present = _output_presence(schema, outputs)
    attrs = argument_attrs(schema, tensors, present, lambda v: v.dtype if isinstance(v, Tensor) else None)
    for key, value in attributes.items():
        attrs[key] = _attr_value(schema, key, value)
    _output_types(schema, attrs)
    _inferred_output_types(schema, attrs, tensors, present)
    last = schema.outputs[-1] if schema.outputs else None
    if output_types is not None and last is not None and last.types_attr:
        attrs[last.types_attr] = [dtypes.as_dtype(t) for t in output_types]
    flat = [t for t in tensors if t is not None]
    if schema.has_subgraphs:
        flat += list(captured)
        attrs[f"T_{CAPTURED}"] = [tensor_dtype(t).base_dtype for t in captured]
    op = graph.create_op(full, flat, attrs, name=name or schema.name)
    return op.outputs[0] if len(op.outputs) == 1 else tuple(op.outputs)


def _input_tensors(schema, values: list, graph) -> list:
    """The inputs as Tensors: constants take the dtype of a tensor of the same type parameter."""
    bound: dict[str, DType] = {}
    params = []
    for i, value in enumerate(values):
        p = schema.inputs[min(i, len(schema.inputs) - 1)]
        params.append(p)
        if isinstance(value, Tensor) and p.fixed_dtype is None and value.dtype is not None:
            bound.setdefault(p.type, value.dtype.base_dtype)
    out = []
    for value, p in zip(values, params):
        if value is None or isinstance(value, Tensor):
            out.append(value)
            continue
        dtype = p.fixed_dtype or bound.get(p.type)
        with graph.as_default():
            out.append(constant(np.asarray(value, dtype=dtype.storage if dtype is not None else None),
                                name="const"))
    return out


def _output_presence(schema, outputs: Any) -> list:
    if isinstance(outputs, int):
        if schema.outputs and schema.outputs[-1].option == "variadic":
            fixed = len(schema.outputs) - 1
            return [True] * max(outputs, fixed)
        return [True if i < outputs else None for i in range(len(schema.outputs))]
    if outputs is not None:
        return [True if o else None for o in outputs]
    return [True if p.option != "optional" else None for p in schema.outputs]


def _attr_value(schema, key: str, value: Any) -> Any:
    """ONNX attribute values in the op's attr form: DTypes where ONNX has a type code (Cast's
    ``to``), str -> bytes; type attrs (``T2``) are passed as DTypes."""
    if key not in schema.attributes:
        return dtypes.as_dtype(value) if key in schema.type_params else value
    kind = schema.attributes[key][0]
    if isinstance(value, DType) or (isinstance(value, type) and issubclass(value, np.generic)):
        return onnx_element_type(dtypes.as_dtype(value))
    if kind == "STRING" and isinstance(value, str):
        return value.encode()
    if kind == "STRINGS":
        return [v.encode() if isinstance(v, str) else v for v in value]
    if kind in ("INTS", "FLOATS"):
        return [float(v) if kind == "FLOATS" else int(v) for v in value]
    return value


def _output_types(schema, attrs: dict) -> None:
    """Output-only type parameters decided by an attribute (Cast's ``to``, ConstantOfShape's value)."""
    for p in schema.outputs:
        if p.fixed_dtype is not None or p.types_attr or p.type in attrs:
            continue
        if "to" in attrs and isinstance(attrs["to"], int):
            attrs[p.type] = dtype_of_element_type(attrs["to"])
        elif "dtype" in attrs and isinstance(attrs["dtype"], int):
            attrs[p.type] = dtype_of_element_type(attrs["dtype"])
        elif isinstance(attrs.get("value"), np.ndarray):
            attrs[p.type] = dtypes.as_dtype(attrs["value"].dtype)


_ELEMENT_OF_FIRST_INPUT = ("SequenceAt", "ConcatFromSequence", "OptionalGetElement")


def _inferred_output_types(schema, attrs: dict, tensors: list, present: list) -> None:
    """Output type parameters nothing above decided (EyeLike's, DequantizeLinear's): from onnx's
    type inference of the node (when the onnx package is there)."""
    wanted = {p.type for p in schema.outputs if p.fixed_dtype is None and not p.types_attr and p.type not in attrs}
    if not wanted:
        return
    if schema.name in _ELEMENT_OF_FIRST_INPUT and tensors and tensors[0] is not None:
        found = element_dtype(tensors[0])   # a sequence's (optional's) element: what made it says its type
        if found is not None:
            attrs[schema.outputs[0].type] = found.base_dtype
            return
    try:
        # an optional dependency: without the onnx package, these types stay unknown
        from onnx import helper

        from gradreg_plugins.onnx.protos import attribute_proto, infer_node_types
    except ImportError:
        return
    inputs = [f"in{i}" if t is not None else "" for i, t in enumerate(tensors)]
    outputs = [f"out{i}" if p else "" for i, p in enumerate(present)]
    node = helper.make_node(schema.name, inputs, outputs, domain=schema.domain)
    for name, (kind, _) in schema.attributes.items():
        if name in attrs and attrs[name] is not None and kind not in ("GRAPH", "GRAPHS"):
            node.attribute.append(attribute_proto(name, kind, attrs[name]))
    inferred = infer_node_types(node, tensors, schema)
    for i, p in enumerate(schema.outputs[:len(present)]):
        found = inferred.get(f"out{i}")
        if p.type in wanted and found is not None:
            attrs[p.type] = found.base_dtype
            wanted.discard(p.type)


def const_like(value: Any, like: Tensor, name: str = "const") -> Tensor:
    """A Const of ``like``'s dtype (a scalar unless ``value`` has a shape)."""
    with like.graph.as_default():
        return constant(np.asarray(value, dtype=tensor_dtype(like).base_dtype.storage), name=name)


def ints(values: Sequence[int], like: Tensor, name: str = "ints") -> Tensor:
    """An int64 vector Const in ``like``'s graph (axes, shapes, perms for ONNX inputs)."""
    with like.graph.as_default():
        return constant(np.asarray(list(values), dtype=np.int64), name=name)


def shape_of(x: Tensor) -> Tensor:
    """``Shape(x)`` as an int64 vector: a Const when x's shape is fully known (as TensorFlow's
    rules use the static shape), else a Shape node."""
    if x.shape.is_fully_defined():
        return ints([int(d) for d in x.shape.as_list() if d is not None], x, "shape")
    return onnx_op("Shape", x)
