"""Layer 6: graph files. One registry of formats — by file suffix, else by content — that
plugins extend through the ``gradreg_graph_formats`` hook (gradreg.registry.extensions
.GraphFormat); gradreg.load_graph, gradreg.save_graph and ``gradreg convert`` go through it.

    >>> graph = gradreg.load_graph("model.pb")
    >>> gradreg.save_graph(graph, "model.pbtxt")      # format from the suffix

GraphDef (binary and text, gradreg.formats.graphdef) is the graph format of gradreg's core; the
onnx op family adds ONNX (gradreg_plugins.onnx.format).
Beside them live the file formats of other frameworks gradreg reads and writes without them:
TensorFlow's tensor bundles (checkpoints, a SavedModel's ``variables/``, tensor_bundle), the
LevelDB-layout table their ``.index`` files use (sstable), CRC-32C, and SavedModel directories.
Writes go through gradreg.formats.atomic: the file appears complete or not at all, with the
permissions a plain write would give it (the umask for a new file, the old mode for an existing
one), and only a regular file is ever replaced.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from gradreg.errors import GradregError, GraphFileError, UnsupportedModelFormatError
from gradreg.file_access import check_named_file
from gradreg.formats.atomic import atomic_write
from gradreg.model.graph import Graph
from gradreg.registry import GraphFormat, get_registry

__all__ = ["DEFAULT_FORMAT", "atomic_write", "find_format", "format_for_path", "formats", "load_graph",
           "save_graph", "sniff_format", "write_graph"]

DEFAULT_FORMAT = "graphdef"     # what save_graph writes when nothing names a format
_SNIFF_BYTES = 4096


def formats() -> list[GraphFormat]:
    """The installed graph formats, in the order content is sniffed."""
    return get_registry().graph_formats()


def find_format(name: str) -> GraphFormat:
    """The format called ``name`` (or by an alias: "binary", "text"); GradregError naming the
    installed ones if there is none."""
    for candidate in formats():
        if name == candidate.name or name in candidate.aliases:
            return candidate
    known = ", ".join(repr(f.name) for f in formats())
    raise GradregError(f"unknown graph format {name!r}: the installed formats are {known}")


def format_for_path(path: str | os.PathLike[str], explicit: str | None = None) -> GraphFormat | None:
    """The format ``explicit`` names, else the one the suffix of ``path`` says (None if none does)."""
    if explicit is not None:
        return find_format(explicit)
    lower = os.fspath(path).lower()
    for candidate in formats():
        if lower.endswith(candidate.suffixes):
            return candidate
    return None


def sniff_format(head: bytes) -> GraphFormat | None:
    """The first format (in sniff order) that takes content starting with ``head``."""
    return next((f for f in formats() if f.sniff is not None and f.sniff(head[:_SNIFF_BYTES])), None)


def load_graph(source: str | os.PathLike[str] | bytes, format: str | None = None, *,
               base_dir: str | os.PathLike[str] | None = None) -> Graph:
    """Read a graph file (or bytes) into a new :class:`~gradreg.model.graph.Graph`; the format is
    ``format`` (a name), else the file's suffix, else its content. Files a model refers to (ONNX
    external data) are read from ``base_dir``, by default the file's own directory; bytes that
    refer to files need ``base_dir``.

    Raises GraphFileError for unreadable input or input in no known format, GraphError
    (naming the node) for a malformed graph.
    """
    beside = None if base_dir is None else os.fspath(base_dir)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _read(bytes(source), "<bytes>", None if format is None else find_format(format), beside)
    where = os.fspath(source)
    chosen = format_for_path(where, format)
    if os.path.isdir(where):
        graph = _read_directory(where, chosen)
    else:
        check_named_file(where, where)
        try:
            with open(where, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise GraphFileError(f"{where}: cannot read: {exc.strerror or exc}") from None
        if beside is None:
            beside = os.path.dirname(os.path.abspath(where))
        graph = _read(data, where, chosen, beside, by_suffix=format is None)
    graph.model_root = where      # where its file ops may read (gradreg.file_access)
    return graph


def _read(data: bytes, where: str, chosen: GraphFormat | None, base_dir: str | None,
          by_suffix: bool = False) -> Graph:
    if not data.strip():
        raise GraphFileError(f"{where}: the file is empty, not a graph")
    if chosen is None:
        chosen = sniff_format(data)
        if chosen is None:
            raise GraphFileError(f"{where}: not a graph file in any installed format")
    if chosen.read is None:
        raise GraphFileError(f"{where}: the {chosen.name} format cannot be read from a file")
    try:
        graph: Graph = read_content(chosen, data, where, base_dir)
    except GraphFileError as exc:
        # A suffix can mislead (a saved_model.pb is no GraphDef): the format the content
        # says, if another, reads it or says what it is.
        other = sniff_format(data) if by_suffix and not isinstance(exc, UnsupportedModelFormatError) else None
        if other is None or other is chosen or other.read is None:
            raise
        graph = read_content(other, data, where, base_dir)
    return graph


def read_content(chosen: GraphFormat, data: bytes, where: str, base_dir: str | None) -> Graph:
    """``data`` read by the format ``chosen``; files it refers to are read from ``base_dir``
    (formats with no such files ignore it)."""
    if base_dir is not None and chosen.read_beside is not None:
        graph: Graph = chosen.read_beside(data, where, base_dir)
        return graph
    if chosen.read is None:
        raise GraphFileError(f"{where}: the {chosen.name} format cannot be read from a file")
    graph = chosen.read(data, where)
    return graph


def _read_directory(where: str, chosen: GraphFormat | None) -> Graph:
    candidates = [chosen] if chosen is not None else formats()
    for candidate in candidates:
        if candidate.read_directory is not None and (candidate.is_directory is None or candidate.is_directory(where)):
            graph: Graph = candidate.read_directory(where)
            return graph
    raise GraphFileError(f"{where}: a directory, not a graph in any installed format")


def save_graph(graph: Any, path: str | os.PathLike[str], format: str | None = None, *,
               outputs: Mapping[str, Any] | None = None, **options: Any) -> None:
    """Write a graph (or a GraphDef) to ``path`` in ``format``, else the format its suffix says,
    else GraphDef binary. ``outputs`` ({output name: tensor}) chooses what a model format
    (ONNX) computes; a format that stores whole graphs refuses it.

    The file is written to a temporary name beside ``path`` and renamed into place, so an
    interrupted save never leaves a half-written file; it gets the permissions a plain write
    would give it. FileWriteError if ``path`` is not a regular file or cannot be written.
    ``options`` are the format's own (``opset=17`` for ONNX: its ``write_options``).
    """
    path = os.fspath(path)
    chosen = format_for_path(path, format) or find_format(DEFAULT_FORMAT)
    unknown = sorted(set(options) - set(chosen.write_options))
    if unknown:
        raise GradregError(f"{path}: the {chosen.name} format takes no option {', '.join(unknown)}")
    if outputs is not None:
        if chosen.write_outputs is None:
            raise GradregError(f"{path}: the {chosen.name} format stores the whole graph, not chosen outputs")
        atomic_write(path, chosen.write_outputs(graph, outputs, **options))
        return
    if chosen.write is None:
        raise GradregError(f"{path}: gradreg cannot write the {chosen.name} format")
    atomic_write(path, chosen.write(graph, **options))


def write_graph(graph_or_graph_def: Any, logdir: str | os.PathLike[str], name: str, as_text: bool = True) -> str:
    """Write a graph to ``logdir/name`` as GraphDef text (``as_text``) or binary, creating
    ``logdir`` if needed; returns the path. TensorFlow's tf.io.write_graph (tf.train.write_graph)."""
    os.makedirs(logdir, exist_ok=True)
    path = os.path.join(os.fspath(logdir), name)
    save_graph(graph_or_graph_def, path, "graphdef-text" if as_text else "graphdef")
    return path
