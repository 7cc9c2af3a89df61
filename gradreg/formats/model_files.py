"""Model files other than a GraphDef, in the format registry (a plugin: entry point
``model_files``), so that ``gradreg.load_graph`` and every command taking a graph give a clear
answer for them:

* a SavedModel directory (or its ``saved_model.pb``) reads as its graph — the MetaGraph tagged
  ``serve`` (or its only MetaGraph) with the function library. Its variables hold no values in
  a bare graph: :func:`gradreg.load_saved_model` restores them, and ``gradreg inspect / run /
  grad / freeze`` do so for a SavedModel directory;
* Keras archives (``.keras``), HDF5 files (``.h5``), TensorFlow Lite flatbuffers (``.tflite``),
  ONNX models (``.onnx``) and checkpoint index files are recognised by their content (or
  suffix) and refused with an UnsupportedModelFormatError saying what the file is and what to
  do. An installed format named ``onnx`` (gradreg's ONNX support) takes ONNX files instead.
"""
from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from gradreg.errors import GradregError, UnsupportedModelFormatError
from gradreg.formats import find_format, model_kinds, read_content
from gradreg.formats.model_kinds import ONNX_ADVICE, is_saved_model_dir
from gradreg.model.graph import Graph
from gradreg.registry.extensions import GraphFormat
from gradreg.registry.hookspecs import hookimpl

ONNX_FORMAT = "onnx"        # the name gradreg's ONNX support registers its format under


def _saved_model() -> ModuleType:
    # start-up: every command lists this plugin's formats; SavedModel reading (its protos, tensor
    # bundles, checkpoints) is imported when a SavedModel is read
    from gradreg.formats import saved_model
    return saved_model


def read_saved_model_directory(path: str) -> Graph:
    """The graph of the SavedModel directory ``path`` (variables not restored)."""
    graph: Graph = _saved_model().graph_of_directory(path)
    return graph


def read_saved_model_bytes(data: bytes, where: str) -> Graph:
    """The graph of a ``saved_model.pb`` file's content (variables not restored)."""
    graph: Graph = _saved_model().graph_of_bytes(data, where)
    return graph


def _refuse(kind: str) -> Callable[[bytes, str], Graph]:
    def read(data: bytes, where: str) -> Graph:
        what, todo = model_kinds.model_file_advice(kind)
        raise UnsupportedModelFormatError(f"{where}: this is {what}, not a TensorFlow graph; {todo}", kind)
    return read


def _read_onnx(data: bytes, where: str) -> Graph:
    return _read_onnx_beside(data, where, None)


def _read_onnx_beside(data: bytes, where: str, base_dir: str | None) -> Graph:
    try:
        installed = find_format(ONNX_FORMAT)
    except GradregError:     # no such format installed
        installed = None
    if installed is not None and installed.read is not None:
        return read_content(installed, data, where, base_dir)
    raise UnsupportedModelFormatError(f"{where}: this is an ONNX model; {ONNX_ADVICE}", "onnx")


def _sniffer(kind: str) -> Callable[[bytes], bool]:
    return lambda head: model_kinds.identify_model_bytes(head, complete=False) == kind


SAVED_MODEL = GraphFormat(
    "saved_model", read=read_saved_model_bytes, sniff=_sniffer("saved_model_pb"), sniff_order=40,
    is_directory=is_saved_model_dir, read_directory=read_saved_model_directory,
    summary="TensorFlow SavedModel (directory or saved_model.pb): its graph; gradreg.load_saved_model restores "
            "its variables")
REFUSED = [
    GraphFormat("keras", suffixes=(".keras",), read=_refuse("keras"), sniff=_sniffer("keras"), sniff_order=50,
                summary="Keras model archive: recognised, not read (export a SavedModel)"),
    GraphFormat("hdf5", suffixes=(".h5", ".hdf5"), read=_refuse("hdf5"), sniff=_sniffer("hdf5"), sniff_order=50,
                summary="HDF5 (Keras .h5): recognised, not read (export a SavedModel)"),
    GraphFormat("tflite", suffixes=(".tflite",), read=_refuse("tflite"), sniff=_sniffer("tflite"), sniff_order=50,
                summary="TensorFlow Lite flatbuffer: recognised, not read"),
    GraphFormat("tf-checkpoint", suffixes=(".index",), read=_refuse("checkpoint"),
                summary="TensorFlow checkpoint index: recognised, not a graph"),
    # Sorted after an installed "onnx" format for the same suffix, and hands ONNX files to it.
    GraphFormat("onnx-fallback", suffixes=(".onnx",), read=_read_onnx, read_beside=_read_onnx_beside,
                sniff=_sniffer("onnx"), sniff_order=-50,
                summary="ONNX model: recognised; read by gradreg's ONNX support when it is installed"),
]


@hookimpl
def gradreg_graph_formats() -> list[GraphFormat]:
    return [SAVED_MODEL, *REFUSED]

