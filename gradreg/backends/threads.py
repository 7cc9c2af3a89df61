"""How many threads a kernel call may use, and BLAS's thread count within a call.

The rule is plain: a call may use the cores this process may use, and no more than the user
said. Those are, read when a call asks (:func:`max_threads`):

* the process's CPU affinity (``os.sched_getaffinity``: taskset, a job scheduler's cpuset);
* its container's CPU quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``, in the
  process's cgroup and every one above it; read once: :func:`cgroup_cpu_limit`);
* ``GRADREG_THREADS``, then ``OMP_NUM_THREADS`` (its first value, as OpenMP reads a list);
* BLAS's thread count as the caller left it (``threadpoolctl.threadpool_limits``,
  ``OPENBLAS_NUM_THREADS``): a caller who limited BLAS to one thread gets one thread from
  gradreg too;
* one while a plan call keeps to one thread (:class:`gradreg.backends.call_modes.SingleThreaded`),
  less the worker a call holds for its side tasks (:class:`gradreg.backends.call_modes.SideTasks`).

gradreg does not watch the machine's load. Until issue 31 it sampled /proc every 20 ms and
used fewer threads while other processes ran; that read a neighbour's idle-spinning BLAS
threads, a container's host-wide /proc/loadavg or a benchmark's turn-taking as "busy" and
kept calls single-threaded for long after. docs/benchmarks.md compares the two designs.

:func:`blas_threads` lowers BLAS's thread count for the calls inside it (a kernel that splits
its work over gradreg's threads runs BLAS on one thread in each) and puts back the count it
found when the last such call leaves: after a gradreg call BLAS has the threads the caller
gave it. It never raises the count.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def affinity_cores() -> int:
    """The cores this process may run on (its CPU affinity; the machine's cores where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:   # not Linux
        return max(1, os.cpu_count() or 1)


# -- the container's CPU quota -----------------------------------------------------------------

def _mounts(root: Path) -> list[tuple[str, str, str, set[str]]]:
    """The cgroup file systems mounted: (root within the hierarchy, mount point, type, options)."""
    found = []
    for line in (root / "proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((fields[3], fields[4], tail[0], set(tail[2].split(","))))
    return found


def _directory(root: Path, mount_root: str, mount_point: str, path: str) -> Path:
    """The directory of cgroup ``path`` under a mount of the hierarchy's ``mount_root``."""
    if mount_root != "/" and (path == mount_root or path.startswith(mount_root + "/")):
        path = path[len(mount_root):]
    return root / mount_point.lstrip("/") / path.lstrip("/")


def _quota_v2(directory: Path) -> float | None:
    text = (directory / "cpu.max").read_text().split()
    if not text or text[0] == "max":
        return None
    period = float(text[1]) if len(text) > 1 else 100000.0
    return float(text[0]) / period


def _quota_v1(directory: Path) -> float | None:
    quota = int((directory / "cpu.cfs_quota_us").read_text())
    period = int((directory / "cpu.cfs_period_us").read_text())
    return quota / period if quota > 0 and period > 0 else None


def _walk_up(directory: Path, top: Path, read: Callable[[Path], float | None]) -> float | None:
    """The lowest quota in ``directory`` and the cgroups above it, up to the mount point ``top``."""
    lowest: float | None = None
    while True:
        with contextlib.suppress(OSError, ValueError):
            quota = read(directory)
            if quota is not None:
                lowest = quota if lowest is None else min(lowest, quota)
        if directory == top or top not in directory.parents:
            return lowest
        directory = directory.parent


@functools.cache
def cgroup_cpu_limit(root: Path = Path("/")) -> float | None:
    """The CPU quota of this process's cgroups in CPUs (1.5: a quota of 150 ms per 100 ms),
    the lowest along the hierarchy; None when there is none or it cannot be read. Read once
    per process (``root`` is where /proc and /sys are: tests give a tree of their own)."""
    try:
        groups = (root / "proc/self/cgroup").read_text().splitlines()
        mounts = _mounts(root)
    except OSError:
        return None
    limits = []
    for line in groups:
        _, controllers, path = line.split(":", 2)
        for mount_root, mount_point, kind, options in mounts:
            if kind == "cgroup2" and controllers == "":
                read: Callable[[Path], float | None] = _quota_v2
            elif kind == "cgroup" and "cpu" in controllers.split(",") and "cpu" in options:
                read = _quota_v1
            else:
                continue
            top = root / mount_point.lstrip("/")
            found = _walk_up(_directory(root, mount_root, mount_point, path), top, read)
            if found is not None:
                limits.append(found)
    return min(limits) if limits else None


def cores() -> int:
    """The cores this process may use: its affinity, within its container's CPU quota (a
    quota of 1.5 CPUs allows two threads)."""
    n = affinity_cores()
    quota = cgroup_cpu_limit()
    if quota is not None:
        n = min(n, max(1, math.ceil(quota - 1e-9)))
    return n


def _env_threads(name: str) -> int | None:
    raw = os.environ.get(name, "").split(",")[0].strip()
    return int(raw) if raw.isdigit() and int(raw) >= 1 else None


# -- BLAS ----------------------------------------------------------------------------------------

class _Blas:
    """The BLAS libraries NumPy loaded (threadpoolctl's controllers): their thread count, read
    and set, and the count to put back when the last scoped change ends."""

    def __init__(self) -> None:
        from threadpoolctl import ThreadpoolController  # imported when a kernel first asks for threads
        controllers = [lc for lc in ThreadpoolController().lib_controllers if lc.user_api == "blas"]
        self.getters: list[Callable[[], Any]] = []
        self.setters: list[Callable[[int], Any]] = []
        for lc in controllers:
            getter, setter = _openblas_functions(lc) if lc.internal_api == "openblas" else (None, None)
            self.getters.append(getter or lc.get_num_threads)
            self.setters.append(setter or lc.set_num_threads)
        self.lock = threading.Lock()
        self.users = 0              # scoped changes under way (threads inside blas_threads)
        self.saved = 0              # the count before the first of them
        self.target = 0             # the lowest count asked for by one of them

    def current(self) -> int:
        """The lowest thread count among the BLAS libraries (0 when there is none)."""
        if len(self.getters) == 1:        # NumPy's one OpenBLAS: a kernel asks on every large call
            return int(self.getters[0]() or 1)
        counts = [int(get() or 1) for get in self.getters]
        return min(counts) if counts else 0

    def set(self, n: int) -> None:
        for setter in self.setters:
            setter(n)


def _openblas_functions(controller: Any) -> tuple[Callable[[], Any] | None, Callable[[int], Any] | None]:
    """OpenBLAS's own openblas_get_num_threads/openblas_set_num_threads (its builds prefix
    and suffix the names): a call costs less than through threadpoolctl."""
    for prefix in ("", "scipy_"):
        for suffix in ("", "64_", "_64"):
            get = getattr(controller.dynlib, f"{prefix}openblas_get_num_threads{suffix}", None)
            put = getattr(controller.dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
            if get is not None and put is not None:
                put.restype = None
                return get, put
    return None, None


_blas: _Blas | None = None
_blas_lock = threading.Lock()


def _the_blas() -> _Blas:
    global _blas
    if _blas is None:
        with _blas_lock:
            if _blas is None:
                _blas = _Blas()
    return _blas


def blas_limit() -> int:
    """BLAS's thread count as the caller left it (within a scoped change: the count before
    it); 0 when NumPy has no BLAS threadpoolctl knows."""
    blas = _the_blas()
    return blas.saved if blas.users else blas.current()


@contextlib.contextmanager
def _lowered(blas: _Blas, n: int) -> Iterator[None]:
    with blas.lock:
        if not blas.users:
            blas.saved = blas.target = blas.current()
        blas.users += 1
        if n < blas.target:
            blas.target = n
            blas.set(n)
    try:
        yield
    finally:
        with blas.lock:
            blas.users -= 1
            if not blas.users and blas.target != blas.saved:
                blas.set(blas.saved)


# The context of a product whose BLAS count need not change (a kernel's products ask on every
# call; a generator's context costs ~2 us).
_UNCHANGED = contextlib.nullcontext()


def blas_threads(n: int) -> contextlib.AbstractContextManager[None]:
    """BLAS runs with at most ``n`` threads inside; the count is put back when the last thread
    inside leaves. Nothing is done when BLAS has ``n`` threads or fewer already."""
    blas = _the_blas()
    if not blas.setters or (not blas.users and blas.current() <= n):
        return _UNCHANGED
    return _lowered(blas, n)


# -- the budget ----------------------------------------------------------------------------------

class _Holds:
    """What running plan calls hold: calls kept on one thread, and workers running side tasks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.single_calls = 0
        self.side_workers = 0

    def change(self, single: int = 0, side: int = 0) -> None:
        with self.lock:
            self.single_calls += single
            self.side_workers += side


HOLDS = _Holds()


def _forget_holds() -> None:
    """In a forked child no call of the parent's runs: nothing is held there."""
    global HOLDS, _blas
    HOLDS = _Holds()
    if _blas is not None:
        _blas.lock = threading.Lock()
        _blas.users = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_holds)


def max_threads() -> int:
    """The threads a kernel call may use now: the cores this process may use (:func:`cores`)
    within GRADREG_THREADS, OMP_NUM_THREADS and BLAS's count as the caller left it; 1 while a
    plan call keeps to one thread."""
    if HOLDS.single_calls:
        return 1
    n = cores()
    for name in ("GRADREG_THREADS", "OMP_NUM_THREADS"):
        given = _env_threads(name)
        if given is not None:
            n = min(n, given)
            break
    if n > 1:
        blas = blas_limit()
        if blas:
            n = min(n, blas)
    return n


def threads_for(work: float, work_per_thread: float) -> int:
    """Threads for a call doing ``work`` units: one per ``work_per_thread`` units, at most
    :func:`max_threads` less the workers held for side tasks (always at least one)."""
    wanted = int(work // work_per_thread)
    if wanted <= 1:
        return 1
    return max(1, min(wanted, max_threads() - HOLDS.side_workers))
