"""Which op types a graph uses, and which of them lie on the path a gradient takes: what
``gradreg check`` reports before anything is differentiated or run.

    >>> types = op_types_in(graph)                       # {op type: [node, ...]}, functions included
    >>> on_path = op_types_on_path([loss], [w])          # the same, for the ops between w and loss

Functions count where they are called: a call on the path (PartitionedCall, While, If, a node
whose op type is a library function) puts the ops on the path *inside* the function on the
path too, recursively. Nodes are named ``function/node`` inside functions.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from gradreg.autodiff.gradients import GRADIENT_OP_TYPE_ATTR, ops_between
from gradreg.build.functions import call_attrs_of, function_graph
from gradreg.errors import GradregError
from gradreg.model import attrs as attr_util
from gradreg.model.graph import Graph, Operation, Tensor, calls_library_function
from gradreg.proto import node_def_pb2


def op_types_in(graph: Graph) -> dict[str, list[str]]:
    """Every op type of ``graph`` and of every function in its library, with the nodes using it."""
    found: dict[str, list[str]] = {}
    for op in graph.get_operations():
        found.setdefault(op.type, []).append(op.name)
    for name, node in _function_nodes(graph):
        found.setdefault(node.op, []).append(f"{name}/{node.name}")
    return found


def _function_nodes(graph: Graph) -> Iterator[tuple[str, node_def_pb2.NodeDef]]:
    """(function name, NodeDef) for every node of every function in ``graph``'s library."""
    for name in graph.library.names():
        fdef = graph.library.get(name)
        if fdef is not None:
            for node in fdef.node_def:
                yield name, node


def library_function_types(graph: Graph) -> set[str]:
    """The op types that are calls of the graph's library functions."""
    return set(graph.library.names())


def op_types_on_path(ys: Sequence[Tensor], xs: Sequence[Tensor]) -> dict[str, list[str]]:
    """The op types of the ops on a differentiable path from ``xs`` to ``ys`` (and on the
    paths inside the functions those ops call), with the nodes."""
    found: dict[str, list[str]] = {}
    visited: set[tuple[str, str]] = set()
    _collect(ops_between(ys, xs), "", found, visited)
    return found


def op_types_needed(outputs: Sequence[Tensor]) -> dict[str, list[str]]:
    """The op types of the ops computing ``outputs`` (their inputs and control inputs, all the
    way up) and of every node of the library functions those ops call, with the nodes: what
    running the outputs needs."""
    found: dict[str, list[str]] = {}
    seen: set[Operation] = set()
    stack = [t.op for t in outputs]
    calls: list[tuple[str, str]] = []
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
        calls.extend((name, "") for name, _ in _called_functions(op))
    for op in sorted(seen, key=lambda o: o.id):
        found.setdefault(op.type, []).append(op.name)
    graph = outputs[0].graph if outputs else None
    done: set[str] = set()
    while calls and graph is not None:
        name, prefix = calls.pop()
        fdef = graph.library.get(name)
        if name in done or fdef is None:
            continue
        done.add(name)
        for node in fdef.node_def:
            found.setdefault(node.op, []).append(f"{prefix}{name}/{node.name}")
            if node.op in graph.library:
                calls.append((node.op, f"{prefix}{name}/"))
            calls.extend((f.name, f"{prefix}{name}/") for f in _function_attrs(node) if f.name in graph.library)
    return found


def _function_attrs(node: node_def_pb2.NodeDef) -> list[Any]:
    """The functions a NodeDef's attrs name (a While's body, an If's branches)."""
    out: list[Any] = []
    for entry in node.attr:
        value = entry.value
        if value.HasField("func"):
            out.append(value.func)
        elif value.HasField("list"):
            out.extend(value.list.func)
    return out


def _collect(ops: Iterable[Operation], prefix: str, found: dict[str, list[str]],
             visited: set[tuple[str, str]]) -> None:
    for op in sorted(ops, key=lambda o: o.id):
        found.setdefault(op.type, []).append(prefix + op.name)
        for name, call_attrs in _called_functions(op):
            key = (name, repr(sorted(call_attrs)))
            if key in visited:
                continue
            visited.add(key)
            try:
                body = function_graph(op.graph.library, name, call_attrs, f"node '{op.name}'")
            except GradregError:
                # The body does not build (an op type gradreg does not know, most often):
                # count every node of the function as on the path.
                fdef = op.graph.library.get(name)
                for node in fdef.node_def if fdef is not None else ():
                    found.setdefault(node.op, []).append(f"{prefix}{name}/{node.name}")
                continue
            _collect(ops_between(body.outputs, body.inputs), f"{prefix}{name}/", found, visited)


def _called_functions(op: Operation) -> list[tuple[str, dict[str, Any]]]:
    """(function name, attrs bound by the call) for each library function ``op`` calls."""
    if calls_library_function(op):
        return [(op.type, call_attrs_of(op))]
    out = []
    for entry in op.node_def.attr:
        value = entry.value
        if value.HasField("func"):
            out.append((value.func.name, attr_util.entries_to_dict(value.func.attr)))
        elif value.HasField("list"):
            out.extend((f.name, attr_util.entries_to_dict(f.attr)) for f in value.list.func)
    return [(name, attrs) for name, attrs in out if name in op.graph.library]


def gradient_overrides_in(graph: Graph) -> dict[str, list[str]]:
    """{gradient name: nodes} for the nodes of ``graph`` and its functions whose
    ``_gradient_op_type`` attr names a gradient (gradient_override_map, custom_gradient)."""
    found: dict[str, list[str]] = {}

    def add(node_def: node_def_pb2.NodeDef, prefix: str) -> None:
        entry = attr_util.get_entry(node_def.attr, GRADIENT_OP_TYPE_ATTR)
        if entry is not None:
            key = entry.s.decode() if isinstance(entry.s, bytes) else str(entry.s)
            found.setdefault(key, []).append(prefix + node_def.name)
    for op in graph.get_operations():
        if op.has_attr(GRADIENT_OP_TYPE_ATTR):
            add(op.node_def, "")
    for name, node in _function_nodes(graph):
        add(node, f"{name}/")
    return found
