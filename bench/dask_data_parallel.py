"""Data-parallel training steps on Dask against the single-process step: the TF-written MLP, batch 128.

    pip install ".[dask]" && python bench/dask_data_parallel.py [--rounds 10] [--steps 32] [--workers 1,2,4]
                                                               [--data resident,sent] [--steps-per-task N]

bench/graphs/mlp_784_512_512_10/forward.pb is the TF1 MLP 784-512-512-10 with its batch fixed
at 128 (``x [128, 784]``), resource variables; DataParallel frees the batch. One step:
forward, backward and SGD update of the six variables (2.7 MB of parameters), the loss
returned.

For each worker count a LocalCluster of processes (one thread each; every process runs BLAS on
one thread, so the single-process step is timed on one core too: the fair comparison, and
what Dask's nannies set) is started; both sides are warmed up until the numba kernels their
plans queued are built. Both sides train on the same shuffled batches of 128 from one training
set of 8,192 examples: this process indexes its arrays; the workers index their copy, sent once
by ``DataParallel.scatter`` (``--data resident``: a step sends row numbers), or receive each
batch with its step (``--data sent``). Then the rounds alternate: ``--steps`` single-process
steps in this process, then ``--steps`` data-parallel steps (``DataParallel.run_steps``, two
calls in flight), so a burst of load on the shared machine hits both alike. Reported: the median time per step
and its spread (min..max over rounds), the ratio of the medians (target, issue 30: one worker
<= 1.2x), the median of each round's own ratio with its spread ("paired": a round's two halves
run within ~0.1 s of each other, so a change of load between rounds cancels), and the
overhead per part, per step:

* compute: the workers' compute (from the replicas' own clocks: with one shard the whole
  step, with more the shards' forward/backward and the updates, summed over workers), per
  step;
* reduction: the pairwise sums' compute, and the transfers of partial sums and of the total
  to the workers that apply it (bytes, and the time Dask's task stream records);
* serialisation: pickling the step's shards on the driver (timed here) -- the worker
  unpickles the same bytes;
* sched+wait: what is left of the step's wall time. One worker (one shard): the driver's
  calls of the worker's StepRunner actor (driver -> worker -> driver, no scheduler), a call
  of ~0.1 s of steps, its shards (or row numbers) inside; more workers: the tasks' trips
  through the scheduler.
  Both include waiting for a core.

Bytes per step: the shards the driver sends inside the calls or tasks, plus what the workers
send each other (Dask's transfer logs). The parameters are sent once, before the first step.

Measured 2026-11-29 12:07 (``--rounds 10 --steps 32 --workers 1``, three runs, load 1.1-1.5;
ms/step, median [min..max] over rounds; docs/benchmarks.md has the table and what changed):

    data      1 proc ms    dask ms       ratio  paired              compute  sched+wait
    resident  7.0 [6..8]   8.0 [6..9]    1.13   1.09 [1.00..1.47]   7.0      0.9
    resident  6.6 [6..9]   7.4 [6..10]   1.11   1.10 [1.00..1.21]   7.0      0.3
    resident  6.5 [6..7]   6.7 [6..8]    1.03   1.04 [0.90..1.21]   6.2      0.5
    sent      5.8 [6..6]   6.9 [7..7]    1.18   1.21 [1.12..1.23]   5.7      1.2
    sent      6.4 [6..8]   8.1 [7..11]   1.26   1.25 [0.92..1.59]   6.9      1.2
    sent      6.2 [6..7]   7.2 [7..9]    1.17   1.18 [1.10..1.41]   5.9      1.3

The target, one worker <= 1.2x, is met with the data resident (1 kB of row numbers a step);
with each batch sent (0.40 MB a step) it is at the line. Earlier the same day, before the
data stayed on the workers, the graph was sized to the batch and calls grew to ~0.1 s
(``--rounds 5 --steps 8``): 1.30, 1.27, 1.45.

Before (issue 30; --rounds 5 --steps 8; load average 19 on the 2 cores from other work, so a
process waiting for a core is most of what is left; medians [min..max] over rounds):

    workers  1 proc ms        dask ms            ratio  compute  reduce  transfer  pickle  sched+wait  MB/step
          1  79.6 [73..140]   235.0 [124..246]   2.95    78.0     0.0     0.0      0.05   156.9       0.40 + 0
          2  57.0 [35..65]    458.1 [368..579]   8.04   144.1     3.5    96.6      0.08   285.9       0.40 + 5.36
          4  100.7 [67..133]  1148.7 [1055..2740] 11.41  330.8    33.6   849.1      0.13   183.1       0.40 + 16.2

(the 2.68 MB of parameters went once; per step the shards, 0.40 MB, and with n workers the
partial sums and the total, 2.68 MB each, between workers). The target, one worker <= 1.2x, is
not met at this load; a task's round trip through the scheduler alone measured 51 ms median
(11 ms min) here against ~1-3 ms on an idle machine.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):   # one core per process
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import pathlib  # noqa: E402
import pickle  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402

import numpy as np  # noqa: E402

import gradreg as gr  # noqa: E402

GRAPH = pathlib.Path(__file__).resolve().parent / "graphs" / "mlp_784_512_512_10" / "forward.pb"
LR = 0.01
# Dask's nannies set MALLOC_TRIM_THRESHOLD_=65536, which turns off glibc's reuse of freed large
# blocks: every 256 kB activation is a fresh mmap and its page faults (the step's compute ~1.5x).
NO_TRIM = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


def batch(size: int = 128, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    return {"x:0": rng.normal(size=(size, 784)).astype(np.float32),
            "labels:0": rng.integers(0, 10, size).astype(np.int32)}


def dataset(batches: int = 64, size: int = 128) -> dict:
    """The training set both sides read their batches from: ``batches`` x ``size`` examples (25.7 MB)."""
    return batch(batches * size, seed=2)


def single_process_step(feeds: dict):
    """The single-process SGD step on the graph as TensorFlow wrote it (batch 128); ``step(f)``
    runs it on the feeds ``f`` (``step()`` on ``feeds``)."""
    graph = gr.load_graph(str(GRAPH))
    variables = gr.train.find_variables(graph)
    with graph.as_default():
        train = gr.train.GradientDescentOptimizer(LR).minimize(graph.get_tensor("loss:0"), var_list=variables)
    session = gr.Session(graph)
    session.run([v.initializer for v in variables])
    run = session.make_callable([train, "loss:0"], list(feeds))
    return lambda given=feeds: run(*given.values())


def _busy(spec, dask_worker):
    return dict(dask_worker.plugins[spec.plugin].entries[spec].busy)


def _kernels_built(dask_worker=None) -> None:
    """Wait for the numba kernels a plan queued to its background builder (the steps run on NumPy's until then)."""
    from gradreg.backends.numba.jit import wait_for_kernels
    wait_for_kernels(300)


def _transfers(dask_worker):
    return [(dict(e["keys"]), e["total"], e.get("duration", 0.0)) for e in dask_worker.transfer_incoming_log]


def measure(workers: int, feeds: dict, rounds: int, steps: int, data: str = "resident",
            per_call: int | None = None) -> dict:
    """Rounds of ``steps`` single-process steps then ``steps`` data-parallel ones, on the same
    shuffled batches of :func:`dataset`. ``data``: "resident" (scattered to the workers once,
    a step sends row numbers) or "sent" (each step's batch sent with it)."""
    import dask
    from distributed import Client, LocalCluster, get_task_stream

    from gradreg.distributed import DataParallel
    single = single_process_step(feeds)
    arrays = dataset()
    with dask.config.set(NO_TRIM), LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                dashboard_address=":0") as cluster, Client(cluster) as client:
        dp = DataParallel(str(GRAPH), loss="loss:0", client=client, split=["x:0", "labels:0"])
        resident = dp.scatter(arrays)
        order = resident.batches(128, shuffle=True, seed=0)

        def next_batches():
            chosen = [next(order) for _ in range(steps)]
            return chosen if data == "resident" else [resident.take(b, arrays) for b in chosen]

        update = dp.update_for(gr.train.GradientDescentOptimizer(LR))
        for _ in range(2):   # compile everywhere: the plans, then the numba kernels they queue
            dp.train(gr.train.GradientDescentOptimizer(LR), next_batches()[:3], steps=3, progress=False)
            for _ in range(3):
                single()
            _kernels_built()
            client.run(_kernels_built)
        one, many, records = [], [], []
        before = client.run(_transfers)
        busy_before = client.run(_busy, dp.spec)
        for _ in range(rounds):
            chosen = [next(order) for _ in range(steps)]
            start = time.perf_counter()
            for b in chosen:
                single(resident.take(b, arrays))
            one.append((time.perf_counter() - start) / steps)
            with get_task_stream(client) as stream:
                start = time.perf_counter()
                sent = chosen if data == "resident" else [resident.take(b, arrays) for b in chosen]
                dp.run_steps(update, sent, window=2, steps_per_task=per_call)
                many.append((time.perf_counter() - start) / steps)
            records += stream.data
        after = client.run(_transfers)
        busy = {k: sum(client.run(_busy, dp.spec)[w][k] - busy_before[w][k] for w in busy_before)
                for k in ("shard", "apply", "step")}
        _, shards = dp._split(chosen[0] if data == "resident" else resident.take(chosen[0], arrays), None)
        pickle_s = _median_time(lambda: [pickle.dumps(s.feeds, protocol=5) for s in shards])
        moved = defaultdict(float)
        for address, entries in after.items():
            for keys, total, duration in entries[len(before[address]):]:
                kind = str(next(iter(keys), "-other")).split("-")[1]
                moved[f"{kind} bytes"] += total
                moved[f"{kind} s"] += duration
        total_steps = rounds * steps
        return {"workers": workers, "single": one, "dp": many, "retries": dp.retries,
                "parts": dict(_parts(records, total_steps, pickle_s, moved),
                              compute=(busy["shard"] + busy["apply"] + busy["step"]) / total_steps),
                "shard_bytes": dp.last_step["shard_bytes"],
                "moved": {k: v / total_steps for k, v in moved.items()},
                "params": sum(np.prod(v.shape.as_list()) * 4 for v in dp.xs)}


def _split(dp, feeds):
    from gradreg.distributed.sharding import split_feeds
    return split_feeds(feeds, ["x:0", "labels:0"], dp.shards, "mean")


def _median_time(fn, repeats: int = 20) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _parts(records: list, steps: int, pickle_s: float, moved: dict) -> dict:
    compute = defaultdict(float)
    transfer = 0.0
    for record in records:
        kind = str(record["key"]).split("-")[1]
        for part in record["startstops"]:
            if part["action"] == "compute":
                compute[kind] += part["stop"] - part["start"]
            elif part["action"] == "transfer":
                transfer += part["stop"] - part["start"]
    return {"compute": (compute["step"] + compute["shard"] + compute["apply"]) / steps,
            "reduction": compute["sum"] / steps, "transfer": transfer / steps, "serialisation": pickle_s}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--data", default="resident,sent",
                        help="resident: the training set scattered to the workers once, a step sends row numbers "
                             "(DataParallel.scatter); sent: each step's batch sent with it (default: both)")
    parser.add_argument("--steps-per-task", type=int, default=None,
                        help="with one shard, the steps one call of a worker runs (train's steps_per_task; "
                             "default: as many as take ~0.1 s)")
    args = parser.parse_args(argv)
    feeds = batch()
    print(f"TF-written MLP 784-512-512-10, batch 128 (fixed in the graph, freed), SGD; "
          f"{os.cpu_count()} cores; load before: {_load()}")
    print(f"{'data':>8} {'workers':>7} {'1 proc ms':>16} {'dask ms':>16} {'ratio':>6} {'paired':>16} | per step: "
          f"{'compute':>8} {'reduce':>7} {'transfer':>8} {'pickle':>7} {'sched+wait':>10} | "
          f"MB/step: shards, worker<->worker")
    runs = [(data, int(n)) for n in args.workers.split(",") for data in args.data.split(",")]
    for data, workers in runs:
        r = measure(workers, feeds, args.rounds, args.steps, data, args.steps_per_task)
        one, many = statistics.median(r["single"]), statistics.median(r["dp"])
        paired = [d / s for s, d in zip(r["single"], r["dp"])]    # each round's Dask steps against its own
        parts = r["parts"]
        # compute of n workers runs in parallel: the step's critical path has one worker's share
        critical = parts["compute"] / workers + parts["reduction"] + parts["transfer"] + parts["serialisation"]
        between = sum(v for k, v in r["moved"].items() if k.endswith("bytes"))
        print(f"{data:>8} {workers:>7} {_spread(r['single']):>16} {_spread(r['dp']):>16} {many / one:6.2f} "
              f"{statistics.median(paired):5.2f} [{min(paired):.2f}..{max(paired):.2f}] | "
              f"{parts['compute'] * 1e3:8.1f} {parts['reduction'] * 1e3:7.1f} {parts['transfer'] * 1e3:8.1f} "
              f"{parts['serialisation'] * 1e3:7.2f} {max(0.0, many - critical) * 1e3:10.1f} | "
              f"{r['shard_bytes'] / 1e6:.2f}, {between / 1e6:.2f}"
              + (f"  (retries {r['retries']})" if r["retries"] else ""))
        kinds = ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in sorted(r["moved"].items()) if k.endswith("bytes"))
        print(f"{'':>16} worker<->worker by key kind per step: {kinds or 'none'}; "
              f"parameters {r['params'] / 1e6:.2f} MB, sent once")
    print(f"load after: {_load()} (1, 5, 15 min); medians over rounds, min..max in brackets; ratio: of the "
          f"medians, paired: the median of each round's ratio")


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:.1f} [{min(values) * 1e3:.0f}..{max(values) * 1e3:.0f}]"


def _load() -> list[str]:
    """The machine's load average over 1, 5 and 15 minutes."""
    return pathlib.Path("/proc/loadavg").read_text().split()[:3]


if __name__ == "__main__":
    main()
