"""One SGD step of the TF-written MLP 784-512-512-10: gradreg vs handwritten NumPy vs TensorFlow.

    python bench/foreign_mlp.py [--rounds 10] [--calls 5] [--no-tf] [--backend NAME] [--blas-threads N]

bench/graphs/mlp_784_512_512_10/train.pb is a TF1 training graph (resource variables, ReLU,
sparse softmax cross-entropy, batch 128, ``GradientDescentOptimizer(0.01).minimize`` ->
``train_op``). One step runs ``loss`` and ``train_op``: forward, backward and the update of the six
variables. Every contender starts from the same weights (``init`` fed with
foreign_graphs.init_feeds()) and checks its first losses against the NumPy ones. Contenders, each
in its own process taking turns a few calls at a time (bench/_timing.py): the same math in NumPy
by hand (updates in place), gradreg running train.pb with its default backend (the default
install's), TensorFlow's session on train.pb.

Target (issue 14): gradreg <= 1.05x handwritten NumPy. ``--blas-threads N`` sets
OPENBLAS_NUM_THREADS for every contender (by default NumPy's OpenBLAS uses every core for
large products, which costs it dearly when another process holds one; gradreg picks its
threads per call, gradreg.backends.threads).
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics

import numpy as np
from _timing import Contender, process_medians, report_load, settle
from foreign_graphs import feeds, graph_path, init_feeds, manifest

NAME = "mlp_784_512_512_10"
LR = np.float32(0.01)
VARIABLES = ("dense0/kernel", "dense0/bias", "dense1/kernel", "dense1/bias", "dense2/kernel", "dense2/bias")


def _initial_params() -> list[np.ndarray]:
    initial = init_feeds(NAME)
    params = []
    for i, n in enumerate([512, 512, 10]):
        params.append(initial[f"dense{i}/kernel/Initializer/random_uniform:0"])
        params.append(np.zeros(n, np.float32))
    return params


class HandwrittenNumpy:
    """The graph's math by hand: relu MLP, mean sparse softmax cross-entropy, SGD in place."""

    def __init__(self):
        self.params = _initial_params()

    def step(self, x, labels):
        w1, b1, w2, b2, w3, b3 = self.params
        z1 = x @ w1
        z1 += b1
        h1 = np.maximum(z1, 0)
        z2 = h1 @ w2
        z2 += b2
        h2 = np.maximum(z2, 0)
        logits = h2 @ w3
        logits += b3
        shifted = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        total = exp.sum(axis=1, keepdims=True)
        rows = np.arange(len(labels))
        loss = np.mean(np.log(total[:, 0]) - shifted[rows, labels])
        d = exp / total
        d[rows, labels] -= 1
        d /= len(labels)
        dw3, db3 = h2.T @ d, d.sum(axis=0)
        dh = d @ w3.T
        dh *= z2 > 0
        dw2, db2 = h1.T @ dh, dh.sum(axis=0)
        dh = dh @ w2.T
        dh *= z1 > 0
        dw1, db1 = x.T @ dh, dh.sum(axis=0)
        for p, g in zip(self.params, (dw1, db1, dw2, db2, dw3, db3)):
            g *= LR
            p -= g
        return loss


def _batch():
    given = feeds(NAME)
    return given["x:0"], given["labels:0"]


def _reference_losses(n: int = 3) -> list[float]:
    model = HandwrittenNumpy()
    x, labels = _batch()
    return [model.step(x, labels) for _ in range(n)]


def numpy_step(warm: bool = True):
    model = HandwrittenNumpy()
    x, labels = _batch()
    return lambda: model.step(x, labels)


def gradreg_step(backend: str | None = None, warm: bool = True):
    """gradreg on train.pb; ``warm=False``: no call before the returned step's first (bench/protocol.py's
    cold cache)."""
    import gradreg as gr
    entry = manifest()[NAME]
    graph = gr.load_graph(str(graph_path(NAME, "train.pb")))
    session = gr.Session(graph, backend=backend)
    session.run(entry["init_op"], init_feeds(NAME))
    run = session.make_callable(["loss:0", entry["train_op"]], ["x:0", "labels:0"])
    x, labels = _batch()
    if warm:
        losses = [run(x, labels)[0] for _ in range(3)]
        np.testing.assert_allclose(losses, _reference_losses(), rtol=1e-4)
        settle(lambda: run(x, labels))      # the compiled kernels, built in the background
    return lambda: run(x, labels), {"backend": session.backend}


def tensorflow_step(warm: bool = True):
    import tensorflow as tf
    tf1 = tf.compat.v1
    entry = manifest()[NAME]
    graph_def = tf1.GraphDef()
    graph_def.ParseFromString(graph_path(NAME, "train.pb").read_bytes())
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    session = tf1.Session(graph=graph)
    session.run(entry["init_op"], init_feeds(NAME))
    run = session.make_callable(["loss:0", entry["train_op"]], ["x:0", "labels:0"])
    x, labels = _batch()
    if warm:
        losses = [run(x, labels)[0] for _ in range(3)]
        np.testing.assert_allclose(losses, _reference_losses(), rtol=1e-4)
    return lambda: run(x, labels)


def jax_step(warm: bool = True):
    """The same step in JAX: the loss's gradient by jax.grad, SGD, all in one jit (the weights
    passed in and returned, as a JAX training loop does)."""
    import jax
    import jax.numpy as jnp

    def loss_fn(params, x, labels):
        w1, b1, w2, b2, w3, b3 = params
        h1 = jax.nn.relu(x @ w1 + b1)
        h2 = jax.nn.relu(h1 @ w2 + b2)
        logits = h2 @ w3 + b3
        return jnp.mean(jax.nn.logsumexp(logits, axis=1) - jnp.take_along_axis(logits, labels[:, None], 1)[:, 0])

    @jax.jit
    def step(params, x, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, labels)
        return loss, [p - LR * g for p, g in zip(params, grads)]

    x, labels = (jax.device_put(v) for v in _batch())
    state = {"params": [jax.device_put(p) for p in _initial_params()]}

    def run():
        loss, state["params"] = step(state["params"], x, labels)
        return jax.block_until_ready(loss)
    if warm:
        np.testing.assert_allclose([float(run()) for _ in range(3)], _reference_losses(), rtol=1e-4)
    return run, {"jax": jax.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--backend", action="append", help="gradreg backends to run (default: the default one)")
    parser.add_argument("--no-tf", action="store_true")
    parser.add_argument("--blas-threads", type=int, help="OPENBLAS_NUM_THREADS for every contender")
    args = parser.parse_args()
    env = {"OPENBLAS_NUM_THREADS": args.blas_threads} if args.blas_threads else {}
    chosen = [Contender("numpy", "foreign_mlp:numpy_step", env=env)]
    for backend in args.backend or [None]:
        chosen.append(Contender(f"gradreg {backend}" if backend else "gradreg", "foreign_mlp:gradreg_step",
                                {"backend": backend}, env=env))
    if not args.no_tf and importlib.util.find_spec("tensorflow") is not None:
        chosen.append(Contender("tensorflow", "foreign_mlp:tensorflow_step", env=env))
    print(report_load("before"))
    figures = process_medians(chosen, args.rounds, args.calls)
    blas = f"OPENBLAS_NUM_THREADS={args.blas_threads}" if args.blas_threads else "BLAS threads by default"
    print(f"MLP 784-512-512-10, batch 128, one SGD step on the TF-written train.pb ({blas}); medians of "
          f"{args.rounds * args.calls}, each contender in its own process; {report_load('after')}")
    base = figures["numpy"].median
    for name, f in figures.items():
        print(f"  {name:<16} {f.median * 1e3:7.2f} ms (CPU {f.cpu_median * 1e3:6.2f} ms)  {f.median / base:5.2f}x NumPy"
              f"   turn waited {statistics.median(f.quiet_seconds) * 1e3:4.0f} ms for the others' threads"
              + (f"   {f.info}" if f.info else ""))
    print("  target: gradreg <= 1.05x NumPy")


if __name__ == "__main__":
    main()
