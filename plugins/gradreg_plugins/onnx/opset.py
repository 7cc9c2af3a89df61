"""Opset conversion: models read are brought to the onnx family's ai.onnx opset, and function
bodies with them, by onnx's version converter (:func:`to_family_opset`,
:func:`converted_function`); a model written at an older opset is converted down from it
(:func:`to_opset`).

The converter does not know model-local functions (their bodies are converted one by one here)
nor sparse tensors (the importer makes them dense first).
"""
from __future__ import annotations

import onnx
import onnx.defs
import onnx.version_converter
from onnx import helper

from gradreg.errors import GraphError, GraphFileError
from gradreg_plugins.onnx.schemas import INSTALL_HINT, ONNX_VERSION, OPSET_VERSIONS

__all__ = ["ai_onnx_version", "check_onnx_version", "converted_function", "first_lines",
           "to_family_opset", "to_opset"]


def check_onnx_version(where: str) -> None:
    """GraphFileError naming ``where`` when the installed onnx does not know the family's opset
    (its converter could not bring models to it)."""
    known = onnx.defs.onnx_opset_version()
    if known < OPSET_VERSIONS[""]:
        raise GraphFileError(f"{where}: gradreg's onnx op family implements ai.onnx opset {OPSET_VERSIONS['']} "
                             f"(onnx {ONNX_VERSION}); the installed onnx {onnx.__version__} only knows opset "
                             f"{known}: {INSTALL_HINT}")


def first_lines(exc: BaseException, n: int = 3) -> str:
    """The first ``n`` non-empty lines of an onnx error, as one line."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return " ".join(lines[:n])


def ai_onnx_version(opset_imports, default: int | None = None) -> int | None:
    """The ai.onnx version among OperatorSetIdProtos (``default`` if none is)."""
    return next((o.version for o in opset_imports if o.domain in ("", "ai.onnx")), default)


def to_family_opset(model: onnx.ModelProto, source: str) -> tuple[onnx.ModelProto, int | None]:
    """The model with its ai.onnx opset converted to the family's; (model, original version)."""
    target = OPSET_VERSIONS[""]
    version = ai_onnx_version(model.opset_import)
    if version is None or version == target:
        return model, version
    if version > target:
        raise GraphError(f"{source}: the model uses ai.onnx opset {version}; gradreg's onnx op family implements "
                         f"opset {target} (regenerate its schema table with a newer onnx package)")
    try:
        converted = onnx.version_converter.convert_version(model, target)
    except Exception as exc:
        raise GraphError(f"{source}: cannot convert the model from ai.onnx opset {version} to {target}: "
                         f"{first_lines(exc)}") from None
    # The converter leaves model-local functions out: convert their bodies one by one.
    converted.functions.extend(converted_function(f, target, source) for f in model.functions)
    return converted, version


def to_opset(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """A model written at the family's opset converted to ai.onnx ``opset`` (GraphError if onnx's
    converter cannot)."""
    if opset == OPSET_VERSIONS[""]:
        return model
    try:
        return onnx.version_converter.convert_version(model, opset)
    except Exception as exc:
        raise GraphError(f"cannot convert the written model to opset {opset}: {first_lines(exc)}") from None


def converted_function(function: onnx.FunctionProto, target: int, source: str) -> onnx.FunctionProto:
    """A model-local function with its body converted to ai.onnx opset ``target``; attributes
    that refer to the function's own (which the converter drops) are put back."""
    version = ai_onnx_version(function.opset_import, target)
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
                         f"opset {version} to {target}: {first_lines(exc)}") from None
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
