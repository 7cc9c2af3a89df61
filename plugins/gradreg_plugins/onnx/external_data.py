"""ONNX external data, read only from inside the model's directory.

A TensorProto may keep its bytes in another file (``data_location: EXTERNAL``, with
``location``/``offset``/``length`` entries). Every such tensor of a model is found —
dense and sparse initializers, the tensors of node attributes (``Constant``'s ``value`` and
``sparse_value``, ``tensors``, ``sparse_tensors``), in subgraphs (If/Loop/Scan bodies) and in
model-local functions — and read relative to one base directory, the model's, by onnx's own
reader (``onnx.external_data_helper.load_external_data_for_tensor``). onnx's reader refuses
what its fixes for CVE-2022-25882 and CVE-2024-27318 and their symlink and hardlink bypasses
refuse: an absolute location, a location resolving outside the directory, a symbolic link,
a file with several hard links, anything not a regular file (devices, FIFOs, directories),
an offset or length past the end of the file. gradreg also refuses any ``..`` component,
even one that would come back inside. Every refusal is an :class:`ExternalDataError` naming
the model and the tensor.

onnx's ``_get_all_tensors`` leaves sparse tensors out, and ``numpy_helper.to_array`` reads
their external data relative to the working directory: this module is why gradreg never
calls either on a tensor that still has external data.
"""
from __future__ import annotations

import os
from collections.abc import Iterator

import onnx
from onnx import external_data_helper

from gradreg.errors import ExternalDataError

__all__ = ["external_tensors", "load_external_data", "uses_external_data"]

GRAPH, GRAPHS = onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS


def uses_external_data(tensor: onnx.TensorProto) -> bool:
    """Whether ``tensor`` keeps its bytes in another file."""
    return bool(external_data_helper.uses_external_data(tensor))


def external_tensors(model: onnx.ModelProto) -> Iterator[tuple[onnx.TensorProto, str]]:
    """Every TensorProto of ``model`` that keeps its bytes in another file, with a description
    naming it ("initializer 'w'", "the indices of sparse initializer 's' in subgraph 'body'")."""
    for tensor, label in _graph_tensors(model.graph, ""):
        if uses_external_data(tensor):
            yield tensor, label
    for function in model.functions:
        for tensor, label in _node_tensors(function.node, f" in function {function.domain}::{function.name}"):
            if uses_external_data(tensor):
                yield tensor, label


def _graph_tensors(graph: onnx.GraphProto, where: str) -> Iterator[tuple[onnx.TensorProto, str]]:
    for tensor in graph.initializer:
        yield tensor, f"initializer '{tensor.name}'{where}"
    for sparse in graph.sparse_initializer:
        yield from _sparse_parts(sparse, f"sparse initializer '{sparse.values.name}'{where}")
    yield from _node_tensors(graph.node, where)


def _node_tensors(nodes, where: str) -> Iterator[tuple[onnx.TensorProto, str]]:
    for node in nodes:
        name = node.name or (node.output[0] if node.output else node.op_type)
        for attr in node.attribute:
            label = f"attribute '{attr.name}' of node '{name}' (op {node.op_type}){where}"
            if attr.HasField("t"):
                yield attr.t, f"tensor '{attr.t.name}', {label}" if attr.t.name else label
            for i, tensor in enumerate(attr.tensors):
                yield tensor, f"tensor {i} of {label}"
            if attr.HasField("sparse_tensor"):
                yield from _sparse_parts(attr.sparse_tensor, label)
            for i, sparse in enumerate(attr.sparse_tensors):
                yield from _sparse_parts(sparse, f"sparse tensor {i} of {label}")
            subgraphs = [attr.g] if attr.type == GRAPH else list(attr.graphs) if attr.type == GRAPHS else []
            for sub in subgraphs:
                yield from _graph_tensors(sub, f" in subgraph '{sub.name or attr.name}' of node '{name}'{where}")


def _sparse_parts(sparse: onnx.SparseTensorProto, label: str) -> Iterator[tuple[onnx.TensorProto, str]]:
    yield sparse.values, f"the values of {label}"
    yield sparse.indices, f"the indices of {label}"


def load_external_data(model: onnx.ModelProto, base_dir: str | None, where: str) -> onnx.ModelProto:
    """``model`` with every external tensor's bytes read from under ``base_dir`` (a copy; the
    model itself when it has none). ExternalDataError, naming ``where`` and the tensor, for a
    location onnx's rules or gradreg's refuse, or when ``base_dir`` is None (bytes or a
    ModelProto carry no directory: the caller must say where the model's files are)."""
    first = next(external_tensors(model), None)
    if first is None:
        return model
    if base_dir is None:
        raise ExternalDataError(f"{where}: {first[1]} is stored in external data "
                                f"('{_location(first[0])}'), and bytes or a ModelProto have no directory "
                                f"to read it from: pass base_dir= (the model's directory) or load the file by path")
    base = os.path.abspath(os.fspath(base_dir))
    if not os.path.isdir(base):
        raise ExternalDataError(f"{where}: the base directory for external data, {base}, is not a directory")
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for tensor, label in external_tensors(copy):
        _load_tensor(tensor, base, f"{where}: {label}")
    return copy


def _location(tensor: onnx.TensorProto) -> str:
    return next((e.value for e in tensor.external_data if e.key == "location"), "")


def _load_tensor(tensor: onnx.TensorProto, base: str, where: str) -> None:
    location = _location(tensor)
    parts = location.replace("\\", "/").split("/")
    if os.path.isabs(location) or location.startswith(("/", "\\")):
        raise ExternalDataError(f"{where}: external data location '{location}' is absolute; it must be a "
                                f"path relative to the model's directory")
    if ".." in parts:
        raise ExternalDataError(f"{where}: external data location '{location}' has a '..' component; it must "
                                f"stay inside the model's directory")
    try:
        external_data_helper.load_external_data_for_tensor(tensor, base)
    except (onnx.checker.ValidationError, ValueError, OSError, RuntimeError) as exc:
        # RuntimeError: onnx's C++ checker's std::filesystem errors (a name too long, ...)
        raise ExternalDataError(f"{where}: external data '{location}' refused: {_reason(exc, base)}") from None


def _reason(exc: BaseException, base: str) -> str:
    """onnx's message, shortened to what a user needs."""
    text = " ".join(str(exc).split())
    lowered = text.lower()
    reasons = [("symbolic link", "it is a symbolic link"),
               ("hard link", "it has several hard links (one may be a file outside the model's directory)"),
               ("outside", "it resolves outside the model's directory"),
               ("not regular file", "it is not a regular file (missing, a directory, a device or a FIFO)"),
               ("should not be empty", "its location is empty")]
    for needle, reason in reasons:
        if needle in lowered:
            return f"{reason} (model directory {base})"
    return text
