"""Issue 31's realistic sizes: one training step of Keras MobileNetV2 (alpha 1.0) and ResNet50 at
batch 32, 224x224, from TF-written graphs.

    python bench/protocol.py --workload mobilenet_v2_224 --workload resnet50_224 [--warmup 100 ...]
    python bench/realistic.py [NAME ...]      # make the graphs (if missing) and check every contender once

The graphs (bench/make_graphs.py's LARGE: frozen in inference mode like bench/foreign_cnn.py's,
TensorFlow's gradient graph beside, TensorFlow's values for the stored feeds) are written on
first use to $GRADREG_BENCH_GRAPHS, default ~/.cache/gradreg-bench/graphs (making them needs
TensorFlow and keras; ResNet50's take ~400 MB). A training step is: the forward pass, the
gradients of <y, cotangent> w.r.t. every weight, and SGD on the weights (w -= 0.01 g); each
contender keeps its weights and feeds them to the next step. Contenders, each in its own process:

* ``gradreg``: forward.pb differentiated by gradreg, the weights fed in place of the frozen
  constants, the update in NumPy in place;
* ``tensorflow``: TensorFlow's session on tf_grad.pb, the same feeds and update;
* ``tensorflow xla``: the same pruned graph as a tf.function with jit_compile=True, the update in
  TensorFlow;
* ``jax jit``: the graph translated to JAX (bench/graph_to_jax.py), step and update in one jit.

Not contenders here: onnxruntime (no converter of these graphs to ONNX is at hand: tf2onnx is
not a dependency, and gradreg's exporter writes no Conv2D or Rsqrt), PyTorch (without
torchvision it has no MobileNetV2 or ResNet50 of its own, and a translation of the graph into
eager ops would measure the translation).
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np

BENCH = pathlib.Path(__file__).resolve().parent
LR = 0.01
NAMES = ("mobilenet_v2_224", "resnet50_224")


def graphs_dir() -> pathlib.Path:
    configured = os.environ.get("GRADREG_BENCH_GRAPHS", "").strip()
    return pathlib.Path(configured).expanduser() if configured else pathlib.Path.home() / ".cache/gradreg-bench/graphs"


def ensure(name: str) -> pathlib.Path:
    """The directory of graph set ``name``, made by bench/make_graphs.py when it is missing."""
    out = graphs_dir()
    if not (out / name / "tf_grad.pb").exists():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(BENCH / "make_graphs.py"), "--only", name, "--out", str(out)], check=True)
    return out


def _use(name: str):
    """foreign_graphs pointed at the large graphs' directory (set before it is imported)."""
    os.environ["GRADREG_BENCH_GRAPHS"] = str(ensure(name))
    import foreign_graphs
    foreign_graphs.GRAPHS = ensure(name)      # if it was imported before
    return foreign_graphs


def _weights(graph, names: list[str]) -> list[np.ndarray]:
    return [np.array(graph.get_tensor_by_name(t).op.get_attr("value")) for t in names]


def _check_first(name: str, y, grads) -> None:
    from foreign_cnn import _check
    fg = _use(name)
    entry = fg.manifest()[name]
    _check(name, entry["fetches"] + entry["tf_grad_tensors"][1:], [y, *grads])


def gradreg_step(name: str, backend: str | None = None, warm: bool = True):
    fg = _use(name)
    from foreign_cnn import gradreg_graph, settle

    import gradreg as gr
    entry = fg.manifest()[name]
    graph, fetches, (x, cotangent) = gradreg_graph(name)
    weight_tensors = [graph.get_tensor_by_name(t) for t in entry["xs"][1:]]
    weights = _weights(graph, entry["xs"][1:])
    session = gr.Session(graph, backend=backend)
    # the output and the weights' gradients (not the input's), fed the weights
    run = session.make_callable([fetches[0], *fetches[2:]], [x, cotangent, *weight_tensors])
    given = fg.feeds(name, grad_ys=True)
    lr = np.float32(LR)

    def step():
        y, *grads = run(given["x:0"], given["grad_ys_0:0"], *weights)
        for w, g in zip(weights, grads):
            w -= lr * g
        return y
    if warm:
        first = run(given["x:0"], given["grad_ys_0:0"], *weights)
        _check_first(name, first[0], first[1:])
        settle(step)
    return step, {"backend": session.backend}


def tensorflow_step(name: str, warm: bool = True, xla: bool = False):
    fg = _use(name)
    import tensorflow as tf
    entry = fg.manifest()[name]
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(fg.graph_path(name, "tf_grad.pb").read_bytes())
    weight_names = entry["xs"][1:]
    fetched = [entry["fetches"][0], *entry["tf_grad_tensors"][1:]]
    given = fg.feeds(name, grad_ys=True)
    import gradreg as gr  # the frozen weights, read from forward.pb as the other contenders do
    weights = _weights(gr.load_graph(str(fg.graph_path(name))), weight_names)
    if xla:
        return _xla_step(name, graph_def, weight_names, fetched, given, weights, warm)
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    session = tf.compat.v1.Session(graph=graph)
    run = session.make_callable(fetched, ["x:0", "grad_ys_0:0", *weight_names])
    lr = np.float32(LR)

    def step():
        y, *grads = run(given["x:0"], given["grad_ys_0:0"], *weights)
        for w, g in zip(weights, grads):
            w -= lr * g
        return y
    if warm:
        first = run(given["x:0"], given["grad_ys_0:0"], *weights)
        _check_first(name, first[0], first[1:])
    return step, {"tensorflow": tf.__version__}


def _xla_step(name, graph_def, weight_names, fetched, given, weights, warm: bool):
    import tensorflow as tf

    def imported():
        tf.graph_util.import_graph_def(graph_def, name="")
    wrapped = tf.compat.v1.wrap_function(imported, [])
    pruned = wrapped.prune([wrapped.graph.get_tensor_by_name(t) for t in ["x:0", "grad_ys_0:0", *weight_names]],
                           [wrapped.graph.get_tensor_by_name(t) for t in fetched])
    variables = [tf.Variable(w) for w in weights]
    x, cotangent = tf.constant(given["x:0"]), tf.constant(given["grad_ys_0:0"])

    @tf.function(jit_compile=True)
    def train(x, cotangent):
        y, *grads = pruned(x, cotangent, *[v.read_value() for v in variables])
        for v, g in zip(variables, grads):
            v.assign_sub(LR * g)
        return y

    def step():
        return train(x, cotangent).numpy()
    if warm:
        first = tf.function(jit_compile=True)(lambda: pruned(x, cotangent, *variables))()
        _check_first(name, first[0].numpy(), [g.numpy() for g in first[1:]])
    return step, {"tensorflow": tf.__version__, "jit_compile": True}


def jax_step(name: str, warm: bool = True):
    fg = _use(name)
    import jax
    from graph_to_jax import translate

    import gradreg as gr
    entry = fg.manifest()[name]
    graph = gr.load_graph(str(fg.graph_path(name)))
    fn = translate(graph, entry["ys"][0], entry["xs"])
    weights = [jax.device_put(w) for w in _weights(graph, entry["xs"][1:])]
    given = fg.feeds(name, grad_ys=True)
    x, cotangent = jax.device_put(given["x:0"]), jax.device_put(given["grad_ys_0:0"])

    def grads_of(weights, x, cotangent):
        y, pullback = jax.vjp(lambda *w: fn(x, *w), *weights)
        return y, pullback(cotangent)

    @jax.jit
    def train(weights, x, cotangent):
        y, grads = grads_of(weights, x, cotangent)
        return y, [w - LR * g for w, g in zip(weights, grads)]
    state = {"weights": weights}

    def step():
        y, state["weights"] = train(state["weights"], x, cotangent)
        return jax.block_until_ready(y)
    if warm:
        y, grads = jax.jit(grads_of)(weights, x, cotangent)
        _check_first(name, np.asarray(y), [np.asarray(g) for g in grads])
    return step, {"jax": jax.__version__}


def contenders(name: str, tf: bool, jax: bool) -> list[tuple[str, str, dict]]:
    found = [("gradreg", "realistic:gradreg_step", {"name": name})]
    if tf:
        found += [("tensorflow", "realistic:tensorflow_step", {"name": name}),
                  ("tensorflow xla", "realistic:tensorflow_step", {"name": name, "xla": True})]
    if jax:
        found.append(("jax jit", "realistic:jax_step", {"name": name}))
    return found


if __name__ == "__main__":
    import foreign_cnn
    foreign_cnn.settle = lambda step, calls=2: None     # a check, not a measurement: no settling
    for graph_set in sys.argv[1:] or NAMES:
        ensure(graph_set)
        for label, factory, kwargs in contenders(graph_set, True, True):
            module, function = factory.split(":")
            made, _ = globals()[function](**{k: v for k, v in kwargs.items()})
            made()
            print(f"{graph_set}: {label} checked against TensorFlow's values and ran a step", flush=True)
