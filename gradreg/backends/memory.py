"""Keeping freed memory for the next step.

A plan allocates the same large temporaries on every run. glibc's malloc gives freed
memory at the top of its heap back to the system once more than M_TRIM_THRESHOLD (by
default twice the dynamic mmap threshold, a few MiB) is free, so the next run takes page
faults and zero-fills every page again: on MobileNetV2's training step that was a sixth of
the time. :func:`retain_freed_memory` raises the thresholds once per process (mallopt):
blocks up to 32 MiB come from the heap, and up to 256 MiB of freed heap is kept.

That is a setting of the whole process which glibc cannot report, so it could not be put back
after a call: the library leaves malloc alone unless asked (GRADREG_MALLOC=retain, or
:func:`allow_retaining`, which the ``gradreg`` command calls for its own process). A process
that sets MALLOC_TRIM_THRESHOLD_ or MALLOC_MMAP_THRESHOLD_ itself, or GRADREG_MALLOC=default,
keeps glibc's behaviour; other C libraries are left alone. Without tuning malloc, a plan's
calls keep their freed blocks in the plan allocator (gradreg.backends.native.allocator), which
NumPy uses only during gradreg's calls; GRADREG_MALLOC=default turns that off too.
"""
from __future__ import annotations

import ctypes
import os
import platform
import sys
from typing import Any

import numpy as np

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20

_done = False
_allowed = False


def allow_retaining() -> None:
    """Let :func:`retain_freed_memory` tune malloc in this process (the ``gradreg`` command's own
    process; a program that owns its process may call it too)."""
    global _allowed
    _allowed = True


def retain_freed_memory() -> bool:
    """Tune glibc's malloc as the module docstring says (once); True if it was tuned."""
    global _done
    asked = os.environ.get("GRADREG_MALLOC", "").strip().lower()
    if _done or not (_allowed or asked == "retain"):
        return False
    _done = True
    if asked == "default" or "MALLOC_TRIM_THRESHOLD_" in os.environ or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


# -- buffers a kernel reuses ---------------------------------------------------------------

# Outputs from this size on are worth keeping for the next call: below it, malloc's own free
# lists serve them without new pages. Above RECYCLE_MAX_BYTES they are not kept (what a plan
# holds between calls stays bounded: a kernel keeps at most ``slots`` arrays of that size).
RECYCLE_BYTES = 1 << 16
RECYCLE_MAX_BYTES = 1 << 26


class Recycler:
    """Arrays a kernel hands out and takes back once nothing else holds them: a plan's large
    temporaries (a loop's stacked values, a hoisted product) then keep their pages from one call
    to the next instead of faulting them in again after malloc gave the heap back to the system
    (without tuning malloc for the whole process, as :func:`retain_freed_memory` does).

    ``empty(shape, dtype)`` is ``np.empty``, except that an array of ``RECYCLE_BYTES`` to
    ``RECYCLE_MAX_BYTES`` it handed out before comes back when Python holds no other reference
    to it: no variable, no view (a view holds its base), no fetched result the caller kept.
    Each kernel keeps its own (one per node of a plan), with at most ``slots`` arrays: what it
    holds between calls is about that node's outputs of the last call. Safe from several threads: a thread looking at
    an array holds a reference to it, so two cannot both find it free."""

    __slots__ = ("_buffers", "_slots")

    def __init__(self, slots: int = 2):
        self._buffers: list[np.ndarray] = []
        self._slots = slots

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        buffers = self._buffers
        for buffer in buffers:
            # references: the list's, this loop's variable and getrefcount's argument
            if sys.getrefcount(buffer) == 3 and buffer.shape == shape and buffer.dtype == dtype:
                return buffer
        out = np.empty(shape, dtype)
        if RECYCLE_BYTES <= out.nbytes <= RECYCLE_MAX_BYTES:
            if len(buffers) >= self._slots:
                buffers.pop(0)
            buffers.append(out)
        return out
