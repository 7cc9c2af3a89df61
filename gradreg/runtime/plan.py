"""Execution plans: a pruned, ordered graph compiled into one Python function.

For a given set of fetches and feeds, the compiler keeps only the nodes the fetches
need (stopping at fed tensors), orders them, asks each node's kernel factory for its
compute function, and writes straight-line Python source::

    def _plan(_feeds):
        f0 = _feeds[0]
        v1 = k1(f0, c0)        # Mul
        del f0
        v2 = k2(v1)            # Tanh
        ...
        return (v7,)

Each intermediate is released right after its last consumer, so peak memory is the
live set. Pure nodes whose inputs are all constants are computed once, when the plan is
compiled (:meth:`Emitter.fold`), as TensorFlow's constant folding does: the shape arithmetic
and seeds of a TensorFlow-written gradient graph (``grad_ys`` Fills, the Tiles of a Mean's
gradient, ...) then cost nothing per step. A node whose kernel computes one of its inputs'
producers itself (an Absorbing kernel: gradient descent accumulating its MatMul delta into
the variable) replaces that producer when nothing else uses it (:meth:`Emitter.absorb`).
Errors inside kernels are mapped back, by line number, to the node that raised. Graphs with
v1 control flow (Switch/Merge/Enter/Exit/NextIteration) are compiled by
:mod:`gradreg.runtime.control_flow` into the same kind of function, with loops in the
generated code (neither folded nor absorbing).
"""
from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from gradreg import deadline
from gradreg.errors import ExecutionError, GradregError, UnknownOpError, describe_node
from gradreg.model.frames import V1_CONTROL_FLOW_OPS
from gradreg.model.graph import Operation, Tensor, calls_library_function
from gradreg.model.traversal import needed_ops, ordering_only, topological_order
from gradreg.registry import get_registry
from gradreg.registry.kernels import IDENTITY, NOOP, Absorbing, Constant, KernelContext, Tiered
from gradreg.registry.support import similar_op_types
from gradreg.runtime.codegen import Block, CompiledFunction, handed_over, insert_releases
from gradreg.runtime.control_flow import DEAD, emit_control_flow
from gradreg.runtime.executor import Fuser, InPlace


def result_dtype_ok(value: Any, dtype: Any) -> bool:
    """Whether a kernel's output has the storage type the graph declares (check_outputs mode)."""
    if dtype is None or dtype.kind in "rvs" or dtype.is_ref:
        return True
    return bool(np.asarray(value).dtype == dtype.base_dtype.storage)


def resolve_kernel(op: Operation, ctx: KernelContext, kernel_tables: Sequence[str] = ("numpy",),
                   absorb: bool = False) -> Any:
    """The compute function (or IDENTITY/NOOP/Constant) for ``op`` from the first of
    ``kernel_tables`` (backend names) whose factory accepts the node; UnknownOpError naming
    the node if no plugin provides a kernel. An Absorbing kernel is returned as it is only
    with ``absorb`` (the caller drops the absorbed node), else its fallback."""
    kernel = _resolve(op, ctx, kernel_tables)
    if isinstance(kernel, Absorbing) and not absorb:
        return kernel.fallback
    return kernel


def _resolve(op: Operation, ctx: KernelContext, kernel_tables: Sequence[str]) -> Any:
    registry = get_registry()
    for table in kernel_tables[:-1]:
        factory = registry.kernel_factory(op.type, table)
        if factory is not None:
            try:
                kernel = _make_kernel(factory, op, ctx)
            except GradregError:
                continue     # the last table's kernel (NumPy) runs it, or reports the problem naming the node
            if kernel is not None:
                # A kernel that describes itself for fusion (gradreg.backends.numba) runs its
                # plain kernel when the plan calls it on its own.
                return getattr(kernel, "unfused", kernel)
    factory = registry.kernel_factory(op.type, kernel_tables[-1])
    if factory is None and calls_library_function(op):
        calls = registry.function_call()
        factory = calls.value.kernel if calls is not None else None
    if factory is None:
        if op.definition is None:
            similar = " or ".join(f"'{t}'" for t in similar_op_types(op.type, registry))
            hint = f"; did you mean {similar}?" if similar else ""
            raise UnknownOpError(f"{describe_node(op.name, op.type)}: unknown op type '{op.type}' "
                                 f"(no installed plugin defines it{hint})")
        raise UnknownOpError(f"{describe_node(op.name, op.type)}: no kernel for op type '{op.type}' "
                             f"(defined by plugin '{op.definition.plugin}')")
    kernel = _make_kernel(factory, op, ctx)
    if kernel is None:
        raise UnknownOpError(f"{describe_node(op.name, op.type)}: the kernel declined this node")
    return kernel


def _make_kernel(factory: Any, op: Operation, ctx: KernelContext) -> Any:
    """``factory(op, ctx)``; what it raises about the node's attrs or constant inputs (a kernel
    checks them once, when the plan is compiled) is an ExecutionError naming the node, as the
    same error raised while running would be."""
    try:
        return factory(op, ctx)
    except GradregError:
        raise
    except Exception as exc:
        raise ExecutionError(f"{describe_node(op.name, op.type)}: {type(exc).__name__}: {exc}",
                             op.name, op.type) from exc


class Emitter:
    """Shared state while emitting a plan: variable names for tensors, globals, the kernel context."""

    def __init__(self, ctx: KernelContext, kernel_tables: Sequence[str], fuse: Fuser | None, check_outputs: bool,
                 fed: set[Tensor]):
        self.ctx = ctx
        self.kernel_tables = tuple(kernel_tables)
        self.fuse = fuse
        self.check_outputs = check_outputs
        self.fed = fed
        self.names: dict[Tensor, str] = {}
        self.globals: dict[str, Any] = {"np": np}
        self.upgrades: list[tuple[str, Tiered]] = []   # kernels bound now, with faster ones to build
        self.kernels: dict[Operation, Any] = {}          # resolved while folding, reused when emitting
        self.side_ops: set[Any] = set()                  # run as side tasks (see side_candidates)
        self.side_values: list[tuple[str, Any]] = []
        self._counter = itertools.count()
        self.unchecked_work = 0                          # since the last check of the run's deadline
        self.globals["_clock"] = deadline.clock
        self.globals["_dl"] = ctx.deadlines

    def fresh(self, prefix: str = "v") -> str:
        return f"{prefix}{next(self._counter)}"

    def bind(self, prefix: str, value: Any) -> str:
        name = self.fresh(prefix)
        self.globals[name] = value
        return name

    def bind_kernel(self, kernel: Any) -> str:
        """Bind a kernel; a Tiered one is bound as its initial kernel and recorded in
        ``upgrades`` (the executor swaps the built kernel in later)."""
        if isinstance(kernel, Tiered):
            name = self.bind("k", kernel.initial)
            self.upgrades.append((name, kernel))
            return name
        return self.bind("k", kernel)

    def local_uses(self, names: Sequence[str]) -> list[str]:
        """The names among ``names`` that are local variables (not bound globals)."""
        return [n for n in names if n not in self.globals]

    @staticmethod
    def _reads_variable(op: Operation) -> list[bool]:
        """For each input: whether it is a ref-typed tensor (a variable) going into a non-ref
        argument, so its value is read at this point of the plan."""
        inputs = op.inputs
        if not any(t.dtype is not None and t.dtype.is_ref for t in inputs):
            return [False] * len(inputs)
        expected = op.definition.input_dtypes(op.get_attr) if op.definition is not None else []
        return [t.dtype is not None and t.dtype.is_ref and not (i < len(expected) and expected[i].is_ref)
                for i, t in enumerate(inputs)]

    def emit_op(self, block: Block, op: Operation, dead_check: Any = None) -> None:
        """Emit the statement running ``op`` (nothing for aliases and constants), naming its
        outputs. ``dead_check(op)`` may return a guard expression and the variables it reads;
        the op then yields DEAD outputs when the guard is true (v1 conditionals)."""
        outputs = op.outputs
        if outputs and all(t in self.fed for t in outputs):
            return
        kernel = self.kernels.pop(op, None) or resolve_kernel(op, self.ctx, self.kernel_tables)
        guard = dead_check(op) if dead_check is not None else None
        if kernel is IDENTITY or isinstance(kernel, Constant):
            self._emit_alias(block, op, kernel, guard)
        elif isinstance(kernel, Absorbing):
            self._emit_call(block, op, kernel.kernel, guard, kernel.inputs, kernel.absorbed[0])
        elif kernel is not NOOP:
            self._emit_call(block, op, kernel, guard)

    def call_kernel(self, op: Operation) -> Any | None:
        """``op``'s kernel when the plan calls it (a function, or Tiered); else None, and
        emit_op will handle it (an alias, a constant, nothing to run)."""
        kernel = self.kernels.pop(op, None) or resolve_kernel(op, self.ctx, self.kernel_tables)
        if kernel is IDENTITY or kernel is NOOP or isinstance(kernel, (Constant, Absorbing)):
            self.kernels[op] = kernel
            return None
        return kernel

    def check_deadline(self, block: Block, item: Any) -> None:
        """After the statement running ``item`` (a node or a fused group): a check of the run's
        deadline (gradreg.deadline) when the work since the last check may be long -- after any
        item touching an array of unknown size or of CHECK_WORK elements or more, else every
        CHECK_WORK // NODE_WORK items -- so a plan of small nodes pays ~nothing per node and
        the run stops right after the slow node it is late at."""
        work = self.unchecked_work + NODE_WORK
        if work < CHECK_WORK:
            for t in (*item.inputs, *item.outputs):
                n = t.shape.num_elements()
                work = CHECK_WORK if n is None else work + n
                if work >= CHECK_WORK:
                    break
        if work < CHECK_WORK:
            self.unchecked_work = work
            return
        self.unchecked_work = 0
        where = self.bind("at", (describe_node(item.name, item.type), "after this node", item.name, item.type))
        block.add(f"if _clock() > _dl.at: raise _dl.error(*{where})", op=item)

    def emit_check(self, block: Block, op: Operation, targets: Sequence[str]) -> None:
        """With output checks on (tests), a statement checking ``op``'s outputs against its
        declared dtypes and shapes."""
        if self.check_outputs:
            checker = self.bind("chk", _output_checker(op))
            block.add(f"{checker}(({', '.join(targets)},))", uses=list(targets), op=op)

    def fold(self, op: Operation, constants: dict[Tensor, Any]) -> bool:
        """Compute ``op`` now if it is pure and ``constants`` holds all its inputs: bind its
        outputs as constants (added to ``constants``) and return True. A node that is
        stateful, has non-numeric outputs, computes more than FOLD_BYTES, or whose kernel
        raises is left to run (and to report its error, naming the node, if it is reached)."""
        outputs = op.outputs
        if (not outputs or op.definition is None or op.definition.stateful
                or any(t in self.fed for t in outputs) or not all(t in constants for t in op.inputs)
                or not all(_numeric(t) for t in outputs)):
            return False
        try:
            kernel = resolve_kernel(op, self.ctx, self.kernel_tables)
        except GradregError:
            return False     # emit_op reports it
        if isinstance(kernel, Constant):
            results = [kernel.value] * len(outputs)
        elif kernel is IDENTITY:
            results = [constants[t] for t in op.inputs]
        elif kernel is NOOP:
            return False
        else:
            fn = kernel.initial if isinstance(kernel, Tiered) else kernel
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")   # a warning (overflow, ...) is left to each run
                    value = fn(*(constants[t] for t in op.inputs))
            except Exception:
                self.kernels[op] = kernel
                return False
            results = [value] if len(outputs) == 1 else list(value)
            if len(results) != len(outputs) or any(
                    type(v) is not np.ndarray and not isinstance(v, np.generic) for v in results) \
                    or sum(np.asarray(v).nbytes for v in results) > FOLD_BYTES \
                    or not all(result_dtype_ok(v, t.dtype) and t.shape.is_compatible_with(np.shape(v))
                               for t, v in zip(outputs, results)):
                self.kernels[op] = kernel
                return False
            for v in results:
                if type(v) is np.ndarray and v.flags.writeable:
                    v.setflags(write=False)
        for t, v in zip(outputs, results):
            constants[t] = v
            self.names[t] = self.bind("c", _plan_constant(v))
        return True

    def absorb(self, order: Sequence[Operation], keep: set[Tensor]) -> list[Operation]:
        """``order`` without the nodes that a later node's Absorbing kernel computes itself:
        the kernels of nodes whose definition ``absorbs`` an input are resolved (and kept for
        emit_op); an Absorbing one is kept when nothing else in the plan uses the node it
        absorbs, else its fallback."""
        in_plan = set(order)
        absorbed: set[Operation] = set()
        for op in order:
            if op in self.kernels or op.definition is None or not op.definition.absorbs:
                continue
            try:
                kernel = resolve_kernel(op, self.ctx, self.kernel_tables, absorb=True)
            except GradregError:
                continue     # emit_op reports it, in order
            if isinstance(kernel, Absorbing):
                chain = set(kernel.absorbed)
                users = chain | {op}
                if all(node in in_plan and node not in absorbed
                       and not any(t in keep or t in self.fed for t in node.outputs)
                       and all(c in users for t in node.outputs for c in t.consumers() if c in in_plan)
                       and not any(c in in_plan for c in node.control_outputs)
                       for node in kernel.absorbed):
                    absorbed |= chain
                    for node in chain:
                        self.kernels.pop(node, None)
                else:
                    kernel = kernel.fallback
            self.kernels[op] = kernel
        return [op for op in order if op not in absorbed]

    def _emit_alias(self, block: Block, op: Operation, kernel: Any, guard: Any) -> None:
        """Outputs that are the inputs (IDENTITY) or a value known now (Constant): no call."""
        names, outputs = self.names, op.outputs
        if isinstance(kernel, Constant):
            sources = [self.bind("c", _plan_constant(kernel.value))] * len(outputs)
            reads = [False] * len(outputs)
        else:
            sources = [names[t] for t in op.inputs]
            reads = self._reads_variable(op)
        for t, src, read in zip(outputs, sources, reads):
            if t in self.fed:
                continue
            if read:   # reading a ref variable: a value, taken at this point
                var = self.fresh()
                block.add(f"{var} = {src}.read()", defs=[var], uses=self.local_uses([src]), op=op)
                names[t] = var
            elif guard is None:
                names[t] = src
            else:   # a dead control input makes even an alias dead
                var = self.fresh()
                block.add(f"{var} = DEAD if {guard[0]} else {src}", defs=[var],
                          uses=self.local_uses([src, *guard[1]]), op=op)
                names[t] = var

    def _emit_call(self, block: Block, op: Operation, kernel: Any, guard: Any,
                   inputs: Sequence[Tensor] | None = None, absorbed: Operation | None = None) -> None:
        """``outputs = kernel(inputs)`` (guarded: DEAD outputs when the guard holds); ``inputs``
        are the node's own unless it absorbs the node ``absorbed`` (an Absorbing kernel)."""
        names, outputs = self.names, op.outputs
        read_of = dict(zip(op.inputs, self._reads_variable(op)))
        if absorbed is not None:
            read_of.update(zip(absorbed.inputs, self._reads_variable(absorbed)))
        inputs = op.inputs if inputs is None else list(inputs)
        arg_exprs = [f"{names[t]}.read()" if read_of.get(t) else names[t] for t in inputs]
        targets = [self.fresh() for _ in outputs]
        if op in self.side_ops and guard is None and absorbed is None and not self.check_outputs:
            call = f"_side.submit({', '.join([self.bind_kernel(kernel), *arg_exprs])})"
            self.side_values.append((targets[0], op))
        else:
            call = f"{self.bind_kernel(kernel)}({', '.join(arg_exprs)})"
        uses = self.local_uses([names[t] for t in inputs])
        if guard is not None:
            condition, guard_uses = guard
            uses = uses + self.local_uses(guard_uses)
            if targets:
                dead = "DEAD" if len(targets) == 1 else "(" + ", ".join(["DEAD"] * len(targets)) + ")"
                call = f"{dead} if {condition} else {call}"
            else:
                call = f"{call} if not ({condition}) else None"
        if not targets:
            block.add(call, uses=uses, op=op)
            self.check_deadline(block, op)
            return
        lhs = targets[0] if len(targets) == 1 else ", ".join(targets)
        block.add(f"{lhs} = {call}", defs=targets, uses=uses, op=op)
        for t, var in zip(outputs, targets):
            if t not in self.fed:
                names[t] = var
        self.emit_check(block, op, targets)
        self.check_deadline(block, op)

    def emit_fused(self, block: Block, group: Any) -> None:
        """Emit one call of a fused kernel: ``group`` (a FusedKernel, gradreg.runtime.executor) has
        ``inputs`` and ``outputs`` (Tensors), ``kernel`` (returning the bare output value, or a
        tuple when there are several) and ``name``/``type`` naming it in errors."""
        fn = self.bind_kernel(group.kernel)
        names = [self.names[t] for t in group.inputs]
        args = [f"{n}.read()" if t.dtype is not None and t.dtype.is_ref else n
                for t, n in zip(group.inputs, names)]
        side = group in self.side_ops and not self.check_outputs
        call = f"_side.submit({', '.join([fn, *args])})" if side else f"{fn}({', '.join(args)})"
        if not group.outputs:
            block.add(call, uses=self.local_uses(names), op=group)
            self.check_deadline(block, group)
            return
        targets = [self.fresh() for _ in group.outputs]
        handoff: Callable[[set[str]], str] | None = None
        if side:
            self.side_values.append((targets[0], group))
        else:
            def hand_over(released: set[str]) -> str:
                # an input whose variable dies here is handed over: the kernel may write its
                # output into that array's memory (a value passed twice is not)
                given = [handed_over(n) if n in released and names.count(n) == 1 and a == n else a
                         for n, a in zip(names, args)]
                return f"{', '.join(targets)} = {fn}({', '.join(given)})"
            handoff = hand_over
        block.add(f"{', '.join(targets)} = {call}", defs=targets, uses=self.local_uses(names), op=group,
                  handoff=handoff)
        for t, var in zip(group.outputs, targets):
            self.names[t] = var
        if self.check_outputs:
            checker = self.bind("chk", _tensors_checker(group, group.outputs))
            block.add(f"{checker}(({', '.join(targets)},))", uses=targets, op=group)
        self.check_deadline(block, group)


# A plan checks its run's deadline (Emitter.check_deadline) once the elements its nodes read and
# write since the last check, counting NODE_WORK for each node, reach CHECK_WORK: after every
# node on arrays of 16k elements or more (or of unknown size), every 256 nodes on scalars.
CHECK_WORK = 1 << 14
NODE_WORK = 64



# Values computed when a plan is compiled: at most this many bytes a node (TensorFlow's
# constant folding stops at 10 MB; these are shapes, seeds and small tensors).
FOLD_BYTES = 1 << 20
_FOLDABLE_KINDS = "fciub"


def _numeric(t: Tensor) -> bool:
    """Whether ``t`` holds a plain numeric array (not a string, resource, variant or ref)."""
    return t.dtype is not None and t.dtype.kind in _FOLDABLE_KINDS and not t.dtype.is_ref


def _plan_constant(value: Any) -> Any:
    """A constant as the plan holds it: a 0-d number as a NumPy scalar, whose arithmetic with
    other scalars (loop counters and bounds) costs a tenth of a 0-d array's."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        return value[()]
    return value


# A backend's policy for building a plan's Tiered kernels (Plan): called with the plan and its
# calls so far as each call returns, until it returns True.
TierUp = Callable[["Plan", int], bool]


class Plan:
    """A compiled function from feed values to fetch values. Build with :func:`compile_plan`.

    ``upgrades`` are (global name, Tiered kernel) pairs: kernels that run their initial
    version until :meth:`install` swaps in the built one. ``tier_up(plan, calls)``, if given,
    is the backend's policy for building them: called with ``calls`` 0 before the plan's first
    call runs (what the calls use may be made ready then; its answer is not taken), then as the
    first call returns, and as each call after returns until it returns True (it has built
    them, or started to; ``calls`` counts the calls so far, this one included); without it
    they are built when the plan is compiled."""

    def __init__(self, compiled: CompiledFunction, num_ops: int,
                 upgrades: Sequence[tuple[str, Tiered]] = (), tier_up: TierUp | None = None,
                 modes: CallModes | None = None, takes_side: bool = False):
        self._compiled = compiled
        self._takes_side = takes_side      # the compiled function's second argument: the side runner
        # The ways a call may use the cores (see _runner): "split" always; "side" when the plan
        # has side items and the backend runs side tasks; "single" when it can hold a call on one
        # thread. GRADREG_SIDE_TASKS=on|off picks side tasks or splitting; else they are tried.
        makers: dict[str, Callable[[], SideRunner]] = {"split": _in_place}
        if modes is not None and modes.side is not None and takes_side:
            makers["side"] = modes.side
        if modes is not None and modes.single is not None:
            makers["single"] = modes.single
        self._makers = makers
        self._memory = modes.memory if modes is not None and modes.memory is not None else contextlib.nullcontext
        chosen = os.environ.get("GRADREG_SIDE_TASKS", "auto").strip().lower()
        self._fixed = chosen in ("on", "off") or len(makers) == 1
        # The mode calls run in outside trials: side tasks until a trial has chosen.
        self.mode = "side" if "side" in makers and chosen != "off" else "split"
        self.mode_times: dict[str, list[float]] = {mode: [] for mode in makers}   # seconds of the trial's calls
        self.trials = 0                        # trials done
        self.mode_medians: dict[str, float] = {}   # the last trial's median seconds per mode
        self._trial_from: int | None = None    # the call from which the next trial runs
        self._schedule: list[tuple[str, bool]] = []   # the trial's calls to come: (mode, timed)
        self._extended = 0                     # rounds the trial went on for (MODE_MORE)
        self._installed = 0
        self._runs = 0
        # Calls after the plan sat idle (_cold): their own mode, chosen by timing them.
        self._returned: float | None = None      # when the last call returned
        self._stretch: tuple[float, str] | None = None   # the cold stretch running: (start, mode)
        self.cold_mode: str | None = None        # the mode of cold stretches, once chosen
        self.cold_times: dict[str, list[float]] = {}   # seconds of the calls in cold stretches, per mode
        self.cold_medians: dict[str, float] = {}  # the last choice's medians
        self._cold_for: str | None = None        # the mode the cold choice was made beside
        self._cold_counts: dict[str, int] = {}   # cold stretches per mode in the choosing
        self._cold_stretches = 0                 # cold stretches since the choice
        self._fn = compiled.fn
        self.source = compiled.source
        self.num_ops = num_ops
        self.upgrades = list(upgrades)
        self._timed: dict[str, float] | None = None    # time_upgrades' tally
        self.calls = 0
        # made to be called again and again (Session.make_callable): the backend's policy may
        # build its kernels in the first call
        self.repeated = False
        self._tier_up = tier_up if self.upgrades else None
        if self.upgrades and tier_up is None:
            self.build_upgrades()

    def install(self, name: str, kernel: Callable[..., Any]) -> None:
        """Swap the kernel bound to ``name`` (a plan reads its kernels at each call, so a
        plan running in another thread picks it up at its next node)."""
        self._fn.__globals__[name] = kernel
        self._installed += 1

    def _runner(self) -> tuple[SideRunner, tuple[str, float, bool] | None]:
        """This call's runner, and (its mode, start time, whether in a cold stretch) while the
        modes are being tried (and in cold stretches: :meth:`_cold`).

        A call runs its side items on the kernel thread while it goes on ("side"), or splits
        its large kernels over the threads ("split"), or keeps to one thread ("single": no
        split, BLAS on one thread). Which is fastest depends on the graph and on the machine
        now: the threads take turns with the GIL, a split has its hand-offs, two vCPUs may
        share a physical core, another process may take one. So the plan tries: once its
        compiled kernels are in (or after MODE_WARMUP calls) and MODE_SETTLE more calls have
        run (the first calls after the kernels come in are up to 30% slower, whatever the
        mode), its calls go round the modes and the mode of lowest median stays (one thread
        unless another mode is MODE_MARGIN faster); after MODE_RETRY calls it tries again. A
        trial runs each mode in blocks of MODE_BLOCK calls, the first of a block untimed (it
        pays for the switch: sleeping threads woken, BLAS's thread count changed), MODE_ROUNDS
        rounds in turned orders; a mode whose best call takes MODE_GIVE_UP times another's
        best runs no more calls in it. A decision within the margin runs the schedule again
        (MODE_MORE times at most), the times pooled."""
        self._runs += 1
        if self._fixed:
            return self._makers[self.mode](), None
        if self._trial_from is None:
            if self._installed < len(self.upgrades) and self._runs <= MODE_WARMUP:
                return self._makers[self.mode](), None
            self._trial_from = self._runs + MODE_SETTLE
        if self._runs < self._trial_from:
            cold = self._cold()
            if cold is not None:
                return self._makers[cold](), (cold, time.perf_counter(), True)
            return self._makers[self.mode](), None
        self._stretch = None
        if not self._schedule:
            modes = list(self._makers)
            self._schedule = [(mode, i > 0) for r in range(MODE_ROUNDS)
                              for mode in modes[r % len(modes):] + modes[:r % len(modes)] for i in range(MODE_BLOCK)]
        try:
            trying, timed = self._schedule.pop(0)
        except IndexError:     # another thread's call took the trial's last one
            return self._makers[self.mode](), None
        return self._makers[trying](), ((trying, time.perf_counter(), False) if timed else None)

    def _cold(self) -> str | None:
        """The mode of this call when it is in a cold stretch, else None.

        After the plan sat idle (IDLE_GAP, 0.3 s, or more since its last call returned) its calls run
        slower for a while, and more threads lose more: a worker, or the core it runs on,
        comes back slowly (a 2-vCPU VM, 0.5 s idle: the slim ResNet's next three calls 17.2 /
        18.3 / 13.9 ms split over the threads, 10.9 / 9.6 / 9.5 ms on one thread; back to back
        8.3 and 9.0 ms). A call starting after such a gap begins a cold stretch: it and the
        calls starting within COLD_STRETCH of it run in one mode. Which mode is measured, not
        assumed (a long elementwise chain still gains from a split after a gap): stretches go
        in turn to one thread and to the mode the trial chose, COLD_SAMPLES each, and one
        thread then runs the cold stretches if its median per call is COLD_MARGIN lower, else
        the trial's mode does (chosen again after
        COLD_RETRY stretches, or when the trial chooses another mode). One thread is not
        tried when the trial found it more than COLD_TRY_WITHIN times slower than its mode."""
        if not self.trials or self.mode == "single" or "single" not in self._makers or self._single_hopeless():
            self._stretch = None
            return None
        now = time.perf_counter()
        if self._returned is not None and now - self._returned >= IDLE_GAP:
            self._stretch = (now, self._cold_pick())
        elif self._stretch is not None and now - self._stretch[0] >= COLD_STRETCH:
            self._stretch = None
        return None if self._stretch is None else self._stretch[1]

    def _single_hopeless(self) -> bool:
        """Whether one thread was more than COLD_TRY_WITHIN times slower than the trial's mode in
        the last trial, so that cold stretches do not try it."""
        medians = self.mode_medians
        single, chosen = medians.get("single"), medians.get(self.mode)
        return single is None or chosen is None or single > COLD_TRY_WITHIN * chosen

    def _cold_pick(self) -> str:
        """The mode of a new cold stretch."""
        if self._cold_for != self.mode or (self.cold_mode is not None and self._cold_stretches >= COLD_RETRY):
            # the trial chose another mode, or the choice is due again
            self._cold_for, self.cold_mode, self.cold_times, self._cold_counts = self.mode, None, {}, {}
        elif self.cold_mode is not None:
            self._cold_stretches += 1
            return self.cold_mode
        candidates = ("single", self.mode)
        counts, times = self._cold_counts, self.cold_times
        if all(counts.get(m, 0) >= COLD_SAMPLES and times.get(m) for m in candidates):
            medians = self.cold_medians = {m: statistics.median(times[m]) for m in candidates}
            # the trial's mode stays unless one thread is COLD_MARGIN faster: a few calls after
            # idle, beside other processes' threads, differ by more than that by chance
            self.cold_mode = "single" if medians["single"] < (1 - COLD_MARGIN) * medians[self.mode] else self.mode
            self._cold_stretches = 1
            return self.cold_mode
        mode = min(candidates, key=lambda m: counts.get(m, 0))
        counts[mode] = counts.get(mode, 0) + 1
        return mode

    def _tried(self, mode: str, start: float, cold: bool) -> None:
        if cold:
            self.cold_times.setdefault(mode, []).append(time.perf_counter() - start)
            return
        times = self.mode_times
        times[mode].append(time.perf_counter() - start)
        best = {m: min(t) for m, t in times.items() if t}
        slow = {m for m in best if best[m] > MODE_GIVE_UP * min(best.values())}
        if slow:
            # Even their best call is far slower than another mode's: the rest of their calls in
            # this trial are dropped (under a neighbour's load a split call can take 20x longer).
            self._schedule = [(m, timed) for m, timed in self._schedule if m not in slow]
        if not self._schedule and all(times.values()):
            medians = self.mode_medians = {m: statistics.median(t) for m, t in times.items()}
            fastest = min(medians, key=medians.__getitem__)
            # More threads must earn their place: a split kernel waits for each of its threads,
            # and a thread whose core another process takes keeps it waiting for tens of ms.
            if "single" in medians and medians["single"] * (1 - MODE_MARGIN) <= medians[fastest]:
                if fastest != "single" and self._extended < MODE_MORE:
                    # Within the margin: the machine's noise between a few calls can be as large
                    # (2 s calls at 224x224: 8% one run, 22% the next). The trial goes on, the
                    # next round's times pooled with these, before one thread is chosen.
                    self._extended += 1
                    return
                fastest = "single"
            self.mode = fastest
            self.trials += 1
            self._extended = 0
            self._trial_from = self._runs + MODE_RETRY
            for t in times.values():
                t.clear()

    def time_upgrades(self) -> None:
        """From now until :meth:`upgrade_times`, each upgrade's bound kernel adds the seconds of
        its calls to a tally (a wrapper in its place: about a microsecond a call)."""
        tally: dict[str, float] = {}
        self._timed = tally
        bound = self._fn.__globals__
        for name, _ in self.upgrades:
            bound[name] = _Timed(bound[name], name, tally)

    def upgrade_times(self) -> dict[str, float]:
        """The seconds each upgrade's kernel took since :meth:`time_upgrades` (0 for those not
        called), its wrappers taken away (a kernel installed meanwhile stays)."""
        tally = self._timed
        self._timed = None
        if tally is None:
            return {}
        bound = self._fn.__globals__
        for name, _ in self.upgrades:
            kernel = bound[name]
            if isinstance(kernel, _Timed) and kernel.tally is tally:
                bound[name] = kernel.kernel
        return {name: tally.get(name, 0.0) for name, _ in self.upgrades}

    def build_upgrades(self) -> None:
        """Build every upgrade now, in this thread (a failing build keeps the initial kernel)."""
        for name, tiered in self.upgrades:
            self.build_upgrade(name, tiered)

    def build_upgrade(self, name: str, tiered: Tiered) -> bool:
        """Build the upgrade ``name`` now, in this thread, and install it; False when its build
        failed (the initial kernel stays)."""
        built = build_quietly(tiered)
        if built is not None:
            self.install(name, built)
        return built is not None

    def __call__(self, feed_values: Sequence[Any]) -> tuple[Any, ...]:
        if self._tier_up is not None and not self.calls:
            self._tier_up(self, 0)
        runner, trial = self._runner()
        try:
            values = self._run(feed_values, runner)
            if trial is not None:
                self._tried(*trial)
            if self._tier_up is not None:
                self._count_call()
            return values
        except BaseException as exc:
            runner.cancel()      # side tasks still waiting are dropped; the running one is waited for
            mapped = self._mapped(exc)
            if mapped is None:
                raise
            raise mapped from exc
        finally:
            runner.close()
            self._returned = time.perf_counter()

    def call_in_place(self, feed_values: Sequence[Any]) -> tuple[Any, ...]:
        """A call that runs every item where it is, in this thread's turn (no side tasks, no
        trial of the modes): for a plan called many times inside one kernel -- a loop's
        condition and body, each iteration -- where a call's set-up would cost more than a
        small body."""
        if self._tier_up is not None and not self.calls:
            self._tier_up(self, 0)
        try:
            if _CALLING.inside:    # as _run, one call less per iteration
                values = self._fn(feed_values, IN_PLACE) if self._takes_side else self._fn(feed_values)
            else:
                values = self._run(feed_values, IN_PLACE)
            if self._tier_up is not None:
                self._count_call()
            return values  # type: ignore[no-any-return]
        except BaseException as exc:
            mapped = self._mapped(exc)
            if mapped is None:
                raise
            raise mapped from exc

    def _count_call(self) -> None:
        """Count a call of a plan with kernels to build, as it returns, and ask the backend's
        policy whether to build them now (their inputs as the call gave them are known)."""
        self.calls += 1
        tier_up = self._tier_up
        if tier_up is not None and tier_up(self, self.calls):
            self._tier_up = None

    def _run(self, feed_values: Sequence[Any], runner: SideRunner) -> tuple[Any, ...]:
        if _CALLING.inside:
            # A kernel of another plan's call in this thread (a library function, a loop's body,
            # each iteration): that call's errstate holds, and setting it again would cost more
            # than a small body.
            return self._fn(feed_values, runner) if self._takes_side else self._fn(feed_values)  # type: ignore[no-any-return]
        with np.errstate(all="ignore"), self._memory():
            _CALLING.inside = True
            try:
                return self._fn(feed_values, runner) if self._takes_side else self._fn(feed_values)  # type: ignore[no-any-return]
            finally:
                _CALLING.inside = False

    def _mapped(self, exc: BaseException) -> ExecutionError | None:
        """The ExecutionError naming the node whose line raised ``exc``; None when ``exc`` is to
        propagate as it is (gradreg's own errors, KeyboardInterrupt, an error outside the nodes)."""
        if isinstance(exc, GradregError) or not isinstance(exc, Exception):
            return None
        op = self._compiled.failing_op(exc)
        if op is None:
            return None
        return ExecutionError(f"{describe_node(op.name, op.type)}: {type(exc).__name__}: {exc}", op.name, op.type)


class _Calling(threading.local):
    inside = False      # whether this thread is running a plan's call (its errstate set)


_CALLING = _Calling()


# A plan tries its modes (Plan._runner) once its compiled kernels are in (or after MODE_WARMUP
# calls) and MODE_SETTLE more calls have run, and again every MODE_RETRY calls: MODE_ROUNDS rounds
# of a block of MODE_BLOCK calls per mode, all but the first of a block timed
# (GRADREG_SIDE_TASKS=on|off decides instead).
MODE_BLOCK = 4
MODE_ROUNDS = 2
MODE_WARMUP = 30
MODE_SETTLE = 10
MODE_RETRY = 300
# ... and keeps to one thread unless another mode's median is at least this much lower. A mode
# whose best call in the trial is MODE_GIVE_UP times another's best runs no more calls in it.
MODE_MARGIN = 0.1
MODE_GIVE_UP = 2.0
# When another mode is ahead of one thread by less than MODE_MARGIN, the trial goes on for up
# to MODE_MORE more of its schedules, the times pooled, before it decides.
MODE_MORE = 1
# A call starting IDLE_GAP seconds or more after the plan's last call returned begins a cold
# stretch, the calls starting within COLD_STRETCH seconds of it; their mode is chosen apart
# (Plan._cold): COLD_SAMPLES stretches on one thread and as many in the trial's mode, then the
# faster, chosen again after COLD_RETRY stretches. (At 0.1 s, the idle between a benchmark's
# back-to-back turns, while other processes kept the cores busy, counted too: there one thread
# won the MLP's cold stretches, and then ran the calls after 0.5 s idle, where a split was
# 1.7x faster.)
IDLE_GAP = 0.3
COLD_STRETCH = 0.1
COLD_SAMPLES = 3
COLD_RETRY = 100
# One thread runs the cold stretches only if its median is this much below the trial's mode's.
# Nine calls a mode after idle are noisy: at 0.1 the MLP (2026-12-01, run 2 of three) chose one
# thread, 10.1 ms a call after 0.5 s idle against 7.8 for a split, and the RNN (2026-12-02, runs
# 2 and 3) 2.43-2.60 ms against 2.05 for a split (NumPy by hand 2.03-2.08).
COLD_MARGIN = 0.2
# Cold stretches try one thread only if it was within this factor of the trial's mode in the
# plan's last trial (a mode the trial gave up on, MODE_GIVE_UP, is beyond it). The choice costs
# its stretches on one thread: the MLP's (one thread 4.82 ms a call in its trial, a split 2.63)
# made nine of a protocol's 36 calls after 0.5 s idle at ~4.8 ms, its median 3.05 ms against
# 2.60 for NumPy by hand; the slim ResNet, which lost 40% to a split after idle on a 2-vCPU VM
# (17 against 10 ms), was 1.08x behind warm (9.0 against 8.3 ms) and is still tried.
COLD_TRY_WITHIN = 1.5


def longest_trial(modes: int = 3) -> int:
    """The most calls one trial of ``modes`` modes runs: a schedule of MODE_ROUNDS rounds of
    a MODE_BLOCK block per mode, run again MODE_MORE times when its decision is close."""
    return (1 + MODE_MORE) * modes * MODE_ROUNDS * MODE_BLOCK


IN_PLACE = InPlace()


def _in_place() -> SideRunner:
    return IN_PLACE


class SideRunner(Protocol):
    """A plan call's runner (gradreg.backends.call_modes.SideTasks, SingleThreaded): ``submit``
    runs a side item's ``fn(*args)`` now or hands it off, ``take`` gives its value, ``cancel``
    drops the rest when the call fails, ``close`` ends the call (failed or not)."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def take(self, value: Any) -> Any: ...

    def cancel(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class CallModes:
    """What a backend offers its plans' calls besides splitting kernels over its threads
    (Plan._runner): ``side`` makes a call's side-task runner, ``single`` a runner that keeps a
    call on one thread; ``memory`` the context a call runs in (the backend's allocator for the
    call's arrays, gradreg.backends.native.allocator), entered by a thread's outermost call."""
    side: Callable[[], SideRunner] | None = None
    single: Callable[[], SideRunner] | None = None
    memory: Callable[[], AbstractContextManager[Any]] | None = None


class _Timed:
    """A kernel whose calls add their seconds to ``tally[name]`` (Plan.time_upgrades)."""
    __slots__ = ("kernel", "name", "tally")

    def __init__(self, kernel: Callable[..., Any], name: str, tally: dict[str, float]):
        self.kernel, self.name, self.tally = kernel, name, tally

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.kernel(*args, **kwargs)
        finally:
            self.tally[self.name] = self.tally.get(self.name, 0.0) + time.perf_counter() - start


def build_quietly(tiered: Tiered) -> Callable[..., Any] | None:
    """``tiered.build()``, or None with a warning when it fails (the initial kernel then stays)."""
    try:
        return tiered.build()
    except Exception as exc:  # a compiler's failure must not stop a plan that runs without it
        warnings.warn(f"gradreg: could not build the faster kernel {tiered.name or tiered.initial!r}; "
                      f"keeping the NumPy one ({type(exc).__name__}: {exc})", RuntimeWarning, stacklevel=2)
        return None


class PlanCompiler:
    """The executor of the plan-compiling backends (gradreg.runtime.executor.Executor): numpy
    (kernel tables ("numpy",), no fusion) and numba (("numba", "numpy") and its fuser)."""

    def __init__(self, context: KernelContext, kernel_tables: Sequence[str] = ("numpy",), fuse: Fuser | None = None,
                 check_outputs: bool = False, tier_up: TierUp | None = None,
                 modes: CallModes | None = None):
        self.context = context
        self.modes = modes
        self.kernel_tables = tuple(kernel_tables)
        self.fuse = fuse
        self.check_outputs = check_outputs
        self.tier_up = tier_up

    def compile(self, fetches: Sequence[Tensor | Operation], feeds: Sequence[Tensor]) -> Plan:
        return compile_plan(fetches, feeds, self.context, self.kernel_tables, self.fuse, self.check_outputs,
                            self.tier_up, self.modes)


def compile_plan(fetches: Sequence[Tensor | Operation], feeds: Sequence[Tensor], ctx: KernelContext,
                 kernel_tables: Sequence[str] = ("numpy",), fuse: Fuser | None = None,
                 check_outputs: bool = False, tier_up: TierUp | None = None,
                 modes: CallModes | None = None) -> Plan:
    """Compile a plan computing ``fetches`` (tensor values; None for operations) from ``feeds``,
    with kernels from ``kernel_tables`` (tried in order) and ``fuse`` grouping elementwise ops;
    ``tier_up`` decides when the plan's Tiered kernels are built (see Plan);
    ``modes`` says how its calls may use the cores (side tasks: see side_candidates)."""
    fed = set(feeds)
    fetch_ops = []
    for f in fetches:
        if isinstance(f, Tensor):
            if f not in fed:
                fetch_ops.append(f.op)
        else:
            fetch_ops.append(f)
    ops = needed_ops(fetch_ops, fed)
    emitter = Emitter(ctx, kernel_tables, fuse, check_outputs, fed)
    body = Block()
    for i, t in enumerate(feeds):
        emitter.names[t] = f"f{i}"
        body.add(f"f{i} = _feeds[{i}]", defs=[f"f{i}"])
    if any(op.type in V1_CONTROL_FLOW_OPS for op in ops):
        emit_control_flow(emitter, body, ops, fetches)
    else:
        # Ordered with everything, run without the pure ops that only order others.
        skipped = ordering_only(fetch_ops, fed)
        constants: dict[Tensor, Any] = {}
        order = [op for op in topological_order(ops, "plan") if op not in skipped and not emitter.fold(op, constants)]
        keep = {f for f in fetches if isinstance(f, Tensor)}
        order = emitter.absorb(order, keep)
        if fuse is not None:
            # Chains of elementwise ops become one compiled kernel (the numba backend's fuser).
            items = fuse(order, fed, keep, ctx)
        else:
            items = list(order)
        if modes is not None and modes.side is not None:
            emitter.side_ops = side_candidates(items)
            items = side_first(items, emitter.side_ops)
        for item in items:
            if isinstance(item, Operation):
                emitter.emit_op(body, item)
            else:
                emitter.emit_fused(body, item)
    return finish_plan(emitter, body, fetches, len(ops), tier_up, modes)


# A side chain is at most this many items long (from the item to the fetch it ends in).
SIDE_CHAIN = 4


def side_candidates(items: Sequence[Any]) -> set[Any]:
    """The plan's items (nodes, fused groups) that may run as side tasks, beside the others:
    pure ones with one numeric output, on a short chain (at most SIDE_CHAIN items) of such
    items that nothing else in the plan reads and that ends in a fetch. In a training step
    these are the weight gradients and the reductions into them (a CNN's
    Conv2DBackpropFilter, a third of the step; the Sums of a frozen batch norm's parameter
    gradients), which nothing waits for while the long chain of input gradients goes on. (A
    plan's last few items are such a chain too: the worker and the calling thread then take
    them in turn.)"""
    readers: dict[Tensor, list[Any]] = {}
    for item in items:
        for t in item.inputs:
            readers.setdefault(t, []).append(item)
    height: dict[Any, int] = {}      # the longest chain of readers after an item
    found: set[Any] = set()
    for item in reversed(items):
        after = [r for t in item.outputs for r in readers.get(t, ())]
        height[item] = 1 + max((height[r] for r in after), default=-1)
        if len(item.outputs) != 1 or height[item] >= SIDE_CHAIN or not all(r in found for r in after):
            continue
        if isinstance(item, Operation):
            definition = item.definition
            if definition is None or definition.stateful or item.control_inputs:
                continue
        if all(_numeric(t) for t in (*item.inputs, *item.outputs)):
            found.add(item)
    return found


def side_first(items: Sequence[Any], side: set[Any]) -> list[Any]:
    """``items`` with each side item moved up to just after the producers of its inputs: the
    worker gets it as soon as it can run, and its inputs (a gradient the sequential order would
    reduce only at the end, for a frozen batch norm's parameters) are released that much
    sooner. The others keep their order (no other item reads a side item)."""
    others: list[Any] = []
    placed: dict[int, list[Any]] = {}      # index in ``others`` (-1: before them) -> side items after it
    slot: dict[Tensor, int] = {}           # tensor -> the index after which it is available
    for item in items:
        if item in side:
            at = max((slot.get(t, -1) for t in item.inputs), default=-1)
            placed.setdefault(at, []).append(item)
        else:
            others.append(item)
            at = len(others) - 1
        for t in item.outputs:
            slot[t] = at
    order = list(placed.get(-1, ()))
    for i, item in enumerate(others):
        order.append(item)
        order.extend(placed.get(i, ()))
    return order


def _output_checker(op: Operation) -> Callable[[Sequence[Any]], None]:
    return _tensors_checker(op, op.outputs)


def _tensors_checker(op: Any, tensors: Sequence[Tensor]) -> Callable[[Sequence[Any]], None]:
    """A check that values have the dtypes and static shapes the graph gives ``tensors``
    (``op`` names the node, or the fused group, in the error)."""
    def check(values: Sequence[Any]) -> None:
        for t, v in zip(tensors, values):
            if v is DEAD:
                continue
            if not result_dtype_ok(v, t.dtype):
                raise ExecutionError(f"{describe_node(op.name, op.type)}: kernel returned "
                                     f"{np.asarray(v).dtype} for output {t.value_index}, "
                                     f"graph says {t.known_dtype.name}", op.name, op.type)
            if t.dtype is not None and t.dtype.kind not in "rv" and not t.dtype.is_ref \
                    and not t.shape.is_compatible_with(np.shape(v)):
                raise ExecutionError(f"{describe_node(op.name, op.type)}: kernel returned shape "
                                     f"{list(np.shape(v))} for output {t.value_index}, graph says {t.shape}",
                                     op.name, op.type)
    return check


def finish_plan(emitter: Emitter, body: Block, fetches: Sequence[Tensor | Operation], num_ops: int,
                tier_up: TierUp | None = None, modes: CallModes | None = None) -> Plan:
    """Add the return statement, release each variable after its last use, compile."""
    for var, op in emitter.side_values:   # each side task's value (its error raised here, naming the node)
        body.add(f"{var} = _side.take({var})", defs=[var], uses=[var], op=op)
    returned = [emitter.names[f] if isinstance(f, Tensor) else "None" for f in fetches]
    # A fetched ref (a variable) gives its value; a fetched constant array a copy (the plan keeps its own).
    values = [f"{name}.read()" if isinstance(f, Tensor) and f.dtype is not None and f.dtype.is_ref
              else f"{name}.copy()" if isinstance(emitter.globals.get(name), np.ndarray) else name
              for f, name in zip(fetches, returned)]
    body.add(f"return ({', '.join(values)}{',' if values else ''})", uses=emitter.local_uses(returned))
    insert_releases(body, keep=set(returned))
    arguments = "_feeds, _side" if emitter.side_values else "_feeds"
    return Plan(CompiledFunction("_plan", arguments, body, emitter.globals), num_ops, emitter.upgrades, tier_up,
                modes, takes_side=bool(emitter.side_values))
