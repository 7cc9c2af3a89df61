"""Threads for kernels: how many a call may use, chosen from its size and how busy the machine is.

Left to itself, OpenBLAS splits every large product over all cores and its threads wait for
each other: when another process holds a core, a call waits for the thread that is not
running, and its threads spin while they wait. On a 2-core machine with one other busy
process that made gradreg's steps 4-10x slower where TensorFlow's (a work-stealing pool)
slowed by 1.5-2x. So gradreg decides per call:

* :func:`threads_for` gives the number of threads a call of a given amount of work gets:
  one below ``work_per_thread`` units per thread, and never more than the cores other
  processes leave free. On Linux that is read as it is now, at most every 20 ms: the threads
  runnable on the machine (/proc/loadavg) less this process's own (/proc/self/task), so a
  BLAS thread of ours spinning after a product is not taken for another process, and a
  process that has just stopped no longer counts. A thread seen in one reading only (a
  kernel worker, a shell's poll) is not load: the lesser of the last two readings counts.
  (An average over the last interval, as /proc/stat gives, lags: it took another process's
  burst that had just ended for load that was still there.) Elsewhere, or where those files
  cannot be read: /proc/stat's busy time over the last 0.1 s less this process's CPU time,
  or the load average. Not more often: each reading's system calls slowed the product that
  followed by 15-40 us (bench/foreign_mlp.py's step, 3-5 ms, lost 4% at every 5 ms).
  ``GRADREG_THREADS`` caps it (1: every kernel single-threaded).
* :func:`blas_threads` sets BLAS's thread count (threadpoolctl) for the calls inside it.
* :func:`parallel` runs parts of a kernel (numba loops that release the GIL) in a small
  pool of worker threads and the calling thread. Once numba is loaded, a worker spins for
  SPIN_SECONDS after each task (without the GIL), then sleeps: waking a sleeping worker
  costs more than the kernels a CNN step splits.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from gradreg.runtime.executor import InPlace

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:   # not Linux
        return max(1, os.cpu_count() or 1)


CORES = _cores()
SAMPLE_SECONDS = 0.1
# Plan calls running on one thread now (SingleThreaded): max_threads() is 1 meanwhile.
_single_calls = 0
_single_lock = threading.Lock()


def max_threads() -> int:
    """``GRADREG_THREADS`` if set (at least 1), else the cores this process may run on; 1 while
    a plan call runs on one thread (:class:`SingleThreaded`)."""
    if _single_calls:
        return 1
    raw = os.environ.get("GRADREG_THREADS", "").strip()
    if raw.isdigit() and int(raw) >= 1:
        return min(int(raw), CORES)
    return CORES


RUNNABLE_SAMPLE_SECONDS = 0.02
TASKS_SECONDS = 0.1


class _Runnable:
    """Threads of other processes runnable now: the machine's runnable threads (the fourth
    field of /proc/loadavg, the reader included) less this process's threads in state R."""

    def __init__(self) -> None:
        self.loadavg = os.open("/proc/loadavg", os.O_RDONLY)
        self.tasks: dict[str, int] = {}    # thread id -> open /proc/self/task/<id>/stat
        self.listed = 0.0                  # when /proc/self/task was last listed
        self.python_threads = 0            # threading.active_count() then

    def _list_tasks(self) -> None:
        tids = os.listdir("/proc/self/task")
        for gone in set(self.tasks) - set(tids):
            os.close(self.tasks.pop(gone))
        for tid in tids:
            if tid not in self.tasks:
                try:
                    self.tasks[tid] = os.open(f"/proc/self/task/{tid}/stat", os.O_RDONLY)
                except FileNotFoundError:   # the thread ended since the listing
                    continue
        self.listed = time.monotonic()
        self.python_threads = threading.active_count()

    def own_running(self) -> int:
        # Threads come and go rarely (BLAS's start with NumPy, the kernel pool's once): the
        # listing is refreshed every TASKS_SECONDS or when a Python thread started or ended,
        # the open stat files are read every time.
        if time.monotonic() - self.listed >= TASKS_SECONDS or threading.active_count() != self.python_threads:
            self._list_tasks()
        running = 0
        for fd in self.tasks.values():
            try:
                stat = os.pread(fd, 512, 0)
            except ProcessLookupError:     # ended: dropped at the next listing
                continue
            # "tid (name) S ...": the state follows the last ')' (a name may hold one)
            state = stat.rfind(b")") + 2
            if stat[state:state + 1] == b"R":
                running += 1
        return running

    def others(self) -> int:
        total = int(os.pread(self.loadavg, 128, 0).split()[3].split(b"/")[0])
        return max(0, total - self.own_running())


class _FreeCores:
    """Cores that other processes leave free: from the threads runnable now where Linux says
    (:class:`_Runnable`), else from the machine's busy time (/proc/stat) minus this
    process's own CPU time over the last interval."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.when = 0.0
        self.busy = self.own = 0.0
        self.free = float(CORES)
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.proc_stat = os.path.exists("/proc/stat")
        self.runnable: _Runnable | None = None
        self.others = 0          # the last reading of other processes' runnable threads
        self.interval = SAMPLE_SECONDS
        try:
            self.runnable = _Runnable()
            self.runnable.others()
            self.interval = RUNNABLE_SAMPLE_SECONDS
        except (OSError, ValueError, IndexError):
            self.runnable = None
        self.sample()

    def machine_busy_seconds(self) -> float:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
        return (user + nice + system + irq + softirq + steal) / self.tick

    def sample(self) -> None:
        now = time.monotonic()
        if self.runnable is not None:
            try:
                # A thread of another process runnable in one reading only (a kernel worker,
                # a shell's poll) is not load: the lesser of the last two readings counts.
                others = self.runnable.others()
                self.free = float(max(0, CORES - min(others, self.others)))
                self.others = others
                self.when = now
                return
            except (OSError, ValueError, IndexError):
                self.runnable = None
                self.interval = SAMPLE_SECONDS
        times = os.times()
        own = times.user + times.system
        if not self.proc_stat:
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
            self.free = max(0.0, CORES - max(0.0, load - 1.0))
            self.when = now
            return
        busy = self.machine_busy_seconds()
        if self.when:
            elapsed = now - self.when
            busy_others = ((busy - self.busy) - (own - self.own)) / elapsed
            self.free = min(float(CORES), max(0.0, CORES - busy_others))
        self.when, self.busy, self.own = now, busy, own

    def current(self) -> float:
        if time.monotonic() - self.when >= self.interval and self.lock.acquire(blocking=False):
            try:
                self.sample()
            except (OSError, ValueError):
                self.proc_stat = False
            finally:
                self.lock.release()
        return self.free


_free_cores: _FreeCores | None = None


def free_cores() -> float:
    """How many cores other processes leave free (read at most every 20 ms on Linux, 0.1 s elsewhere)."""
    global _free_cores
    if _free_cores is None:
        _free_cores = _FreeCores()
    return _free_cores.current()


def threads_for(work: float, work_per_thread: float) -> int:
    """Threads for a call doing ``work`` units: one per ``work_per_thread`` units, at most
    :func:`max_threads` (less the worker running side tasks, :class:`SideTasks`) and the free
    cores (always at least one)."""
    wanted = int(work // work_per_thread)
    if wanted <= 1:
        return 1
    limit = max_threads() - _side_workers
    if limit <= 1:
        return 1
    # A core counts as free when others use less than a fifth of it.
    return max(1, min(wanted, limit, int(free_cores() + 0.2)))


class _Blas:
    """BLAS's thread count. OpenBLAS is set through its own functions, other BLAS libraries
    through threadpoolctl's controllers. A change costs 1-2 us while OpenBLAS's threads spin
    after a product and ~35 us once they sleep (and its sleeping threads are woken by the
    next product): callers ask for the count OpenBLAS has when cores are free, so that it
    changes only under load."""

    def __init__(self) -> None:
        from threadpoolctl import ThreadpoolController  # imported when a large product first runs
        controllers = [lc for lc in ThreadpoolController().lib_controllers if lc.user_api == "blas"]
        self.setters: list[Callable[[int], Any]] = []
        for lc in controllers:
            setter = _openblas_setter(lc) if lc.internal_api == "openblas" else None
            self.setters.append(setter or lc.set_num_threads)
        self.current = max((lc.num_threads or 1 for lc in controllers), default=1)
        self.lock = threading.Lock()

    def set(self, n: int) -> None:
        for setter in self.setters:
            setter(n)
        self.current = n


def _openblas_setter(controller: Any) -> Callable[[int], Any] | None:
    """OpenBLAS's own openblas_set_num_threads (its builds prefix and suffix the name)."""
    for prefix in ("", "scipy_"):
        for suffix in ("", "64_", "_64"):
            fn = getattr(controller.dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
            if fn is not None:
                fn.restype = None
                return fn
    return None


_blas: _Blas | None = None


# The context of a product whose BLAS count is already right: nothing to do (a kernel's
# products ask on every call, and a generator's context cost ~2 us each).
_UNCHANGED = contextlib.nullcontext()


def blas_threads(n: int) -> contextlib.AbstractContextManager[None]:
    """BLAS runs with ``n`` threads inside (set only when it differs; the previous count is
    restored after when this process may use that many threads now, else left lower until a
    call asks for more). Products below OpenBLAS's own threshold (m*n*k < 262144) are single-
    threaded anyway and need not ask."""
    global _blas
    if _blas is None:
        _blas = _Blas()
    if _blas.current == n or not _blas.setters:
        return _UNCHANGED
    return _blas_changed(_blas, n)


@contextlib.contextmanager
def _blas_changed(blas: _Blas, n: int) -> Iterator[None]:
    with blas.lock:
        previous = blas.current
        blas.set(n)
        try:
            yield
        finally:
            # Back to the count before, unless that is more threads than this process may use
            # now (GRADREG_THREADS, the free cores): raising OpenBLAS's count wakes its idle
            # threads, which then spin for a while on a core that another process needs (a
            # TF-written RNN step under load: 12 ms with the count raised after each of its
            # three large products, 4 ms without). The count is raised again by the first
            # product that may use more threads.
            if previous <= n or previous <= min(max_threads() - _side_workers, int(free_cores() + 0.2)):
                blas.set(previous)


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


class _Placement:
    """Keeps the pool's workers off the core the calling thread runs on (Linux).

    When a thread wakes a sleeping worker, Linux tends to queue the worker on the waker's own
    core (wake-affine) if the other cores have been idle; on this project's 2-vCPU machines,
    after a pause of a few hundred milliseconds, a kernel's two halves then ran one after the
    other on one core (2.7 ms instead of 1.3) for tens of calls. Before a parallel call the
    workers' affinity is set to the process's cores other than the caller's current one (only
    when the caller has moved: a syscall per worker), so a woken worker starts on a free core."""

    def __init__(self) -> None:
        self.workers: list[int] = []     # native thread ids of the pool's workers
        self.pinned_away_from = -1
        self.getcpu: Callable[[], int] | None = None
        try:
            import ctypes
            self.allowed = os.sched_getaffinity(0)
            getcpu = ctypes.CDLL(None).sched_getcpu
            getcpu.restype = ctypes.c_int
            getcpu.argtypes = []
            if getcpu() >= 0:
                self.getcpu = getcpu
        except (AttributeError, OSError):
            self.getcpu = None

    def started(self) -> None:
        """Pool initializer: record the worker's thread id (it is pinned from the next call)."""
        self.workers.append(threading.get_native_id())
        self.pinned_away_from = -1

    def place(self) -> None:
        if self.getcpu is None or not self.workers:
            return
        cpu = self.getcpu()
        if cpu == self.pinned_away_from:
            return
        others = self.allowed - {cpu}
        if not others:
            return
        try:
            for tid in self.workers:
                os.sched_setaffinity(tid, others)
        except OSError:          # a worker gone, or affinity not ours to set: leave placement to Linux
            self.getcpu = None
            return
        self.pinned_away_from = cpu


_placement: _Placement | None = None


# After a task, a spinning worker (:class:`_SpinPool`) waits this long for the next one before
# it sleeps: a CNN step's parallel kernels come 50-500 us apart. TensorFlow's and OpenBLAS's
# pools spin likewise.
SPIN_SECONDS = 0.0005


class _SpinPool:
    """Workers that wait for a task spinning, in compiled code without the GIL
    (gradreg.backends.spin), for SPIN_SECONDS after their last one, then sleep on a condition.
    A call then hands its parts over in ~15 us instead of the 40-200 us a sleeping worker's
    wake-up takes on a 2-vCPU VM: a 150 us kernel split in two took 108 us instead of 199
    (150 us on one thread). One call at a time; a concurrent or nested call uses the
    executor pool. Each worker owns a cache line of ``state``: [posted task number, finished
    task number, asleep]."""

    SLOT = 8

    def __init__(self, workers: int, placement: _Placement):
        from gradreg.backends import spin  # needs numba: imported once a numba kernel splits work
        self.wait_change, self.publish = spin.wait_change, spin.publish
        self.spins = max(1000, int(spin.reads_per_second() * SPIN_SECONDS))
        self.state = np.zeros(workers * self.SLOT, np.int64)
        self.tasks: list[Any] = [None] * workers
        self.results: list[Any] = [None] * workers
        self.wakeups = [threading.Condition() for _ in range(workers)]
        self.lock = threading.Lock()
        self.placement = placement
        self.workers = workers
        for w in range(workers):
            threading.Thread(target=self._work, args=(w,), name=f"gradreg-kernel-{w}", daemon=True).start()

    def _work(self, w: int) -> None:
        self.placement.started()
        state, base, seen = self.state, w * self.SLOT, 0
        wakeup = self.wakeups[w]
        while True:
            if not self.wait_change(state, base, seen, self.spins):
                with wakeup:
                    state[base + 2] = 1
                    while int(state[base]) == seen:
                        wakeup.wait()
                    state[base + 2] = 0
            seen = int(state[base])
            fn, i = self.tasks[w]
            try:
                self.results[w] = (True, fn(i))
            except BaseException as exc:   # re-raised in the calling thread
                self.results[w] = (False, exc)
            # Hold nothing of the task while waiting for the next: its closure's arrays (a
            # kernel's inputs and outputs) would outlive the plan's release of them.
            self.tasks[w] = fn = None
            self.publish(state, base + 1, seen)

    def run(self, fn: Callable[[int], Any], parts: int) -> list[Any] | None:
        """``[fn(0), ..., fn(parts - 1)]``; None when the pool is busy (another thread's call)."""
        if parts - 1 > self.workers or not self.lock.acquire(blocking=False):
            return None
        try:
            posted = [self.post(fn, w, w + 1) for w in range(parts - 1)]
            try:
                first = fn(0)
            finally:
                for w, number in enumerate(posted):
                    self.wait_posted(number, w)
            out = [first]
            for w in range(parts - 1):
                ok, value = self.results[w]
                self.results[w] = None
                if not ok:
                    raise value
                out.append(value)
            return out
        finally:
            self.lock.release()

    def post(self, fn: Callable[[int], Any], w: int = 0, i: int = 0) -> int:
        """Start ``fn(i)`` on worker ``w`` and return its task number at once (the caller holds
        ``lock``, and waits with :meth:`wait_posted` before posting to ``w`` again or releasing
        it)."""
        state, base = self.state, w * self.SLOT
        self.tasks[w] = (fn, i)
        number = int(state[base]) + 1
        self.publish(state, base, number)
        if state[base + 2]:
            with self.wakeups[w]:
                self.wakeups[w].notify()
        return number

    def wait_posted(self, number: int, w: int = 0) -> None:
        """Wait until worker ``w`` has finished its task ``number`` (its result stays in
        ``results[w]``)."""
        while not self.wait_change(self.state, w * self.SLOT + 1, number - 1, self.spins):
            time.sleep(0.00002)     # a worker descheduled for long: stop spinning


_spin_pool: _SpinPool | None = None


_spin_failed = False    # numba could not compile the spin here: the executor pool serves


def _spinning() -> _SpinPool | None:
    """The spinning pool, made on first use when numba is already imported (the kernels that
    split work are numba's); None without numba, or with GRADREG_SPIN=0."""
    global _spin_pool, _placement, _spin_failed
    if _spin_pool is None and not _spin_failed and "numba" in sys.modules \
            and os.environ.get("GRADREG_SPIN", "1").strip() != "0":
        with _pool_lock:
            if _spin_pool is None and not _spin_failed:
                if _placement is None:
                    _placement = _Placement()
                try:
                    _spin_pool = _SpinPool(max(1, CORES - 1), _placement)
                except Exception:
                    _spin_failed = True
    return _spin_pool


def _forget_pools() -> None:
    """In a forked child: the parent's workers do not exist there; new pools start on use (and
    no side worker is held there, and no call runs single-threaded, whatever the parent's calls
    held)."""
    global _pool, _spin_pool, _placement, _side_workers, _single_calls, _single_lock
    _pool = _spin_pool = _placement = None
    _side_workers = _single_calls = 0
    _single_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


def parallel(fn: Callable[[int], Any], parts: int) -> list[Any]:
    """``[fn(0), ..., fn(parts - 1)]``, part 0 in the calling thread and the others in worker
    threads (``fn`` should release the GIL: a numba ``nogil`` loop, a NumPy call), placed on
    cores other than the caller's (:class:`_Placement`): the spinning pool's when numba is
    loaded (:class:`_SpinPool`), else a sleeping executor's."""
    if parts <= 1:
        return [fn(0)]
    global _pool, _placement
    spinning = _spinning()
    if spinning is not None:
        spinning.placement.place()
        done = spinning.run(fn, parts)
        if done is not None:
            return done
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                if _placement is None:
                    _placement = _Placement()
                # imported here: concurrent.futures (with logging) costs ~10 ms at start-up, and
                # this pool serves only when the spinning pool is busy
                from concurrent.futures import ThreadPoolExecutor
                _pool = ThreadPoolExecutor(max_workers=max(1, CORES - 1), thread_name_prefix="gradreg-kernel",
                                           initializer=_placement.started)
    assert _placement is not None
    _placement.place()
    futures: Sequence[Future[Any]] = [_pool.submit(fn, i) for i in range(1, parts)]
    first = fn(0)
    return [first] + [f.result() for f in futures]


def split(n: int, parts: int) -> list[tuple[int, int]]:
    """``range(n)`` cut into ``parts`` contiguous (start, stop) pieces of nearly equal size."""
    bounds = [n * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


# -- side tasks ------------------------------------------------------------------------------

# Workers running side tasks now (0 or 1): threads_for gives the other kernels that many fewer.
_side_workers = 0
# A side task is worth a hand-off from this many bytes of arguments (smaller ones run inline).
SIDE_MIN_BYTES = 1 << 18
# Side tasks wait while the arguments they hold come to at most this many bytes (a waiting task
# keeps its arguments alive after the plan would have released them: a CNN step's peak memory
# grows with the queue); beyond, they run inline, and so do larger tasks (the float64 ResNet's
# 2 MiB filter gradients: holding one was 1.44x its step's largest live set).
SIDE_QUEUE_BYTES = 1 << 20


class Deferred:
    """A side task: ``fn(*args)``, run by the side worker or by the caller; ``value`` or
    ``error`` once ``done``."""

    __slots__ = ("fn", "args", "value", "error", "done", "nbytes")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], nbytes: int = 0):
        self.fn: Callable[..., Any] | None = fn
        self.args: tuple[Any, ...] | None = args
        self.nbytes = nbytes
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = False

    def run(self) -> None:
        fn, args = self.fn, self.args
        self.fn = self.args = None          # the arguments are released as soon as it has run
        assert fn is not None and args is not None
        try:
            if any(type(a) is Deferred for a in args):
                args = tuple(a.result() if type(a) is Deferred else a for a in args)
            self.value = fn(*args)
        except BaseException as exc:     # raised where the plan takes the value (naming the node)
            self.error = exc
        self.done = True

    def result(self) -> Any:
        """The value of an earlier task this one reads (waiting if the other thread runs it)."""
        while not self.done:
            time.sleep(0.00002)
        if self.error is not None:
            raise self.error        # the plan takes the earlier task first: its node is named
        return self.value


class SideTasks:
    """One plan call's side tasks: kernels whose outputs no other node of the plan reads but
    other side tasks (a CNN's weight gradients, next to the chain of input gradients every
    other node waits for).

    ``submit(fn, *args)`` hands a task to the side worker (the spinning pool's first worker,
    held by this call until its first :meth:`take`) and returns a :class:`Deferred`, or runs
    it now and returns its value: when the machine has no second free core, the worker is
    busy with another call, the task is small (under SIDE_MIN_BYTES of array arguments) or
    large (over SIDE_QUEUE_BYTES), or the tasks waiting hold SIDE_QUEUE_BYTES already; a task
    reading another's value is always queued after it. The worker runs them in order while
    the calling thread goes on, and sleeps (on a condition, not spinning: the threads may share a
    physical core) while none waits. :meth:`take` gives a task's value, its error raised
    there so that the plan's line names the node; the first take runs what still waits in
    the calling thread too, and waits for the worker. :meth:`cancel` (the plan failed) drops
    what waits. While a call holds the worker, :func:`threads_for` counts one thread fewer,
    so that the two threads do not also split kernels among themselves."""

    __slots__ = ("queue", "ready", "pool", "closing", "posted", "held", "waiting_bytes")

    def __init__(self) -> None:
        self.queue: list[Deferred] = []
        self.waiting_bytes = 0
        self.ready = threading.Condition(threading.Lock())
        self.pool: _SpinPool | None = None
        self.closing = False
        self.posted = 0
        self.held: bool | None = None        # None: not asked yet; False: no worker for this call

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        nbytes = sum(getattr(a, "nbytes", 0) for a in args)
        if not any(type(a) is Deferred for a in args) and (
                self.held is False or not SIDE_MIN_BYTES <= nbytes <= SIDE_QUEUE_BYTES
                or (self.queue and self.waiting_bytes + nbytes > SIDE_QUEUE_BYTES)
                or (self.held is None and not self._hold())):
            return fn(*args)   # (a task reading an earlier one's value always follows it to the queue)
        task = Deferred(fn, args, nbytes)
        with self.ready:
            self.queue.append(task)
            self.waiting_bytes += nbytes
            self.ready.notify()
        return task

    def _hold(self) -> bool:
        global _side_workers
        pool = _spinning()
        if pool is None or min(max_threads(), int(free_cores() + 0.2)) < 2 or not pool.lock.acquire(blocking=False):
            self.held = False
            return False
        self.pool, self.held = pool, True
        _side_workers += 1
        pool.placement.place()
        self.posted = pool.post(self._drain)
        return True

    def _drain(self, _: int) -> None:
        """The worker: run the tasks in order as they come, until the call closes."""
        ready, queue = self.ready, self.queue
        while True:
            with ready:
                while not queue and not self.closing:
                    ready.wait()
                if not queue:
                    return
                task = queue.pop(0)
                self.waiting_bytes -= task.nbytes
            task.run()

    def take(self, value: Any) -> Any:
        """A task's value (raising its error); anything else as it is."""
        if self.pool is not None:
            self.finish()       # the first take: every task has run, the worker is let go
        if type(value) is not Deferred:
            return value
        if not value.done:      # never left unrun, whatever the order of the plan's lines
            value.run()
        if value.error is not None:
            raise value.error
        return value.value

    def finish(self) -> None:
        """Run the tasks still waiting (in order, as the worker takes them too), wait for the
        worker, and let the pool go."""
        while True:
            with self.ready:
                task = self.queue.pop(0) if self.queue else None
                if task is not None:
                    self.waiting_bytes -= task.nbytes
            if task is None:
                break
            task.run()
        self._release()

    def cancel(self) -> None:
        """Drop the tasks still waiting, wait for the one running, let the pool go."""
        with self.ready:
            self.queue.clear()
            self.waiting_bytes = 0
        self._release()

    def close(self) -> None:
        """The call is over: the pool is let go if a take has not done it (a plan whose side
        values were all taken has let it go already)."""
        self._release()

    def _release(self) -> None:
        global _side_workers
        pool = self.pool
        if pool is None:
            return
        self.pool, self.held = None, False
        try:
            with self.ready:
                self.closing = True
                self.ready.notify()
            pool.wait_posted(self.posted)
            pool.results[0] = None     # the drain's own result: its tasks keep theirs
        finally:
            _side_workers -= 1
            pool.lock.release()


class SingleThreaded(InPlace):
    """A plan call kept on one thread (a plan's "single" mode, gradreg.runtime.plan.Plan): its
    side items run in place and, until :meth:`close`, :func:`max_threads` is 1, so that no
    kernel splits its work and BLAS keeps one thread. Other calls running meanwhile (another
    session's, in another thread) see the same limit: with two calls at once, one thread each
    is what the cores allow anyway."""

    __slots__ = ("open",)

    def __init__(self) -> None:
        global _single_calls
        with _single_lock:
            _single_calls += 1
        self.open = True

    def cancel(self) -> None:
        self.close()

    def close(self) -> None:
        global _single_calls
        if self.open:
            self.open = False
            with _single_lock:
                _single_calls -= 1
