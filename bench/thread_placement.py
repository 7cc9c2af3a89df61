"""Where the kernel pool's worker runs: off the calling thread's core, or where Linux puts it.

    python bench/thread_placement.py [--rounds 8] [--calls 12] [--pause 0.25]

gradreg.backends.threads.parallel runs part 0 of a kernel in the calling thread and the other
parts in its pool's workers. After an idle spell Linux tends to queue a woken worker on the
core of the thread that woke it, and the two halves then run one after the other. The pool
sets its workers' affinity to the cores other than the caller's (``_Placement``); this script
measures a parallel call of two equal halves (5 float64 products of 160x160 each, one BLAS
thread) after ``--pause`` seconds idle, with that placement and without it (the workers free to
run anywhere), the two alternating round by round in one process. It prints the median time
of a whole call and of one half alone, for the first call after the pause and for the calls
after it. Needs two free cores.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits

from gradreg.backends import threads

A = np.random.default_rng(0).random((160, 160))


def half(_: int) -> float:
    start = time.perf_counter()
    for _ in range(5):
        A @ A
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--pause", type=float, default=0.25)
    args = parser.parse_args()
    if threads.CORES < 2:
        print("one core: nothing to place")
        return
    with threadpool_limits(1):
        threads.parallel(half, 2)
        threads.parallel(half, 2)
        placement = threads._placement
        assert placement is not None
        if placement.getcpu is None:
            print("this machine does not let gradreg set thread affinity: placement is off")
            return
        getcpu = placement.getcpu
        first: dict[str, list[float]] = {"placed": [], "free": []}
        later: dict[str, list[float]] = {"placed": [], "free": []}
        alone = [half(0) for _ in range(20)]
        for _ in range(args.rounds):
            for label in ("placed", "free"):
                if label == "placed":
                    placement.getcpu, placement.pinned_away_from = getcpu, -1
                else:
                    placement.getcpu = None
                    for tid in placement.workers:
                        os.sched_setaffinity(tid, placement.allowed)
                time.sleep(args.pause)
                for call in range(args.calls):
                    start = time.perf_counter()
                    threads.parallel(half, 2)
                    (first if call == 0 else later)[label].append(time.perf_counter() - start)
        placement.getcpu = getcpu
    print(f"a parallel call of two halves after {args.pause} s idle ({threads.CORES} cores; "
          f"load average {os.getloadavg()[0]:.2f}); one half alone: {statistics.median(alone) * 1e3:.2f} ms")
    for label in ("placed", "free"):
        print(f"  workers {label:<7} first call {statistics.median(first[label]) * 1e3:6.2f} ms   "
              f"calls after it {statistics.median(later[label]) * 1e3:6.2f} ms")
    print("  ideal: one half's time; two halves' time means they ran on one core")


if __name__ == "__main__":
    main()
