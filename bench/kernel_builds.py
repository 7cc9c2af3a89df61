"""What gradreg compiles from an empty kernel cache, and how long each kind of kernel takes
(issue 31, target 4: the shorter the background builds, the sooner the calls are steady).

    python bench/kernel_builds.py [--workload mobilenet_v2_64] [--runs 2] [--base SRC]

Each run is a fresh process with a new, empty GRADREG_CACHE_DIR and NUMBA_CACHE_DIR: it makes
the workload's step (bench/cold_start.py's workloads), calls it twice (the second call queues
the plan's kernels to the background builder) and waits for every build. Printed: the time
from the first call until every kernel was built, then the builds by kind -- the kernel's
NumPy version (fused elementwise groups, a plugin's convolution, ...) -- with their count and
the seconds the builder spent on them, and how many generated modules (numba source files)
the process loaded. ``--base SRC`` runs another source tree (``git archive <commit> | tar -x
-C SRC``) in the same way, taking turns with this one.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

from _timing import BENCH, tree_path
from cold_start import WORKLOADS, load


def child(workload: str) -> dict:
    """In the fresh process: the step, two calls, every build waited for, timed by kind."""
    import importlib

    from gradreg.backends.numba import cache, jit
    seconds: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    submit = jit._builder.submit     # the builder's queue: each build wrapped in a timer

    def timed_submit(tiered, install, finished=None):
        build = tiered.build
        name = getattr(tiered.initial, "__qualname__", type(tiered.initial).__name__)
        kind = "fused elementwise group" if name.endswith("fallback_call") else name.replace(".<locals>", "")

        def timed():
            start = time.perf_counter()
            try:
                return build()
            finally:
                seconds[kind] += time.perf_counter() - start
                count[kind] += 1
        submit(dataclasses.replace(tiered, build=timed), install, finished)
    jit._builder.submit = timed_submit
    factory, kwargs = WORKLOADS[workload]
    module, function = factory.split(":")
    step, _ = getattr(importlib.import_module(module), function)(warm=False, **kwargs)
    start = time.perf_counter()
    step()
    step()
    done = jit.wait_for_kernels(1800)
    return {"total": time.perf_counter() - start, "done": done, "errors": len(jit.build_errors()),
            "modules": len(cache.loaded_modules()),
            "kinds": {kind: [count[kind], seconds[kind]] for kind in seconds}}


def run(workload: str, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="gradreg-builds-") as root:
        env = {**os.environ, **env, "GRADREG_CACHE_DIR": root, "NUMBA_CACHE_DIR": os.path.join(root, "numba")}
        out = subprocess.run([sys.executable, __file__, "--child", workload], env=env, check=True,
                             capture_output=True, text=True, cwd=root).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", choices=sorted(WORKLOADS))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--base", help="another version's source tree, run in turns with this one")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, str(BENCH))
        print(json.dumps(child(args.child)))
        return
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    versions = {"this": {"PYTHONPATH": str(BENCH)}}
    if args.base:
        versions["base"] = {"PYTHONPATH": tree_path(os.path.abspath(args.base))}
    print(f"kernel builds from an empty cache: {os.cpu_count()} CPUs, load {load()}", flush=True)
    for workload in args.workload or ["mobilenet_v2_64"]:
        for k in range(args.runs):
            names = list(versions)
            for version in names[k % len(names):] + names[:k % len(names)]:
                result = run(workload, versions[version])
                print(f"  {workload} run {k + 1} {version:4s} load {load()}: every kernel built "
                      f"{result['total']:.2f} s after the first call ({'all' if result['done'] else 'NOT all'}, "
                      f"{result['errors']} errors), {result['modules']} generated modules loaded", flush=True)
                for kind, (n, seconds) in sorted(result["kinds"].items(), key=lambda item: -item[1][1]):
                    print(f"      {seconds:7.2f} s  {n:4d}  {kind}")


if __name__ == "__main__":
    main()
