"""SavedModel directories, read without TensorFlow, and recognising other model files.

A SavedModel directory holds ``saved_model.pb`` (a ``SavedModel`` proto: one MetaGraphDef per
tag set, each with its graph, function library, signatures and, for TF2, the object graph),
``variables/variables.index`` + ``.data-*`` (a tensor bundle with the variables' values) and
optionally ``assets/``, ``fingerprint.pb``.

* :func:`read_saved_model` parses ``saved_model.pb`` (or ``saved_model.pbtxt``);
  :func:`meta_graph` picks the MetaGraphDef of a tag set.
* :func:`saved_model_variables` lists the model's variables with the bundle key of each:
  a TF2 model's ``SavedObjectGraph`` variable nodes are matched to the checkpoint's
  ``TrackableObjectGraph`` by their path of child names from the root; a TF1 model's
  ``variables`` collection names them (key = the variable's op name).
* :func:`write_saved_model_variables` rewrites ``variables/`` with new values (same dtypes and
  shapes), in place or into a copy of the SavedModel, so that ``tf.saved_model.load`` sees them.
* :func:`identify_model_file` and :func:`check_model_file` (gradreg.formats.model_kinds,
  imported here too) recognise Keras (``.keras``, ``.h5``), ONNX, TFLite files, checkpoint
  files and a bare ``saved_model.pb`` by their content, for an error message that says what
  the file is and what to do.

    >>> [v.name for v in saved_model_variables("tests/data/checkpoints/saved_module")]
    ['w', 'b', 'factor', 'steps']
"""
from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from google.protobuf import message as protobuf_message
from google.protobuf import text_format

from gradreg.config import MAX_MESSAGE_DEPTH
from gradreg.errors import CheckpointError, GradregError, SavedModelError
from gradreg.file_access import FileAccess, check_file, real, resolve_inside
from gradreg.formats.graphdef import text_nesting_depth
from gradreg.formats.model_kinds import ADVICE, SAVED_MODEL_PB, SAVED_MODEL_PBTXT, check_model_file, identify_model_file
from gradreg.formats.saved_gradients import annotate_registered_gradients
from gradreg.formats.tensor_bundle import BundleReader, data_path, index_path, write_bundle
from gradreg.formats.tf_checkpoint import VARIABLE_VALUE, object_graph, object_paths
from gradreg.model import dtypes
from gradreg.model.dtypes import DType
from gradreg.model.graph import Graph, import_graph_def
from gradreg.proto import meta_graph_pb2, saved_model_pb2, saved_object_graph_pb2, tensor_shape_pb2, variable_pb2

VARIABLES_DIR = "variables"
VARIABLES_FILENAME = "variables"
DEFAULT_TAGS = ("serve",)


def variables_prefix(export_dir: str) -> str:
    """The bundle prefix of a SavedModel's variables: ``export_dir/variables/variables``."""
    return os.path.join(os.fspath(export_dir), VARIABLES_DIR, VARIABLES_FILENAME)


def variables_reader(export_dir: str, granted: Sequence[str] = ()) -> BundleReader:
    """A reader of the SavedModel's ``variables/`` that opens no file outside ``export_dir``
    (nor under the ``granted`` directories): a linked ``variables/`` or data file leading out
    is a FileAccessError naming the directory (gradreg.file_access)."""
    export_dir = os.fspath(export_dir)
    # absolute: the reader resolves a relative path against the model, and this one is the caller's
    return BundleReader(os.path.abspath(variables_prefix(export_dir)), FileAccess(export_dir, granted).reader(
        f"SavedModel '{export_dir}'"))


# -- saved_model.pb -------------------------------------------------------------------------
def read_saved_model(export_dir: str) -> saved_model_pb2.SavedModel:
    """The ``SavedModel`` proto of the directory ``export_dir``.

    SavedModelError when it is not a SavedModel directory (with what the path is instead),
    UnsupportedModelFormatError for a Keras, ONNX or TFLite file.
    """
    export_dir = os.fspath(export_dir)
    if not os.path.exists(export_dir):
        raise SavedModelError(f"{export_dir}: no such SavedModel directory")
    if not os.path.isdir(export_dir):
        check_model_file(export_dir)
        raise SavedModelError(f"{export_dir}: not a SavedModel directory (a SavedModel is a directory "
                              f"holding {SAVED_MODEL_PB} and {VARIABLES_DIR}/)")
    binary, text = (os.path.join(export_dir, name) for name in (SAVED_MODEL_PB, SAVED_MODEL_PBTXT))
    inside = FileAccess(export_dir).reader(f"SavedModel '{export_dir}'")
    # absolute paths: the reader resolves a relative one against the model, and these are the caller's
    if os.path.exists(binary):
        saved_model = _parse_binary(inside(os.path.abspath(binary)))
    elif os.path.exists(text):
        saved_model = _parse_text(inside(os.path.abspath(text)))
    else:
        raise SavedModelError(f"{export_dir}: not a SavedModel (no {SAVED_MODEL_PB} or {SAVED_MODEL_PBTXT})"
                              + _directory_hint(export_dir))
    if not saved_model.meta_graphs:
        raise SavedModelError(f"{export_dir}: the SavedModel holds no MetaGraph")
    return saved_model


def serving_meta_graph(saved_model: saved_model_pb2.SavedModel, where: str) -> meta_graph_pb2.MetaGraphDef:
    """The MetaGraph tagged exactly ``serve``, else the only one; an error listing the tag sets."""
    graphs = list(saved_model.meta_graphs)
    for graph in graphs:
        if set(graph.meta_info_def.tags) == set(DEFAULT_TAGS):
            return graph
    if len(graphs) == 1:
        return graphs[0]
    tag_sets = [sorted(g.meta_info_def.tags) for g in graphs]
    raise SavedModelError(f"{where}: a SavedModel with several MetaGraphs and none tagged 'serve' ({tag_sets}); "
                          "use gradreg.load_saved_model(path, tags=...) to choose one")


def graph_of_directory(path: str) -> Graph:
    """The graph of the SavedModel directory ``path`` (variables not restored, nothing run)."""
    meta = serving_meta_graph(read_saved_model(path), path)
    graph = _graph_of(meta, os.path.join(path, SAVED_MODEL_PB))
    graph.model_root = path
    return graph


def graph_of_bytes(data: bytes, where: str) -> Graph:
    """The graph of a ``saved_model.pb`` file's content (variables not restored)."""
    saved_model = saved_model_pb2.SavedModel()
    try:
        saved_model.ParseFromString(data)
    except Exception as exc:    # protobuf's DecodeError and the C parser's errors
        raise SavedModelError(f"{where}: not a SavedModel proto (truncated or corrupt: {exc})") from None
    if not saved_model.meta_graphs:
        raise SavedModelError(f"{where}: the SavedModel holds no MetaGraph")
    return _graph_of(serving_meta_graph(saved_model, where), where)


def _graph_of(meta: meta_graph_pb2.MetaGraphDef, where: str) -> Graph:
    """The MetaGraph's graph, its saved custom gradients annotated (saved_gradients)."""
    graph = import_graph_def(meta.graph_def, source=where)
    annotate_registered_gradients(graph.library, meta.object_graph_def)
    return graph


def _parse_binary(path: str) -> saved_model_pb2.SavedModel:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise SavedModelError(f"{path}: cannot read: {exc.strerror or exc}") from None
    saved_model = saved_model_pb2.SavedModel()
    try:
        saved_model.ParseFromString(data)
    except protobuf_message.DecodeError as exc:
        raise SavedModelError(f"{path}: not a SavedModel proto (truncated or corrupt: {exc})") from None
    return saved_model


def _parse_text(path: str) -> saved_model_pb2.SavedModel:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        # Checked before parsing, as for a text GraphDef: the text parser recurses once a level.
        depth = text_nesting_depth(text)
        if depth > MAX_MESSAGE_DEPTH:
            raise SavedModelError(f"{path}: messages nested {depth} deep, more than the {MAX_MESSAGE_DEPTH} levels "
                                  f"a binary SavedModel may have")
        return text_format.Parse(text, saved_model_pb2.SavedModel())
    except (OSError, UnicodeDecodeError, text_format.ParseError) as exc:
        raise SavedModelError(f"{path}: not a text SavedModel ({exc})") from None


def _directory_hint(directory: str) -> str:
    for name in sorted(os.listdir(directory)):
        kind = identify_model_file(os.path.join(directory, name))
        if kind in ADVICE:
            return f"; it contains {name}, {ADVICE[kind][0]}"
    return ""


def meta_graph(saved_model: saved_model_pb2.SavedModel, tags: Iterable[str] = DEFAULT_TAGS,
               where: str = "SavedModel") -> meta_graph_pb2.MetaGraphDef:
    """The MetaGraphDef whose tag set is exactly ``tags`` (SavedModelError listing the tag
    sets there are otherwise)."""
    wanted = set(tags)
    for graph in saved_model.meta_graphs:
        if set(graph.meta_info_def.tags) == wanted:
            return graph
    have = [sorted(g.meta_info_def.tags) for g in saved_model.meta_graphs]
    raise SavedModelError(f"{where}: no MetaGraph with tags {sorted(wanted)}; it has tag sets {have}")


def signature_defs(graph: meta_graph_pb2.MetaGraphDef) -> dict[str, meta_graph_pb2.SignatureDef]:
    """The MetaGraph's signatures by name (``__saved_model_init_op`` included, as stored)."""
    return {entry.key: entry.value for entry in graph.signature_def}


# -- variables --------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SavedModelVariable:
    """One variable of a SavedModel and where its value is in ``variables/``.

    ``node_id`` is its node in the SavedObjectGraph (None in a TF1 SavedModel); ``path`` the
    child names leading to it from the root object; ``shape`` has None for unknown dims (None
    for an unknown rank); ``checkpoint_key`` is its key in the variables bundle.
    """
    node_id: int | None
    name: str
    dtype: DType
    shape: tuple[int | None, ...] | None
    trainable: bool
    checkpoint_key: str
    path: tuple[str, ...] = ()


def saved_model_variables(export_dir: str, tags: Iterable[str] = DEFAULT_TAGS,
                          granted: Sequence[str] = ()) -> list[SavedModelVariable]:
    """The variables of the SavedModel ``export_dir`` (MetaGraph ``tags``), in node order, each
    with its key in ``variables/``. Errors name the node or key that does not match; nothing
    outside ``export_dir`` (and the ``granted`` directories) is read."""
    export_dir = os.fspath(export_dir)
    graph = meta_graph(read_saved_model(export_dir), tags, export_dir)
    if graph.object_graph_def.nodes:
        found = _object_graph_variables(graph.object_graph_def, export_dir, granted)
    else:
        found = _collection_variables(graph, export_dir, granted)
    if found:
        reader = variables_reader(export_dir, granted)
        for var in found:
            _check_against_bundle(var, reader)
    return found


def _object_graph_variables(saved_objects: saved_object_graph_pb2.SavedObjectGraph,
                            export_dir: str, granted: Sequence[str]) -> list[SavedModelVariable]:
    prefix = variables_prefix(export_dir)
    nodes = saved_objects.nodes
    wanted = [i for i, node in enumerate(nodes) if node.WhichOneof("kind") == "variable"]
    if not wanted:
        return []
    if not os.path.exists(index_path(prefix)):
        raise CheckpointError(f"{index_path(prefix)}: missing, but the SavedModel has {len(wanted)} variables")
    trackables = object_graph(variables_reader(export_dir, granted))
    if trackables is None:
        raise CheckpointError(f"{prefix}: the variables checkpoint has no object graph "
                              "(_CHECKPOINTABLE_OBJECT_GRAPH), so its keys cannot be matched to the variables")
    saved_paths = object_paths(nodes, _children)
    by_path = {path: node_id for node_id, path in object_paths(trackables.nodes).items()}
    out = []
    for node_id in wanted:
        path = saved_paths.get(node_id, ())
        tracked = by_path.get(path) if node_id in saved_paths else None
        keys = [a.checkpoint_key for a in trackables.nodes[tracked].attributes
                if a.name == VARIABLE_VALUE] if tracked is not None else []
        variable = nodes[node_id].variable
        if not keys:
            where = "/".join(path) if path else f"node {node_id}"
            raise CheckpointError(f"{prefix}: SavedModel variable '{variable.name}' ({where}, node {node_id}) "
                                  "has no value in the checkpoint's object graph")
        try:
            dtype = dtypes.as_dtype(variable.dtype)
        except GradregError:
            raise SavedModelError(f"{export_dir}: SavedModel variable '{variable.name}' (node {node_id}) has dtype "
                                  f"{variable.dtype}, which is no DataType") from None
        out.append(SavedModelVariable(node_id, variable.name, dtype, _shape(variable.shape), variable.trainable,
                                      keys[0], path))
    return out


def _children(node: saved_object_graph_pb2.SavedObject) -> list[Any]:
    # TensorFlow writes the named edges in `children`; newer writers may add `dependencies`.
    return list(node.children) + list(node.dependencies)


def _shape(proto: tensor_shape_pb2.TensorShapeProto) -> tuple[int | None, ...] | None:
    if proto.unknown_rank:
        return None
    return tuple(None if d.size < 0 else d.size for d in proto.dim)


def variable_def(data: bytes, where: str, error: type[Exception] = SavedModelError) -> variable_pb2.VariableDef:
    """A VariableDef of a MetaGraph's variables collection; ``error`` naming ``where`` if it is corrupt."""
    try:
        return variable_pb2.VariableDef.FromString(data)
    except protobuf_message.DecodeError:
        raise error(f"{where}: a VariableDef of the variables collections is corrupt") from None


def _collection_variables(graph: meta_graph_pb2.MetaGraphDef, export_dir: str,
                          granted: Sequence[str]) -> list[SavedModelVariable]:
    """A TF1 SavedModel: VariableDefs of the ``variables`` collection, keyed by op name."""
    collections = {entry.key: entry.value for entry in graph.collection_def}
    trainable = set()
    for entry in collections.get("trainable_variables", meta_graph_pb2.CollectionDef()).bytes_list.value:
        trainable.add(variable_def(entry, export_dir).variable_name)
    found = []
    for entry in collections.get("variables", meta_graph_pb2.CollectionDef()).bytes_list.value:
        var_def = variable_def(entry, export_dir)
        op_name = var_def.variable_name.split(":")[0]
        found.append((op_name, var_def.variable_name in trainable))
    if not found:
        return []
    reader = variables_reader(export_dir, granted)
    return [SavedModelVariable(None, name, reader.dtype(name) if name in reader else dtypes.invalid,
                               reader.shape(name) if name in reader else None, is_trainable, name, ())
            for name, is_trainable in found]


def _check_against_bundle(var: SavedModelVariable, reader: BundleReader) -> None:
    if var.checkpoint_key not in reader:
        raise CheckpointError(f"{reader.prefix}: no tensor '{var.checkpoint_key}' for variable '{var.name}'")
    stored_dtype, stored_shape = reader.dtype(var.checkpoint_key), reader.shape(var.checkpoint_key)
    if stored_dtype is not var.dtype:
        raise CheckpointError(f"{reader.prefix}: variable '{var.name}' is {var.dtype.name} in the SavedModel "
                              f"but '{var.checkpoint_key}' is {stored_dtype.name}")
    if var.shape is not None and (len(var.shape) != len(stored_shape) or any(
            d is not None and d != s for d, s in zip(var.shape, stored_shape))):
        raise CheckpointError(f"{reader.prefix}: variable '{var.name}' has shape {list(var.shape)} in the "
                              f"SavedModel but '{var.checkpoint_key}' has {list(stored_shape)}")


def write_saved_model_variables(export_dir: str, values: Mapping[Any, Any], output_dir: str | None = None,
                                tags: Iterable[str] = DEFAULT_TAGS, granted: Sequence[str] = ()) -> str:
    """Replace variable values in a SavedModel's ``variables/``; returns the directory written.

    ``values`` maps a variable's node id (int, see :func:`saved_model_variables`) or its
    checkpoint key (str) to its new value, which must have the stored shape and a dtype of
    the same kind. Every other tensor of the bundle is kept. With ``output_dir`` the
    SavedModel is copied there first and the original is left alone. The bundle is written
    atomically (see :func:`~gradreg.formats.tensor_bundle.write_bundle`). Nothing is read
    outside ``export_dir`` (and the ``granted`` directories), and nothing is written through a
    link that leaves the directory written (gradreg.file_access).
    """
    export_dir = os.fspath(export_dir)
    by_node: dict[int, str] = {}
    if any(isinstance(ref, (int, np.integer)) for ref in values):     # node ids need the object graph
        by_node = {v.node_id: v.checkpoint_key for v in saved_model_variables(export_dir, tags, granted)
                   if v.node_id is not None}
    reader = variables_reader(export_dir, granted)
    tensors = reader.read_all()
    kinds = {key: reader.dtype(key) for key in tensors}
    for ref, value in values.items():
        key = by_node.get(int(ref)) if isinstance(ref, (int, np.integer)) else ref
        if key is None or key not in tensors:
            raise CheckpointError(f"{reader.prefix}: no variable {ref!r} to replace (node ids: "
                                  f"{sorted(by_node)})")
        tensors[key] = _replacement(reader.prefix, key, value, kinds[key], tensors[key])
    target = export_dir
    if output_dir is not None and os.path.abspath(output_dir) != os.path.abspath(export_dir):
        target = os.fspath(output_dir)
        copy_model_directory(export_dir, target, skip=(VARIABLES_DIR,))
    # Never through a link: a variables/ (or its files) leading out of the target is refused.
    for path in (index_path(variables_prefix(target)), data_path(variables_prefix(target), 0, 1)):
        resolve_inside(target, os.path.relpath(path, target), f"SavedModel '{target}': variables/")
    write_bundle(variables_prefix(target), tensors, kinds)
    return target


def copy_model_directory(source: str, target: str, skip: Sequence[str] = ()) -> None:
    """Copy the SavedModel ``source`` into ``target`` (created if needed; the top-level entries
    named in ``skip`` left out), reading nothing outside ``source``: a link that leads out of it,
    or a file with other hard links, is a FileAccessError and nothing is copied. Links inside
    are copied as the files they lead to."""
    root = real(source)
    for directory, subdirectories, files in os.walk(root):
        if directory == root:
            subdirectories[:] = [d for d in subdirectories if d not in skip]
            files = [f for f in files if f not in skip]
        for name in subdirectories + files:
            path = os.path.join(directory, name)
            resolved = resolve_inside(root, os.path.relpath(path, root), f"SavedModel '{source}'")
            check_file(resolved, f"SavedModel '{source}'")
    shutil.copytree(root, target, dirs_exist_ok=True,
                    ignore=lambda d, names: list(skip) if os.path.samefile(d, root) else [])


def _replacement(prefix: str, key: str, value: Any, dtype: DType, old: np.ndarray) -> np.ndarray:
    new = np.asarray(value, dtype=object) if dtype is dtypes.string else np.asarray(value)
    if new.shape != old.shape:
        raise CheckpointError(f"{prefix}: new value of '{key}' has shape {list(new.shape)}, the variable "
                              f"{list(old.shape)}")
    if dtype is not dtypes.string and not np.can_cast(new.dtype, old.dtype, casting="same_kind"):
        raise CheckpointError(f"{prefix}: new value of '{key}' is {new.dtype}, the variable {dtype.name}")
    return new if dtype is dtypes.string else new.astype(old.dtype)
