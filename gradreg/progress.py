"""gradreg's logging and the progress of long work.

gradreg logs through the ``gradreg`` logger and its children (``gradreg.formats``,
``gradreg.runtime``, ...). As a library it never configures logging: the ``gradreg`` logger has
a NullHandler, and what is shown, where, is the application's choice::

    import logging
    logging.basicConfig(level=INFO)      # see what gradreg does, at INFO

Long work -- reading a big graph, importing an ONNX model, restoring a SavedModel's variables,
compiling a plan -- is a :class:`Task`: an INFO record when it starts and one when it ends (with
its duration), and while it runs DEBUG records of how far it got, at most every
``INTERVAL`` seconds. Every record of a task carries ``record.gradreg_task``, a
:class:`TaskState` (what, done, total, unit, finished), from which a handler can draw a
progress bar: the ``gradreg`` command does so on a terminal (gradreg.cli_progress). When
no handler wants the records the cost is one check per ``advance()``.

:mod:`logging` is imported when the first task starts, not with gradreg (``gradreg inspect``
of a small graph never needs it); the NullHandler is put on the ``gradreg`` logger then,
before any record is made.
"""
from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

__all__ = ["INTERVAL", "Task", "TaskState", "get_logger", "task"]

INTERVAL = 0.1   # seconds between two progress records of one task
INFO, DEBUG = 20, 10   # INFO, DEBUG (logging is imported on first use)


def get_logger(name: str) -> logging.Logger:
    """The logger ``gradreg.<name>`` (the ``gradreg`` logger gets its NullHandler first)."""
    import logging  # here: see the module docstring
    root = logging.getLogger("gradreg")
    if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
        root.addHandler(logging.NullHandler())
    return logging.getLogger(f"gradreg.{name}")


class TaskState:
    """Where a task is: ``what`` it does, ``done`` of ``total`` ``unit`` (total None: unknown),
    ``finished`` once it ended (``failed`` if by an exception), ``seconds`` since it started."""

    __slots__ = ("what", "total", "unit", "done", "seconds", "finished", "failed")

    def __init__(self, what: str, total: int | None, unit: str):
        self.what, self.total, self.unit = what, total, unit
        self.done = 0
        self.seconds = 0.0
        self.finished = self.failed = False

    def __repr__(self) -> str:
        return f"TaskState({self.what!r}, {self.done}/{self.total} {self.unit}, finished={self.finished})"


class Task:
    """A long piece of work reporting its progress through ``logger`` (see the module docstring).

        with task(log, f"importing {path}", total=len(nodes), unit="nodes") as progress:
            for node in nodes:
                ...
                progress.advance()
    """

    __slots__ = ("logger", "state", "enabled", "detailed", "start", "next_report")

    def __init__(self, logger: str | logging.Logger, what: str, total: int | None = None, unit: str = "items"):
        self.logger = get_logger(logger) if isinstance(logger, str) else logger
        self.state = TaskState(what, total, unit)
        self.enabled = self.logger.isEnabledFor(INFO)
        self.detailed = self.logger.isEnabledFor(DEBUG)
        self.start = self.next_report = 0.0

    def __enter__(self) -> Task:
        if self.enabled:
            self.start = time.monotonic()
            self.next_report = self.start + INTERVAL
            self._log(INFO, "%s ...", self.state.what)
        return self

    def advance(self, count: int = 1) -> None:
        """``count`` more units done."""
        self.state.done += count
        if self.detailed:
            now = time.monotonic()
            if now >= self.next_report:
                self.next_report = now + INTERVAL
                self.state.seconds = now - self.start
                self._log(DEBUG, "%s: %d of %s %s", self.state.what, self.state.done,
                          "?" if self.state.total is None else self.state.total, self.state.unit)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if not self.enabled:
            return
        state = self.state
        state.finished, state.failed = True, kind is not None
        state.seconds = time.monotonic() - self.start
        if kind is None:
            self._log(INFO, "%s: %d %s in %.2f s", state.what, state.done, state.unit, state.seconds)
        else:
            self._log(INFO, "%s: stopped by %s after %.2f s", state.what, kind.__name__, state.seconds)

    def _log(self, level: int, message: str, *args: object) -> None:
        self.logger.log(level, message, *args, extra={"gradreg_task": self.state}, stacklevel=3)


def task(logger: str | logging.Logger, what: str, total: int | None = None, unit: str = "items") -> Task:
    """A :class:`Task` (a context manager) doing ``what`` over ``total`` ``unit``, reporting through
    ``logger`` (a Logger, or ``name`` for the logger ``gradreg.<name>``)."""
    return Task(logger, what, total, unit)
