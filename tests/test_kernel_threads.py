"""gradreg.backends.workers.parallel with the spinning pool (numba loaded): parts in order, errors
of any part raised in the caller once every part has finished, concurrent callers served,
workers woken after they went to sleep; GRADREG_SPIN=0 keeps the sleeping executor."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from gradreg.backends import threads, workers

numba = pytest.importorskip("numba")

pytestmark = pytest.mark.skipif(threads.cores() < 2, reason="one core: parallel runs every part in the caller")


def spin_pool():
    pool = workers.spin_pool()
    if pool is None:
        pytest.skip("the spinning pool is switched off here (GRADREG_SPIN=0)")
    return pool


def test_parts_come_back_in_order_part_zero_from_the_caller():
    spin_pool()
    seen = []

    def part(i):
        seen.append((i, threading.get_ident()))
        return i * 10
    assert workers.parallel(part, 7, 2) == [10 * i for i in range(7)]
    assert sorted(i for i, _ in seen) == list(range(7))               # each part once
    assert [tid for i, tid in seen if i == 0] == [threading.get_ident()]


def test_a_worker_takes_parts_while_the_caller_is_busy():
    spin_pool()
    started = threading.Event()
    where = {}

    def part(i):
        where[i] = threading.get_ident()
        if i == 0:                       # the caller's part waits until another thread runs part 1
            assert started.wait(30)
        else:
            started.set()
        return i
    assert workers.parallel(part, 2, 2) == [0, 1]
    assert where[0] == threading.get_ident() and where[1] != threading.get_ident()


def test_the_caller_takes_the_parts_of_a_worker_that_does_not_come():
    # A worker another process keeps off its core, played by a worker busy with a task of ours:
    # the call does not wait for it, its caller runs every part.
    pool = spin_pool()
    release, busy = threading.Event(), threading.Event()

    def blocker(_):
        busy.set()
        release.wait(30)
    with pool.lock:
        number = pool.post(blocker, 0)
    try:
        assert busy.wait(30)
        where = []

        def part(i):
            where.append(threading.get_ident())
            return i * 2
        assert workers.parallel(part, 6, 2) == [0, 2, 4, 6, 8, 10]
        assert set(where) == {threading.get_ident()}
    finally:
        release.set()
    with pool.lock:
        pool.wait_posted(number + 1, 0)      # the late worker ran the call's (empty) share after
    assert workers.parallel(lambda i: i + 1, 2, 2) == [1, 2]


def test_waiting_for_a_task_waits_for_that_task_when_the_one_before_was_never_waited_for():
    # A parallel call does not wait for a late worker; the next caller that needs its own task
    # run (side tasks) must not take that late worker's older number for its own.
    pool = spin_pool()
    release, busy, ran = threading.Event(), threading.Event(), []

    def blocker(_):
        busy.set()
        release.wait(30)
    with pool.lock:
        pool.post(blocker, 0)
        assert busy.wait(30)
        pool.post(lambda _: None, 0)          # a task of nobody's waiting, skipped or run late
        mine = pool.post(lambda _: ran.append(True), 0)
        threading.Timer(0.2, release.set).start()
        pool.wait_posted(mine, 0)
        assert ran == [True]


def test_a_workers_error_is_raised_in_the_caller_after_every_part_finished():
    spin_pool()
    finished = []

    def part(i):
        if i == 1:
            raise ValueError("part one failed")
        time.sleep(0.01)
        finished.append(i)
        return i
    with pytest.raises(ValueError, match="part one failed"):
        workers.parallel(part, 2)
    assert finished == [0]
    assert workers.parallel(lambda i: i + 1, 2) == [1, 2]       # the pool still works


def test_the_callers_error_waits_for_the_workers():
    spin_pool()
    finished = []

    def part(i):
        if i == 0:
            raise KeyError("part zero")
        time.sleep(0.02)
        finished.append(i)
        return i
    with pytest.raises(KeyError):
        workers.parallel(part, 2)
    assert finished == [1]       # part 1 had finished when the error reached the caller


def test_a_sleeping_worker_is_woken():
    spin_pool()
    time.sleep(workers.SPIN_SECONDS * 40)       # the worker has stopped spinning and sleeps
    assert workers.parallel(lambda i: i * 3, 2) == [0, 3]
    time.sleep(workers.SPIN_SECONDS * 40)
    assert workers.parallel(lambda i: i * 5, 2) == [0, 5]


def test_a_call_may_ask_its_workers_to_linger():
    """A call's ``linger``: its workers spin that long after its task before they sleep (a
    long fused loop's, workers.LONG_LINGER_SECONDS); the next call's default spin applies to
    the task after."""
    pool = spin_pool()
    asleep = pool.state[2::workers.SpinPool.SLOT]

    def wait_asleep(limit):
        start = time.perf_counter()
        while not asleep.all():
            if time.perf_counter() - start > limit:
                return False
            time.sleep(0.001)
        return True
    assert workers.parallel(lambda i: i, 2, linger=0.5) == [0, 1]
    time.sleep(0.1)
    assert not asleep[0], "the worker slept before its linger was over"
    assert wait_asleep(5.0)
    assert workers.parallel(lambda i: i, 2) == [0, 1]
    assert wait_asleep(0.1)          # the default: SPIN_SECONDS (0.5 ms) and a wake-up


def test_concurrent_callers_each_get_their_own_results():
    spin_pool()
    errors, results = [], {}

    def caller(k):
        try:
            values = [workers.parallel(lambda i, k=k: (k, i, float(np.sqrt(k + i))), 2) for _ in range(200)]
            results[k] = values[-1]
            assert all(v == values[0] for v in values)
        except Exception as exc:   # pragma: no cover (reported below)
            errors.append(exc)
    callers = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert not errors
    assert results == {k: [(k, 0, float(np.sqrt(k))), (k, 1, float(np.sqrt(k + 1)))] for k in range(4)}


def test_gradreg_spin_0_keeps_the_sleeping_executor(monkeypatch):
    monkeypatch.setattr(workers, "POOLS", workers._Pools())
    monkeypatch.setenv("GRADREG_SPIN", "0")
    assert workers.spin_pool() is None
    assert workers.parallel(lambda i: i - 1, 2) == [-1, 0]
    assert workers.POOLS.executor is not None


def test_a_kernel_call_does_not_make_the_spinning_pool_itself(monkeypatch):
    # Making it (a compiled spin loaded and calibrated) is left to a thread of its own; the call
    # that found it missing takes the sleeping executor, and later calls the pool.
    if workers.spin_pool() is None:
        pytest.skip("the spinning pool is switched off here (GRADREG_SPIN=0)")
    monkeypatch.setattr(workers, "POOLS", workers._Pools())
    assert workers.parallel(lambda i: i * 3, 2) == [0, 3]
    maker = workers.POOLS.maker
    assert maker is not None and maker is not threading.current_thread()
    maker.join(60)
    made = workers.POOLS.spinning
    assert made is not None and workers.POOLS.executor is not None
    assert workers.parallel(lambda i: i * 3, 2) == [0, 3]
    assert workers.POOLS.maker is maker and workers.spin_pool() is made     # made once


def test_a_compiled_loop_without_the_gil_runs_on_both_threads():
    # what the pool is for: numba nogil loops in the caller and a worker at once
    spin_pool()

    @numba.njit(nogil=True)
    def fill(out, lo, hi):
        for i in range(lo, hi):
            out[i] = np.sqrt(i)
    out = np.zeros(200_000)
    pieces = workers.split(len(out), 2)
    workers.parallel(lambda i: fill(out, *pieces[i]), 2)
    np.testing.assert_array_equal(out, np.sqrt(np.arange(len(out))))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_starts_its_own_workers():
    spin_pool()
    assert workers.parallel(lambda i: i, 2) == [0, 1]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:     # the child: the parent's workers are not here
        try:
            ok = workers.parallel(lambda i: i + 7, 2) == [7, 8]
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    assert answer == b"1"


def test_a_worker_keeps_nothing_of_a_finished_task():
    # the task's closure holds a kernel's arrays: kept by an idle worker, they outlived the
    # plan's release of them (a CNN step's peak memory rose by 0.7 MiB)
    import gc
    import weakref

    spin_pool()
    values = np.arange(100_000, dtype=np.float64)
    gone = weakref.ref(values)

    def part(i, values=values):
        return float(values[i::2].sum())
    assert workers.parallel(part, 2) == [float(values[0::2].sum()), float(values[1::2].sum())]
    del values, part
    gc.collect()
    assert gone() is None


def test_a_new_spinning_pool_posts_without_compiling(tmp_path):
    """Everything a post runs in compiled code is compiled when the pool is made: a post
    compiling in the caller's call waited behind numba's compiler lock for as long as the
    background builder held it (seconds, from an empty kernel cache)."""
    script = ("from gradreg.backends import workers\n"
              "from gradreg.backends.native import engine\n"
              "pool = workers.SpinPool(1)\n"
              "made = engine.compiled_count()\n"
              "number = pool.post(lambda i: i, 0, 5)\n"
              "pool.wait_posted(number)\n"
              "print(made, engine.compiled_count(), pool.results[0])\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env,
                            timeout=300)
    made, after, outcome = result.stdout.split(maxsplit=2)
    assert int(made) == 1 and after == made     # one module: the spin and the publish
    assert outcome.strip() == "(True, 5)"
