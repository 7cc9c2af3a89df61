"""Progress of long work on the terminal, for the ``gradreg`` command.

The library reports long work as :class:`gradreg.progress.Task` records through the ``gradreg``
logger; the handler of :func:`progress_handler` draws each task that is still running after
``delay`` seconds as a progress bar on stderr (tqdm when installed, else one line of text
rewritten in place), so quick commands print nothing. gradreg.cli attaches it for the duration
of a command when stderr is a terminal and ``--quiet`` is not given (:func:`shown_on`), and
takes it away afterwards. (:mod:`logging` and tqdm are imported only then: not by a command
whose output is piped.)
"""
from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any, TextIO

from gradreg.progress import TaskState

__all__ = ["DELAY", "progress_handler", "shown_on"]

DELAY = 0.5   # seconds a task runs before it is shown


class _TextBar:
    """A one-line progress display without tqdm: ``what: done/total unit`` rewritten in place."""

    def __init__(self, state: TaskState, stream: TextIO):
        self.state = state
        self.stream = stream
        self.lock = threading.Lock()

    def refresh(self) -> None:
        with self.lock:
            state = self.state
            count = f"{state.done}/{state.total}" if state.total else str(state.done) if state.done else ""
            self.stream.write(f"\r{state.what}: {count} {state.unit if count else '...'}".rstrip() + " ")
            self.stream.flush()

    def close(self) -> None:
        with self.lock:
            self.stream.write(f"\r{self.state.what}: done in {self.state.seconds:.1f} s\n")
            self.stream.flush()


class _Shown:
    """One running task on the terminal: nothing until ``delay`` has passed, then a bar."""

    def __init__(self, state: TaskState, stream: TextIO, delay: float, use_tqdm: bool):
        self.state = state
        self.stream = stream
        self.bar: Any = None
        self.lock = threading.Lock()
        self.use_tqdm = use_tqdm
        self.delay = delay
        self.timer = threading.Timer(delay, self.show)
        self.timer.daemon = True
        self.timer.start()

    def show(self) -> None:
        with self.lock:
            if self.state.finished or self.bar is not None:
                return
            if self.use_tqdm:
                from tqdm import tqdm  # an optional dependency, imported only when a bar is drawn
                counted = self.state.total is not None or self.state.done
                self.bar = tqdm(total=self.state.total, desc=self.state.what, unit=f" {self.state.unit}",
                                initial=self.state.done, file=self.stream, leave=True, dynamic_ncols=True,
                                bar_format=None if counted else "{desc} [{elapsed}]")
                self.bar.start_t -= self.delay     # the task started when it was reported, not now
            else:
                self.bar = _TextBar(self.state, self.stream)
                self.bar.refresh()

    def update(self) -> None:
        with self.lock:
            if self.bar is None:
                return
            if self.use_tqdm:
                self.bar.update(self.state.done - self.bar.n)
            else:
                self.bar.refresh()

    def finish(self) -> None:
        self.timer.cancel()
        self.update()
        with self.lock:
            if self.bar is not None:
                self.bar.close()


def progress_handler(stream: TextIO, delay: float = DELAY, use_tqdm: bool | None = None) -> Any:
    """A logging.Handler drawing the tasks of ``gradreg.progress`` on ``stream`` (tqdm's bars when
    ``use_tqdm``, default: when installed); other records are not its business."""
    return _handler_class()(stream, delay, _tqdm_installed() if use_tqdm is None else use_tqdm)


@functools.cache
def _handler_class() -> type:
    import logging  # here, not at start-up (see the module docstring)

    class ProgressHandler(logging.Handler):
        def __init__(self, stream: TextIO, delay: float, use_tqdm: bool):
            super().__init__(logging.DEBUG)
            self.stream, self.delay, self.use_tqdm = stream, delay, use_tqdm
            self.running: dict[int, _Shown] = {}

        def emit(self, record: logging.LogRecord) -> None:
            state = getattr(record, "gradreg_task", None)
            if isinstance(state, TaskState):
                _track(self.running, state, lambda: _Shown(state, self.stream, self.delay, self.use_tqdm))

        def close(self) -> None:
            for shown in self.running.values():
                shown.timer.cancel()
            self.running.clear()
            super().close()

    return ProgressHandler


def _track(running: dict[int, _Shown], state: TaskState, new: Any) -> None:
    """A task's record: start showing it (after the delay), update it, or finish it."""
    key = id(state)
    shown = running.get(key)
    if shown is None and not state.finished:
        running[key] = new()
    elif shown is not None and state.finished:
        del running[key]
        shown.finish()
    elif shown is not None:
        shown.update()


def _tqdm_installed() -> bool:
    import importlib.util
    return importlib.util.find_spec("tqdm") is not None


@contextlib.contextmanager
def shown_on(stream: TextIO) -> Iterator[Any]:
    """Draw gradreg's progress on ``stream`` while the block runs; the ``gradreg`` logger's level
    and handlers are as they were afterwards."""
    import logging  # here, not at start-up (see the module docstring)
    logger = logging.getLogger("gradreg")
    handler = progress_handler(stream, DELAY)
    saved = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)
        handler.close()
