"""Fused groups and their kernels: several elementwise ops run as one compiled loop.

A group's kernel is Tiered (gradreg.registry.kernels): its ops' NumPy kernels, one by one,
until the compiled loop is built (gradreg.backends.numba.jit says when). The built kernel:
when every value of a group has a fully known static shape (the common case: a layer's
activations), the loop nests one level a dimension and the plan calls a wrapper that only
checks the inputs (their shapes are constants of the wrapper) before calling numba;
anything unexpected takes the general path, which compiles a variant per pattern of scalar
inputs (:class:`_Variant`) -- in the background too, the NumPy kernels serving meanwhile --
and falls back to the NumPy kernels when the non-scalar inputs' shapes differ, a dtype is
not the graph's, or every input is a scalar.
"""
from __future__ import annotations

import functools
import math
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import CodeType
from typing import Any

import numpy as np

from gradreg.backends import native, threads, workers
from gradreg.backends.native import dsl as native_dsl
from gradreg.backends.native import fused as native_fused
from gradreg.backends.numba import jit
from gradreg.backends.numba.cache import load_kernel, precompile
from gradreg.backends.numba.codegen import (
    FULL,
    ROW,
    SCALAR,
    generate_source,
    generate_static_source,
    guarded,
    row_dims,
    static_states,
)
from gradreg.backends.numba.description import Elementwise
from gradreg.errors import ExecutionError, GradregError, describe_node
from gradreg.model import dtypes
from gradreg.model.graph import Operation, Tensor
from gradreg.registry.kernels import Tiered


@dataclass(frozen=True)
class SumAfter:
    """A Sum over the leading axes of a group's value, taken into the group's loop
    (grouping._absorb_sums): the loop adds up each row of ``row`` elements instead of writing
    the value, which only the Sum read. ``tensor``: the Sum's output; ``axes``/``keep``: its
    reduction axes and keep_dims."""
    tensor: Tensor
    axes: tuple[int, ...]
    keep: bool
    row: int


class FusedGroup:
    """Elementwise ops run as one kernel. ``inputs``: the outside tensors they read, in order;
    ``outputs``: their tensors used outside the group or fetched; ``kernel(*inputs)``
    returns the outputs' values (bare when one); ``name``/``type`` name it in errors.
    ``sums``: values of the group that only a Sum over leading axes reads, and that Sum
    (:class:`SumAfter`): ``outputs`` holds the Sum's output where ``loop_outputs``, the
    values the loop computes, holds the summed value."""

    type = "Fused"

    def __init__(self, ops: Sequence[Operation], descriptions: Sequence[Elementwise], keep: set[Tensor],
                 plan_ops: Iterable[Operation], sums: dict[Tensor, SumAfter] | None = None):
        self.ops = list(ops)
        self.descriptions = list(descriptions)
        self.sums = dict(sums or {})
        members = set(self.ops)
        inputs: dict[Tensor, None] = {}
        for op in self.ops:
            for t in op.inputs:
                if t.op not in members:
                    inputs[t] = None
        self.inputs = list(inputs)
        plan_ops = set(plan_ops)
        self.loop_outputs = [op.outputs[0] for op in self.ops
                             if op.outputs[0] in keep
                             or any(c in plan_ops and c not in members for c in op.outputs[0].consumers_view())]
        if not self.loop_outputs:   # only a control input of something: still return a value
            self.loop_outputs = [self.ops[-1].outputs[0]]
        self.outputs = [self.sums[t].tensor if t in self.sums else t for t in self.loop_outputs]
        if len(self.ops) == 1 and not self.sums:
            self.name, self.type = self.ops[0].name, self.ops[0].type
        else:
            shown = "+".join(op.name for op in self.ops[:3])
            self.name = f"fused:{shown}" + (f"+...({len(self.ops)} ops)" if len(self.ops) > 3 else "")
        general = _GroupKernel(self)
        static = self.static = static_states(self)    # None: no static loop

        def build() -> Callable[..., Any]:
            return general if static is None else _static_kernel(self, static, general)
        elements = self.loop_outputs[0].shape.num_elements() or 0
        # the loop's key, worked out by the builder's policy as the plan's first call returns
        # (jit.tier_up: ~10 ms for MobileNetV2-64's 149 groups, kept off making the plan and
        # off the second call)
        loop_key = None if static is None else functools.partial(native_fused.static_key, self, static)
        self.kernel = Tiered(general.fallback_call, build, self.name,
                             weight=elements * sum(d.cost for d in self.descriptions), family=loop_key)

    def __repr__(self) -> str:
        return f"<FusedGroup {self.name}: {len(self.ops)} ops>"


def _input_states(arrays: list[np.ndarray], shape: tuple[int, ...]) -> tuple[list[int], Any, bool] | None:
    """How each input varies over the group's ``shape`` (SCALAR, ROW or FULL), the shape of
    the row inputs (the longest, when they differ in leading ones) and whether they differ;
    None when an input is none of those (the NumPy kernels then decide)."""
    states = []
    row_shape = None
    mixed = False
    for a in arrays:
        if a.ndim == 0:
            states.append(SCALAR)
        elif a.shape == shape:
            states.append(FULL)
        elif a.ndim <= len(shape) and shape[len(shape) - len(row := row_dims(a.shape)):] == row \
                and (row_shape is None or row == row_dims(row_shape)):
            # a trailing row (after any leading ones), the same row for every row input
            if row_shape is None:
                row_shape = a.shape
            elif a.shape != row_shape:
                mixed = True
                row_shape = max(row_shape, a.shape, key=len)
            states.append(ROW)
        else:
            return None
    return states, row_shape, mixed


class _GroupKernel:
    """Runs a group: picks (compiling on first use) the loop for the inputs' scalar pattern,
    or runs the ops' NumPy kernels one by one."""

    def __init__(self, group: FusedGroup):
        self.group = group
        self.in_dtypes = [t.known_dtype.storage for t in group.inputs]
        self.out_dtypes = [t.known_dtype.storage for t in group.loop_outputs]
        self.variants: dict[tuple[int, ...], Any] = {}   # input states -> _Variant (None: being built)
        self.lock = threading.Lock()
        self.last: tuple[Any, ...] | None = None
        # until a call shows them, the inputs made by Const nodes are taken for read-only ones
        self.readonly = tuple(t.op.type == "Const" for t in group.inputs)

    def __call__(self, *args: Any) -> Any:
        # Fast path: the same input shapes and types as the previous call (a plan runs its
        # kernels with the same shapes again and again).
        last = self.last
        if last is not None:
            shapes, loop, n, m, out_shapes = last
            for a, shape, dtype in zip(args, shapes, self.in_dtypes):
                if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
                    break
            else:
                outs = [np.empty(shape, dtype) for shape, dtype in zip(out_shapes, self.out_dtypes)]
                loop(n, m, *[a.reshape(-1) for a in args], *[o.reshape(-1) for o in outs])
                return outs[0] if len(outs) == 1 else tuple(outs)
        return self.call(args)

    def call(self, args: Sequence[Any]) -> Any:
        if self.group.sums:
            return self.fallback(args)      # (only the static loop has sums)
        arrays = []
        shape = ()
        for a, dtype in zip(args, self.in_dtypes):
            a = np.asarray(a)
            if a.dtype != dtype:
                return self.fallback(args)
            if a.ndim > len(shape) or (a.ndim == len(shape) and a.size > math.prod(shape)):
                shape = a.shape     # the largest: a row may have as many dims, leading ones
            arrays.append(a)
        if not shape:
            return self.fallback(args)
        classified = _input_states(arrays, shape)
        if classified is None:
            return self.fallback(args)
        states, row_shape, mixed = classified
        flat = [a.ravel() for a in arrays]
        variant = self.variant(tuple(states), tuple(not a.flags.writeable for a in flat))
        if variant is None or variant.loop is None or (mixed and ROW in variant.output_states):
            # (a row output of rows shaped (C,) and (1, C): its shape is NumPy's to say)
            return self.fallback(args)
        n = math.prod(shape)
        m = math.prod(row_shape) if row_shape is not None else n
        shapes = {SCALAR: (), ROW: row_shape, FULL: shape}
        out_shapes = [shapes[state] for state in variant.output_states]
        outs = [np.empty(s, dtype) for s, dtype in zip(out_shapes, self.out_dtypes)]
        variant.loop(n, m, *flat, *[o.reshape(-1) for o in outs])
        if all(type(a) is np.ndarray and a.flags.c_contiguous for a in args):
            self.last = (tuple(a.shape for a in arrays), variant.loop, n, m, out_shapes)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def variant(self, key: tuple[int, ...], readonly: tuple[bool, ...] = ()) -> _Variant | None:
        """The variant for input states ``key``: built now (GRADREG_JIT=eager), else queued
        to the background builder (None until it is ready)."""
        if key in self.variants:
            return self.variants[key]
        with self.lock:
            if key in self.variants:
                return self.variants[key]
            if jit.mode() == "eager":
                self.variants[key] = _Variant.build(self.group, key, readonly)
                return self.variants[key]
            self.variants[key] = None
        group = self.group

        def build() -> Any:
            return _Variant.build(group, key, readonly)

        def install(variant: Any) -> None:
            self.variants[key] = variant
        jit.submit(Tiered(self.fallback_call, build, group.name), install)
        return None

    def fallback_call(self, *args: Any) -> Any:
        # Which inputs are read-only (a plan's constants): the compiled loops are built for that
        self.readonly = tuple(type(a) is np.ndarray and not a.flags.writeable for a in args)
        return self.fallback(args)

    def fallback(self, args: Sequence[Any]) -> Any:
        """The ops' NumPy kernels, one by one; an error names the group and the op (gradreg's
        own errors, which name the op, pass as they are)."""
        group = self.group
        values = dict(zip(group.inputs, args))
        for op, description in zip(group.ops, group.descriptions):
            try:
                values[op.outputs[0]] = description.fallback(*[values[t] for t in op.inputs])
            except GradregError:   # already names the node (element limit, ...)
                raise
            except Exception as exc:
                raise ExecutionError(f"{describe_node(group.name, group.type)}: in "
                                     f"{describe_node(op.name, op.type)}: {type(exc).__name__}: {exc}",
                                     group.name, group.type) from exc
        for t, after in group.sums.items():
            values[after.tensor] = _leading_sum(values[t], after)
        results = [values[t] for t in group.outputs]
        return results[0] if len(results) == 1 else tuple(results)


# The NumPy kernels' Sum of a group's value (SumAfter) over this many rows or more is a product
# with a row of ones (workers.column_sums: BLAS; float32 sums either way, their order differs).
BLAS_SUM_ROWS = 64
_BLAS_SUMMED = frozenset((np.dtype(np.float32), np.dtype(np.float64)))


def _leading_sum(value: Any, after: SumAfter) -> Any:
    """``np.sum(value, after.axes, keepdims=after.keep)`` (leading axes), by BLAS where it pays."""
    k = len(after.axes)
    if type(value) is np.ndarray and value.dtype in _BLAS_SUMMED and value.ndim > k \
            and value.flags.c_contiguous and after.axes == tuple(range(k)):
        rows = math.prod(value.shape[:k])
        if rows >= BLAS_SUM_ROWS:
            total = workers.column_sums(value.reshape(rows, -1))
            return total.reshape(((1,) * k if after.keep else ()) + value.shape[k:])
    return np.sum(value, axis=after.axes, keepdims=after.keep)


# A fused loop is split over threads (gradreg.backends.threads) from this many element-ops a
# thread on (elements times ops: a thread's hand-off costs about what 256k of them take).
WORK_PER_THREAD = 1 << 18
PIECES_PER_THREAD = 4
# From this many element-ops (milliseconds of work) a split loop's workers linger after it
# (workers.LONG_LINGER_SECONDS): such loops come again soon, and a worker that slept between
# calls came back slow. Shorter ones (a CNN's layers) keep the pool's short spin.
LONG_LOOP_WORK = 1 << 23


def _static_kernel(group: FusedGroup, state: dict[Tensor, int], general: _GroupKernel) -> Callable[..., Any]:
    """The group's kernel for static shapes, compiled now: a check of the inputs (a scalar
    input must be a NumPy scalar of its type, an array of its shape and type, copied when
    not C-contiguous), the outputs allocated, then the compiled loop -- its outermost range
    split over threads when the group is large; ``general`` for anything else."""
    params = [f"a{k}" for k in range(len(group.inputs))]
    arrays = [f"a{k}" for k, t in enumerate(group.inputs) if state[t] != SCALAR]
    checks = " and ".join(f"type(a{k}) is d{k}" if state[t] == SCALAR else
                          f"type(a{k}) is ndarray and a{k}.shape == s{k} and a{k}.dtype == d{k}"
                          for k, t in enumerate(group.inputs))
    # A strided view (a Slice's output) is copied: cheaper than the general path, and the
    # loop is compiled for C-contiguous arrays only.
    contiguous = " and ".join(f"{a}.flags.c_contiguous" for a in arrays) or "True"
    copies = "".join(f"            {a} = ascontiguousarray({a})\n" for a in arrays) or "            pass\n"
    full: tuple[int, ...] = tuple(group.loop_outputs[0].shape.as_tuple())
    outs = [f"o{k}" for k in range(len(group.loop_outputs))]
    loop = _native("static_loop", group, state)
    # a summed value's loop output is its rows' sums (SumAfter), reshaped to the Sum's shape;
    # numba's loop (no native one here) writes the value, summed after
    summed = {k: group.sums[t] for k, t in enumerate(group.loop_outputs) if t in group.sums}
    in_loop = summed if loop is not None else {}
    donors = _donors(group, state, full)
    allocate = "".join(f"        o{k} = empty(({summed[k].row},), e{k})\n" if k in in_loop else
                       f"        o{k} = a{donors[k]} if {_sole_owner(f'a{donors[k]}')} else empty(full, e{k})\n"
                       if k in donors else f"        o{k} = empty(full, e{k})\n" for k in range(len(outs)))
    results = [(f"o{k}.reshape(r{k})" if k in in_loop else f"add_rows(o{k}, axis={summed[k].axes}, "
                f"keepdims={summed[k].keep})") if k in summed else f"o{k}" for k in range(len(outs))]
    work = math.prod(full) * len(group.ops)
    extents = [str(n) for n in full[1:]]    # the loop's inner extents (arguments: see the codegen)
    if work < 2 * WORK_PER_THREAD:
        call = f"fused(0, {', '.join([str(full[0])] + extents + params + outs)})"
    elif in_loop:
        call = (f"launch_sums(fused, {full[0]}, {work}, ({', '.join(extents + params)},), "
                f"({', '.join(outs)},), {tuple(in_loop)})")
    else:
        call = f"launch(fused, {full[0]}, {work}, ({', '.join(extents + params + outs)},))"
    source = (f"def run({', '.join(params)}):\n"
              f"    if {checks}:\n"
              f"        if not ({contiguous}):\n"
              f"{copies}"
              f"{allocate}"
              f"        {call}\n"
              f"        return {results[0] if len(results) == 1 else '(' + ', '.join(results) + ',)'}\n"
              f"    return general({', '.join(params)})\n")
    scope: dict[str, Any] = {"ndarray": np.ndarray, "general": general, "ascontiguousarray": np.ascontiguousarray,
                             "empty": np.empty, "full": full, "launch": _launch, "launch_sums": _launch_sums,
                             "add_rows": np.sum, "refs": sys.getrefcount, "HANDED": _HANDED}
    specs: list[tuple[Any, int]] = [(np.dtype(np.int64), 0)] * (len(full) + 1)   # lo, hi, extents
    for k, t in enumerate(group.inputs):
        shape = tuple(t.shape.as_list())
        scope[f"s{k}"] = shape
        scope[f"d{k}"] = t.known_dtype.storage.type if state[t] == SCALAR else t.known_dtype.storage
        specs.append((t.known_dtype.storage, 0 if state[t] == SCALAR else len(shape)))
    for k, t in enumerate(group.loop_outputs):
        scope[f"e{k}"] = np.bool_ if t.dtype is dtypes.bool_ else t.known_dtype.storage
        specs.append((scope[f"e{k}"], len(full)))
        if k in summed:
            scope[f"r{k}"] = tuple(summed[k].tensor.shape.as_list())
    if loop is None:
        loop = load_kernel(generate_static_source(group, state))
        precompile(loop, specs, (False,) * (len(full) + 1) + general.readonly)     # (lo, hi, extents) then the inputs
    scope["fused"] = loop
    exec(_run_code(source), scope)
    run: Callable[..., Any] = scope["run"]
    return run


@functools.lru_cache(maxsize=1024)
def _run_code(source: str) -> CodeType:
    """A static kernel's ``run``, compiled once per source: groups of one form share it (their
    shapes, types and loop are in each one's scope). Compiling each took ~0.15 ms of the
    builder's Python, with the GIL held beside the caller's calls."""
    return compile(source, "<gradreg-fused>", "exec")


def _donors(group: FusedGroup, state: dict[Tensor, int], full: tuple[int, ...]) -> dict[int, int]:
    """Output k -> the input j whose memory the loop may write output k into when the plan
    hands that input over (its last use; Stmt.handoff): an input of the full shape and the
    output's type, each input at most once. None in a loop that reads its inputs twice
    (codegen.guarded), nor when handing over cannot be told from keeping (_HANDED)."""
    if _HANDED is None or guarded(group, state):
        return {}
    donors: dict[int, int] = {}
    for k, out in enumerate(group.loop_outputs):
        if out in group.sums:
            continue
        storage = np.dtype(np.bool_) if out.dtype is dtypes.bool_ else out.known_dtype.storage
        for j, t in enumerate(group.inputs):
            if j not in donors.values() and state[t] == FULL and tuple(t.shape.as_tuple()) == full \
                    and t.known_dtype.storage == storage:
                donors[k] = j
                break
    return donors


def _sole_owner(a: str) -> str:
    """The test, in a static kernel's ``run``, that array ``a`` was handed over and nothing else
    holds it or its memory: its references are the handed-over count (no variable, view or
    result of the caller's holds it), it is writable, and it owns its memory or is the only
    view of a whole array that nothing else holds (a product reshaped). A copy made by ``run``
    itself (ascontiguousarray) passes too: it is ``run``'s own."""
    return (f"refs({a}) == HANDED and {a}.flags.writeable and ({a}.base is None or "
            f"(type({a}.base) is ndarray and {a}.base.base is None and {a}.base.nbytes == {a}.nbytes "
            f"and refs({a}.base) == 2))")


def _handed_count() -> int | None:
    """``sys.getrefcount`` of an array inside a kernel the plan handed it to
    (``(v, v := None)[0]``), measured on this interpreter; None if an array the caller still
    holds shows the same count (an interpreter that lends references: nothing is handed over)."""
    def count(a: Any) -> int:
        return sys.getrefcount(a)

    def handed() -> int:
        v: Any = np.empty(1)
        return count((v, v := None)[0])   # noqa: F841 (v is let go, as the plan does)

    def kept() -> int:
        v: Any = np.empty(1)
        return count(v)
    h, k = handed(), kept()
    return h if h < k else None


_HANDED = _handed_count()


def _split(outer: int, work: int) -> tuple[list[tuple[int, int]], int, float | None] | None:
    """How a loop over ``range(outer)`` is split: (its pieces, the threads ``work`` earns, how
    long the workers linger after); None for one thread."""
    parts = min(threads.threads_for(work, WORK_PER_THREAD), outer)
    if parts <= 1:
        return None
    # a few pieces a thread, taken as they come (a thread kept off its core leaves its pieces)
    pieces = workers.split(outer, min(outer, PIECES_PER_THREAD * parts))
    return pieces, parts, workers.LONG_LINGER_SECONDS if work >= LONG_LOOP_WORK else None


def _launch(loop: Any, outer: int, work: int, args: tuple[Any, ...]) -> None:
    """``loop(lo, hi, *args)`` over ``range(outer)``, in parts on the threads ``work`` earns."""
    split = _split(outer, work)
    if split is None:
        loop(0, outer, *args)
        return
    pieces, parts, linger = split
    workers.parallel(lambda i: loop(pieces[i][0], pieces[i][1], *args), len(pieces), parts, linger)


def _launch_sums(loop: Any, outer: int, work: int, args: tuple[Any, ...], outs: tuple[np.ndarray, ...],
                 summed: tuple[int, ...]) -> None:
    """:func:`_launch` for a loop with sums (FusedGroup.sums): each piece sums its own rows
    into a row of its own, added up after."""
    split = _split(outer, work)
    if split is None:
        loop(0, outer, *args, *outs)
        return
    pieces, parts, linger = split
    partial = {k: np.empty((len(pieces), outs[k].size), outs[k].dtype) for k in summed}

    def piece(i: int) -> None:
        loop(pieces[i][0], pieces[i][1], *args, *[partial[k][i] if k in partial else o for k, o in enumerate(outs)])
    workers.parallel(piece, len(pieces), parts, linger)
    for k, rows in partial.items():
        np.add.reduce(rows, axis=0, out=outs[k])


@dataclass
class _Variant:
    """The loop for one pattern of input states (None: the NumPy kernels decide), and the
    state of each output."""
    loop: Any
    output_states: list[int]

    @staticmethod
    def build(group: FusedGroup, input_states: tuple[int, ...], readonly: tuple[bool, ...] = ()) -> _Variant:
        state = dict(zip(group.inputs, input_states))
        for op, description in zip(group.ops, group.descriptions):
            states = [state[t] for t in op.inputs]
            if not description.accepts(tuple(s == SCALAR for s in states)):
                return _Variant(None, [])
            if ROW in states and not description.broadcasts_rows:
                return _Variant(None, [])    # an op that does not broadcast rows
            state[op.outputs[0]] = max(states)
        loop = _native("general_loop", group, state)
        if loop is None:
            loop = load_kernel(generate_source(group, state))
            specs: list[tuple[Any, int]] = [(np.dtype(np.int64), 0), (np.dtype(np.int64), 0)]
            specs += [(t.known_dtype.storage, 1) for t in (*group.inputs, *group.loop_outputs)]
            precompile(loop, specs, (False, False, *readonly))
        return _Variant(loop, [state[t] for t in group.loop_outputs])


def _native(form: str, group: FusedGroup, state: dict[Tensor, int]) -> Any:
    """The group's loop as a native kernel (gradreg.backends.native: LLVM compiles it in tens of
    milliseconds with the GIL released); None when it has no native form or native kernels are
    unavailable here (numba builds it then)."""
    if not native.available():
        return None
    try:
        return getattr(native_fused, form)(group, state)
    except native_dsl.Unsupported:
        return None
