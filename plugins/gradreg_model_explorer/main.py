"""The adapter Model Explorer loads for ``--extensions=gradreg_model_explorer`` (see the package docstring)."""
from __future__ import annotations

import os
from typing import Any

import dacite
from model_explorer import Adapter, AdapterMetadata, graph_builder

from gradreg.viz.explorer import explorer_graph
from gradreg.viz.sources import graph_to_draw

# What Model Explorer offers the adapter for (a SavedModel is opened by its saved_model.pb).
FILE_EXTENSIONS = ["onnx", "pb", "pbtxt"]


def model_path(path: str) -> str:
    """The path gradreg reads for a path Model Explorer hands over: a SavedModel's
    ``saved_model.pb`` stands for its directory."""
    if os.path.basename(path) == "saved_model.pb" and os.path.isdir(os.path.join(os.path.dirname(path), "variables")):
        return os.path.dirname(path) or "."
    return path


def graph_collection(path: str, settings: dict[str, Any] | None = None) -> graph_builder.GraphCollection:
    """The GraphCollection (Model Explorer's data classes) of the model at ``path``."""
    graph, title = graph_to_draw(model_path(path))
    document = explorer_graph(graph, graph_id=title)
    graphs = [dacite.from_dict(graph_builder.Graph, g) for g in document["graphs"]]
    return graph_builder.GraphCollection(label=document["label"], graphs=graphs)


class GradregAdapter(Adapter):  # type: ignore[misc]  # model_explorer carries no type information
    """GraphDef, ONNX and SavedModel files as gradreg reads and shows them."""

    metadata = AdapterMetadata(
        id="gradreg",
        name="gradreg",
        description="GraphDef, ONNX and SavedModel (saved_model.pb) files as gradreg reads them: name scopes, "
                    "SavedModel functions inlined, constants and variables listed in the ops using them",
        source_repo="https://pypi.org/project/gradreg/",
        fileExts=FILE_EXTENSIONS,
    )

    def convert(self, model_path: str, settings: dict[str, Any]) -> dict[str, Any]:
        return {"graphCollections": [graph_collection(model_path, settings)]}
