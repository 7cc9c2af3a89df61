"""gradreg's start in a fresh process (issue 31, target 4), two versions side by side.

    python bench/cold_start.py --base SRC [--workload mlp --workload mobilenet_v2_64] [--runs 3]
                               [--budget 20] [--tree LABEL=SRC] [--variant LABEL:VAR=VALUE]

Each process is a fresh interpreter running one gradreg version (this tree, and the source tree
``--base`` -- e.g. ``git archive <commit> | tar -x -C /tmp/base`` -- first on the import path),
timed from its first call, every call, for ``--budget`` seconds of calls; then it waits for its
compiled kernels, settles (bench/_timing.py's settle: the plan's trial of how its calls use
the cores) and makes 36 more calls, whose median is that process's steady state. Twice
per version and run: with an **empty** kernel cache (a new GRADREG_CACHE_DIR / NUMBA_CACHE_DIR)
and with a **warm** one (the directory the empty-cache process of the same version and run
filled). The versions take turns, the order swapped each run; nothing else of the benchmark's
runs meanwhile (the next process starts once the last one's compile server, if any, has exited).

For each process: the set-up (interpreter, imports, graph, plan), the first call, the slowest
call after it against the steady state and how many calls were above 3x it, when the calls
reached the steady state (the first of 9 calls after the first whose median is within 1.2x;
seconds from the first call's start), the time the
budget's calls lost against the steady state (the sum of each call's excess over it), and the
calls made in the budget. The machine's load is printed beside each. At the end: each figure's
median over the runs with its range (min-max), and the version's ratio to the base.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import statistics
import sys
import tempfile
import time

from _timing import Contender, _Worker, settling_calls, tree_path

WORKLOADS = {
    "mlp": ("foreign_mlp:gradreg_step", {}),
    "elementwise": ("foreign_elementwise:gradreg_step", {}),
    "rnn": ("foreign_rnn:gradreg_step", {}),
    "mobilenet_v2_64": ("foreign_cnn:gradreg_step", {"name": "mobilenet_v2_64"}),
    "mobilenet_v2_64_forward": ("foreign_cnn:gradreg_forward_step", {"name": "mobilenet_v2_64"}),
    "densenet_slim_32": ("foreign_cnn:gradreg_step", {"name": "densenet_slim_32"}),
    "resnet_slim_f64_32": ("foreign_cnn:gradreg_step", {"name": "resnet_slim_f64_32"}),
}


def contender(workload: str):
    """The worker's side: the workload's gradreg step, not called yet; its info waits for the
    compiled kernels, settles, and says how many kernels were built."""
    import importlib
    factory, kwargs = WORKLOADS[workload]
    module, function = factory.split(":")
    step, _ = getattr(importlib.import_module(module), function)(warm=False, **kwargs)

    def info() -> dict:
        from gradreg.backends.numba import jit
        start = time.perf_counter()
        done = jit.wait_for_kernels(600)
        waited = time.perf_counter() - start
        for _ in range(settling_calls()):   # the plan's trial of how its calls use the cores
            step()
        import gradreg
        return {"done": done, "waited": waited, "built": jit.kernels_built(),
                "errors": len(jit.build_errors()), "gradreg": str(pathlib.Path(gradreg.__file__).parent)}

    return step, info


def load() -> float:
    return float(pathlib.Path("/proc/loadavg").read_text().split()[0])


def server_processes() -> list[int]:
    """Process ids of gradreg compile servers running now."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"gradreg.backends.numba.compile_server" in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@dataclasses.dataclass
class Start:
    setup: float
    wall: list[float]
    cpu: list[float]
    steady: float
    info: dict
    load: float
    lingered: float

    def first(self) -> float:
        return self.wall[0]

    def worst(self) -> float:
        return max(self.wall[1:]) / self.steady

    def over3(self) -> int:
        return sum(1 for w in self.wall[1:] if w > 3 * self.steady)

    def reached(self) -> float:
        """Seconds from the first call's start to the first of 9 calls after it whose median is
        within 1.2x the steady state. (The first call is not in a window: counted in one, a
        first call that builds for a second was hidden by the median of the next eight.)"""
        elapsed = self.wall[0] if self.wall else 0.0
        for i in range(1, len(self.wall)):
            window = self.wall[i:i + 9]
            if len(window) == 9 and statistics.median(window) <= 1.2 * self.steady:
                return elapsed
            elapsed += self.wall[i]
        return float("nan")

    def lost(self) -> float:
        return sum(max(0.0, w - self.steady) for w in self.wall)

    def figures(self) -> dict[str, float]:
        return {"set-up s": self.setup, "first ms": self.first() * 1e3, "worst x": self.worst(),
                "calls>3x": self.over3(), "steady at s": self.reached(), "lost s": self.lost(),
                "calls": len(self.wall), "steady ms": self.steady * 1e3,
                "cpu/call ms": statistics.median(self.cpu) * 1e3}


def start(workload: str, env: dict, budget: float) -> Start:
    before = load()
    t0 = time.perf_counter()
    worker = _Worker(Contender(workload, "cold_start:contender", {"workload": workload}, env))
    setup = time.perf_counter() - t0
    wall: list[float] = []
    cpu: list[float] = []
    try:
        while sum(wall) < budget:
            reply = worker.request({"run": 5})
            wall += reply["wall"]
            cpu += reply["cpu"]
        info = worker.request({"info": True})["info"]
        steady = statistics.median(worker.request({"run": 36})["wall"])
    finally:
        worker.close()
    t1 = time.perf_counter()
    while server_processes() and time.perf_counter() - t1 < 60:
        time.sleep(0.05)
    return Start(setup, wall, cpu, steady, info, max(before, load()), time.perf_counter() - t1)


def summary(results: dict[tuple[str, str, str], list[Start]]) -> None:
    """Each figure's median over the runs (min-max), and each version's ratio to the base."""
    print("\nmedians over the runs (min-max):")
    for (workload, cache, version), starts in results.items():
        parts = []
        for key in starts[0].figures():
            values = [s.figures()[key] for s in starts]
            parts.append(f"{key} {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})")
        print(f"  {workload:<16} {cache:<5} {version:<6} " + "; ".join(parts))
        if version != "base" and (workload, cache, "base") in results:
            ratios = []
            for key in ("set-up s", "first ms", "steady at s", "lost s", "steady ms"):
                mine = statistics.median(s.figures()[key] for s in starts)
                theirs = statistics.median(s.figures()[key] for s in results[(workload, cache, "base")])
                ratios.append(f"{key} {mine / theirs:.2f}x" if theirs else f"{key} -")
            print(f"  {'':<16} {'':<5} {version:<6} / base: " + ", ".join(ratios))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the other version's source tree")
    parser.add_argument("--workload", action="append", choices=sorted(WORKLOADS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of timed calls a process")
    parser.add_argument("--tree", action="append", default=[],
                        help="LABEL=SRC: another version's source tree, beside the base")
    parser.add_argument("--variant", action="append", default=[],
                        help="LABEL:VAR=VALUE[,...]: this tree again with those environment variables")
    args = parser.parse_args()
    base = os.path.abspath(args.base)
    def tree(src: str) -> dict[str, str]:
        src = os.path.abspath(src)
        return {"PYTHONPATH": tree_path(src)}
    versions = {"base": tree(base), "this": {}}
    for spec in args.tree:
        label, _, src = spec.partition("=")
        versions[label] = tree(src)
    for spec in args.variant:
        label, _, assignments = spec.partition(":")
        versions[label] = dict(pair.split("=", 1) for pair in assignments.split(",") if pair)
    print(f"cold start: {os.cpu_count()} CPUs, load {load()}; budget {args.budget} s of calls a process; "
          f"base {base}", flush=True)
    if server_processes():
        print(f"  (compile servers already running: {server_processes()})")
    results: dict[tuple[str, str, str], list[Start]] = {}
    for workload in args.workload or ["mlp", "mobilenet_v2_64"]:
        for run in range(args.runs):
            names = list(versions)
            order = names[run % len(names):] + names[:run % len(names)]
            with tempfile.TemporaryDirectory(prefix="gradreg-cold-") as root:
                for cache in ("empty", "warm"):
                    for version in order:
                        directory = os.path.join(root, version)
                        os.makedirs(directory, exist_ok=True)
                        env = dict(versions[version], GRADREG_CACHE_DIR=directory, NUMBA_CACHE_DIR=directory)
                        s = start(workload, env, args.budget)
                        results.setdefault((workload, cache, version), []).append(s)
                        f = s.figures()
                        print(f"  {workload:<16} run {run + 1} {cache:<5} {version:<6} load {s.load:5.2f}: "
                              f"set-up {f['set-up s']:.2f} s, first {f['first ms']:.1f} ms, "
                              f"worst {f['worst x']:.1f}x steady ({f['calls>3x']} calls > 3x), "
                              f"steady at {f['steady at s']:.2f} s, lost {f['lost s']:.2f} s, "
                              f"{f['calls']} calls, steady {f['steady ms']:.2f} ms; "
                              f"kernels {s.info['built']} built, {s.info['errors']} errors, waited "
                              f"{s.info['waited']:.1f} s more; servers gone {s.lingered:.2f} s after", flush=True)
    summary(results)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
