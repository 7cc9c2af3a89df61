"""Freeze a SavedModel signature: one GraphDef whose variables are constants.

    >>> graph_def = freeze_signature(gradreg.load_saved_model("export_dir"), "serving_default")

The frozen graph holds what the signature's outputs need. Every variable becomes a Const of
its current value (in the model's session): the VarHandleOp (or VariableV2) is replaced by a
Const of the same name, its reads become Identity nodes, and the functions the signature calls
take the value where they took the variable's handle (a resource argument becomes an argument
of the variable's dtype; ReadVariableOp -> Identity, ResourceGather -> GatherV2, VariableShape
-> Shape inside them, through nested calls, If, Case and While). The graph is then fed by the
signature's input names (the Placeholders are renamed ``x`` for input ``x``) and fetched by its
output names (an Identity named after each output), so ``x:0`` and ``logits:0`` work in
TensorFlow and in gradreg. A signature that assigns a variable cannot be frozen (an error names
the node). The custom gradients TensorFlow saved with the model's functions come along (their
registrations and gradient functions), so the frozen graph differentiates as the model does.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import numpy as np

from gradreg.autodiff.stored_gradients import captured_tensors
from gradreg.build.functions import HANDLE_DTYPES_ATTR, call_attrs_of, function_graph, graph_to_function_def
from gradreg.errors import ExecutionError, GradregError, GraphError, describe_node
from gradreg.model import attrs as attr_util
from gradreg.model import dtypes
from gradreg.model.dtypes import DType
from gradreg.model.graph import FunctionLibrary, Graph, Operation, import_graph_def
from gradreg.model.tensor_util import make_tensor_proto
from gradreg.model.traversal import needed_ops
from gradreg.proto import attr_value_pb2, function_pb2, graph_pb2, node_def_pb2, types_pb2
from gradreg.training.variables import variable_from_op

_CALLS = ("StatefulPartitionedCall", "PartitionedCall")
_VARIABLE_WRITES = ("Assign", "AssignAdd", "AssignSub", "AssignVariableOp", "AssignAddVariableOp",
                    "AssignSubVariableOp", "ScatterAdd", "ScatterSub", "ScatterUpdate", "ResourceScatterAdd",
                    "ResourceScatterSub", "ResourceScatterUpdate", "DestroyResourceOp")
_LOOPS = ("While", "StatelessWhile")
_VARIABLES = ("VarHandleOp", "VariableV2")
_BRANCHING = ("If", "StatelessIf", "Case", "StatelessCase")


class FreezeError(GraphError):
    """A graph cannot be frozen: a variable is written, or used by an op gradreg cannot rewrite."""


def freeze_signature(model: Any, signature: str | None = None) -> graph_pb2.GraphDef:
    """The signature ``signature`` (default: ``serving_default``, or the only one) of a
    :class:`~gradreg.formats.saved_model_loader.LoadedSavedModel` as a frozen GraphDef (see
    the module docstring)."""
    chosen = model.signatures[_default_signature(model, signature)]
    inputs, outputs = dict(chosen.inputs), dict(chosen.outputs)
    graph: Graph = model.graph
    fed = set(inputs.values())
    ops = sorted(set(needed_ops([t.op for t in outputs.values()], fed)) | {t.op for t in fed}, key=lambda o: o.id)
    frozen = freeze_ops(graph, ops, {op: _current_value(model, op) for op in ops if op.type in _VARIABLES})
    _name_inputs_and_outputs(frozen, {k: t.name for k, t in inputs.items()},
                             {k: (t.name, t.known_dtype.base_dtype) for k, t in outputs.items()})
    return frozen


def freeze_ops(graph: Graph, ops: Sequence[Operation], values: dict[Operation, np.ndarray]) -> graph_pb2.GraphDef:
    """``ops`` of ``graph`` (in graph order) as a GraphDef in which each variable op is a Const
    of its value in ``values`` (see the module docstring), with the functions they run."""
    rewriter = _Rewriter(graph.library, values)
    frozen = graph_pb2.GraphDef()
    frozen.versions.CopyFrom(graph.versions)
    for op in ops:
        frozen.node.extend(rewriter.rewrite(op))
    frozen.library.CopyFrom(rewriter.library())
    _keep_registered_gradients(graph.library, frozen)
    return frozen


def _current_value(model: Any, op: Operation) -> np.ndarray:
    """The value the variable ``op`` has in the model's session (also for a variable that is no
    model variable, as a TF1 local variable the main op initializes)."""
    variable = variable_from_op(op, collections=[])
    try:
        return np.asarray(model.session.run(variable))
    except ExecutionError:
        raise FreezeError(f"{describe_node(op.name, op.type)}: the variable has no value in the model's session "
                          "(neither restored nor initialized), so it cannot become a constant") from None


def _default_signature(model: Any, signature: str | None) -> str:
    if signature is not None:
        return signature
    names: list[str] = sorted(model.signatures)
    if "serving_default" in names:
        return "serving_default"
    if len(names) == 1:
        return names[0]
    raise GradregError(f"{model.path}: choose a signature to freeze: {names}")


class _Rewriter:
    """Rewrites nodes so that variables are values: per node, a NodeDef (or several)."""

    def __init__(self, library: FunctionLibrary, values: dict[Operation, np.ndarray]):
        self.source = library
        self.values = values
        self.converted: dict[str, DType] = {}      # tensor name -> dtype, for former resources
        self.functions: dict[str, function_pb2.FunctionDef] = {}
        # (function, call attrs, caller, {argument index: dtype of the variable passed there})
        self.pending: list[tuple[str, dict[str, Any], str, dict[int, DType]]] = []

    # -- nodes ------------------------------------------------------------------------------
    def rewrite(self, op: Operation) -> list[node_def_pb2.NodeDef]:
        """The node(s) that replace ``op``."""
        node = node_def_pb2.NodeDef()
        node.CopyFrom(op.node_def)
        handler = _HANDLERS.get(op.type)
        if handler is not None:
            return handler(self, op, node)
        if op.type in _VARIABLE_WRITES:
            raise FreezeError(f"{describe_node(op.name, op.type)} writes a variable: a frozen graph cannot")
        if self._retype_inputs(op, node):
            _remove_attr(node, "_output_shapes")      # recorded for the handles, not the values
        if op.type in _LOOPS:
            for i, t in enumerate(op.inputs):
                if t.name in self.converted:
                    self.converted[op.outputs[i].name] = self.converted[t.name]
                    _unknown_shape(node, "output_shapes", i)
        self._queue_functions(op, node)
        return [node]

    def _retype_inputs(self, op: Operation, node: node_def_pb2.NodeDef) -> bool:
        """Set the type attrs of inputs that were resources to the variables' dtypes; whether
        there were any."""
        changed = [i for i, t in enumerate(op.inputs) if t.name in self.converted]
        if not changed:
            return False
        definition = op.definition
        if definition is None:
            raise FreezeError(f"{describe_node(op.name, op.type)} uses a variable and its op type is unknown")
        index = 0
        for arg in definition.input_args:
            count = len(op.get_attr(arg.type_list_attr)) if arg.type_list_attr else \
                int(op.get_attr(arg.number_attr)) if arg.number_attr else 1
            for k in range(count):
                if index + k in changed:
                    dtype = self.converted[op.inputs[index + k].name]
                    self._retype(op, node, arg.type_attr, arg.type_list_attr, k, dtype)
            index += count
        return True

    def _retype(self, op: Operation, node: node_def_pb2.NodeDef, type_attr: str, list_attr: str, k: int,
                dtype: DType) -> None:
        if list_attr:
            entry = attr_util.get_entry(node.attr, list_attr)
            entry.list.type[k] = cast("types_pb2.DataType", dtype.enum)
        elif type_attr:
            attr_util.get_entry(node.attr, type_attr).type = cast("types_pb2.DataType", dtype.enum)
        else:
            raise FreezeError(f"{describe_node(op.name, op.type)} takes a variable's handle; gradreg cannot "
                              "rewrite it to take the variable's value")

    def _queue_functions(self, op: Operation, node: node_def_pb2.NodeDef) -> None:
        # If and Case pass their inputs after the branch selector to the branch functions.
        offset = 1 if op.type in _BRANCHING else 0
        passed = {i - offset: self.converted[t.name] for i, t in enumerate(op.inputs)
                  if t.name in self.converted and i >= offset}
        caller = describe_node(op.name, op.type)
        for entry in node.attr:
            kind = entry.value.WhichOneof("value")
            funcs = [entry.value.func] if kind == "func" else list(entry.value.list.func) if kind == "list" else []
            for func in funcs:
                self.pending.append((func.name, attr_util.entries_to_dict(func.attr), caller, passed))
        if op.type in op.graph.library and op.type not in _CALLS:
            self.pending.append((op.type, call_attrs_of(op), caller, passed))

    # -- functions --------------------------------------------------------------------------
    def library(self) -> function_pb2.FunctionDefLibrary:
        while self.pending:
            name, attrs, caller, passed = self.pending.pop()
            if name in self.functions or name not in self.source:
                continue
            self.functions[name] = self._rewrite_function(name, attrs, caller, passed)
        out = function_pb2.FunctionDefLibrary()
        out.function.extend(self.functions[n] for n in sorted(self.functions))
        return out

    def _rewrite_function(self, name: str, attrs: dict[str, Any], caller: str,
                          passed: dict[int, DType]) -> function_pb2.FunctionDef:
        body = function_graph(self.source, name, attrs, caller)
        for index, dtype in passed.items():
            arg = body.inputs[index].op if index < len(body.inputs) else None
            if arg is not None and not arg.has_attr(HANDLE_DTYPES_ATTR):
                arg.set_attr(HANDLE_DTYPES_ATTR, [dtype], "list(type)")
        inner = _Rewriter(self.source, {})
        inner.functions, inner.pending = self.functions, self.pending
        graph_def = graph_pb2.GraphDef()
        for op in body.get_operations():
            graph_def.node.extend(inner.rewrite(op))
        rebuilt = import_graph_def(graph_def, source=f"frozen function '{name}'", library=self.source)
        original = self.source.get(name)
        assert original is not None
        # what the custom gradients saved for its nodes capture stays, needed by the outputs or not
        kept = [rebuilt.get_operation(t.split(":")[0]) for t in captured_tensors(self.source, name)
                if t.split(":")[0] in rebuilt]
        return graph_to_function_def(
            rebuilt, name, [rebuilt.get_tensor(t.name) for t in body.inputs],
            [rebuilt.get_tensor(t.name) for t in body.outputs],
            [rebuilt.get_operation(o.name) for o in body.control_outputs],
            [arg.name for arg in original.signature.output_arg] if len(original.signature.output_arg) ==
            len(body.outputs) else None, keep=kept)


def _variable_dtype(op: Operation) -> DType:
    dtype: DType = op.get_attr("dtype")
    return dtype.base_dtype


def _const(node: node_def_pb2.NodeDef, value: np.ndarray, dtype: DType) -> node_def_pb2.NodeDef:
    out = node_def_pb2.NodeDef(name=node.name, op="Const", device=node.device)
    out.input.extend(i for i in node.input if i.startswith("^"))
    attr_util.set_entry(out.attr, "dtype", attr_util.to_attr_value(dtype, "type"))
    attr_util.set_entry(out.attr, "value", attr_value_pb2.AttrValue(tensor=make_tensor_proto(value, dtype)))
    return out


def _variable(rw: _Rewriter, op: Operation, node: node_def_pb2.NodeDef) -> list[node_def_pb2.NodeDef]:
    value = rw.values.get(op)
    if value is None:
        raise FreezeError(f"{describe_node(op.name, op.type)}: a variable of the graph that the SavedModel does "
                          "not restore; its value is unknown")
    dtype = _variable_dtype(op)
    if op.type == "VarHandleOp":
        rw.converted[op.outputs[0].name] = dtype
    return [_const(node, value, dtype)]


def _placeholder(rw: _Rewriter, op: Operation, node: node_def_pb2.NodeDef) -> list[node_def_pb2.NodeDef]:
    if op.outputs[0].known_dtype.base_dtype is not dtypes.resource:
        return [node]
    found = op.get_attr(HANDLE_DTYPES_ATTR) if op.has_attr(HANDLE_DTYPES_ATTR) else []
    if not found:
        raise FreezeError(f"{describe_node(op.name, op.type)}: a resource argument without handle data (the "
                          "dtype of the variable it refers to): cannot freeze it")
    dtype = found[0].base_dtype
    rw.converted[op.outputs[0].name] = dtype
    attr_util.get_entry(node.attr, "dtype").type = cast("types_pb2.DataType", dtype.enum)
    for key in (HANDLE_DTYPES_ATTR, "shape", "_output_shapes"):    # the handle's (a scalar), not the value's
        _remove_attr(node, key)
    return [node]


def _remove_attr(node: node_def_pb2.NodeDef, key: str) -> None:
    for i, entry in enumerate(node.attr):
        if entry.key == key:
            del node.attr[i]
            return


def _unknown_shape(node: node_def_pb2.NodeDef, key: str, index: int) -> None:
    entry = attr_util.get_entry(node.attr, key)
    if entry is not None and index < len(entry.list.shape):
        entry.list.shape[index].Clear()
        entry.list.shape[index].unknown_rank = True


def _converted_input(rw: _Rewriter, op: Operation) -> DType | None:
    return rw.converted.get(op.inputs[0].name) if op.inputs else None


def _replacement(op_type: str, node: node_def_pb2.NodeDef, attrs: dict[str, tuple[Any, str]],
                 data_inputs: bool = True) -> node_def_pb2.NodeDef:
    """A node of ``op_type`` in place of ``node``: same name, device, inputs (only the control
    inputs unless ``data_inputs``), with ``attrs`` ((value, kind) by name)."""
    out = node_def_pb2.NodeDef(name=node.name, op=op_type, device=node.device)
    out.input.extend(i for i in node.input if data_inputs or i.startswith("^"))
    for key, (value, kind) in attrs.items():
        attr_util.set_entry(out.attr, key, attr_util.to_attr_value(value, kind))
    return out


def _read(rw: _Rewriter, op: Operation, node: node_def_pb2.NodeDef) -> list[node_def_pb2.NodeDef]:
    dtype = _converted_input(rw, op)
    return [node if dtype is None else _replacement("Identity", node, {"T": (dtype, "type")})]


def _variable_shape(rw: _Rewriter, op: Operation, node: node_def_pb2.NodeDef) -> list[node_def_pb2.NodeDef]:
    dtype = _converted_input(rw, op)
    if dtype is None:
        return [node]
    return [_replacement("Shape", node, {"T": (dtype, "type"), "out_type": (op.get_attr("out_type"), "type")})]


def _is_initialized(rw: _Rewriter, op: Operation, node: node_def_pb2.NodeDef) -> list[node_def_pb2.NodeDef]:
    if _converted_input(rw, op) is None:
        return [node]
    return [_const(node, np.array(True), dtypes.bool_)]


def _disable_copy_on_read(rw: _Rewriter, op: Operation, node: node_def_pb2.NodeDef) -> list[node_def_pb2.NodeDef]:
    if _converted_input(rw, op) is None:
        return [node]
    return [_replacement("NoOp", node, {}, data_inputs=False)]


def _resource_gather(rw: _Rewriter, op: Operation, node: node_def_pb2.NodeDef) -> list[node_def_pb2.NodeDef]:
    dtype = _converted_input(rw, op)
    if dtype is None:
        return [node]
    batch_dims = int(op.get_attr("batch_dims"))
    axis = _const(node_def_pb2.NodeDef(name=f"{node.name}/axis"), np.array(batch_dims, np.int32), dtypes.int32)
    gather = _replacement("GatherV2", node, {"Tparams": (dtype, "type"), "Tindices": (op.get_attr("Tindices"), "type"),
                                             "Taxis": (dtypes.int32, "type"), "batch_dims": (batch_dims, "int")},
                          data_inputs=False)
    data = [i for i in node.input if not i.startswith("^")]
    controls = list(gather.input)
    del gather.input[:]
    gather.input.extend(data + [axis.name] + controls)
    return [axis, gather]


_HANDLERS: dict[str, Callable[[_Rewriter, Operation, node_def_pb2.NodeDef], list[node_def_pb2.NodeDef]]] = {
    "VarHandleOp": _variable,
    "VariableV2": _variable,
    "Placeholder": _placeholder,
    "ReadVariableOp": _read,
    "VariableShape": _variable_shape,
    "VarIsInitializedOp": _is_initialized,
    "DisableCopyOnRead": _disable_copy_on_read,
    "ResourceGather": _resource_gather,
}


# -- custom gradients saved with the model -------------------------------------------------------
def _keep_registered_gradients(source: FunctionLibrary, frozen: graph_pb2.GraphDef) -> None:
    """Carry over the custom gradients TensorFlow saved for the frozen graph's nodes
    (``registered_gradients``, :mod:`gradreg.formats.saved_gradients`) with their gradient
    functions, unchanged; not one that reads a variable, which the frozen graph no longer has."""
    keys = {value.s.decode() for f in frozen.library.function for n in f.node_def if n.op not in _CALLS
            for value in [attr_util.get_entry(n.attr, "_gradient_op_type")] if value is not None}
    present = {f.signature.name for f in frozen.library.function}
    for entry in source.proto.registered_gradients:
        needed = _functions_called(source, entry.gradient_func) if entry.registered_op_type in keys else None
        if needed is None:
            continue
        for name, fdef in needed:
            if name not in present:
                present.add(name)
                frozen.library.function.add().CopyFrom(fdef)
        frozen.library.registered_gradients.add().CopyFrom(entry)


def _functions_called(library: FunctionLibrary, name: str) -> list[tuple[str, function_pb2.FunctionDef]] | None:
    """``name`` and the library functions it calls, transitively; None if one is missing or
    takes or reads a variable."""
    found: list[tuple[str, function_pb2.FunctionDef]] = []
    stack = [name]
    while stack:
        current = stack.pop()
        fdef = library.get(current)
        if fdef is None or any(a.type == types_pb2.DT_RESOURCE for a in fdef.signature.input_arg) or \
                any(n.op in _VARIABLES or n.op == "ReadVariableOp" for n in fdef.node_def):
            return None
        found.append((current, fdef))
        for node in fdef.node_def:
            called = [node.op] if node.op in library else []
            for entry in node.attr:
                kind = entry.value.WhichOneof("value")
                called += [entry.value.func.name] if kind == "func" else \
                    [f.name for f in entry.value.list.func] if kind == "list" else []
            stack.extend(c for c in called if all(c != f for f, _ in found) and c not in stack)
    return found


# -- naming by the signature --------------------------------------------------------------------
def _name_inputs_and_outputs(graph_def: graph_pb2.GraphDef, inputs: dict[str, str],
                             outputs: dict[str, tuple[str, DType]]) -> None:
    """Rename the input Placeholders to the signature's input names and add an Identity per
    output named after it (renaming any node already holding one of those names)."""
    wanted = set(inputs) | set(outputs)
    names = {n.name for n in graph_def.node}
    renames: dict[str, str] = {}
    for key, tensor in inputs.items():
        node_name = tensor.split(":")[0]
        if node_name != key:
            renames[node_name] = key
    for node in graph_def.node:
        if node.name in wanted and renames.get(node.name) is None and not (
                node.name in inputs and inputs[node.name].split(":")[0] == node.name):
            renames[node.name] = _unique(f"{node.name}_renamed", names | wanted)
            names.add(renames[node.name])
    _rename(graph_def, renames)
    for key, (tensor, dtype) in outputs.items():
        node_name, _, index = tensor.partition(":")
        source = renames.get(node_name, node_name)
        identity = graph_def.node.add(name=key, op="Identity")
        identity.input.append(source if index in ("", "0") else f"{source}:{index}")
        attr_util.set_entry(identity.attr, "T", attr_util.to_attr_value(dtype, "type"))


def _unique(base: str, taken: Iterable[str]) -> str:
    taken = set(taken)
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


def _rename(graph_def: graph_pb2.GraphDef, renames: dict[str, str]) -> None:
    if not renames:
        return
    for node in graph_def.node:
        node.name = renames.get(node.name, node.name)
        for i, text in enumerate(node.input):
            control = text.startswith("^")
            name, sep, rest = text.lstrip("^").partition(":")
            if name in renames:
                node.input[i] = ("^" if control else "") + renames[name] + sep + rest
