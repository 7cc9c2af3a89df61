"""When the numba backend compiles: never on the way to a plan's first result.

A numba kernel is a :class:`gradreg.registry.kernels.Tiered` kernel: its NumPy version runs
at once, and ``build()`` imports numba and compiles (or loads from the disk cache,
gradreg.backends.numba.cache) the fast one. ``GRADREG_JIT`` says when builds run:

* ``background`` (the default): when a plan runs a second time -- it is being reused, so
  compiling may pay -- its kernels are queued to one background thread, which builds them
  one by one while the plan keeps running with the NumPy kernels, and swaps each in as it
  is ready. A command that runs a plan once never imports numba. Where the platform forks
  (Linux, macOS), the compiling happens in a child process: numba's compiler is Python,
  and in a thread of the caller's process it held the GIL in 5 ms slices between every
  kernel of the caller's plan (a MobileNetV2 step of 20 ms took ~1 s while kernels
  compiled). The child, a fork of this process made when builds are queued, builds the
  queued kernels in order into the disk cache (gradreg.backends.numba.cache) and says
  which are done through a pipe; the background thread waits on the pipe without the GIL
  and builds each kernel again in this process, now a load from the cache. A child that
  fails or outlives CHILD_SECONDS leaves the rest to the thread, as before.
* ``thread``: the background thread compiles in this process (no child).
* ``eager``: each plan builds its kernels when it is compiled, before its first run (the
  behaviour before tiering; tests that check numba's kernels use it).

:func:`wait_for_kernels` blocks until the queued builds are done (benchmarks call it before
measuring). The thread is a daemon: a process exits without waiting for it, and kernels it
had not finished are compiled again next time (what it finished is in the disk cache).
"""
from __future__ import annotations

import contextlib
import functools
import os
import queue
import select
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from gradreg.registry.kernels import Tiered

MODES = ("background", "thread", "eager")


def mode() -> str:
    """``GRADREG_JIT``: "background" (default), "thread" or "eager"."""
    chosen = os.environ.get("GRADREG_JIT", "").strip().lower()
    return chosen if chosen in MODES else "background"


class _Builder:
    """One daemon thread building queued Tiered kernels, in the order they were queued."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[tuple[Tiered, Callable[[Callable[..., Any]], None]]] = queue.Queue()
        self.lock = threading.Lock()
        self.pending = 0
        self.idle = threading.Condition(self.lock)
        self.thread: threading.Thread | None = None
        self.errors: list[str] = []
        self.built = 0

    def submit(self, tiered: Tiered, install: Callable[[Callable[..., Any]], None]) -> None:
        with self.lock:
            self.pending += 1
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self.work, name="gradreg-numba-jit", daemon=True)
                self.thread.start()
        self.jobs.put((tiered, install))

    def work(self) -> None:
        _lower_priority()
        while True:
            batch = [self.jobs.get()]
            while not self.jobs.empty():
                batch.append(self.jobs.get_nowait())
            child = _Child.start([tiered for tiered, _ in batch]) if _forks() else None
            for i, (tiered, install) in enumerate(batch):
                if child is not None and not child.finished(i):
                    child = None         # it failed or took too long: the rest compile here
                self.build(tiered, install)
            if child is not None:
                child.close()

    def build(self, tiered: Tiered, install: Callable[[Callable[..., Any]], None]) -> None:
        try:
            built = tiered.build()
        except Exception as exc:  # the NumPy kernel keeps serving; say why once per kernel
            self.errors.append(f"{tiered.name or tiered.initial!r}: {type(exc).__name__}: {exc}")
            built = None
        if built is not None:
            install(built)
            self.built += 1
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


# A child building kernels (background mode) may take this long for one kernel before the
# background thread gives up on it and compiles the rest itself.
CHILD_SECONDS = 300.0


def _forks() -> bool:
    return mode() == "background" and hasattr(os, "fork")


class _Child:
    """A forked child building kernels into the disk cache, one byte on a pipe per kernel done."""

    def __init__(self, pid: int, reader: int):
        self.pid, self.reader, self.done = pid, reader, 0

    @classmethod
    def start(cls, kernels: list[Tiered]) -> _Child | None:
        reader, writer = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(reader)
            os.close(writer)
            return None
        if pid == 0:        # the child: build, report, and leave without running any exit handler
            try:
                os.close(reader)
                _exit_with_parent()
                # The caller's pipes are not the child's to hold open (a shell waits for their end).
                devnull = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(devnull, fd)
                for tiered in kernels:
                    with contextlib.suppress(Exception):   # the parent builds it again and says why
                        tiered.build()
                    os.write(writer, b"1")
            finally:
                # gone at once, without the exit handlers this process's copy of the caller's
                # state would run (flushing its files, atexit): os._exit, said as a signal
                os.kill(os.getpid(), signal.SIGKILL)
        os.close(writer)
        return cls(pid, reader)

    def finished(self, i: int) -> bool:
        """Wait (without the GIL) until the child has built kernel ``i``; False if it died or took too long."""
        while self.done <= i:
            ready, _, _ = select.select([self.reader], [], [], CHILD_SECONDS)
            if not ready or not os.read(self.reader, 1):
                self.close()
                return False
            self.done += 1
        return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.reader)
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)       # done already, or given up on
        with contextlib.suppress(OSError):
            os.waitpid(self.pid, 0)


def _exit_with_parent() -> None:
    """Linux: the child is killed when the thread that forked it ends (its process exits)."""
    with contextlib.suppress(AttributeError, OSError):
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 9)        # PR_SET_PDEATHSIG, SIGKILL


def _lower_priority() -> None:
    """Let the thread that runs the plans win a core over compiling (Linux: threads have nice values)."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


_builder = _Builder()


def tier_up(plan: Any) -> None:
    """The numba backend's policy for a reused plan (gradreg.runtime.plan.Plan): queue its
    Tiered kernels to the background thread, each swapped in when built."""
    # The heaviest kernels first: they gain the most while the others wait.
    for name, tiered in sorted(plan.upgrades, key=lambda upgrade: -upgrade[1].weight):
        _builder.submit(tiered, functools.partial(plan.install, name))


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
