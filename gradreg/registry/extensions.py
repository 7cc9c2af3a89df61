"""What plugins provide besides per-op-type tables: execution backends, graph file formats,
and how calls of library functions run and differentiate. Each is a small frozen record a
plugin returns from a hook (gradreg/registry/hookspecs.py); the registry keeps the one
list of each.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


def _always() -> bool:
    return True


@dataclass(frozen=True)
class Backend:
    """An execution backend, chosen by name (``Session(backend=...)``, ``GRADREG_BACKEND``).

    ``create_executor(context, check_outputs)`` returns the executor a Session compiles
    its fetches with (gradreg.runtime.executor.Executor). ``available()`` says whether it
    can run here (its optional dependency is installed). With no backend named, a Session
    takes the available backend of highest ``priority``. ``kernel_tables`` are the kernel
    tables (by backend name) its executor consults, in order.
    """
    name: str
    create_executor: Callable[..., Any]
    available: Callable[[], bool] = _always
    priority: int = 0
    kernel_tables: tuple[str, ...] = ("numpy",)
    summary: str = ""


@dataclass(frozen=True)
class GraphFormat:
    """A graph file format (gradreg.formats reads and writes graphs through these).

    ``suffixes`` pick the format from a file name (lower case, with the dot); ``sniff(head)``
    says whether content starting with ``head`` (up to 4 KiB) is in this format, for names
    with no known suffix and for raw bytes; formats are sniffed in decreasing
    ``sniff_order`` (a format that accepts anything, binary protobuf, sniffs last).
    ``read(content, where)`` returns a Graph (``where`` names the file in errors);
    ``write(graph)`` returns the file's content (a Graph, or a GraphDef for GraphDef formats).
    A format stored as a directory (SavedModel) gives ``is_directory(path)`` and
    ``read_directory(path)`` instead. ``aliases`` are other names ``format=`` accepts.
    A format that stores a model of chosen outputs rather than a whole graph (ONNX) gives
    ``write_outputs(graph, {output name: tensor})``; ``save_graph(..., outputs=...)`` and
    ``gradreg grad -o`` use it. A format whose files refer to files beside them (ONNX external
    data) gives ``read_beside(content, where, base_dir)``: ``load_graph`` calls it with the
    directory of the file it read (or the ``base_dir`` its caller gave for bytes), while
    ``read`` alone refuses content that refers to other files. ``write_options`` names the
    keyword options ``write`` and ``write_outputs`` take (ONNX: ``opset``); ``save_graph``
    passes them on and refuses others.
    """
    name: str
    suffixes: tuple[str, ...] = ()
    read: Callable[[bytes, str], Any] | None = None
    write: Callable[[Any], bytes] | None = None
    sniff: Callable[[bytes], bool] | None = None
    sniff_order: int = 0
    is_directory: Callable[[str], bool] | None = None
    read_directory: Callable[[str], Any] | None = None
    aliases: tuple[str, ...] = ()
    summary: str = ""
    write_outputs: Callable[[Any, Mapping[str, Any]], bytes] | None = None
    read_beside: Callable[[bytes, str, str], Any] | None = None
    write_options: tuple[str, ...] = ()


@dataclass(frozen=True)
class FunctionCall:
    """How a node whose op type is the name of a library function runs (``kernel``, a kernel
    factory as for any op type) and differentiates (``gradient``, a gradient rule)."""
    kernel: Callable[..., Any] | None = None
    gradient: Callable[..., Any] | None = None
