"""Graphs and gradient overlays for Google's Model Explorer (``ai-edge-model-explorer``).

    >>> from gradreg.viz.explorer import explorer_graph, node_data
    >>> collection = explorer_graph(graph, graph_id="model.pb")   # Model Explorer's graph JSON
    >>> overlays = node_data("model.pb", gradient_magnitudes(graph, [loss], feeds=feeds))

Both are plain JSON documents, written without the ``model_explorer`` package: the graph
JSON is what Model Explorer's built-in JSON loader reads (a GraphCollection: ``{"label",
"graphs": [{"id", "nodes"}]}``, the format of ``model_explorer.graph_builder``), a node-data
document is what its "node data" menu and ``--node_data_paths`` read (``{graph id:
GraphNodeData}``, the format of ``model_explorer.node_data_builder``).

What is shown is what ``gradreg view`` shows (gradreg.viz.model): every op of the graph (a
SavedModel's signature with its functions inlined, an ONNX gradient model with its grouping
functions inlined, see gradreg.viz.sources), constants, variables and their reads listed in
the ops that use them (``plumbing=True`` shows them as nodes). Each op is a node whose id is
its name, labelled with its op type (without an ``onnx::`` domain), in the namespace of its
name scopes (and of the v1 loop frames, function calls and bodies it sits in, as in the view:
``↻ frame``, ``ƒ function``); its attributes are its NodeDef's attrs and the values it reads;
each output carries its tensor name, dtype and shape (``float32[8,?,3]``), which Model
Explorer shows on the edges; control inputs are listed as an attribute linking to the nodes.
Gradient ops (gradreg.viz.model's rule) are drawn in the gradient colour of ``gradreg view``.

A node-data document maps node ids to values: gradreg.viz.magnitudes computes, for each op on
the path into the ys, the L2 norm and the largest absolute value of the gradient of the ys
with respect to its outputs; an op off the path has no entry, an op on the path that no
gradient reaches has the status ``disconnected`` (never a magnitude of 0).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from gradreg.model import attrs as attr_util
from gradreg.viz.magnitudes import DISCONNECTED, FLOWS, NON_FINITE, ZERO, NodeGradient
from gradreg.viz.model import GRADIENT, View, build_view, hide_plumbing, input_arg_names, shape_text
from gradreg.viz.style import COLOURS

# Overlays a node-data document can hold: (key, the name Model Explorer shows).
OVERLAYS = {
    "l2": "gradient L2 norm",
    "max_abs": "gradient max |g|",
    "log10_l2": "gradient log10 L2 norm",
    "status": "gradient status",
}
# Colours of the status overlay, and the ramp of the numeric ones (low to high).
STATUS_COLOURS = {FLOWS: "#fdba74", ZERO: "#bfdbfe", DISCONNECTED: "#d1d5db", NON_FINITE: "#f87171"}
RAMP = [(0.0, "#fff7ed"), (0.5, "#fb923c"), (1.0, "#9a3412")]
# Attrs not listed on a node: the output shapes are on its outputs already.
HIDDEN_ATTRS = frozenset({"_output_shapes"})
# Tensor-valued attrs show their elements up to this many.
SHOWN_ELEMENTS = 8
# A namespace component must not contain Model Explorer's separator.
_SEPARATOR = "/"
_SEPARATOR_STAND_IN = "\u2215"


def explorer_graph(graph: Any, graph_id: str, label: str | None = None, *, ys: Sequence[Any] | None = None,
                   xs: Sequence[Any] | None = None, plumbing: bool = False,
                   gradient_ops: Iterable[Any] | None = None) -> dict[str, Any]:
    """Model Explorer's graph JSON (a GraphCollection holding one graph, id ``graph_id``) of
    ``graph``: the ops ``gradreg view`` draws (``ys``/``xs`` keep those on paths from the xs
    to the ys, as there), see the module docstring. Its graph-level attributes (what Model
    Explorer's side panel shows when no node is selected) count the ops and the nodes shown."""
    view = build_view(graph, ys=ys, xs=xs, gradient_ops=gradient_ops)
    shown = view if plumbing else hide_plumbing(view)
    ops = {op.name: op for op in graph.get_operations()}
    function_inputs = _function_input_edges(shown)
    nodes = []
    for node_id in _node_order(view, shown):
        node = view.nodes[node_id]
        op = ops.get(node_id)       # None for a node of a function body (its id holds a ':')
        entry: dict[str, Any] = {
            "id": node_id,
            "label": _label(node.op_type),
            "namespace": namespace(view, node_id, shown),
            "attrs": _attrs(node, op, shown),
            "incomingEdges": (_op_edges(op, shown) if op is not None else function_inputs.get(node_id, [])),
            "outputsMetadata": _outputs(node, op),
        }
        if op is not None:
            entry["inputsMetadata"] = _inputs(op)
        if node.kind == GRADIENT:
            entry["style"] = {"backgroundColor": COLOURS[GRADIENT]["fill"], "borderColor": COLOURS[GRADIENT]["line"]}
        nodes.append(entry)
    summary = {"ops": str(len(view.nodes)), "nodes": str(len(nodes)),
               "listed in the ops using them": str(len(view.nodes) - len(shown.nodes))}
    return {"label": label or graph_id,
            "graphs": [{"id": graph_id, "nodes": nodes, "groupNodeAttributes": {"": summary}}]}


def namespace(view: View, node_id: str, shown: View | None = None) -> str:
    """The namespace of a node: the labels of the scope, loop-frame, call and function boxes
    around it, outermost first ('/'-separated; the view's groups of numbered sibling scopes,
    an aid to the graphviz layout, are left out). An op whose name is also a scope sits in
    it (``dense/BiasAdd`` beside ``dense/BiasAdd/ReadVariableOp``), unless nothing else of
    that scope is ``shown`` (its read listed in the op): then it sits beside it."""
    chain = view.chain(node_id)
    if chain and shown is not None and _alone_in_own_scope(view, shown, node_id, chain[-1]):
        chain = chain[:-1]
    parts = []
    for box_id in chain:
        box = view.boxes[box_id]
        if box.kind == "group":
            continue
        text = {"frame": "\u21bb ", "function": "\u0192 "}.get(box.kind, "") + box.label
        parts.append(text.replace(_SEPARATOR, _SEPARATOR_STAND_IN))
    return _SEPARATOR.join(parts)


def _alone_in_own_scope(view: View, shown: View, node_id: str, box_id: str) -> bool:
    box = view.boxes[box_id]
    if box.kind != "scope" or box.key != view.nodes[node_id].name:
        return False
    kept = shown.boxes.get(box_id)
    return kept is None or (kept.nodes == [node_id] and not kept.boxes)


def _node_order(view: View, shown: View) -> list[str]:
    """The shown nodes in the order of the graph (the view's insertion order)."""
    return [node_id for node_id in view.nodes if node_id in shown.nodes]


def _label(op_type: str) -> str:
    return op_type.removeprefix("onnx::")


def _op_edges(op: Any, shown: View) -> list[dict[str, str]]:
    """One incoming edge per data input whose producer is shown, by output and input index."""
    return [{"sourceNodeId": t.op.name, "sourceNodeOutputId": str(t.value_index), "targetNodeInputId": str(i)}
            for i, t in enumerate(op.inputs) if t.op.name in shown.nodes]


def _function_input_edges(shown: View) -> dict[str, list[dict[str, str]]]:
    """The data edges into nodes of function bodies (which have no Operation), numbered in order."""
    out: dict[str, list[dict[str, str]]] = {}
    for edge in shown.edges:
        if edge.control or ":" not in edge.dst:
            continue
        edges = out.setdefault(edge.dst, [])
        edges.append({"sourceNodeId": edge.src, "sourceNodeOutputId": str(edge.port),
                      "targetNodeInputId": str(len(edges))})
    return out


def _outputs(node: Any, op: Any) -> list[dict[str, Any]]:
    if op is None:
        return [{"id": str(i), "attrs": [{"key": "shape", "value": s}]} for i, s in enumerate(node.shapes) if s]
    out = []
    for t in op.outputs:
        dtype = t.dtype.name if t.dtype is not None else "?"
        out.append({"id": str(t.value_index), "attrs": [
            {"key": "tensor_name", "value": t.name},
            {"key": "dtype", "value": dtype},
            {"key": "shape", "value": tensor_text(dtype, t.shape)},
        ]})
    return out


def _inputs(op: Any) -> list[dict[str, Any]]:
    """Each input's argument name (``x``, ``filter``), which Model Explorer shows as its tag."""
    return [{"id": str(i), "attrs": [{"key": "__tensor_tag", "value": name}]}
            for i, name in enumerate(input_arg_names(op))]


def tensor_text(dtype: str, shape: Any) -> str:
    """``float32[8,?,3]``, ``float32[]`` for a scalar, ``float32[?...]`` for an unknown rank."""
    text = shape_text(shape)
    return dtype + ("[?...]" if text == "?" else text)


def _attrs(node: Any, op: Any, shown: View) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"key": "name", "value": node.name}, {"key": "op", "value": node.op_type}]
    if op is not None:
        for key in sorted(entry.key for entry in op.node_def.attr):
            if key not in HIDDEN_ATTRS:
                out.append({"key": key, "value": attr_text(attr_util.get_entry(op.node_def.attr, key))})
        control = [c.name for c in op.control_inputs if c.name in shown.nodes]
        if control:
            out.append({"key": "control inputs", "value": {"type": "node_ids", "nodeIds": control}})
    out.extend({"key": f"reads {i}", "value": line} for i, line in enumerate(shown.nodes[node.id].params))
    if node.calls:
        out.append({"key": "calls", "value": ", ".join(node.calls)})
    return out


def attr_text(value: Any) -> str:
    """An AttrValue as text: ``float32``, ``[1,2,2,1]``, ``b'SAME'`` as ``SAME``, a tensor as
    ``float32[3,3] = [...]`` (its elements when there are few)."""
    try:
        python = attr_util.from_attr_value(value)
    except Exception:   # noqa: BLE001  (an attr gradreg cannot decode is still listed, as protobuf text)
        return str(value).strip()
    return _python_text(python)


def _python_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        head = tensor_text(str(value.dtype), list(value.shape))
        if value.size <= SHOWN_ELEMENTS and value.dtype.kind in "biuf":
            return f"{head} = {np.array2string(value, separator=',')}".replace("\n", "")
        return head
    if isinstance(value, list):
        return "[" + ",".join(_python_text(v) for v in value) + "]"
    if hasattr(value, "name") and hasattr(value, "attr") and isinstance(getattr(value, "name", None), str):
        return value.name      # a NameAttrList (func attr)
    if hasattr(value, "dims"):
        return shape_text(value)
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else str(value)


# -- node data -----------------------------------------------------------------------------

def node_data(graph_id: str, magnitudes: Mapping[str, NodeGradient], overlay: str,
              title: str = "") -> dict[str, Any]:
    """One node-data document (Model Explorer's ModelNodeData: ``{graph_id: GraphNodeData}``)
    of ``magnitudes`` (node id -> NodeGradient, gradreg.viz.magnitudes): ``overlay`` is
    ``l2``, ``max_abs`` or ``log10_l2`` (a number per node a gradient reaches; disconnected
    nodes and nodes off the path get none) or ``status`` (``flows``, ``zero``,
    ``disconnected`` or ``non-finite`` per node on the path). ``title`` is added to the name
    Model Explorer shows."""
    if overlay not in OVERLAYS:
        raise ValueError(f"unknown overlay {overlay!r}: use one of {', '.join(OVERLAYS)}")
    name = OVERLAYS[overlay] + (f" ({title})" if title else "")
    results: dict[str, dict[str, Any]] = {}
    for node_id, found in magnitudes.items():
        if overlay == "status":
            results[node_id] = {"value": found.status, "bgColor": STATUS_COLOURS[found.status]}
            continue
        value = _overlay_value(found, overlay)
        if value is not None:
            results[node_id] = {"value": value}
    document: dict[str, Any] = {"name": name, "results": results}
    if overlay != "status":
        document["gradient"] = [{"stop": stop, "bgColor": colour} for stop, colour in RAMP]
    return {graph_id: document}


def _overlay_value(found: NodeGradient, overlay: str) -> float | None:
    if found.status not in (FLOWS, ZERO) or found.l2 is None or found.max_abs is None:
        return None
    if overlay == "l2":
        return found.l2
    if overlay == "max_abs":
        return found.max_abs
    return math.log10(found.l2) if found.l2 > 0 else None      # log10 of a zero gradient: no value


__all__ = ["OVERLAYS", "attr_text", "explorer_graph", "namespace", "node_data", "tensor_text"]
