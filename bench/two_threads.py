"""How much a second thread gets done on this machine: the same work on one thread, then on two
at once, for compute-bound, sgemm and memory-bound work.

    python bench/two_threads.py [--repeats 3]

A speed figure that needs both cores means little on a machine whose second vCPU is not a
core's worth (a hyperthread sibling, a host that throttles the VM): this prints, for each kind of
work, the throughput of two threads beside each other against one alone (2.00x: two full
cores). The work: a compiled multiply-add loop that touches no memory (numba, without the GIL),
single-threaded sgemm at a ResNet50 3x3 convolution's im2col size, and ``np.add`` over arrays
far beyond the caches (80 MB each). BLAS runs on one thread in each.
"""
from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits


def _compute() -> Callable[[int], object]:
    import numba

    @numba.njit(nogil=True, cache=False)
    def fma(n: int) -> float:
        a, b = 1.0, 0.999999
        for _ in range(n):
            a = a * b + 1e-9
        return a

    fma(10)
    return lambda k: fma(100_000_000)


def _sgemm() -> Callable[[int], object]:
    rng = np.random.default_rng(0)
    a = [rng.random((3136, 576), np.float32) for _ in range(2)]
    b = rng.random((576, 64), np.float32)

    def work(k: int) -> None:
        for _ in range(20):
            np.dot(a[k], b)
    return work


def _memory() -> Callable[[int], object]:
    n = 20_000_000
    x = [np.ones(n, np.float32) for _ in range(4)]
    out = [np.ones(n, np.float32) for _ in range(2)]      # written once: no page faults timed

    def work(k: int) -> None:
        for _ in range(5):
            np.add(x[2 * k], x[2 * k + 1], out=out[k])
    return work


def throughput(work: Callable[[int], object]) -> tuple[float, float, float]:
    """(seconds on one thread, seconds for two threads each doing the same, their throughput
    against one thread's)."""
    start = time.perf_counter()
    work(0)
    one = time.perf_counter() - start
    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    two = time.perf_counter() - start
    return one, two, 2 * one / two


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f} (1 min)")
    kinds = {"compute (multiply-add loop)": _compute, "sgemm (3136x576 @ 576x64)": _sgemm,
             "memory (np.add, 80 MB arrays)": _memory}
    with threadpool_limits(1):
        for label, make in kinds.items():
            try:
                work = make()
            except ImportError:
                print(f"{label}: skipped (numba is not installed)")
                continue
            figures = [throughput(work) for _ in range(args.repeats)]
            ratios = ", ".join(f"{r:.2f}x" for _, _, r in figures)
            print(f"{label}: one thread {min(f[0] for f in figures) * 1e3:.0f} ms, two at once "
                  f"{min(f[1] for f in figures) * 1e3:.0f} ms; two threads' throughput {ratios} one thread's")


if __name__ == "__main__":
    main()
