"""gradreg's kernel threads: :func:`parallel` runs the parts of a kernel (numba loops that release
the GIL, NumPy calls) on the calling thread and a few worker threads; :func:`split` cuts a range
into parts. How many threads a kernel uses is :func:`gradreg.backends.threads.threads_for`'s answer.

The threads share the parts as they go: each takes the next part not yet taken, the caller
first. A kernel cut into more parts than threads (a few a thread) then does not wait for a
worker that another process keeps off its core: the caller takes that worker's parts, and waits
only for a part a worker has started. That is how gradreg keeps its speed beside busy
neighbours without watching the machine's load.

Once numba is loaded the workers spin for SPIN_SECONDS after each task (in compiled code,
without the GIL: gradreg.backends.spin; a call may ask for longer, LONG_LINGER_SECONDS after a
long fused loop), then sleep: waking a sleeping worker costs 40-200 us on
a 2-vCPU VM, more than the kernels a CNN step splits take; a spinning one takes a task in
~15 us. Without numba (or with GRADREG_SPIN=0) a sleeping executor serves. The workers are the
process's cores less one (the caller is the other), made on first use; a forked child makes
its own.
"""
from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from gradreg.backends.native import allocator
from gradreg.backends.threads import affinity_cores, blas_threads

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

# After a task, a spinning worker (:class:`SpinPool`) waits this long for the next one before it
# sleeps: a CNN step's parallel kernels come 50-500 us apart. TensorFlow's and OpenBLAS's pools
# spin likewise.
SPIN_SECONDS = 0.0005
# A call may ask its workers to spin longer after its task (:func:`parallel`'s ``linger``): a
# fused loop of milliseconds (20 ops on 1M floats) is usually called again soon, and on a VM a
# worker that slept through the gap between calls came back slow for the next several calls
# (the 20-op chain after 0.5 s idle: 8-12 ms a call against 6.5 ms back to back; lingering
# 50 ms, 6.7-7.7 ms). NumPy's OpenBLAS threads spin ~110 ms after each product.
LONG_LINGER_SECONDS = 0.05


class SpinPool:
    """Workers that wait for a task spinning, in compiled code without the GIL, for SPIN_SECONDS
    after their last one, then sleep on a condition. A call then hands its parts over in ~15 us
    instead of the 40-200 us a sleeping worker's wake-up takes on a 2-vCPU VM: a 150 us kernel
    split in two took 108 us instead of 199 (150 us on one thread). One call at a time; a
    concurrent or nested call uses the executor pool. Each worker owns a cache line of
    ``state``: [posted task number, finished task number, asleep]."""

    SLOT = 8

    def __init__(self, workers: int):
        from gradreg.backends import spin  # imported once a compiled kernel splits work
        self.wait_change, self.publish = spin.compiled()
        self.rate = spin.reads_per_second()
        self.spins = self.spins_for(SPIN_SECONDS)
        self.state = np.zeros(workers * self.SLOT, np.int64)
        # compiled (or loaded) here, not at the first post: there, in the caller's call, behind
        # numba's compiler lock, which the background builder holds for seconds as it compiles
        self.publish(self.state, 0, 0)
        self.tasks: list[Any] = [None] * workers
        self.results: list[Any] = [None] * workers
        self.wakeups = [threading.Condition() for _ in range(workers)]
        self.lock = threading.Lock()
        self.workers = workers
        for w in range(workers):
            threading.Thread(target=self._work, args=(w,), name=f"gradreg-kernel-{w}", daemon=True).start()

    def spins_for(self, seconds: float) -> int:
        return max(1000, int(self.rate * seconds))

    def _work(self, w: int) -> None:
        state, base, seen = self.state, w * self.SLOT, 0
        wakeup = self.wakeups[w]
        adopted = False     # the plan allocator, for the arrays a task makes (once it is made)
        spins = self.spins
        while True:
            if not self.wait_change(state, base, seen, spins):
                with wakeup:
                    state[base + 2] = 1
                    while int(state[base]) == seen:
                        wakeup.wait()
                    state[base + 2] = 0
            seen = int(state[base])
            if not adopted:
                adopted = allocator.adopt()
            # The task stays in ``tasks`` (a caller may post the next one meanwhile: clearing it
            # here could drop that one); what it holds is let go by the call it belongs to.
            fn, i, spins = self.tasks[w]
            try:
                self.results[w] = (True, fn(i))
            except BaseException as exc:   # re-raised in the calling thread
                self.results[w] = (False, exc)
            fn = None
            self.publish(state, base + 1, seen)

    def run(self, fn: Callable[[int], Any], parts: int, helpers: int, linger: float | None = None) -> list[Any] | None:
        """``[fn(0), ..., fn(parts - 1)]`` on the caller and ``helpers`` workers sharing the parts
        (:class:`_Shared`), the workers spinning ``linger`` seconds after (SPIN_SECONDS by
        default); None when the pool is busy (another thread's call)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            shared = _Shared(fn, parts)
            first = shared.claim()          # part 0 is the caller's, whatever the workers do
            spins = self.spins if linger is None else self.spins_for(linger)
            for w in range(min(helpers, self.workers)):
                self.post(shared.drain, w, spins=spins)
            shared.run(first)
            shared.drain(0)
            return shared.results_when_done()
        finally:
            self.lock.release()

    def post(self, fn: Callable[[int], Any], w: int = 0, i: int = 0, spins: int | None = None) -> int:
        """Start ``fn(i)`` on worker ``w`` and return its task number at once (the caller holds
        ``lock``). A worker that has not started its last task when the next comes runs only
        the next: a caller that needs its task run (side tasks) waits with :meth:`wait_posted`
        before posting again; a parallel call's share needs no waiting for (its parts are
        taken by the others)."""
        state, base = self.state, w * self.SLOT
        self.tasks[w] = (fn, i, self.spins if spins is None else spins)
        number = int(state[base]) + 1
        self.publish(state, base, number)
        if state[base + 2]:
            with self.wakeups[w]:
                self.wakeups[w].notify()
        return number

    def wait_posted(self, number: int, w: int = 0) -> None:
        """Wait until worker ``w`` has finished its task ``number`` or a later one (its result
        stays in ``results[w]``). The numbers it publishes grow but may skip (a task it never
        started): "finished" is "at least ``number``"."""
        index = w * self.SLOT + 1
        while (finished := int(self.state[index])) < number:
            if not self.wait_change(self.state, index, finished, self.spins):
                time.sleep(0.00002)     # a worker descheduled for long: stop spinning


class _Shared:
    """One parallel call's parts, taken one at a time by whichever thread comes (``claim`` is
    ``next`` of an itertools.count: atomic under the GIL). A worker that comes after the last
    part has been taken returns at once; the call waits only for the parts under way."""

    def __init__(self, fn: Callable[[int], Any], parts: int):
        self.fn: Callable[[int], Any] | None = fn
        self.parts = parts
        self.claim = itertools.count().__next__
        self.results: list[Any] = [None] * parts
        self.errors: list[tuple[int, BaseException]] = []
        self.done = [False] * parts      # an item's store is atomic; a shared counter's += is not

    def run(self, i: int) -> None:
        fn = self.fn
        assert fn is not None
        try:
            self.results[i] = fn(i)
        except BaseException as exc:   # re-raised in the calling thread once every part is done
            self.errors.append((i, exc))
        self.done[i] = True

    def drain(self, _: int = 0) -> None:
        while (i := self.claim()) < self.parts:
            self.run(i)

    def results_when_done(self) -> list[Any]:
        spins = 0
        while not all(self.done):       # a part a worker has started
            spins += 1
            time.sleep(0 if spins < 50 else 0.00002)
        return self.release()

    def release(self) -> list[Any]:
        """The results (raising the first part's error); nothing of the call stays here after,
        for a worker that comes late or keeps the task (a kernel's arrays would outlive it)."""
        results, errors = self.results, self.errors
        self.fn, self.results, self.errors = None, [], []
        if errors:
            raise min(errors, key=lambda e: e[0])[1]
        return results


def _compiled_kernels() -> bool:
    """Whether this process runs compiled kernels (numba's or native ones), which split work
    over threads in parts short enough for the spinning pool to pay."""
    if "numba" in sys.modules:
        return True
    engine = sys.modules.get("gradreg.backends.native.engine")
    return engine is not None and engine.compiled_count() > 0


class _Pools:
    """The process's pools, made on first use: the spinning one (numba loaded), and a sleeping
    executor for calls that find it busy."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spinning: SpinPool | None = None
        self.spin_failed = False      # numba could not compile the spin here: the executor serves
        self.maker: threading.Thread | None = None
        self.executor: ThreadPoolExecutor | None = None

    def wanted(self) -> bool:
        return self.spinning is None and not self.spin_failed and _compiled_kernels() \
            and os.environ.get("GRADREG_SPIN", "1").strip() != "0"

    def spin_pool(self) -> SpinPool | None:
        """The spinning pool, made now in this thread when it is missing."""
        if self.wanted():
            with self.lock:
                if self.spinning is None and not self.spin_failed:
                    try:
                        self.spinning = SpinPool(max(1, affinity_cores() - 1))
                    except Exception:
                        self.spin_failed = True
        return self.spinning

    def spin_pool_soon(self) -> SpinPool | None:
        """The spinning pool if it is made; else None, and a thread of its own makes it (at this
        thread's priority, which its workers inherit): making it loads and calibrates a
        compiled spin, up to a second in the caller's call (longer behind numba's compiler
        lock, which the background kernel builder holds while it compiles)."""
        if self.spinning is None and self.maker is None and self.wanted():
            with self.lock:
                if self.maker is None:
                    self.maker = threading.Thread(target=self.spin_pool, name="gradreg-spin-maker", daemon=True)
                    self.maker.start()
        return self.spinning

    def sleeping(self) -> ThreadPoolExecutor:
        if self.executor is None:
            with self.lock:
                if self.executor is None:
                    # imported here: concurrent.futures (with logging) costs ~10 ms at start-up, and
                    # this pool serves only when the spinning pool is busy
                    from concurrent.futures import ThreadPoolExecutor
                    self.executor = ThreadPoolExecutor(max_workers=max(1, affinity_cores() - 1),
                                                       thread_name_prefix="gradreg-kernel")
        return self.executor


POOLS = _Pools()


def _forget_pools() -> None:
    """In a forked child the parent's workers do not exist: new pools start on use."""
    global POOLS
    POOLS = _Pools()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


def spin_pool() -> SpinPool | None:
    """The spinning pool, made now on first use when numba is already imported (the kernels that
    split work are numba's); None without numba, or with GRADREG_SPIN=0. The kernels' own calls
    (:func:`parallel`, side tasks) never wait for it to be made: :meth:`_Pools.spin_pool_soon`."""
    return POOLS.spin_pool()


def parallel(fn: Callable[[int], Any], parts: int, threads: int | None = None,
             linger: float | None = None) -> list[Any]:
    """``[fn(0), ..., fn(parts - 1)]`` on ``threads`` threads (default: ``parts``), the calling
    thread and workers taking the parts as they come, part 0 the caller's (``fn`` should release
    the GIL: a numba ``nogil`` loop, a NumPy call). The workers are the spinning pool's when
    numba is loaded (spinning ``linger`` seconds after: SPIN_SECONDS by default), else a
    sleeping executor's. An error of any part is raised once every part has run (the first
    part's that failed)."""
    threads = parts if threads is None else max(1, min(threads, parts))
    if threads <= 1:
        return [fn(i) for i in range(parts)]
    spinning = POOLS.spin_pool_soon()
    if spinning is not None:
        done = spinning.run(fn, parts, threads - 1, linger)
        if done is not None:
            return done
    shared = _Shared(fn, parts)
    first = shared.claim()
    futures: Sequence[Future[Any]] = [POOLS.sleeping().submit(shared.drain) for _ in range(threads - 1)]
    shared.run(first)
    shared.drain()
    for f in futures:
        f.result()
    return shared.release()


def product(a: np.ndarray, b: np.ndarray, threads: int) -> np.ndarray:
    """``np.matmul(a, b)`` (a: (..., m, k) or (k,); b: (..., k, n) or (k,)) on ``threads`` of
    gradreg's threads, each part a product on one BLAS thread: never BLAS's own threads, which
    OpenBLAS keeps spinning ~0.1 s after each call (gradreg's spin 0.5 ms): in ResNet50's
    training step they spun a fifth of the machine's CPU time (perf), on the core the step's
    other kernels needed. The longer of m and k is cut: m into row blocks of the result; k, the
    summed dimension (a filter gradient, a sum over a batch as a product with ones), into
    partial products added up, so each thread reads its own part of both operands."""
    m = a.shape[-2] if a.ndim > 1 else 1
    k = a.shape[-1]
    with blas_threads(1):
        if threads <= 1 or max(m, k) < 2 * threads:
            return np.matmul(a, b)
        if m >= k:
            shape = (*a.shape[:-1], b.shape[-1]) if b.ndim > 1 else a.shape[:-1]
            out = np.empty(shape, np.result_type(a.dtype, b.dtype))
            rows = split(m, threads)

            def row_block(i: int) -> None:
                r0, r1 = rows[i]
                if b.ndim > 1:
                    np.matmul(a[..., r0:r1, :], b, out=out[..., r0:r1, :])
                else:
                    np.matmul(a[..., r0:r1, :], b, out=out[..., r0:r1])
            parallel(row_block, len(rows), threads)
            return out
        sums = split(k, threads)

        def partial(i: int) -> np.ndarray:
            k0, k1 = sums[i]
            return np.matmul(a[..., k0:k1], b[..., k0:k1, :] if b.ndim > 1 else b[k0:k1])
        parts = parallel(partial, len(sums), threads)
    total = parts[0]
    for part in parts[1:]:
        np.add(total, part, out=total)
    return total



def column_sums(matrix: np.ndarray) -> np.ndarray:
    """``matrix.sum(axis=0)`` of a 2-D array as a product with a row of ones: one BLAS call.
    Summing (8, 32, 32, c) values over their leading axes, it took 4-14x less time than
    NumPy's sum over them, and 1.8x less than an einsum over rows of 16 channels (float32 and
    float64; the additions come in another order, so the last bits may differ)."""
    return np.ones(matrix.shape[0], matrix.dtype) @ matrix


def split(n: int, parts: int) -> list[tuple[int, int]]:
    """``range(n)`` cut into ``parts`` contiguous (start, stop) pieces of nearly equal size."""
    bounds = [n * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]
