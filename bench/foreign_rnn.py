"""The TF-written RNN of issue 14: gradreg vs handwritten NumPy vs TensorFlow's session.

    python bench/foreign_rnn.py [--rounds 10] [--calls 3] [--load] [--no-tf]

bench/graphs/rnn_tf1 holds the graph TensorFlow 2.21 wrote for issue 14's snippet (v1
while_loop, ``xs[t]`` slicing, 100 steps, batch 16, hidden 64; loss = sum(h * h)). One call
computes the loss and its gradients w.r.t. W, U and xs. Contenders, each in its own process,
taking turns a few calls at a time (bench/_timing.py):

* ``numpy``: the same math written by hand;
* ``gradreg``: forward.pb loaded, differentiated by gradreg (default backend);
* ``gradreg tf_grad.pb``: TensorFlow's own gradient graph run by gradreg;
* ``tensorflow``: TensorFlow's session on tf_grad.pb (when TensorFlow is installed).

Targets (issue 14): gradreg <= 1.5x NumPy and <= 0.33x TensorFlow. ``--load`` repeats the
measurement with one other process busy on one core and prints each contender's slowdown
(target: gradreg's no worse than TensorFlow's).
"""
from __future__ import annotations

import argparse

import numpy as np
from _timing import Contender, busy_process, process_medians, report_load, settle
from foreign_graphs import feeds, graph_path, manifest

NAME = "rnn_tf1"


def numpy_reference(xs, w, u):
    """(loss, dW, dU, dxs) of loss = sum(h_T^2), h_{t+1} = tanh(xs[t] W + h_t U), h_0 = 0."""
    steps = xs.shape[0]
    hs = [np.zeros((xs.shape[1], w.shape[1]), np.float32)]
    for t in range(steps):
        hs.append(np.tanh(xs[t] @ w + hs[-1] @ u))
    loss = np.sum(hs[-1] * hs[-1])
    dh = 2 * hs[-1]
    dw, du, dxs = np.zeros_like(w), np.zeros_like(u), np.empty_like(xs)
    w_t, u_t = w.T, u.T
    for t in reversed(range(steps)):
        dz = dh * (1 - hs[t + 1] * hs[t + 1])
        dw += xs[t].T @ dz
        du += hs[t].T @ dz
        dxs[t] = dz @ w_t
        dh = dz @ u_t
    return loss, dw, du, dxs


def _check(got, reference) -> None:
    for a, b in zip(got, reference):
        np.testing.assert_allclose(np.asarray(a), b, rtol=2e-3, atol=2e-3 * np.max(np.abs(b)))


def _values():
    given = feeds(NAME)
    return given["xs:0"], given["W:0"], given["U:0"]


def numpy_step(warm: bool = True):
    xs, w, u = _values()
    return lambda: numpy_reference(xs, w, u)


def gradreg_step(graph_file: str = "forward.pb", backend: str | None = None, warm: bool = True):
    import gradreg as gr
    entry = manifest()[NAME]
    graph = gr.load_graph(str(graph_path(NAME, graph_file)))
    if graph_file == "forward.pb":
        with graph.as_default():
            loss = graph.get_tensor_by_name("loss:0")
            grads = gr.gradients(loss, [graph.get_tensor_by_name(n) for n in entry["xs"]])
        fetches = [loss] + grads
    else:
        fetches = [graph.get_tensor_by_name(n) for n in ["loss:0"] + entry["tf_grad_tensors"]]
    session = gr.Session(graph, backend=backend)
    run = session.make_callable(fetches, [graph.get_tensor_by_name(n) for n in ("xs:0", "W:0", "U:0")])
    values = _values()
    if warm:
        _check(run(*values), numpy_reference(*values))
        settle(lambda: run(*values))
        _check(run(*values), numpy_reference(*values))
    return lambda: run(*values), {"backend": session.backend}


def tensorflow_step(threads: int = 0, warm: bool = True):
    import tensorflow as tf
    tf1 = tf.compat.v1
    entry = manifest()[NAME]
    graph_def = tf1.GraphDef()
    graph_def.ParseFromString(graph_path(NAME, "tf_grad.pb").read_bytes())
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    config = tf1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads)
    session = tf1.Session(graph=graph, config=config)
    run = session.make_callable(["loss:0"] + entry["tf_grad_tensors"], ["xs:0", "W:0", "U:0"])
    values = _values()
    if warm:
        _check(run(*values), numpy_reference(*values))
    return lambda: run(*values), {"tensorflow": tf.__version__}


def contenders(with_tf: bool) -> list[Contender]:
    found = [Contender("numpy", "foreign_rnn:numpy_step"),
             Contender("gradreg", "foreign_rnn:gradreg_step"),
             Contender("gradreg tf_grad.pb", "foreign_rnn:gradreg_step", {"graph_file": "tf_grad.pb"})]
    if with_tf:
        found.append(Contender("tensorflow", "foreign_rnn:tensorflow_step"))
    return found


def tensorflow_installed() -> bool:
    import importlib.util
    return importlib.util.find_spec("tensorflow") is not None


def show(figures, title: str) -> None:
    print(title)
    base = figures["numpy"].median
    tf_time = figures["tensorflow"].median if "tensorflow" in figures else None
    for name, f in figures.items():
        line = f"  {name:<20} {f.median * 1e3:8.2f} ms  {f.median / base:5.2f}x NumPy"
        if tf_time is not None:
            line += f"  {f.median / tf_time:5.2f}x TensorFlow"
        print(line + (f"   {f.info}" if f.info else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--load", action="store_true", help="also measure with one core kept busy")
    parser.add_argument("--no-tf", action="store_true")
    args = parser.parse_args()
    with_tf = not args.no_tf and tensorflow_installed()
    if not with_tf:
        print("TensorFlow not installed: no TensorFlow column (pip install '.[tf]')")
    chosen = contenders(with_tf)
    print(report_load("before"))
    idle = process_medians(chosen, args.rounds, args.calls)
    show(idle, f"TF-written RNN (100 steps, [16, 64]), loss + dW, dU, dxs; medians of {args.rounds * args.calls}, "
               f"each contender in its own process; {report_load('after')}")
    print("  targets: gradreg <= 1.5x NumPy, <= 0.33x TensorFlow")
    if args.load:
        with busy_process():
            loaded = process_medians(chosen, args.rounds, args.calls)
        show(loaded, f"the same with one other process busy on one core; {report_load('after')}")
        for name in loaded:
            print(f"  {name:<20} slowdown under load {loaded[name].median / idle[name].median:5.2f}x")
        print("  target: gradreg's slowdown no worse than TensorFlow's")


if __name__ == "__main__":
    main()
