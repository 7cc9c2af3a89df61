"""Keras CNNs that TensorFlow froze: forward + gradients, gradreg vs TensorFlow's session.

    python bench/foreign_cnn.py [--only NAME] [--rounds 8] [--calls 2] [--processes 1] [--load] [--memory] [--no-tf]

bench/graphs holds MobileNetV2 (alpha 0.35, 64x64), a slim DenseNet (32x32) and a slim ResNet in
float64 (32x32), batch 8, frozen by convert_variables_to_constants_v2, each with TensorFlow's
gradient graph (tf_grad.pb). One call computes the output and the gradients w.r.t. the input
and every weight, given a cotangent of the output. Contenders, each in its own process taking
turns a few calls at a time (bench/_timing.py):

* ``gradreg``: forward.pb loaded and differentiated by gradreg (default backend, default threads);
  ``gradreg 1 thread`` the same with GRADREG_THREADS=1 (what the second core buys);
* ``tensorflow 2 threads``: TensorFlow's session on tf_grad.pb with intra- and inter-op pools of
  2 threads (the machine's cores); ``tensorflow 1 thread`` with pools of one.

Both check their values against TensorFlow's stored ones first. Target (issue 14): gradreg
<= 1.0x TensorFlow with 2 threads. ``--memory`` prints gradreg's peak memory during a step
(tracemalloc, above what the graph's constants hold) against the step's largest live set (from
the plan: at each point, the bytes of the values produced and still needed; views allocate
nothing); target <= 1.2x. ``--load`` repeats with one other process busy on one core and
prints each contender's slowdown (target: gradreg's no worse than TensorFlow's).
``--processes N`` runs N processes per contender and pools their calls: one configuration's
processes differ by up to 30% on this machine class, as much as the gap to the target.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
from _timing import Contender, busy_process, process_medians, report_load, settle
from foreign_graphs import expected, feeds, graph_path, manifest

CNNS = ("mobilenet_v2_64", "densenet_slim_32", "resnet_slim_f64_32")


def _check(name: str, fetched: list[str], values) -> None:
    """Values against TensorFlow's: the forward output within tests/tf_models' tolerance (relative to
    each tensor's scale); each gradient within 5% in L2 norm for float32 (tight for float64).

    Float32 gradients cannot be held to an elementwise tolerance: in MobileNetV2 two of the 40960
    inputs of the last ReLU6 lie within roundoff of 0 (1e-5), and which side of the kink they fall
    on depends on the order of the sums in the convolutions before; the two flipped gradient
    elements move every gradient upstream by up to ~1.6% in L2 (TensorFlow with and without
    oneDNN differ the same way). A wrong kernel is off by far more."""
    reference = expected(name)
    for i, (tensor, value) in enumerate(zip(fetched, values)):
        want = reference[tensor]
        value = np.asarray(value)
        if value.shape != want.shape:
            raise AssertionError(f"{name}: {tensor} has shape {value.shape}, TensorFlow's {want.shape}")
        if want.dtype == np.float64 or i == 0:
            rtol, atol, scale = (1e-6, 1e-12, 1e-9) if want.dtype == np.float64 else (2e-3, 2e-5, 1e-4)
            ok = np.all(np.abs(value - want) <= rtol * np.abs(want) + atol + scale * np.max(np.abs(want)))
        else:
            ok = np.linalg.norm(value - want) <= 0.05 * np.linalg.norm(want) + 1e-30
        if not ok:
            raise AssertionError(f"{name}: {tensor} differs from TensorFlow's value")


def gradreg_graph(name: str):
    """(graph, fetches, feed tensors): forward.pb differentiated by gradreg."""
    import gradreg as gr
    entry = manifest()[name]
    graph = gr.load_graph(str(graph_path(name)))
    with graph.as_default():
        y = graph.get_tensor_by_name(entry["ys"][0])
        cotangent = gr.placeholder(y.dtype, y.shape, name="grad_ys_0")
        grads = gr.gradients([y], [graph.get_tensor_by_name(x) for x in entry["xs"]], grad_ys=[cotangent])
    return graph, [y] + grads, [graph.get_tensor_by_name("x:0"), cotangent]


def gradreg_step(name: str, backend: str | None = None, warm: bool = True):
    import gradreg as gr
    graph, fetches, feed_tensors = gradreg_graph(name)
    session = gr.Session(graph, backend=backend)
    run = session.make_callable(fetches, feed_tensors)
    given = feeds(name, grad_ys=True)
    values = [given["x:0"], given["grad_ys_0:0"]]
    entry = manifest()[name]
    if warm:
        _check(name, entry["fetches"] + entry["tf_grad_tensors"], run(*values))
        settle(lambda: run(*values))
        _check(name, entry["fetches"] + entry["tf_grad_tensors"], run(*values))
    return lambda: run(*values), {"backend": session.backend}


def gradreg_forward_step(name: str, backend: str | None = None, warm: bool = True):
    """Inference: forward.pb's output alone (no gradients), as a served model runs it."""
    import gradreg as gr
    entry = manifest()[name]
    graph = gr.load_graph(str(graph_path(name)))
    session = gr.Session(graph, backend=backend)
    run = session.make_callable(entry["ys"][:1], ["x:0"])
    value = feeds(name)["x:0"]
    if warm:
        _check(name, entry["ys"][:1], run(value))
        settle(lambda: run(value))
        _check(name, entry["ys"][:1], run(value))
    return lambda: run(value), {"backend": session.backend}


def tensorflow_step(name: str, threads: int = 2, warm: bool = True):
    import tensorflow as tf
    tf1 = tf.compat.v1
    entry = manifest()[name]
    graph_def = tf1.GraphDef()
    graph_def.ParseFromString(graph_path(name, "tf_grad.pb").read_bytes())
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    config = tf1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads)
    session = tf1.Session(graph=graph, config=config)
    fetched = entry["fetches"] + entry["tf_grad_tensors"]
    run = session.make_callable(fetched, ["x:0", "grad_ys_0:0"])
    given = feeds(name, grad_ys=True)
    values = [given["x:0"], given["grad_ys_0:0"]]
    if warm:
        _check(name, fetched, run(*values))
    return lambda: run(*values), {"threads": threads}


def contenders(name: str, with_tf: bool) -> list[Contender]:
    found = [Contender("gradreg", "foreign_cnn:gradreg_step", {"name": name}),
             Contender("gradreg 1 thread", "foreign_cnn:gradreg_step", {"name": name}, env={"GRADREG_THREADS": "1"})]
    if with_tf:
        found.append(Contender("tensorflow 2 threads", "foreign_cnn:tensorflow_step", {"name": name, "threads": 2}))
        found.append(Contender("tensorflow 1 thread", "foreign_cnn:tensorflow_step", {"name": name, "threads": 1}))
    return found


def show(figures, title: str) -> None:
    print(title)
    reference = figures.get("tensorflow 2 threads")
    for label, f in figures.items():
        line = f"  {label:<22} {f.median * 1e3:8.2f} ms (CPU {f.cpu_median * 1e3:7.2f} ms)"
        if reference is not None:
            line += f"  {f.median / reference.median:5.2f}x TensorFlow 2 threads"
        print(line)


def memory(name: str) -> None:
    """Peak memory of one gradreg step against its largest live set (in this process)."""
    import tracemalloc

    from mlp_training import largest_live_set

    import gradreg as gr
    graph, fetches, feed_tensors = gradreg_graph(name)
    session = gr.Session(graph)
    run = session.make_callable(fetches, feed_tensors)
    given = feeds(name, grad_ys=True)
    values = [given["x:0"], given["grad_ys_0:0"]]
    # The steady state, as the timings: numba's kernels built and swapped in (tracemalloc counts
    # every thread's allocations, a background build's too).
    settle(lambda: run(*values))
    live = largest_live_set(session, fetches, feed_tensors)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        run(*values)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    print(f"  peak memory of a gradreg step {peak / 2**20:7.2f} MiB; largest live set {live / 2**20:7.2f} MiB; "
          f"ratio {peak / live:4.2f} (target <= 1.2)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=CNNS)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--processes", type=int, default=1,
                        help="processes per contender, their calls pooled (the spread between processes of one "
                             "configuration is as large as the gap to the target)")
    parser.add_argument("--load", action="store_true", help="also measure with one core kept busy")
    parser.add_argument("--memory", action="store_true", help="also measure gradreg's peak memory")
    parser.add_argument("--no-tf", action="store_true")
    args = parser.parse_args()
    import importlib.util
    with_tf = not args.no_tf and importlib.util.find_spec("tensorflow") is not None
    if not with_tf:
        print("TensorFlow not installed: no TensorFlow column (pip install '.[tf]')")
    for name in args.only or CNNS:
        print(report_load("before"))
        chosen = contenders(name, with_tf)
        idle = process_medians(chosen, args.rounds, args.calls, processes=args.processes)
        where = "its own process" if args.processes == 1 else f"{args.processes} processes of its own"
        show(idle, f"{name}: forward + gradients, medians of {args.rounds * args.calls * args.processes}, each "
                   f"contender in {where}; {report_load('after')}")
        if args.load:
            with busy_process():
                loaded = process_medians(chosen, args.rounds, args.calls, processes=args.processes)
            show(loaded, f"  the same with one other process busy on one core; {report_load('after')}")
            for label in loaded:
                print(f"  {label:<22} slowdown under load {loaded[label].median / idle[label].median:5.2f}x")
        if args.memory:
            memory(name)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
