"""Opset conversion: models read are brought to the onnx family's ai.onnx opset, and function
bodies with them, by onnx's version converter (:func:`to_family_opset`,
:func:`converted_function`); a model written at an older opset is converted down from it
(:func:`to_opset`).

The converter does not know model-local functions (their bodies are converted one by one here)
nor sparse tensors (the importer makes them dense first), and cannot take an op below the opset
that introduced it (Gelu is opset 20, RMSNormalization 23, Attention 25): such a node is
replaced by its schema's function body before converting down, and the model gets the lowest
IR version its opsets allow.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import onnx.defs
import onnx.shape_inference
import onnx.version_converter
from onnx import helper, numpy_helper

from gradreg.errors import GraphError, GraphFileError, describe_node
from gradreg_plugins.onnx.schemas import INSTALL_HINT, ONNX_VERSION, OPSET_VERSIONS

__all__ = ["ai_onnx_version", "check_onnx_version", "converted_function", "expand_newer_ops", "first_lines",
           "to_family_opset", "to_opset"]


def check_onnx_version(where: str) -> None:
    """GraphFileError naming ``where`` when the installed onnx does not know the family's opset
    (its converter could not bring models to it)."""
    known = onnx.defs.onnx_opset_version()
    if known < OPSET_VERSIONS[""]:
        raise GraphFileError(f"{where}: gradreg's onnx op family implements ai.onnx opset {OPSET_VERSIONS['']} "
                             f"(onnx {ONNX_VERSION}); the installed onnx {onnx.__version__} only knows opset "
                             f"{known}: {INSTALL_HINT}")


def first_lines(exc: BaseException, n: int = 3) -> str:
    """The first ``n`` non-empty lines of an onnx error, as one line."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return " ".join(lines[:n])


def ai_onnx_version(opset_imports, default: int | None = None) -> int | None:
    """The ai.onnx version among OperatorSetIdProtos (``default`` if none is)."""
    return next((o.version for o in opset_imports if o.domain in ("", "ai.onnx")), default)


def to_family_opset(model: onnx.ModelProto, source: str) -> tuple[onnx.ModelProto, int | None]:
    """The model with its ai.onnx opset converted to the family's; (model, original version)."""
    target = OPSET_VERSIONS[""]
    version = ai_onnx_version(model.opset_import)
    if version is None or version == target:
        return model, version
    if version > target:
        raise GraphError(f"{source}: the model uses ai.onnx opset {version}; gradreg's onnx op family implements "
                         f"opset {target} (regenerate its schema table with a newer onnx package)")
    try:
        converted = onnx.version_converter.convert_version(model, target)
    except Exception as exc:
        raise GraphError(f"{source}: cannot convert the model from ai.onnx opset {version} to {target}: "
                         f"{first_lines(exc)}") from None
    # The converter leaves model-local functions out: convert their bodies one by one.
    converted.functions.extend(converted_function(f, target, source) for f in model.functions)
    return converted, version


def to_opset(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """A model written at the family's opset converted to ai.onnx ``opset``, with the lowest IR
    version that opset allows (GraphError if onnx's converter cannot)."""
    family = OPSET_VERSIONS[""]
    if opset == family:
        return model
    if opset > family:
        raise GraphError(f"cannot write ai.onnx opset {opset}: gradreg's onnx op family implements opset {family}")
    try:
        expanded = expand_newer_ops(model, opset)
    except GraphError as exc:
        raise GraphError(f"cannot convert the written model to opset {opset}: {exc}") from None
    if opset < 18:
        _axes_as_constants(expanded)
    shielded = _shield(expanded, opset)
    try:
        converted = onnx.version_converter.convert_version(shielded, opset)
    except Exception as exc:
        raise GraphError(f"cannot convert the written model to opset {opset}: {first_lines(exc)}") from None
    _unshield(converted)
    converted.ir_version = helper.find_min_ir_version_for(list(converted.opset_import), ignore_unknown=True)
    return converted


# Attribute values a later version gave a meaning (or renamed: GridSample 20's modes): a node
# using one is left to the converter's adapters. (op, attribute) -> {value: version it came in}.
_NEW_VALUES = {
    ("Pad", "mode"): {b"wrap": 19},
    ("Resize", "coordinate_transformation_mode"): {b"half_pixel_symmetric": 19},
    ("GridSample", "mode"): {b"linear": 20, b"cubic": 20},
}
_SHIELD = "gradreg.unchanged"


def _compatible(node: onnx.NodeProto, opset: int) -> bool:
    """Whether ``node`` (an op of the family's opset) means the same at ``opset``: every later
    version only added types, optional inputs the node leaves out or attributes it does not set,
    and no attribute value of the node came in later. The checker then says whether its types
    are ones ``opset`` allows."""
    if not _exists_at(node.op_type, opset):
        return False
    given = {a.name: a for a in node.attribute}
    for (op, name), values in _NEW_VALUES.items():
        if op == node.op_type and name in given and values.get(given[name].s, 0) > opset:
            return False
    base = onnx.defs.get_schema(node.op_type, opset, "")
    present = len([n for n in node.input if n]) and max(i for i, n in enumerate(node.input) if n) + 1
    for version in range(opset + 1, OPSET_VERSIONS[""] + 1):
        later = onnx.defs.get_schema(node.op_type, version, "")
        if [(p.name, str(p.option)) for p in later.outputs] != [(p.name, str(p.option)) for p in base.outputs]:
            return False
        old_inputs = [(p.name, str(p.option)) for p in base.inputs]
        new_inputs = [(p.name, str(p.option)) for p in later.inputs]
        if new_inputs[:len(old_inputs)] != old_inputs or present > len(old_inputs):
            return False
        old_attrs = {n: str(a.type) for n, a in base.attributes.items()}
        new_attrs = {n: str(a.type) for n, a in later.attributes.items()}
        if any(new_attrs.get(n) != t for n, t in old_attrs.items()) or any(n not in old_attrs for n in given):
            return False
    return True


def _shield(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """``model`` (a copy) with the nodes that mean the same at ``opset`` (:func:`_compatible`)
    moved to a domain the converter passes over: it has no down adapter for many ops that only
    gained types (ConstantOfShape, Reshape, Shape, ...) or an attribute (Split's num_outputs).
    Nodes with subgraphs stay, for the converter to see inside."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    moved = False
    for g in _graphs(copy.graph):
        for node in g.node:
            if node.domain in ("", "ai.onnx") and not _subgraphs(node) and _compatible(node, opset):
                node.domain = _SHIELD
                moved = True
    if moved:
        copy.opset_import.append(helper.make_opsetid(_SHIELD, 1))
    return copy


def _unshield(model: onnx.ModelProto) -> None:
    for g in _graphs(model.graph):
        for node in g.node:
            if node.domain == _SHIELD:
                node.domain = ""
    kept = [o for o in model.opset_import if o.domain != _SHIELD]
    del model.opset_import[:]
    model.opset_import.extend(kept)


# Ops that took their axes as an input from opset 18 (an attribute before): the converter moves a
# constant one back; Split's num_outputs (18) becomes explicit sizes.
_AXES_SINCE_18 = frozenset({"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                            "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})


def _axes_as_constants(model: onnx.ModelProto) -> None:
    """Give the reductions whose axes are computed from constants (a Reshape of an initializer, as
    PyTorch writes them) those axes as an initializer, and Splits into ``num_outputs`` parts their
    sizes where the input's length along the axis is known, in subgraphs too: what converting
    below opset 18 needs (the converter moves constant axes back to an attribute)."""
    types = _value_types(onnx.shape_inference.infer_shapes(model))
    outer: dict = {}
    for graph in _graphs(model.graph):
        producers = {o: n for n in graph.node for o in n.output}
        constants = {**outer, **{t.name: t for t in graph.initializer}}
        if graph is model.graph:
            outer = dict(constants)
        nodes: list[onnx.NodeProto] = []
        for node in graph.node:
            if node.domain in ("", "ai.onnx") and node.op_type in _AXES_SINCE_18:
                _constant_axes(node, graph, producers, constants)
            elif node.domain in ("", "ai.onnx") and node.op_type == "Split" and \
                    any(a.name == "num_outputs" for a in node.attribute):
                nodes.extend(_explicit_split(node, graph, constants, types))
            nodes.append(node)
        _replace_nodes(graph.node, nodes)


def _constant_axes(node: onnx.NodeProto, graph: onnx.GraphProto, producers: dict, constants: dict) -> None:
    if len(node.input) > 1 and node.input[1] and node.input[1] not in constants:
        value = _constant_value(node.input[1], producers, constants)
        if value is not None:
            node.input[1] = _add_initializer(graph, constants, value, node.input[1] + "_folded")
    if len(node.input) > 1 and node.input[1] in constants and numpy_helper.to_array(constants[node.input[1]]).size:
        # with axes given, noop_with_empty_axes (opset 18) changes nothing: older versions lack it
        kept = [a for a in node.attribute if a.name != "noop_with_empty_axes"]
        del node.attribute[:]
        node.attribute.extend(kept)


def _constant_value(name: str, producers: dict, constants: dict, depth: int = 0):
    """The value of ``name`` when only initializers (through up to 8 nodes) determine it, else None."""
    if name in constants:
        return numpy_helper.to_array(constants[name])
    node = producers.get(name)
    if node is None or depth > 8 or _subgraphs(node) or node.domain not in ("", "ai.onnx"):
        return None
    inputs = [_constant_value(n, producers, constants, depth + 1) if n else None for n in node.input]
    if any(v is None for n, v in zip(node.input, inputs) if n):
        return None
    # start-up: every ONNX read imports this module; onnx.reference only converting down needs
    from onnx.reference import ReferenceEvaluator
    names = [f"in{i}" if n else "" for i, n in enumerate(node.input)]
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.input[:] = names
    outputs = list(node.output)
    initializers = [numpy_helper.from_array(np.asarray(v), n) for n, v in zip(names, inputs) if n]
    evaluator = ReferenceEvaluator(helper.make_model(
        helper.make_graph([copy], "fold", [], [helper.make_empty_tensor_value_info(o) for o in outputs if o],
                          initializer=initializers),
        opset_imports=[helper.make_opsetid("", OPSET_VERSIONS[""])]))
    results: Any = evaluator.run(None, {})
    return np.asarray(results[[o for o in outputs if o].index(name)])


def _add_initializer(graph: onnx.GraphProto, constants: dict, value, hint: str) -> str:
    name, i = hint, 1
    taken = {o for n in graph.node for o in n.output} | set(constants) | {v.name for v in graph.input}
    while name in taken:
        i += 1
        name = f"{hint}_{i}"
    tensor = numpy_helper.from_array(value, name)
    graph.initializer.append(tensor)
    constants[name] = tensor
    return name


def _explicit_split(node: onnx.NodeProto, graph: onnx.GraphProto, constants: dict, types: dict) -> list:
    """Split-18's ``num_outputs`` as Split-13's sizes: each part ceil(n / parts) long, the last the
    rest, n the input's length along the axis. A constant when n is known, else computed from
    the input's shape by the nodes returned (to go before the Split)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    axis, parts = int(attrs.get("axis", 0)), int(attrs["num_outputs"])
    found = types.get(node.input[0])
    dims = found.tensor_type.shape.dim if found is not None and found.tensor_type.HasField("shape") else None
    known = dims is not None and -len(dims) <= axis < len(dims) and dims[axis].HasField("dim_value")
    hint = f"{node.name or node.output[0]}_sizes"
    added: list[onnx.NodeProto] = []
    if known and dims is not None:
        n = dims[axis].dim_value
        step = -(-n // parts)
        sizes = _add_initializer(graph, constants, np.array([min(step, max(n - i * step, 0)) for i in range(parts)],
                                                            np.int64), hint)
    else:
        sizes, added = _computed_split_sizes(node.input[0], axis, parts, graph, constants, hint)
    inputs = [node.input[0], sizes]
    del node.input[:]
    node.input.extend(inputs)
    kept = [a for a in node.attribute if a.name != "num_outputs"]
    del node.attribute[:]
    node.attribute.extend(kept)
    return added


def _computed_split_sizes(x: str, axis: int, parts: int, graph: onnx.GraphProto, constants: dict,
                          hint: str) -> tuple[str, list[onnx.NodeProto]]:
    """Nodes computing [step] * (parts - 1) + [n - step * (parts - 1)], step = ceil(n / parts)."""
    def const(value: int, name: str) -> str:
        return _add_initializer(graph, constants, np.array([value], np.int64), f"{hint}_{name}")
    bounds: dict[str, Any] = {"start": axis} | ({} if axis == -1 else {"end": axis + 1})
    n, padded, step, head, last, sizes = (f"{hint}_{k}" for k in ("n", "padded", "step", "head", "last", "all"))
    nodes = [helper.make_node("Shape", [x], [n], **bounds),
             helper.make_node("Add", [n, const(parts - 1, "k1")], [padded]),
             helper.make_node("Div", [padded, const(parts, "k")], [step]),
             helper.make_node("Mul", [step, const(parts - 1, "rest")], [head]),
             helper.make_node("Sub", [n, head], [last]),
             helper.make_node("Concat", [step] * (parts - 1) + [last], [sizes], axis=0)]
    for i, made in enumerate(nodes):
        made.name = f"{hint}/{i}"
    return sizes, nodes


def expand_newer_ops(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """``model`` (a copy) with every ai.onnx node whose op has no version at ``opset`` replaced by
    its schema's function body (at the family's opset), in subgraphs and functions too;
    GraphError naming the node when the op has none."""
    types = _value_types(onnx.shape_inference.infer_shapes(model))
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    fresh = itertools.count()
    for g in _graphs(copy.graph):
        _replace_nodes(g.node, _expanded(list(g.node), opset, types, fresh))
    for function in copy.functions:
        _replace_nodes(function.node, _expanded(list(function.node), opset, types, fresh))
        for g in (sub for node in function.node for sub in _subgraphs(node)):
            for inner in _graphs(g):
                _replace_nodes(inner.node, _expanded(list(inner.node), opset, types, fresh))
    return copy


def _replace_nodes(field, nodes: list[onnx.NodeProto]) -> None:
    del field[:]
    field.extend(nodes)


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [g for a in node.attribute for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))]


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for sub in _subgraphs(node):
            yield from _graphs(sub)


def _value_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Every typed value of the (shape-inferred) model, subgraphs included, by name."""
    types = {}
    for g in _graphs(model.graph):
        for v in list(g.input) + list(g.value_info) + list(g.output):
            if v.type.WhichOneof("value") is not None:
                types[v.name] = v.type
        for t in g.initializer:
            types[t.name] = helper.make_tensor_type_proto(t.data_type, list(t.dims))
    return types


def _exists_at(op_type: str, opset: int) -> bool:
    try:
        onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return False
    return True


def _expanded(nodes: list[onnx.NodeProto], opset: int, types: dict, fresh: Iterator[int]) -> list[onnx.NodeProto]:
    out: list[onnx.NodeProto] = []
    for node in nodes:
        if node.domain in ("", "ai.onnx") and not _exists_at(node.op_type, opset):
            out.extend(_expanded(_body_nodes(node, types, next(fresh)), opset, types, fresh))
        else:
            out.append(node)
    return out


def _function_body(node: onnx.NodeProto, types: dict) -> onnx.FunctionProto:
    """The node's op's function body at the family's opset (built for its attributes and input
    types when the schema's body depends on them)."""
    where = describe_node(node.name or node.output[0], node.op_type)
    schema: Any = onnx.defs.get_schema(node.op_type, OPSET_VERSIONS[""], "")   # onnx's stubs lack has_function
    if schema.has_function:
        body = schema.function_body
    elif schema.has_context_dependent_function:
        input_types = [types.get(name, onnx.TypeProto()).SerializeToString() if name else
                       onnx.TypeProto().SerializeToString() for name in node.input]
        try:
            body = onnx.FunctionProto.FromString(
                schema.get_context_dependent_function(node.SerializeToString(), input_types))
        except Exception as exc:
            raise GraphError(f"{where}: onnx cannot build the op's function body: {first_lines(exc)}") from None
    else:
        raise GraphError(f"{where}: ai.onnx {node.op_type} has no version at the opset asked for and no "
                         f"function body to write it with")
    return converted_function(body, OPSET_VERSIONS[""], where)


def _body_nodes(node: onnx.NodeProto, types: dict, serial: int) -> list[onnx.NodeProto]:
    """The nodes of the node's function body, wired to the node's inputs and outputs (other values
    renamed apart), with the node's attributes (or the schema's defaults) bound."""
    body = _function_body(node, types)
    schema = onnx.defs.get_schema(node.op_type, OPSET_VERSIONS[""], "")
    attrs = {name: a.default_value for name, a in schema.attributes.items() if a.default_value.type}
    attrs.update({a.name: a for a in node.attribute})
    names = dict(zip(body.input, list(node.input) + [""] * len(body.input)))
    names.update(zip(body.output, node.output))
    prefix = f"{node.name or node.output[0]}/expanded_{node.op_type}_{serial}/"

    def renamed(name: str) -> str:
        return names.setdefault(name, prefix + name) if name else ""
    out = []
    for index, inner in enumerate(body.node):
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.name = f"{prefix}{inner.name or inner.op_type}_{index}"
        copy.input[:] = [renamed(n) for n in inner.input]
        copy.output[:] = [renamed(n) for n in inner.output]
        bound = []
        for a in inner.attribute:
            if not a.ref_attr_name:
                bound.append(a)
            elif a.ref_attr_name in attrs:
                value = onnx.AttributeProto()
                value.CopyFrom(attrs[a.ref_attr_name])
                value.name = a.name
                bound.append(value)
        del copy.attribute[:]
        copy.attribute.extend(bound)
        out.append(copy)
    return out


def _defined_outputs_only(body: onnx.FunctionProto) -> onnx.FunctionProto:
    made = {name for node in body.node for name in node.output} | set(body.input)
    if all(name in made for name in body.output):
        return body
    copy = onnx.FunctionProto()
    copy.CopyFrom(body)
    del copy.output[:]
    copy.output.extend(name if name in made else "" for name in body.output)
    return copy


def converted_function(function: onnx.FunctionProto, target: int, source: str) -> onnx.FunctionProto:
    """A model-local function (or an op's function body) with its body converted to ai.onnx opset
    ``target``; attributes that refer to the function's own (which the converter drops) are put
    back, and outputs no node computes (a node's absent optional outputs, in a body built for
    it) are left unnamed, as the converter refuses undefined outputs."""
    version = ai_onnx_version(function.opset_import, target)
    if version == target:
        return function
    function = _defined_outputs_only(function)
    untyped = [helper.make_value_info(n, onnx.TypeProto()) for n in function.input]
    outputs = [helper.make_value_info(n, onnx.TypeProto()) for n in function.output]
    body = helper.make_model(helper.make_graph(list(function.node), function.name, untyped, outputs),
                             opset_imports=list(function.opset_import))
    try:
        nodes = onnx.version_converter.convert_version(body, target).graph.node
    except Exception as exc:
        raise GraphError(f"{source}: cannot convert function {function.domain}::{function.name} from ai.onnx "
                         f"opset {version} to {target}: {first_lines(exc)}") from None
    refs = {tuple(n.output): [a for a in n.attribute if a.ref_attr_name] for n in function.node}
    out = onnx.FunctionProto()
    out.CopyFrom(function)
    del out.node[:]
    for node in nodes:
        copy = out.node.add()
        copy.CopyFrom(node)
        for ref in refs.get(tuple(node.output), ()):
            kept = [a for a in copy.attribute if a.name != ref.name]
            del copy.attribute[:]
            copy.attribute.extend(kept + [ref])
    for opset in out.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = target
    return out
