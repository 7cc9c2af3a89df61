"""The onnx protos of onnx-family ops (needs the onnx package): the NodeProto an Operation stands
for (:func:`node_proto`), which kernels hand to ``onnx.reference`` and the exporter writes, its
AttributeProtos, the TypeProto of a tensor, and ONNX's type inference of one node.

The family's other modules import this one where they need the onnx package anyway (the
importer, the exporter, the reference kernels), or when they first need it (the shape functions
and ``onnx_op``, which do without onnx).
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import onnx
import onnx.defs
import onnx.shape_inference
from onnx import helper, numpy_helper

from gradreg.errors import GradregError, GraphError
from gradreg.model.dtypes import DType
from gradreg_plugins.onnx.nodes import (
    attribute_values,
    dtype_of_type,
    input_layout,
    onnx_element_type,
    output_layout,
    schema_of,
    to_onnx_array,
)
from gradreg_plugins.onnx.schemas import OPSET_VERSIONS, split_op_type

__all__ = ["attribute_proto", "infer_node_types", "node_proto", "type_proto"]


def attribute_proto(name: str, kind: str, value: Any, graph_for: Any = None):
    """An onnx.AttributeProto for attr ``name`` of ONNX type ``kind``; ``graph_for(func)`` turns a
    function attr into a GraphProto (required for GRAPH attributes)."""
    A = onnx.AttributeProto
    if kind in ("GRAPH", "GRAPHS"):
        if graph_for is None:
            raise GraphError(f"attribute '{name}' holds a subgraph, which needs a graph converter")
        if kind == "GRAPH":
            return helper.make_attribute(name, graph_for(value))
        return helper.make_attribute(name, [graph_for(v) for v in value], attr_type=A.GRAPHS)
    if kind in ("TENSOR", "SPARSE_TENSOR"):
        return helper.make_attribute(name, numpy_helper.from_array(to_onnx_array(value)))
    if kind == "TENSORS":
        return helper.make_attribute(name, [numpy_helper.from_array(to_onnx_array(v)) for v in value],
                                     attr_type=A.TENSORS)
    if kind == "TYPE_PROTO":
        return helper.make_attribute(name, onnx.TypeProto.FromString(value))
    if kind == "TYPE_PROTOS":
        return helper.make_attribute(name, [onnx.TypeProto.FromString(v) for v in value], attr_type=A.TYPE_PROTOS)
    codes = {"INT": A.INT, "FLOAT": A.FLOAT, "STRING": A.STRING, "INTS": A.INTS, "FLOATS": A.FLOATS,
             "STRINGS": A.STRINGS}
    return helper.make_attribute(name, value, attr_type=codes[kind])


def node_proto(op, input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None,
               name: str | None = None, graph_for: Any = None):
    """The onnx.NodeProto ``op`` stands for. Absent optional inputs are named ""; the default
    names are ``"in<i>"`` and ``"out<i>"``."""
    schema = schema_of(op)
    domain, op_name = split_op_type(op.type)
    layout_in = input_layout(op)
    layout_out = output_layout(op)
    if input_names is None:
        input_names = [f"in{i}" for i in range(len(op.inputs))]
    if output_names is None:
        output_names = [f"out{i}" for i in range(len(op.outputs))]
    ins = ["" if i is None else input_names[i] for i in layout_in]
    while ins and ins[-1] == "":
        ins.pop()
    outs = ["" if i is None else output_names[i] for i in layout_out]
    node = helper.make_node(op_name, ins, outs, name=name if name is not None else op.name, domain=domain)
    for attr_name, value in attribute_values(op).items():
        if value is None:
            continue
        node.attribute.append(attribute_proto(attr_name, schema.attributes[attr_name][0], value, graph_for))
    return node


def type_proto(dtype: DType | None, shape: Any = None):
    """An onnx.TypeProto of a tensor of ``dtype`` (None or variant: no type) and static ``shape``."""
    if dtype is None or dtype.kind == "v":
        return onnx.TypeProto()
    dims = None
    if shape is not None and shape.rank is not None:
        dims = [d if d is not None else None for d in shape.dims]
    return helper.make_tensor_type_proto(onnx_element_type(dtype), dims)


def infer_node_types(node, inputs: list, schema) -> dict[str, DType]:
    """ONNX's type inference of one node from its inputs' types: output name -> dtype."""
    types = {n: type_proto(t.dtype, t.shape) for n, t in zip(node.input, inputs) if n and t is not None}
    onnx_schema = onnx.defs.get_schema(schema.name, OPSET_VERSIONS[schema.domain], schema.domain)
    opsets = [helper.make_opsetid(d, v) for d, v in OPSET_VERSIONS.items()]
    try:
        inferred = onnx.shape_inference.infer_node_outputs(onnx_schema, node, types, opset_imports=opsets)
    except Exception:
        return {}
    out = {}
    for name, tp in inferred.items():
        with contextlib.suppress(GradregError):   # a type gradreg has no dtype for: unknown
            out[name] = dtype_of_type(tp, name)
    return out
