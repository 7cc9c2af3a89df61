"""The first command on a Keras MobileNetV2 GraphDef, in a new process: how long to the result.

    python bench/first_command.py [--repeats 5]

Each figure is the wall-clock time of a whole ``gradreg`` command in a new process (Python's
start-up, imports, reading the graph, differentiating, compiling the plan, running it,
printing), median of --repeats: with an empty kernel cache (a fresh GRADREG_CACHE_DIR each
time) and with the cache a previous command left (warm). Commands: ``gradreg run`` (forward)
and ``gradreg grad --feed`` (the gradients of the output w.r.t. the input, evaluated) on
bench/graphs/mobilenet_v2_64/forward.pb, and ``gradreg inspect`` of a small graph
(examples/mlp/model.pbtxt). Targets (issue 14): <= 3 s with an empty cache, <= 1.5 s warm,
inspect <= 0.5 s. Also printed: whether the command imported numba, and how long a Python that
only imports NumPy takes on this machine now (inspect's floor: the host's speed varies).

Python's bytecode cache is on (as after ``pip install``, which compiles it; an untimed command
writes it first): with PYTHONDONTWRITEBYTECODE=1 every command compiles gradreg's sources
again, ~0.15 s more. ``--no-bytecode`` measures that way.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from _timing import report_load
from foreign_graphs import feeds, graph_path

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The ``gradreg`` console script's own entry (gradreg.cli.entry), so that each figure is what a
# user's command takes; an atexit callback reports whether numba was imported.
GRADREG = [sys.executable, "-c", "import atexit, sys; atexit.register(lambda: print('numba imported' if 'numba' in "
           "sys.modules else 'numba not imported', file=sys.stderr)); from gradreg.cli import entry; entry()"]


BYTECODE = True


def timed(args: list[str], cache: str) -> tuple[float, bool]:
    env = dict(os.environ, GRADREG_CACHE_DIR=cache)
    env.pop("GRADREG_BACKEND", None)
    env.pop("GRADREG_JIT", None)
    if BYTECODE:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    start = time.perf_counter()
    done = subprocess.run(GRADREG + args, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"gradreg {' '.join(args)} failed: {done.stderr}")
    return seconds, "numba imported" in done.stderr


def _python(args: list[str]) -> float:
    env = dict(os.environ)
    if BYTECODE:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-bytecode", action="store_true", help="PYTHONDONTWRITEBYTECODE=1 for the commands")
    args = parser.parse_args()
    global BYTECODE
    BYTECODE = not args.no_bytecode
    with tempfile.TemporaryDirectory(prefix="gradreg-first-") as work:
        x_file = os.path.join(work, "x.npz")
        np.savez(x_file, **{"x:0": feeds("mobilenet_v2_64")["x:0"]})
        graph = str(graph_path("mobilenet_v2_64"))
        commands = {
            "run": ["run", graph, "--feed", x_file, "--fetch", "Identity"],
            "grad --feed": ["grad", graph, "--ys", "Identity", "--xs", "x", "--feed", x_file,
                            "-o", os.path.join(work, "grad.pb")],
        }
        small = str(ROOT / "examples" / "mlp" / "model.pbtxt")
        timed(["inspect", small], os.path.join(work, "cache-warmup"))    # writes the bytecode cache
        print(report_load("before"))
        print(f"first command on MobileNetV2 (alpha 0.35, 64x64, batch 8) in a new process, median of {args.repeats}"
              f" (bytecode cache {'on' if BYTECODE else 'off'}):")
        for label, command in commands.items():
            cold, warm, imported = [], [], set()
            for i in range(args.repeats):
                cache = os.path.join(work, f"cache-{label.split()[0]}-{i}")
                seconds, numba = timed(command, cache)        # empty cache
                cold.append(seconds)
                imported.add(numba)
                seconds, numba = timed(command, cache)        # the cache the first one left
                warm.append(seconds)
                imported.add(numba)
            said = "numba imported" if True in imported else "numba not imported"
            print(f"  gradreg {label:<12} empty cache {statistics.median(cold):5.2f} s   "
                  f"warm {statistics.median(warm):5.2f} s   ({said})")
        inspect, numpy_only = [], []
        for _ in range(args.repeats):      # alternated with Python importing NumPy alone: the floor here
            inspect.append(timed(["inspect", small], os.path.join(work, "cache-inspect"))[0])
            numpy_only.append(_python(["-c", "import numpy"]))
        print(f"  gradreg inspect (examples/mlp/model.pbtxt) {statistics.median(inspect):5.2f} s   "
              f"(python -c 'import numpy' alone: {statistics.median(numpy_only):5.2f} s)")
        print(f"  targets: empty cache <= 3 s, warm <= 1.5 s, inspect <= 0.5 s; {report_load('after')}")


if __name__ == "__main__":
    main()
