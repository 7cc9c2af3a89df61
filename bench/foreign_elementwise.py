"""A chain of 20 elementwise ops TensorFlow wrote: gradreg vs TensorFlow's session vs JAX's jit.

    python bench/foreign_elementwise.py [--rounds 10] [--calls 5] [--no-tf]

bench/graphs/elementwise_chain/forward.pb: 20 elementwise ops (Mul, AddV2, Tanh, Sin, Cos, Abs,
Neg, Exp, Sub, Sqrt, Square, RealDiv, Maximum, Sigmoid) on one [1048576] float32 placeholder, as
TensorFlow writes a NumPy-style expression. Contenders, each in its own process taking turns a
few calls at a time (bench/_timing.py): gradreg (default backend), TensorFlow's session on the
same GraphDef (default thread pools), JAX's jit of the same expression, and the expression in
NumPy by hand. Each checks its result against the NumPy one first.

Targets (issue 14): gradreg <= 1.0x TensorFlow and <= 1.0x JAX.
"""
from __future__ import annotations

import argparse
import importlib.util

import numpy as np
from _timing import Contender, process_medians, report_load, settle
from foreign_graphs import feeds, graph_path

NAME = "elementwise_chain"


def expression(x, xp):
    """The chain of make_graphs.elementwise_chain, for NumPy (xp=np) or jax.numpy."""
    y = x * np.float32(1.5) + np.float32(0.25)
    y = xp.tanh(y) * x
    y = xp.sin(y) + xp.cos(x)
    y = xp.exp(-xp.abs(y)) - np.float32(0.5)
    y = xp.sqrt(y * y + np.float32(1.0)) / (np.float32(1.0) + xp.square(x))
    sigmoid = 1 / (1 + xp.exp(-x))
    return xp.maximum(y, np.float32(0.1)) * sigmoid.astype(np.float32)


def _x() -> np.ndarray:
    return feeds(NAME)["x:0"]


def _check(value) -> None:
    with np.errstate(all="ignore"):
        reference = expression(_x(), np)
    np.testing.assert_allclose(np.asarray(value), reference, rtol=2e-5, atol=1e-6)


def numpy_step(warm: bool = True):
    x = _x()
    return lambda: expression(x, np)


def gradreg_step(backend: str | None = None, warm: bool = True):
    import gradreg as gr
    graph = gr.load_graph(str(graph_path(NAME)))
    session = gr.Session(graph, backend=backend)
    run = session.make_callable(graph.get_tensor_by_name("y:0"), [graph.get_tensor_by_name("x:0")])
    x = _x()
    if warm:
        _check(run(x))
        settle(lambda: run(x))
        _check(run(x))
    return lambda: run(x), {"backend": session.backend}


def tensorflow_step(warm: bool = True):
    import tensorflow as tf
    tf1 = tf.compat.v1
    graph_def = tf1.GraphDef()
    graph_def.ParseFromString(graph_path(NAME).read_bytes())
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    session = tf1.Session(graph=graph)
    run = session.make_callable("y:0", ["x:0"])
    x = _x()
    if warm:
        _check(run(x))
    return lambda: run(x)


def jax_step(warm: bool = True):
    import jax
    import jax.numpy as jnp
    fn = jax.jit(lambda x: expression(x, jnp))
    x = jax.device_put(_x())
    if warm:
        _check(fn(x).block_until_ready())
    return lambda: fn(x).block_until_ready(), {"jax": jax.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--no-tf", action="store_true")
    args = parser.parse_args()
    chosen = [Contender("numpy", "foreign_elementwise:numpy_step"),
              Contender("gradreg", "foreign_elementwise:gradreg_step")]
    if not args.no_tf and importlib.util.find_spec("tensorflow") is not None:
        chosen.append(Contender("tensorflow", "foreign_elementwise:tensorflow_step"))
    if importlib.util.find_spec("jax") is not None:
        chosen.append(Contender("jax jit", "foreign_elementwise:jax_step"))
    print(report_load("before"))
    figures = process_medians(chosen, args.rounds, args.calls)
    print(f"20 elementwise ops on 1,048,576 float32 (TF-written GraphDef); medians of {args.rounds * args.calls}, "
          f"each contender in its own process; {report_load('after')}")
    for name, f in figures.items():
        line = f"  {name:<12} {f.median * 1e3:7.2f} ms (CPU {f.cpu_median * 1e3:6.2f} ms)"
        line += "".join(f"  {f.median / figures[other].median:5.2f}x {other}"
                        for other in ("tensorflow", "jax jit") if other in figures and other != name)
        print(line)
    print("  targets: gradreg <= 1.0x tensorflow, <= 1.0x jax jit")


if __name__ == "__main__":
    main()
