"""A training step's peak memory against its largest live set (issue 31, target 3: peak <= 1.2x).

    python bench/peak_memory.py [NAME ...] [--contender gradreg --contender tensorflow]

NAME is one of bench/realistic.py's graph sets (default: mobilenet_v2_224 resnet50_224). Each
contender runs in a fresh process of its own (one at a time): it makes the step as
bench/realistic.py does (gradreg settled: compiled kernels built, call mode chosen), runs it a
few times, then measures one step:

* **the largest live set** (gradreg only): the step's plan is traced line by line
  (``sys.settrace`` on the generated ``_plan`` function; nothing else is traced) and after each
  statement the arrays its variables hold are summed, each memory block once (a view counts
  its base). That is what the schedule keeps alive at once: the fed inputs (weights, batch,
  cotangent), the intermediates not yet released and the outputs. A fused group's inner values
  and a kernel's own scratch are not variables, so they are not in it.
* **the peak**: after ``gc.collect()`` and ``malloc_trim(0)`` (free heap back to the system), the
  process's resident set before the step, its high-water mark reset (``/proc/self/clear_refs``),
  one step, and the high-water mark after it. The step's extra peak is the difference; the
  peak is that plus what the step holds from before it: its inputs and the memory gradreg
  keeps from call to call (``kernel_support.Recycler``'s arrays and the plan allocator's freed
  blocks, summed). For TensorFlow only the
  step's extra peak is printed (its own buffers between calls are not visible from Python).

Linux only (``/proc/self/status``, ``clear_refs``, glibc's ``malloc_trim``).
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import pathlib
import subprocess
import sys

import numpy as np

BENCH = pathlib.Path(__file__).resolve().parent
MiB = 1 << 20


def _status(field: str) -> int:
    """A /proc/self/status field in bytes (VmRSS, VmHWM)."""
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _blocks(value, seen: dict[int, int]) -> None:
    """Add the memory blocks ``value`` holds (arrays, in tuples and lists) to ``seen``: id -> bytes."""
    if isinstance(value, np.ndarray):
        root = value
        while isinstance(root.base, np.ndarray):
            root = root.base
        seen[id(root)] = root.nbytes
    elif isinstance(value, (tuple, list)):
        for item in value:
            _blocks(item, seen)


def live_set(step) -> tuple[int, int]:
    """(largest bytes the step's plan holds after any of its statements, the fed inputs' bytes)."""
    largest = [0, 0]

    def local(frame, event, arg):
        if event in ("line", "return"):
            seen: dict[int, int] = {}
            for value in frame.f_locals.values():
                _blocks(value, seen)
            if event == "return":
                _blocks(arg, seen)
            largest[0] = max(largest[0], sum(seen.values()))
            if not largest[1]:
                inputs: dict[int, int] = {}
                _blocks(frame.f_locals.get("_feeds"), inputs)
                largest[1] = sum(inputs.values())
        return local

    def enter(frame, event, arg):
        return local if frame.f_code.co_filename.startswith("<gradreg-plan-") else None

    sys.settrace(enter)
    try:
        step()
    finally:
        sys.settrace(None)
    return largest[0], largest[1]


def recycled_bytes() -> int:
    """Bytes gradreg keeps between calls to hand out again: every Recycler's arrays, and the
    freed blocks the plan allocator keeps (gradreg.backends.native.allocator)."""
    from gradreg.backends.memory import Recycler
    from gradreg.backends.native import allocator
    return (sum(b.nbytes for r in gc.get_objects() if isinstance(r, Recycler) for b in r._buffers)
            + allocator.counters()["kept"])


def extra_peak(step) -> tuple[int, int]:
    """(resident bytes before one step, the high-water mark's rise during it)."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = _status("VmRSS")
    pathlib.Path("/proc/self/clear_refs").write_text("5")
    step()
    return before, _status("VmHWM") - before


def child(name: str, contender: str) -> dict:
    sys.path.insert(0, str(BENCH))
    import realistic
    if contender == "gradreg":
        step, _ = realistic.gradreg_step(name)
        for _ in range(2):
            step()
        live, inputs = live_set(step)
        step()
        gc.collect()
        kept = recycled_bytes()     # (as the step starts: the allocator's blocks are resident then)
        before, extra = extra_peak(step)
        return {"live": live, "inputs": inputs, "kept": kept, "before": before, "extra": extra,
                "peak": inputs + kept + extra}
    step, _ = realistic.tensorflow_step(name)
    for _ in range(3):
        step()
    before, extra = extra_peak(step)
    return {"before": before, "extra": extra}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", default=["mobilenet_v2_224", "resnet50_224"])
    parser.add_argument("--contender", action="append", choices=["gradreg", "tensorflow"])
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(*args.child)), flush=True)
        return
    print(f"load {os.getloadavg()[0]:.2f}", flush=True)
    for name in args.names:
        for contender in args.contender or ["gradreg", "tensorflow"]:
            done = subprocess.run([sys.executable, __file__, "--child", name, contender],
                                  capture_output=True, text=True, check=False)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
            if done.returncode or not lines:
                print(f"{name} {contender}: failed ({done.returncode})\n{done.stderr[-2000:]}", flush=True)
                continue
            r = json.loads(lines[-1][7:])
            if contender == "gradreg":
                print(f"{name} gradreg: largest live set {r['live'] / MiB:,.0f} MiB (inputs {r['inputs'] / MiB:,.0f}); "
                      f"peak {r['peak'] / MiB:,.0f} MiB = inputs + kept between calls {r['kept'] / MiB:,.0f} + "
                      f"the step's extra {r['extra'] / MiB:,.0f}: {r['peak'] / r['live']:.2f}x the live set "
                      f"(resident before the step {r['before'] / MiB:,.0f} MiB)", flush=True)
            else:
                print(f"{name} {contender}: the step's extra peak {r['extra'] / MiB:,.0f} MiB "
                      f"(resident before the step {r['before'] / MiB:,.0f} MiB)", flush=True)
    print(f"load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
