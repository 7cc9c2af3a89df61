"""Load a SavedModel to run, differentiate and fine-tune it without TensorFlow.

    >>> m = gradreg.load_saved_model("export_dir")                # the MetaGraph tagged "serve"
    >>> m.signatures["serving_default"](x=np.ones((2, 4), np.float32))
    {'logits': array(...), 'probabilities': array(...)}
    >>> sig = m.signatures["serving_default"]
    >>> with m.graph.as_default():
    ...     (dw,) = gradreg.gradients(sig.outputs["logits"], [m.variables["dense/kernel"]])
    >>> m.session.run(dw, {sig.inputs["x"]: x})
    >>> m.save("tuned")                     # variables/ rewritten; tf.saved_model.load reads it

The graph is the MetaGraphDef's graph with its function library, as TensorFlow's v1 loader
(``tf.compat.v1.saved_model.load``) sees it: a signature is a set of named input and output
tensors of that graph. In a TF2 SavedModel each signature is a StatefulPartitionedCall of a
function whose last inputs are the variables it captures (VarHandleOps); gradients with respect
to a variable flow through that call.

Which variable op holds which value of ``variables/`` is found as TensorFlow's loaders find it:

1. the captured inputs of the calls of the object graph's concrete functions (``bound_inputs``
   name the variable objects, whose checkpoint keys the checkpoint's object graph gives);
2. the graph's restore op (``saver_def.restore_op_name``): its RestoreV2 node names the
   checkpoint keys (and slices) that its Assign / AssignVariableOp nodes write into each
   variable, in the graph (TF1) or in the restore function it calls (TF2);
3. for a TF1 SavedModel without a saver, the ``variables`` collection's op names.

Variables are named by the object graph (TF2) or their op (TF1); where two variable objects
share a name (Keras exports keep a second list of the same variables), the one the signatures
capture keeps it and the other is named by its object path.

The custom gradients TensorFlow saved with the model (Keras' swish) differentiate their nodes
as in TensorFlow: what the object graph says the gradient functions capture is written onto
them (:mod:`gradreg.formats.saved_gradients`).
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from gradreg.build.functions import call_attrs_of, function_graph
from gradreg.errors import CheckpointError, FeedError, FetchError, GradregError, SavedModelError, describe_node
from gradreg.formats import saved_model as sm
from gradreg.formats.freeze import freeze_signature
from gradreg.formats.model_kinds import SAVED_MODEL_PB
from gradreg.formats.saved_gradients import annotate_registered_gradients
from gradreg.formats.tensor_bundle import index_path, slice_region
from gradreg.model import dtypes
from gradreg.model.graph import Graph, Operation, Tensor, import_graph_def
from gradreg.model.shapes import TensorShape
from gradreg.model.tensor_util import to_ndarray
from gradreg.model.traversal import needed_ops
from gradreg.progress import task
from gradreg.proto import graph_pb2, meta_graph_pb2, saved_object_graph_pb2, variable_pb2
from gradreg.runtime.session import Session
from gradreg.training.variables import GraphKeys, variable_from_op

INIT_OP_SIGNATURE = "__saved_model_init_op"
_CALL_OPS = ("StatefulPartitionedCall", "PartitionedCall")
_VARIABLE_OPS = ("VarHandleOp", "VariableV2")
_IDENTITIES = ("Identity", "Snapshot")
_TF1_INIT_COLLECTIONS = ("saved_model_main_op", "legacy_init_op")


@dataclasses.dataclass(frozen=True)
class VariableSource:
    """Where a variable's value is in ``variables/``: its bundle key and, for one part of a
    partitioned variable, TensorFlow's slice spec (``"10 3 0,4:-"``; ``""``: the whole tensor)."""
    key: str
    slice_spec: str = ""


@dataclasses.dataclass(frozen=True)
class ModelVariable:
    """One variable of a loaded SavedModel: its name, the Variable of the graph, where its
    value is stored, whether it is trainable and (TF2) its object path. ``also_saved_as``: other
    keys :meth:`LoadedSavedModel.save` writes the value to — where the graph's restore op reads
    this variable from a key other than the object graph's (Keras exports keep two lists of the
    same variables), so that TensorFlow's v1 loader sees the new value too."""
    name: str
    variable: Any
    source: VariableSource
    trainable: bool
    path: tuple[str, ...] = ()
    also_saved_as: tuple[str, ...] = ()


class Signature:
    """A signature of a loaded SavedModel: ``inputs`` and ``outputs`` map the signature's names
    to tensors of the model's graph; calling it with keyword arrays runs those outputs and
    returns ``{output name: array}``, as TensorFlow's loaded signatures do."""

    def __init__(self, model: LoadedSavedModel, name: str, definition: meta_graph_pb2.SignatureDef):
        self.model = model
        self.name = name
        self.method_name = definition.method_name
        self.definition = definition
        self.inputs: dict[str, Tensor] = {}
        self.outputs: dict[str, Tensor] = {}
        self.unsupported: list[str] = []
        self._needed_ops: dict[tuple[str, ...], set[Operation]] = {}
        for kind, entries, table in (("input", definition.inputs, self.inputs),
                                     ("output", definition.outputs, self.outputs)):
            for entry in entries:
                tensor = _signature_tensor(model, name, kind, entry.key, entry.value)
                if tensor is None:
                    self.unsupported.append(f"{kind} '{entry.key}' ({entry.value.WhichOneof('encoding')})")
                else:
                    table[entry.key] = tensor

    def __call__(self, **inputs: Any) -> dict[str, np.ndarray]:
        return self.run(inputs)

    def run(self, inputs: Mapping[str, Any], outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """``{output: value}`` for ``inputs`` (``{input name: array}``); all outputs unless
        ``outputs`` names some."""
        if self.unsupported:
            raise SavedModelError(f"{self.model.path}: signature '{self.name}' has a sparse or composite "
                                  f"{', '.join(self.unsupported)}, which gradreg does not run")
        unknown = sorted(set(inputs) - set(self.inputs))
        if unknown:
            raise FeedError(f"signature '{self.name}' has no input {', '.join(map(repr, unknown))}; its inputs "
                            f"are {sorted(self.inputs)}")
        wanted = list(self.outputs) if outputs is None else list(outputs)
        missing_out = [o for o in wanted if o not in self.outputs]
        if missing_out:
            raise FetchError(f"signature '{self.name}' has no output {', '.join(map(repr, missing_out))}; "
                                 f"its outputs are {sorted(self.outputs)}")
        feeds = {self.inputs[k]: v for k, v in inputs.items()}
        for key, value in self._defaults().items():
            if key not in inputs:
                feeds[self.inputs[key]] = value
        missing = sorted(k for k, t in self.inputs.items() if t not in feeds and t.op in self._needed(wanted))
        if missing:
            raise FeedError(f"signature '{self.name}' needs input {', '.join(map(repr, missing))}")
        values = self.model.session.run({k: self.outputs[k] for k in wanted}, feeds)
        return {k: np.asarray(v) for k, v in values.items()}

    def _needed(self, wanted: list[str]) -> set[Operation]:
        key = tuple(wanted)
        found = self._needed_ops.get(key)
        if found is None:
            found = self._needed_ops[key] = set(needed_ops([self.outputs[k].op for k in wanted], set()))
        return found

    def _defaults(self) -> dict[str, np.ndarray]:
        from_proto: dict[str, np.ndarray] = {}
        for entry in self.definition.defaults:
            if entry.key in self.inputs:
                from_proto[entry.key] = to_ndarray(entry.value, f"signature '{self.name}' default '{entry.key}'")
        return from_proto

    def __repr__(self) -> str:
        return f"<Signature '{self.name}' inputs={sorted(self.inputs)} outputs={sorted(self.outputs)}>"


def _signature_tensor(model: LoadedSavedModel, signature: str, kind: str, key: str,
                      info: meta_graph_pb2.TensorInfo) -> Tensor | None:
    if info.WhichOneof("encoding") != "name":
        return None
    where = f"{model.path}: signature '{signature}' {kind} '{key}'"
    try:
        tensor = model.graph.get_tensor(info.name)
    except GradregError:
        raise SavedModelError(f"{where} names tensor '{info.name}', which is not in the graph") from None
    try:
        declared = dtypes.as_dtype(info.dtype) if info.dtype else None
    except GradregError:
        raise SavedModelError(f"{where} declares dtype {info.dtype}, which is no DataType") from None
    if declared is not None and tensor.dtype is not None and tensor.dtype.base_dtype is not declared:
        raise SavedModelError(f"{where} is {declared.name}, but tensor '{info.name}' is {tensor.dtype.name}")
    if info.HasField("tensor_shape") and not info.tensor_shape.unknown_rank:
        # What the signature declares refines what the graph knows (a call's outputs: nothing).
        try:
            tensor.set_shape(TensorShape([d.size if d.size >= 0 else None for d in info.tensor_shape.dim]))
        except GradregError as exc:
            raise SavedModelError(f"{where}: its declared shape does not fit the graph: {exc}") from None
    return tensor


class _NamedTable(dict[str, Any]):
    """A dict whose missing keys are a SavedModelError listing the ones there are."""

    def __init__(self, what: str, where: str, items: Iterable[tuple[str, Any]] = ()):
        super().__init__(items)
        self.what = what
        self.where = where

    def __missing__(self, key: str) -> Any:
        raise SavedModelError(f"{self.where}: no {self.what} '{key}'; there are {sorted(self)}")


class LoadedSavedModel:
    """A SavedModel loaded by :func:`load_saved_model`: ``graph``, ``session`` (variables
    restored), ``signatures`` (name -> :class:`Signature`), ``variables`` (name -> Variable),
    ``model_variables`` (name -> :class:`ModelVariable`), and :meth:`save`."""

    def __init__(self, path: str, tags: Sequence[str], meta_graph: meta_graph_pb2.MetaGraphDef,
                 graph: Graph, session: Session):
        self.path = path
        self.tags = tuple(tags)
        self.meta_graph = meta_graph
        self.graph = graph
        self.session = session
        self.model_variables: _NamedTable = _NamedTable("variable", path)
        self.signatures: _NamedTable = _NamedTable("signature", path)

    @property
    def variables(self) -> dict[str, Any]:
        """name -> Variable (a gradient target, and what optimizers update)."""
        return _NamedTable("variable", self.path, ((n, v.variable) for n, v in self.model_variables.items()))

    @property
    def trainable_variables(self) -> list[Any]:
        return [v.variable for v in self.model_variables.values() if v.trainable]

    @property
    def is_tf2(self) -> bool:
        """Whether the SavedModel has an object graph (written by TF2's tf.saved_model.save)."""
        return bool(self.meta_graph.object_graph_def.nodes)

    def save(self, path: str | os.PathLike[str] | None = None) -> str:
        """Write the variables' current values (in :attr:`session`) into ``variables/`` of a copy
        of the SavedModel at ``path`` (or of this SavedModel, in place, when ``path`` is None);
        returns the directory written. Everything else is copied unchanged, so TensorFlow's
        ``tf.saved_model.load`` (and :func:`load_saved_model`) read the new values."""
        reader = sm.variables_reader(self.path, self.session.context.files.granted)
        values: dict[str, np.ndarray] = {}
        for entry in self.model_variables.values():
            value = np.asarray(self.session.run(entry.variable))
            key, spec = entry.source.key, entry.source.slice_spec
            if not spec:
                values[key] = value
                values.update((other, value) for other in entry.also_saved_as)
                continue
            full = values.get(key)
            if full is None:
                full = values[key] = reader.read(key).copy()
            full[slice_region(spec, full.shape, key)] = value
        target = self.path if path is None else os.fspath(path)
        return sm.write_saved_model_variables(self.path, values, target, self.tags, self.session.context.files.granted)

    def freeze(self, signature: str | None = None) -> graph_pb2.GraphDef:
        """Signature ``signature`` (default ``serving_default``) as a GraphDef whose variables are
        constants of their current values, fed by the signature's input names and fetched by its
        output names (see :mod:`gradreg.formats.freeze`)."""
        return freeze_signature(self, signature)

    def __repr__(self) -> str:
        return (f"<LoadedSavedModel {self.path!r} tags={list(self.tags)} signatures={sorted(self.signatures)} "
                f"variables={len(self.model_variables)}>")


def load_saved_model(path: str | os.PathLike[str], tags: Iterable[str] = sm.DEFAULT_TAGS, *,
                     backend: str | None = None, run_init_op: bool = True,
                     allow_files: Sequence[str | os.PathLike[str]] = ()) -> LoadedSavedModel:
    """Load the SavedModel directory ``path`` (its MetaGraph tagged ``tags``): the graph with
    its function library, a Session with the variables restored from ``variables/`` and the
    model's init op run, its signatures and variables. See the module docstring.

    The model is hostile until proven otherwise (docs/security.md): nothing is read outside
    ``path`` (``variables/`` or a file reached through a link included), and the init op and
    every later run read files only inside ``path`` and write none, unless ``allow_files`` (or
    ``gradreg.config.allow_files``) grants directories. ``run_init_op=False`` runs no op of the
    model at all (what ``gradreg inspect`` does); the variables are still restored.

    SavedModelError / CheckpointError name the file and the part that does not fit;
    FileAccessError a path that leaves the model; UnsupportedModelFormatError says what a
    Keras, ONNX or TFLite file is and what to do.
    """
    where = os.fspath(path)
    tags = tuple(tags)
    meta_graph = sm.meta_graph(sm.read_saved_model(where), tags, where)
    try:
        graph = import_graph_def(meta_graph.graph_def, source=os.path.join(where, SAVED_MODEL_PB))
    except GradregError as exc:
        raise type(exc)(f"{exc} (in the MetaGraph tagged {list(tags)})") from None
    graph.model_root = where
    session = Session(graph, backend=backend, allow_files=allow_files)
    model = LoadedSavedModel(where, tags, meta_graph, graph, session)
    if meta_graph.object_graph_def.nodes:
        annotate_registered_gradients(graph.library, meta_graph.object_graph_def)
        found = _tf2_variables(model)
    else:
        found = _tf1_variables(model)
    for entry in found:
        model.model_variables[entry.name] = entry
    _restore(model)
    for name, definition in sm.signature_defs(meta_graph).items():
        if name != INIT_OP_SIGNATURE:
            model.signatures[name] = Signature(model, name, definition)
    if run_init_op:
        _run_init_op(model)
    return model


# -- which variable op holds which value -------------------------------------------------------
def variable_op_of(t: Tensor) -> Operation | None:
    """The VarHandleOp or VariableV2 a resource or ref tensor comes from (through Identity)."""
    for _ in range(64):
        op = t.op
        if op.type in _VARIABLE_OPS:
            return op
        if op.type not in _IDENTITIES or not op.inputs:
            return None
        t = op.inputs[0]
    return None


def _called_function(op: Operation) -> str | None:
    if op.type in _CALL_OPS:
        name: str = op.get_attr("f").name
        return name
    return op.type if op.type in op.graph.library else None


def captured_variables(graph: Graph, objects: saved_object_graph_pb2.SavedObjectGraph) -> dict[Operation, int]:
    """{variable op: object-graph node id} from the calls of concrete functions in ``graph``:
    their last inputs are the captured variables the function's ``bound_inputs`` name."""
    bound = {entry.key: list(entry.value.bound_inputs) for entry in objects.concrete_functions}
    found: dict[Operation, int] = {}
    for op in graph.get_operations():
        name = _called_function(op)
        ids = bound.get(name) if name is not None else None
        if not ids or len(ids) > len(op.inputs):
            continue
        for t, node_id in zip(op.inputs[len(op.inputs) - len(ids):], ids):
            var = variable_op_of(t)
            if var is not None and 0 <= node_id < len(objects.nodes) and \
                    objects.nodes[node_id].WhichOneof("kind") == "variable":
                found.setdefault(var, node_id)
    return found


def restore_sources(graph: Graph, restore_op_name: str) -> dict[Operation, VariableSource]:
    """{variable op: its key and slice in the checkpoint} that running the restore op
    ``restore_op_name`` would assign: read off its RestoreV2 and Assign/AssignVariableOp nodes
    (in ``graph``, or in the function the restore op calls). {} if there is no such op."""
    name = restore_op_name.split(":")[0]
    if not name or name not in graph:
        return {}
    restore = graph.get_operation(name)
    function = _called_function(restore)
    if function is None:
        return _assigned_sources(needed_ops([restore], set()), variable_op_of)
    body = function_graph(graph.library, function, call_attrs_of(restore, "f" if restore.type in _CALL_OPS else None),
                          describe_node(restore.name, restore.type))
    arg_index = {t.op: i for i, t in enumerate(body.inputs)}

    def outer_variable(t: Tensor) -> Operation | None:
        while t.op.type in _IDENTITIES and t.op.inputs:
            t = t.op.inputs[0]
        index = arg_index.get(t.op)
        return None if index is None or index >= len(restore.inputs) else variable_op_of(restore.inputs[index])
    return _assigned_sources(body.get_operations(), outer_variable)


def _assigned_sources(ops: Iterable[Operation], resolve: Any) -> dict[Operation, VariableSource]:
    found: dict[Operation, VariableSource] = {}
    for op in ops:
        if op.type not in ("Assign", "AssignVariableOp") or len(op.inputs) < 2:
            continue
        value = op.inputs[1]
        while value.op.type in _IDENTITIES and value.op.inputs:
            value = value.op.inputs[0]
        if value.op.type != "RestoreV2":
            continue
        names = _const_strings(value.op.inputs[1])
        specs = _const_strings(value.op.inputs[2])
        target = resolve(op.inputs[0])
        if names is None or target is None or value.value_index >= len(names):
            continue
        spec = specs[value.value_index] if specs is not None and value.value_index < len(specs) else ""
        found[target] = VariableSource(names[value.value_index], spec)
    return found


def _const_strings(t: Tensor) -> list[str] | None:
    while t.op.type in _IDENTITIES and t.op.inputs:
        t = t.op.inputs[0]
    if t.op.type != "Const":
        return None
    values = np.asarray(t.op.get_attr("value")).reshape(-1)
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values]


# -- TF2: the object graph --------------------------------------------------------------------
def _tf2_variables(model: LoadedSavedModel) -> list[ModelVariable]:
    objects = model.meta_graph.object_graph_def
    saved = sm.saved_model_variables(model.path, model.tags, model.session.context.files.granted)
    by_node = {v.node_id: v for v in saved}
    by_key = {v.checkpoint_key: v for v in saved}
    captured = captured_variables(model.graph, objects)
    try:
        restored = restore_sources(model.graph, model.meta_graph.saver_def.restore_op_name)
    except GradregError:
        # The restore function holds ops gradreg does not know (a lookup table's import): the
        # captured variables are what the signatures use; the rest stays unmapped.
        restored = {}
    chosen: dict[Operation, sm.SavedModelVariable] = {}
    for op, node_id in captured.items():
        if node_id in by_node:
            chosen[op] = by_node[node_id]
    taken = {v.checkpoint_key for v in chosen.values()}
    for op, source in restored.items():
        if op not in chosen and source.key in by_key and source.key not in taken and not source.slice_spec:
            chosen[op] = by_key[source.key]
            taken.add(source.key)
    if not chosen and saved:
        raise SavedModelError(f"{model.path}: cannot tell which variable ops of the graph hold the "
                              f"{len(saved)} variables (no call captures them and no restore op assigns them)")
    order = sorted(chosen.items(), key=lambda item: (item[0] not in captured, item[1].node_id or 0))
    out: list[ModelVariable] = []
    used: set[str] = set()
    for op, var in order:
        name = var.name if var.name and var.name not in used else "/".join(var.path) or var.checkpoint_key
        used.add(name)
        variable = variable_from_op(op, var.trainable)
        restored_from = restored.get(op)
        also = (restored_from.key,) if restored_from is not None and restored_from.key != var.checkpoint_key \
            and restored_from.key in by_key and not restored_from.slice_spec else ()
        out.append(ModelVariable(name, variable, VariableSource(var.checkpoint_key), var.trainable, var.path, also))
    return out


# -- TF1: collections -------------------------------------------------------------------------
def _collection(meta_graph: meta_graph_pb2.MetaGraphDef, key: str) -> meta_graph_pb2.CollectionDef | None:
    for entry in meta_graph.collection_def:
        if entry.key == key:
            return entry.value
    return None


def _variable_defs(meta_graph: meta_graph_pb2.MetaGraphDef, key: str, where: str) -> list[variable_pb2.VariableDef]:
    found = _collection(meta_graph, key)
    if found is None:
        return []
    return [sm.variable_def(v, where) for v in found.bytes_list.value]


def _tf1_variables(model: LoadedSavedModel) -> list[ModelVariable]:
    meta = model.meta_graph
    trainable = {d.variable_name for d in _variable_defs(meta, GraphKeys.TRAINABLE_VARIABLES, model.path)}
    restored = restore_sources(model.graph, meta.saver_def.restore_op_name)
    out: list[ModelVariable] = []
    seen: set[str] = set()
    for definition in _variable_defs(meta, GraphKeys.GLOBAL_VARIABLES, model.path):
        op_name = definition.variable_name.split(":")[0]
        if op_name in seen:
            continue
        seen.add(op_name)
        try:
            op = model.graph.get_operation(op_name)
        except GradregError:
            raise SavedModelError(f"{model.path}: the variables collection names '{op_name}', which is not "
                                  "in the graph") from None
        source = restored.get(op) or _slice_source(definition) or VariableSource(op_name)
        is_trainable = definition.variable_name in trainable
        collections = [GraphKeys.GLOBAL_VARIABLES] + ([GraphKeys.TRAINABLE_VARIABLES] if is_trainable else [])
        variable = variable_from_op(op, is_trainable, collections)
        out.append(ModelVariable(op_name, variable, source, is_trainable))
    return out


def _slice_source(definition: variable_pb2.VariableDef) -> VariableSource | None:
    info = definition.save_slice_info_def
    if not info.full_name:
        return None
    extents = " ".join(f"{o},{n}" for o, n in zip(info.var_offset, info.var_shape))
    spec = " ".join(str(d) for d in info.full_shape) + " " + extents.replace(" ", ":")
    return VariableSource(info.full_name, spec)


# -- restoring ----------------------------------------------------------------------------------
def _restore(model: LoadedSavedModel) -> None:
    prefix = sm.variables_prefix(model.path)
    if not model.model_variables:
        return
    if not os.path.exists(index_path(prefix)):
        raise CheckpointError(f"{index_path(prefix)}: missing, but the SavedModel has "
                              f"{len(model.model_variables)} variables")
    reader = sm.variables_reader(model.path, model.session.context.files.granted)
    with task(_log, f"restoring the variables of {model.path}", len(model.model_variables), "variables") as progress:
        for entry in model.model_variables.values():
            key = entry.source.key
            if key not in reader:
                raise CheckpointError(f"{prefix}: no value '{key}' for variable '{entry.name}'")
            value = reader.read(key)
            if entry.source.slice_spec:
                value = value[slice_region(entry.source.slice_spec, value.shape, key)]
            _assign(model.session, entry, value, reader.prefix)
            progress.advance()


_log = "formats"   # the logger gradreg.formats (gradreg.progress)


def _assign(session: Session, entry: ModelVariable, value: np.ndarray, prefix: str) -> None:
    variable = entry.variable
    dtype = variable.dtype
    if value.dtype != dtype.storage:
        raise CheckpointError(f"{prefix}: '{entry.source.key}' is {value.dtype}, but variable '{entry.name}' is "
                              f"{dtype.name}")
    shape: TensorShape = variable.shape
    if not shape.is_compatible_with(value.shape):
        raise CheckpointError(f"{prefix}: '{entry.source.key}' has shape {list(value.shape)}, but variable "
                              f"'{entry.name}' has shape {shape}")
    variable.load(value, session)


def _run_init_op(model: LoadedSavedModel) -> None:
    """Run what TensorFlow's loader runs after restoring: the ``__saved_model_init_op``
    signature's op (TF2) or the main op collection (TF1), when the graph has one."""
    names: list[str] = []
    init = sm.signature_defs(model.meta_graph).get(INIT_OP_SIGNATURE)
    if init is not None:
        names = [entry.value.name for entry in init.outputs]
    else:
        for key in _TF1_INIT_COLLECTIONS:
            found = _collection(model.meta_graph, key)
            if found is not None and found.node_list.value:
                names = list(found.node_list.value)
                break
    ops = [model.graph.get_operation(n.split(":")[0]) for n in names if n.split(":")[0] in model.graph]
    if any(op.type != "NoOp" or op.inputs or op.control_inputs for op in ops):
        model.session.run(ops)

