"""MobileNetV2 trained data-parallel on a Dask cluster of `dask scheduler` and `dask worker` processes.

    pip install ".[dask]" && python bench/dask_cluster.py [--workers 1,2,4] [--steps 3] [--bandwidth 1.25e9]

The model is the Keras MobileNetV2 (alpha 0.35, 64x64, 10 classes) that TensorFlow froze at
batch 8 (bench/graphs/mobilenet_v2_64, written by bench/make_graphs.py; the CNN of the speed
issue): its 158 weight Consts become variables, its batch is freed, and a cross-entropy loss on
its softmax output is added here. For each worker count N this script starts a scheduler
(`dask scheduler --scheduler-file ...`) and N worker processes (`dask worker --nthreads 1`,
each its own command, BLAS on one thread, Dask's MALLOC_TRIM_THRESHOLD_ left unset), connects
a client, trains one warm-up step (every worker builds and compiles the gradient graph) and
``--steps`` timed SGD steps on batches of 32 x N (32 per worker), then stops the processes.

Printed per N: seconds per step (median, min..max), images per second per worker, and the
measured parts: a worker's compute on its shard of 32 and its update (from the replicas'
own clocks; one worker runs the whole step, update included, as one plan), the gradient
bytes each worker receives (the partial sums and the total), the tree depth. Then the
estimate for 16 and 64 workers from those parts:

    step(n) = compute(32) + update + levels(n) * (P / bw + add) + (P / bw) * ceil(log2 n)
              + shard / bw + tasks(n) * per_task

with P the gradients' bytes, levels(n) = ceil(log2 n) pairwise sums, the total reaching the
n workers through Dask's peer fetches (a tree, ceil(log2 n) hops, at best), tasks(n) = 3n - 1
(n shards, n - 1 sums, n updates), per_task the scheduler's cost of a task (Dask documents
about 1 ms; the lower bound here), and bw the bandwidth between machines (10 Gb/s default).
This machine has 2 cores: with 4 workers they take turns, so the measured 4-worker figure is
contention, not scaling; the estimate uses the one-worker compute.

Measured (issue 30, load average 16-22 on the 2 cores from other work; compute was then the mean
over steps, one of them a 10.5 s outlier, which the script now takes the median of):

    workers  s/step [min..max]     img/s/worker  compute(32) s  update s  gradient MB
          1  3.89 [3.87..10.54]      8.2           5.94 (mean)   0.018     1.64
          2  6.07 [5.09..17.30]      5.3           8.11 (mean)   0.025     1.64
          4  16.67 [15.15..46.88]    1.9          19.32 (mean)   0.072     1.64

With the 1-worker median step (3.87 s of compute): 16 workers ~3.93 s/step (8.1 img/s/worker),
64 workers ~4.08 s/step (7.8 img/s/worker) at 10 Gb/s and 1 ms per task: the 1.64 MB gradient
costs ~1.3 ms a hop, 4 (16) or 6 (64) levels up and down; the scheduler's 3n - 1 tasks (47 ms,
191 ms) are the largest part beyond compute.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import pathlib  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import gradreg as gr  # noqa: E402

GRAPHS = pathlib.Path(__file__).resolve().parent / "graphs"
PER_WORKER = 32
LR = 0.002


def model() -> tuple[gr.Graph, list[str]]:
    """The frozen MobileNetV2 with a loss on its softmax output, and its weight Consts (the xs)."""
    xs = json.loads((GRAPHS / "manifest.json").read_text())["mobilenet_v2_64"]["xs"][1:]   # all but x:0
    graph = gr.load_graph(str(GRAPHS / "mobilenet_v2_64" / "forward.pb"))
    with graph.as_default():
        labels = gr.placeholder(gr.int32, [None], name="labels")
        picked = gr.reduce_sum(graph.get_tensor("Identity:0") * gr.one_hot(labels, 10), axis=1)
        gr.reduce_mean(-gr.log(picked + 1e-7), name="loss")
    return graph, xs


def batch(size: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"x:0": rng.uniform(-1, 1, (size, 64, 64, 3)).astype(np.float32),
            "labels:0": rng.integers(0, 10, size).astype(np.int32)}


@contextlib.contextmanager
def cluster(workers: int):
    """A scheduler and ``workers`` worker processes started as commands; stopped on exit."""
    env = dict(os.environ, DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON__MALLOC_TRIM_THRESHOLD_="None")
    with tempfile.TemporaryDirectory() as tmp, open(os.path.join(tmp, "log"), "w") as logs:
        scheduler_file = os.path.join(tmp, "scheduler.json")
        procs = [subprocess.Popen(["dask", "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                   "--scheduler-file", scheduler_file], env=env, stdout=logs, stderr=logs)]
        try:
            for _ in range(600):
                if os.path.exists(scheduler_file):
                    break
                time.sleep(0.1)
            for _ in range(workers):
                procs.append(subprocess.Popen(
                    ["dask", "worker", "--scheduler-file", scheduler_file, "--nthreads", "1", "--nworkers", "1",
                     "--host", "127.0.0.1", "--no-dashboard", "--memory-limit", "0"],
                    env=env, stdout=logs, stderr=logs))
            yield scheduler_file
        finally:
            for proc in reversed(procs):
                proc.terminate()
            for proc in reversed(procs):
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def _busy(spec, dask_worker):
    return dict(dask_worker.plugins[spec.plugin].entries[spec].busy)


def _received(dask_worker):
    return sum(e["total"] for e in dask_worker.transfer_incoming_log)


def measure(workers: int, steps: int) -> dict:
    from distributed import Client

    from gradreg.distributed import DataParallel
    graph, xs = model()
    with cluster(workers) as scheduler_file, Client(scheduler_file=scheduler_file, timeout="60s") as client:
        client.wait_for_workers(workers, timeout=120)
        dp = DataParallel(graph, xs=xs, client=client, split=["x:0", "labels:0"], shards=workers)
        optimizer = gr.train.GradientDescentOptimizer(LR)
        update = dp.update_for(optimizer)
        dp.train(optimizer, [batch(PER_WORKER * workers, 0)], steps=1, progress=False)     # warm-up: compile
        received0 = client.run(_received)
        times, computes, applies = [], [], []
        for step in range(steps):
            busy0 = client.run(_busy, dp.spec)
            start = time.perf_counter()
            dp.train_step(update, batch(PER_WORKER * workers, step + 1))
            times.append(time.perf_counter() - start)
            busy1 = client.run(_busy, dp.spec)
            # one worker (one shard) runs the whole step as one plan: its update is in "step"
            computes.append(sum(busy1[w][k] - busy0[w][k] for w in busy0 for k in ("shard", "step")) / workers)
            applies.append(sum(busy1[w]["apply"] - busy0[w]["apply"] for w in busy0) / workers)
        received1 = client.run(_received)
        compute, apply = statistics.median(computes), statistics.median(applies)   # per worker, median step
        received = sum(received1[w] - received0[w] for w in received0) / (steps * workers)
        grad_bytes = sum(int(np.prod(x.shape.as_list())) * 4 for x in dp.xs)
        shard_bytes = sum(v.nbytes for v in batch(PER_WORKER, 0).values())
        return {"workers": workers, "times": times, "compute": compute, "apply": apply, "received": received,
                "grad_bytes": grad_bytes, "shard_bytes": shard_bytes, "retries": dp.retries}


def estimate(one: dict, n: int, bandwidth: float, per_task: float) -> float:
    levels = math.ceil(math.log2(n)) if n > 1 else 0
    hop = one["grad_bytes"] / bandwidth
    add = one["grad_bytes"] / 4 / 1e9          # an elementwise add of P bytes: ~1 ns per float on one core
    tasks = 3 * n - 1 if n > 1 else 1
    return (one["compute"] + one["apply"] + levels * (hop + add) + levels * hop
            + one["shard_bytes"] / bandwidth + tasks * per_task)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--bandwidth", type=float, default=1.25e9, help="bytes/s between machines (10 Gb/s)")
    args = parser.parse_args(argv)
    print(f"MobileNetV2 alpha 0.35 64x64 (TF-frozen at batch 8, freed), {PER_WORKER} images per worker, SGD; "
          f"`dask scheduler` + `dask worker` processes; {os.cpu_count()} cores; "
          f"load {_load()}")
    print(f"{'workers':>7} {'s/step':>18} {'img/s/worker':>12} | {'compute(32) s':>13} {'update s':>8} "
          f"{'MB in/worker':>12} {'gradient MB':>11}")
    results = []
    for n in [int(w) for w in args.workers.split(",")]:
        r = measure(n, args.steps)
        results.append(r)
        step = statistics.median(r["times"])
        print(f"{n:>7} {step:7.2f} [{min(r['times']):.2f}..{max(r['times']):.2f}] {PER_WORKER / step:12.1f} | "
              f"{r['compute']:13.2f} {r['apply']:8.3f} {r['received'] / 1e6:12.2f} {r['grad_bytes'] / 1e6:11.2f}"
              + (f"  (retries {r['retries']})" if r["retries"] else ""), flush=True)
    one = results[0]
    measured_one = statistics.median(one["times"])
    per_task = max(1e-3, measured_one - one["compute"] - one["apply"])   # what one worker's step cost beyond compute
    print(f"\nestimate ({args.bandwidth * 8 / 1e9:g} Gb/s, compute from the 1-worker run; scheduler cost per task "
          f"1 ms as Dask documents it, or {per_task * 1e3:.0f} ms as the 1-worker run here had beyond compute):")
    print(f"{'workers':>7} {'s/step (1 ms/task)':>18} {'img/s/worker':>12} {'s/step (here)':>14} {'img/s/worker':>12}")
    for n in (1, 2, 4, 16, 64):
        low, high = estimate(one, n, args.bandwidth, 1e-3), estimate(one, n, args.bandwidth, per_task)
        print(f"{n:>7} {low:18.2f} {PER_WORKER / low:12.1f} {high:14.2f} {PER_WORKER / high:12.1f}")
    print(f"load after: {_load()}")


def _load() -> list[str]:
    """The machine's load average over 1, 5 and 15 minutes."""
    return pathlib.Path("/proc/loadavg").read_text().split()[:3]


if __name__ == "__main__":
    sys.exit(main())
