"""ONNX ModelProto -> gradreg Graph (used by :mod:`gradreg_plugins.onnx.format`; needs the onnx
package).

The model has been checked and brought to the onnx family's opset; onnx's shape inference
has typed its values. Then:

* graph inputs become Placeholders (symbolic dims unknown; sequences and optionals ``variant``),
  initializers Consts (PlaceholderWithDefault when also a graph input), ``Constant`` nodes
  Consts; every other node one ``onnx::<OpType>`` op, named after its first output;
* the subgraphs of If / Loop / Scan / SequenceMap become library functions whose arguments
  are the subgraph's inputs followed by the outer values it uses (passed by the node as its
  ``captured`` inputs);
* a call of a model-local function becomes a call of a library function, specialized to the
  call's input types and attribute values (``domain::name``);
* every ONNX value name is an alias of its tensor (``graph.get_tensor("input.1")``), and
  :class:`OnnxModelInfo` (``graph.resources["onnx.model"]``) keeps what writing the model
  back needs.
"""
from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx.shape_inference
from onnx import helper, numpy_helper

from gradreg.build.builders import apply_op
from gradreg.build.functions import FunctionGraph
from gradreg.errors import GradregError, GraphError, GraphFileError, UnknownOpError, describe_node
from gradreg.model import dtypes, tensor_util
from gradreg.model.dtypes import DType
from gradreg.model.graph import Graph, Tensor
from gradreg.model.shapes import TensorShape
from gradreg.progress import task
from gradreg_plugins.onnx.external_data import load_external_data
from gradreg_plugins.onnx.nodes import argument_attrs, dtype_of_type, tensor_dtype
from gradreg_plugins.onnx.opset import first_lines, to_family_opset
from gradreg_plugins.onnx.protos import infer_node_types
from gradreg_plugins.onnx.schemas import CAPTURED, OPSET_VERSIONS, op_type_for, schema_for
from gradreg_plugins.onnx.shapes import IMPORTING, shape_of_type
from gradreg_plugins.onnx.subgraphs import function_def, unique_function_name

MODEL_INFO = "onnx.model"        # key of Graph.resources holding the OnnxModelInfo
_log = "onnx"   # the logger gradreg.onnx (gradreg.progress)
NODE_NAME_ATTR = "_onnx_node_name"   # the ONNX node's name, when it differs from the op's
_INVALID = re.compile(r"[^A-Za-z0-9_./-]")


@dataclass
class OnnxModelInfo:
    """What a loaded ONNX model leaves on its graph for writing it back and running it."""
    source: str
    ir_version: int
    opset_imports: dict[str, int]
    original_opset: int | None
    producer_name: str = ""
    producer_version: str = ""
    graph_name: str = ""
    doc_string: str = ""
    metadata_props: dict[str, str] = field(default_factory=dict)
    inputs: list[tuple[str, Tensor]] = field(default_factory=list)    # graph inputs, in order
    # graph inputs an initializer of the same name gives a default (IR < 4 models list every
    # initializer among the inputs): fed only by name, never by position
    defaulted: set[str] = field(default_factory=set)
    outputs: list[tuple[str, Tensor]] = field(default_factory=list)
    value_types: dict[str, bytes] = field(default_factory=dict)       # input/output name -> TypeProto
    initializers: set[str] = field(default_factory=set)               # op names of initializer Consts
    # subgraph function -> {"inputs": [...], "outputs": [...]}: the subgraph's declared TypeProtos
    function_types: dict[str, dict[str, list[bytes]]] = field(default_factory=dict)


def op_name(text: str, fallback: str) -> str:
    """A gradreg node name for an ONNX value or node name ("/conv1/Conv_output_0" ->
    "conv1/Conv_output_0", "onnx::Gemm_12" -> "onnx__Gemm_12")."""
    name = _INVALID.sub("_", text).lstrip("/_-") or fallback
    return name if name[0].isalnum() or name[0] == "." else "v" + name


# -- reading ------------------------------------------------------------------------------------------

def read_model(source: str | os.PathLike | bytes, where: str | None = None, *,
               base_dir: str | os.PathLike | None = None) -> onnx.ModelProto:
    """The ModelProto in a file or bytes, with its external data read in: a file's from its own
    directory (or ``base_dir``), bytes' from ``base_dir`` (ExternalDataError without one).
    See :mod:`gradreg_plugins.onnx.external_data` for what is refused."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        where = where or "<bytes>"
        try:
            model = onnx.load_model_from_string(bytes(source))
        except Exception as exc:
            raise GraphFileError(f"{where}: not an ONNX model: {exc}") from None
        return load_external_data(model, None if base_dir is None else os.fspath(base_dir), where)
    path = os.fspath(source)
    where = where or path
    if not os.path.exists(path):
        raise GraphFileError(f"{where}: cannot read: no such file")
    try:
        model = onnx.load(path, load_external_data=False)
    except OSError as exc:
        raise GraphFileError(f"{where}: cannot read: {exc.strerror or exc}") from None
    except Exception as exc:
        raise GraphFileError(f"{where}: not an ONNX model: {type(exc).__name__}: {exc}") from None
    directory = os.path.dirname(os.path.abspath(path)) if base_dir is None else os.fspath(base_dir)
    return load_external_data(model, directory, where)


def model_to_graph(model: onnx.ModelProto, source: str = "<ModelProto>", *, check: bool = True,
                   base_dir: str | os.PathLike | None = None) -> Graph:
    """Build a Graph from a ModelProto: external data it still refers to read from ``base_dir``
    (ExternalDataError without one), checked by onnx.checker, its sparse tensors made dense,
    converted to the family's opset, shape-inferred, then imported (:class:`Importer`)."""
    model = load_external_data(model, None if base_dir is None else os.fspath(base_dir), source)
    if check:
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as exc:
            raise GraphError(f"{source}: the ONNX checker rejects the model: {first_lines(exc)}") from None
        except UnicodeDecodeError:       # the C++ checker's strings handed back to Python
            raise GraphError(f"{source}: the ONNX checker rejects the model: a name or string is not UTF-8") \
                from None
    check_known_ops(model, source)
    model, original = to_family_opset(densify_sparse_tensors(model), source)
    # inference is a help, not a requirement: types come from the nodes when it fails
    with contextlib.suppress(Exception):
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    return Importer(model, source, original).run()


def model_info(graph: Graph) -> OnnxModelInfo | None:
    """The OnnxModelInfo a loaded model left on its graph, or None."""
    info = graph.resources.get(MODEL_INFO)
    return info if isinstance(info, OnnxModelInfo) else None


class _Scope:
    """The values visible in one ONNX graph or subgraph; a subgraph's first use of an outer value
    captures it as a Placeholder of the subgraph's function."""

    def __init__(self, graph: Graph, parent: _Scope | None, types: dict, where: str, aliases: bool = False):
        self.graph = graph
        self.parent = parent
        self.types = types           # ONNX value name -> TypeProto, from shape inference
        self.where = where
        self.aliases = aliases       # the model's main graph: value names become tensor aliases
        self.values: dict[str, Tensor] = {}
        self.captured: list[str] = []

    def lookup(self, name: str, user: str) -> Tensor:
        found = self.values.get(name)
        if found is not None:
            return found
        if self.parent is None:
            raise GraphError(f"{self.where}: {user} uses '{name}', which no node, input or initializer defines")
        outer = self.parent.lookup(name, user)
        with self.graph.as_default():
            placeholder = apply_op("Placeholder", dtype=tensor_dtype(outer).base_dtype, shape=outer.shape,
                                   name=op_name("captured_" + name, "captured"))
        self.values[name] = placeholder
        self.captured.append(name)
        return placeholder

    def define(self, name: str, tensor: Tensor) -> None:
        if name in self.values and self.parent is None:
            raise GraphError(f"{self.where}: value '{name}' is defined twice")
        self.values[name] = tensor
        if self.aliases:
            self.graph.add_tensor_alias(name, tensor)


class Importer:
    """Builds a Graph from a checked, converted, shape-inferred ModelProto."""

    def __init__(self, model, source: str, original_opset: int | None, graph: Graph | None = None):
        self.model = model
        self.source = source
        self.graph = graph if graph is not None else Graph()
        if graph is None:
            self.graph.resources[IMPORTING] = True
        self.library = self.graph.library
        self.specialized: dict[tuple, str] = {}
        self.local_functions: dict = {}
        if model is None:   # inline(): nodes converted into an existing graph
            self.info = OnnxModelInfo(source=source, ir_version=0, opset_imports={}, original_opset=None)
            return
        self.local_functions = {(f.domain, f.name): f for f in model.functions}
        self.info = OnnxModelInfo(
            source=source, ir_version=model.ir_version,
            opset_imports={o.domain: o.version for o in model.opset_import}, original_opset=original_opset,
            producer_name=model.producer_name, producer_version=model.producer_version,
            graph_name=model.graph.name, doc_string=model.doc_string,
            metadata_props={p.key: p.value for p in model.metadata_props})

    @classmethod
    def inline(cls, graph: Graph, where: str) -> Importer:
        """An importer converting nodes into ``graph`` (which exists and is not being imported):
        :func:`gradreg_plugins.onnx.expand.expand_function` instantiates function bodies with it."""
        return cls(None, where, None, graph=graph)

    def scope(self, values: dict[str, Tensor], where: str) -> _Scope:
        """A scope of ``graph`` whose ONNX values ``values`` are known (by name)."""
        scope = _Scope(self.graph, None, {}, where)
        scope.values.update(values)
        return scope

    def run(self) -> Graph:
        g = self.model.graph
        scope = _Scope(self.graph, None, _value_types(g), self.source, aliases=True)
        with self.graph.as_default(), task(_log, f"importing {self.source}", len(g.node), "nodes") as progress:
            self._initializers(g, scope)
            self._inputs(g, scope)
            for node in g.node:
                self.convert_node(node, scope)
                progress.advance()
        for out in g.output:
            tensor = scope.lookup(out.name, "the graph's output list")
            self.info.outputs.append((out.name, tensor))
            self.info.value_types[out.name] = out.type.SerializeToString()
        del self.graph.resources[IMPORTING]
        self.graph.resources[MODEL_INFO] = self.info
        return self.graph

    # -- graph inputs and initializers ---------------------------------------------------------
    def _initializers(self, g, scope: _Scope) -> None:
        declared = {i.name for i in g.input}
        tensors: list[tuple[str, Any, Any]] = [(t.name, t, numpy_helper.to_array) for t in g.initializer]
        for name, proto, decode in tensors:
            where = f"{self.source}: initializer '{name}'"
            try:
                array = decode(proto)
            except Exception as exc:
                raise GraphError(f"{where}: cannot read its value: {exc}") from None
            const = make_const(self.graph, array, op_name(name, "initializer"), where)
            self.info.initializers.add(const.op.name)
            if name in declared:   # an overridable default (IR < 4 lists initializers as inputs)
                const = apply_op("PlaceholderWithDefault", const, shape=const.shape,
                                 name=op_name(name, "input") + "/input")
            scope.define(name, const)

    def _inputs(self, g, scope: _Scope) -> None:
        for value in g.input:
            self.info.value_types[value.name] = value.type.SerializeToString()
            if value.name in scope.values:
                self.info.inputs.append((value.name, scope.values[value.name]))
                self.info.defaulted.add(value.name)
                continue
            where = f"{self.source}: graph input '{value.name}'"
            dtype = dtype_of_type(value.type, where)
            shape = shape_of_type(value.type) if dtype.kind != "v" else TensorShape(None)
            t = apply_op("Placeholder", dtype=dtype, shape=shape, name=op_name(value.name, "input"))
            scope.define(value.name, t)
            self.info.inputs.append((value.name, t))

    # -- nodes -----------------------------------------------------------------------------------
    def convert_node(self, node, scope: _Scope) -> None:
        label = f"node '{node.name or node.output[0] if node.output else node.name}' (op {node.op_type})"
        where = f"{scope.where}: {label}"
        try:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                tensor = constant_of_node(node, scope.graph, op_name(node.output[0], "Constant"), where)
                scope.define(node.output[0], tensor)
                return
            if node.domain == "ai.onnx.preview.training" and node.op_type == "Gradient":
                outputs = self._expand_gradient(node, scope, where)
            elif (node.domain, node.op_type) in self.local_functions:
                outputs = self._call_local_function(node, scope, where)
            else:
                outputs = self._onnx_op(node, scope, where)
        except GradregError as exc:
            text = str(exc)
            raise type(exc)(text if label in text else f"{where}: {text}") from None
        for name, tensor in zip(node.output, outputs):
            if name:
                scope.define(name, tensor)
                found = scope.types.get(name)
                if found is not None and tensor.dtype.kind != "v":
                    # ONNX's static inference and the op may disagree: keep the op's then
                    with contextlib.suppress(GradregError):
                        tensor.set_shape(shape_of_type(found))

    def _onnx_op(self, node, scope: _Scope, where: str) -> list:
        op_type = op_type_for(node.domain, node.op_type)
        schema = schema_for(op_type)
        if schema is None:
            raise UnknownOpError(f"{where}: gradreg's onnx op family has no op '{node.op_type}' in domain "
                                 f"'{node.domain or 'ai.onnx'}' (it implements opset "
                                 f"{OPSET_VERSIONS['']} of ai.onnx)")
        inputs = [scope.lookup(n, f"node '{node.name}'") if n else None for n in node.input]
        attrs: dict[str, Any] = {}
        captured: list[str] = []
        pending = []
        for attr in node.attribute:
            if attr.name not in schema.attributes:
                raise GraphError(f"{where}: ONNX op {node.op_type} has no attribute '{attr.name}'")
            if attr.type in (5, 10):   # GRAPH, GRAPHS
                pending.append((attr, self._subgraphs(node, attr, scope, inputs, where)))
                continue
            attrs[attr.name] = attribute_value(attr, schema.attributes[attr.name][0], where)
        for _, bodies in pending:
            for body in bodies:
                captured += [n for n in body.scope.captured if n not in captured]
        for attr, bodies in pending:
            names = [body.finish(captured, self.library) for body in bodies]
            attrs[attr.name] = names[0] if attr.type == 5 else names
        body_outputs = [t.dtype for t in pending[0][1][0].outputs] if pending else []
        attrs.update(self._type_attrs(schema, node, inputs, scope, body_outputs, where))
        flat_inputs = [t for t in inputs if t is not None]
        if schema.has_subgraphs:
            captures = [scope.lookup(n, f"node '{node.name}'") for n in captured]
            flat_inputs += captures
            attrs[f"T_{CAPTURED}"] = [tensor_dtype(t).base_dtype for t in captures]
        if isinstance(node.name, bytes):     # protobuf hands back a string field that is not UTF-8 as bytes
            raise GraphError(f"{where}: a node's name is not UTF-8 text ({node.name[:40]!r})")
        if node.name and node.name != op_name(node.output[0], node.op_type):
            attrs[NODE_NAME_ATTR] = node.name.encode()
        op = scope.graph.create_op(op_type, flat_inputs, attrs, name=op_name(node.output[0] or node.name,
                                                                            node.op_type))
        present = [n for n in node.output if n]
        outs = list(op.outputs)
        return [outs[present.index(n)] if n else None for n in node.output]

    def _type_attrs(self, schema, node, inputs, scope: _Scope, body_outputs: list, where: str) -> dict:
        """Count and type attrs of the node: types from its inputs, else from ONNX's inferred types
        of its outputs, else from inferring this node alone, else (the variadic outputs of If, Loop
        and Scan) from the subgraph's outputs."""
        def dtype_of(value):
            if isinstance(value, Tensor):
                return value.dtype
            found = scope.types.get(value)
            return dtype_of_type(found, where) if found is not None else None
        outputs = [n if n else None for n in node.output]
        attrs = argument_attrs(schema, inputs, outputs, dtype_of)
        if self._unresolved(schema, inputs, outputs, attrs):
            inferred = infer_node_types(node, inputs, schema)
            found = argument_attrs(schema, [None] * len(inputs), [inferred.get(n) if n else None for n in outputs],
                                   lambda v: v)
            # a type list with gaps is replaced only by a complete one of the same length
            attrs.update({k: v for k, v in found.items() if k not in attrs or (
                k.startswith("T_") and _has_none(attrs[k]) and len(v) == len(attrs[k]))})
        last = schema.outputs[-1] if schema.outputs else None
        if last is not None and last.types_attr and _has_none(attrs.get(last.types_attr, ())):
            # If, Loop and Scan have that one output argument; a Loop body's first output is the condition.
            offset = 1 if schema.name == "Loop" else 0
            attrs[last.types_attr] = [dt if dt is not None else _at(body_outputs, offset + i)
                                      for i, dt in enumerate(attrs[last.types_attr])]
        unresolved = self._unresolved(schema, inputs, outputs, attrs)
        if unresolved:
            raise GraphError(f"{where}: cannot determine the type of {', '.join(sorted(unresolved))}")
        return attrs

    @staticmethod
    def _unresolved(schema, inputs: list, outputs: list, attrs: dict) -> set[str]:
        """Type parameters (or variadic arguments) bound to a present value whose type is unknown."""
        out = set()
        for params, values in ((schema.inputs, inputs), (schema.outputs, outputs)):
            for i, p in enumerate(params):
                present = any(v is not None for v in (values[i:] if p.option == "variadic" else values[i:i + 1]))
                if not present or p.fixed_dtype is not None:
                    continue
                if p.types_attr:
                    if _has_none(attrs.get(p.types_attr, [None])):
                        out.add(p.name)
                elif p.type not in attrs:
                    out.add(p.type)
        return out

    # -- subgraphs and functions -------------------------------------------------------------------
    def _subgraphs(self, node, attr, scope: _Scope, inputs: list, where: str) -> list[_Body]:
        graphs = [attr.g] if attr.type == 5 else list(attr.graphs)
        out = []
        for i, g in enumerate(graphs):
            base = f"{op_name(node.output[0] or node.name, node.op_type)}_{attr.name}" + (f"_{i}" if i else "")
            name = unique_function_name(self.library, base.replace("/", "_"))
            formal = formal_input_types(node, g, inputs)
            out.append(self._body(g, scope, name, formal, f"{where}, subgraph '{attr.name}'"))
        return out

    def _body(self, g, parent: _Scope, name: str, formal: list, where: str) -> _Body:
        body = FunctionGraph()
        body.resources[IMPORTING] = True
        scope = _Scope(body, parent, dict(parent.types) | _value_types(g), where)
        with body.as_default():
            args = []
            for value, dtype in zip(g.input, formal):
                shape = shape_of_type(value.type) if value.type.HasField("tensor_type") else TensorShape(None)
                t = apply_op("Placeholder", dtype=dtype, shape=shape, name=op_name("arg_" + value.name, "arg"))
                scope.define(value.name, t)
                args.append(t)
            for init in g.initializer:
                scope.define(init.name, make_const(body, numpy_helper.to_array(init), op_name(init.name, "c"), where))
            for node in g.node:
                self.convert_node(node, scope)
            outputs = [scope.lookup(o.name, "the subgraph's output list") for o in g.output]
        self.info.function_types[name] = {kind: [v.type.SerializeToString() for v in values]
                                          for kind, values in (("inputs", g.input), ("outputs", g.output))}
        return _Body(body, scope, name, args, outputs)

    def _expand_gradient(self, node, scope: _Scope, where: str) -> list:
        """ONNX's Gradient operator: the gradient of ``y`` with respect to each of ``xs``, built by
        gradreg.gradients from the onnx family's rules (zeros where y does not depend on an x)."""

        # start-up: reading a model does not load differentiation, which only this op needs
        from gradreg.autodiff.gradients import as_dense_gradients, gradients
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if "y" not in attrs or "xs" not in attrs:
            raise GraphError(f"{where}: a Gradient node needs attributes 'y' and 'xs'")
        y = scope.lookup(attrs["y"].decode(), f"node '{node.name}'")
        xs = [scope.lookup(n.decode(), f"node '{node.name}'") for n in attrs["xs"]]
        graph = scope.graph
        importing = graph.resources.pop(IMPORTING, None)   # the rules want static shapes inferred
        try:
            with graph.as_default(), graph.name_scope(op_name(node.name or "Gradient", "Gradient")):
                grads = as_dense_gradients(gradients([y], xs, unconnected_gradients="zero"))
        finally:
            if importing is not None:
                graph.resources[IMPORTING] = importing
        return [grads[i] if i < len(grads) else None for i in range(len(node.output))]

    def _call_local_function(self, node, scope: _Scope, where: str) -> list:
        if any(not n for n in node.input):
            raise GraphError(f"{where}: a call of a model-local function may not omit inputs")
        inputs = [scope.lookup(n, f"node '{node.name}'") for n in node.input]
        name = self._specialize(node, [tensor_dtype(t) for t in inputs], where)
        if name not in scope.graph.library:   # a subgraph's or function's own library resolves the call
            fdef = self.library.get(name)
            if fdef is None:
                raise GraphError(f"{where}: function '{name}' is missing from the library")
            scope.graph.library.add(fdef)
        op = scope.graph.create_op(name, inputs, {}, name=op_name(node.output[0] or node.name, node.op_type))
        return list(op.outputs)

    def _specialize(self, node, input_dtypes: list, where: str) -> str:
        """The library function for this call of a model-local function: its body with the call's
        attributes substituted and its inputs typed as the call's."""
        fproto = self.local_functions[(node.domain, node.op_type)]
        values = {a.name: a for a in fproto.attribute_proto}
        values.update({a.name: a for a in node.attribute})
        key = (node.domain, node.op_type, tuple(d.name for d in input_dtypes),
               tuple(sorted((k, v.SerializeToString()) for k, v in values.items())))
        found = self.specialized.get(key)
        if found is not None:
            return found
        name = unique_function_name(self.library, f"{node.domain}::{node.op_type}")
        body = FunctionGraph()
        body.resources[IMPORTING] = True
        scope = _Scope(body, None, {}, f"{where}, function {node.domain}::{node.op_type}")
        with body.as_default():
            args = [apply_op("Placeholder", dtype=dt.base_dtype, name=op_name("arg_" + n, "arg"))
                    for n, dt in zip(fproto.input, input_dtypes)]
            for n, t in zip(fproto.input, args):
                scope.define(n, t)
            for inner in fproto.node:
                self.convert_node(bind_attributes(inner, values, scope.where), scope)
            outputs = [scope.lookup(o, "the function's output list") for o in fproto.output]
        self.library.add(function_def(body, name, args, outputs))
        self.specialized[key] = name
        return name


@dataclass
class _Body:
    """A subgraph imported into a FunctionGraph, waiting for the captures of its node's other
    subgraphs: every subgraph of one node takes the same captured values, in one order."""
    graph: FunctionGraph
    scope: _Scope
    name: str
    args: list
    outputs: list

    def finish(self, captured: list[str], library) -> str:
        extra = []
        with self.graph.as_default():
            for n in captured:
                if n not in self.scope.values:
                    self.scope.lookup(n, "a sibling subgraph")
                extra.append(self.scope.values[n])
        library.add(function_def(self.graph, self.name, self.args + extra, self.outputs))
        return self.name


def bind_attributes(node, values: dict, where: str):
    """A copy of a function-body node with attributes that refer to the function's
    (``ref_attr_name``) replaced by the call's values; unset ones are dropped."""
    if not any(a.ref_attr_name for a in node.attribute):
        return node
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    del copy.attribute[:]
    for a in node.attribute:
        if not a.ref_attr_name:
            copy.attribute.append(a)
            continue
        bound = values.get(a.ref_attr_name)
        if bound is None:
            continue
        new = copy.attribute.add()
        new.CopyFrom(bound)
        new.name = a.name
    return copy


def _value_types(g) -> dict:
    types = {}
    for v in list(g.input) + list(g.value_info) + list(g.output):
        if v.type.WhichOneof("value") is not None:
            types[v.name] = v.type
    return types


def formal_input_types(node, g, inputs: list) -> list[DType]:
    """The dtypes of a subgraph's inputs: declared, else what the node passes (Loop's carried
    values, Scan's states and scanned elements)."""
    out = []
    for i, value in enumerate(g.input):
        if value.type.WhichOneof("value") is not None:
            out.append(dtype_of_type(value.type, f"subgraph input '{value.name}'"))
            continue
        guess = None
        if node.op_type == "Loop":
            guess = dtypes.int64 if i == 0 else dtypes.bool_ if i == 1 else _dtype_at(inputs, i)
        elif node.op_type == "Scan":
            guess = _dtype_at(inputs, i)
        elif node.op_type == "SequenceMap":
            guess = dtypes.variant
        if guess is None:
            raise GraphError(f"node '{node.name}' (op {node.op_type}): subgraph input '{value.name}' has no type")
        out.append(guess)
    return out


def _has_none(values) -> bool:
    """Whether a list of dtypes has a gap (``None in`` would compare DTypes with None, and
    NumPy reads None as float64)."""
    return any(v is None for v in values)


def _at(values: list, index: int) -> Any:
    return values[index] if 0 <= index < len(values) else None


def _dtype_at(inputs: list, index: int) -> DType | None:
    t = inputs[index] if index < len(inputs) else None
    return t.dtype if t is not None else None


# -- values ------------------------------------------------------------------------------------------

def make_const(graph: Graph, array: np.ndarray, name: str, where: str) -> Tensor:
    """A Const holding an ONNX value (ml_dtypes bfloat16 is stored as gradreg's float32-held
    bfloat16; float8/int4 stay ml_dtypes arrays)."""
    array = np.asarray(array)
    if array.dtype.name == "bfloat16":
        value: Any = tensor_util.make_tensor_proto(array.astype(np.float32), dtypes.bfloat16)
        dtype = dtypes.bfloat16
    else:
        try:
            dtype = dtypes.as_dtype(array.dtype)
        except GradregError:
            raise GraphError(f"{where}: values of type {array.dtype} are not supported") from None
        value = array if dtype is not dtypes.string else tensor_util.as_array(array, dtypes.string)
    return graph.create_op("Const", [], {"value": value, "dtype": dtype}, name=name, validate=False).outputs[0]


def _dense_of_sparse(sparse) -> np.ndarray:
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    dense = np.zeros(tuple(sparse.dims), dtype=values.dtype)
    if indices.ndim == 1:
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense


def densify_sparse_tensors(model):
    """``model`` with its sparse initializers and Constants' ``sparse_value`` (in subgraphs and
    functions too) as dense ones: onnx's version converter knows neither (a sparse initializer's
    name reads as an undefined input), and the importer makes dense Consts of them anyway. A copy
    when there are any; else ``model`` itself."""

    def bodies(nodes):
        for node in nodes:
            for a in node.attribute:
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    yield sub
                    yield from bodies(sub.node)

    def parts(m):
        graphs = [m.graph, *bodies(m.graph.node)]
        for f in m.functions:
            graphs += list(bodies(f.node))
        return graphs, [n for body in [m.graph, *m.functions, *graphs[1:]] for n in body.node
                        if n.op_type == "Constant" and any(a.name == "sparse_value" for a in n.attribute)]
    graphs, constants = parts(model)
    if not constants and not any(g.sparse_initializer for g in graphs):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graphs, constants = parts(copy)
    for g in graphs:
        dense = [numpy_helper.from_array(_dense_of_sparse(s), s.values.name) for s in g.sparse_initializer]
        del g.sparse_initializer[:]
        g.initializer.extend(dense)
    for node in constants:
        sparse = next(a for a in node.attribute if a.name == "sparse_value").sparse_tensor
        dense = numpy_helper.from_array(_dense_of_sparse(sparse), sparse.values.name)
        value = onnx.helper.make_attribute("value", dense)
        del node.attribute[:]
        node.attribute.append(value)
    return copy


def constant_of_node(node, graph: Graph, name: str, where: str) -> Tensor:
    """The Const an ONNX ``Constant`` node stands for."""
    if len(node.attribute) != 1:
        raise GraphError(f"{where}: a Constant node needs exactly one value attribute")
    attr = node.attribute[0]
    if attr.name == "value":
        array = numpy_helper.to_array(attr.t)
    elif attr.name == "sparse_value":
        array = _dense_of_sparse(attr.sparse_tensor)
    else:
        value = helper.get_attribute_value(attr)
        kinds = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                 "value_ints": np.int64, "value_string": object, "value_strings": object}
        if attr.name not in kinds:
            raise GraphError(f"{where}: unknown Constant attribute '{attr.name}'")
        array = np.array(value, dtype=kinds[attr.name])
    return make_const(graph, array, name, where)


def attribute_value(attr, kind: str, where: str) -> Any:
    """An ONNX AttributeProto's value in the form the op's attr takes (see schemas)."""
    if attr.ref_attr_name:
        raise GraphError(f"{where}: attribute '{attr.name}' refers to '{attr.ref_attr_name}' outside a function")
    if kind == "TENSOR":
        return _attr_tensor(numpy_helper.to_array(attr.t))
    if kind == "SPARSE_TENSOR":
        return _attr_tensor(_dense_of_sparse(attr.sparse_tensor))
    if kind == "TENSORS":
        return [_attr_tensor(numpy_helper.to_array(t)) for t in attr.tensors]
    if kind == "TYPE_PROTO":
        return attr.tp.SerializeToString()
    if kind == "TYPE_PROTOS":
        return [t.SerializeToString() for t in attr.type_protos]
    value = helper.get_attribute_value(attr)
    if kind in ("FLOATS", "INTS", "STRINGS"):
        return list(value)
    return value


def _attr_tensor(array: np.ndarray) -> Any:
    if array.dtype.name == "bfloat16":
        return tensor_util.make_tensor_proto(array.astype(np.float32), dtypes.bfloat16)
    if array.dtype == object:
        return tensor_util.make_tensor_proto(tensor_util.as_array(array, dtypes.string), dtypes.string)
    return array


def check_known_ops(model, where: str) -> None:
    """GraphError naming the first node whose op gradreg does not know (before building anything)."""
    local = {(f.domain, f.name) for f in model.functions}

    def walk(g):
        for node in g.node:
            if (node.domain, node.op_type) not in local and not (node.op_type == "Constant") \
                    and schema_for(op_type_for(node.domain, node.op_type)) is None:
                raise UnknownOpError(f"{where}: {describe_node(node.name or node.output[0], node.op_type)}: "
                                     f"unknown ONNX op '{node.op_type}' in domain '{node.domain or 'ai.onnx'}'")
            for a in node.attribute:
                for sub in ([a.g] if a.type == 5 else list(a.graphs)):
                    walk(sub)
    walk(model.graph)
