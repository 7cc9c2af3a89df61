"""Write a SavedModel that keeps a model's signatures and adds one computing gradients.

    >>> m = gradreg.load_saved_model("export_dir")
    >>> grads = signature_gradients(m, ["output_0"], ["image", "conv1/kernel"])
    >>> save_gradient_saved_model(m, grads, "with_gradients")       # signature "gradients"

then, in TensorFlow, ``tf.saved_model.load("with_gradients").signatures["gradients"](image=x)``
returns ``{"output_0": ..., "image_grad": ..., "conv1/kernel_grad": ...}``, and
TensorFlow Serving serves it like any signature. The original signatures are untouched.

The new signature is written the way TensorFlow writes one (TF2 SavedModels, with an object
graph): a library function (the flat gradient graph of gradreg.formats.signature_graph, whose
VarHandleOps become resource arguments: the variables it captures), a StatefulPartitionedCall
of it in the MetaGraph's graph fed by new Placeholders ``<name>_<input>``, a SignatureDef
naming those, and in the object graph a concrete function bound to the variables' nodes, listed
in the signature map. Inputs are the original signature's; outputs are its outputs and the
gradients. ``variables/`` holds the model's current values (as :meth:`LoadedSavedModel.save`
writes them); ``fingerprint.pb`` is left out, as it would no longer match.
"""
from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any, cast

from gradreg.build.functions import HANDLE_DTYPES_ATTR, FunctionGraph, graph_to_function_def
from gradreg.errors import FileWriteError, SavedModelError
from gradreg.formats.atomic import atomic_write
from gradreg.formats.model_kinds import SAVED_MODEL_PB, SAVED_MODEL_PBTXT
from gradreg.formats.saved_model import read_saved_model
from gradreg.formats.saved_model_loader import captured_variables
from gradreg.formats.signature_graph import SignatureGraph
from gradreg.model import attrs as attr_util
from gradreg.model.graph import Tensor, import_graph_def
from gradreg.model.shapes import TensorShape
from gradreg.proto import (
    function_pb2,
    meta_graph_pb2,
    node_def_pb2,
    saved_object_graph_pb2,
    struct_pb2,
    tensor_shape_pb2,
    types_pb2,
)
from gradreg.training.variables import VARIABLE_OP_TYPES

FINGERPRINT = "fingerprint.pb"
PREDICT_METHOD = "tensorflow/serving/predict"


def save_gradient_saved_model(model: Any, flat: SignatureGraph, export_dir: str | os.PathLike[str],
                              name: str = "gradients") -> str:
    """Write a copy of the SavedModel of ``model`` (a LoadedSavedModel) to ``export_dir`` with
    one more signature, ``name``, computing ``flat``'s fetches (its outputs and gradients, by
    name) from its inputs (see the module docstring). Returns the directory written."""
    target = os.fspath(export_dir)
    _check_target(model, target, name)
    saved = read_saved_model(model.path)
    meta = _meta_graph(saved, model.tags, model.path)
    if not meta.object_graph_def.nodes:
        raise SavedModelError(f"{model.path}: a TF1 SavedModel (no object graph): gradreg adds signatures to TF2 "
                              "SavedModels only; write the gradient graph as a GraphDef (-o grad.pb) instead")
    bound = _bound_variables(model, flat)
    function, needed = _gradient_function(flat, bound, _function_name(meta, name))
    call = _add_call(meta, flat, function, bound, name)
    _add_signature(meta, flat, call, name)
    _add_concrete_function(meta, flat, function, bound, name)
    _add_op_definitions(meta, function, model.graph)
    _add_functions(meta.graph_def.library, [function, *needed.function])
    model.save(target)
    for stale in (FINGERPRINT, SAVED_MODEL_PBTXT):
        path = os.path.join(target, stale)
        if os.path.exists(path):
            os.remove(path)
    atomic_write(os.path.join(target, SAVED_MODEL_PB), saved.SerializeToString(deterministic=True))
    return target


def _check_target(model: Any, target: str, name: str) -> None:
    if os.path.exists(target) and os.path.abspath(target) == os.path.abspath(model.path):
        raise FileWriteError(f"{target}: is the SavedModel itself; write the gradient SavedModel to a new directory")
    if os.path.exists(target) and (not os.path.isdir(target) or os.listdir(target)):
        raise FileWriteError(f"{target}: exists and is not an empty directory")
    if name in model.signatures:
        raise SavedModelError(f"{model.path}: already has a signature '{name}'; choose another name")


def _meta_graph(saved: Any, tags: Sequence[str], where: str) -> meta_graph_pb2.MetaGraphDef:
    for meta in saved.meta_graphs:
        if set(meta.meta_info_def.tags) == set(tags):
            return cast("meta_graph_pb2.MetaGraphDef", meta)
    raise SavedModelError(f"{where}: no MetaGraph tagged {sorted(tags)}")


def _bound_variables(model: Any, flat: SignatureGraph) -> list[tuple[str, str, int]]:
    """(variable name in ``flat``, its op in the model's graph, its object-graph node) for every
    variable the gradient graph reads, in the order they are captured."""
    nodes = captured_variables(model.graph, model.meta_graph.object_graph_def)
    needed = {op.name for op in flat.graph.get_operations() if op.type in VARIABLE_OP_TYPES}
    out = []
    for name in sorted(needed):
        source = flat.model_ops[name]
        if source not in nodes:
            raise SavedModelError(f"{model.path}: variable '{name}' (node '{source.name}') is captured by no "
                                  "function of the object graph, so a new signature cannot capture it")
        out.append((name, source.name, nodes[source]))
    return out


def _function_name(meta: meta_graph_pb2.MetaGraphDef, name: str) -> str:
    taken = {f.signature.name for f in meta.graph_def.library.function}
    numbers = [int(m.group(1)) for f in taken for m in [re.search(r"_(\d+)$", f)] if m]
    base = re.sub(r"[^A-Za-z0-9_]", "_", name)
    number = max(numbers, default=0) + 1
    while f"__inference_signature_wrapper_{base}_{number}" in taken:
        number += 1
    return f"__inference_signature_wrapper_{base}_{number}"


def _gradient_function(flat: SignatureGraph, bound: list[tuple[str, str, int]],
                       fname: str) -> tuple[function_pb2.FunctionDef, function_pb2.FunctionDefLibrary]:
    """The flat graph as a FunctionDef: inputs by sorted name, then the variables' handles;
    outputs by sorted name (TensorFlow flattens a signature's keyword inputs and dict of outputs
    in sorted key order); and the library functions it runs (loop bodies, some of them made for
    the gradients)."""
    graph_def = flat.graph_def()
    resources = {name for name, _, _ in bound}
    for node in graph_def.node:
        if node.op in VARIABLE_OP_TYPES and node.name in resources:
            _as_resource_argument(node)
    body = import_graph_def(graph_def, source=f"gradient signature '{fname}'", graph=FunctionGraph())
    fetches = flat.fetches
    inputs = [body.get_tensor(flat.inputs[k].name) for k in sorted(flat.inputs)]
    inputs += [body.get_tensor(f"{name}:0") for name, _, _ in bound]
    outputs = [body.get_tensor(fetches[k].name) for k in sorted(fetches)]
    fdef = graph_to_function_def(body, fname, inputs, outputs, output_names=["identity"] * len(outputs))
    for arg, (name, _, _) in zip(fdef.signature.input_arg[len(flat.inputs):], bound):
        variable = flat.variables[name]
        for entry in arg.handle_data:
            entry.shape.CopyFrom(_shape_proto(variable.shape))
    return fdef, graph_def.library


def _add_functions(library: function_pb2.FunctionDefLibrary, functions: Sequence[function_pb2.FunctionDef]) -> None:
    """Add the functions ``library`` lacks; one it has under the same name must be the same."""
    known = {f.signature.name: f for f in library.function}
    for fdef in functions:
        existing = known.get(fdef.signature.name)
        if existing is None:
            library.function.append(fdef)
            known[fdef.signature.name] = fdef
        elif existing.SerializeToString(deterministic=True) != fdef.SerializeToString(deterministic=True):
            raise SavedModelError(f"function '{fdef.signature.name}' of the gradients differs from the SavedModel's "
                                  "function of that name")


def _as_resource_argument(node: node_def_pb2.NodeDef) -> None:
    dtype = attr_util.get_entry(node.attr, "dtype").type
    kept = [(e.key, e.value) for e in node.attr if e.key == "dtype"]
    del node.attr[:]
    node.op = "Placeholder"
    for key, value in kept:
        entry = node.attr.add(key=key)
        entry.value.CopyFrom(value)
    attr_util.get_entry(node.attr, "dtype").type = types_pb2.DT_RESOURCE
    entry = node.attr.add(key=HANDLE_DTYPES_ATTR)
    entry.value.list.type.append(dtype)
    entry = node.attr.add(key="shape")
    entry.value.shape.CopyFrom(tensor_shape_pb2.TensorShapeProto())


def _shape_proto(shape: TensorShape | None) -> tensor_shape_pb2.TensorShapeProto:
    proto = tensor_shape_pb2.TensorShapeProto()
    dims = None if shape is None else shape.dims
    if dims is None:
        proto.unknown_rank = True
        return proto
    for d in dims:
        proto.dim.add(size=-1 if d is None else int(d))
    return proto


def _unique_node(base: str, taken: set[str]) -> str:
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def _add_call(meta: meta_graph_pb2.MetaGraphDef, flat: SignatureGraph, function: function_pb2.FunctionDef,
              bound: list[tuple[str, str, int]], name: str) -> dict[str, str]:
    """Placeholders for the inputs and a StatefulPartitionedCall of ``function`` in the
    MetaGraph's graph; {input or fetch name: tensor name in that graph}."""
    graph_def = meta.graph_def
    taken = {n.name for n in graph_def.node}
    tensors: dict[str, str] = {}
    call_inputs = []
    for key in sorted(flat.inputs):
        t = flat.inputs[key]
        node = graph_def.node.add(name=_unique_node(f"{name}_{key}", taken), op="Placeholder")
        attr_util.set_entry(node.attr, "dtype", attr_util.to_attr_value(t.known_dtype.base_dtype, "type"))
        node.attr.add(key="shape").value.shape.CopyFrom(_shape_proto(t.shape))
        tensors[key] = f"{node.name}:0"
        call_inputs.append(node.name)
    call_inputs += [source for _, source, _ in bound]
    call = graph_def.node.add(name=_unique_node("StatefulPartitionedCall", taken),
                              op="StatefulPartitionedCall")
    call.input.extend(call_inputs)
    call.attr.add(key="Tin").value.list.type.extend(a.type for a in function.signature.input_arg)
    call.attr.add(key="Tout").value.list.type.extend(a.type for a in function.signature.output_arg)
    call.attr.add(key="f").value.func.name = function.signature.name
    for key in ("config", "config_proto", "executor_type"):
        call.attr.add(key=key).value.s = b""
    for i, key in enumerate(sorted(flat.fetches)):
        tensors[key] = f"{call.name}:{i}"
    return tensors


def _tensor_info(t: Tensor, name: str) -> meta_graph_pb2.TensorInfo:
    info = meta_graph_pb2.TensorInfo(name=name, dtype=cast("types_pb2.DataType", t.known_dtype.base_dtype.enum))
    info.tensor_shape.CopyFrom(_shape_proto(t.shape))
    return info


def _add_signature(meta: meta_graph_pb2.MetaGraphDef, flat: SignatureGraph, tensors: dict[str, str], name: str) -> None:
    entry = meta.signature_def.add(key=name)
    definition = entry.value
    definition.method_name = PREDICT_METHOD
    for key, t in flat.inputs.items():
        definition.inputs.add(key=key).value.CopyFrom(_tensor_info(t, tensors[key]))
    for key, t in flat.fetches.items():
        definition.outputs.add(key=key).value.CopyFrom(_tensor_info(t, tensors[key]))


def _spec(t: Tensor, name: str) -> struct_pb2.StructuredValue:
    value = struct_pb2.StructuredValue()
    spec = value.tensor_spec_value
    spec.name = name
    spec.shape.CopyFrom(_shape_proto(t.shape))
    spec.dtype = cast("types_pb2.DataType", t.known_dtype.base_dtype.enum)
    return value


def _keyword_specs(tensors: dict[str, Tensor]) -> struct_pb2.StructuredValue:
    value = struct_pb2.StructuredValue()
    for key in sorted(tensors):
        value.dict_value.fields.add(key=key).value.CopyFrom(_spec(tensors[key], key))
    return value


def _add_concrete_function(meta: meta_graph_pb2.MetaGraphDef, flat: SignatureGraph,
                           function: function_pb2.FunctionDef, bound: list[tuple[str, str, int]], name: str) -> None:
    objects = meta.object_graph_def
    fname = function.signature.name
    concrete = objects.concrete_functions.add(key=fname).value
    concrete.bound_inputs.extend(node for _, _, node in bound)
    args = concrete.canonicalized_input_signature.tuple_value.values
    args.add().tuple_value.SetInParent()
    args.add().CopyFrom(_keyword_specs(flat.inputs))
    concrete.output_signature.CopyFrom(_keyword_specs(flat.fetches))
    node = objects.nodes.add()
    bare = node.bare_concrete_function
    bare.concrete_function_name = fname
    bare.argument_keywords.extend(sorted(flat.inputs))
    bare.allowed_positional_arguments = 1
    _function_spec(bare.function_spec, sorted(flat.inputs))
    signature_map = _signature_map(objects)
    signature_map.children.add(node_id=len(objects.nodes) - 1, local_name=name)


def _signature_map(objects: saved_object_graph_pb2.SavedObjectGraph) -> saved_object_graph_pb2.SavedObject:
    for child in objects.nodes[0].children:
        node = objects.nodes[child.node_id]
        if child.local_name == "signatures" and node.WhichOneof("kind") == "user_object":
            return node
    node = objects.nodes.add()
    node.user_object.identifier = "signature_map"
    node.user_object.version.producer = 1
    node.user_object.version.min_consumer = 1
    objects.nodes[0].children.add(node_id=len(objects.nodes) - 1, local_name="signatures")
    return node


def _function_spec(spec: saved_object_graph_pb2.FunctionSpec, keywords: list[str]) -> None:
    """A keyword-only argument spec, as TensorFlow writes for a signature function."""
    fields = spec.fullargspec.named_tuple_value
    fields.name = "FullArgSpec"
    for key in ("args", "varargs", "varkw", "defaults", "kwonlyargs", "kwonlydefaults", "annotations"):
        entry = fields.values.add(key=key)
        if key == "args":
            entry.value.list_value.SetInParent()
        elif key == "kwonlyargs":
            entry.value.list_value.values.extend(struct_pb2.StructuredValue(string_value=k) for k in keywords)
        elif key == "annotations":
            entry.value.dict_value.SetInParent()
        else:
            entry.value.none_value.SetInParent()
    spec.input_signature.none_value.SetInParent()


def _add_op_definitions(meta: meta_graph_pb2.MetaGraphDef, function: function_pb2.FunctionDef, graph: Any) -> None:
    """The OpDefs of op types the function uses that the MetaGraph's op list lacks."""
    op_list = meta.meta_info_def.stripped_op_list
    if not op_list.op:
        return
    listed = {op.name for op in op_list.op}
    for op_type in sorted({node.op for node in function.node_def} - listed):
        definition = graph.definition_for(op_type)
        if definition is not None:
            op_list.op.append(definition.op_def)
    _sort_ops(op_list.op)


def _sort_ops(ops: Any) -> None:
    ordered = sorted(ops, key=lambda o: o.name)
    copies = [type(o)() for o in ordered]
    for copy, original in zip(copies, ordered):
        copy.CopyFrom(original)
    del ops[:]
    ops.extend(copies)


__all__ = ["save_gradient_saved_model"]
