"""What a model file declares about its graph beyond the nodes: its inputs and outputs under the
file's own names (ONNX's graph inputs and outputs, symbolic dimensions by name), and facts about
the file worth showing (producer, IR version, opsets). A format's reader leaves a
:class:`ModelFile` on the graph it returns (``graph.resources[MODEL_FILE]``); a GraphDef
declares nothing and leaves none.

The command line lists a file's declared outputs in ``inspect``, runs them by default in ``run``
and prints a declared tensor under its declared name in every command.

    >>> declared = model_file(load_graph("model.onnx"))
    >>> [(t.name, t.shape) for t in declared.outputs]
    [('logits', ('batch', 10)), ('loss', ())]
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gradreg.model.graph import Graph, Tensor

__all__ = ["MODEL_FILE", "DeclaredTensor", "ModelFile", "declared_name", "model_file"]

MODEL_FILE = "gradreg.model_file"   # key of Graph.resources


@dataclass(frozen=True)
class DeclaredTensor:
    """One declared input or output: the file's name for it, the graph's tensor, its declared
    dtype name and shape (None: unknown rank; a dimension is an int, a symbol's name, or None)."""
    name: str
    tensor: Tensor
    dtype: str | None = None
    shape: tuple[int | str | None, ...] | None = None


@dataclass
class ModelFile:
    """What a model file of ``format`` declares (see the module docstring). ``facts`` are shown
    by ``gradreg inspect`` in their order, as ``key value``."""
    format: str
    inputs: list[DeclaredTensor] = field(default_factory=list)
    outputs: list[DeclaredTensor] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)

    def names(self) -> dict[Tensor, str]:
        """The declared name of each declared tensor (an output's name wins over an input's)."""
        found = {d.tensor: d.name for d in self.inputs}
        found.update((d.tensor, d.name) for d in self.outputs)
        return found


def model_file(graph: Graph) -> ModelFile | None:
    """The ModelFile the graph's reader left on it, or None (a GraphDef declares nothing)."""
    found: Any = graph.resources.get(MODEL_FILE)
    return found if isinstance(found, ModelFile) else None


def declared_name(graph: Graph, tensor: Tensor) -> str:
    """``tensor`` as the commands print it: its declared name in the model file, else the file's
    name for the value (an ONNX value name: an alias of the tensor), else the tensor's name."""
    declared = model_file(graph)
    if declared is not None:
        name = declared.names().get(tensor)
        if name is not None:
            return name
        for alias, aliased in graph.tensor_aliases().items():
            if aliased is tensor:
                return alias
    return tensor.name
