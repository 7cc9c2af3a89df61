"""A fuzz campaign: mutants generated deterministically from (campaign seed, index), evaluated in a
worker process (so a crash or a hang that no alarm can interrupt is caught and the campaign goes on),
outcomes counted per backend.

Three kinds of job, chosen per index:

``graph``  a mutated graph file, loaded, written back, run on every backend, differentiated (in-process)
``feed``   a seed graph with a hostile feed file, through the command line's ``run`` (in-process)
``cli``    a mutated graph or a hostile feed through ``python -m gradreg`` in a subprocess, with a timeout
``model``  a mutated SavedModel directory, TensorFlow or gradreg checkpoint directory, or ONNX file with
           external data, loaded, inspected, run, saved and cleaned up (tests/fuzz/models.py), with the
           escape oracle: nothing outside the model read, written or deleted
"""
from __future__ import annotations

import collections
import contextlib
import functools
import io
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .feeds import hostile_feed
from .models import ModelJob, evaluate_model_job, generate_model_job
from .mutate import Mutant, make_mutant
from .oracle import FAILURES, Reference, Verdict, classify_error, evaluate, time_limit, values_equal
from .seeds import Seed, all_seeds

# The limits a fuzz run sets (lower than the defaults, so a mutant that would take minutes under
# the defaults is stopped in milliseconds; the limits themselves are what is under test).
FUZZ_ENV = {
    "GRADREG_MAX_ELEMENTS": str(10**7),
    "GRADREG_MAX_LOOP_ITERATIONS": str(10**4),
    "GRADREG_MAX_NODES": str(50_000),
    "GRADREG_CHECK_OUTPUTS": "1",
}
MEMORY_LIMIT = 4 << 30      # address space of a worker and of each command-line run


@dataclass
class Job:
    index: int
    kind: str                 # "graph", "feed" or "cli"
    seed: Seed
    mutant: Mutant
    must_fail: bool = False
    command: list[str] = field(default_factory=list)


def _pick_seed(rng: random.Random) -> Seed:
    seeds = all_seeds()
    return rng.choices(seeds, weights=[s.weight for s in seeds])[0]


@functools.cache
def seed_dtypes(name: str) -> dict[str, int]:
    """The DataType enum of each tensor of the seed called ``name`` (for mutations that insert nodes)."""
    import gradreg as gr
    seed = next(s for s in all_seeds() if s.name == name)
    try:
        graph = gr.load_graph(seed.binary)
    except Exception:
        return {}
    return {t.name: t.dtype.enum for op in graph.get_operations() for t in op.outputs if t.dtype is not None}


def model_job(campaign_seed: int, index: int, model_fraction: float) -> ModelJob | None:
    """The model job ``index`` of the campaign is, for that share of the indices (None otherwise)."""
    rng = random.Random(f"{campaign_seed}:{index}:model")
    return generate_model_job(rng) if rng.random() < model_fraction else None


def describe(campaign_seed: int, index: int, cli_fraction: float, model_fraction: float) -> dict[str, Any]:
    """What job ``index`` is: its kind, seed and mutations (for reports of a worker that died)."""
    found = model_job(campaign_seed, index, model_fraction)
    if found is not None:
        return {"kind": f"model:{found.kind}", "seed": found.seed, "how": found.how}
    job = generate(campaign_seed, index, cli_fraction)
    return {"kind": job.kind, "seed": job.seed.name, "how": job.mutant.how}


def generate(campaign_seed: int, index: int, cli_fraction: float = 0.05) -> Job:
    """The job ``index`` of the campaign ``campaign_seed`` (the same every time)."""
    rng = random.Random(f"{campaign_seed}:{index}")
    seed = _pick_seed(rng)
    other = _pick_seed(rng)
    roll = rng.random()
    if roll < 0.12 or (roll < 0.12 + cli_fraction and rng.random() < 0.4):
        data, suffix, how, must_fail = hostile_feed(rng, seed.feeds)
        mutant = Mutant(seed.binary, ".pb", [f"feed: {how}"], False, dict(seed.feeds), list(seed.fetches), seed.grad,
                        feed_file=data, feed_suffix=suffix)
        kind = "feed" if roll < 0.12 else "cli"
        return Job(index, kind, seed, mutant, must_fail)
    mutant = make_mutant(rng, seed, other, seed_dtypes(seed.name))
    kind = "cli" if roll < 0.12 + cli_fraction else "graph"
    job = Job(index, kind, seed, mutant)
    if kind == "cli":
        job.command = [rng.choice(["run", "run", "grad", "inspect", "convert"])]
    return job


# -- the worker ---------------------------------------------------------------------------------------

class Worker:
    """Evaluates jobs in this process (the worker subprocess, or a test that calls it directly)."""

    def __init__(self, backends: list[str], seconds: float, cli_fraction: float, model_fraction: float = 0.0):
        self.backends = backends
        self.seconds = seconds
        self.cli_fraction = cli_fraction
        self.model_fraction = model_fraction
        self.references: dict[str, Reference | None] = {}
        self.directory = tempfile.mkdtemp(prefix="gradreg-fuzz-")

    def reference(self, seed: Seed) -> Reference | None:
        if seed.name not in self.references:
            self.references[seed.name] = _reference(seed, self.directory)
        return self.references[seed.name]

    def run(self, campaign_seed: int, index: int) -> dict[str, Any]:
        found = model_job(campaign_seed, index, self.model_fraction)
        if found is not None:
            return self._model(found, index)
        job = generate(campaign_seed, index, self.cli_fraction)
        verdict = Verdict()
        path = os.path.join(self.directory, f"mutant{job.mutant.suffix}")
        with open(path, "wb") as f:
            f.write(job.mutant.data)
        started = time.monotonic()
        if job.kind == "graph":
            evaluate(path, job.mutant, self.backends, self.reference(job.seed), verdict, self.seconds)
        elif job.kind == "feed":
            self._feed_in_process(job, verdict)
        else:
            self._command_line(job, path, verdict)
        for name in os.listdir(self.directory):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.directory, name))
        return {"index": index, "kind": job.kind, "seed": job.seed.name, "how": job.mutant.how,
                "verdict": verdict.kind, "stage": verdict.stage, "detail": verdict.detail,
                "stages": verdict.stages, "seconds": round(time.monotonic() - started, 3)}

    def _model(self, job: ModelJob, index: int) -> dict[str, Any]:
        verdict = Verdict()
        place = tempfile.mkdtemp(prefix="job-", dir=self.directory)
        started = time.monotonic()
        try:
            evaluate_model_job(job, place, self.backends, verdict, self.seconds)
        finally:
            _remove_tree(place)
        return {"index": index, "kind": f"model:{job.kind}", "seed": job.seed, "how": job.how,
                "verdict": verdict.kind, "stage": verdict.stage, "detail": verdict.detail,
                "stages": verdict.stages, "seconds": round(time.monotonic() - started, 3)}

    def _feed_in_process(self, job: Job, verdict: Verdict) -> None:
        """``gradreg run`` in this process with the hostile feed file, on each backend."""
        from gradreg import cli
        graph_path = os.path.join(self.directory, "seed.pb")
        with open(graph_path, "wb") as f:
            f.write(job.seed.binary)
        feed_path = _write_feed(self.directory, job)
        for backend in self.backends:
            argv = ["run", graph_path, "--feed", feed_path, "--fetch", ",".join(job.seed.fetches),
                    "--backend", backend]
            out, err = io.StringIO(), io.StringIO()
            try:
                with time_limit(self.seconds), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = cli.main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 2
            except BaseException as exc:   # noqa: B036
                kind, detail = classify_error(exc, [feed_path])
                verdict.note(f"feed:{backend}", kind if kind != "error" else "internal", detail)
                continue
            _judge_exit(verdict, f"feed:{backend}", code, err.getvalue(), job.must_fail, [feed_path, graph_path])

    def _command_line(self, job: Job, path: str, verdict: Verdict) -> None:
        """``python -m gradreg`` in a subprocess, with a timeout and a memory limit."""
        seed = job.seed
        feed_path = _write_feed(self.directory, job) if job.mutant.feed_file is not None else \
            _write_good_feed(self.directory, seed)
        out_path = os.path.join(self.directory, "out")
        command = job.command[0] if job.command else "run"
        graph_path = path if job.mutant.feed_file is None else os.path.join(self.directory, "seed.pb")
        if job.mutant.feed_file is not None:
            with open(graph_path, "wb") as f:
                f.write(seed.binary)
        argv = _command_argv(command, graph_path, feed_path, out_path, seed, self.backends)
        env = dict(os.environ, **FUZZ_ENV)
        try:
            done = subprocess.run([sys.executable, "-m", "gradreg", *argv], capture_output=True, text=True,
                                  timeout=self.seconds * 2 + 10, env=env, preexec_fn=_limit_memory)
        except subprocess.TimeoutExpired:
            verdict.note(f"cli:{command}", "timeout", " ".join(argv))
            return
        _judge_exit(verdict, f"cli:{command}", done.returncode, done.stderr, job.must_fail, [graph_path, feed_path])
        if done.returncode == 0 and command == "run" and job.mutant.preserves:
            reference = self.reference(seed)
            if reference is not None:
                with np.load(out_path + ".npz") as npz:
                    values = [npz[name] for name in seed.fetches]
                for a, b in zip(values, reference.forward):
                    if not values_equal(a, b):
                        verdict.note("cli:run~seed", "wrong", f"{a!r} vs {b!r}"[:300])
                        break


def _command_argv(command: str, graph: str, feeds: str, out: str, seed: Seed, backends: list[str]) -> list[str]:
    if command == "inspect":
        return ["inspect", graph]
    if command == "convert":
        return ["convert", graph, out + ".pbtxt"]
    if command == "grad" and seed.grad is not None:
        ys, xs, _ = seed.grad
        return ["grad", graph, "--ys", ",".join(ys), "--xs", ",".join(xs), "-o", out + ".pb", "--feed", feeds]
    return ["run", graph, "--feed", feeds, "--fetch", ",".join(seed.fetches), "-o", out + ".npz",
            "--backend", backends[-1]]


def _judge_exit(verdict: Verdict, stage: str, code: int, err: str, must_fail: bool, where: list[str]) -> None:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("gradreg: warning:")]
    if code == 0:
        verdict.note(stage, "wrong" if must_fail else "ok", "exit 0 for input that can never be good" if must_fail
                     else "")
    elif code == 1:
        if len(lines) != 1 or "Traceback" in err:
            verdict.note(stage, "multiline", err[-500:])
        elif "internal error" in lines[0]:
            verdict.note(stage, "internal", lines[0][:400])
        else:
            verdict.note(stage, "error", lines[0][:300])
    else:
        verdict.note(stage, "crash", f"exit status {code}: {err[-300:]}")


def _write_feed(directory: str, job: Job) -> str:
    path = os.path.join(directory, f"feed{job.mutant.feed_suffix}")
    with open(path, "wb") as f:
        f.write(job.mutant.feed_file or b"")
    if job.mutant.feed_suffix == ".npy":
        name = sorted(job.seed.feeds)[0].split(":")[0] if job.seed.feeds else "x"
        return f"{name}={path}"
    return path


def _write_good_feed(directory: str, seed: Seed) -> str:
    path = os.path.join(directory, "feeds.npz")
    np.savez(path, **seed.feeds)
    return path


def _remove_tree(place: str) -> None:
    """Remove a job's directory, FIFOs, links and read-only entries included, never following a link."""
    import shutil
    for root, dirs, files in os.walk(place, topdown=False):
        for name in files + dirs:
            path = os.path.join(root, name)
            with contextlib.suppress(OSError):
                if os.path.islink(path) or not os.path.isdir(path):
                    os.unlink(path)
                else:
                    os.rmdir(path)
    shutil.rmtree(place, ignore_errors=True)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _reference(seed: Seed, directory: str) -> Reference | None:
    """The unmutated seed's values on the NumPy backend (None if the seed itself does not run)."""
    import gradreg as gr
    from gradreg.autodiff.gradients import as_dense_gradients
    try:
        graph = gr.load_graph(seed.binary)
        forward = list(gr.Session(graph, backend="numpy").run(seed.fetches, seed.feeds))
        grads = None
        if seed.grad is not None:
            ys, xs, grad_ys = seed.grad
            graph = gr.load_graph(seed.binary)
            with graph.as_default():
                tensors = as_dense_gradients(gr.gradients(
                    [graph.get_tensor(y) for y in ys], [graph.get_tensor(x) for x in xs],
                    grad_ys=[graph.get_tensor(t) for t in grad_ys] if grad_ys else None))
            values = gr.Session(graph, backend="numpy").run([t for t in tensors if t is not None], seed.feeds)
            it = iter(values)
            grads = [next(it) if t is not None else None for t in tensors]
    except Exception:   # a seed whose gradients gradreg cannot build: no reference, only the other oracles
        return None
    return Reference(forward, grads)


def serve() -> None:
    """The worker process: one JSON job per line on stdin, one JSON result per line on the
    original stdout (gradreg's own output goes to stderr)."""
    os.environ.update(FUZZ_ENV)
    from gradreg import config  # already imported (with the defaults): set the limits it holds
    for name, value in FUZZ_ENV.items():
        attribute = name.removeprefix("GRADREG_").lower()
        if hasattr(config, attribute):
            setattr(config, attribute, int(value))
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _limit_memory()
    worker: Worker | None = None
    for line in sys.stdin:
        request = json.loads(line)
        if worker is None:
            worker = Worker(request["backends"], request["seconds"], request["cli_fraction"],
                            request.get("model_fraction", 0.0))
        result = worker.run(request["campaign"], request["index"])
        protocol.write(json.dumps(result) + "\n")


# -- the campaign -------------------------------------------------------------------------------------

@dataclass
class Summary:
    """Counts per job kind and outcome, per-backend stage counts, and the failures."""
    executed: int = 0
    verdicts: collections.Counter = field(default_factory=collections.Counter)
    by_kind: collections.Counter = field(default_factory=collections.Counter)
    per_backend: collections.Counter = field(default_factory=collections.Counter)
    failures: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, result: dict[str, Any]) -> None:
        self.executed += 1
        self.verdicts[result["verdict"]] += 1
        self.by_kind[(result["kind"], result["verdict"])] += 1
        for stage, kind in result.get("stages", []):
            backend = stage.rsplit(":", 1)[-1] if ":" in stage else None
            if backend in ("numpy", "numba"):
                self.per_backend[(backend, kind)] += 1
        if result["verdict"] in FAILURES:
            self.failures.append(result)

    def report(self) -> str:
        lines = [f"{self.executed} mutants in {self.seconds:.0f} s: " +
                 ", ".join(f"{k} {v}" for k, v in sorted(self.verdicts.items()))]
        for backend in ("numpy", "numba"):
            counts = {k: v for (b, k), v in self.per_backend.items() if b == backend}
            if counts:
                lines.append(f"  {backend} runs: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        kinds = sorted({k for k, _ in self.by_kind})
        for kind in kinds:
            counts = sorted(self.by_kind.items())
            lines.append(f"  {kind}: " + ", ".join(f"{v} {n}" for (k, v), n in counts if k == kind))
        for failure in self.failures[:50]:
            lines.append(f"  FAIL #{failure['index']} {failure['verdict']} at {failure['stage']} "
                         f"[{failure['seed']}: {'; '.join(failure['how'])[:200]}]: {failure['detail'][:300]}")
        return "\n".join(lines)


class WorkerProcess:
    """A worker subprocess, restarted when it dies or hangs."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        package = __package__ or "fuzz"
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
        self.process = subprocess.Popen([sys.executable, "-c", f"from {package}.campaign import serve; serve()"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True, env=env)

    def ask(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The worker's result, or None if it died or did not answer within the timeout."""
        if self.process is None or self.process.poll() is not None:
            self.start()
        assert self.process is not None and self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        import selectors
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(self.timeout):
                self.stop()
                return None
        line = self.process.stdout.readline()
        if not line:
            self.stop()
            return None
        result: dict[str, Any] = json.loads(line)
        return result

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


def run_campaign(campaign_seed: int = 0, count: int | None = None, minutes: float | None = None,
                 backends: tuple[str, ...] = ("numpy", "numba"), seconds: float = 30.0, cli_fraction: float = 0.05,
                 jobs: int = 1, start: int = 0, progress: Any = None, only: list[int] | None = None,
                 model_fraction: float = 0.0) -> Summary:
    """Evaluate mutants ``start``, ``start + 1``, ... until ``count`` are done or ``minutes`` have passed
    (``only``: just those indices); ``jobs`` workers in parallel."""
    import concurrent.futures
    summary = Summary()
    began = time.monotonic()
    deadline = began + minutes * 60 if minutes is not None else None
    indices = iter(only) if only is not None else iter(range(start, start + count) if count is not None
                                                         else _count_from(start))
    workers = [WorkerProcess(seconds * 3 + 60) for _ in range(jobs)]
    request = {"campaign": campaign_seed, "backends": list(backends), "seconds": seconds, "cli_fraction": cli_fraction,
               "model_fraction": model_fraction}

    def one(worker: WorkerProcess, index: int) -> dict[str, Any]:
        result = worker.ask({**request, "index": index})
        if result is None:
            result = {"index": index, **describe(campaign_seed, index, cli_fraction, model_fraction),
                      "verdict": "crash", "stage": "worker", "stages": [],
                      "detail": "the worker died or did not answer (a hang no alarm could stop, or a crash)"}
        return result

    try:
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            pending: dict[Any, WorkerProcess] = {}
            idle = list(workers)
            while True:
                while idle and (deadline is None or time.monotonic() < deadline):
                    index = next(indices, None)
                    if index is None:
                        break
                    worker = idle.pop()
                    pending[pool.submit(one, worker, index)] = worker
                if not pending:
                    break
                done, _ = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    idle.append(pending.pop(future))
                    result = future.result()
                    summary.add(result)
                    if progress is not None:
                        progress(result, summary)
    finally:
        for worker in workers:
            worker.stop()
    summary.seconds = time.monotonic() - began
    return summary


def _count_from(start: int):
    index = start
    while True:
        yield index
        index += 1
