"""Timing shared by the benchmarks.

Two ways to run contenders side by side, so that a burst of load on a shared machine hits
them all alike; the median of each one's samples is its figure:

* :func:`interleaved_medians`: in this process, one call each per round;
* :func:`process_medians`: each contender in a process of its own (so that TensorFlow's
  spinning thread pools, JAX's or a BLAS's threads cannot slow the others, and each pays
  its own imports), the processes taking turns a few calls at a time. Only the process
  whose turn it is runs; the others wait on a pipe. A turn starts once the threads of the
  process before it have gone to sleep (:func:`wait_quiet`): a BLAS's or TensorFlow's pool
  threads spin for up to ~0.1 s after their last task, which would otherwise be load on the
  next contender's turn and not on their own.

A contender in its own process is named by a *factory*, ``"module:function"`` of a module in
bench/, called with keyword arguments in the worker; it returns the zero-argument callable
to time (checking its results first, raising if they are wrong). :func:`busy_process` starts
one process that keeps a core busy, to measure under load; :func:`load_average` says what
the machine's load was.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

BENCH = pathlib.Path(__file__).resolve().parent


def tree_path(src: str) -> str:
    """PYTHONPATH that runs gradreg from the source tree ``src`` (``git archive <commit> | tar
    -x -C SRC``): the tree, its plugins, then bench/ itself."""
    return os.pathsep.join([src, os.path.join(src, "plugins"), str(BENCH)])


def interleaved_medians(contenders: dict[str, Callable[[], object]], repeats: int,
                        warmup: int = 3) -> dict[str, float]:
    """Median seconds per call of each contender, measured round-robin."""
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


@dataclass
class Contender:
    """A contender run in a process of its own: ``factory`` ("module:function" in bench/) called
    with ``kwargs`` returns the callable to time; ``env`` is added to the process's environment."""
    name: str
    factory: str
    kwargs: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)


@dataclass
class Figures:
    """One contender's samples (seconds per call: wall clock, and the process's CPU time)."""
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    setup_seconds: float = 0.0
    info: dict = field(default_factory=dict)
    quiet_seconds: list[float] = field(default_factory=list)   # waits for the others' threads to sleep

    @property
    def median(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)


def settle(step: Callable[[], object], calls: int = 2) -> None:
    """Run ``step`` until gradreg has built its compiled kernels and chosen how its calls use the
    cores: a plan starts with NumPy kernels and builds numba's in the background once it is
    reused (gradreg.backends.numba.jit); MODE_SETTLE calls later it tries side tasks, split
    kernels and one thread, in blocks of calls, and keeps the fastest (gradreg.runtime.plan.Plan)."""
    for _ in range(calls):
        step()
    try:
        from gradreg.backends.numba.jit import wait_for_kernels
    except ImportError:
        return
    wait_for_kernels()
    for _ in range(settling_calls()):
        step()


def settling_calls() -> int:
    """The calls after the compiled kernels are in until the plan's trial of its modes has
    decided, a close decision's extra rounds included (0 for a gradreg without the trial)."""
    try:
        from gradreg.runtime import plan
        if hasattr(plan, "longest_trial"):
            return plan.MODE_SETTLE + plan.longest_trial() + 1
        more = getattr(plan, "MODE_MORE", 0)     # older versions: MODE_MORE, or no extra rounds
        return plan.MODE_SETTLE + (1 + more) * 3 * plan.MODE_ROUNDS * plan.MODE_BLOCK + 1
    except (ImportError, AttributeError):
        return 0


def load_average() -> float:
    """The 1-minute load average (the machine has 2 cores; above ~2.5 others were busy)."""
    return os.getloadavg()[0]


class _Worker:
    """The parent's end of one contender's process."""

    def __init__(self, contender: Contender):
        env = dict(os.environ, **{k: str(v) for k, v in contender.env.items()})
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        self.name = contender.name
        # GRADREG_BENCH_PYTHON: another interpreter (bench/protocol.py --python, A/B of two versions)
        python = env.pop("GRADREG_BENCH_PYTHON", sys.executable)
        self.process = subprocess.Popen([python, str(BENCH / "_timing.py"), "--worker"], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(BENCH))
        try:
            self.request({"setup": contender.factory, "kwargs": contender.kwargs})
        except BaseException:
            self.close()
            raise

    def request(self, message: dict) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            raise RuntimeError(f"benchmark worker {self.name!r} died (exit status {self.process.returncode}); "
                               f"its stderr is above")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"benchmark worker {self.name!r}: {reply['error']}")
        return reply

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _running_threads(pid: int) -> int:
    """Threads of process ``pid`` in state R (running or runnable); 0 where /proc is missing."""
    running = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2:][:1] == b"R":
            running += 1
    return running


QUIET_TIMEOUT = 1.0


def wait_quiet(pids: list[int], timeout: float = QUIET_TIMEOUT) -> float:
    """Wait until no thread of ``pids`` is runnable (at most ``timeout`` seconds); the seconds waited."""
    start = time.perf_counter()
    while any(_running_threads(pid) for pid in pids) and time.perf_counter() - start < timeout:
        time.sleep(0.001)
    return time.perf_counter() - start


def process_medians(contenders: list[Contender], rounds: int = 10, calls: int = 3,
                    warmup: int = 3, processes: int = 1) -> dict[str, Figures]:
    """Each contender in its own process (``processes`` of them, their calls pooled); ``rounds``
    times, each process in turn makes ``calls`` timed calls (after ``warmup`` untimed ones), once
    the other processes are quiet (:func:`wait_quiet`; the seconds it took are each one's
    ``quiet_seconds``). Returns each contender's Figures.

    On this project's 2-vCPU machines one configuration ran 22-30 ms on a CNN step in four
    processes side by side (where a process's memory and threads landed): several processes per
    contender measure the configuration rather than one process's luck."""
    workers: list[_Worker] = []
    figures: dict[str, Figures] = {}
    try:
        for _ in range(processes):
            for c in contenders:
                start = time.perf_counter()
                workers.append(_Worker(c))
                figures.setdefault(c.name, Figures(setup_seconds=time.perf_counter() - start))
        for w in workers:
            w.request({"run": warmup})
        for _ in range(rounds):
            for w in workers:
                others = [o.process.pid for o in workers if o is not w]
                figures[w.name].quiet_seconds.append(wait_quiet(others))
                reply = w.request({"run": calls})
                figures[w.name].wall.extend(reply["wall"])
                figures[w.name].cpu.extend(reply["cpu"])
        for w in workers:
            figures[w.name].info = w.request({"info": True})["info"]
    finally:
        for w in workers:
            w.close()
    return figures


@contextlib.contextmanager
def busy_process() -> Iterator[int]:
    """One process spinning on one core for the duration (the 'under load' measurements)."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        yield process.pid
    finally:
        process.kill()
        process.wait()


def report_load(label: str = "") -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min) {five:.2f} (5 min){' ' + label if label else ''}"


def _serve() -> None:
    """The worker's loop: JSON requests on stdin, JSON replies on the original stdout (anything
    the contender prints goes to stderr)."""
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    step: Callable[[], object] | None = None
    info: dict = {}
    for line in sys.stdin:
        message = json.loads(line)
        try:
            if "setup" in message:
                module, function = message["setup"].split(":")
                made = getattr(importlib.import_module(module), function)(**message["kwargs"])
                step, info = (made if isinstance(made, tuple) else (made, {}))
                reply: dict = {"ok": True}
            elif "run" in message:
                assert step is not None
                wall, cpu = [], []
                for _ in range(message["run"]):
                    w, c = time.perf_counter(), time.process_time()
                    step()
                    wall.append(time.perf_counter() - w)
                    cpu.append(time.process_time() - c)
                reply = {"wall": wall, "cpu": cpu}
            else:
                reply = {"info": info() if callable(info) else info}
        except Exception as exc:  # reported to the parent, which raises
            import traceback
            traceback.print_exc()
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__" and "--worker" in sys.argv:
    sys.path.insert(0, str(BENCH))
    _serve()
