"""Gathering a written model's node groups into model-local functions, the exporter's step after
compacting (needs the onnx package).

A gradient graph holds, for each op, the few nodes its gradient rule made (Gemm's three,
LayerNormalization's twelve); below the opset that introduced an op, the op is written as its
schema's function body. Both are one thing to a reader, so each such group becomes one call
of a model-local function, as onnxruntime's training graphs hold one ``LayerNormalizationGrad``:

- the nodes a gradient rule made for one op (its name scope ``.../<op>_grad``) become a call of
  ``gradreg.gradients::<Rule>Grad``, e.g. ``LayerNormalizationGrad``;
- the nodes of one op's function body (``<node>/expanded_<Op>_N/``) become a call of
  ``gradreg.expanded::<Op>``, e.g. ``Gelu`` at opsets below 20.

Groups that make the same body share one function (``<Rule>Grad_2`` and so on when bodies differ).
The body holds the constants that are part of its formula (scalars, axes, shapes) as Constant nodes;
the model's own initializers, other values (a gradient's seed) and every value made outside the group
are the call's inputs. A group is left as
nodes when it has one node, holds a subgraph, or is not convex (a path leaves it and comes back),
since a call must run after all its inputs. onnxruntime inlines the functions when it loads the
model; ``onnx.inliner.inline_local_functions`` gives the flat model.
"""
from __future__ import annotations

import heapq
import re
from collections import deque
from collections.abc import Collection, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["EXPANDED_DOMAIN", "GRADIENTS_DOMAIN", "gather_groups", "gradient_scope"]

GRADIENTS_DOMAIN = "gradreg.gradients"
EXPANDED_DOMAIN = "gradreg.expanded"
BODY_CONSTANT_LIMIT = 16   # elements of the largest integer initializer (axes, a shape) written in a body

_GRAD_SCOPE = re.compile(r"_grad(_\d+)?$")
_EXPANDED_SCOPE = re.compile(r"^expanded_(\w+)_\d+$")


def gradient_scope(name: str) -> str | None:
    """The name scope of the gradient rule call that made the node ``name``: its innermost
    ``<op>_grad`` scope (None outside any)."""
    parts = name.split("/")[:-1]
    for end in range(len(parts), 0, -1):
        if _GRAD_SCOPE.search(parts[end - 1]):
            return "/".join(parts[:end])
    return None


def gather_groups(model: onnx.ModelProto, rule_scopes: Mapping[str, str], keep: Collection[str] = ()) -> None:
    """Replace each group of main-graph nodes by a call of a model-local function (in place).
    ``rule_scopes``: gradient scope -> the rule's name (the op type it differentiates);
    ``keep``: the loaded model's own initializers (always inputs of a call)."""
    graph = model.graph
    nodes = [_copy(node) for node in graph.node]
    groups = _groups(nodes, rule_scopes)
    if not groups:
        return
    read_outside = {o.name for o in graph.output} | _subgraph_reads(graph)
    initializers = {t.name: t for t in graph.initializer}
    outside = set(keep) | {i.name for i in graph.input}
    inlined = {t.name for t in graph.initializer if t.name not in outside and _structural(t)}
    opsets = list(model.opset_import)
    functions: dict[tuple[str, str], list[onnx.FunctionProto]] = {}
    # nodes by id, with what each reads (its subgraphs' outer values too) and makes: protobuf fields
    # are slow to read, and groups are gathered one at a time on the graph with the earlier groups'
    # calls, as two groups that are each convex could still feed each other both ways
    by_id = {id(node): node for node in nodes}
    reads = {id(node): frozenset(node.input) | outer for node, outer in zip(nodes, _outer_reads(nodes))}
    makes = {id(node): tuple(o for o in node.output if o) for node in nodes}
    consumers: dict[str, set[int]] = {}
    for key, names in reads.items():
        for name in names:
            consumers.setdefault(name, set()).add(key)
    replaced: dict[int, onnx.NodeProto] = {}     # a group's first node -> its call; other members dropped
    for (domain, base, scope), group in groups.items():
        members = [id(node) for node in group]
        if len(members) < 2 or not _convex(set(members), makes, consumers):
            continue
        body, inputs, outputs = _body([by_id[m] for m in members], set(members), consumers, read_outside,
                                      initializers, inlined)
        function = _function_for(functions, domain, base, body, len(inputs), len(outputs), opsets)
        call = helper.make_node(function.name, inputs, outputs, name=scope, domain=domain)
        for m in members:
            for name in reads[m]:
                consumers[name].discard(m)
            replaced[m] = call
        by_id[id(call)], reads[id(call)], makes[id(call)] = call, frozenset(inputs), tuple(outputs)
        for name in inputs:
            consumers.setdefault(name, set()).add(id(call))
    if functions:
        _write(model, _with_calls(nodes, replaced), functions, set(initializers))


def _write(model: onnx.ModelProto, nodes: list[onnx.NodeProto], functions: Mapping[tuple[str, str], list],
           initializers: set[str]) -> None:
    """The main graph's nodes (in an order that runs), the functions and their domains, into ``model``."""
    graph = model.graph
    ordered = _topological(nodes, {i.name for i in graph.input} | initializers)
    if len(ordered) != len(nodes):   # a cycle, which _convex rules out: the model stays as it was
        return
    del graph.node[:]
    graph.node.extend(ordered)
    for domain in sorted({d for d, _ in functions}):
        model.opset_import.append(helper.make_opsetid(domain, 1))
    for found in functions.values():
        model.functions.extend(found)
    values = {o for node in graph.node for o in node.output}
    kept = [v for v in graph.value_info if v.name in values]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    read = ({n for node in graph.node for n in node.input} | _subgraph_reads(graph) | {o.name for o in graph.output}
            | {i.name for i in graph.input})    # constants now in bodies are not
    used = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(used)
    if model.ir_version < 8:     # model-local functions came with IR 8
        model.ir_version = 8


def _with_calls(nodes: list[onnx.NodeProto], replaced: Mapping[int, onnx.NodeProto]) -> list[onnx.NodeProto]:
    """The nodes with each gathered group's call where its first node was, its other nodes dropped."""
    out: list[onnx.NodeProto] = []
    placed: set[int] = set()
    for node in nodes:
        call = replaced.get(id(node))
        if call is None:
            out.append(node)
        elif id(call) not in placed:
            placed.add(id(call))
            out.append(call)
    return out


def _groups(nodes: list[onnx.NodeProto],
            rule_scopes: Mapping[str, str]) -> dict[tuple[str, str, str], list[onnx.NodeProto]]:
    """(domain, function base name, scope) -> its nodes, in graph order."""
    groups: dict[tuple[str, str, str], list[onnx.NodeProto]] = {}
    for node in nodes:
        key = None
        scope = gradient_scope(node.name)
        if scope is not None and scope in rule_scopes:
            key = (GRADIENTS_DOMAIN, f"{rule_scopes[scope]}Grad", scope)
        else:
            parts = node.name.split("/")[:-1]
            at = next((k for k, part in enumerate(parts) if _EXPANDED_SCOPE.match(part)), None)
            if at is not None:
                match = _EXPANDED_SCOPE.match(parts[at])
                assert match is not None
                key = (EXPANDED_DOMAIN, match.group(1), "/".join(parts[:at + 1]))
        if key is not None and not _has_subgraph(node):
            groups.setdefault(key, []).append(node)
    return groups


def _convex(members: set[int], makes: Mapping[int, tuple[str, ...]], consumers: Mapping[str, set[int]]) -> bool:
    """Whether no path leaves the group and comes back into it (nodes by id)."""
    queue = deque(c for m in members for o in makes[m] for c in consumers.get(o, ()) if c not in members)
    seen: set[int] = set(queue)
    while queue:
        for o in makes[queue.popleft()]:
            for c in consumers.get(o, ()):
                if c in members:
                    return False
                if c not in seen:
                    seen.add(c)
                    queue.append(c)
    return True


def _body(members, member_ids, consumers, read_outside, initializers, inlined):
    """The body's nodes (values renamed to formal names), the call's inputs and outputs."""
    made = {o for m in members for o in m.output if o}
    names: dict[str, str] = {}
    inputs: list[str] = []
    outputs: list[str] = []
    constants: list[onnx.NodeProto] = []
    for m in members:
        for o in m.output:
            if o and (o in read_outside or any(c not in member_ids for c in consumers.get(o, ()))):
                outputs.append(o)
    for m in members:
        for name in m.input:
            if not name or name in made or name in names:
                continue
            if name in inlined:
                names[name] = f"c{len(constants)}"
                constants.append(helper.make_node("Constant", [], [names[name]],
                                                  value=numpy_helper.from_array(
                                                      numpy_helper.to_array(initializers[name]), names[name])))
            else:
                names[name] = f"in{len(inputs)}"
                inputs.append(name)
    for k, o in enumerate(outputs):
        names[o] = f"out{k}"
    body = list(constants)
    count = 0
    for m in members:
        node = _copy(m)
        node.name = node.name.rsplit("/", 1)[-1]
        node.doc_string = ""
        for o in node.output:
            if o and o not in names:
                names[o] = f"v{count}"
                count += 1
        node.input[:] = [names[n] if n else "" for n in node.input]
        node.output[:] = [names[n] if n else "" for n in node.output]
        body.append(node)
    return body, inputs, outputs


def _function_for(functions, domain, base, body, n_inputs, n_outputs, opsets) -> onnx.FunctionProto:
    """The function with this body (one already made, else a new one named ``base`` or ``base_K``)."""
    same_name = functions.setdefault((domain, base), [])
    key = [n.SerializeToString() for n in body]
    for function in same_name:
        if len(function.input) == n_inputs and [n.SerializeToString() for n in function.node] == key:
            return function
    name = base if not same_name else f"{base}_{len(same_name) + 1}"
    function = helper.make_function(domain, name, [f"in{k}" for k in range(n_inputs)],
                                    [f"out{k}" for k in range(n_outputs)], body, opsets)
    same_name.append(function)
    return function


def _topological(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """The nodes in an order that runs (stable: each node as early in the given order as its inputs allow)."""
    made = {o for node in nodes for o in node.output if o}
    waiting: dict[str, list[int]] = {}
    missing = []
    ready: list[int] = []
    for i, (node, outer) in enumerate(zip(nodes, _outer_reads(nodes))):
        need = {n for n in list(node.input) + sorted(outer) if n in made and n not in available}
        missing.append(len(need))
        for n in need:
            waiting.setdefault(n, []).append(i)
        if not need:
            ready.append(i)
    heapq.heapify(ready)
    order: list[onnx.NodeProto] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for o in nodes[i].output:
            for j in waiting.pop(o, ()) if o else ():
                missing[j] -= 1
                if missing[j] == 0:
                    heapq.heappush(ready, j)
    return order


def _outer_reads(nodes: list[onnx.NodeProto]) -> list[set[str]]:
    """The outer values each node's subgraphs read by name."""
    return [_names_read(_subgraphs(node)) for node in nodes]


def _names_read(subgraphs: list[onnx.GraphProto]) -> set[str]:
    read: set[str] = set()
    for g in subgraphs:
        read |= {n for node in g.node for n in node.input} | {o.name for o in g.output}
        for node in g.node:
            read |= _names_read(_subgraphs(node))
    return read


def _subgraph_reads(graph: onnx.GraphProto) -> set[str]:
    return _names_read([sub for node in graph.node for sub in _subgraphs(node)])


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    return copy


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return bool(_subgraphs(node))


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [g for a in node.attribute for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))]


def _structural(t: onnx.TensorProto) -> bool:
    """Whether a constant gradreg wrote is part of a rule's formula rather than data: a scalar
    (a coefficient), or a few integers (axes, shapes)."""
    if t.data_location == onnx.TensorProto.EXTERNAL:
        return False
    n = _elements(t.dims)
    return n <= 1 or (n <= BODY_CONSTANT_LIMIT and t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32))


def _elements(dims) -> int:
    return int(np.prod(list(dims), dtype=np.int64)) if len(dims) else 1
