"""gradreg Graph -> ONNX ModelProto (used by :mod:`gradreg_plugins.onnx.format`).

The ops the outputs need are written in order: ``onnx::`` ops as the nodes they stand for,
Placeholders as graph inputs, Consts as initializers (Constant nodes inside subgraphs and
functions), calls of library functions as calls of model-local functions, and the
TensorFlow ops in :data:`gradreg_plugins.onnx.tf_ops.TF_OPS` (those ``gradients()`` adds, and
a core set for converting GraphDefs) as equivalent ONNX nodes. Subgraph attributes are rebuilt from their library
functions, their captured inputs referring to the enclosing graph's values by name.
Value names: a loaded model's own names where the graph still has them (aliases), else the
tensor names (``op:1``); every name is unique in the whole model.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.checker
import onnx.shape_inference
from onnx import helper, numpy_helper

from gradreg.autodiff.provenance import RULE_ATTR, RuleOrigin, rule_origins
from gradreg.build.functions import FunctionGraph, function_graph
from gradreg.errors import GraphError, describe_node
from gradreg.model.graph import Graph, Operation, Tensor
from gradreg.model.shape_inference import constant_value
from gradreg.model.traversal import needed_ops, topological_order
from gradreg_plugins.onnx.compact import compact
from gradreg_plugins.onnx.importer import NODE_NAME_ATTR, model_info
from gradreg_plugins.onnx.local_functions import gather_groups, gradient_scope
from gradreg_plugins.onnx.nodes import captured_inputs, to_onnx_array, upsample_as_resize
from gradreg_plugins.onnx.opset import first_lines, to_opset
from gradreg_plugins.onnx.protos import node_proto, type_proto
from gradreg_plugins.onnx.schemas import IR_VERSION, OPSET_VERSIONS, schema_for, split_op_type
from gradreg_plugins.onnx.tf_ops import TF_OPS

_NOT_OUTPUTS = frozenset({"Const", "Placeholder", "PlaceholderWithDefault", "NoOp"})


def output_pairs(graph: Graph, outputs: Any) -> list[tuple[str, Tensor]]:
    """(ONNX output name, tensor) for ``outputs``: a mapping, a sequence of tensors or names,
    or None (a loaded model's outputs, else every tensor nothing consumes)."""
    if outputs is None:
        info = model_info(graph)
        if info is not None:
            return list(info.outputs)
        return [(_default_name(graph, t), t) for op in graph.get_operations() if op.type not in _NOT_OUTPUTS
                for t in op.outputs if not t.consumers()]
    if isinstance(outputs, Mapping):
        return [(str(name), graph.get_tensor(t)) for name, t in outputs.items()]
    pairs = []
    for item in outputs:
        t = graph.get_tensor(item)
        pairs.append((item if isinstance(item, str) else _default_name(graph, t), t))
    return pairs


def _default_name(graph: Graph, t: Tensor) -> str:
    for alias, tensor in graph.tensor_aliases().items():
        if tensor is t:
            return alias
    return t.op.name if t.value_index == 0 else t.name


class _Names:
    """Model-wide unique ONNX value names."""

    def __init__(self):
        self.used: set[str] = {""}

    def fresh(self, wanted: str) -> str:
        name, i = wanted, 1
        while name in self.used:
            i += 1
            name = f"{wanted}_{i}"
        self.used.add(name)
        return name


class Emitter:
    """The nodes, initializers and value names of one ONNX graph (or function body) being written."""

    def __init__(self, exporter: Exporter, graph: Graph, main: bool, prefix: str):
        self.exporter = exporter
        self.graph = graph
        self.main = main
        self.prefix = prefix
        self.names: dict[Tensor, str] = {}
        self.nodes: list = []
        self.initializers: list = []
        self.inputs: list = []

    def name_of(self, t: Tensor) -> str:
        found = self.names.get(t)
        if found is None:
            raise GraphError(f"{describe_node(t.op.name, t.op.type)}: output {t.value_index} is used before it "
                             f"is written (a control-flow op without an ONNX equivalent?)")
        return found

    def new_name(self, t: Tensor | None, hint: str) -> str:
        reserved = self.exporter.reserved.get(t) if self.main and t is not None else None
        name = reserved if reserved is not None else self.exporter.names.fresh(self.prefix + hint)
        if t is not None:
            self.names[t] = name
        return name

    def output_name(self, t: Tensor) -> str:
        """A new name for op output ``t`` (after its op's name)."""
        return self.new_name(t, _hint(t))

    def node(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str], name: str = "", domain: str = "",
             **attrs: Any) -> None:
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs), name=name or None,
                                           domain=domain or None, **attrs))

    def constant(self, value: np.ndarray, hint: str = "const", dtype=None) -> str:
        """A constant value: an initializer of the main graph, a Constant node elsewhere."""
        name = self.exporter.names.fresh(self.prefix + hint)
        tensor = numpy_helper.from_array(_onnx_array(value, dtype), name)
        if self.main:
            self.initializers.append(tensor)
        else:
            self.nodes.append(helper.make_node("Constant", [], [name], value=tensor))
        return name


def _onnx_array(value: Any, dtype=None) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype == object:
        return np.array([v if isinstance(v, bytes) else str(v).encode() for v in array.reshape(-1)],
                        dtype=object).reshape(array.shape)
    return to_onnx_array(array, dtype)


class Exporter:
    """Writes one model: its graphs, subgraphs and model-local functions."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.info = model_info(graph)
        self.names = _Names()
        self.functions: dict[str, Any] = {}
        self.domains: set[str] = {""}
        self.reserved: dict[Tensor, str] = {}   # computed main-graph outputs -> their output names
        self.aliases: dict[Tensor, str] = {}
        self.model_constants: set[str] = set()   # a loaded model's initializers, by their names
        for alias, t in graph.tensor_aliases().items():
            self.aliases.setdefault(t, alias)

    def model(self, outputs: list[tuple[str, Tensor]]):
        graph_proto = self.main_graph(outputs)
        opsets = [helper.make_opsetid(d, OPSET_VERSIONS.get(d, 1)) for d in sorted(self.domains)]
        model = helper.make_model(graph_proto, opset_imports=opsets, producer_name="gradreg",
                                  functions=list(self.functions.values()))
        model.ir_version = IR_VERSION
        if self.info is not None:
            model.doc_string = self.info.doc_string
            for key, value in self.info.metadata_props.items():
                model.metadata_props.add(key=key, value=value)
        return model

    # -- the main graph -------------------------------------------------------------------------------
    def main_graph(self, outputs: list[tuple[str, Tensor]]):
        em = Emitter(self, self.graph, True, "")
        for name, t in outputs:
            if name in self.names.used:
                raise GraphError(f"two outputs are named '{name}'")
            self.names.used.add(name)
            if t not in self.reserved and t.op.type not in _NOT_OUTPUTS:
                self.reserved[t] = name
        ops = self._ordered(needed_ops([t.op for _, t in outputs], set()))
        self._declare_inputs(em, ops)
        for op in ops:
            self.emit_op(em, op)
        outs = [self._graph_output(em, name, t) for name, t in outputs]
        name = (self.info.graph_name if self.info is not None else "") or "gradreg"
        used = _used_names(em.nodes) | {o.name for o in outs} | {i.name for i in em.inputs}
        initializers = [t for t in em.initializers if t.name in used]   # e.g. a ConcatV2's axis, now an attribute
        return helper.make_graph(em.nodes, name, em.inputs, outs, initializer=initializers)

    @staticmethod
    def _ordered(ops: list[Operation]) -> list[Operation]:
        return topological_order(ops, "export")

    def _declare_inputs(self, em: Emitter, ops: list[Operation]) -> None:
        """Graph inputs: the loaded model's inputs (in order, used or not), then other Placeholders."""
        placeholders = [op for op in ops if op.type == "Placeholder"]
        ordered = []
        if self.info is not None:
            ordered = [t.op for _, t in self.info.inputs if t.op.type == "Placeholder" and t.op.graph is self.graph]
        ordered += [op for op in placeholders if op not in ordered]
        for op in ordered:
            t = op.outputs[0]
            name = em.new_name(t, self.aliases.get(t, op.name))
            em.inputs.append(helper.make_value_info(name, self._value_type(name, t)))

    def _value_type(self, name: str, t: Tensor):
        if self.info is not None and name in self.info.value_types:
            return onnx.TypeProto.FromString(self.info.value_types[name])
        if t.dtype is None or t.dtype.kind == "v":
            raise GraphError(f"{t.name} ('{name}') is a sequence or optional value whose ONNX type gradreg "
                             f"does not know")
        return type_proto(t.dtype, t.shape)

    def _graph_output(self, em: Emitter, name: str, t: Tensor):
        current = em.name_of(t)
        if current != name:
            em.node("Identity", [current], [name])
        try:
            value_type = self._value_type(name, t)
        except GraphError:
            value_type = None
        return helper.make_value_info(name, value_type) if value_type is not None else \
            helper.make_empty_tensor_value_info(name)

    # -- ops --------------------------------------------------------------------------------------------
    def emit_op(self, em: Emitter, op: Operation) -> None:
        if all(t in em.names for t in op.outputs) and op.outputs:
            return   # an input (or a subgraph's argument)
        if op.type == "Const":
            self._const(em, op)
        elif op.type == "Placeholder":
            raise GraphError(f"{describe_node(op.name, op.type)} is needed but is not an input of the graph "
                             f"being written")
        elif op.type == "PlaceholderWithDefault":
            self._placeholder_with_default(em, op)
        elif schema_for(op.type) is not None:
            self._onnx_node(em, op)
        elif op.definition is not None and op.definition.plugin == "function library":
            self.function_call(em, op)
        elif op.type in TF_OPS:
            TF_OPS[op.type](em, op)
        else:
            raise GraphError(f"{describe_node(op.name, op.type)} has no ONNX equivalent (gradreg writes onnx:: "
                             f"ops, library functions and the TensorFlow ops in "
                             f"gradreg_plugins.onnx.tf_ops.TF_OPS)")

    def _const(self, em: Emitter, op: Operation) -> None:
        t = op.outputs[0]
        value = op.get_attr("value")
        hint = self.aliases.get(t, op.name)
        em.names[t] = em.constant(value, hint, op.get_attr("dtype"))
        if t in self.aliases:
            self.model_constants.add(em.names[t])

    def _placeholder_with_default(self, em: Emitter, op: Operation) -> None:
        """An input with a default: in the main graph, an input and an initializer of one name."""
        t = op.outputs[0]
        default = op.inputs[0]
        value = constant_value(default) if default.op.type == "Const" else None
        if not em.main or value is None:
            em.node("Identity", [em.name_of(default)], [em.new_name(t, op.name)])
            return
        name = em.new_name(t, self.aliases.get(t, op.name))
        em.initializers.append(numpy_helper.from_array(_onnx_array(value, t.dtype), name))
        em.inputs.append(helper.make_value_info(name, type_proto(t.dtype, t.shape)))

    def _onnx_node(self, em: Emitter, op: Operation) -> None:
        domain, _ = split_op_type(op.type)
        self.domains.add(domain)
        inputs = [em.name_of(t) for t in op.inputs]
        outputs = [em.new_name(t, self.aliases.get(t, _hint(t))) for t in op.outputs]
        captured = [em.name_of(t) for t in captured_inputs(op)]
        node_name = op.get_attr(NODE_NAME_ATTR).decode() if op.has_attr(NODE_NAME_ATTR) else op.name
        node = node_proto(op, inputs, outputs, name=node_name,
                          graph_for=lambda func: self.subgraph(func.name, captured))
        em.nodes.append(_current_form(node))

    def function_call(self, em: Emitter, op: Operation, function: str | None = None) -> None:
        """A call of library function ``function`` (default: the op's type) as a model-local function."""
        function = function or op.type
        domain, name = split_op_type(function)
        if not domain:
            domain = "gradreg.functions"
        self.domains.add(domain)
        if function not in self.functions:
            self.functions[function] = self.function_proto(function, domain, name)
        outputs = [em.new_name(t, self.aliases.get(t, _hint(t))) for t in op.outputs]
        em.node(name, [em.name_of(t) for t in op.inputs], outputs, name=op.name, domain=domain)

    # -- subgraphs and functions ------------------------------------------------------------------------
    def subgraph(self, function: str, captured: list[str]):
        """The GraphProto of library function ``function`` used as a subgraph whose last
        ``len(captured)`` arguments are the enclosing graph's values ``captured``."""
        body = function_graph(self.graph.library, function, {}, f"subgraph '{function}'")
        em = Emitter(self, body, False, f"{function}/")
        formal = body.inputs[:len(body.inputs) - len(captured)]
        for t, outer in zip(body.inputs[len(formal):], captured):
            em.names[t] = outer
        inputs = []
        for i, t in enumerate(formal):
            name = em.new_name(t, f"in_{i}")
            inputs.append(helper.make_value_info(name, self._body_type(function, "inputs", i, t)))
        self._emit_body(em, body)
        outputs = []
        for i, t in enumerate(body.outputs):
            name = em.new_name(None, f"out_{i}")
            em.node("Identity", [em.name_of(t)], [name])
            outputs.append(helper.make_value_info(name, self._body_type(function, "outputs", i, t)))
        return helper.make_graph(em.nodes, function.replace("/", "_"), inputs, outputs)

    def _body_type(self, function: str, kind: str, index: int, t: Tensor):
        if self.info is not None:
            recorded = self.info.function_types.get(function, {}).get(kind, [])
            if index < len(recorded) and recorded[index]:
                return onnx.TypeProto.FromString(recorded[index])
        if t.dtype is None or t.dtype.kind == "v":
            return onnx.TypeProto()
        return type_proto(t.dtype, t.shape)

    def _emit_body(self, em: Emitter, body: FunctionGraph) -> None:
        ops = self._ordered(needed_ops([t.op for t in body.outputs], set(em.names)))
        for op in ops:
            self.emit_op(em, op)

    def function_proto(self, function: str, domain: str, name: str):
        """A model-local FunctionProto of library function ``function``."""
        body = function_graph(self.graph.library, function, {}, f"function '{function}'")
        em = Emitter(self, body, False, f"{function}/")
        inputs = [em.new_name(t, f"in_{i}") for i, t in enumerate(body.inputs)]
        self._emit_body(em, body)
        outputs = []
        for i, t in enumerate(body.outputs):
            outputs.append(em.new_name(None, f"out_{i}"))
            em.node("Identity", [em.name_of(t)], [outputs[-1]])
        opsets = [helper.make_opsetid(d, OPSET_VERSIONS.get(d, 1)) for d in sorted(self.domains)]
        return helper.make_function(domain, name, inputs, outputs, em.nodes, opsets)


def _current_form(node):
    """A node of an op deprecated at the family's opset (which the checker refuses) as the op that
    replaced it: Scatter is ScatterElements, Upsample a Resize (asymmetric coordinates, floor)."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in ("Scatter", "Upsample"):
        return node
    if node.op_type == "Scatter":
        replaced = helper.make_node("ScatterElements", list(node.input), list(node.output), name=node.name)
        replaced.attribute.extend(node.attribute)
        return replaced
    mode = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "mode"), b"nearest")
    return helper.make_node("Resize", [node.input[0], "", node.input[1]], list(node.output), name=node.name,
                            **upsample_as_resize(mode.decode() if isinstance(mode, bytes) else mode))


def _used_names(nodes) -> set[str]:
    """The value names nodes read, in subgraphs too."""
    used: set[str] = set()
    for node in nodes:
        used.update(node.input)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                used |= _used_names(sub.node) | {o.name for o in sub.output}
    return used


def _hint(t: Tensor) -> str:
    return t.op.name if t.value_index == 0 else f"{t.op.name}:{t.value_index}"


# The model's metadata key listing the gradient rules that made its nodes (JSON: rule -> node count).
RULES_METADATA = "gradreg.gradient_rules"


def graph_to_model(graph: Graph, outputs: Sequence[Tensor] | Mapping[str, Tensor] | None = None, *,
                   opset: int | None = None, check: bool = True, flat: bool = False) -> onnx.ModelProto:
    """A ModelProto computing ``outputs`` (tensors, or ONNX output name -> tensor; default: the
    loaded model's outputs, else the tensors nothing consumes) from the graph's Placeholders,
    at ai.onnx ``opset`` (default: the family's), checked by onnx's full checker. Each gradient
    rule's nodes are one call of a model-local function unless ``flat``."""
    model = export_model(graph, outputs, opset=opset, flat=flat)
    origins = rule_origins(needed_ops([t.op for _, t in output_pairs(graph, outputs)], set()))
    if origins:   # the gradient rules that made the written nodes (gradreg.autodiff.provenance)
        entry = model.metadata_props.add()
        entry.key, entry.value = RULES_METADATA, json.dumps({str(o): len(nodes) for o, nodes in origins.items()})
    if check:
        try:
            onnx.checker.check_model(model, full_check=True)
        except Exception as exc:
            raise GraphError(f"the ONNX model written from the graph fails onnx's checker: {first_lines(exc)}") \
                from None
    return model


def export_model(graph: Graph, outputs: Any = None, opset: int | None = None, flat: bool = False) -> onnx.ModelProto:
    """The ModelProto of ``graph`` (see the module docstring); ``opset`` converts it down; unless
    ``flat``, each gradient rule's nodes and each op expanded below ``opset`` become one call of a
    model-local function (:mod:`gradreg_plugins.onnx.local_functions`)."""
    pairs = output_pairs(graph, outputs)
    if not pairs:
        raise GraphError("the graph has no outputs to write")
    exporter = Exporter(graph)
    model = exporter.model(pairs)
    _fill_shapes(model)
    if opset is not None:
        model = to_opset(model, opset)
    compact(model, keep=exporter.model_constants)
    if not flat:
        gather_groups(model, _rule_scopes(graph, pairs), keep=exporter.model_constants)
    return model


def _rule_scopes(graph: Graph, pairs: list[tuple[str, Tensor]]) -> dict[str, str]:
    """The name scope of each gradient rule call among the written ops -> the op type it differentiates."""
    scopes: dict[str, str] = {}
    for op in needed_ops([t.op for _, t in pairs], set()):
        scope = gradient_scope(op.name) if op.has_attr(RULE_ATTR) else None
        if scope is not None:
            rule = RuleOrigin.parse(op.get_attr(RULE_ATTR)).rule
            scopes.setdefault(scope, re.sub(r"\W", "", split_op_type(rule)[1]) or "Rule")
    return scopes


def _graphs(graph_proto):
    yield graph_proto
    for node in graph_proto.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _graphs(sub)


def _fill_shapes(model) -> None:
    """Inputs and outputs of unknown rank get their types from onnx's shape inference (the checker
    wants a shape on each); a graph input whose rank nothing tells is a GraphError naming it."""
    missing = [v for g in _graphs(model.graph) for v in list(g.input) + list(g.output)
               if v.type.HasField("tensor_type") and not v.type.tensor_type.HasField("shape")]
    if not missing:
        return
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:
        inferred = None
    known = {}
    for g in _graphs(inferred.graph) if inferred is not None else ():
        for v in list(g.input) + list(g.output) + list(g.value_info):
            if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
                known[v.name] = v.type
    for v in missing:
        if v.name in known:
            v.type.CopyFrom(known[v.name])
        elif any(v is i for i in model.graph.input):
            raise GraphError(f"graph input '{v.name}' has no known rank; give its Placeholder a shape to write "
                             f"it as ONNX")
        elif any(v is o for o in model.graph.output):
            raise GraphError(f"graph output '{v.name}' has no known rank (ONNX wants one on every output); give its "
                             f"tensor a static rank (set_shape) to write it as ONNX")
