"""When the numba backend compiles: never on the way to a plan's first result.

A numba kernel is a :class:`gradreg.registry.kernels.Tiered` kernel: its NumPy version runs
at once, and ``build()`` imports numba and compiles (or loads from the disk cache,
gradreg.backends.numba.cache) the fast one. ``GRADREG_JIT`` says when builds run:

* ``background`` (the default): when a plan runs a second time -- it is being reused, so
  compiling may pay -- its kernels are queued to one background thread, which builds them
  one by one while the plan keeps running with the NumPy kernels, and swaps each in as it
  is ready. A command that runs a plan once never imports numba.
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
import threading
import time
from collections.abc import Callable
from typing import Any

from gradreg.registry.kernels import Tiered

MODES = ("background", "eager")


def mode() -> str:
    """``GRADREG_JIT``: "background" (default) or "eager"."""
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
            tiered, install = self.jobs.get()
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
