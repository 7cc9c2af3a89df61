"""What ``gradreg view`` draws from a path: a graph file's graph, or one signature of a
SavedModel directory as one flat graph, its function calls inlined and its variables named
(gradreg.formats.signature_graph): the network itself rather than a call of it surrounded by
the variables' initialization and checkpoint plumbing the MetaGraph holds."""
from __future__ import annotations

import os
from collections.abc import Sequence

from gradreg.build.inline import inline_calls, is_call
from gradreg.formats import load_graph
from gradreg.formats.model_kinds import is_saved_model_dir
from gradreg.formats.saved_model import DEFAULT_TAGS
from gradreg.formats.saved_model_loader import load_saved_model
from gradreg.formats.signature_graph import signature_graph
from gradreg.model.graph import Graph, import_graph_def


def graph_to_draw(path: str | os.PathLike[str], signature: str | None = None,
                  tags: Sequence[str] | None = None) -> tuple[Graph, str]:
    """(graph, title) for ``path``: a graph file's graph and its name, or a SavedModel's
    signature ``signature`` (default ``serving_default``, or the only one) of the MetaGraph
    tagged ``tags`` as a flat graph, titled with the directory and the signature."""
    where = os.fspath(path)
    title = os.path.basename(os.path.normpath(where))
    if not is_saved_model_dir(where):
        return _grouping_inlined(load_graph(where), where), title
    # a picture runs no op of the model (docs/security.md) and needs no value
    model = load_saved_model(where, tuple(tags or DEFAULT_TAGS), run_init_op=False)
    flat = signature_graph(model, signature, with_values=False)
    # the ops the signature's outputs need (flat.graph also holds the reads its Variables made)
    return import_graph_def(flat.graph_def(), source=where), f"{title} \u2014 signature {flat.signature}"


# The functions gradreg's ONNX writer groups nodes into (one call per op's gradient, per op
# expanded below the opset): a picture draws their nodes, as the graph they were written from.
GROUPING_DOMAINS = ("gradreg.gradients::", "gradreg.expanded::")


def _grouping_inlined(graph: Graph, where: str) -> Graph:
    """``graph`` with its function calls inlined when it holds calls of gradreg's grouping
    functions (an ONNX gradient model as gradreg writes it); otherwise ``graph`` itself."""
    ops = graph.get_operations()
    if not any(is_call(op) and op.type.startswith(GROUPING_DOMAINS) for op in ops):
        return graph
    sinks = [op for op in ops if not any(t.consumers() for t in op.outputs)]
    return import_graph_def(inline_calls(graph, sinks).graph_def, source=where)
