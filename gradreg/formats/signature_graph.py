"""A SavedModel signature as one flat graph, and its gradients.

    >>> m = gradreg.load_saved_model("export_dir")
    >>> flat = signature_graph(m)                            # serving_default, calls inlined
    >>> flat.run({"image": x})                               # {'output_0': array(...)}
    >>> grads = signature_gradients(m, ["output_0"], ["image", "conv1/kernel"])
    >>> grads.gradients                                      # {'image': <Tensor image_grad:0>, ...}
    >>> gradreg.save_graph(grads.graph_def(), "grad.pb")     # or graph_def(freeze=True)

A TF2 signature is a StatefulPartitionedCall of a function that calls the model's function;
its gradient through gradreg.gradients is one SymbolicGradient per call, opaque to a reader
and of unknown shapes. Here the calls are inlined (gradreg.build.inline, as TensorFlow's
function inlining does), so the graph holds the network's own ops, its shapes follow from the
signature's input shapes, and its gradient is the backward ops themselves. Names:

* the inputs are Placeholders named after the signature's inputs (``image``), the outputs
  Identity nodes named after its outputs (``output_0``), each gradient an Identity named
  ``<x>_grad`` (``image_grad``, ``conv1/kernel_grad``; the backward ops are in the scope
  ``gradients``);
* each variable is one VarHandleOp named after the model's variable (``conv1/kernel``,
  ``bn1/moving_mean``, as :attr:`LoadedSavedModel.variables` names them), read directly by
  the ops of the inlined bodies. :meth:`SignatureGraph.session` gives a Session holding the
  model's values; ``gradreg run grad.pb --checkpoint export_dir`` restores them by these names
  (:func:`restore_from_saved_model`); ``graph_def(freeze=True)`` makes them constants.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from gradreg.autodiff.gradients import as_dense_gradients, gradients
from gradreg.build.builders import apply_op, convert_to_tensor
from gradreg.build.inline import inline_calls
from gradreg.errors import CheckpointError, ExecutionError, FetchError, SavedModelError, describe_node
from gradreg.formats.freeze import freeze_ops
from gradreg.formats.saved_model_loader import load_saved_model
from gradreg.model import attrs as attr_util
from gradreg.model.graph import Graph, Operation, Tensor, import_graph_def
from gradreg.model.traversal import needed_ops
from gradreg.proto import graph_pb2
from gradreg.runtime.session import Session
from gradreg.training.variables import VARIABLE_OP_TYPES, Variable, variable_from_op

GRADIENT_SCOPE = "gradients"
# On a variable op of a signature graph whose name differs from its op's in the SavedModel.
SOURCE_NAME_ATTR = "_saved_model_name"


def gradient_name(x: str) -> str:
    """The name of the gradient with respect to ``x`` among a :class:`SignatureGraph`'s
    fetches and nodes: ``<x>_grad``, as the ONNX writer names gradient outputs."""
    return f"{x}_grad"


@dataclasses.dataclass
class SignatureGraph:
    """One signature of a SavedModel as a flat graph (see the module docstring).

    ``inputs``/``outputs`` map the signature's names to tensors of ``graph``; ``variables``
    maps the model's variable names to Variables of ``graph`` (the ones the signature reads);
    ``values`` holds their values when the graph was made; ``gradients`` maps each x to its
    gradient tensor (None: not connected) after :func:`signature_gradients`.
    """
    graph: Graph
    signature: str
    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]
    variables: dict[str, Variable]
    values: dict[str, np.ndarray]
    source: str = ""
    gradients: dict[str, Tensor | None] = dataclasses.field(default_factory=dict)
    # variable name -> the variable op of the SavedModel's own graph (for its object-graph node)
    model_ops: dict[str, Operation] = dataclasses.field(default_factory=dict)

    @property
    def fetches(self) -> dict[str, Tensor]:
        """The outputs and the gradients that exist, by name: what a caller fetches."""
        out = dict(self.outputs)
        out.update((gradient_name(x), g) for x, g in self.gradients.items() if g is not None)
        return out

    def session(self, backend: str | None = None) -> Session:
        """A Session on :attr:`graph` with every variable set to its value in the model."""
        missing = sorted(set(self.variables) - set(self.values))
        if missing:
            raise SavedModelError(f"{self.source}: signature '{self.signature}' was inlined without the values of "
                                  f"its variables ({', '.join(missing)})")
        session = Session(self.graph, backend=backend)
        for name, variable in self.variables.items():
            variable.load(self.values[name], session)
        return session

    def run(self, inputs: Mapping[str, Any], session: Session | None = None) -> dict[str, np.ndarray]:
        """``{name: value}`` of :attr:`fetches` for ``inputs`` (``{input name: array}``)."""
        unknown = sorted(set(inputs) - set(self.inputs))
        if unknown:
            raise FetchError(f"signature '{self.signature}' has no input {', '.join(map(repr, unknown))}; its "
                             f"inputs are {sorted(self.inputs)}")
        session = session or self.session()
        values = session.run(self.fetches, {self.inputs[k]: v for k, v in inputs.items()})
        return {k: np.asarray(v) for k, v in values.items()}

    def graph_def(self, freeze: bool = False) -> graph_pb2.GraphDef:
        """The flat graph as a GraphDef: with its VarHandleOps (whose values ``gradreg run
        --checkpoint`` restores from the SavedModel), or with ``freeze`` every variable a Const
        of its value and every read an Identity (gradreg.formats.freeze)."""
        fetches = list(self.fetches.values())
        if not freeze:
            out = graph_pb2.GraphDef()
            full = self.graph.as_graph_def()
            out.versions.CopyFrom(full.versions)
            out.library.CopyFrom(full.library)
            wanted = _needed_names(fetches, self.inputs.values())
            out.node.extend(n for n in full.node if n.name in wanted)
            return out
        if set(self.variables) - set(self.values):
            self.session()      # the error naming the variables without values
        values = {v.op: self.values[name] for name, v in self.variables.items()}
        ops = _needed_ops(fetches, self.inputs.values())
        return freeze_ops(self.graph, ops, values)


def _needed_ops(fetches: Sequence[Tensor], inputs: Iterable[Tensor]) -> list[Operation]:
    fed = set(inputs)
    return sorted(set(needed_ops([t.op for t in fetches], fed)) | {t.op for t in fed}, key=lambda o: o.id)


def _needed_names(fetches: Sequence[Tensor], inputs: Iterable[Tensor]) -> set[str]:
    return {op.name for op in _needed_ops(fetches, inputs)}


def choose_signature(model: Any, signature: str | None) -> str:
    """``signature``, or ``serving_default``, or the only signature (SavedModelError otherwise)."""
    if signature is not None:
        if signature not in model.signatures:
            raise SavedModelError(f"{model.path}: no signature '{signature}'; there are {sorted(model.signatures)}")
        return signature
    names: list[str] = sorted(model.signatures)
    if "serving_default" in names:
        return "serving_default"
    if len(names) == 1:
        return names[0]
    raise SavedModelError(f"{model.path}: choose a signature: {names}")


def signature_graph(model: Any, signature: str | None = None, with_values: bool = True) -> SignatureGraph:
    """Signature ``signature`` (default ``serving_default``, or the only one) of a
    :class:`~gradreg.formats.saved_model_loader.LoadedSavedModel` as a flat graph.
    ``with_values=False`` leaves :attr:`SignatureGraph.values` empty (a picture needs no value,
    and a model loaded without running its init op may lack some)."""
    name = choose_signature(model, signature)
    sig = model.signatures[name]
    if sig.unsupported:
        raise SavedModelError(f"{model.path}: signature '{name}' has a sparse or composite "
                              f"{', '.join(sig.unsupported)}, which gradreg does not inline")
    names: dict[Operation, str] = {}
    for key, t in sig.inputs.items():
        if t.op.type == "Placeholder":
            names[t.op] = key
    variable_names = {entry.variable.op: entry.name for entry in model.model_variables.values()}
    names.update(variable_names)
    inlined = inline_calls(model.graph, list(sig.outputs.values()), fed=list(sig.inputs.values()), names=names,
                           scoped=False, reserved=sig.outputs)
    graph_def = inlined.graph_def
    taken = {n.name for n in graph_def.node}
    output_nodes: dict[str, str] = {}
    for key, t in sig.outputs.items():
        node = graph_def.node.add(name=_unique(key, taken), op="Identity")
        node.input.append(inlined.tensors[t].removesuffix(":0"))
        attr_util.set_entry(node.attr, "T", attr_util.to_attr_value(t.known_dtype.base_dtype, "type"))
        output_nodes[key] = node.name
    outer = {inlined.tensors[t.op.outputs[0]].rpartition(":")[0]: t.op.name for t in _outer_variables(model, sig)}
    for node in graph_def.node:
        if node.op in VARIABLE_OP_TYPES and node.name in set(variable_names.values()):
            attr_util.set_entry(node.attr, "shared_name", attr_util.to_attr_value(node.name, "string"))
        elif node.op in VARIABLE_OP_TYPES and outer.get(node.name, node.name) != node.name:
            # a variable no object graph or collection names, renamed for a signature name:
            # remember its own, which restore_from_saved_model looks for
            attr_util.set_entry(node.attr, SOURCE_NAME_ATTR, attr_util.to_attr_value(outer[node.name], "string"))
    where = f"{model.path}: signature '{name}' inlined"
    graph = import_graph_def(graph_def, source=where)
    inputs = {key: graph.get_tensor(inlined.tensors[t]) for key, t in sig.inputs.items()}
    outputs = {key: graph.get_tensor(f"{node}:0") for key, node in output_nodes.items()}
    variables: dict[str, Variable] = {}
    values: dict[str, np.ndarray] = {}
    model_ops: dict[str, Operation] = {}
    by_name = {entry.name: entry for entry in model.model_variables.values()}
    for op in graph.get_operations():
        if op.type not in VARIABLE_OP_TYPES:
            continue
        entry = by_name.get(op.name)
        own = op.get_attr(SOURCE_NAME_ATTR) if op.has_attr(SOURCE_NAME_ATTR) else op.name
        source_op = entry.variable.op if entry is not None else model.graph.get_operation(
            own.decode() if isinstance(own, bytes) else own)
        variables[op.name] = variable_from_op(op, entry.trainable if entry is not None else False)
        if with_values:
            values[op.name] = _value(model, source_op)
        model_ops[op.name] = source_op
    return SignatureGraph(graph, name, inputs, outputs, variables, values, model.path, model_ops=model_ops)


def _outer_variables(model: Any, sig: Any) -> list[Tensor]:
    """The handles of the variable ops of the model's graph that the signature's outputs need."""
    ops = needed_ops([t.op for t in sig.outputs.values()], set(sig.inputs.values()))
    return [op.outputs[0] for op in ops if op.type in VARIABLE_OP_TYPES]


def _unique(base: str, taken: set[str]) -> str:
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def _value(model: Any, op: Operation) -> np.ndarray:
    variable = variable_from_op(op, collections=[])
    try:
        return np.asarray(model.session.run(variable))
    except ExecutionError:
        raise SavedModelError(f"{model.path}: {describe_node(op.name, op.type)} is read by the signature but "
                              "has no value (neither restored nor initialized)") from None


def signature_gradients(model: Any, ys: Sequence[str] | None = None, xs: Sequence[str] | None = None, *,
                        signature: str | None = None, grad_ys: Mapping[str, Any] | None = None,
                        unconnected_gradients: str = "none", custom_gradient: str | None = None) -> SignatureGraph:
    """The flat graph of a signature (:func:`signature_graph`) with the gradients of the sum of
    outputs ``ys`` (default: every floating-point output) with respect to ``xs`` (signature
    inputs or variable names; default: every floating-point input and trainable variable),
    each weighted by ``grad_ys[y]`` (an array, default ones). Each gradient is an Identity
    named ``<x>_grad``; :attr:`SignatureGraph.gradients` maps x to it."""
    flat = signature_graph(model, signature)
    y_names = list(ys) if ys is not None else [k for k, t in flat.outputs.items() if t.known_dtype.is_floating]
    x_names = list(xs) if xs is not None else (
        [k for k, t in flat.inputs.items() if t.known_dtype.is_floating]
        + [k for k, v in flat.variables.items() if v.trainable])
    targets = [_x_tensor(flat, x) for x in x_names]
    y_tensors = [_part(flat.outputs, y, "output", flat.signature) for y in y_names]
    for y in grad_ys or {}:
        _part(flat.outputs, y, "output", flat.signature)
    with flat.graph.as_default():
        weights = None
        if grad_ys:
            weights = [_weight(grad_ys[y], t, i) if y in grad_ys else None
                       for i, (y, t) in enumerate(zip(y_names, y_tensors))]
        grads = as_dense_gradients(gradients(y_tensors, targets, grad_ys=weights, name=GRADIENT_SCOPE,
                                             unconnected_gradients=unconnected_gradients,
                                             custom_gradient=custom_gradient))
        for x, target, g in zip(x_names, targets, grads):
            if g is None:
                flat.gradients[x] = None
                continue
            named = flat.gradients[x] = apply_op("Identity", g, name=gradient_name(x))
            named.set_shape(target.shape)   # a gradient has its x's shape, also where inference lost it (loops)
    return flat


def _weight(value: Any, y: Tensor, i: int) -> Tensor:
    """A y's weight as a tensor of its dtype, broadcast to its shape at run time when it is not
    the y's static shape (one class of a softmax: a one-hot row for every example)."""
    array = np.asarray(value)
    weight = convert_to_tensor(array, dtype=y.known_dtype.base_dtype, name=f"grad_ys_{i}")
    if y.shape.is_fully_defined() and tuple(y.shape.as_list()) == array.shape:
        return weight
    broadcast: Tensor = apply_op("BroadcastTo", weight, apply_op("Shape", y), name=f"grad_ys_{i}_broadcast")
    return broadcast


def _part(table: Mapping[str, Tensor], name: str, kind: str, signature: str) -> Tensor:
    if name not in table:
        raise FetchError(f"signature '{signature}' has no {kind} '{name}'; its {kind}s are {sorted(table)}")
    return table[name]


def _x_tensor(flat: SignatureGraph, name: str) -> Any:
    if name in flat.inputs:
        return flat.inputs[name]
    if name in flat.variables:
        return flat.variables[name]
    raise FetchError(f"'{name}' is neither an input of signature '{flat.signature}' ({sorted(flat.inputs)}) nor a "
                     f"variable it reads ({sorted(flat.variables)})")


def restore_from_saved_model(session: Session, variables: Sequence[Variable], export_dir: str,
                             tags: Iterable[str] = ("serve",)) -> list[str]:
    """Set ``variables`` (of a graph such as :meth:`SignatureGraph.graph_def` writes) in
    ``session`` to the values of the SavedModel ``export_dir``'s variables of the same names
    (as :attr:`LoadedSavedModel.variables` names them, else the variable op of that name, with
    the value the model's init op gives it); returns the names restored.
    CheckpointError naming the first variable the SavedModel lacks, and then nothing is set."""
    model = load_saved_model(os.fspath(export_dir), tags)
    found = []
    for variable in variables:
        op = variable.op
        name = op.get_attr(SOURCE_NAME_ATTR) if op.has_attr(SOURCE_NAME_ATTR) else op.name
        name = name.decode() if isinstance(name, bytes) else name
        entry = model.model_variables.get(name)
        if entry is not None:
            found.append((variable, np.asarray(model.session.run(entry.variable))))
        elif name in model.graph and model.graph.get_operation(name).type in VARIABLE_OP_TYPES:
            # a variable of the graph the object graph or collections do not list (a TF1 local
            # variable, which the model's init op sets): the signature graph keeps its op's name
            found.append((variable, _value(model, model.graph.get_operation(name))))
        else:
            raise CheckpointError(f"{export_dir}: the SavedModel has no variable '{name}'; its variables are "
                                  f"{sorted(model.model_variables)}")
    for variable, value in found:
        if not variable.shape.is_compatible_with(value.shape):
            raise CheckpointError(f"{export_dir}: variable '{variable.op.name}' has shape {list(value.shape)} in "
                                  f"the SavedModel but {variable.shape} in the graph")
    for variable, value in found:
        variable.load(value, session)
    return [v.op.name for v, _ in found]
