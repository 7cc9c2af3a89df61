"""A plan's call and gradreg's own background work (a backend compiling kernels) share the GIL
in short slices.

A thread that compiles in Python (numba's compiler) holds the GIL until another thread asks
for it and the interpreter's switch interval (5 ms by default) has passed. A plan's call gives
up the GIL at each large NumPy operation and BLAS call and then waits for it: with a compiler
running beside it, up to a switch interval each time -- hundreds of times a call, a call
several times its usual length. So while background work runs, a plan's call lowers the
switch interval to :data:`SWITCH_INTERVAL` and puts back the caller's when it returns (the
last of concurrent calls does): after a call the process is as the caller left it, and
without background work nothing is changed.
"""
from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

# The switch interval during a call while background work runs (seconds).
SWITCH_INTERVAL = 0.0002

_lock = threading.Lock()
background = 0           # background jobs running now (read without the lock: a hint)
_calls = 0               # plan calls that lowered the interval and have not returned
_saved: float | None = None


@contextlib.contextmanager
def background_work() -> Iterator[None]:
    """Mark a piece of gradreg's background work (a kernel's build) while it runs."""
    global background
    with _lock:
        background += 1
    try:
        yield
    finally:
        with _lock:
            background -= 1


def call_started() -> bool:
    """A plan's call starts while background work runs: lower the switch interval (the first
    such call saves the caller's). True when the call must call :func:`call_finished`."""
    global _calls, _saved
    with _lock:
        if not background:
            return False
        if _calls == 0:
            _saved = sys.getswitchinterval()
            if _saved > SWITCH_INTERVAL:
                sys.setswitchinterval(SWITCH_INTERVAL)
        _calls += 1
    return True


def call_finished() -> None:
    """The call that :func:`call_started` lowered returns: the last one puts the caller's interval back."""
    global _calls, _saved
    with _lock:
        _calls -= 1
        if _calls == 0 and _saved is not None:
            sys.setswitchinterval(_saved)
            _saved = None
