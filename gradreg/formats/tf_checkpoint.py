"""TensorFlow checkpoints as a user has them: a directory with a ``checkpoint`` state file
and ``model.ckpt-N.index`` / ``.data-*`` bundles (``tf.compat.v1.train.Saver``,
``tf.train.CheckpointManager``), or one prefix.

* TF1 (name-based) checkpoints key each tensor by its variable's op name (``dense/kernel``,
  ``global_step``). :func:`load_checkpoint` reads one, :func:`save_checkpoint` writes one the
  way ``Saver.save`` does (``prefix-<step>``, the state file updated, the oldest beyond
  ``max_to_keep`` removed).
* TF2 (object-based) checkpoints key tensors by object path
  (``model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE``) and store the object graph
  (``TrackableObjectGraph``) under ``_CHECKPOINTABLE_OBJECT_GRAPH``: :func:`object_graph`
  reads it, :func:`object_variables` lists which object holds which tensor.

The state file is the text form of ``CheckpointState``::

    model_checkpoint_path: "model.ckpt-3"
    all_model_checkpoint_paths: "model.ckpt-2"
    all_model_checkpoint_paths: "model.ckpt-3"

A state file is the checkpoint's, not the caller's: every path it names is resolved against
its directory and must stay inside it after links are resolved (an absolute path from where the
directory was written, TensorFlow 1's habit, means the file of that name in the directory);
removing old checkpoints touches only their files in the directory (docs/security.md).

    >>> path = save_checkpoint("/tmp/run/model.ckpt", {"w": np.ones(3, np.float32)}, global_step=7)
    >>> latest_checkpoint("/tmp/run") == path
    True
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from google.protobuf import text_format

from gradreg.errors import CheckpointError, FileAccessError
from gradreg.file_access import FileAccess, check_file, is_inside, no_nul, real, resolve_inside
from gradreg.formats.atomic import atomic_write
from gradreg.formats.tensor_bundle import BundleReader, index_path, write_bundle
from gradreg.proto import checkpoint_state_pb2, trackable_object_graph_pb2

STATE_FILE = "checkpoint"
MAX_STATE_BYTES = 1 << 20      # TensorFlow's state files are a few hundred bytes
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
VARIABLE_VALUE = "VARIABLE_VALUE"     # the attribute name of a variable's value in the object graph


# -- the state file -------------------------------------------------------------------------
def read_checkpoint_state(directory: str) -> checkpoint_state_pb2.CheckpointState | None:
    """The ``checkpoint`` file of ``directory``, or None if there is none. CheckpointError
    for a file that is not one (not UTF-8 text, not the text of a CheckpointState, larger than
    any state file); FileAccessError if it is a link leading out of ``directory``."""
    path = os.path.join(directory, STATE_FILE)
    if not os.path.lexists(path):
        return None
    check_file(resolve_inside(directory, STATE_FILE, f"'{directory}'"), f"'{directory}'", single_link=False)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_STATE_BYTES + 1)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_STATE_BYTES:
        raise CheckpointError(f"{path}: larger than {MAX_STATE_BYTES:,} bytes, not a TensorFlow checkpoint state file")
    try:
        return text_format.Parse(data.decode("utf-8"), checkpoint_state_pb2.CheckpointState())
    except UnicodeDecodeError:
        raise CheckpointError(f"{path}: not a TensorFlow checkpoint state file (not UTF-8 text)") from None
    except text_format.ParseError as exc:
        raise CheckpointError(f"{path}: not a TensorFlow checkpoint state file ({exc})") from None


def write_checkpoint_state(directory: str, state: checkpoint_state_pb2.CheckpointState) -> None:
    """Write ``state`` as ``directory/checkpoint`` (atomically), as TensorFlow writes it."""
    path = resolve_inside(directory, STATE_FILE, f"'{directory}'")      # never through a link out
    try:
        atomic_write(path, text_format.MessageToString(state).encode())
    except Exception as exc:
        raise CheckpointError(f"{path}: cannot write: {exc}") from None


def _resolve(directory: str, path: str) -> str:
    """A path of the state file of ``directory``, resolved inside it (see the module docstring)."""
    what = f"{os.path.join(directory, STATE_FILE)}"
    no_nul(path, what)
    if os.path.isabs(path) and not is_inside(real(path), real(directory)):
        moved = os.path.join(directory, os.path.basename(path))
        if os.path.basename(path) and os.path.lexists(index_path(moved)):
            path = os.path.basename(path)
    return resolve_inside(directory, path, what)


def latest_checkpoint(directory: str) -> str | None:
    """The prefix of the newest checkpoint the state file of ``directory`` names, or None
    when there is no state file or the checkpoint it names is gone."""
    state = read_checkpoint_state(directory)
    if state is None or not state.model_checkpoint_path:
        return None
    prefix = _resolve(directory, state.model_checkpoint_path)
    return prefix if os.path.exists(index_path(prefix)) else None


def checkpoint_prefix(path: str) -> str:
    """The bundle prefix ``path`` means: a prefix, its ``.index`` or ``.data-*`` file, or a
    directory (then its newest checkpoint). CheckpointError when there is none."""
    path = os.fspath(path)
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "variables", "variables.index")):
            return os.path.join(path, "variables", "variables")       # a SavedModel directory
        prefix = latest_checkpoint(path)
        if prefix is None:
            raise CheckpointError(f"{path}: a directory without a checkpoint (no '{STATE_FILE}' file naming an "
                                  "existing one); pass a prefix such as dir/model.ckpt-100")
        return prefix
    for suffix in (".index", ".meta"):
        if path.endswith(suffix):
            return path[:-len(suffix)]
    if ".data-" in os.path.basename(path):
        return path[:path.rindex(".data-")]
    if not os.path.exists(index_path(path)):
        raise CheckpointError(f"{path}: no checkpoint with this prefix ({index_path(path)} does not exist)")
    return path


def checkpoint_reader(path: str) -> BundleReader:
    """A reader of the checkpoint ``path`` names (see :func:`checkpoint_prefix`) that opens nothing
    outside the checkpoint's directory: a data or index file that is a link leading out, or that
    has other hard links, is a FileAccessError (the directory is the model's root; see
    gradreg.file_access, and ``--allow-files`` to grant more)."""
    prefix = os.path.abspath(checkpoint_prefix(path))
    return BundleReader(prefix, FileAccess(os.path.dirname(prefix)).reader(f"checkpoint '{prefix}'"))


# -- TF1 name-based checkpoints ---------------------------------------------------------------
def load_checkpoint(path: str) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint ``path`` names (see :func:`checkpoint_prefix`), keyed by
    name. The object graph of a TF2 checkpoint is left out (see :func:`object_graph`)."""
    reader = checkpoint_reader(path)
    names = reader.keys()
    return {key: reader.read(key) for key in names if key != OBJECT_GRAPH_KEY}


def save_checkpoint(save_path: str, tensors: Mapping[str, Any], global_step: int | None = None,
                    max_to_keep: int = 5, dtypes: Mapping[str, Any] | None = None) -> str:
    """Write ``tensors`` (variable name -> value) as ``tf.compat.v1.train.Saver.save`` does:
    the bundle ``save_path[-global_step]``, then the state file naming it newest, removing the
    files of checkpoints beyond the newest ``max_to_keep`` (0 or None keeps all). Returns
    the prefix written. ``dtypes`` as in :func:`~gradreg.formats.tensor_bundle.write_bundle`."""
    prefix = os.fspath(save_path) if global_step is None else f"{os.fspath(save_path)}-{int(global_step)}"
    directory = os.path.dirname(os.path.abspath(prefix))
    state = read_checkpoint_state(directory) or checkpoint_state_pb2.CheckpointState()   # refused before writing
    write_bundle(prefix, tensors, dtypes)
    name = os.path.basename(prefix)
    now = time.time()
    kept = [(p, t) for p, t in _paths_and_times(state) if p != name and _own(directory, p) != real(prefix)]
    kept.append((name, now))
    if max_to_keep and len(kept) > max_to_keep:
        for old, _ in kept[:-max_to_keep]:
            found = _own(directory, old)
            if found is not None:
                _remove_checkpoint_files(found)
        kept = kept[-max_to_keep:]
    new_state = checkpoint_state_pb2.CheckpointState(
        model_checkpoint_path=name, all_model_checkpoint_paths=[p for p, _ in kept],
        all_model_checkpoint_timestamps=[t for _, t in kept],
        last_preserved_timestamp=state.last_preserved_timestamp or now)
    write_checkpoint_state(directory, new_state)
    return prefix


def _paths_and_times(state: checkpoint_state_pb2.CheckpointState) -> list[tuple[str, float]]:
    times = list(state.all_model_checkpoint_timestamps)
    if len(times) != len(state.all_model_checkpoint_paths):
        times = [0.0] * len(state.all_model_checkpoint_paths)
    return list(zip(state.all_model_checkpoint_paths, times))


def _own(directory: str, path: str) -> str | None:
    """The prefix the state file's entry ``path`` names, if it is a checkpoint directly in
    ``directory`` (resolved): only such a checkpoint's files are ever removed. An entry naming
    anything else (another directory, a link out) is kept in the state file and never touched."""
    try:
        prefix = _resolve(directory, path)
    except FileAccessError:
        return None
    return prefix if os.path.dirname(prefix) == real(directory) else None


def _remove_checkpoint_files(prefix: str) -> None:
    directory, base = os.path.split(prefix)
    for name in os.listdir(directory):
        if name in (base + ".index", base + ".meta") or name.startswith(base + ".data-"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))      # a link itself, never its target


# -- TF2 object-based checkpoints -----------------------------------------------------------
def object_graph(reader: BundleReader) -> trackable_object_graph_pb2.TrackableObjectGraph | None:
    """The object graph of a TF2 checkpoint (None for a TF1 name-based one)."""
    if OBJECT_GRAPH_KEY not in reader:
        return None
    data = reader.read(OBJECT_GRAPH_KEY).reshape(-1)
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    try:
        graph.ParseFromString(bytes(data[0]) if data.size == 1 else b"")
    except Exception:
        raise CheckpointError(f"{reader.prefix}: unreadable {OBJECT_GRAPH_KEY} entry") from None
    if data.size != 1 or not graph.nodes:
        raise CheckpointError(f"{reader.prefix}: {OBJECT_GRAPH_KEY} holds no object graph")
    return graph


@dataclasses.dataclass(frozen=True)
class ObjectVariable:
    """A variable value in an object-based checkpoint: the object (node id, and its path of
    child names from the root), the tensor's key in the bundle and its TF1-style name."""
    node_id: int
    path: tuple[str, ...]
    checkpoint_key: str
    full_name: str


def _named_children(node: Any) -> Iterable[Any]:
    children: Iterable[Any] = node.children      # a repeated ObjectReference field
    return children


def object_paths(nodes: Sequence[Any], children: Callable[[Any], Iterable[Any]] = _named_children,
                 ) -> dict[int, tuple[str, ...]]:
    """Each node id reachable from node 0 with its first path of child names (breadth first)."""
    paths: dict[int, tuple[str, ...]] = {0: ()}
    queue = [0]
    for node_id in queue:
        for ref in children(nodes[node_id]):
            if ref.node_id not in paths and 0 <= ref.node_id < len(nodes):
                paths[ref.node_id] = paths[node_id] + (ref.local_name,)
                queue.append(ref.node_id)
    return paths


def object_variables(graph: trackable_object_graph_pb2.TrackableObjectGraph) -> list[ObjectVariable]:
    """Every object of ``graph`` that saves a variable value, in node order."""
    paths = object_paths(graph.nodes)
    out = []
    for node_id, node in enumerate(graph.nodes):
        for attribute in node.attributes:
            if attribute.name == VARIABLE_VALUE:
                out.append(ObjectVariable(node_id, paths.get(node_id, ()), attribute.checkpoint_key,
                                          attribute.full_name))
    return out

