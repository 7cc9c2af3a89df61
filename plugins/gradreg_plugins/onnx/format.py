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
is written.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

from gradreg.errors import GraphError, GraphFileError
from gradreg.formats import atomic_write
from gradreg.model.graph import Graph, Tensor
from gradreg.registry.extensions import GraphFormat
from gradreg.registry.hookspecs import hookimpl

INSTALL_HINT = 'pip install "gradreg[onnx]"'
ONNX_SUFFIXES = (".onnx",)

__all__ = ["FORMAT", "INSTALL_HINT", "graph_to_model", "load_onnx", "looks_like_onnx", "model_info", "model_to_graph",
           "read_model", "save_onnx"]


def _require_onnx(where: str):
    try:
        import onnx
        import onnx.defs
    except ImportError:
        raise GraphFileError(f"{where}: reading or writing ONNX models needs the onnx package: "
                             f"{INSTALL_HINT}") from None
    from gradreg_plugins.onnx.schemas import ONNX_VERSION, OPSET_VERSIONS
    if onnx.defs.onnx_opset_version() < OPSET_VERSIONS[""]:
        raise GraphFileError(f"{where}: gradreg's onnx op family implements ai.onnx opset {OPSET_VERSIONS['']} "
                             f"(onnx {ONNX_VERSION}); the installed onnx {onnx.__version__} only knows opset "
                             f"{onnx.defs.onnx_opset_version()}: {INSTALL_HINT}")
    return onnx


def looks_like_onnx(data: bytes) -> bool:
    """Whether serialized bytes look like a ModelProto rather than a GraphDef: a ModelProto
    starts with its ir_version (field 1, a varint: byte 0x08); a GraphDef's field 1 is a
    message (0x0a) and text GraphDefs start with a letter."""
    return len(data) > 2 and data[0] == 0x08 and 0 < data[1] < 0x40


def read_model(source: str | os.PathLike | bytes, where: str | None = None, *,
               base_dir: str | os.PathLike | None = None):
    """The ModelProto in a file or bytes, with its external data read in: a file's from its own
    directory (or ``base_dir``), bytes' from ``base_dir`` (ExternalDataError without one).
    See :mod:`gradreg_plugins.onnx.external_data` for what is refused."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        where = where or "<bytes>"
        onnx = _require_onnx(where)
        try:
            model = onnx.load_model_from_string(bytes(source))
        except Exception as exc:
            raise GraphFileError(f"{where}: not an ONNX model: {exc}") from None
        return _with_external_data(model, base_dir, where)
    path = os.fspath(source)
    where = where or path
    onnx = _require_onnx(where)
    if not os.path.exists(path):
        raise GraphFileError(f"{where}: cannot read: no such file")
    try:
        model = onnx.load(path, load_external_data=False)
    except OSError as exc:
        raise GraphFileError(f"{where}: cannot read: {exc.strerror or exc}") from None
    except Exception as exc:
        raise GraphFileError(f"{where}: not an ONNX model: {type(exc).__name__}: {exc}") from None
    return _with_external_data(model, os.path.dirname(os.path.abspath(path)) if base_dir is None else base_dir,
                               where)


def _with_external_data(model, base_dir: str | os.PathLike | None, where: str):
    # onnx is imported (it is an optional dependency) only once a model is read
    from gradreg_plugins.onnx.external_data import load_external_data
    return load_external_data(model, None if base_dir is None else os.fspath(base_dir), where)


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


def model_to_graph(model, source: str = "<ModelProto>", *, check: bool = True,
                   base_dir: str | os.PathLike | None = None) -> Graph:
    """Build a Graph from a ModelProto (checked, converted and shape-inferred first); external
    data the model still refers to is read from ``base_dir`` (ExternalDataError without one)."""
    from gradreg_plugins.onnx.importer import Importer, check_known_ops, densify_sparse_tensors
    onnx = _require_onnx(source)
    model = _with_external_data(model, base_dir, source)
    if check:
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as exc:
            raise GraphError(f"{source}: the ONNX checker rejects the model: {_first_lines(exc)}") from None
        except UnicodeDecodeError:       # the C++ checker's strings handed back to Python
            raise GraphError(f"{source}: the ONNX checker rejects the model: a name or string is not UTF-8") \
                from None
    check_known_ops(model, source)
    model, original = _to_family_opset(densify_sparse_tensors(model), source)
    # inference is a help, not a requirement: types come from the nodes when it fails
    with contextlib.suppress(Exception):
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    return Importer(model, source, original).run()


def _to_family_opset(model, source: str):
    """The model with its ai.onnx opset converted to the family's; (model, original version)."""
    import onnx.version_converter

    from gradreg_plugins.onnx.schemas import OPSET_VERSIONS
    target = OPSET_VERSIONS[""]
    version = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if version is None or version == target:
        return model, version
    if version > target:
        raise GraphError(f"{source}: the model uses ai.onnx opset {version}; gradreg's onnx op family implements "
                         f"opset {target} (regenerate its schema table with a newer onnx package)")
    try:
        converted = onnx.version_converter.convert_version(model, target)
    except Exception as exc:
        raise GraphError(f"{source}: cannot convert the model from ai.onnx opset {version} to {target}: "
                         f"{_first_lines(exc)}") from None
    # The converter leaves model-local functions out: convert their bodies one by one.
    converted.functions.extend(converted_function(f, target, source) for f in model.functions)
    return converted, version


def converted_function(function, target: int, source: str):
    """A model-local function with its body converted to ai.onnx opset ``target``; attributes
    that refer to the function's own (which the converter drops) are put back."""
    import onnx
    import onnx.version_converter
    from onnx import helper
    version = next((o.version for o in function.opset_import if o.domain in ("", "ai.onnx")), target)
    if version == target:
        return function
    untyped = [helper.make_value_info(n, onnx.TypeProto()) for n in function.input]
    outputs = [helper.make_value_info(n, onnx.TypeProto()) for n in function.output]
    body = helper.make_model(helper.make_graph(list(function.node), function.name, untyped, outputs),
                             opset_imports=list(function.opset_import))
    try:
        nodes = onnx.version_converter.convert_version(body, target).graph.node
    except Exception as exc:
        raise GraphError(f"{source}: cannot convert function {function.domain}::{function.name} from ai.onnx "
                         f"opset {version} to {target}: {_first_lines(exc)}") from None
    refs = {tuple(n.output): [a for a in n.attribute if a.ref_attr_name] for n in function.node}
    out = onnx.FunctionProto()
    out.CopyFrom(function)
    del out.node[:]
    for node in nodes:
        copy = out.node.add()
        copy.CopyFrom(node)
        for ref in refs.get(tuple(node.output), ()):
            kept = [a for a in copy.attribute if a.name != ref.name]
            del copy.attribute[:]
            copy.attribute.extend(kept + [ref])
    for opset in out.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = target
    return out


def _first_lines(exc: BaseException, n: int = 3) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return " ".join(lines[:n])


def model_info(graph: Graph):
    """The OnnxModelInfo a loaded model left on its graph, or None."""
    from gradreg_plugins.onnx.importer import MODEL_INFO
    return graph.resources.get(MODEL_INFO)


def graph_to_model(graph: Graph, outputs: Sequence[Tensor] | Mapping[str, Tensor] | None = None, *,
                   opset: int | None = None, check: bool = True):
    """A ModelProto computing ``outputs`` (tensors, or ONNX output name -> tensor; default: the
    loaded model's outputs, else the tensors nothing consumes) from the graph's Placeholders."""
    from gradreg_plugins.onnx.exporter import export_model
    _require_onnx("writing ONNX")
    model = export_model(graph, outputs, opset=opset)
    if check:
        import onnx
        try:
            onnx.checker.check_model(model, full_check=True)
        except Exception as exc:
            raise GraphError(f"the ONNX model written from the graph fails onnx's checker: {_first_lines(exc)}") \
                from None
    return model


def save_onnx(graph: Graph, path: str | os.PathLike, outputs: Any = None, *, opset: int | None = None,
              check: bool = True) -> dict[str, str]:
    """Write :func:`graph_to_model` to ``path`` atomically. Returns {tensor name: ONNX output name}."""
    from gradreg_plugins.onnx.exporter import output_pairs
    model = graph_to_model(graph, outputs, opset=opset, check=check)
    atomic_write(os.fspath(path), model.SerializeToString())
    return {t.name: name for name, t in output_pairs(graph, outputs)}


# -- the format record ----------------------------------------------------------------------------------

def _read(data: bytes, where: str) -> Graph:
    return model_to_graph(read_model(data, where), where)


def _read_beside(data: bytes, where: str, base_dir: str) -> Graph:
    return model_to_graph(read_model(data, where, base_dir=base_dir), where)


def _write(graph: Any) -> bytes:
    if not isinstance(graph, Graph):
        raise GraphFileError(f"cannot write {type(graph).__name__} as ONNX: expected a Graph")
    return graph_to_model(graph).SerializeToString()


def _write_outputs(graph: Any, outputs: Mapping[str, Any]) -> bytes:
    if not isinstance(graph, Graph):
        raise GraphFileError(f"cannot write {type(graph).__name__} as ONNX: expected a Graph")
    return graph_to_model(graph, outputs).SerializeToString()


FORMAT = GraphFormat(
    "onnx", suffixes=ONNX_SUFFIXES, read=_read, read_beside=_read_beside, write=_write, write_outputs=_write_outputs,
    sniff=looks_like_onnx, sniff_order=10, summary="ONNX model (ModelProto), through the onnx op family")


@hookimpl
def gradreg_graph_formats() -> list[GraphFormat]:
    return [FORMAT]
