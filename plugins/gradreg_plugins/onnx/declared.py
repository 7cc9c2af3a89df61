"""What an ONNX file declares about its graph, as :class:`gradreg.model.model_file.ModelFile`:
its graph inputs (not the initializers an IR < 4 model also lists among them) and outputs under
their ONNX names, with their declared types (symbolic dimensions by name), and facts about the
file (producer, IR version, opsets, conversion, initializers). The format's reader
(gradreg_plugins.onnx.format) leaves it on the graph; ``gradreg inspect``, ``run`` and ``grad``
read it."""
from __future__ import annotations

from typing import Any

import onnx

from gradreg.errors import GraphError
from gradreg.model.graph import Graph, Tensor
from gradreg.model.model_file import DeclaredTensor, ModelFile
from gradreg_plugins.onnx.importer import model_info
from gradreg_plugins.onnx.nodes import dtype_of_element_type

__all__ = ["model_facts", "model_file_of"]


def model_facts(model: Any) -> dict[str, str]:
    """What ``gradreg inspect`` shows about an ONNX file as it was written: producer, IR version,
    opsets, graph name, model version, initializers."""
    facts = {"producer": f"{model.producer_name} {model.producer_version}".strip() or "(none)",
             "IR version": str(model.ir_version),
             "opsets": ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)}
    if model.graph.name:
        facts["graph"] = model.graph.name
    if model.model_version:
        facts["model version"] = str(model.model_version)
    facts["initializers"] = str(len(model.graph.initializer) + len(model.graph.sparse_initializer))
    return facts


def model_file_of(graph: Graph, facts: dict[str, str]) -> ModelFile | None:
    """The declarations of the model ``graph`` was imported from (None if it was not)."""
    info = model_info(graph)
    if info is None:
        return None
    facts = dict(facts)
    ai_onnx = info.opset_imports.get("", info.opset_imports.get("ai.onnx"))
    if info.original_opset is not None and ai_onnx is not None and info.original_opset != ai_onnx:
        facts["converted to"] = f"ai.onnx opset {ai_onnx} (onnx's version converter)"
    if info.defaulted:
        facts["initializers"] += f" ({len(info.defaulted)} also listed as graph inputs)"

    def entry(name: str, tensor: Tensor) -> DeclaredTensor:
        proto = onnx.TypeProto.FromString(info.value_types[name]) if name in info.value_types else None
        return DeclaredTensor(name, tensor, *_declared_type(proto))

    return ModelFile("onnx", inputs=[entry(n, t) for n, t in info.inputs if n not in info.defaulted],
                     outputs=[entry(n, t) for n, t in info.outputs], facts=facts)


def _declared_type(proto: Any) -> tuple[str | None, tuple[int | str | None, ...] | None]:
    """(dtype name, shape) of a declared TypeProto; a sequence or map is "variant" of unknown rank."""
    kind = None if proto is None else proto.WhichOneof("value")
    if kind not in ("tensor_type", "sparse_tensor_type"):
        return ("variant" if kind else None), None
    tensor_type = getattr(proto, kind)
    try:
        dtype: str | None = dtype_of_element_type(tensor_type.elem_type, "").name
    except GraphError:
        dtype = None
    if not tensor_type.HasField("shape"):
        return dtype, None
    dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor_type.shape.dim)
    return dtype, dims
