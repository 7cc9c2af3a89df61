"""Wall-clock deadlines: how gradreg bounds the time a call takes (see gradreg.config).

A call given a budget of seconds -- ``gradreg.config.timeout``, ``Session(timeout=)``,
``Session.run(..., timeout=)``, ``--timeout`` on the command line -- has a deadline, an
instant of :func:`clock`. :func:`time_limit` makes it the *current* deadline of the block it
encloses, in this thread (a context variable): loading a file checks it every few thousand
nodes (:func:`check`). A ``Session.run`` hands its deadline to its session's kernel context
(:class:`CallDeadlines`), where its plans and kernels read it whatever thread runs them:
between nodes, at each loop iteration, at each library function call. Loops also have a budget
of their own, ``gradreg.config.loop_timeout`` from their first iteration (:func:`loop_end`).

A deadline inside another one never extends it: the earlier instant holds.

    >>> with gradreg.time_limit(30):           # the load and the run together: 30 s at most
    ...     graph = gradreg.load_graph("untrusted.pb")
    ...     gradreg.Session(graph).run("y:0", feeds)
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from gradreg import config
from gradreg.errors import DeadlineExceededError

clock = time.monotonic
NEVER = math.inf


@dataclass(frozen=True)
class Deadline:
    """The instant ``at`` (of :func:`clock`) by which a call given ``seconds`` must end."""
    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(clock() + seconds, seconds)

    def passed(self) -> bool:
        return clock() > self.at


_CURRENT: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar("gradreg_deadline", default=None)


def current() -> Deadline | None:
    """The deadline of the call running in this thread (:func:`time_limit`), if any."""
    return _CURRENT.get()


def for_call(seconds: float | None) -> Deadline | None:
    """The deadline of a call starting now with a budget of ``seconds`` (None:
    ``gradreg.config.timeout``; 0: no budget of its own): the earlier of that and the current
    deadline; None when neither exists."""
    if seconds is None:
        seconds = config.timeout
    enclosing = _CURRENT.get()
    if not seconds or seconds < 0:
        return enclosing
    own = Deadline.after(seconds)
    return enclosing if enclosing is not None and enclosing.at <= own.at else own


@contextlib.contextmanager
def time_limit(seconds: float | None = None) -> Iterator[Deadline | None]:
    """Bound the block's wall-clock time: loading, ``Session.run`` and the command line inside it
    stop with :class:`~gradreg.errors.DeadlineExceededError` once ``seconds`` have passed
    (None: ``gradreg.config.timeout``; 0: no limit of its own). An enclosing limit that ends
    earlier still holds. Yields the deadline in force (None: none)."""
    deadline = for_call(seconds)
    token = _CURRENT.set(deadline)
    try:
        yield deadline
    finally:
        _CURRENT.reset(token)


def check(where: str, what: str = "") -> None:
    """DeadlineExceededError naming ``where`` (a file, a node) if the current deadline has
    passed; ``what`` says what was being done (``"while loading (node 4,096 of 10,000)"``)."""
    deadline = _CURRENT.get()
    if deadline is not None and clock() > deadline.at:
        raise DeadlineExceededError(f"{where}: {exceeded(deadline.seconds, what)}")


def exceeded(seconds: float, what: str = "", session: bool = False) -> str:
    """The words saying the time limit of a call passed, and how to raise it."""
    how = ("Session(timeout=...), run(..., timeout=...), " if session else "") + config.how_to_raise("timeout")
    return f"the time limit of {seconds:g} s passed{' ' + what if what else ''} ({how})"


def loop_exceeded(seconds: float, iterations: int) -> str:
    """The words saying a loop ran past its own budget, and how to raise it."""
    return (f"the loop ran longer than its time limit of {seconds:g} s ({iterations:,} iterations) "
            f"(Session(loop_timeout=...), {config.how_to_raise('loop_timeout')})")


class CallDeadlines:
    """The deadlines of the calls running in one session at once (a Session's kernel context
    holds one): ``at``, the earliest (NEVER when none), is what plans and kernels check --
    ``if clock() > deadlines.at`` costs one attribute read and one clock call."""

    __slots__ = ("at", "seconds", "_active", "_lock")

    def __init__(self) -> None:
        self.at = NEVER
        self.seconds = 0.0
        self._active: list[Deadline] = []
        self._lock = threading.Lock()

    def enter(self, deadline: Deadline) -> None:
        with self._lock:
            self._active.append(deadline)
            self._update()

    def leave(self, deadline: Deadline) -> None:
        with self._lock:
            self._active.remove(deadline)
            self._update()

    def _update(self) -> None:
        if self._active:
            first = min(self._active, key=lambda d: d.at)
            self.at, self.seconds = first.at, first.seconds
        else:
            self.at, self.seconds = NEVER, 0.0

    def error(self, where: str, what: str = "", node_name: str | None = None,
              op_type: str | None = None) -> DeadlineExceededError:
        """The error of the call whose deadline passed, naming ``where``."""
        return DeadlineExceededError(f"{where}: {exceeded(self.seconds, what, session=True)}", node_name, op_type)


def loop_end(deadlines: CallDeadlines, loop_seconds: float | None) -> float:
    """The instant a loop starting now must stop by: its own budget (``loop_seconds``; None or
    0: none) or its call's deadline, whichever comes first (NEVER: no limit)."""
    end = deadlines.at
    if loop_seconds:
        end = min(end, clock() + loop_seconds)
    return end


def loop_error(deadlines: CallDeadlines, loop_seconds: float | None, where: str, iterations: int,
               node_name: str | None = None, op_type: str | None = None) -> DeadlineExceededError:
    """The error of a loop that passed :func:`loop_end`: its call's deadline if that is what
    passed, else its own budget."""
    if clock() > deadlines.at:
        message = exceeded(deadlines.seconds, f"in the loop, after {iterations:,} iterations", session=True)
    else:
        message = loop_exceeded(loop_seconds or 0.0, iterations)
    return DeadlineExceededError(f"{where}: {message}", node_name, op_type)
