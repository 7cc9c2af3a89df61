"""The neutral benchmark protocol of issue 31: every contender in its own process, taking turns.

    python bench/protocol.py [--workload mlp --workload cnn ...] [--warmup 100] [--rounds 12] [--turn 3]
                             [--gap 0.5] [--runs 3] [--cold-calls 150] [--no-cold] [--no-warm] [--python PATH ...]

For each workload the contenders (gradreg and the references it is held to: TensorFlow's
session, JAX's jit, NumPy by hand, where each applies) run in processes of their own:

* **warm cache**: each process sets up (values checked against the reference first; gradreg
  waits for its compiled kernels), makes ``--warmup`` untimed calls (>= 100), then the
  processes take turns of ``--turn`` calls (3), ``--rounds`` rounds (>= 12: medians over >= 36
  calls), the order of the turns changed each round by a balanced Latin square (Williams'
  design: :func:`turn_orders`), so that each contender follows each other one as often (the
  one before may leave threads spinning into the next turn: NumPy's OpenBLAS spins ~0.1 s
  after each product). Twice: **back to back** (a turn starts when the one before ends: a neighbour's
  threads may still spin, as on a shared machine) and **with idle gaps** (``--gap`` seconds,
  0.5, of nobody running before each turn: a pool that went to sleep wakes up). ``--runs 3``
  does it three times, fresh processes each run, and then prints every contender's median of
  each run and gradreg's ratio to the best reference in each (issue 31's targets hold in three
  runs: their spread is the figure, not one run's).
* **cold cache**: each contender alone in a fresh process, gradreg with an empty kernel cache
  (GRADREG_CACHE_DIR in a new directory), every call timed from the first, ``--cold-calls``
  of them: the first call, the slowest call after it against the warm median (target: <= 3x),
  and when the calls reached the steady state (a median of 9 within 1.2x the warm median).

Each figure is the median of the per-call wall times, with the spread (25th-75th percentile)
and the process's CPU time per call (threads included); the machine's load (/proc/loadavg:
the 1-minute average and the threads runnable) is printed before and after each part, and
the ratio of gradreg to the best reference. ``--python NAME=PATH`` adds gradreg contenders
run by another interpreter or source tree (``NAME=PATH:SRC`` puts SRC first on sys.path),
for A/B comparisons of two versions in the same turns; ``--variant LABEL:VAR=VALUE`` adds gradreg
run with other settings (GRADREG_THREADS=1, GRADREG_SPIN=0, GRADREG_MALLOC=default).
``--neighbour busy`` runs the warm part beside a process keeping one core busy,
``--neighbour bursts`` beside one that uses every core
for 50 ms every 0.5 s (issue 31: a neighbour's brief burst must not halve gradreg's speed for
the next 100 ms).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

from _timing import Contender, _Worker, tree_path


def _have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# workload -> (description, [(contender name, factory, kwargs)], targets: {reference: ratio})
def workloads() -> dict[str, tuple[str, list[tuple[str, str, dict]], dict[str, float]]]:
    tf, jax = _have("tensorflow"), _have("jax")
    found = {
        "mlp": ("MLP 784-512-512-10, batch 128, one SGD step (TF-written train.pb)",
                [("gradreg", "foreign_mlp:gradreg_step", {}), ("numpy", "foreign_mlp:numpy_step", {})]
                + ([("tensorflow", "foreign_mlp:tensorflow_step", {})] if tf else [])
                + ([("jax jit", "foreign_mlp:jax_step", {})] if jax else []), {}),
        "elementwise": ("20 elementwise ops on 1M float32 (TF-written GraphDef)",
                        [("gradreg", "foreign_elementwise:gradreg_step", {}),
                         ("numpy", "foreign_elementwise:numpy_step", {})]
                        + ([("tensorflow", "foreign_elementwise:tensorflow_step", {})] if tf else [])
                        + ([("jax jit", "foreign_elementwise:jax_step", {})] if jax else []), {}),
        "rnn": ("TF-written RNN (v1 while_loop, 100 steps, [16, 64]): loss and gradients",
                [("gradreg", "foreign_rnn:gradreg_step", {}), ("numpy", "foreign_rnn:numpy_step", {})]
                + ([("tensorflow", "foreign_rnn:tensorflow_step", {})] if tf else []), {"tensorflow": 0.33}),
    }
    for name, label in (("mobilenet_v2_64", "Keras MobileNetV2 (alpha 0.35, 64x64, batch 8)"),
                        ("densenet_slim_32", "slim DenseNet (32x32, batch 8)"),
                        ("resnet_slim_f64_32", "slim ResNet in float64 (32x32, batch 8)")):
        found[name] = (f"{label}: forward + gradients w.r.t. the input and every weight",
                       [("gradreg", "foreign_cnn:gradreg_step", {"name": name})]
                       + ([("tensorflow", "foreign_cnn:tensorflow_step", {"name": name})] if tf else [])
                       + ([("jax jit", "graph_to_jax:cnn_step", {"name": name})] if jax else []), {})
    import realistic
    have = realistic.installed()
    for name, label in (("mobilenet_v2_224", "Keras MobileNetV2 (alpha 1.0, 224x224, batch 32)"),
                        ("resnet50_224", "Keras ResNet50 (224x224, batch 32)")):
        found[name] = (f"{label}: one training step (forward, gradients w.r.t. every weight, SGD; "
                       "PyTorch's on torchvision's model with its own weights, onnxruntime forward only)",
                       realistic.contenders(name, **have), {"tensorflow": 1.0, "jax jit": 1.0})
    return found


ALIASES = {"cnn": ["mobilenet_v2_64", "densenet_slim_32", "resnet_slim_f64_32"],
           "realistic": ["mobilenet_v2_224", "resnet50_224"]}
# Not in the default run (graphs made on first use, minutes a call): --workload realistic.
LARGE = ("mobilenet_v2_224", "resnet50_224")
# Timed and printed beside the others but not a reference for gradreg's ratios: not the same work
# (onnxruntime runs the forward pass only).
BESIDE = ("onnxruntime forward",)


@dataclasses.dataclass
class Samples:
    wall: list[float] = dataclasses.field(default_factory=list)
    cpu: list[float] = dataclasses.field(default_factory=list)

    def quartiles(self) -> tuple[float, float, float]:
        q = statistics.quantiles(self.wall, n=4) if len(self.wall) > 1 else self.wall * 3
        return q[0], statistics.median(self.wall), q[2]

    def line(self, name: str) -> str:
        low, mid, high = self.quartiles()
        return (f"  {name:<22} {mid * 1e3:9.2f} ms  (25-75%: {low * 1e3:.2f}-{high * 1e3:.2f}; "
                f"CPU {statistics.median(self.cpu) * 1e3:8.2f} ms; n={len(self.wall)})")


def load() -> str:
    """/proc/loadavg's 1-minute average and the threads runnable now (os.getloadavg elsewhere)."""
    try:
        fields = pathlib.Path("/proc/loadavg").read_text().split()
        return f"load {fields[0]} (1 min), {fields[3].split('/')[0]} threads runnable"
    except OSError:
        return f"load {os.getloadavg()[0]:.2f} (1 min)"


def _contender(name: str, factory: str, kwargs: dict, env: dict) -> Contender:
    return Contender(name, factory, dict(kwargs), dict(env))


def _with_python(contenders: list[Contender], others: list[str]) -> list[Contender]:
    """gradreg contenders again for each ``NAME=PATH[:SRC]`` (another interpreter, source first on sys.path)."""
    found = list(contenders)
    for spec in others:
        label, _, where = spec.partition("=")
        python, _, src = where.partition(":")
        for c in contenders:
            if c.name.startswith("gradreg"):
                env = dict(c.env, GRADREG_BENCH_PYTHON=python or sys.executable)
                if src:
                    env["PYTHONPATH"] = tree_path(src)
                found.append(Contender(f"{c.name} [{label}]", c.factory, dict(c.kwargs), env))
    return found


NEIGHBOURS = {
    # one process keeping one core busy the whole time
    "busy": "while True: pass",
    # a neighbour's brief bursts: every 0.5 s, 50 ms of work on every core (threads of a NumPy
    # product), then idle; issue 31: such a burst must not halve gradreg's speed for the next 100 ms
    "bursts": ("import time, numpy as np\n"
               "a = np.ones((600, 600))\n"
               "while True:\n"
               "    end = time.perf_counter() + 0.05\n"
               "    while time.perf_counter() < end: a @ a\n"
               "    time.sleep(0.45)\n"),
}


@contextlib.contextmanager
def neighbour(kind: str | None) -> Iterator[None]:
    """Another process beside the contenders for the duration (NEIGHBOURS), or none."""
    if kind is None:
        yield
        return
    process = subprocess.Popen([sys.executable, "-c", NEIGHBOURS[kind]])
    try:
        time.sleep(0.5)
        yield
    finally:
        process.kill()
        process.wait()


def _with_variants(contenders: list[Contender], variants: list[str]) -> list[Contender]:
    """gradreg contenders again for each ``LABEL:VAR=VALUE[,VAR=VALUE...]`` (its environment added)."""
    found = list(contenders)
    for spec in variants:
        label, _, assignments = spec.partition(":")
        env = dict(pair.split("=", 1) for pair in assignments.split(",") if pair)
        for c in contenders:
            if c.name.startswith("gradreg") and " [" not in c.name:
                found.append(Contender(f"{c.name} [{label}]", c.factory, dict(c.kwargs), dict(c.env, **env)))
    return found


@contextlib.contextmanager
def unavailable(name: str, worker: _Worker | None = None) -> Iterator[None]:
    """Prints and swallows a contender's report that it cannot run here (realistic.Unavailable:
    torch.compile without a compiler), closing its worker; any other error goes through."""
    try:
        yield
    except RuntimeError as exc:
        if ": Unavailable: " not in str(exc):
            raise
        print(f"    {name}: unavailable here, left out: {str(exc).split(': Unavailable: ', 1)[1]}", flush=True)
        if worker is not None:
            worker.close()


def turn_orders(n: int) -> list[list[int]]:
    """Orders of ``n`` contenders' turns, one a round, in which each contender comes right after
    each other one equally often (Williams' balanced Latin square: n orders for an even n, 2n
    for an odd one). Rotating one order would keep every contender behind the same one."""
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    orders = [[(i + r) % n for i in first] for r in range(n)]
    return orders + [order[::-1] for order in orders] if n % 2 else orders


def warm(contenders: list[Contender], warmup: int, rounds: int, turn: int, gap: float) -> dict[str, dict[str, Samples]]:
    """The warm-cache part: back to back and with idle gaps (module docstring)."""
    workers = []
    try:
        for c in contenders:
            with unavailable(c.name):
                workers.append(_Worker(c))
        for w in list(workers):
            with unavailable(w.name, w):
                w.request({"run": warmup})
                continue
            workers.remove(w)
        results: dict[str, dict[str, Samples]] = {}
        for schedule, pause in (("back to back", 0.0), (f"{gap} s idle gaps", gap)):
            print(f"    {schedule}: before, {load()}", flush=True)
            samples = {w.name: Samples() for w in workers}
            orders = turn_orders(len(workers))
            for r in range(rounds):
                for w in (workers[i] for i in orders[r % len(orders)]):
                    if pause:
                        time.sleep(pause)
                    reply = w.request({"run": turn})
                    samples[w.name].wall.extend(reply["wall"])
                    samples[w.name].cpu.extend(reply["cpu"])
            print(f"    {schedule}: after, {load()}", flush=True)
            results[schedule] = samples
        return results
    finally:
        for w in workers:
            w.close()


@dataclasses.dataclass
class Cold:
    wall: list[float]
    cpu: list[float]
    setup: float

    def report(self, name: str, steady: float) -> str:
        first, rest = self.wall[0], self.wall[1:]
        worst = max(rest) if rest else float("nan")
        elapsed, reached = self.setup, None
        for i, w in enumerate(self.wall):
            elapsed += w
            window = self.wall[i:i + 9]
            if reached is None and len(window) == 9 and statistics.median(window) <= 1.2 * steady:
                reached = elapsed
        slow = sum(1 for w in rest if w > 3 * steady)
        return (f"  {name:<22} first call {first * 1e3:9.1f} ms; slowest after it {worst * 1e3:8.1f} ms = "
                f"{worst / steady:5.1f}x warm median ({slow} calls > 3x); steady state "
                + (f"after {reached:.1f} s (set-up {self.setup:.1f} s)" if reached is not None else "not reached"))


def cold(contenders: list[Contender], calls: int) -> dict[str, Cold]:
    """Each contender alone in a fresh process with an empty gradreg kernel cache, timed from its first call."""
    found = {}
    for c in contenders:
        with tempfile.TemporaryDirectory(prefix="gradreg-cold-cache-") as cache:
            env = dict(c.env, GRADREG_CACHE_DIR=cache, NUMBA_CACHE_DIR=cache, TORCHINDUCTOR_CACHE_DIR=cache)
            start = time.perf_counter()
            reply = None
            with unavailable(c.name):
                worker = _Worker(Contender(c.name, c.factory, dict(c.kwargs, warm=False), env))
                setup = time.perf_counter() - start
                try:
                    reply = worker.request({"run": calls})
                finally:
                    worker.close()
        if reply is not None:
            found[c.name] = Cold(reply["wall"], reply["cpu"], setup)
    return found


def references(medians: dict[str, float]) -> dict[str, float]:
    """The contenders gradreg's ratio is taken against: not a gradreg, not one run beside
    (BESIDE: onnxruntime's forward alone is not the same work)."""
    return {n: m for n, m in medians.items() if not n.startswith("gradreg") and n not in BESIDE}


def report(title: str, results: dict[str, dict[str, Samples]], targets: dict[str, float]) -> dict[str, float]:
    print(title)
    medians: dict[str, float] = {}
    for schedule, samples in results.items():
        print(f"  {schedule}:")
        for name, s in samples.items():
            print("  " + s.line(name))
            medians[f"{schedule}/{name}"] = s.quartiles()[1]
        others = references({n: s.quartiles()[1] for n, s in samples.items()})
        for name, s in samples.items():
            if not name.startswith("gradreg") or not others:
                continue
            mine = s.quartiles()[1]
            best = min(others, key=others.__getitem__)
            line = f"    {name}: {mine / others[best]:.2f}x the best reference ({best}; target <= 1.0)"
            for ref, ratio in targets.items():
                if ref in others:
                    line += f", {mine / others[ref]:.2f}x {ref} (target <= {ratio})"
            print(line)
        for name, s in samples.items():      # --python: each other version against this one
            base = name.split(" [")[0]
            if name != base and base in samples:
                print(f"    {name}: {s.quartiles()[1] / samples[base].quartiles()[1]:.2f}x {base} (wall), "
                      f"{statistics.median(s.cpu) / statistics.median(samples[base].cpu):.2f}x (CPU)")
    return medians


def across_runs(title: str, runs: list[dict[str, dict[str, Samples]]]) -> None:
    """The warm part's figures over ``--runs`` runs (each in fresh processes): every contender's
    median of each run, and gradreg's ratio to the best reference in each run, with their spread."""
    print(f"{title} over {len(runs)} runs (each run's median; min-max over the runs):")
    for schedule in runs[0]:
        print(f"  {schedule}:")
        per_run = [{n: s.quartiles()[1] for n, s in run[schedule].items()} for run in runs]
        cpus = [{n: statistics.median(s.cpu) for n, s in run[schedule].items()} for run in runs]
        for name in per_run[0]:
            walls = [m[name] for m in per_run if name in m]
            cpu = [c[name] for c in cpus if name in c]
            print(f"    {name:<22} {statistics.median(walls) * 1e3:9.2f} ms ({min(walls) * 1e3:.2f}-"
                  f"{max(walls) * 1e3:.2f}); CPU {statistics.median(cpu) * 1e3:.2f} ms; "
                  f"runs: {' / '.join(f'{w * 1e3:.2f}' for w in walls)}")
        for name in per_run[0]:
            if not name.startswith("gradreg"):
                continue
            ratios = [medians[name] / min(others.values()) for medians in per_run
                      if name in medians and (others := references(medians))]
            if ratios:
                print(f"    {name}: the best reference's {' / '.join(f'{r:.2f}x' for r in ratios)} "
                      f"(max {max(ratios):.2f}x; target <= 1.0 in every run)")


def _set_openblas_coretype(core: str | None) -> None:
    """OPENBLAS_CORETYPE for the workers (their environment is this process's): ``core``, or
    none with "unset"; as it is when ``core`` is None."""
    if core == "unset":
        os.environ.pop("OPENBLAS_CORETYPE", None)
    elif core:
        os.environ["OPENBLAS_CORETYPE"] = core


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", help="mlp, elementwise, rnn, cnn (the three CNNs), one "
                        "CNN's name, or realistic (MobileNetV2 and ResNet50 at 224x224, batch 32); default: all "
                        "but the realistic ones")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--turn", type=int, default=3)
    parser.add_argument("--gap", type=float, default=0.5)
    parser.add_argument("--cold-calls", type=int, default=150)
    parser.add_argument("--runs", type=int, default=1, help="the warm part this many times, fresh processes "
                        "each run, then every contender's medians and gradreg's ratios over the runs (issue 31: 3)")
    parser.add_argument("--no-cold", action="store_true")
    parser.add_argument("--no-warm", action="store_true")
    parser.add_argument("--only", action="append", help="run only these contenders (names as printed)")
    parser.add_argument("--variant", action="append", default=[], help="LABEL:VAR=VALUE[,VAR=VALUE]: gradreg "
                        "again with those environment variables (GRADREG_THREADS=1, GRADREG_SPIN=0, ...)")
    parser.add_argument("--neighbour", choices=sorted(NEIGHBOURS), help="run the warm part beside another "
                        "process: busy (one core, all the time) or bursts (every core for 50 ms every 0.5 s)")
    parser.add_argument("--python", action="append", default=[], help="NAME=PATH[:SRC]: gradreg again, run by "
                        "the interpreter PATH with the source tree SRC first on sys.path (A/B of two versions)")
    parser.add_argument("--openblas-coretype", metavar="NAME|unset", help="OPENBLAS_CORETYPE for every contender's "
                        "process (the OpenBLAS of NumPy and gradreg; TensorFlow's oneDNN and JAX's XLA do not read "
                        "it): a core name (SkylakeX, Haswell, ...), or unset to leave OpenBLAS to its own detection")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    _set_openblas_coretype(args.openblas_coretype)
    known = workloads()
    chosen = []
    for w in args.workload or [name for name in known if name not in LARGE]:
        chosen.extend(ALIASES.get(w, [w]))
    print(f"protocol: warm-up {args.warmup}, {args.rounds} rounds of turns of {args.turn} calls, "
          f"gaps {args.gap} s, cold {args.cold_calls} calls; {os.cpu_count()} CPUs; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; {load()}", flush=True)
    for name in chosen:
        title, specs, targets = known[name]
        contenders = _with_variants(_with_python([_contender(n, f, k, {}) for n, f, k in specs], args.python),
                                    args.variant)
        if args.only:
            contenders = [c for c in contenders if c.name in args.only]
        print(f"\n{name}: {title}", flush=True)
        if name in LARGE:
            import realistic
            for label, why in realistic.left_out(**realistic.installed()).items():
                print(f"  {label}: left out, {why}", flush=True)
        steady: dict[str, float] = {}
        if not args.no_warm:
            beside = f", beside a neighbour: {args.neighbour}" if args.neighbour else ""
            runs = []
            for run in range(args.runs):
                label = f", run {run + 1} of {args.runs}" if args.runs > 1 else ""
                with neighbour(args.neighbour):
                    results = warm(contenders, args.warmup, args.rounds, args.turn, args.gap)
                report(f"{name}, warm cache{beside}{label} ({load()}):", results, targets)
                runs.append(results)
            if len(runs) > 1:
                across_runs(f"{name}, warm cache{beside},", runs)
            steady = {n: statistics.median(r["back to back"][n].quartiles()[1] for r in runs if n in r["back to back"])
                      for n in runs[-1]["back to back"]}
        if not args.no_cold:
            print(f"{name}, cold cache, each contender alone, timed from the first call ({load()}):", flush=True)
            for cname, figures in cold(contenders, args.cold_calls).items():
                reference = steady.get(cname) or statistics.median(figures.wall[-36:])
                print(figures.report(cname, reference), flush=True)
            print(f"  (after: {load()})")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
