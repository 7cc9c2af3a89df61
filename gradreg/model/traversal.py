"""Walks over a graph's structure: the ops a set of fetches needs, and an execution order.

Both follow data and control edges; :func:`topological_order` ignores the one legal
cycle of a graph, the back edge of a v1 loop (NextIteration into Merge).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gradreg.errors import GraphError, describe_node
from gradreg.model.frames import MERGE, NEXT_ITERATION, STRUCTURE, is_back_edge

if TYPE_CHECKING:
    from gradreg.model.graph import Operation, Tensor


def needed_ops(fetch_ops: Sequence[Operation], fed: set[Tensor]) -> list[Operation]:
    """The operations the fetches depend on through data and control edges, not looking past
    fed tensors. In graph order."""
    needed: set[Operation] = set()
    stack = list(fetch_ops)
    while stack:
        op = stack.pop()
        if op in needed:
            continue
        needed.add(op)
        for t in op.inputs:
            if t not in fed:
                stack.append(t.op)
        stack.extend(op.control_inputs)
    return sorted(needed, key=lambda o: o.id)


def ordering_only(fetch_ops: Sequence[Operation], fed: set[Tensor]) -> set[Operation]:
    """Among the ops the fetches depend on, the pure ones that matter only for ordering: reached
    through control edges alone, never as the value of an op that runs, without side effects
    (not stateful, not v1 control flow, known to the catalog). A plan need not run them: nobody
    reads their values (tf.tuple's gradients of inputs nobody differentiates, reached through
    its group_deps NoOp). The stateful ops they depend on still run, in the same order, since
    the plan orders everything the fetches depend on before dropping these."""
    runs: set[Operation] = set()
    orders: set[Operation] = set()
    stack: list[tuple[Operation, bool]] = [(op, True) for op in fetch_ops]
    while stack:
        op, value = stack.pop()
        if op in runs or (not value and op in orders):
            continue
        if not value and _has_effects(op):
            value = True     # an effect (or unknown): it runs, and needs its inputs' values
        (runs if value else orders).add(op)
        for t in op.inputs:
            if t not in fed:
                stack.append((t.op, value))
        stack.extend((c, False) for c in op.control_inputs)
    return orders - runs


def _has_effects(op: Operation) -> bool:
    """Whether running ``op`` may do more than compute its outputs: stateful, v1 control flow,
    an input or output by reference (Assign and the ref-variable updates are not stateful in
    TensorFlow's op definitions), or an op the catalog does not know."""
    if op.definition is None or op.definition.stateful or op.type in STRUCTURE:
        return True
    return any(t.dtype is not None and t.dtype.is_ref for t in (*op.inputs, *op.outputs))


def topological_order(ops: Sequence[Operation], source: str = "graph") -> list[Operation]:
    """Kahn's order over data and control edges, ignoring the back edge into each Merge from
    a NextIteration (the one legal cycle, in a v1 loop frame). A remaining cycle is a
    GraphError naming a node on it."""
    indegree = _indegrees(ops)
    # Sources (constants, placeholders, variable handles) go first, in graph order; after that
    # the most recently readied op runs next (depth first), so a value is consumed soon after
    # it is produced and short-lived values do not pile up.
    ready: list[Operation] = []
    order: list[Operation] = []
    pending = [op for op in reversed(ops) if indegree[op] == 0]
    while pending or ready:
        op = pending.pop() if pending else ready.pop()
        order.append(op)
        _release_consumers(op, indegree, ready)
    if len(order) != len(ops):
        cycle = _find_cycle([op for op in ops if indegree[op] > 0], indegree)
        shown = " -> ".join(f"'{op.name}'" for op in cycle[:12]) + (" -> ..." if len(cycle) > 12 else "")
        raise GraphError(f"{source}: the graph has a cycle through {describe_node(cycle[0].name, cycle[0].type)}: "
                         f"{shown} -> '{cycle[0].name}' (a cycle is legal only through NextIteration into Merge, "
                         f"in a loop frame)")
    return order


def _find_cycle(stuck: list[Operation], indegree: dict[Operation, int]) -> list[Operation]:
    """The ops of one cycle, in data-flow order, among ``stuck`` (ops never placed: each has a
    producer that was never placed either, so walking producers must come back to an op)."""
    def stuck_producer(op: Operation) -> Operation:
        for t in op.inputs:
            if indegree.get(t.op, 0) > 0 and not is_back_edge(t.op, op):
                return t.op
        return next(c for c in op.control_inputs if indegree.get(c, 0) > 0)
    seen: dict[Operation, int] = {}
    path: list[Operation] = []
    op = stuck[0]
    while op not in seen:
        seen[op] = len(path)
        path.append(op)
        op = stuck_producer(op)
    cycle = path[seen[op]:][::-1]
    first = min(range(len(cycle)), key=lambda i: cycle[i].id)   # start at the op the file lists first
    return cycle[first:] + cycle[:first]


def _indegrees(ops: Sequence[Operation]) -> dict[Operation, int]:
    """For each op, how many of its producers among ``ops`` must come first."""
    indegree = dict.fromkeys(ops, 0)
    for op in ops:
        n = 0
        back_edges = op.type in MERGE
        for t in op.inputs:
            if t.op in indegree and not (back_edges and is_back_edge(t.op, op)):
                n += 1
        for c in op.control_inputs:
            if c in indegree:
                n += 1
        indegree[op] = n
    return indegree


def _release_consumers(op: Operation, indegree: dict[Operation, int], ready: list[Operation]) -> None:
    """``op`` is placed: its consumers wait for one producer less; those waiting for none are ready."""
    back_edges = op.type in NEXT_ITERATION
    for t in op.outputs:
        for consumer in t.consumers_view():
            if consumer in indegree and not (back_edges and is_back_edge(op, consumer)):
                n = indegree[consumer] - 1
                indegree[consumer] = n
                if n == 0:
                    ready.append(consumer)
    for consumer in op.control_outputs:
        if consumer in indegree:
            n = indegree[consumer] - 1
            indegree[consumer] = n
            if n == 0:
                ready.append(consumer)
