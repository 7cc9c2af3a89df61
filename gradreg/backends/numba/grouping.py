"""Grouping a plan's elementwise ops into fused kernels (:func:`fuse`, the numba backend's
fuser, gradreg.runtime.executor.Fuser).

A numba kernel factory declares an op elementwise by returning a description
(gradreg.backends.numba.description). :func:`fuse` groups connected elementwise ops in one
pass over the plan's order and returns the plan's items in a valid order: Operations, and
FusedGroups whose kernel evaluates all their ops in one loop.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from gradreg.backends import native
from gradreg.backends.native.fused import SUMMED_ROW_MAX
from gradreg.backends.numba.codegen import row_dims
from gradreg.backends.numba.description import SINGLE_OP_MIN_COST, Elementwise, numba_available
from gradreg.backends.numba.kernels import FusedGroup, SumAfter
from gradreg.errors import GradregError
from gradreg.model.graph import Operation, Tensor
from gradreg.model.shape_inference import constant_value
from gradreg.registry import get_registry
from gradreg.registry.kernels import KernelContext

# Group positions (see fuse): a group sits just after its latest input.
_EPSILON = 2.0 ** -20

# Compile cost bounds. LLVM's time on one function grows faster than its size, so a group
# stops growing at MAX_GROUP_OPS ops (a longer chain becomes several groups: compile time
# linear in the chain); and a plan fuses at most MAX_FUSED_OPS elementwise ops (the rest run
# as NumPy kernels), so no graph makes the first run compile for minutes.
MAX_GROUP_OPS = 64
MAX_FUSED_OPS = 1024


class _Cluster:
    """A group being formed: members, outside producers (data and control), outside consumers
    seen so far, the merged static shape of its non-scalar values, and its position."""

    def __init__(self) -> None:
        self.members: list[Operation] = []
        self.deps: set[Operation] = set()
        self.consumers: set[Operation] = set()
        self.shape: Any = None
        self.pos = 0.0


class _Grouper:
    """Forms clusters in one pass over the plan's order.

    Every item (op or cluster) has a position; each edge goes from a lower to a higher
    position, so sorting by position gives a valid order. An op's position is its index
    in the order; a cluster's is just above its latest outside producer, and joining a
    cluster is allowed only while that stays below every outside consumer it already has.
    """

    def __init__(self, order: Sequence[Operation], fed: set[Tensor], descriptions: dict[Operation, Any]):
        self.order = order
        self.fed = fed
        self.descriptions = descriptions
        self.index = {op: i for i, op in enumerate(order)}
        self.cluster_of: dict[Operation, _Cluster] = {}

    def producers(self, op: Operation) -> list[Operation]:
        found = [t.op for t in op.inputs if t not in self.fed and t.op in self.index]
        found.extend(c for c in op.control_inputs if c in self.index)
        return list(dict.fromkeys(found))

    def position(self, op: Operation) -> float:
        cluster = self.cluster_of.get(op)
        return self.index[op] if cluster is None else cluster.pos

    def run(self) -> list[_Cluster]:
        for op in self.order:
            producers = self.producers(op)
            if op in self.descriptions:
                self.place(op, producers)
            mine = self.cluster_of.get(op)
            for p in producers:
                cluster = self.cluster_of.get(p)
                if cluster is not None and cluster is not mine:
                    cluster.consumers.add(op)
        return list({id(c): c for c in self.cluster_of.values()}.values())

    def place(self, op: Operation, producers: list[Operation]) -> None:
        shape = _value_shape(op)
        candidates = []
        for t in op.inputs:
            cluster = self.cluster_of.get(t.op)
            if cluster is not None and t not in self.fed and cluster not in candidates \
                    and _shapes_join(cluster.shape, shape) is not _NO_SHAPE:
                candidates.append(cluster)
        # All neighbouring clusters at once, else one of them, else a cluster of its own.
        attempts = [candidates] + [[c] for c in candidates] if len(candidates) > 1 else [candidates]
        if candidates:
            attempts.append([])
        for parts in attempts:
            if self.try_join(op, producers, parts):
                return

    def try_join(self, op: Operation, producers: list[Operation], parts: list[_Cluster]) -> bool:
        if sum(len(part.members) for part in parts) >= MAX_GROUP_OPS:
            return False
        shape = _value_shape(op)
        for part in parts:
            shape = _shapes_join(shape, part.shape)
            if shape is _NO_SHAPE:
                return False

        def inside(x: Operation) -> bool:
            return x is op or any(self.cluster_of.get(x) is part for part in parts)

        deps = {d for part in parts for d in part.deps if not inside(d)}
        deps.update(d for d in producers if not inside(d))
        consumers = {c for part in parts for c in part.consumers if not inside(c)}
        pos = max((self.position(d) for d in deps), default=-1.0) + _EPSILON
        if any(self.position(c) <= pos for c in consumers):
            return False
        base = max(parts, key=lambda c: len(c.members)) if parts else _Cluster()
        for part in parts:
            if part is not base:
                base.members.extend(part.members)
                for m in part.members:
                    self.cluster_of[m] = base
        base.members.append(op)
        self.cluster_of[op] = base
        base.deps, base.consumers, base.shape, base.pos = deps, consumers, shape, pos
        return True


_NO_SHAPE = object()


def _value_shape(op: Operation) -> Any:
    """The static shape of ``op``'s output, None for a scalar (it broadcasts in a group)."""
    shape = op.outputs[0].shape
    return None if shape.rank == 0 else shape


def _shapes_join(a: Any, b: Any) -> Any:
    """The merged static shape of two groups' non-scalar values (None: no constraint yet),
    or _NO_SHAPE when they cannot be equal."""
    if a is None or b is None:
        return b if a is None else a
    return a.merge_with(b) if a.is_compatible_with(b) else _NO_SHAPE


def _fusible(op: Operation, fed: set[Tensor], registry: Any, ctx: KernelContext) -> Elementwise | None:
    factory = registry.kernel_factory(op.type, "numba")
    if factory is None or any(t in fed for t in op.outputs):
        return None
    try:
        description = factory(op, ctx)
    except GradregError:
        return None     # not fusible; the plan's own kernel for the node reports the problem, naming it
    if not isinstance(description, Elementwise):
        return None
    out = op.outputs[0].shape
    if out.rank == 0:
        return None     # scalars (loop counters): Python's operators on NumPy scalars are faster
    # Static broadcasts fused: scalars, and (for ops that broadcast) rows — inputs whose known
    # shape is a trailing part of the output's, like a bias, perhaps after leading ones (a
    # batch norm's (1, 1, 1, C) scale). Others are left to NumPy.
    for t in op.inputs:
        if t.shape.rank != 0 and not t.shape.is_compatible_with(out) \
                and not (description.broadcasts_rows and _is_row(t.shape, out)):
            return None
    return description


def _is_row(shape: Any, out: Any) -> bool:
    """Whether a value of static ``shape`` broadcasts against ``out`` as a repeated trailing
    row: its dims after any leading ones are the last of ``out``'s, and it has no more dims."""
    if not shape.is_fully_defined() or out.rank is None or not 0 < shape.rank <= out.rank:
        return False
    row = row_dims(tuple(shape.as_list()))
    return 0 < len(row) < out.rank and out.as_list()[out.rank - len(row):] == list(row)


def fuse(order: Sequence[Operation], fed: set[Tensor], keep: set[Tensor], ctx: KernelContext,
         exclude: Iterable[Operation] = ()) -> list[Any]:
    """The plan's items: ``order``'s operations with connected elementwise ops replaced by
    :class:`FusedGroup` s, in an order respecting every data and control edge. ``keep``: the
    tensors needed outside ``order`` (fetched, or used by ops not in it); ops in ``exclude``
    stay unfused."""
    if not numba_available():
        return list(order)
    registry = get_registry()
    descriptions = {}
    exclude = set(exclude)
    for op in order:
        description = None if op in exclude else _fusible(op, fed, registry, ctx)
        if description is not None:
            descriptions[op] = description
            if len(descriptions) >= MAX_FUSED_OPS:
                break
    if not descriptions:
        return list(order)
    grouper = _Grouper(order, fed, descriptions)
    clusters = grouper.run()
    plan_ops = grouper.index
    sums = {id(c): _absorb_sums(c, grouper, fed, keep, exclude) for c in clusters
            if len(c.members) > 1 or descriptions[c.members[0]].cost >= SINGLE_OP_MIN_COST}
    absorbed = {after.tensor.op for found in sums.values() for after in found.values()}
    items: list[tuple[float, int, Any]] = []
    for op in order:
        if op not in grouper.cluster_of and op not in absorbed:
            items.append((grouper.index[op], grouper.index[op], op))
    for cluster in clusters:
        members = sorted(cluster.members, key=plan_ops.__getitem__)
        first = plan_ops[members[0]]
        if id(cluster) not in sums:
            items.append((cluster.pos, first, members[0]))
        else:
            found = sums[id(cluster)]
            group = FusedGroup(members, [descriptions[m] for m in members], keep, plan_ops, found)
            if found and group.static is None:
                # only a static loop sums: the Sums run apart, the group as before
                group = FusedGroup(members, [descriptions[m] for m in members], keep, plan_ops)
                items.extend((plan_ops[a.tensor.op], plan_ops[a.tensor.op], a.tensor.op) for a in found.values())
            items.append((cluster.pos, first, group))
    items.sort(key=lambda item: item[:2])
    return [item[2] for item in items]


def _absorb_sums(cluster: _Cluster, grouper: _Grouper, fed: set[Tensor], keep: set[Tensor],
                 exclude: set[Operation]) -> dict[Tensor, SumAfter]:
    """The cluster's values that only a Sum over their leading axes reads (a batch norm's
    gradient sums a layer's values per channel), and those Sums: the group's loop then adds up
    each row instead of writing the value, which the Sum would read again. Only for a cluster
    of static shape whose loop is native (the only loop with sums), float values, rows of at
    most SUMMED_ROW_MAX elements (the loop's sums are on its stack), each Sum keeping as many
    trailing dims as the cluster's row inputs span."""
    shape = cluster.shape
    if not native.available() or shape is None or not shape.is_fully_defined():
        return {}
    full = shape.as_tuple()
    members = set(cluster.members)
    spans = set()      # the dims each row input spans (-1: an input of unknown shape)
    for op in cluster.members:
        for t in op.inputs:
            if t.op in members or t.shape.rank == 0:
                continue
            dims = t.shape.as_tuple() if t.shape.is_fully_defined() else None
            if dims != full:
                spans.add(-1 if dims is None else len(row_dims(dims)))
    found: dict[Tensor, SumAfter] = {}
    for op in cluster.members:
        t = op.outputs[0]
        if t in keep or t in fed or t.dtype is None or not t.shape.is_fully_defined() \
                or t.shape.as_tuple() != full \
                or np.dtype(t.known_dtype.storage) not in (np.float32, np.float64):
            continue
        outside = [c for c in t.consumers_view() if c in grouper.index and c not in members]
        if len(outside) != 1 or outside[0].type != "Sum":
            continue
        total = outside[0]
        axes = _leading_axes(total, len(full))
        if axes is None or total in exclude or total.inputs[0] is not t or total.control_inputs \
                or total.control_outputs or any(u in fed for u in total.outputs) \
                or math.prod(full[len(axes):]) > SUMMED_ROW_MAX:
            continue
        given = total.inputs[1].op
        if given in grouper.index and grouper.position(given) >= cluster.pos:
            continue
        if (spans | {len(full) - len(axes)}) != {len(full) - len(axes)}:
            continue
        found[t] = SumAfter(total.outputs[0], axes, bool(total.get_attr("keep_dims")), math.prod(full[len(axes):]))
        spans.add(len(full) - len(axes))
    return found


def _leading_axes(total: Operation, rank: int) -> tuple[int, ...] | None:
    """A Sum's axes when they are constant and its input's leading ones (not all), else None."""
    value = constant_value(total.inputs[1])
    if value is None:
        return None
    axes = sorted({int(a) % rank if -rank <= int(a) < rank else -1 for a in np.asarray(value).reshape(-1)})
    if not axes or axes != list(range(len(axes))) or len(axes) >= rank or len(axes) != np.asarray(value).size:
        return None
    return tuple(axes)

