"""A library's manners (issue 31): after gradreg's calls return, the process is as the caller left
it -- BLAS's threads, every thread's CPU affinity, signal handlers, warnings filters, the working
directory, NumPy's error settings and the interpreter's -- and gradreg uses no more threads than
the caller allows: the process's affinity, its container's CPU quota (cgroup v1 and v2, read
from a tree of files the tests make), GRADREG_THREADS, OMP_NUM_THREADS and threadpoolctl's
limits. None of these tests times anything."""
from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import gradreg as gr
from gradreg.backends import threads, workers
from gradreg_plugins.nn import conv

threadpoolctl = pytest.importorskip("threadpoolctl")


def _cnn_graph(seed: int = 0):
    """A small CNN's forward and gradients: a convolution large enough to share its batch
    blocks among threads, a depthwise one (numba's split loops), products, a sum."""
    rng = np.random.default_rng(seed)
    g = gr.Graph()
    with g.as_default():
        x = gr.placeholder(gr.float32, [16, 16, 16, 8], name="x")
        f = gr.constant(rng.standard_normal((3, 3, 8, 16)).astype(np.float32) * 0.1)
        d = gr.constant(rng.standard_normal((3, 3, 16, 1)).astype(np.float32) * 0.1)
        w = gr.constant(rng.standard_normal((16 * 16 * 16, 10)).astype(np.float32) * 0.01)
        h = gr.nn.relu(gr.nn.conv2d(x, f, strides=[1, 1, 1, 1], padding="SAME"))
        h = gr.apply_op("DepthwiseConv2dNative", h, d, strides=[1, 1, 1, 1], padding="SAME")
        logits = gr.matmul(gr.reshape(h, [16, -1]), w)
        loss = gr.reduce_sum(gr.square(logits))
        grads = gr.gradients(loss, [x, f, d, w])
    return g, x, [loss, *grads], rng.standard_normal((16, 16, 16, 8)).astype(np.float32)


def _thread_affinities() -> dict[int, frozenset[int]]:
    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            found[int(tid)] = frozenset(os.sched_getaffinity(int(tid)))
        except OSError:     # the thread ended meanwhile
            continue
    return found


def _process_state() -> dict:
    """Everything a call must leave as it found it (that Python lets a test read)."""
    return {
        "blas and openmp threads": [(i["internal_api"], i["filepath"], i["num_threads"])
                                    for i in threadpoolctl.threadpool_info()],
        "affinity": os.sched_getaffinity(0),
        "signal handlers": {s: signal.getsignal(s) for s in signal.valid_signals()
                            if s not in (signal.SIGKILL, signal.SIGSTOP)},
        "warnings filters": list(warnings.filters),
        "cwd": os.getcwd(),
        "numpy errors": np.geterr(),
        "numpy print options": np.get_printoptions(),
        "switch interval": sys.getswitchinterval(),
        "recursion limit": sys.getrecursionlimit(),
        "gc": (gc.isenabled(), gc.get_threshold()),
        "environment": dict(os.environ),
        "logging": (logging.getLogger().level, list(logging.getLogger().handlers)),
        "priority": os.getpriority(os.PRIO_PROCESS, 0),
        "umask": os.umask(os.umask(0o22)),
        "numpy allocator": _numpy_allocator(),
    }


def _numpy_allocator() -> str:
    """The name of the memory handler NumPy allocates with in this thread's context (NEP 49)."""
    import importlib
    multiarray = importlib.import_module("numpy._core.multiarray" if hasattr(np, "_core") else "numpy.core.multiarray")
    return str(multiarray.get_handler_name())


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity here")
def test_training_calls_leave_the_process_as_they_found_it():
    pytest.importorskip("numba")
    g, x, fetches, value = _cnn_graph()
    session = gr.Session(g, backend="numba", check_outputs=False)
    run = session.make_callable(fetches, [x])
    first = run(value)      # numba imported, pools and BLAS controllers made: the state from now on
    before, affinities = _process_state(), _thread_affinities()
    for _ in range(80):     # past the plan's trial of side tasks, split kernels and one thread
        got = run(value)
    assert session.backend == "numba"
    for a, b in zip(first, got):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-4 * float(np.max(np.abs(a))))
    after = _process_state()
    assert {k: v for k, v in after.items() if before[k] != v} == {}
    # no thread of the process, the caller's or gradreg's own, had its affinity changed
    now = _thread_affinities()
    assert all(now[tid] == affinities[tid] for tid in affinities if tid in now)
    assert all(cpus == before["affinity"] for tid, cpus in now.items() if tid not in affinities)


def test_blas_threads_come_back_to_the_callers_count_after_a_split_convolution(monkeypatch):
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        if threads.blas_limit() != 2:
            pytest.skip("NumPy's BLAS here cannot run two threads")
        monkeypatch.setattr(threads, "cores", lambda: 2)
        monkeypatch.delenv("GRADREG_THREADS", raising=False)
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        inside = []
        real_parallel = workers.parallel

        def parallel(fn, parts, threads_used=None):
            inside.append((threads_used, threads.blas_limit(), threadpoolctl.threadpool_info()))
            return real_parallel(fn, parts, threads_used)
        monkeypatch.setattr(conv.ks, "parallel", parallel)
        g, x, fetches, value = _cnn_graph(1)
        gr.Session(g, backend="numpy").run(fetches, {x: value})
        assert inside and {parts for parts, _, _ in inside} == {2}
        # inside the split kernel BLAS ran on one thread; the caller's count stayed what it knows
        assert all(limit == 2 for _, limit, _ in inside)
        assert all(i["num_threads"] == 1 for _, _, info in inside for i in info if i["user_api"] == "blas")
        assert [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"] == [2] * len(
            [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"])


def test_the_blas_count_is_put_back_once_the_last_scoped_change_ends():
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        if threads.blas_limit() != 2:
            pytest.skip("NumPy's BLAS here cannot run two threads")
        blas = threads._the_blas()
        entered, leave = threading.Event(), threading.Event()

        def other_caller():
            with threads.blas_threads(1):
                entered.set()
                leave.wait(10)
        t = threading.Thread(target=other_caller)
        t.start()
        entered.wait(10)
        with threads.blas_threads(1):
            assert blas.current() == 1
        assert blas.current() == 1           # the other caller is still inside
        assert threads.blas_limit() == 2     # and the caller's count is known
        leave.set()
        t.join()
        assert blas.current() == 2
        with threads.blas_threads(4):         # never raised
            assert blas.current() == 2


def test_threadpoolctl_limits_are_honoured(monkeypatch):
    monkeypatch.setattr(threads, "cores", lambda: 4)
    monkeypatch.delenv("GRADREG_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    if not threads._the_blas().setters:
        pytest.skip("no BLAS threadpoolctl can limit here")
    with threadpoolctl.threadpool_limits(limits=1):
        assert threads.max_threads() == 1
        assert threads.threads_for(1e12, 1.0) == 1
        seen = []
        monkeypatch.setattr(conv.ks, "parallel", lambda fn, parts, used=None: seen.append(used)
                            or workers.parallel(fn, parts, used))
        g, x, fetches, value = _cnn_graph(2)
        gr.Session(g, backend="numpy").run(fetches, {x: value})
        assert seen == []                    # no convolution split its batch
    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):
        assert threads.max_threads() == min(3, threads.blas_limit())


@pytest.mark.parametrize("variable,value,expected", [
    ("GRADREG_THREADS", "1", 1), ("GRADREG_THREADS", "3", 3), ("GRADREG_THREADS", "9", 4),
    ("OMP_NUM_THREADS", "1", 1), ("OMP_NUM_THREADS", "2,1", 2), ("OMP_NUM_THREADS", "bad", 4)])
def test_thread_variables_are_honoured(monkeypatch, variable, value, expected):
    monkeypatch.setattr(threads, "cores", lambda: 4)
    monkeypatch.setattr(threads, "blas_limit", lambda: 0)
    monkeypatch.delenv("GRADREG_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv(variable, value)
    assert threads.max_threads() == expected
    assert threads.threads_for(100.0, 1.0) == expected
    assert threads.threads_for(1.5, 1.0) == 1        # a small call stays on one thread


def test_gradreg_threads_wins_over_omp_num_threads(monkeypatch):
    monkeypatch.setattr(threads, "cores", lambda: 4)
    monkeypatch.setattr(threads, "blas_limit", lambda: 0)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("GRADREG_THREADS", "2")
    assert threads.max_threads() == 2


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_the_callers_affinity_is_read_at_each_call(monkeypatch):
    monkeypatch.setattr(threads, "cgroup_cpu_limit", lambda: None)
    allowed = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(allowed)})
        assert threads.cores() == 1 and threads.threads_for(1e12, 1.0) == 1
    finally:
        os.sched_setaffinity(0, allowed)
    assert threads.cores() == len(allowed)


# -- the container's CPU quota, from a tree of files ----------------------------------------------

def _tree(tmp_path: Path, cgroup: str, mountinfo: list[str], files: dict[str, str]) -> Path:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    (tmp_path / "proc/self/mountinfo").write_text("\n".join(mountinfo) + "\n")
    for name, text in files.items():
        path = tmp_path / name.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


V2_MOUNT = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate"
V1_MOUNT = "35 25 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct"


@pytest.mark.parametrize("cpu_max,expected", [("max 100000", None), ("100000 100000", 1.0),
                                              ("150000 100000", 1.5), ("50000 100000", 0.5)])
def test_a_cgroup_v2_quota_is_read(tmp_path, cpu_max, expected):
    root = _tree(tmp_path, "0::/job/task\n", [V2_MOUNT], {"/sys/fs/cgroup/job/task/cpu.max": cpu_max + "\n"})
    assert threads.cgroup_cpu_limit.__wrapped__(root) == expected


def test_the_lowest_quota_along_the_hierarchy_counts(tmp_path):
    root = _tree(tmp_path, "0::/job/task\n", [V2_MOUNT], {
        "/sys/fs/cgroup/job/task/cpu.max": "max 100000\n", "/sys/fs/cgroup/job/cpu.max": "200000 100000\n",
        "/sys/fs/cgroup/cpu.max": "300000 100000\n"})
    assert threads.cgroup_cpu_limit.__wrapped__(root) == 2.0


@pytest.mark.parametrize("quota,expected", [("-1", None), ("50000", 0.5), ("250000", 2.5)])
def test_a_cgroup_v1_quota_is_read(tmp_path, quota, expected):
    root = _tree(tmp_path, "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n", [V1_MOUNT], {
        "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": quota + "\n",
        "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"})
    assert threads.cgroup_cpu_limit.__wrapped__(root) == expected


def test_a_container_sees_its_own_cgroup_at_the_mounts_root(tmp_path):
    # In a container the mount's root is the container's cgroup: /proc/self/cgroup names the
    # host's path, the files are at the mount point itself.
    mount = "35 25 0:30 /docker/abc /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu"
    root = _tree(tmp_path, "3:cpu:/docker/abc\n", [mount], {
        "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "100000\n", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"})
    assert threads.cgroup_cpu_limit.__wrapped__(root) == 1.0


def test_no_cgroup_files_means_no_quota(tmp_path):
    assert threads.cgroup_cpu_limit.__wrapped__(tmp_path) is None
    root = _tree(tmp_path, "0::/\n", [V2_MOUNT], {})
    assert threads.cgroup_cpu_limit.__wrapped__(root) is None


@pytest.mark.parametrize("quota,expected", [(0.5, 1), (1.0, 1), (1.5, 2), (8.0, 3)])
def test_cores_are_the_affinity_within_the_quota(monkeypatch, quota, expected):
    monkeypatch.setattr(threads, "affinity_cores", lambda: 3)
    monkeypatch.setattr(threads, "cgroup_cpu_limit", lambda: quota)
    assert threads.cores() == expected
    monkeypatch.setattr(threads, "blas_limit", lambda: 0)
    monkeypatch.delenv("GRADREG_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads.max_threads() == expected


class _Mallopt:
    """glibc's mallopt as the tests see it: the calls it got."""

    def __init__(self):
        self.calls = []

    def __call__(self, param, value):
        self.calls.append((param, value))
        return 1


@pytest.fixture
def mallopt(monkeypatch):
    """gradreg.backends.memory with a recording mallopt, fresh (no decision taken yet)."""
    from gradreg.backends import memory
    recorder = _Mallopt()

    class _Libc:
        mallopt = recorder
    monkeypatch.setattr(memory.ctypes, "CDLL", lambda _: _Libc())
    monkeypatch.setattr(memory.platform, "system", lambda: "Linux")
    monkeypatch.setattr(memory.platform, "libc_ver", lambda: ("glibc", "2.36"))
    monkeypatch.setattr(memory, "_done", False)
    monkeypatch.setattr(memory, "_allowed", False)
    for name in ("GRADREG_MALLOC", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    return memory, recorder


def _run_a_plan(backend):
    g = gr.Graph()
    with g.as_default():
        x = gr.placeholder(gr.float64, [3], name="x")
        y = gr.reduce_sum(gr.exp(x) * 2.0)
    assert gr.Session(g, backend=backend).run(y, {x: np.zeros(3)}) == 6.0


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_the_library_leaves_malloc_alone_unless_asked(mallopt, monkeypatch, backend):
    if backend == "numba":
        pytest.importorskip("numba")
    memory, recorder = mallopt
    _run_a_plan(backend)
    assert recorder.calls == []                               # a setting glibc cannot put back
    monkeypatch.setenv("GRADREG_MALLOC", "retain")
    _run_a_plan(backend)
    assert recorder.calls == [(memory.M_MMAP_THRESHOLD, 32 << 20), (memory.M_TRIM_THRESHOLD, 256 << 20)]
    _run_a_plan(backend)
    assert len(recorder.calls) == 2                           # once per process


def test_the_gradreg_command_keeps_freed_memory_in_its_own_process(mallopt, monkeypatch, capsys):
    from gradreg import cli
    memory, recorder = mallopt
    monkeypatch.setattr(sys, "argv", ["gradreg", "ops", "Exp"])
    with pytest.raises(SystemExit) as exit_:
        cli.entry()
    gc.unfreeze()                                            # entry froze the objects of this process
    assert exit_.value.code == 0 and "Exp" in capsys.readouterr().out
    assert memory.retain_freed_memory() is True and len(recorder.calls) == 2
    monkeypatch.setattr(memory, "_done", False)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")   # the user's own setting wins
    assert memory.retain_freed_memory() is False and len(recorder.calls) == 2


@pytest.mark.parametrize("limit, expected", [("1", 1), (None, 2)])
def test_a_product_of_run_time_sizes_keeps_to_the_threads_it_is_given(monkeypatch, limit, expected):
    # MatMul of shapes known only when it runs (a loop gradient's stacked rows): its BLAS call
    # gets the threads its size earns within GRADREG_THREADS, as a product of static shapes does
    from gradreg_plugins.math import linalg_kernels
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        if threads.blas_limit() != 2:
            pytest.skip("NumPy's BLAS here cannot run two threads")
        monkeypatch.setattr(threads, "cores", lambda: 2)
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        if limit is None:
            monkeypatch.delenv("GRADREG_THREADS", raising=False)
        else:
            monkeypatch.setenv("GRADREG_THREADS", limit)
        seen = []
        real_product = linalg_kernels._product

        def product(*args):
            seen.append(threads._the_blas().current())
            return real_product(*args)
        monkeypatch.setattr(linalg_kernels, "_product", product)
        g = gr.Graph()
        with g.as_default():
            a = gr.placeholder(gr.float64, [None, None])
            b = gr.placeholder(gr.float64, [None, None])
            c = gr.matmul(a, b, transpose_b=True)
        rng = np.random.default_rng(5)
        x, y = rng.normal(size=(300, 200)), rng.normal(size=(100, 200))
        np.testing.assert_allclose(gr.Session(g, backend="numpy").run(c, {a: x, b: y}), x @ y.T, rtol=1e-12)
        assert seen == [expected]
        assert threads._the_blas().current() == 2
