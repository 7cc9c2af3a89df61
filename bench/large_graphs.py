"""A GraphDef of 10**6 nodes: gradreg's load and ``gradreg inspect`` beside TensorFlow's import_graph_def.

    python bench/large_graphs.py [--nodes 1000000] [--runs 3] [--no-tf] [--keep DIR]

The graph is a chain: a Placeholder, then Identity and AddV2(prev, prev) nodes taking turns, each
reading the one before (float32, attr T) -- 42 MB as a binary GraphDef, written straight in the
wire format (a few seconds). Each figure is one process of its own, measured from outside (wall
clock and peak resident memory of the whole process, Python's start-up and imports included)
and from inside (seconds of the step itself, ``in-process``):

* ``gradreg inspect``: the command a user runs on a file (``gradreg inspect FILE``, its entry point);
  over 100,000 nodes it summarizes the file from a node table without building the graph;
* ``gradreg inspect --full``: the same command building the graph (and inferring shapes);
* ``gradreg load``: ``gradreg.load_graph(FILE)`` alone;
* ``tf import``: ``tf.compat.v1.GraphDef.FromString`` then ``tf.graph_util.import_graph_def``
  into a new graph (when TensorFlow is installed).

Each runs ``--runs`` times with the file's pages dropped from the page cache first (``cold``:
``posix_fadvise(DONTNEED)``, the file's only; Python and the libraries stay cached) and as many
times with them cached (``warm``); printed: the median and the spread (min..max). Targets
(issue 27): ``gradreg inspect`` <= 5 s and <= 1 GB resident. The machine's load average is
printed too: the host is shared, and the spread shows how much that mattered.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from _timing import report_load

ROOT = pathlib.Path(__file__).resolve().parent.parent

DT_FLOAT = 1


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def chain_graph_def(n: int) -> bytes:
    """The serialized GraphDef of the chain (see the module docstring): NodeDef fields name (1),
    op (2), input (3), attr (5: key "T", AttrValue.type = DT_FLOAT)."""
    attr_t = _field(5, _field(1, b"T") + _field(2, _varint(6 << 3 | 0) + _varint(DT_FLOAT)))
    attr_dtype = _field(5, _field(1, b"dtype") + _field(2, _varint(6 << 3 | 0) + _varint(DT_FLOAT)))
    parts = [_field(1, _field(1, b"x") + _field(2, b"Placeholder") + attr_dtype)]
    previous = b"x"
    for i in range(1, n):
        name = b"n%d" % i
        if i % 2:
            body = _field(1, name) + _field(2, b"Identity") + _field(3, previous) + attr_t
        else:
            body = _field(1, name) + _field(2, b"AddV2") + _field(3, previous) + _field(3, previous) + attr_t
        parts.append(_field(1, body))
        previous = name
    return b"".join(parts)


# What each contender's process runs; it prints {"seconds": ...} (the step, timed inside) last,
# then ends at once (os._exit): the teardown of a million objects is not the step.
_GRADREG_LOAD = """
import json, os, sys, time
import gradreg
start = time.perf_counter()
graph = gradreg.load_graph(sys.argv[1])
seconds = time.perf_counter() - start
assert len(graph) == int(sys.argv[2]), len(graph)
print(json.dumps({"seconds": seconds}), flush=True)
os._exit(0)
"""
_TF_IMPORT = """
import json, os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
start = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    graph_def = tf.compat.v1.GraphDef.FromString(f.read())
with tf.Graph().as_default() as graph:
    tf.graph_util.import_graph_def(graph_def, name="")
seconds = time.perf_counter() - start
assert len(graph.get_operations()) == int(sys.argv[2])
print(json.dumps({"seconds": seconds}), flush=True)
os._exit(0)
"""
# The ``gradreg`` command itself (gradreg.cli.entry, as the console script runs it).
_GRADREG_INSPECT = """
import atexit, sys, time
start = time.perf_counter()
atexit.register(lambda: print('{"seconds": %r}' % (time.perf_counter() - start)))
sys.argv = ["gradreg", "inspect", sys.argv[1]] + sys.argv[3:]
from gradreg.cli import entry
entry()
"""


def drop_from_cache(path: pathlib.Path) -> None:
    """Evict the file's pages from the page cache (only this file's; no privileges needed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


# Python's bytecode cache on, as after ``pip install`` (which compiles it): without it each process
# compiles gradreg's sources again. main() writes it first, untimed.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(script: str, path: pathlib.Path, nodes: int, extra: tuple[str, ...] = ()) -> dict:
    """One process: its wall clock, peak resident set (wait4's rusage) and the step's seconds."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", script, str(path), str(nodes), *extra], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=ENV)
    out_err: list[str] = []
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    out_err = [process.stdout.read(), process.stderr.read()]   # the output is small: no pipe fills
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"contender failed ({status}): {out_err[1][-2000:]}")
    inside = json.loads(out_err[0].strip().splitlines()[-1])["seconds"]
    return {"wall": wall, "inside": inside, "rss_mb": usage.ru_maxrss / 1024, "cpu": usage.ru_utime + usage.ru_stime}


def python_speed() -> float:
    """CPU seconds of 10**7 additions in a Python loop: how fast this host runs Python now."""
    start = time.process_time()
    total = 0
    for i in range(10**7):
        total += i
    return time.process_time() - start


def _spread(values: list[float], unit: str, fmt: str = "{:.2f}") -> str:
    return (f"{fmt.format(statistics.median(values))}{unit} "
            f"({fmt.format(min(values))}..{fmt.format(max(values))})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-tf", action="store_true", help="leave TensorFlow out")
    parser.add_argument("--keep", metavar="DIR",
                        help="write the graph in DIR (reused if there) instead of a temporary one")
    args = parser.parse_args()
    directory = pathlib.Path(args.keep) if args.keep else pathlib.Path(tempfile.mkdtemp(prefix="gradreg-large-"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"chain_{args.nodes}.pb"
    if not path.exists():
        start = time.perf_counter()
        path.write_bytes(chain_graph_def(args.nodes))
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - start:.1f} s")
    contenders = {"gradreg inspect": (_GRADREG_INSPECT, ()), "gradreg inspect --full": (_GRADREG_INSPECT, ("--full",)),
                  "gradreg load": (_GRADREG_LOAD, ())}
    if not args.no_tf:
        try:
            import importlib.util
            if importlib.util.find_spec("tensorflow") is not None:
                contenders["tf import"] = (_TF_IMPORT, ())
        except ValueError:
            pass
    subprocess.run([sys.executable, "-c", "import gradreg.cli, gradreg.formats.graphdef"], env=ENV, check=True)
    print(report_load())
    print(f"a plain Python loop of 10**7 additions takes {python_speed():.2f} s of CPU here now (the host's "
          f"speed: it moves with the load)")
    print(f"chain of {args.nodes:,} nodes, {path.stat().st_size / 1e6:.1f} MB; median (min..max) of {args.runs} "
          f"processes each")
    print(f"  {'':32s} {'wall, whole process':>24s} {'in-process':>22s} {'CPU, whole process':>22s} "
          f"{'peak RSS':>22s}")
    for cache in ("cold", "warm"):
        results: dict[str, list[dict]] = {name: [] for name in contenders}
        for _ in range(args.runs):       # the contenders take turns, so that load hits them alike
            for name, (script, extra) in contenders.items():
                if cache == "cold":
                    drop_from_cache(path)
                else:
                    path.read_bytes()
                results[name].append(run_once(script, path, args.nodes, extra))
        for name, runs in results.items():
            print(f"  {name + ' (' + cache + ')':32s} {_spread([r['wall'] for r in runs], ' s'):>24s} "
                  f"{_spread([r['inside'] for r in runs], ' s'):>22s} {_spread([r['cpu'] for r in runs], ' s'):>22s} "
                  f"{_spread([r['rss_mb'] for r in runs], ' MB', '{:.0f}'):>22s}")
    print(report_load())
    if not args.keep:
        path.unlink()
        directory.rmdir()


if __name__ == "__main__":
    main()
