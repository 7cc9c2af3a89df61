"""ONNX function bodies: an op whose schema defines it as a function of other ops (Selu,
GroupNormalization, SoftmaxCrossEntropyLoss, ...) instantiated as those ops.

:func:`function_body` gives the op's FunctionProto (the schema's own, or the one it builds for
the node's attributes and input types), brought to the family's opset; :func:`expand_function`
builds its nodes in the op's graph on given inputs. The gradient of an op without a rule of
its own is the gradient of its body (:mod:`gradreg_plugins.onnx.grads.functions`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx
import onnx.defs

from gradreg.errors import GradientError, describe_node
from gradreg.model.graph import Operation, Tensor
from gradreg_plugins.onnx.importer import Importer, bind_attributes
from gradreg_plugins.onnx.nodes import attribute_values, onnx_inputs, schema_of
from gradreg_plugins.onnx.opset import converted_function
from gradreg_plugins.onnx.protos import attribute_proto, node_proto, type_proto
from gradreg_plugins.onnx.schemas import OPSET_VERSIONS

__all__ = ["expand_function", "function_body", "has_function_body"]


def has_function_body(op_type_schema: Any) -> bool:
    """Whether an OnnxSchema's op is defined by a function body."""
    return bool(op_type_schema.has_function)


def function_body(op: Operation, inputs: Sequence[Tensor | None] | None = None) -> Any:
    """The op's FunctionProto at the family's opset, for its attributes and (context-dependent
    bodies) the types of ``inputs`` (default: its own, by ONNX position). GradientError if it
    has none."""
    schema = schema_of(op)
    where = describe_node(op.name, op.type)
    version = OPSET_VERSIONS[schema.domain]
    onnx_schema: Any = onnx.defs.get_schema(schema.name, version, schema.domain)
    if onnx_schema.has_function:
        body = onnx_schema.function_body
    elif onnx_schema.has_context_dependent_function:
        values = list(inputs) if inputs is not None else onnx_inputs(op)
        names = [f"in{i}" if t is not None else "" for i, t in enumerate(values)]
        node = node_proto(op, [n for n in names if n] + [f"captured{i}" for i in range(len(op.inputs))],
                          [f"out{i}" for i in range(len(op.outputs))])
        types = [type_proto(t.dtype, t.shape).SerializeToString() if t is not None else
                 onnx.TypeProto().SerializeToString() for t in values]
        try:
            built = onnx_schema.get_context_dependent_function(node.SerializeToString(), types)
        except Exception as exc:
            raise GradientError(f"{where}: onnx cannot build the op's function body: {exc}") from None
        body = onnx.FunctionProto.FromString(built)
    else:
        raise GradientError(f"{where}: the op's ONNX schema defines no function body")
    return converted_function(body, OPSET_VERSIONS[""], where)


def expand_function(op: Operation, inputs: Sequence[Tensor | None]) -> list[Tensor | None]:
    """Build the op's function body in its graph on ``inputs`` (by ONNX input position, None for
    an absent one); returns the body's outputs by ONNX output position."""
    body = function_body(op, inputs)
    where = f"the function body of {describe_node(op.name, op.type)}"
    schema = schema_of(op)
    attrs: dict[str, Any] = {a.name: a for a in body.attribute_proto}
    given = attribute_values(op)
    for name, (kind, _) in schema.attributes.items():
        # attributes left at their defaults are not on the node: the body's references need them too
        value = given[name] if name in given else (op.get_attr(name) if op.has_attr(name) else None)
        if value is None and name not in given:
            value = op.definition.attr_specs[name].default if name in op.definition.attr_specs else None
        if value is not None and kind not in ("GRAPH", "GRAPHS"):
            attrs[name] = attribute_proto(name, kind, value)
    bound = {name: t for name, t in zip(body.input, inputs) if t is not None}
    absent = {name for name, t in zip(body.input, inputs) if t is None} | set(body.input[len(inputs):])
    importer = Importer.inline(op.graph, where)
    scope = importer.scope(bound, where)
    with op.graph.as_default(), op.graph.name_scope(op.name.split("/")[-1] + "_body"):
        for node in body.node:
            if absent & set(node.input):
                node = _without(node, absent)
            importer.convert_node(bind_attributes(node, attrs, where), scope)
    return [scope.values.get(name) for name in body.output]


def _without(node: Any, absent: set[str]) -> Any:
    """A copy of ``node`` whose inputs naming an absent formal input are empty (ONNX's "not given")."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    del copy.input[:]
    copy.input.extend("" if name in absent else name for name in node.input)
    return copy
