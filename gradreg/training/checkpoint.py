"""Checkpoints: saving and restoring variables (and optimizer slots) of a Session.

File format (version 1). A checkpoint is one NumPy ``.npz`` archive:

* one array per variable, keyed by the variable's op name (``dense/kernel``,
  ``dense/kernel/Adam`` for a slot, ``global_step``), holding its value (bfloat16 values
  are stored widened to float32);
* the key ``__gradreg_checkpoint__``: a JSON document ``{"format": "gradreg-checkpoint",
  "version": 1, "variables": {name: {"dtype": "float32", "shape": [784, 512]}}}``.

Any NumPy can read it: ``np.load(path)["dense/kernel"]``. Saving writes a temporary file
beside the target, flushes it to disk and renames it into place, so a crash mid-save never
damages the previous checkpoint. :class:`Saver` also keeps a small JSON index file
``checkpoint`` in the directory (written the same way) naming the latest checkpoints.

    saver = gradreg.train.Saver()
    path = saver.save(sess, "runs/model", global_step=1000)     # runs/model-1000.npz
    saver.restore(sess, gradreg.train.latest_checkpoint("runs"))

TensorFlow's format. ``Saver(format="tf")`` — or, with no format given, a save path whose
name ends in ``.ckpt`` (TensorFlow's usual ``model.ckpt``) — writes what
``tf.compat.v1.train.Saver`` writes: the tensor bundle ``model.ckpt-1000.index`` /
``.data-00000-of-00001`` keyed by variable name, and TensorFlow's text ``checkpoint`` state
file (gradreg.formats.tf_checkpoint). :meth:`Saver.restore` recognises either format by what
is on disk, so a TF v1 checkpoint restores into a gradreg graph by variable name, and
:func:`latest_checkpoint` reads either state file. (Keep the two formats in separate
directories: both name their state file ``checkpoint``.) :func:`import_meta_graph` reads a
``.meta`` file as TensorFlow does, partitioned variables included.

    saver = gradreg.train.Saver(format="tf")
    prefix = saver.save(sess, "runs/model.ckpt", global_step=1000)   # runs/model.ckpt-1000
    saver.restore(sess, "tf_runs/model.ckpt-3")                       # written by TensorFlow
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from gradreg.errors import CheckpointError, FeedError, GradregError
from gradreg.file_access import FileAccess, check_file, resolve_inside
from gradreg.formats import atomic_write, tf_checkpoint
from gradreg.formats.arrays import read_npz
from gradreg.formats.npz import save_npz
from gradreg.formats.saved_model import variable_def
from gradreg.formats.tensor_bundle import index_path, slice_region
from gradreg.model.graph import get_default_graph, import_graph_def
from gradreg.proto import meta_graph_pb2
from gradreg.runtime.state import variable_key, variable_state
from gradreg.training.variables import GraphKeys, global_variables, variable_from_op

FORMAT = "gradreg-checkpoint"
VERSION = 1
METADATA_KEY = "__gradreg_checkpoint__"
INDEX_FILE = "checkpoint"

def _state(session, var):
    return variable_state(session.context, variable_key(var.op), var.dtype, var.shape)

def save_variables(session, var_list: Sequence[Any], path: str) -> str:
    """Write the values ``var_list`` have in ``session`` to ``path`` (atomically); returns the path."""
    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, dict] = {}
    for var in var_list:
        name = var.op.name
        if name in arrays:
            raise CheckpointError(f"two variables to save are both called '{name}'")
        state = _state(session, var)
        if not state.initialized:
            raise CheckpointError(f"cannot save variable '{name}': it is not initialized in this session")
        value = state.read()
        arrays[name] = value
        meta[name] = {"dtype": var.dtype.name, "shape": list(value.shape)}
    arrays[METADATA_KEY] = np.array(json.dumps({"format": FORMAT, "version": VERSION, "variables": meta}))
    try:
        save_npz(path, arrays)
    except Exception as exc:
        raise CheckpointError(f"{path}: cannot write checkpoint: {exc}") from None
    return path

def read_checkpoint(path: str) -> tuple[dict[str, dict], dict[str, np.ndarray]]:
    """The metadata and the arrays of a checkpoint file. The file may be hostile: it is read as
    feed files are (gradreg.formats.arrays: no objects or pickles, every array's size checked
    before its data is read); anything that is not a gradreg checkpoint is a CheckpointError."""
    # The checkpoint's directory is its root: no link out, no file with other hard links (nor a FIFO).
    whole = os.path.abspath(os.fspath(path))
    FileAccess(os.path.dirname(whole)).check(whole, "read", "checkpoint")
    try:
        arrays = read_npz(path)
    except FeedError as exc:
        raise CheckpointError(f"not a gradreg checkpoint: {exc}") from None
    if METADATA_KEY not in arrays:
        raise CheckpointError(f"{path}: not a gradreg checkpoint (no {METADATA_KEY} entry)")
    try:
        meta = json.loads(str(arrays.pop(METADATA_KEY)))
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION \
            or not isinstance(meta.get("variables"), dict):
        shown = meta if not isinstance(meta, dict) else f"{meta.get('format')} version {meta.get('version')}"
        raise CheckpointError(f"{path}: unsupported checkpoint format {str(shown)[:80]}")
    return meta["variables"], arrays


def restore_variables(session, var_list: Sequence[Any], path: str) -> None:
    """Set ``var_list`` in ``session`` from the checkpoint at ``path``. Every variable must be
    in the file with the same dtype and shape; otherwise CheckpointError names the variable and
    nothing is changed."""
    entries, arrays = read_checkpoint(path)
    values = []
    for var in var_list:
        name = var.op.name
        entry = entries.get(name)
        if not isinstance(entry, dict) or name not in arrays:
            raise CheckpointError(f"{path}: checkpoint has no variable '{name}'")
        if entry.get("dtype") != var.dtype.name:
            raise CheckpointError(f"{path}: variable '{name}' is {var.dtype.name} in the graph but "
                                  f"{str(entry.get('dtype'))[:40]} in the checkpoint")
        value = arrays[name]
        if not var.shape.is_compatible_with(value.shape):
            raise CheckpointError(f"{path}: variable '{name}' has shape {var.shape} in the graph but "
                                  f"{list(value.shape)} in the checkpoint")
        values.append((var, value))
    for var, value in values:    # only after every check passed: a failed restore changes nothing
        _state(session, var).assign(value, validate_shape=False)


FORMATS = ("npz", "tf")


class Saver:
    """Save and restore a list of variables (default: all global variables, which include the
    optimizers' slots and the global step), keeping the newest ``max_to_keep`` files.
    ``format``: "npz" (gradreg's), "tf" (TensorFlow's V2 checkpoints), or None — TensorFlow's
    for a save path ending in ``.ckpt``, else gradreg's (see the module docstring)."""

    def __init__(self, var_list: Sequence[Any] | None = None, max_to_keep: int = 5, format: str | None = None):
        if format not in (None, *FORMATS):
            raise GradregError(f"Saver(format={format!r}): the formats are {', '.join(FORMATS)}")
        self._var_list = list(var_list) if var_list is not None else None
        self.max_to_keep = max_to_keep
        self.format = format

    def _variables(self, session) -> list:
        if self._var_list is not None:
            return self._var_list
        return global_variables(session.graph)

    def save(self, session, save_path: str, global_step: Any = None) -> str:
        """Save to ``save_path`` (``-<step>`` appended when ``global_step`` is given, ``.npz`` if no
        suffix; in TensorFlow's format the bundle prefix); returns the file's path (the prefix)."""
        save_path = os.fspath(save_path)
        if self._format_for(save_path) == "tf":
            step = None if global_step is None else _step_value(session, global_step)
            tensors, kinds = _tf_tensors(session, self._variables(session))
            return tf_checkpoint.save_checkpoint(save_path, tensors, step, self.max_to_keep or 0, kinds)
        if global_step is not None:
            if isinstance(global_step, (int, np.integer)) or (isinstance(global_step, np.ndarray)
                                                             and global_step.size == 1):
                step = int(global_step)   # a number, or a value fetched from the session
            else:
                step = int(session.run(global_step))   # a tensor or variable
            save_path = f"{save_path}-{step}"
        if not save_path.endswith(".npz"):
            save_path += ".npz"
        directory = os.path.dirname(os.path.abspath(save_path))
        os.makedirs(directory, exist_ok=True)
        # The directory is the caller's; what is in it may not be: never write through a link out.
        resolve_inside(directory, os.path.basename(save_path), f"'{directory}'")
        save_variables(session, self._variables(session), save_path)
        self._update_index(directory, save_path)
        return save_path

    def restore(self, session, save_path: str) -> None:
        """Set the variables from the checkpoint ``save_path``: a gradreg ``.npz`` file, or a
        TensorFlow checkpoint (a prefix such as ``model.ckpt-3``, its ``.index`` file, or a
        directory with a TensorFlow ``checkpoint`` state file)."""
        if save_path is None:
            raise CheckpointError("no checkpoint to restore (latest_checkpoint found none?)")
        save_path = os.fspath(save_path)
        if is_tf_checkpoint(save_path):
            restore_tf_variables(session, self._variables(session), save_path)
        else:
            restore_variables(session, self._variables(session), save_path)

    def _format_for(self, save_path: str) -> str:
        if self.format is not None:
            return self.format
        return "tf" if os.path.basename(save_path).endswith(".ckpt") else "npz"

    def _update_index(self, directory: str, path: str) -> None:
        index_path = os.path.join(directory, INDEX_FILE)
        kept = _read_index(directory)
        name = os.path.basename(path)
        kept = [k for k in kept if k != name] + [name]
        for old in kept[:-self.max_to_keep] if self.max_to_keep else []:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, old))     # a file of this directory (or a link itself)
        kept = kept[-self.max_to_keep:] if self.max_to_keep else kept
        index_path = resolve_inside(directory, INDEX_FILE, f"'{directory}'")      # never through a link out
        atomic_write(index_path, json.dumps({"latest": name, "all": kept}, indent=1).encode())

def _read_index(directory: str) -> list[str]:
    """The checkpoints gradreg's index file in ``directory`` names, oldest first: only names of
    files directly in ``directory`` (the index is a file of the directory, as hostile as any;
    an entry such as ``../x`` or ``/etc/x`` is ignored, never read or removed)."""
    path = os.path.join(directory, INDEX_FILE)
    try:
        check_file(path, f"'{directory}'", single_link=False)      # a FIFO would block the read
        with open(path, "rb") as f:
            kept = json.loads(f.read(1 << 20))["all"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if not isinstance(kept, list):
        return []
    return [k for k in kept if isinstance(k, str) and k not in ("", ".", "..") and os.path.basename(k) == k
            and "\0" not in k]

def latest_checkpoint(directory: str) -> str | None:
    """The path of the newest checkpoint a Saver wrote in ``directory`` (a TensorFlow
    checkpoint's prefix if the state file is TensorFlow's), or None."""
    kept = _read_index(directory)
    if kept:
        return os.path.join(directory, kept[-1])
    try:
        return tf_checkpoint.latest_checkpoint(directory)
    except CheckpointError:      # neither gradreg's JSON nor TensorFlow's text state file
        return None


# -- TensorFlow's format -------------------------------------------------------------------------------

def is_tf_checkpoint(path: str) -> bool:
    """Whether ``path`` names a TensorFlow checkpoint: a bundle prefix, its ``.index`` or
    ``.data-*`` file, or a directory whose state file names one."""
    if os.path.isdir(path):
        return _read_index(path) == [] and latest_checkpoint(path) is not None
    base = os.path.basename(path)
    return path.endswith(".index") or ".data-" in base or os.path.exists(index_path(path))


def _step_value(session, global_step: Any) -> int:
    if isinstance(global_step, (int, np.integer)) or (isinstance(global_step, np.ndarray) and global_step.size == 1):
        return int(global_step)
    return int(session.run(global_step))


def tf_key(var) -> tuple[str, str]:
    """(checkpoint key, slice spec) TensorFlow's v1 Saver uses for a variable: its op name, or for
    one part of a partitioned variable the whole variable's name and the part's slice."""
    info = getattr(var, "save_slice_info", None)
    if info is None:
        return var.op.name, ""
    return info


def _tf_tensors(session, var_list: Sequence[Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The values to write, by key (the parts of a partitioned variable assembled), and dtypes."""
    tensors: dict[str, np.ndarray] = {}
    kinds: dict[str, Any] = {}
    for var in var_list:
        key, spec = tf_key(var)
        state = _state(session, var)
        if not state.initialized:
            raise CheckpointError(f"cannot save variable '{var.op.name}': it is not initialized in this session")
        value = state.read()
        kinds[key] = var.dtype
        if not spec:
            if key in tensors:
                raise CheckpointError(f"two variables to save are both called '{key}'")
            tensors[key] = value
            continue
        full_shape = tuple(int(d) for d in spec.split(" ")[:-1])
        full = tensors.setdefault(key, np.zeros(full_shape, value.dtype))
        full[slice_region(spec, full_shape, key)] = value
    return tensors, kinds


def restore_tf_variables(session, var_list: Sequence[Any], path: str) -> None:
    """Set ``var_list`` in ``session`` from the TensorFlow checkpoint ``path`` (by variable name,
    as tf.compat.v1.train.Saver restores); CheckpointError naming the variable if one is
    missing or does not fit, and then nothing is changed."""
    reader = tf_checkpoint.checkpoint_reader(path)
    values = []
    for var in var_list:
        key, spec = tf_key(var)
        name = var.op.name
        if key not in reader:
            raise CheckpointError(f"{reader.prefix}: checkpoint has no variable '{key}'")
        if reader.dtype(key) is not var.dtype.base_dtype:
            raise CheckpointError(f"{reader.prefix}: variable '{name}' is {var.dtype.name} in the graph but "
                                  f"{reader.dtype(key).name} in the checkpoint")
        value = reader.read(key)
        if spec:
            value = value[slice_region(spec, value.shape, key)]
        if not var.shape.is_compatible_with(value.shape):
            raise CheckpointError(f"{reader.prefix}: variable '{name}' has shape {var.shape} in the graph but "
                                  f"{list(value.shape)} in the checkpoint")
        values.append((var, value))
    for var, value in values:    # only after every check passed: a failed restore changes nothing
        _state(session, var).assign(value, validate_shape=False)


def import_meta_graph(path: str, clear_devices: bool = False) -> Saver:
    """Read a ``.meta`` file (a MetaGraphDef, as tf.compat.v1.train.Saver writes next to its
    checkpoints) into the default graph, which must be empty, as TensorFlow's
    ``import_meta_graph`` does; the graph's collections hold its variables (parts of
    partitioned variables know their slice). Returns a Saver for them:

        with gradreg.Graph().as_default() as g:
            saver = gradreg.train.import_meta_graph("model.ckpt-3.meta")
            sess = gradreg.Session(g)
            saver.restore(sess, "model.ckpt-3")
    """
    path = os.fspath(path)
    meta = meta_graph_pb2.MetaGraphDef()
    check_file(path, path, single_link=False)      # a FIFO would block: a .meta is a file beside checkpoints
    try:
        with open(path, "rb") as f:
            meta.ParseFromString(f.read())
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except Exception as exc:   # protobuf's DecodeError
        raise CheckpointError(f"{path}: not a MetaGraphDef ({exc})") from None
    graph = get_default_graph()
    if len(graph):
        raise GradregError("import_meta_graph imports into the default graph, which must be empty: "
                           "use `with gradreg.Graph().as_default():`")
    if clear_devices:
        for node in meta.graph_def.node:
            node.device = ""
    import_graph_def(meta.graph_def, source=path, graph=graph)
    # Its save and restore ops may read the checkpoints beside it (gradreg.file_access).
    graph.model_root = os.path.dirname(os.path.abspath(path))
    return Saver(_meta_graph_variables(meta, graph, path))


def _meta_graph_variables(meta, graph, path: str) -> list:
    collections = {entry.key: entry.value for entry in meta.collection_def}
    trainable = set()
    found = collections.get(GraphKeys.TRAINABLE_VARIABLES)
    if found is not None:
        trainable = {variable_def(v, path, CheckpointError).variable_name for v in found.bytes_list.value}
    out = []
    found = collections.get(GraphKeys.GLOBAL_VARIABLES)
    for entry in found.bytes_list.value if found is not None else ():
        definition = variable_def(entry, path, CheckpointError)
        op_name = definition.variable_name.split(":")[0]
        if op_name not in graph:
            raise CheckpointError(f"{path}: the variables collection names '{op_name}', which is not in the graph")
        is_trainable = definition.variable_name in trainable
        var = variable_from_op(graph.get_operation(op_name), is_trainable,
                               [GraphKeys.GLOBAL_VARIABLES] + ([GraphKeys.TRAINABLE_VARIABLES] if is_trainable else []))
        info = definition.save_slice_info_def
        if info.full_name:
            extents = ":".join(f"{o},{n}" for o, n in zip(info.var_offset, info.var_shape))
            var.save_slice_info = (info.full_name, " ".join(str(d) for d in info.full_shape) + " " + extents)
        out.append(var)
    return out
