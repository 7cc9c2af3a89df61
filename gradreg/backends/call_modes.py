"""How a plan call of the numba backend uses the cores besides splitting kernels
(gradreg.runtime.plan.CallModes): :class:`SideTasks` runs the call's side items on a kernel
worker while the call goes on, :class:`SingleThreaded` keeps the call on one thread."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from gradreg.backends import threads, workers
from gradreg.runtime.executor import InPlace

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
    it now and returns its value: when this process may use one thread only, the worker is
    busy with another call, the task is small (under SIDE_MIN_BYTES of array arguments) or
    large (over SIDE_QUEUE_BYTES), or the tasks waiting hold SIDE_QUEUE_BYTES already; a task
    reading another's value is always queued after it. The worker runs them in order while
    the calling thread goes on, and sleeps (on a condition, not spinning: the threads may share a
    physical core) while none waits. :meth:`take` gives a task's value, its error raised
    there so that the plan's line names the node; the first take runs what still waits in
    the calling thread too, and waits for the worker. :meth:`cancel` (the plan failed) drops
    what waits. While a call holds the worker, :func:`gradreg.backends.threads.threads_for`
    counts one thread fewer,
    so that the two threads do not also split kernels among themselves."""

    __slots__ = ("queue", "ready", "pool", "closing", "posted", "held", "waiting_bytes")

    def __init__(self) -> None:
        self.queue: list[Deferred] = []
        self.waiting_bytes = 0
        self.ready = threading.Condition(threading.Lock())
        self.pool: workers.SpinPool | None = None
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
        pool = workers.POOLS.spin_pool_soon()
        if pool is None or threads.max_threads() - threads.HOLDS.side_workers < 2 \
                or not pool.lock.acquire(blocking=False):
            self.held = False
            return False
        self.pool, self.held = pool, True
        threads.HOLDS.change(side=1)
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
            threads.HOLDS.change(side=-1)
            pool.lock.release()


class SingleThreaded(InPlace):
    """A plan call kept on one thread (a plan's "single" mode, gradreg.runtime.plan.Plan): its
    side items run in place and, until :meth:`close`, :func:`gradreg.backends.threads.max_threads`
    is 1, so that no kernel splits its work and BLAS runs on one thread. Other calls running meanwhile (another
    session's, in another thread) see the same limit: with two calls at once, one thread each
    is what the cores allow anyway."""

    __slots__ = ("open",)

    def __init__(self) -> None:
        threads.HOLDS.change(single=1)
        self.open = True

    def cancel(self) -> None:
        self.close()

    def close(self) -> None:
        if self.open:
            self.open = False
            threads.HOLDS.change(single=-1)
