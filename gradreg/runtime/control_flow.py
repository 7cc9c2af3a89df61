"""Compiling TensorFlow v1 control flow (Switch, Merge, Enter, Exit, NextIteration, LoopCond).

TensorFlow runs these with a dataflow executor: frames, iterations and "dead" tensors.
gradreg instead recovers the structure and writes ordinary Python control flow:

**Frames** come from :class:`gradreg.model.frames.LoopStructure`.

**Loops.** A frame is one ``while True:`` block. Its loop merges (Merge of an initial
value and a NextIteration) become variables; each iteration runs the *header* (ops that
do not depend on the loop switches), tests the LoopCond, runs the *exit region* (ops on
the switches' false outputs, including the Exits) and breaks when false, else runs the
*body* (ops on the true outputs) and assigns the NextIteration values. Nested frames
nest as loops.

**Conditionals.** Other Switch/Merge pairs use a DEAD sentinel, as TensorFlow's dead
tensors: the untaken Switch output is DEAD, an op with a DEAD input (or a dead control
input) is skipped and its outputs are DEAD, a Merge forwards its first live input.
Only ops that can be dead get the check.
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from gradreg import config, deadline
from gradreg.errors import ExecutionError, GraphError, IterationLimitError, describe_node
from gradreg.model.frames import (
    CONTROL_TRIGGER,
    ENTER,
    EXIT,
    LOOP_COND,
    MERGE,
    NEXT_ITERATION,
    STRUCTURE,
    SWITCH,
    Frame,
    LoopStructure,
    child_containing,
    is_back_edge,
    is_loop_merge,
    subtree_ops,
)
from gradreg.model.graph import Operation, Tensor
from gradreg.model.traversal import topological_order
from gradreg.registry import get_registry
from gradreg.registry.kernels import LoopHoist
from gradreg.runtime.codegen import Block

if TYPE_CHECKING:
    from gradreg.runtime.plan import Emitter

HEADER, BODY, EXIT_REGION = 0, 1, 2
_REGION_NAMES = {HEADER: "header", BODY: "body", EXIT_REGION: "exit"}


class Dead:
    """The value of a dead tensor (an untaken branch of a v1 conditional)."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "<dead>"


DEAD = Dead()


# -- emission ------------------------------------------------------------------------------

def emit_control_flow(emitter: Emitter, block: Block, ops: Sequence[Operation], fetches: Sequence[Any]) -> None:
    """Emit the statements computing ``ops`` (which include v1 control flow) into ``block``."""
    structure = LoopStructure(topological_order(ops, "plan"))
    for f in fetches:
        op = f.op if isinstance(f, Tensor) else f
        if op in structure.frame_of and structure.value_frame(op) is not structure.root \
                and not (isinstance(f, Tensor) and f in emitter.fed):
            raise GraphError(f"cannot fetch {f.name}: it is inside loop frame "
                             f"'{structure.value_frame(op).name}' (fetch a value the loop exits with)")
    emitter.globals["DEAD"] = DEAD
    emitter.globals["_loop_limit_error"] = _loop_limit_error
    emitter.globals["_loop_end"] = deadline.loop_end
    emitter.globals["_loop_late"] = _loop_late
    compiler = _FrameCompiler(emitter, structure)
    compiler.fetched = {f for f in fetches if isinstance(f, Tensor)}
    compiler.emit_frame_items(structure.root, block)
    compiler.check_fetches_alive(block, fetches)


class _FrameCompiler:
    def __init__(self, emitter: Emitter, structure: LoopStructure):
        self.emitter = emitter
        self.structure = structure
        self.maybe_dead: set[Tensor] = set()
        self.dead_ops: dict[Operation, tuple[str, tuple[str, ...]]] = {}   # op -> (dead expr, vars)
        self.limit = getattr(emitter.ctx, "loop_iteration_limit", None)
        self.fetched: set[Tensor] = set()
        # node -> (its table's variable, the rule's answer, the node's kernel)
        self.hoisted: dict[Operation, tuple[str, LoopHoist, Any]] = {}

    # -- ordering within a frame ----------------------------------------------------------
    def _items(self, frame: Frame) -> list[Any]:
        """The ops (and child frames, as units) of a frame in dependency order. Enters and loop
        merges are excluded: they become variables around the loop."""
        units: list[Any] = [op for op in frame.ops if op.type not in ENTER and not is_loop_merge(op)]
        units.extend(frame.children.values())
        return self._in_dependency_order(frame, units, self._unit_dependencies(frame, units))

    def _unit_dependencies(self, frame: Frame, units: list[Any]) -> dict[Any, set[Any]]:
        """For each unit (an op of the frame, or a child frame), the units it needs first."""
        frame_of = self.structure.frame_of
        unit_of: dict[Operation, Any] = {u: u for u in units if isinstance(u, Operation)}
        for child in frame.children.values():
            for op in subtree_ops(child):
                unit_of[op] = child
        deps: dict[Any, set[Any]] = {u: set() for u in units}
        for u in units:
            for op in [u] if isinstance(u, Operation) else subtree_ops(u):
                for src in [t.op for t in op.inputs] + op.control_inputs:
                    owner = unit_of.get(src)
                    if owner is not None and owner is not u and frame_of.get(src) is not None \
                            and not is_back_edge(src, op):
                        deps[u].add(owner)
        return deps

    def _in_dependency_order(self, frame: Frame, units: list[Any], deps: dict[Any, set[Any]]) -> list[Any]:
        """Kahn's order of the units, earliest (in the frame's topological order) first."""
        position = {op: i for i, op in enumerate(self.structure.order)}
        keys = {u: position[u] if isinstance(u, Operation) else min(position[o] for o in subtree_ops(u))
                for u in units}
        waiting = {u: len(d) for u, d in deps.items()}
        users: dict[Any, list[Any]] = {u: [] for u in units}
        for u, d in deps.items():
            for src in d:
                users[src].append(u)
        ready = [(keys[u], i, u) for i, u in enumerate(units) if waiting[u] == 0]
        heapq.heapify(ready)
        order: list[Any] = []
        while ready:
            _, i, u = heapq.heappop(ready)
            order.append(u)
            for user in users[u]:
                waiting[user] -= 1
                if waiting[user] == 0:
                    heapq.heappush(ready, (keys[user], units.index(user), user))
        if len(order) != len(units):
            stuck = next(u for u in units if waiting[u] > 0)
            raise GraphError(f"cannot order '{stuck.name}' in loop frame '{frame.name}': its loop structure "
                             f"is not one TensorFlow's while_loop produces")
        return order

    # -- frames ---------------------------------------------------------------------------
    def emit_frame_items(self, frame: Frame, block: Block, items: Sequence[Any] | None = None) -> None:
        self._emit_items(self._items(frame) if items is None else items, block)

    def _emit_items(self, items: Sequence[Any], block: Block) -> None:
        """Emit ``items`` (ops and child frames, in order) into ``block``. On the numba backend,
        elementwise chains among each run of plain ops are fused (the executor's fuser)."""
        run: list[Operation] = []
        for item in items:
            if isinstance(item, Operation) and item.type not in STRUCTURE:
                run.append(item)
                continue
            self._emit_run(run, block)
            run = []
            self._emit_item(item, block)
        self._emit_run(run, block)

    def _emit_run(self, ops: list[Operation], block: Block) -> None:
        emitter = self.emitter
        if emitter.fuse is None or len(ops) < 2:
            for op in ops:
                self.emit_op(op, block)
            return
        members = set(ops)
        # Ops that may be dead (in an untaken branch of a conditional) keep their own guard.
        tainted = set(self.maybe_dead)
        guarded = set()
        for op in ops:
            if any(t in tainted for t in op.inputs) or any(c in self.dead_ops or c in guarded
                                                             for c in op.control_inputs):
                guarded.add(op)
                tainted.update(op.outputs)
        keep = {t for op in ops for t in op.outputs if any(c not in members for c in t.consumers_view())}
        keep.update(self.fetched)
        for item in emitter.fuse(ops, emitter.fed, keep, emitter.ctx, exclude=guarded):
            if isinstance(item, Operation):
                self.emit_op(item, block)
            else:
                emitter.emit_fused(block, item)

    def emit_loop(self, frame: Frame, block: Block) -> None:
        """Emit a loop frame: its variables, ``while True:`` with the header, the exit test and
        region, the body and the next values (see the module docstring)."""
        emitter = self.emitter
        loop_conds = [op for op in frame.ops if op.type == LOOP_COND]
        if len(loop_conds) != 1:
            enters = [op.name for op in frame.ops if op.type in ("Enter", "RefEnter")][:3]
            raise GraphError(f"loop frame '{frame.name}' (entered at node '{enters[0] if enters else frame.name}') "
                             f"has {len(loop_conds)} LoopCond nodes; expected one")
        loop_cond = loop_conds[0]
        target, dead_block = self._enter_values(frame, block)
        self._hoist(frame, target)
        loop_vars = [self._loop_variable(merge, target) for merge in frame.ops if is_loop_merge(merge)]
        # The loop's bounds: its iterations, and its time (its own budget and its run's deadline,
        # gradreg.deadline): a clock read each iteration, ~1/20 of the cheapest iteration's cost.
        counter = emitter.fresh("it")
        target.add(f"{counter} = 0", defs=[counter])
        end = emitter.fresh("end")
        seconds = emitter.bind("secs", getattr(emitter.ctx, "loop_timeout", None))
        target.add(f"{end} = _loop_end(_dl, {seconds})", defs=[end])
        loop = target.nest("while True:", is_loop=True)
        self._emit_iteration(frame, loop_cond, loop)
        targets, sources = [], []
        for var, index_var, next_op in loop_vars:
            targets.append(var)
            sources.append(emitter.names[next_op.inputs[0]])
            if index_var is not None:
                targets.append(index_var)
                sources.append("c_index1")
        if targets:
            loop.add(f"{', '.join(targets)} = {', '.join(sources)}", defs=targets,
                     uses=emitter.local_uses(sources))
        loop.add(f"{counter} += 1", defs=[counter], uses=[counter])
        if self.limit is not None:
            limit_name = emitter.bind("limit", self.limit)
            frame_name = emitter.bind("frame", (frame.name, loop_cond.name))
            loop.add(f"if {counter} > {limit_name}: _loop_limit_error({frame_name}, {limit_name})",
                     uses=[counter], op=loop_cond)
        where = emitter.bind("frame", (emitter.globals[seconds], f"loop frame '{frame.name}' "
                                       f"(LoopCond '{loop_cond.name}')", loop_cond.name))
        loop.add(f"if _clock() > {end}: _loop_late(_dl, {where}, {counter})", uses=[counter, end], op=loop_cond)
        if dead_block is not None:
            self._exits_are_dead(frame, dead_block)

    def _hoist(self, frame: Frame, target: Block) -> None:
        """Emit before the loop the table of each node of the frame that its family's loop-hoist
        rule computes for all iterations at once (gradreg.registry.hookspecs.gradreg_loop_hoists);
        the node then picks its value from the table (emit_op). Only nodes the plan runs with a
        kernel function get one (a table nothing would read is not computed)."""
        emitter = self.emitter
        registry = get_registry()
        invariants = {op.outputs[0]: op.inputs[0] for op in frame.ops
                      if op.type in ENTER and op.get_attr("is_constant") and op.inputs[0] not in self.maybe_dead}
        for op in frame.ops:
            rule = registry.loop_hoist(op.type)
            if rule is None or len(op.outputs) != 1 or op.outputs[0] in emitter.fed \
                    or any(t.dtype is not None and t.dtype.is_ref for t in op.inputs):
                continue
            hoist = rule(op, emitter.ctx, invariants.get)
            if hoist is None:
                continue
            kernel = emitter.call_kernel(op)
            if kernel is None:
                continue
            table = emitter.fresh("tab")
            args = [emitter.names[t] for t in hoist.inputs]
            target.add(f"{table} = {emitter.bind('k', _quiet(hoist.precompute))}({', '.join(args)})",
                       defs=[table], uses=emitter.local_uses(args), op=op)
            self.hoisted[op] = (table, hoist, kernel)

    def _emit_hoisted(self, op: Operation, block: Block, table: str, hoist: LoopHoist, kernel: Any) -> None:
        """``op``'s output picked from its table, or computed by its kernel when the table has none."""
        emitter = self.emitter
        names = emitter.names
        picks = [names[t] for t in hoist.pick_inputs]
        inputs = [names[t] for t in op.inputs]
        var = emitter.fresh()
        pick = emitter.bind("k", hoist.pick)
        block.add(f"{var} = {pick}({table}, {', '.join(picks)}) if {table} is not None else None", defs=[var],
                  uses=emitter.local_uses([table, *picks]), op=op)
        block.add(f"if {var} is None: {var} = {emitter.bind_kernel(kernel)}({', '.join(inputs)})", defs=[var],
                  uses=emitter.local_uses([var, *inputs]), op=op)
        names[op.outputs[0]] = var
        emitter.emit_check(block, op, [var])

    def _enter_values(self, frame: Frame, block: Block) -> tuple[Block, Block | None]:
        """Name the Enters' values; the block the loop goes in, and the block run instead when
        an input is dead (the loop is in an untaken branch: it does not run, its exits are dead)."""
        emitter, names = self.emitter, self.emitter.names
        enters = [op for op in frame.ops if op.type in ENTER]
        for op in enters:
            names[op.outputs[0]] = names[op.inputs[0]]
            if op.inputs[0] in self.maybe_dead:
                self.maybe_dead.add(op.outputs[0])
        dead_inputs = [names[op.inputs[0]] for op in enters if op.inputs[0] in self.maybe_dead]
        if not dead_inputs:
            return block, None
        skip = emitter.fresh("skip")
        block.add(f"{skip} = " + " or ".join(f"{v} is DEAD" for v in dead_inputs), defs=[skip],
                  uses=emitter.local_uses(dead_inputs))
        dead_block = block.nest(f"if {skip}:", header_uses=[skip])
        return block.nest(f"if not {skip}:", header_uses=[skip]), dead_block

    def _loop_variable(self, merge: Operation, target: Block) -> tuple[str, str | None, Operation]:
        """A loop merge as a variable set before the loop: (its variable, the variable of its
        value_index if anything reads it, the NextIteration giving its next value)."""
        emitter, names = self.emitter, self.emitter.names
        init = [t for t in merge.inputs if t.op.type not in NEXT_ITERATION]
        nexts = [t for t in merge.inputs if t.op.type in NEXT_ITERATION]
        if len(init) != 1 or len(nexts) != 1:
            raise GraphError(f"{describe_node(merge.name, merge.type)}: a loop merge needs one initial "
                             f"value and one NextIteration input, found {len(init)} and {len(nexts)}")
        var = emitter.fresh("m")
        target.add(f"{var} = {names[init[0]]}", defs=[var], uses=emitter.local_uses([names[init[0]]]), op=merge)
        names[merge.outputs[0]] = var
        index_var = None
        if len(merge.outputs) > 1 and merge.outputs[1].consumers():
            index_var = emitter.fresh("mi")
            target.add(f"{index_var} = c_index0", defs=[index_var])
            emitter.globals["c_index0"] = _int32(0)
            emitter.globals["c_index1"] = _int32(1)
            names[merge.outputs[1]] = index_var
        return var, index_var, nexts[0].op

    def _emit_iteration(self, frame: Frame, loop_cond: Operation, loop: Block) -> None:
        """The header, the test of the LoopCond with the exit region and ``break``, the body."""
        names = self.emitter.names
        items = self._items(frame)
        regions = self._regions(frame, loop_cond, items)
        self._emit_items([item for item in items if self._region_of(item, regions) == HEADER], loop)
        pred = names[loop_cond.inputs[0]]
        names[loop_cond.outputs[0]] = pred
        for op in frame.ops:
            if op.type in SWITCH and op.inputs[1].op is loop_cond:
                data = names[op.inputs[0]]
                names[op.outputs[0]] = data
                names[op.outputs[1]] = data
        exit_block = loop.nest(f"if not {pred}:", header_uses=self.emitter.local_uses([pred]), op=loop_cond)
        self._emit_items([item for item in items if self._region_of(item, regions) == EXIT_REGION], exit_block)
        exit_block.add("break")
        self._emit_items([item for item in items if self._region_of(item, regions) == BODY], loop)

    def _exits_are_dead(self, frame: Frame, dead_block: Block) -> None:
        names = self.emitter.names
        exits = [op for op in frame.ops if op.type in EXIT]
        exit_vars = sorted({names[op.outputs[0]] for op in exits})
        for op in exits:
            self.maybe_dead.add(op.outputs[0])
        if exit_vars:
            dead_block.add(" = ".join(exit_vars) + " = DEAD", defs=exit_vars)
        else:
            dead_block.add("pass")

    def _emit_item(self, item: Any, block: Block) -> None:
        if isinstance(item, Frame):
            self.emit_loop(item, block)
        else:
            self.emit_op(item, block)

    def _regions(self, frame: Frame, loop_cond: Operation, items: list[Any]) -> dict[Any, int]:
        """Region (header, body, exit) of each op of the frame, and of each child frame."""
        return _Regions(self.structure, frame, loop_cond).of(items)

    def _region_of(self, item: Any, regions: dict[Any, int]) -> int:
        return regions.get(item, HEADER)

    # -- ops ----------------------------------------------------------------------------
    def emit_op(self, op: Operation, block: Block) -> None:
        emitter = self.emitter
        names = emitter.names
        kind = op.type
        if kind in ENTER or is_loop_merge(op):
            return                                    # handled by emit_loop
        if kind in EXIT or kind in NEXT_ITERATION or kind == LOOP_COND:
            for t, src in zip(op.outputs, op.inputs):
                names[t] = names[src]
                if src in self.maybe_dead:
                    self.maybe_dead.add(t)
            return
        if kind in SWITCH and op.inputs[1].op.type == LOOP_COND:
            return                                    # loop switches are structure, not values
        if kind in SWITCH:
            self._emit_switch(op, block)
            return
        if kind in MERGE:
            self._emit_merge(op, block)
            return
        guard = self._dead_guard(op)
        if guard is None:
            self._emit_live(op, block)
            return
        emitter.emit_op(block, op, dead_check=lambda _op: guard)
        for t in op.outputs:
            if t in names and names[t] not in emitter.globals:
                self.maybe_dead.add(t)
        if not op.outputs and op.control_outputs:
            live = emitter.fresh("live")
            condition, uses = guard
            block.add(f"{live} = not ({condition})", defs=[live], uses=list(uses))
            self.dead_ops[op] = (f"not {live}", (live,))

    def _emit_live(self, op: Operation, block: Block) -> None:
        """An op that is never dead: from its loop-hoist table if it has one, else its kernel."""
        hoisted = self.hoisted.pop(op, None)
        if hoisted is None:
            self.emitter.emit_op(block, op)
        else:
            self._emit_hoisted(op, block, *hoisted)

    def _dead_guard(self, op: Operation) -> tuple[str, tuple[str, ...]] | None:
        """(condition, variables) under which ``op`` is dead, or None if it never is."""
        if op.type == CONTROL_TRIGGER:
            return None
        names = self.emitter.names
        parts: list[str] = []
        uses: list[str] = []
        for t in op.inputs:
            if t in self.maybe_dead and names[t] not in self.emitter.globals:
                parts.append(f"{names[t]} is DEAD")
                uses.append(names[t])
        for c in op.control_inputs:
            expr = self._op_dead_expr(c)
            if expr is not None:
                parts.append(expr[0])
                uses.extend(expr[1])
        if not parts:
            return None
        return " or ".join(dict.fromkeys(parts)), tuple(dict.fromkeys(uses))

    def _op_dead_expr(self, op: Operation) -> tuple[str, tuple[str, ...]] | None:
        found = self.dead_ops.get(op)
        if found is not None:
            return found
        live_outputs = [t for t in op.outputs if t in self.maybe_dead and t in self.emitter.names
                        and self.emitter.names[t] not in self.emitter.globals]
        if not live_outputs:
            return None
        names = [self.emitter.names[t] for t in live_outputs]
        expr = " and ".join(f"{n} is DEAD" for n in names)
        return (f"({expr})" if len(names) > 1 else expr), tuple(self.emitter.local_uses(names))

    def _emit_switch(self, op: Operation, block: Block) -> None:
        emitter = self.emitter
        names = emitter.names
        data, pred = names[op.inputs[0]], names[op.inputs[1]]
        false_var, true_var = emitter.fresh(), emitter.fresh()
        guard = self._dead_guard(op)
        text = f"{false_var}, {true_var} = (DEAD, {data}) if {pred} else ({data}, DEAD)"
        uses = emitter.local_uses([data, pred])
        if guard is not None:
            text = f"{false_var}, {true_var} = (DEAD, DEAD) if {guard[0]} else " \
                   f"((DEAD, {data}) if {pred} else ({data}, DEAD))"
            uses = uses + list(guard[1])
        block.add(text, defs=[false_var, true_var], uses=uses, op=op)
        names[op.outputs[0]] = false_var
        names[op.outputs[1]] = true_var
        self.maybe_dead.update(op.outputs)

    def _emit_merge(self, op: Operation, block: Block) -> None:
        emitter = self.emitter
        names = emitter.names
        inputs = [names[t] for t in op.inputs]
        value_var, index_var = emitter.fresh(), emitter.fresh()
        if not any(t in self.maybe_dead for t in op.inputs):
            # All inputs live (an unusual graph): the first one wins.
            block.add(f"{value_var} = {inputs[0]}", defs=[value_var], uses=emitter.local_uses(inputs[:1]), op=op)
            block.add(f"{index_var} = c_index0", defs=[index_var])
        else:
            chain_value = "DEAD"
            chain_index = "DEAD"
            for i in reversed(range(len(inputs))):
                chain_value = f"{inputs[i]} if {inputs[i]} is not DEAD else ({chain_value})"
                chain_index = f"c_index{i} if {inputs[i]} is not DEAD else ({chain_index})"
                emitter.globals[f"c_index{i}"] = _int32(i)
            block.add(f"{value_var} = {chain_value}", defs=[value_var], uses=emitter.local_uses(inputs), op=op)
            block.add(f"{index_var} = {chain_index}", defs=[index_var], uses=emitter.local_uses(inputs))
            if all(t in self.maybe_dead for t in op.inputs):
                self.maybe_dead.update(op.outputs)
        emitter.globals.setdefault("c_index0", _int32(0))
        names[op.outputs[0]] = value_var
        names[op.outputs[1]] = index_var

    def check_fetches_alive(self, block: Block, fetches: Sequence[Any]) -> None:
        for f in fetches:
            if isinstance(f, Tensor) and f in self.maybe_dead:
                var = self.emitter.names[f]
                name = self.emitter.bind("fetch", f.name)
                self.emitter.globals["_dead_fetch"] = _dead_fetch
                block.add(f"if {var} is DEAD: _dead_fetch({name})", uses=[var])


class _Regions:
    """Which region of a loop iteration each item (op or child frame) of a frame runs in: the
    header (before the LoopCond test), the body (on the loop switches' true outputs) or the
    exit region (on their false outputs)."""

    def __init__(self, structure: LoopStructure, frame: Frame, loop_cond: Operation):
        self.structure = structure
        self.frame = frame
        self.loop_switches = {op for op in frame.ops if op.type in SWITCH and op.inputs[1].op is loop_cond}
        self.regions: dict[Any, int] = {}

    def of(self, items: list[Any]) -> dict[Any, int]:
        for item in items:
            name = item.name if isinstance(item, (Operation, Frame)) else "?"
            self.regions[item] = self.combine(name, self.sources(item))
        return self.regions

    def sources(self, item: Any) -> list[int]:
        """The regions of the values ``item`` reads (for a child frame: those from this frame)."""
        frame_of, frame = self.structure.frame_of, self.frame
        inner = isinstance(item, Frame)
        found = []
        for op in [item] if isinstance(item, Operation) else subtree_ops(item):
            for t in op.inputs:
                if is_back_edge(t.op, op) or (inner and frame_of.get(t.op) is not frame
                                              and t.op not in self.loop_switches):
                    continue
                found.append(self.source_region(t.op, t.value_index))
            for c in op.control_inputs:
                if not (inner and frame_of.get(c) is not frame):
                    found.append(self.source_region(c, None))
        return found

    def source_region(self, src_op: Operation, port: int | None) -> int:
        if src_op in self.loop_switches:
            if port is None:
                return HEADER
            return BODY if port == 1 else EXIT_REGION
        owner: Any = src_op
        frame_of = self.structure.frame_of
        if frame_of.get(src_op) is not self.frame:
            # Outside values are available everywhere; values from a child frame take its region.
            child = child_containing(self.frame, frame_of.get(src_op))
            if child is None:
                return HEADER
            owner = child
        return self.regions.get(owner, HEADER)

    def combine(self, op_name: str, sources: list[int]) -> int:
        found = set(sources) - {HEADER}
        if len(found) > 1:
            raise GraphError(f"node '{op_name}' in loop frame '{self.frame.name}' depends on both the "
                             f"continue and the exit branch of the loop")
        return found.pop() if found else HEADER


def _quiet(precompute: Any) -> Any:
    """``precompute`` answering None instead of raising: the node's kernel then runs in each
    iteration, and reports any error in the values, naming the node."""
    def run(*values: Any) -> Any:
        try:
            return precompute(*values)
        except Exception:
            return None
    return run


def _int32(value: int) -> Any:
    return np.int32(value)


def _loop_limit_error(frame: tuple[str, str], limit: int) -> None:
    name, loop_cond = frame
    raise IterationLimitError(f"loop frame '{name}' (LoopCond '{loop_cond}') ran more than {limit} iterations "
                              f"(Session(loop_iteration_limit=...), {config.how_to_raise('max_loop_iterations')})",
                              loop_cond, LOOP_COND)


def _loop_late(deadlines: deadline.CallDeadlines, frame: tuple[float | None, str, str], iterations: int) -> None:
    seconds, where, loop_cond = frame
    raise deadline.loop_error(deadlines, seconds, where, iterations, loop_cond, LOOP_COND)


def _dead_fetch(name: str) -> None:
    raise ExecutionError(f"fetch {name} has no value: it is on a branch of a conditional that was not taken")
