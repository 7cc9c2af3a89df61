"""Gradients of v1 while loops, built from the loop's structure alone.

TensorFlow keeps loop contexts in Python objects that a GraphDef does not store, so it
cannot differentiate an imported v1 loop. gradreg rebuilds each loop from the graph
(gradreg.model.frames.LoopStructure: frames from Enter's ``frame_name``) and
differentiates it as a whole, in TensorFlow's shape:

* **Forward frame F** gains an iteration counter (Enter 0 -> Merge -> Switch -> +1 ->
  NextIteration, with an Exit giving the trip count T) and, for every forward value the
  gradient needs, a StackPushV2 that runs once per iteration.
* **Backward frame B** is a new loop running T times. Its loop variables are the gradient
  of each loop variable (starting from the gradient reaching its Exit) and an accumulator
  for each loop invariant (a constant Enter). Its body is the gradient of F's body, built
  by the gradient engine itself, with every forward value replaced by a StackPopV2 —
  stacks are LIFO, so backward iteration k sees the values of forward iteration T-1-k,
  and each popped value is released once the iteration has used it.
* Its Exits are the gradients of the loop's initial values and invariants.
* An invariant's per-iteration contributions that are linear in per-iteration values
  (``x_t^T dz_t``) are summed after the loop from those values collected in TensorLists:
  a popped forward value nothing else needs is pushed on a list by F itself (its stack push
  is then never run), a value of B is set into a list reserved for the trip count.

A loop nested in F's body is, inside the body gradient, one unit again; its own
forward values (and trip count) are pushed in its frame and popped in its backward
frame, which nests in B.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gradreg.autodiff.rules import collectable, zeros_like_value
from gradreg.build.builders import apply_op, as_dense, convert_to_tensor
from gradreg.build.control_flow import ControlFlowContext, LoopContext
from gradreg.errors import GradientError, describe_node
from gradreg.model import dtypes
from gradreg.model.dtypes import DType
from gradreg.model.frames import (
    ENTER,
    EXIT,
    MERGE,
    NEXT_ITERATION,
    STRUCTURE,
    SWITCH,
    Frame,
    LoopStructure,
    is_loop_merge,
)
from gradreg.model.graph import Graph, Operation, Tensor
from gradreg.model.indexed_slices import IndexedSlices
from gradreg.model.shape_inference import constant_value
from gradreg.registry import get_registry


@dataclass
class LoopVar:
    enter: Operation
    merge: Operation
    switch: Operation
    next_iteration: Operation
    exit: Operation | None
    # The body passes the value on unchanged (through Identity ops only): the loop variable is
    # an invariant carried as a loop variable, which is how TensorFlow lowers a functional
    # While's captured inputs. These are its values inside the frame (merge, switch, the
    # identities), all equal to the value entered.
    passthrough: tuple[Tensor, ...] = ()

    @property
    def dtype(self) -> DType | None:
        return self.merge.outputs[0].dtype


@dataclass
class ForwardLoop:
    """A v1 loop frame's ops by role."""
    frame: Frame
    structure: LoopStructure
    loop_cond: Operation
    loop_vars: list[LoopVar]
    invariants: list[Operation]            # Enter ops other than loop-variable Enters
    exits: list[Operation]
    parallel_iterations: int = 10
    # {value of a pass-through loop variable in the frame: the value entered}
    passthrough_inputs: dict[Tensor, Tensor] = field(default_factory=dict)


def analyze_loop(frame: Frame, structure: LoopStructure) -> ForwardLoop:
    """Identify a loop frame's LoopCond, loop variables and invariants; GradientError if the frame
    is not shaped as TensorFlow's while_loop builds loops."""
    enters = [op.name for op in frame.ops if op.type in ("Enter", "RefEnter")]
    where = f"loop frame '{frame.name}' (entered at node '{enters[0] if enters else frame.name}')"
    if any(isinstance(op.control_flow_context, BackwardLoopContext) or op.type == "StackPopV2" for op in frame.ops):
        # The loop is itself a loop's gradient: its forward values come from stacks, whose
        # pops have no gradient, so differentiating it would silently drop terms.
        raise GradientError(f"cannot differentiate {where}: it is the gradient of a while loop "
                            f"(second-order gradients of while loops are not supported, as in TensorFlow)")
    conds = [op for op in frame.ops if op.type == "LoopCond"]
    if len(conds) != 1:
        raise GradientError(f"cannot differentiate {where}: it has {len(conds)} LoopCond nodes")
    loop_cond = conds[0]
    loop_vars, used_enters = [], set()
    for merge in frame.ops:
        if merge.type not in MERGE or not any(t.op.type in NEXT_ITERATION for t in merge.inputs):
            continue
        inits = [t.op for t in merge.inputs if t.op.type not in NEXT_ITERATION]
        nexts = [t.op for t in merge.inputs if t.op.type in NEXT_ITERATION]
        if len(inits) != 1 or len(nexts) != 1 or inits[0].type not in ENTER:
            raise GradientError(f"cannot differentiate {where}: {describe_node(merge.name, merge.type)} is not "
                                f"an Enter/NextIteration loop merge")
        switches = [c for c in merge.outputs[0].consumers() if c.type in SWITCH and c.inputs[1].op is loop_cond]
        if len(switches) != 1:
            raise GradientError(f"cannot differentiate {where}: loop variable {merge.name} has {len(switches)} "
                                f"loop switches")
        switch = switches[0]
        exits = [c for c in switch.outputs[0].consumers() if c.type in EXIT]
        loop_vars.append(LoopVar(inits[0], merge, switch, nexts[0], exits[0] if exits else None,
                                 _passthrough_values(merge, switch, nexts[0])))
        used_enters.add(inits[0])
    invariants = [op for op in frame.ops if op.type in ENTER and op not in used_enters]
    exits = [op for op in frame.ops if op.type in EXIT]
    matched = {v.exit for v in loop_vars}
    for op in exits:
        # The backward loop starts from the gradients reaching the loop variables' Exits; an Exit
        # reading anything else (an op between the Switch and the Exit) would get none, silently.
        if op not in matched:
            raise GradientError(f"cannot differentiate {where}: {describe_node(op.name, op.type)} reads "
                                f"'{op.inputs[0].name}', not a loop variable's Switch (as TensorFlow's while loops do)")
    parallel = loop_vars[0].enter.get_attr("parallel_iterations") if loop_vars else 10
    passthrough = {t: v.enter.inputs[0] for v in loop_vars for t in v.passthrough}
    return ForwardLoop(frame, structure, loop_cond, loop_vars, invariants, exits, parallel,
                       passthrough_inputs=passthrough)


_PASS_ON = frozenset({"Identity", "RefIdentity", "Snapshot"})


def _passthrough_values(merge: Operation, switch: Operation, next_iteration: Operation) -> tuple[Tensor, ...]:
    """If the value reaching ``next_iteration`` is the loop switch's true output through
    Identity-like ops only, the loop variable's values in the frame (else empty)."""
    chain = []
    t = next_iteration.inputs[0]
    while t.op.type in _PASS_ON and t.op is not switch:
        chain.append(t)
        t = t.op.inputs[0]
    if t is not switch.outputs[1]:
        return ()
    return (merge.outputs[0], switch.outputs[1], *chain)


class ForwardLoopContext(LoopContext):
    """Adds ops to an existing forward loop frame (its counter and stack pushes)."""

    def __init__(self, graph: Graph, loop: ForwardLoop, outer: ControlFlowContext | None):
        super().__init__(graph, outer, loop.frame.name, loop.parallel_iterations)
        self.loop = loop
        self._body_pivot: Operation | None = None
        self._trip_count: Tensor | None = None
        self._counter_next: Operation | None = None

    def contains(self, op: Operation) -> bool:
        """Whether ``op``'s outputs are values of this frame: existing ops by the frame structure
        (an inner loop's Exit gives a value of this frame), new ones by their context."""
        structure = self.loop.structure
        if op in structure.frame_of:
            return structure.value_frame(op) is self.loop.frame
        return super().contains(op)

    @property
    def pivot(self) -> Operation | None:   # input-less ops added to the frame run in the body, once per iteration
        return self.body_pivot

    @pivot.setter
    def pivot(self, op: Operation | None) -> None:
        raise GradientError("the pivot of an existing loop frame is its counter's increment")

    @property
    def body_pivot(self) -> Operation:
        """An op that runs once in every iteration's body (the counter's increment)."""
        self.trip_count()
        assert self._body_pivot is not None
        return self._body_pivot

    def require(self, op: Operation) -> None:
        """Make ``op`` (a stack push) run in every iteration the counter runs in: whatever needs the
        trip count then also runs the pushes (TensorFlow does the same)."""
        self.trip_count()
        assert self._counter_next is not None
        self._counter_next.add_control_input(op)

    def trip_count(self) -> Tensor:
        """The number of iterations the loop ran (an Exit of a counter added to the frame)."""
        if self._trip_count is None:
            graph = self.graph
            with self.outside():
                zero = convert_to_tensor(0, dtypes.int32, name="f_count")
            enter = self.enter(zero, is_constant=False, name="f_count")
            with self.entered(), graph.control_dependencies(None):
                merge = apply_op("Merge", [enter, enter], name="f_count_merge")[0]
                false_out, true_out = apply_op("Switch", merge, self.loop.loop_cond.outputs[0],
                                               name="f_count_switch")
                with graph.control_dependencies([merge.op]):   # the frame's pivot does not exist yet
                    one = convert_to_tensor(1, dtypes.int32)
                increment = apply_op("AddV2", true_out, one, name="f_count_add")
                self._body_pivot = increment.op
                next_value = apply_op("NextIteration", increment, name="f_count_next")
                self._counter_next = next_value.op
                merge.op.replace_input(1, next_value)
                exit_value = apply_op("Exit", false_out, name="f_count_exit")
            exit_value.op.set_control_flow_context(self.outer)
            self._trip_count = exit_value
        return self._trip_count


# Constants of a forward body up to this many elements are made again in the backward body.
_SMALL_CONSTANT = 64

# The (predicate, branch) pairs of v1 conditionals that must all hold for an op to run.
Guard = frozenset[tuple[Tensor, int]]


class BackwardLoopContext(LoopContext):
    """The backward loop: forward values of the loop's frame arrive through stacks."""

    def __init__(self, graph: Graph, forward: ForwardLoopContext, outer: ControlFlowContext | None, frame_name: str):
        super().__init__(graph, outer, frame_name, forward.parallel_iterations)
        self.forward = forward
        self._guards: dict[Operation, Guard] = {}
        # Unguarded pops: popped value -> (forward value, its push). Pushes join the forward
        # counter (run every iteration) when the gradient is complete (``finish``), unless
        # their value was collected in the forward loop instead.
        self.pops: dict[Tensor, tuple[Tensor, Operation]] = {}
        self._pushes: list[Operation] | None = []

    def _bring_in(self, t: Tensor) -> Tensor:
        if self.forward.contains(t.op):
            if t.op.type in ENTER and t.op.get_attr("is_constant"):
                # A loop invariant is the same in every iteration: enter the outer value itself
                # instead of stacking a copy per iteration.
                return self.capture(t.op.inputs[0])
            entered = self.forward.loop.passthrough_inputs.get(t)
            if entered is not None:   # an invariant carried as a loop variable: the same
                return self.capture(entered)
            value = constant_value(t)
            if value is not None and value.size <= _SMALL_CONSTANT:
                # A constant of the forward body (a slice's strides, a shape): made again in the
                # backward body, where rules can see its value, instead of pushed and popped.
                return self._constant(value, t)
            return self._pop(t)
        return super()._bring_in(t)

    def _constant(self, value: Any, t: Tensor) -> Tensor:
        graph = self.graph
        with self.entered(), graph.control_dependencies(None), graph.control_dependencies([self.pivot]):
            made: Tensor = convert_to_tensor(value, t.known_dtype.base_dtype, name=f"{t.op.name.split('/')[-1]}_value")
        return made

    def _pop(self, t: Tensor) -> Tensor:
        """Push ``t`` on a stack in every forward iteration; pop it in the backward one."""
        graph = self.graph
        with graph.in_control_flow_context(None), graph.control_dependencies(None):
            handle = apply_op("StackV2", convert_to_tensor(-1, dtypes.int32), elem_type=t.known_dtype.base_dtype,
                              stack_name=t.op.name, name="f_acc")
        forward = self.forward
        with forward.entered(), graph.control_dependencies(None), \
                graph.control_dependencies([forward.body_pivot]):
            push = apply_op("StackPushV2", handle, t, name="StackPushV2")
        if self._pushes is None:
            forward.require(push.op)
        else:
            self._pushes.append(push.op)
        guards = sorted(self._input_guard(t), key=lambda g: (g[0].name, g[1]))
        with self.entered(), graph.control_dependencies(None), graph.control_dependencies([self.pivot]):
            handle_in = self.capture(handle)
            for pred, branch in guards:
                # Forward, t was pushed only where this branch was taken: pop only there too.
                handle_in = apply_op("Switch", handle_in, self.capture(pred))[branch]
            value: Tensor = apply_op("StackPopV2", handle_in, elem_type=t.known_dtype.base_dtype, name="StackPopV2")
        value.set_shape(t.shape)
        if not guards:
            self.pops[value] = (t, push.op)
        return value

    def invariant_source(self, t: Tensor) -> Tensor | None:
        """The tensor outside this loop that ``t`` equals in every iteration (an invariant this
        frame entered), or None."""
        op = t.op
        if op.type in ENTER and op.get_attr("is_constant") and op.control_flow_context is self:
            return op.inputs[0]
        return None

    def finish(self, unneeded: set[Any]) -> None:
        """Make every push but the ``unneeded`` ones run in each forward iteration (nor the
        pushes of values whose pops nothing uses any more: a rule's input that an
        iteration-sum rule made unnecessary)."""
        unneeded = unneeded | {push for value, (_, push) in self.pops.items()
                               if all(_unused(c) for c in value.consumers())}
        pushes, self._pushes = self._pushes or [], None
        for push in pushes:
            if push not in unneeded:
                self.forward.require(push)

    def _guard(self, op: Operation) -> Guard:
        """The (predicate, branch) pairs of the v1 conditionals in the forward frame that must all
        hold for ``op`` to run (not be dead) in an iteration."""
        found = self._guards.get(op)
        if found is not None:
            return found
        self._guards[op] = frozenset()   # cycles only run through loop merges, which are unguarded
        forward = self.forward
        structure = forward.loop.structure
        if op not in structure.frame_of or not forward.contains(op) or op.type in ENTER or is_loop_merge(op):
            guard: Guard = frozenset()   # outside this frame, a loop entry, or added by gradreg (unconditional)
        elif op.type in EXIT:
            # The exit of a loop nested in this frame: live whenever that loop ran, which is
            # whenever its Enter inputs were.
            inner = structure.frame_of[op]
            guard = frozenset()
            for enter in inner.ops:
                if enter.type in ENTER:
                    guard |= self._input_guard(enter.inputs[0])
        elif op.type in MERGE:
            inputs = [self._input_guard(t) for t in op.inputs]
            guard = frozenset.intersection(*inputs) if inputs else frozenset()
        else:
            guard = frozenset()
            for t in op.inputs:
                guard |= self._input_guard(t)
            for c in op.control_inputs:
                guard |= self._guard(c)
        self._guards[op] = guard
        return guard

    def _input_guard(self, t: Tensor) -> Guard:
        op = t.op
        guard = self._guard(op)
        if op.type in SWITCH and op.inputs[1].op is not self.forward.loop.loop_cond:
            guard = guard | {(op.inputs[1], t.value_index)}
        return guard


def loop_gradient(graph: Graph, loop: ForwardLoop, exit_grads: dict[Operation, Any],
                  needs_grad: Callable[[Tensor], bool], body_gradients: Callable[..., list[Any]]
                  ) -> dict[Operation, Any]:
    """Gradients for the inputs of the loop's Enter ops (keyed by Enter op), given the gradients
    reaching its Exits. ``body_gradients(ys, xs, grad_ys)`` is the gradient engine."""
    outer = graph.control_flow_context
    forward = ForwardLoopContext(graph, loop, _forward_outer(outer))
    trip_count = forward.trip_count()
    carried = [v for v in loop.loop_vars if _trainable(v.dtype) and not v.passthrough]
    invariants = _invariants(loop, needs_grad)
    if not carried and not invariants:
        return {}
    frame_name = graph.unique_name(f"{loop.frame.name}_grad", mark_as_used=True)
    backward = BackwardLoopContext(graph, forward, outer, frame_name)
    grad_inits = [as_dense(_exit_gradient(forward, v, exit_grads)) for v in carried]
    count_init = backward.enter(trip_count, is_constant=False, name="b_count")
    with backward.entered():
        counter = _BackwardCounter(backward, count_init)
        grad_vars = [_loop_var(backward, counter.loop_cond, init, "b_exit") for init in grad_inits]
        grad_next = [apply_op("Identity", body) for body, _ in grad_vars]
        ys = [v.next_iteration.inputs[0] for v in carried]
        xs = [v.switch.outputs[1] for v in carried] + [v.merge.outputs[0] for v in carried] + \
             [t for inv in invariants for t in inv.inside]
        grads = body_gradients(ys, xs, grad_next)
        n = len(carried)
        exits = [counter.exit] + _carried_exits(grad_vars, grad_next, grads[:n], grads[n:2 * n])
        totals, collected = _invariant_totals(backward, counter.loop_cond, invariants, grads[2 * n:])
        derived = _derive_stacks(backward, collected)
        exits.extend(t for t in totals if isinstance(t, Tensor))
        exits.extend(_collect_values(forward, backward, counter, collected))
    for e in exits:
        e.op.set_control_flow_context(outer)
    out: dict[Operation, Any] = {}
    for v, e in zip(carried, exits[1:1 + n]):
        out[v.enter] = e
    stacked: dict[Tensor, Tensor] = {}
    for inv, total in zip(invariants, totals):
        if total is not None and not isinstance(total, Tensor):
            total = total(lambda value: _stacked(value, collected, stacked, derived))
        # A pass-through variable leaves the loop as it entered: its Exit's gradient adds once.
        exit_grad = exit_grads.get(inv.exit) if inv.exit is not None else None
        if exit_grad is not None:
            total = exit_grad if total is None else apply_op("AddN", [as_dense(exit_grad), total])
        if total is not None:
            out[inv.key] = total
    return out


@dataclass
class _Invariant:
    """A value the same in every iteration: an invariant Enter, or a loop variable the body
    passes on unchanged. ``key`` is its Enter op, ``entered`` the outer value, ``inside`` its
    values in the frame (where the body's gradient is collected)."""
    key: Operation
    entered: Tensor
    inside: list[Tensor]
    exit: Operation | None = None


def _invariants(loop: ForwardLoop, needs_grad: Callable[[Tensor], bool]) -> list[_Invariant]:
    found = [_Invariant(e, e.inputs[0], [e.outputs[0]]) for e in loop.invariants
             if _trainable(e.outputs[0].dtype, resource=True) and needs_grad(e.inputs[0])]
    found += [_Invariant(v.enter, v.enter.inputs[0], [v.switch.outputs[1], v.merge.outputs[0]], v.exit)
              for v in loop.loop_vars
              if v.passthrough and _trainable(v.dtype, resource=True) and needs_grad(v.enter.inputs[0])]
    return found


def _exit_gradient(forward: ForwardLoopContext, v: LoopVar, exit_grads: dict[Operation, Any]) -> Any:
    """The gradient reaching loop variable ``v``'s Exit; zeros if none does. A loop variable
    without an Exit (pruned from a frozen graph) gets one: its gradient still flows back
    through the other loop variables it feeds."""
    if v.exit is None:
        graph = forward.graph
        with forward.entered(), graph.control_dependencies(None):
            exit_value: Tensor = apply_op("Exit", v.switch.outputs[0], name="f_exit")
        v.exit = exit_value.op
        v.exit.set_control_flow_context(forward.outer)
    g = exit_grads.get(v.exit)
    return g if g is not None else apply_op("ZerosLike", v.exit.outputs[0])


class _BackwardCounter:
    """The backward loop's counter: from the forward trip count down to 0. ``index`` is the
    forward iteration each backward iteration undoes; ``exit`` ends the count."""

    def __init__(self, backward: BackwardLoopContext, count_init: Tensor):
        self.count_init = count_init
        count_merge = apply_op("Merge", [count_init, count_init], name="b_merge")[0]
        backward.pivot = count_merge.op
        pred = apply_op("Greater", count_merge, convert_to_tensor(0, dtypes.int32))
        self.loop_cond = apply_op("LoopCond", pred, name="b_loop_cond")
        count_done, count_body = apply_op("Switch", count_merge, self.loop_cond, name="b_switch")
        count = apply_op("Identity", count_body, name="b_count_body")
        backward.pivot = count.op
        self.index = apply_op("Sub", count, convert_to_tensor(1, dtypes.int32))   # the forward iteration's index
        count_merge.op.replace_input(1, apply_op("NextIteration", self.index))
        self.exit = apply_op("Exit", count_done)


def _carried_exits(grad_vars: list[tuple[Tensor, Callable[[Tensor], Tensor]]], grad_next: list[Tensor],
                   through_switch: list[Any], through_merge: list[Any]) -> list[Tensor]:
    """Close each carried gradient's loop variable with its two contributions in the body (the
    loop variable's value used in the body, and in the condition) and return the Exits."""
    exits = []
    for (_, close), nxt, a, b in zip(grad_vars, grad_next, through_switch, through_merge):
        total = [g for g in (a, b) if g is not None]
        if not total:
            exits.append(close(apply_op("ZerosLike", nxt)))
        elif len(total) == 1:
            exits.append(close(as_dense(total[0])))
        else:
            exits.append(close(apply_op("AddN", [as_dense(g) for g in total])))
    return exits


def _invariant_totals(backward: BackwardLoopContext, loop_cond: Tensor, invariants: list[_Invariant],
                      grads: list[Any]) -> tuple[list[Any], dict[Tensor, Tensor | None]]:
    """Each invariant's gradient is the sum of its per-iteration contributions: the Exit of a
    loop variable accumulating them, or, where the op families say a contribution is linear in
    per-iteration values (x_t^T dz_t, a reduction of dz_t), a builder summing those values
    after the loop — the values to collect are returned too (each mapped to None for now).
    ``grads`` holds the body's gradients for each invariant's values in the frame, in order;
    an invariant the body does not differentiate into (AssignAdd) gets None, not zeros."""
    totals: list[Any] = []
    collected: dict[Tensor, Tensor | None] = {}       # per-iteration value -> its list's Exit
    position = 0
    for inv in invariants:
        present = [g for g in grads[position:position + len(inv.inside)] if g is not None]
        position += len(inv.inside)
        if not present:
            totals.append(None)
            continue
        g = present[0] if len(present) == 1 else apply_op("AddN", [as_dense(p) for p in present])
        deferred = _deferred_sum(g)
        if deferred is not None:
            values, build = deferred
            collected.update((value, None) for value in values if value not in collected)
            totals.append(build)
            continue
        with backward.outside():
            zeros = zeros_like_value(inv.entered, as_dense(g).known_dtype.base_dtype)
        totals.append(_accumulate(backward, loop_cond, zeros, as_dense(g)))
    return totals, collected


def _collect_values(forward: ForwardLoopContext, backward: BackwardLoopContext, counter: _BackwardCounter,
                    collected: dict[Tensor, Tensor | None]) -> list[Tensor]:
    """Collect each per-iteration value in a TensorList (filling ``collected``): in the forward
    loop itself when only contributions summed after the loop use it (no stack push, pop and
    second list), else in the backward loop, whose list Exits are returned."""
    exits = []
    unneeded: set[Operation] = set()
    for value in collected:
        collected[value] = _collect_forward(forward, backward, value, unneeded)
        if collected[value] is None:
            list_exit = _collect(backward, counter.loop_cond, counter.count_init.op.inputs[0], counter.index, value)
            collected[value] = list_exit
            exits.append(list_exit)
    backward.finish(unneeded)
    return exits


def _loop_var(backward: BackwardLoopContext, loop_cond: Tensor, init: Tensor, name: str
              ) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
    """A loop variable of the backward frame, entering ``init``: (its value in the body,
    function closing the loop with the next value and returning the Exit)."""
    enter = backward.enter(init, is_constant=False, name=name)
    merge = apply_op("Merge", [enter, enter], name=f"{name}_merge")[0]
    false_out, true_out = apply_op("Switch", merge, loop_cond, name=f"{name}_switch")

    def close(next_value: Tensor) -> Tensor:
        merge.op.replace_input(1, apply_op("NextIteration", next_value))
        exit_value: Tensor = apply_op("Exit", false_out)
        return exit_value
    return true_out, close


def _accumulate(backward: BackwardLoopContext, loop_cond: Tensor, zeros: Tensor, contribution: Tensor | None
                ) -> Tensor:
    """The Exit of a loop variable starting at ``zeros`` and adding ``contribution`` per iteration."""
    acc, close = _loop_var(backward, loop_cond, zeros, "b_acc")
    acc = apply_op("Identity", acc)
    if contribution is None:
        return close(acc)
    if acc.known_dtype.base_dtype is dtypes.variant:   # TensorLists add element by element (AddN only)
        return close(apply_op("AddN", [acc, contribution]))
    return close(apply_op("AddV2", acc, contribution))


def _collect(backward: BackwardLoopContext, loop_cond: Tensor, trip_count: Tensor, index: Tensor, value: Tensor
             ) -> Tensor:
    """The Exit of a TensorList loop variable, reserved for ``trip_count`` elements, that gets
    ``value`` set at ``index`` (the forward iteration) in every iteration."""
    dtype = value.known_dtype.base_dtype
    with backward.outside():
        reserved = apply_op("TensorListReserve", convert_to_tensor(value.shape.as_list(), dtypes.int32),
                            trip_count, element_dtype=dtype, name="b_list")
    handle, close = _loop_var(backward, loop_cond, reserved, "b_list")
    return close(apply_op("TensorListSetItem", handle, index, value))


def _collect_forward(forward: ForwardLoopContext, backward: BackwardLoopContext, value: Tensor,
                     unneeded: set[Any]) -> Tensor | None:
    """If ``value`` is a popped forward value that only per-iteration contributions now summed
    after the loop use, the Exit of a TensorList the forward loop pushes it on (its push is
    then ``unneeded``); else None."""
    popped = backward.pops.get(value)
    if popped is None or not all(_unused(c) for c in value.consumers()):
        return None
    t, push = popped
    graph = forward.graph
    with forward.outside():
        empty = apply_op("EmptyTensorList", convert_to_tensor(t.shape.as_list(), dtypes.int32),
                         convert_to_tensor(-1, dtypes.int32), element_dtype=t.known_dtype.base_dtype, name="f_list")
    enter = forward.enter(empty, is_constant=False, name="f_list")
    with forward.entered(), graph.control_dependencies(None):
        merge = apply_op("Merge", [enter, enter], name="f_list_merge")[0]
        false_out, true_out = apply_op("Switch", merge, forward.loop.loop_cond.outputs[0], name="f_list_switch")
        pushed = apply_op("TensorListPushBack", true_out, t)
        merge.op.replace_input(1, apply_op("NextIteration", pushed, name="f_list_next"))
        exit_value: Tensor = apply_op("Exit", false_out, name="f_list_exit")
    exit_value.op.set_control_flow_context(forward.outer)
    unneeded.add(push)
    return exit_value


def _unused(op: Operation, depth: int = 0) -> bool:
    """Whether nothing uses ``op``'s outputs but ops that are unused themselves (the
    per-iteration contributions replaced by sums after the loop)."""
    if depth > 8 or op.control_outputs or op.type in STRUCTURE:
        return False
    return all(_unused(c, depth + 1) for t in op.outputs for c in t.consumers())



def _derive_stacks(backward: BackwardLoopContext, collected: dict[Tensor, Tensor | None]
                   ) -> dict[Tensor, Callable[[Callable[[Tensor], Tensor]], Tensor]]:
    """Replace, in ``collected``, each value of the backward body that only the sums after the
    loop use and whose stacked values an iteration-stack rule computes from other per-iteration
    values (``dz_t W^T`` from ``dz_t``) by those values. Returns value -> builder of its
    stacked values from ``stacked``. The node then no longer runs per iteration (nothing needs
    it) and is not kept per iteration: one product after the loop instead."""
    registry = get_registry()
    derived: dict[Tensor, Callable[[Callable[[Tensor], Tensor]], Tensor]] = {}
    pending = list(collected)
    while pending:
        value = pending.pop()
        op = value.op
        rule = registry.iteration_stack(op.type)
        if rule is None or len(op.outputs) != 1 or not backward.contains(op) \
                or not all(_unused(c) for c in value.consumers()):
            continue
        found = rule(op, backward.invariant_source)
        if found is None:
            continue
        values, build = found
        del collected[value]
        derived[value] = build
        for v in values:
            if v not in collected and v not in derived:
                collected[v] = None
                pending.append(v)
    return derived


def _stacked(value: Tensor, collected: dict[Tensor, Any], stacked: dict[Tensor, Tensor],
             derived: dict[Tensor, Callable[[Callable[[Tensor], Tensor]], Tensor]]) -> Tensor:
    """The values ``value`` took in the backward iterations, stacked on a new leading axis."""
    found = stacked.get(value)
    if found is None and value in derived:
        found = stacked[value] = derived[value](lambda v: _stacked(v, collected, stacked, derived))
    if found is None:
        shape = value.shape.as_list()
        found = stacked[value] = apply_op("TensorListStack", collected[value], convert_to_tensor(shape, dtypes.int32),
                                          element_dtype=value.known_dtype.base_dtype)
    return found


# How loop gradients sum a contribution after the loop: the per-iteration values to collect, and a
# builder from ``stacked(value)`` (the iterations' values on a new leading axis) to the sum.
IterationSum = tuple[list[Tensor], Callable[[Callable[[Tensor], Tensor]], Any]]


def _deferred_sum(g: Any) -> IterationSum | None:
    """If the sum over iterations of ``g`` (a gradient contribution built in the backward
    body) can be computed after the loop from per-iteration values, those values (all with
    fully defined static shapes) and a builder taking ``stacked(value)`` to the sum;
    else None. The op families say which ops allow it: an iteration-sum rule (MatMul's
    x_t^T dz_t), or ``linear`` in the op definition (Sum, Reshape, ...)."""
    if isinstance(g, IndexedSlices):
        return _deferred_slices(g)
    if not isinstance(g, Tensor) or g.op.control_inputs:
        return None
    op = g.op
    rule = get_registry().iteration_sum(op.type)
    if rule is not None:
        found: IterationSum | None = rule(op)
        return found
    if op.definition is not None and op.definition.linear and len(op.outputs) == 1:
        return _deferred_linear(op)
    return None


def _deferred_linear(op: Operation) -> IterationSum | None:
    """f applied once to the sum of its first input, for f linear in it (f(a) + f(b) = f(a + b))
    with constant other inputs."""
    x = op.inputs[0]
    constants = [constant_value(t) for t in op.inputs[1:]]
    if any(c is None for c in constants):
        return None
    inner = _deferred_sum(x)
    if inner is None:
        if not collectable(x):
            return None
        inner = [x], lambda stacked: apply_op("Sum", stacked(x), convert_to_tensor(0, dtypes.int32))
    values, build_inner = inner
    # Not the internal attrs (_gradreg_rule, _gradient_op_type): builders refuse them, and the op made
    # here gets the provenance of the rule making it.
    attrs = {name: op.get_attr(name) for name in op.attr_names() if not name.startswith("_")}

    def build_linear(stacked: Callable[[Tensor], Tensor]) -> Any:
        args = [build_inner(stacked)] + [convert_to_tensor(c) for c in constants]
        return apply_op(op.type, *args, **attrs)
    return values, build_linear


def _deferred_slices(g: IndexedSlices) -> IterationSum | None:
    """A sparse contribution (rows of a gathered invariant): the sum over iterations is one
    IndexedSlices of all iterations' rows and indices, which stays sparse."""
    values, indices = g.values, g.indices
    if not (isinstance(values, Tensor) and isinstance(indices, Tensor) and collectable(values)
            and indices.shape.is_fully_defined() and indices.known_dtype.base_dtype in (dtypes.int32, dtypes.int64)):
        return None
    if not values.shape.rank or indices.shape.rank != 1 or indices.shape[0] != values.shape[0]:
        return None
    dense_shape = constant_value(g.dense_shape) if g.dense_shape is not None else None
    if dense_shape is None:
        return None

    def build_slices(stacked: Callable[[Tensor], Tensor]) -> IndexedSlices:
        rows = apply_op("Reshape", stacked(values), convert_to_tensor([-1] + values.shape.as_list()[1:], dtypes.int32))
        where = apply_op("Reshape", stacked(indices), convert_to_tensor([-1], dtypes.int32))
        return IndexedSlices(rows, where, convert_to_tensor(dense_shape))
    return [values, indices], build_slices


def _forward_outer(outer: ControlFlowContext | None) -> ForwardLoopContext | None:
    """The forward context enclosing a nested loop: the forward side of a backward context."""
    return outer.forward if isinstance(outer, BackwardLoopContext) else None


def _trainable(dtype: DType | None, resource: bool = False) -> bool:
    """Loop values that carry gradients: float and complex tensors, and TensorLists (variant)
    of them, whose gradients are TensorLists too; with ``resource``, resource variables read
    in the loop (invariants: their gradient is the sum of the reads' gradients)."""
    if dtype is None:
        return False
    base = dtype.base_dtype
    return base.kind in "fc" or base is dtypes.variant or (resource and base is dtypes.resource)
