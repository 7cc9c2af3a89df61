"""When the numba backend compiles: in the first call of a plan made to be called again and
again (within a time budget), else in the background from a plan's second call.

A numba kernel is a :class:`gradreg.registry.kernels.Tiered` kernel: its NumPy version runs
at once, and ``build()`` imports numba and compiles (or loads from the disk cache,
gradreg.backends.numba.cache) the fast one. ``GRADREG_JIT`` says when builds run:

* ``background`` (the default): a plan made to be called again and again
  (``Session.make_callable``) builds its kernels in its first call, before it returns, as
  ``jax.jit`` does, for up to :data:`FIRST_CALL_SECONDS` (0.2-0.3 s from an empty cache for
  an MLP step, an RNN, a chain of elementwise ops; 1.2-1.9 s for the small Keras CNNs of
  bench/), and queues what is left then to the background thread below. Its NumPy kernels
  are 2-4x slower than the compiled ones, so the calls made beside background builds ran at
  3-8x the steady state for a second or two. Other plans, when they run a second time --
  they are being reused, so compiling may pay -- have their kernels queued to one background
  thread, which builds them one by one while the plan keeps running with the NumPy kernels,
  and swaps each in as it is ready. The first call (a plan made to be called again) or the
  second is timed kernel by kernel, and the builds go by what they gain: the kernels that
  took longest in it first, those sharing a compiled loop together (:func:`build_order`).
  When all of a plan's kernels are built, a note of the plan is left in the disk cache
  (:func:`plan_key`); a plan that finds its note as its first call
  returns loads its kernels from the cache then (about a second, mostly importing numba; the
  spinning pool of kernel threads is made then too), and runs them from its second call on:
  kernels loaded by the thread would have the caller wait for the GIL behind it, call after
  call. They are loaded after the first call, not before: a fused loop is compiled for its
  inputs as they came (read-only or not), which the first call shows. Before its first call
  runs, a plan loads LLVM (llvmlite) for the builds to come, and the allocator its calls use.
  A command that runs a new plan once (``Session.run``, as the command line does) never
  imports numba.
* ``eager``: each plan builds its kernels before its first call runs, then makes its
  allocator and pool as the background mode does (:func:`tier_up_eager`; the behaviour before
  tiering; tests that check numba's kernels use it).

:func:`wait_for_kernels` blocks until the queued builds are done (benchmarks call it before
measuring). The thread is a daemon: a process exits without waiting for it, and kernels it
had not finished are compiled again next time (what it finished is in the disk cache).
"""
from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import importlib.metadata
import os
import queue
import re
import sys
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from gradreg.backends import native, threads, workers
from gradreg.backends.native import allocator
from gradreg.backends.numba.cache import cache_dir
from gradreg.registry.kernels import Tiered

MODES = ("background", "eager")


def mode() -> str:
    """``GRADREG_JIT``: "background" (default) or "eager"."""
    chosen = os.environ.get("GRADREG_JIT", "").strip().lower()
    return chosen if chosen in MODES else "background"


class _Builder:
    """One daemon thread building queued Tiered kernels, in the order they were queued."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[tuple[Tiered, Callable[[Callable[..., Any]], None], Callable[[bool], None] | None]] \
            = queue.Queue()
        self.lock = threading.Lock()
        self.pending = 0
        self.idle = threading.Condition(self.lock)
        self.thread: threading.Thread | None = None
        self.errors: list[str] = []
        self.built = 0

    def submit(self, tiered: Tiered, install: Callable[[Callable[..., Any]], None],
               finished: Callable[[bool], None] | None = None) -> None:
        with self.lock:
            self.pending += 1
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self.work, name="gradreg-numba-jit", daemon=True)
                self.thread.start()
        self.jobs.put((tiered, install, finished))

    def work(self) -> None:
        _lower_priority()
        while True:
            tiered, install, finished = self.jobs.get()
            # A young collection first (the young objects are few: well under a millisecond):
            # a build's IR, tens of thousands of objects, then starts from empty young
            # generations and mostly dies young, instead of counting toward a full collection
            # (30-110 ms with the GIL held) that would fall in one of the caller's calls.
            gc.collect(1)
            try:
                built = tiered.build()
            except Exception as exc:  # the NumPy kernel keeps serving; say why once per kernel
                self.errors.append(f"{tiered.name or tiered.initial!r}: {type(exc).__name__}: {exc}")
                built = None
            if built is not None:
                install(built)
                self.built += 1
            if finished is not None:
                with contextlib.suppress(Exception):
                    finished(built is not None)
            with self.lock:
                self.pending -= 1
                if not self.pending:
                    self.idle.notify_all()

    def wait(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while self.pending:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self.idle.wait(remaining)
        return True


def _lower_priority() -> None:
    """Let the thread that runs the plans win a core over compiling (Linux: threads have nice values)."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


_builder = _Builder()
# each plan's kernels' families, worked out as its first call returns, taken when its builds are queued
_families: weakref.WeakKeyDictionary[Any, dict[str, Hashable]] = weakref.WeakKeyDictionary()


def tier_up(plan: Any, calls: int) -> bool:
    """The numba backend's policy for a plan (gradreg.runtime.plan.Plan) with Tiered kernels,
    asked before its first call runs (LLVM and the plan allocator made ready: _load_compiler)
    and as each call returns: after its first, load them now if the disk cache has them all
    (the plan's note is there); else after its second (it is being reused), queue them to the
    background thread, each swapped in when built. True once it has done either."""
    if calls == 0:
        # before the first call runs: its arrays then come from the plan allocator, and the
        # second call finds them there (made after the first, it had the second call take a
        # page fault for each, 10-20 ms of MobileNetV2-64's NumPy step)
        _load_compiler()
        if getattr(plan, "repeated", False):
            plan.time_upgrades()     # the first call shows what each build gains (_build_first)
        return False
    if calls == 1:
        note = _note_path(plan)
        noted = note is not None and note.exists()
        if noted:
            plan.upgrade_times()     # (the first call's timing wrappers taken away)
            plan.build_upgrades()
        elif getattr(plan, "repeated", False):
            # a plan made to be called again (Session.make_callable): built now, in its first
            # call, as jax.jit does; what is left after FIRST_CALL_SECONDS, in the background
            _build_first(plan, FIRST_CALL_SECONDS)
            noted = True
        else:
            plan.time_upgrades()     # the second call shows what each build would gain (_queue)
            # and each kernel's family is worked out now, in the first call (a fused group's
            # loop key: ~10 ms for MobileNetV2-64's 149 groups), not as the second returns
            _families[plan] = {name: family(tiered) for name, tiered in plan.upgrades}
        # Loading the graph, making the plan and loading its kernels made tens of thousands of
        # objects, which Python's collector counts toward its next full pass (30-110 ms with the
        # GIL held; 80,000 objects for MobileNetV2-64): made here, as the first call returns, it
        # does not fall in a later call (the builds' objects count little: _Builder.work).
        gc.collect()
        _threads_ready()
        return noted
    _queue(plan)
    return True


# How long a plan made to be called again may build in its first call; what is left then is
# built in the background. From an empty cache (bench/cold_start.py, 2-vCPU VM, 2026-12-02)
# the first call built MobileNetV2-64's kernels in 1.2-1.6 s, the slim DenseNet's and ResNet's
# in 1.2-1.9 s, an MLP step's, an RNN's and an elementwise chain's in 0.2-0.3 s: within it,
# with room for a busier machine; a larger graph's first call stays bounded. With 1 s, a few of
# the slim ResNet's calls after it were above 3x its steady state.
FIRST_CALL_SECONDS = 3.0


def _build_first(plan: Any, seconds: float) -> None:
    """Build ``plan``'s kernels now, in the order of what they gained in its first call
    (:func:`build_order`), until ``seconds`` have passed; queue the rest to the background
    thread. The plan's note is left once all are built (none if a build failed)."""
    order = build_order(plan.upgrades, plan.upgrade_times())
    deadline = time.perf_counter() + seconds
    built, failed = 0, False
    for name, tiered in order:
        if time.perf_counter() > deadline:
            break
        if not plan.build_upgrade(name, tiered):
            failed = True
        built += 1
    if built == len(order):
        if not failed:
            _leave_note(plan)
    else:
        _queue(plan, order[built:])


def tier_up_eager(plan: Any, calls: int) -> bool:
    """The policy under GRADREG_JIT=eager: the plan's kernels built before its first call runs,
    with LLVM and the plan allocator (_load_compiler); the collector's full pass and the
    spinning pool of kernel threads as that call returns, as :func:`tier_up` does. (A plan
    given no policy built its kernels when it was made but never made the allocator nor the
    pool: the slim ResNet's steady step took 6.1 ms against 4.0 ms in the background mode.)"""
    if calls == 0:
        _load_compiler()
        plan.build_upgrades()
        return False
    gc.collect()
    _threads_ready()
    return True


def _threads_ready() -> None:
    """What the kernels' threads need, made as a plan's first call returns: the spinning pool
    (a compiled spin loaded and calibrated; made later, by a thread of its own, it would hold
    the GIL in the calls after this one) and the BLAS libraries' controls (threadpoolctl's
    import and its scan of the loaded libraries, 4-6 ms: asked by the first kernel split over
    the threads, it had the elementwise chain's second call take 3-4x its steady state)."""
    workers.spin_pool()
    threads.blas_limit()


def _load_compiler() -> None:
    """LLVM loaded and set up for the native kernels (llvmlite's import, about 50 ms of Python
    with the GIL held) before the first call, where a process pays it once: done by the builder
    thread beside the caller's second and third calls, it stalled one of them 4x. And the
    plan allocator made, which the calls use (gradreg.backends.native.allocator)."""
    if native.available():
        allocator.prepare()


def _queue(plan: Any, ordered: list[tuple[str, Tiered]] | None = None) -> None:
    """Queue ``plan``'s kernels to the background thread -- those of ``ordered``, in its order,
    the others built already; else all, in :func:`build_order`'s -- and when the last is built,
    and none failed, leave the plan's note."""
    if ordered is None:
        ordered = build_order(plan.upgrades, plan.upgrade_times(), _families.pop(plan, None))
    progress = {"left": len(ordered), "failed": False}
    lock = threading.Lock()

    def finished(ok: bool) -> None:
        with lock:
            progress["left"] -= 1
            progress["failed"] = progress["failed"] or not ok
            complete = progress["left"] == 0 and not progress["failed"]
        if complete:
            _leave_note(plan)
    for name, tiered in ordered:
        _builder.submit(tiered, functools.partial(plan.install, name), finished)


def family(tiered: Tiered) -> Hashable:
    """What a kernel shares its compiled loop with: its family (or what its family function
    gives), else its op type (the first word of its name)."""
    if callable(tiered.family):
        return tiered.family()
    if tiered.family is not None:
        return tiered.family
    return re.split(r"[ :]", tiered.name, maxsplit=1)[0]


def build_order(upgrades: list[tuple[str, Tiered]], seconds: dict[str, float],
                families: dict[str, Hashable] | None = None) -> list[tuple[str, Tiered]]:
    """The order to build a plan's kernels in: those that gain the most first, the gain being
    what each initial kernel took in a call (``seconds``; without it, the kernels' weights).
    Kernels of one family share one compiled loop, the first build paying for the rest: the
    families go by their kernels' total gain (a compile each), a family's kernels one after
    another. (By weight, MobileNetV2-64's stem convolution came first: a 0.5 s build for 1 ms
    of its step, while its depthwise kernels' three loops, 29 ms, waited.) ``families``: each
    kernel's family by name, where worked out already."""
    def gain(upgrade: tuple[str, Tiered]) -> float:
        return seconds.get(upgrade[0], 0.0) if seconds else upgrade[1].weight
    rank: dict[Hashable, int] = {}     # each family's number, in the order first met
    known = families or {}
    ids = [rank.setdefault(known[name] if name in known else family(tiered), len(rank)) for name, tiered in upgrades]
    totals = [0.0] * len(rank)
    for i, upgrade in enumerate(upgrades):
        totals[ids[i]] += gain(upgrade)
    order = sorted(range(len(upgrades)),
                   key=lambda i: (-totals[ids[i]], ids[i], -gain(upgrades[i]), -upgrades[i][1].weight))
    return [upgrades[i] for i in order]


def plan_key(plan: Any) -> str:
    """What identifies a plan's compiled kernels in the disk cache: its code, its kernels'
    names and sizes, the versions of numba and Python and the CPU (numba's cache is per CPU)."""
    digest = hashlib.sha256()
    for part in (sys.version, _numba_version(), _cpu(), plan.source,
                 *(f"{name}={tiered.name}:{tiered.weight}" for name, tiered in plan.upgrades)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


@functools.lru_cache(maxsize=1)
def _numba_version() -> str:
    try:
        return importlib.metadata.version("numba")
    except importlib.metadata.PackageNotFoundError:
        return "none"


@functools.lru_cache(maxsize=1)
def _cpu() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line
    import platform
    return platform.processor() or platform.machine()


def _note_path(plan: Any) -> Any:
    try:
        return cache_dir() / "plans" / plan_key(plan)
    except Exception:   # a plan this policy cannot name: built the usual way
        return None


def _leave_note(plan: Any) -> None:
    """Note in the disk cache that ``plan``'s kernels are all there (an empty file)."""
    note = _note_path(plan)
    if note is not None:
        with contextlib.suppress(OSError):
            note.parent.mkdir(parents=True, exist_ok=True)
            note.touch()


def submit(tiered: Tiered, install: Callable[[Callable[..., Any]], None]) -> None:
    """Queue ``tiered.build()`` to the background thread; ``install(kernel)`` receives its result."""
    _builder.submit(tiered, install)


def wait_for_kernels(timeout: float | None = None) -> bool:
    """Block until every queued kernel is built (or ``timeout`` seconds pass); True when none is pending."""
    return _builder.wait(timeout)


def build_errors() -> list[str]:
    """Kernels whose build failed in the background (their NumPy versions kept running)."""
    return list(_builder.errors)


def kernels_built() -> int:
    """How many kernels the background thread has built and swapped in so far."""
    return _builder.built
