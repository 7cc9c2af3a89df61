"""The ONNX graph format: load models into a gradreg Graph of ``onnx::`` ops, write graphs back.

This module is a plugin (entry point ``onnx_format``): its ``gradreg_graph_formats`` hook
registers the format ``onnx`` (suffix ``.onnx``; content starting as a ModelProto does), so
``gradreg.load_graph``, ``save_graph``, ``gradreg.load_onnx``/``save_onnx`` and the command line
read and write it.

    >>> graph = gradreg.load_graph("model.onnx")                  # or gradreg.load_onnx(model)
    >>> gradreg.Session(graph).run("logits", {"input.1": x})       # ONNX value names work
    >>> gradreg.save_onnx(graph, "grad.onnx", {"loss": loss, "fc.weight_grad": dw})

Loading (needs the ``onnx`` extra, ``pip install "gradreg[onnx]"``):

1. read the ModelProto, with its external data: from the model's directory, refusing any
   location outside it (:mod:`gradreg_plugins.onnx.external_data`); bytes need ``base_dir``;
2. run ``onnx.checker`` — a malformed model is a GraphError naming what the checker found;
3. bring the ai.onnx opset to the one the onnx op family implements (``onnx.version_converter``
   for older models; a newer model is refused with the version numbers);
4. run onnx's shape inference, then build the graph (:mod:`gradreg_plugins.onnx.importer`).

Writing (:mod:`gradreg_plugins.onnx.exporter`) takes a graph of ``onnx::`` ops, plus
Placeholders (graph inputs), Consts (initializers), library-function calls (If/Loop/Scan
bodies, model-local functions) and the few TensorFlow ops ``gradients()`` itself adds
(AddN, ZerosLike, Fill, ...), which map to ONNX ops; a TensorFlow op with no mapping is a
GraphError naming it. The model is checked with ``onnx.checker`` (full check) before it
is written. The gradient rules that made the written nodes (their ``_gradreg_rule`` attrs,
gradreg.autodiff.provenance) travel as the model's metadata ``gradreg.gradient_rules``: JSON,
rule -> number of nodes.

This module is only the entry point: the work is the importer's and the exporter's, which it
imports when a model is first read or written (they need the onnx package, and every command
lists this format).
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import gradreg_plugins.onnx as family_package
from gradreg.errors import GraphFileError
from gradreg.formats import atomic_write
from gradreg.model.graph import Graph, Tensor
from gradreg.model.model_file import MODEL_FILE
from gradreg.progress import task
from gradreg.registry.extensions import GraphFormat
from gradreg.registry.hookspecs import hookimpl
from gradreg_plugins.onnx.schemas import INSTALL_HINT

ONNX_SUFFIXES = (".onnx",)
_log = "onnx"   # the logger gradreg.onnx (gradreg.progress)

__all__ = ["FORMAT", "INSTALL_HINT", "graph_to_model", "load_onnx", "looks_like_onnx", "model_info", "model_to_graph",
           "read_model", "save_onnx"]


def _importer(where: str) -> ModuleType:
    """The family's importer; GraphFileError naming ``where`` and the extra to install when the
    onnx package is missing or too old."""
    try:
        # start-up and an optional dependency: every command lists this format, and the onnx
        # package (which the importer needs) is imported when a model is first read or written
        import onnx  # noqa: F401

        from gradreg_plugins.onnx import declared, importer, opset  # noqa: F401  (declared: see _declarations)
    except ImportError as exc:
        if not (exc.name or "").startswith("onnx"):
            raise
        raise GraphFileError(f"{where}: reading or writing ONNX models needs the onnx package: "
                             f"{INSTALL_HINT}") from None
    opset.check_onnx_version(where)
    return importer


def _exporter(where: str) -> ModuleType:
    """The family's exporter (GraphFileError as :func:`_importer` says)."""
    _importer(where)
    from gradreg_plugins.onnx import exporter  # start-up: reading a model does not load the writer
    return exporter


def looks_like_onnx(data: bytes) -> bool:
    """Whether serialized bytes look like a ModelProto rather than a GraphDef: a ModelProto
    starts with its ir_version (field 1, a varint: byte 0x08); a GraphDef's field 1 is a
    message (0x0a) and text GraphDefs start with a letter."""
    return len(data) > 2 and data[0] == 0x08 and 0 < data[1] < 0x40


def read_model(source: str | os.PathLike | bytes, where: str | None = None, *,
               base_dir: str | os.PathLike | None = None) -> Any:
    """The ModelProto in a file or bytes, with its external data read in: a file's from its own
    directory (or ``base_dir``), bytes' from ``base_dir`` (ExternalDataError without one).
    See :mod:`gradreg_plugins.onnx.external_data` for what is refused."""
    if where is None:
        where = "<bytes>" if isinstance(source, (bytes, bytearray, memoryview)) else os.fspath(source)
    return _importer(where).read_model(source, where, base_dir=base_dir)


def load_onnx(source: Any, *, check: bool = True, base_dir: str | os.PathLike | None = None) -> Graph:
    """Load an ONNX model (path, bytes or ModelProto) into a new Graph; see the module docstring.
    External data is read from the file's directory, or ``base_dir`` (which bytes and a
    ModelProto with external data need).

    GraphFileError for an unreadable file (ExternalDataError for external data outside the
    model's directory), GraphError (naming the node) for a malformed model, UnknownOpError for
    an op the onnx family does not implement.
    """
    if hasattr(source, "graph") and hasattr(source, "opset_import"):
        return model_to_graph(source, "<ModelProto>", check=check, base_dir=base_dir)
    where = os.fspath(source) if not isinstance(source, (bytes, bytearray, memoryview)) else "<bytes>"
    return model_to_graph(read_model(source, where, base_dir=base_dir), where, check=check)


def model_to_graph(model: Any, source: str = "<ModelProto>", *, check: bool = True,
                   base_dir: str | os.PathLike | None = None) -> Graph:
    """Build a Graph from a ModelProto (checked, converted and shape-inferred first); external
    data the model still refers to is read from ``base_dir`` (ExternalDataError without one)."""
    importer = _importer(source)
    declarations = _declarations()
    facts = declarations.model_facts(model)
    with task(_log, f"reading {source} (onnx's checker, opset conversion, shape inference, import)"):
        graph: Graph = importer.model_to_graph(model, source, check=check, base_dir=base_dir)
    declared = declarations.model_file_of(graph, facts)
    if declared is not None:
        graph.resources[MODEL_FILE] = declared
    return graph


def _declarations() -> ModuleType:
    """gradreg_plugins.onnx.declared (what a model declares, for ``gradreg inspect``), which
    :func:`_importer` loads with the importer: it needs the onnx package too."""
    module: ModuleType = family_package.declared
    return module


def model_info(graph: Graph) -> Any:
    """The OnnxModelInfo a loaded model left on its graph, or None."""
    return _importer("model_info").model_info(graph)


def graph_to_model(graph: Graph, outputs: Sequence[Tensor] | Mapping[str, Tensor] | None = None, *,
                   opset: int | None = None, check: bool = True, flat: bool = False) -> Any:
    """A ModelProto computing ``outputs`` (tensors, or ONNX output name -> tensor; default: the
    loaded model's outputs, else the tensors nothing consumes) from the graph's Placeholders
    (``flat``: no model-local functions for gradient rules and expanded ops)."""
    return _exporter("writing ONNX").graph_to_model(graph, outputs, opset=opset, check=check, flat=flat)


def save_onnx(graph: Graph, path: str | os.PathLike, outputs: Any = None, *, opset: int | None = None,
              check: bool = True, flat: bool = False) -> dict[str, str]:
    """Write :func:`graph_to_model` to ``path`` atomically. Returns {tensor name: ONNX output name}."""
    exporter = _exporter(os.fspath(path))
    model = exporter.graph_to_model(graph, outputs, opset=opset, check=check, flat=flat)
    atomic_write(os.fspath(path), model.SerializeToString())
    return {t.name: name for name, t in exporter.output_pairs(graph, outputs)}


# -- the format record ----------------------------------------------------------------------------------

def _read(data: bytes, where: str) -> Graph:
    return model_to_graph(read_model(data, where), where)


def _read_beside(data: bytes, where: str, base_dir: str) -> Graph:
    return model_to_graph(read_model(data, where, base_dir=base_dir), where)


def _write(graph: Any, opset: int | None = None, flat: bool = False) -> bytes:
    if not isinstance(graph, Graph):
        raise GraphFileError(f"cannot write {type(graph).__name__} as ONNX: expected a Graph")
    return bytes(graph_to_model(graph, opset=opset, flat=flat).SerializeToString())


def _write_outputs(graph: Any, outputs: Mapping[str, Any], opset: int | None = None, flat: bool = False) -> bytes:
    if not isinstance(graph, Graph):
        raise GraphFileError(f"cannot write {type(graph).__name__} as ONNX: expected a Graph")
    return bytes(graph_to_model(graph, outputs, opset=opset, flat=flat).SerializeToString())


FORMAT = GraphFormat(
    "onnx", suffixes=ONNX_SUFFIXES, read=_read, read_beside=_read_beside, write=_write, write_outputs=_write_outputs,
    write_options=("opset", "flat"), sniff=looks_like_onnx, sniff_order=10,
    summary="ONNX model (ModelProto), through the onnx op family")


@hookimpl
def gradreg_graph_formats() -> list[GraphFormat]:
    return [FORMAT]
