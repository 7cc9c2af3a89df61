"""Compacting a written model, the exporter's last step (needs the onnx package).

- **Folding**: a main-graph node whose inputs are all small constants written by gradreg
  (initializers that are neither graph inputs nor the loaded model's own, which stay what their
  consumers read, or outputs folded before it) becomes an initializer of the same name; so do
  Constant nodes and a CastLike of a constant to a value of known type. The function bodies
  that stand for newer ops below their opset are made of such nodes (Gelu's at opset 19: 12 nodes,
  5 once folded). Nothing larger than :data:`FOLD_LIMIT` elements is folded, nor ops that make
  large tensors from small ones (ConstantOfShape, Expand, ...).
- **Repeats**: equal small initializers are written once, and a node that repeats an earlier one
  (same op, inputs and attributes; neither random nor holding subgraphs) is dropped, its outputs
  read from the earlier node's. An Identity is dropped the same way, its output read from its input.
- **Chains**: a Reshape of a Reshape to a constant shape (without 0s that copy a dimension) reads the
  first one's input; a Transpose of a Transpose is one Transpose of the composed permutation (none
  if that is the identity).
- Nodes and initializers nothing reads are dropped.

Values the caller names in ``keep`` (a loaded model's own initializers) and graph outputs keep
their names. Subgraphs are left as written, apart from reading renamed outer values.
"""
from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

import numpy as np
import onnx
import onnx.shape_inference
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from gradreg_plugins.onnx.opset import ai_onnx_version
from gradreg_plugins.onnx.schemas import OPSET_VERSIONS, is_stateful

__all__ = ["FOLD_LIMIT", "compact"]

FOLD_LIMIT = 1024     # elements of the largest constant folded (shapes, axes, scalars, small tables)

# Ops whose outputs can be much larger than their inputs: folded only if the result is small,
# which is known only after computing it, so never.
_GROWING = frozenset({"ConstantOfShape", "Expand", "Tile", "Range", "Resize", "Upsample", "Pad", "EyeLike",
                      "Col2Im", "OneHot", "CenterCropPad"})


def compact(model: onnx.ModelProto, keep: Collection[str] = ()) -> None:
    """Fold, merge repeats and drop unused initializers in ``model``'s main graph (in place)."""
    graph = model.graph
    protected = set(keep) | {o.name for o in graph.output} | {i.name for i in graph.input}
    _fold(model, ai_onnx_version(model.opset_import, OPSET_VERSIONS[""]) or OPSET_VERSIONS[""], protected,
          set(keep))
    _collapse_chains(graph)
    renames = _merge_initializers(graph, protected)
    _merge_nodes(graph, renames, protected)
    _drop_unused_nodes(graph)
    _drop_unused_initializers(graph)


# -- folding ---------------------------------------------------------------------------------------------

def _foldable(node: onnx.NodeProto) -> bool:
    return (node.domain in ("", "ai.onnx") and not _subgraphs(node) and not is_stateful(node.op_type)
            and node.op_type not in _GROWING)


def _fold(model: onnx.ModelProto, opset: int, protected: set[str], parameters: set[str]) -> None:
    """Fold what constants written by gradreg determine (a loaded model's own initializers are
    left for whoever edits the model's parameters to find them used, not copied)."""
    graph = model.graph
    inputs = {i.name for i in graph.input}
    stored = {t.name: t for t in graph.initializer
              if t.name not in inputs and t.name not in parameters and _elements(t.dims) <= FOLD_LIMIT}
    constants: dict[str, np.ndarray] = {}

    def value(name: str) -> np.ndarray:
        if name not in constants:
            constants[name] = numpy_helper.to_array(stored[name])
        return constants[name]
    types: dict[str, int] | None = None
    kept, folded = [], []
    for node in graph.node:
        values = None
        foldable = _foldable(node) and not protected.intersection(node.output)
        if foldable and node.op_type == "CastLike" and node.input[0] in stored:
            types = _element_types(model) if types is None else types
            target = types.get(node.input[1])
            if target is not None:
                values = [value(node.input[0]).astype(helper.tensor_dtype_to_np_dtype(target))]
        elif foldable and all(n in stored for n in node.input if n):
            values = _evaluate(node, [value(n) if n else None for n in node.input], opset)
        if values is None or any(v.size > FOLD_LIMIT for v in values):
            kept.append(node)
            continue
        for name, result in zip(node.output, values):
            if name:
                constants[name] = result
                stored[name] = numpy_helper.from_array(result, name)
                folded.append(stored[name])
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(folded)


def _evaluate(node: onnx.NodeProto, values: list[np.ndarray | None], opset: int) -> list[np.ndarray] | None:
    """The node's outputs computed by onnx.reference (None if it cannot)."""
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(values)]
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.input[:] = names
    outputs = [o for o in node.output if o]
    initializers = [numpy_helper.from_array(v, n) for n, v in zip(names, values) if v is not None]
    model = helper.make_model(helper.make_graph([copy], "fold", [], [helper.make_empty_tensor_value_info(o)
                                                                       for o in outputs], initializer=initializers),
                              opset_imports=[helper.make_opsetid("", opset)])
    try:
        results: Any = ReferenceEvaluator(model).run(None, {})
    except Exception:   # an op onnx.reference does not run (or not for these types): left as a node
        return None
    by_name = dict(zip(outputs, results))
    return [np.asarray(by_name[o]) if o else np.zeros(0) for o in node.output]


def _element_types(model: onnx.ModelProto) -> dict[str, int]:
    """The element type of every main-graph value onnx's shape inference knows."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:   # a model the inference refuses: nothing is known
        return {}
    g = inferred.graph
    types = {t.name: t.data_type for t in g.initializer}
    for v in list(g.input) + list(g.value_info) + list(g.output):
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type:
            types[v.name] = v.type.tensor_type.elem_type
    return types


# -- repeats ---------------------------------------------------------------------------------------------

def _merge_initializers(graph: onnx.GraphProto, protected: set[str]) -> dict[str, str]:
    """Equal small initializers (not protected) written once: old name -> the kept one's."""
    first: dict[tuple, str] = {}
    renames: dict[str, str] = {}
    kept = []
    for t in graph.initializer:
        if t.name in protected or _elements(t.dims) > FOLD_LIMIT or t.data_location == onnx.TensorProto.EXTERNAL:
            kept.append(t)
            continue
        key = (t.data_type, tuple(t.dims), numpy_helper.to_array(t).tobytes())
        if key in first:
            renames[t.name] = first[key]
        else:
            first[key] = t.name
            kept.append(t)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return renames


def _merge_nodes(graph: onnx.GraphProto, renames: dict[str, str], protected: set[str]) -> None:
    """Drop Identities and repeated nodes, reading their outputs from what they repeat."""
    seen: dict[tuple, list[str]] = {}
    kept = []
    for node in graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        _rename_captured(node, renames)
        dropped = not protected.intersection(node.output)
        if dropped and node.op_type == "Identity" and node.domain in ("", "ai.onnx"):
            renames[node.output[0]] = node.input[0]
            continue
        key = _node_key(node) if dropped else None
        if key is not None and key in seen:
            renames.update((o, earlier) for o, earlier in zip(node.output, seen[key]) if o)
            continue
        if key is not None:
            seen[key] = list(node.output)
        kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)


def _node_key(node: onnx.NodeProto) -> tuple | None:
    if _subgraphs(node) or is_stateful(node.op_type) or not node.output:
        return None
    attrs = tuple(sorted(a.SerializeToString() for a in node.attribute))
    return node.domain or "", node.op_type, tuple(node.input), attrs, len(node.output)


def _rename_captured(node: onnx.NodeProto, renames: dict[str, str]) -> None:
    """Outer values a node's subgraphs read by name, renamed (names are unique in the model)."""
    if not renames:
        return
    for sub in _subgraphs(node):
        for inner in _all_graphs(sub):
            for n in inner.node:
                n.input[:] = [renames.get(i, i) for i in n.input]
            for o in inner.output:
                o.name = renames.get(o.name, o.name)


def _collapse_chains(graph: onnx.GraphProto) -> None:
    """Reshape(Reshape(x, s1), s2) -> Reshape(x, s2) where s2 is a constant without 0s (or allowzero);
    Transpose(Transpose(x, p1), p2) -> Transpose(x, p1[p2]), an Identity if that permutes nothing."""
    shapes = {t.name: t for t in graph.initializer} if graph.initializer else {}
    for name in [i.name for i in graph.input]:
        shapes.pop(name, None)
    producer: dict[str, onnx.NodeProto] = {}
    for node in graph.node:
        first = producer.get(node.input[0]) if node.input and node.domain in ("", "ai.onnx") else None
        if first is not None and first.op_type == node.op_type == "Reshape" and len(node.input) > 1 \
                and node.input[1] in shapes:
            allowzero = next((a.i for a in node.attribute if a.name == "allowzero"), 0)
            if allowzero or not np.any(numpy_helper.to_array(shapes[node.input[1]]) == 0):
                node.input[0] = first.input[0]
        elif first is not None and first.op_type == node.op_type == "Transpose":
            outer, inner = _perm(node), _perm(first)
            if outer is not None and inner is not None and len(outer) == len(inner):
                node.input[0] = first.input[0]
                del node.attribute[:]
                perm = [inner[i] for i in outer]
                if perm == sorted(perm):    # no permutation: an Identity, which merging drops
                    node.op_type = "Identity"
                else:
                    node.attribute.append(helper.make_attribute("perm", perm))
        for o in node.output:
            if o and node.domain in ("", "ai.onnx"):
                producer[o] = node


def _perm(node: onnx.NodeProto) -> list[int] | None:
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), None)


def _drop_unused_nodes(graph: onnx.GraphProto) -> None:
    """Drop ai.onnx nodes none of whose outputs is read (left behind by collapsing chains)."""
    needed = {o.name for o in graph.output}
    for sub in (g for node in graph.node for g in _subgraphs(node)):
        for inner in _all_graphs(sub):
            needed.update(n for node in inner.node for n in node.input)
            needed.update(o.name for o in inner.output)
    kept = []
    for node in reversed(graph.node):
        if node.domain in ("", "ai.onnx") and not _subgraphs(node) and not needed.intersection(node.output):
            continue
        needed.update(node.input)
        kept.append(node)
    if len(kept) < len(graph.node):
        del graph.node[:]
        graph.node.extend(reversed(kept))


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    used = {o.name for o in graph.output} | {i.name for i in graph.input}   # an input's default stays
    for g in _all_graphs(graph):
        used.update(n for node in g.node for n in node.input)
        used.update(o.name for o in g.output)
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)


# -- helpers ---------------------------------------------------------------------------------------------

def _elements(dims) -> int:
    return int(np.prod(list(dims), dtype=np.int64)) if len(dims) else 1


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [g for a in node.attribute for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))]


def _all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for sub in _subgraphs(node):
            yield from _all_graphs(sub)
