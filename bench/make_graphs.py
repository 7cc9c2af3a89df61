"""Write bench/graphs/: GraphDefs that TensorFlow and Keras wrote, with feeds, for the benchmarks.

    python bench/make_graphs.py [--only NAME] [--out bench/graphs]     # needs the tf extra and keras

Graphs (manifest.json describes each: files, feeds, fetches, xs, TensorFlow's gradient tensors):
- rnn_tf1: the TF-written RNN of issue 14, verbatim: tf1.disable_control_flow_v2(), xs [100, 16, 64]
  sliced with xs[t] in a tf1.while_loop, loss = sum(h*h); forward.pb and tf_grad.pb (plus
  tf.gradients(loss, [W, U, xs])).
- mobilenet_v2_64, densenet_slim_32, resnet_slim_f64_32: Keras CNNs frozen with
  convert_variables_to_constants_v2 (inference mode, batch 8): MobileNetV2(alpha=0.35) at 64x64 and
  the slim look-alikes of tests/data/tf_models at 32x32 (ResNet in float64); tf_grad.pb adds
  tf.gradients(y, [x] + every weight Const, grad_ys=grad_ys_0).
- elementwise_chain: 20 elementwise ops on a [1048576] float32 placeholder (forward only).
- mlp_784_512_512_10: a TF1 training graph (resource variables, glorot-uniform initializers, softmax
  cross-entropy, batch 128): forward.pb, tf_grad.pb (tf.gradients w.r.t. the 6 variables) and
  train.pb (GradientDescentOptimizer(0.01).minimize -> train_op). `init_feeds` lists the kernels'
  initial-value tensors (and shapes): feeding foreign_graphs.init_feeds() to them with the init op
  starts every contender, TensorFlow included, from the same weights.
- mobilenet_v2_224, resnet50_224 (only with --only, into another --out: bench/realistic.py's cache):
  keras.applications.MobileNetV2(alpha=1.0) and ResNet50 at 224x224, batch 32, frozen as the CNNs above.
Seeds are fixed; feeds.npz holds the stored feeds (and, for the CNNs, TensorFlow's values of the
fetch and gradients as 'expected/<tensor>'); bench/foreign_graphs.py loads them and computes the
large inputs not worth storing.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "data" / "tf_models"))  # the model builders and TF helpers

import keras  # noqa: E402
import keras_models as km  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras_cases import KerasCase  # noqa: E402
from tfhelpers import freeze, op_types, run_graph, tf1, tf_gradient_graph  # noqa: E402

CNN_BATCH = 8


def write(out: pathlib.Path, name: str, graphs: dict, feeds: dict, entry: dict) -> dict:
    directory = out / name
    directory.mkdir(parents=True, exist_ok=True)
    for file_name, graph_def in graphs.items():
        (directory / file_name).write_bytes(graph_def.SerializeToString(deterministic=True))
    np.savez(directory / "feeds.npz", **feeds)
    entry = dict(entry, files=sorted(graphs), ops={f: op_types(g) for f, g in graphs.items()})
    print(name, {f: f"{(directory / f).stat().st_size / 1e6:.2f} MB" for f in list(graphs) + ["feeds.npz"]})
    return entry


def rnn_tf1(out: pathlib.Path) -> dict:
    """Issue 14's snippet, verbatim, then tf.gradients w.r.t. W, U and xs."""
    tf1.disable_control_flow_v2()
    graph = tf.Graph()
    with graph.as_default():
        xs = tf1.placeholder(tf.float32, [100, 16, 64], name="xs")
        W = tf1.placeholder(tf.float32, [64, 64], name="W"); U = tf1.placeholder(tf.float32, [64, 64], name="U")  # noqa: E702,N806
        def body(t, h): return t + 1, tf.tanh(tf.matmul(xs[t], W) + tf.matmul(h, U))  # noqa: E301,E704
        _, h = tf1.while_loop(lambda t, h: t < 100, body, [tf.constant(0), tf.zeros([16, 64])])
        loss = tf.reduce_sum(h * h, name="loss")     # gradreg differentiates w.r.t. W, U and xs
        forward = graph.as_graph_def()
        grads = tf.gradients(loss, [W, U, xs])
    tf1.enable_control_flow_v2()
    rng = np.random.default_rng(0)
    feeds = {"xs:0": rng.normal(0, 1, (100, 16, 64)).astype(np.float32),
             "W:0": rng.normal(0, 0.1, (64, 64)).astype(np.float32),
             "U:0": rng.normal(0, 0.1, (64, 64)).astype(np.float32)}
    names = [g.name for g in grads]
    return write(out, "rnn_tf1", {"forward.pb": forward, "tf_grad.pb": graph.as_graph_def()}, feeds, {
        "description": "issue 14's TF-written RNN: v1 while_loop, xs[t] slicing, 100 steps, [16, 64]",
        "feeds": list(feeds), "fetches": ["loss:0"], "ys": ["loss:0"], "grad_ys": None,
        "xs": ["W:0", "U:0", "xs:0"], "tf_grad_tensors": names})


def keras_cnn(out: pathlib.Path, name: str, build, description: str) -> dict:
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    model, inputs = build(rng)
    case = KerasCase(model, inputs, training=False)
    forward = case.forward_function()
    frozen, forward_def = freeze(forward, lower_control_flow=False)
    consts = case.weight_consts(forward)
    xs = ["x:0"] + [consts[v.path] for v in case.trainable if consts[v.path]]
    y = frozen.outputs[0]
    cotangent = rng.normal(0, 1, y.shape).astype(y.dtype.as_numpy_dtype)
    grad_def, names, _ = tf_gradient_graph(forward_def, [y.name], xs, [("grad_ys_0:0", y.dtype, y.shape)])
    feeds = {"x:0": inputs["x"], "grad_ys_0:0": cotangent}
    # TensorFlow's own numbers for the stored feeds, so a benchmark can check what it times.
    values = run_graph(grad_def, [y.name] + names, feeds)
    graph_feeds = dict(feeds, **{f"expected/{t}": v for t, v in zip([y.name] + names, values)})
    return write(out, name, {"forward.pb": forward_def, "tf_grad.pb": grad_def}, graph_feeds, {
        "description": description, "feeds": ["x:0"], "fetches": [y.name], "ys": [y.name],
        "grad_ys": ["grad_ys_0:0"], "xs": xs, "tf_grad_tensors": names,
        "expected": "feeds.npz 'expected/<tensor>': TensorFlow's values of the fetch and tf_grad_tensors"})


def elementwise_chain(out: pathlib.Path) -> dict:
    """20 elementwise ops, as TensorFlow writes them for a NumPy-style expression."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [1 << 20], name="x")
        y = x * 1.5 + 0.25                                   # Mul, AddV2
        y = tf.tanh(y) * x                                   # Tanh, Mul
        y = tf.sin(y) + tf.cos(x)                            # Sin, Cos, AddV2
        y = tf.exp(-tf.abs(y)) - 0.5                         # Abs, Neg, Exp, Sub
        y = tf.sqrt(y * y + 1.0) / (1.0 + tf.square(x))      # Mul, AddV2, Sqrt, Square, AddV2, RealDiv
        y = tf.identity(tf.maximum(y, 0.1) * tf.sigmoid(x), name="y")  # Maximum, Sigmoid, Mul (20th op)
    counted = [n.op for n in graph.as_graph_def().node if n.op not in ("Placeholder", "Const", "Identity")]
    assert len(counted) == 20, counted
    return write(out, "elementwise_chain", {"forward.pb": graph.as_graph_def()}, {}, {
        "description": "20 elementwise ops on [1048576] float32", "feeds": ["x:0"], "fetches": ["y:0"],
        "generated_feeds": "x:0 = np.linspace(-2, 2, 2**20, dtype=float32), computed by foreign_graphs.feeds"})


def mlp(out: pathlib.Path) -> dict:
    """MLP 784-512-512-10, softmax cross-entropy: forward, tf.gradients, SGD training graphs."""
    def build(mode):
        graph = tf.Graph()
        with graph.as_default():
            x = tf1.placeholder(tf.float32, [128, 784], name="x")
            labels = tf1.placeholder(tf.int32, [128], name="labels")
            h, variables = x, []
            for i, (m, n) in enumerate([(784, 512), (512, 512), (512, 10)]):
                w = tf1.get_variable(f"dense{i}/kernel", [m, n], initializer=tf1.glorot_uniform_initializer(seed=i))
                b = tf1.get_variable(f"dense{i}/bias", [n], initializer=tf1.zeros_initializer())
                variables += [w, b]
                h = tf.matmul(h, w) + b
                h = tf.nn.relu(h) if i < 2 else h
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=h), name="loss")
            grads = None
            if mode == "tf_grad":
                grads = [g.name for g in tf.gradients(loss, variables)]
            elif mode == "train":
                tf1.train.GradientDescentOptimizer(0.01).minimize(loss, name="train_op")
            tf1.global_variables_initializer()
            init_values = {v.initial_value.name: v.shape.as_list() for v in variables if v.shape.rank == 2}
        return graph, [v.name for v in variables], grads, init_values

    forward, var_names, _, init_values = build("forward")
    grad_graph, _, grad_names, _ = build("tf_grad")
    train_graph, _, _, _ = build("train")
    rng = np.random.default_rng(0)
    feeds = {"x:0": rng.normal(0, 1, (128, 784)).astype(np.float32),
             "labels:0": rng.integers(0, 10, 128).astype(np.int32)}
    graphs = {"forward.pb": forward.as_graph_def(), "tf_grad.pb": grad_graph.as_graph_def(),
              "train.pb": train_graph.as_graph_def()}
    return write(out, "mlp_784_512_512_10", graphs, feeds, {
        "description": "TF1 MLP 784-512-512-10 (resource variables), batch 128; train_op = SGD(0.01).minimize",
        "feeds": list(feeds), "fetches": ["loss:0"], "ys": ["loss:0"], "grad_ys": None, "xs": var_names,
        "tf_grad_tensors": grad_names, "init_op": "init", "train_op": "train_op",
        "init_feeds": init_values})


GRAPHS = {
    "rnn_tf1": rnn_tf1,
    "mobilenet_v2_64": lambda out: keras_cnn(out, "mobilenet_v2_64", lambda rng: km.mobilenet_v2(rng, 64, CNN_BATCH),
                                             "keras.applications.MobileNetV2(alpha=0.35), 64x64, batch 8, frozen"),
    "densenet_slim_32": lambda out: keras_cnn(out, "densenet_slim_32", lambda rng: km.densenet_slim(rng, 32, CNN_BATCH),
                                              "slim DenseNet look-alike, 32x32, batch 8, frozen"),
    "resnet_slim_f64_32": lambda out: keras_cnn(out, "resnet_slim_f64_32",
                                                lambda rng: km.resnet_slim(rng, 32, CNN_BATCH, dtype="float64"),
                                                "slim ResNet look-alike in float64, 32x32, batch 8, frozen"),
    "elementwise_chain": elementwise_chain,
    "mlp_784_512_512_10": mlp,
}


def _application(rng, build, batch: int, size: int = 224):
    """A keras.applications model with random weights, its batch norms calibrated on 32 images."""
    model = build(input_shape=(size, size, 3), weights=None, classes=1000)
    km.randomize_constant_weights(model, rng)
    km.calibrate_batch_norm(model, km.images(rng, 32, size))
    return model, {"x": km.images(rng, batch, size)}


# Issue 31's realistic sizes: too large to keep in the repository (ResNet50's weights are 100 MB,
# three times over with the gradient graph and TensorFlow's values). Written only with --only,
# into bench/realistic.py's cache directory (it runs this script when they are missing).
LARGE = {
    "mobilenet_v2_224": lambda out: keras_cnn(
        out, "mobilenet_v2_224",
        lambda rng: _application(rng, lambda **kw: keras.applications.MobileNetV2(alpha=1.0, **kw), 32),
        "keras.applications.MobileNetV2(alpha=1.0), 224x224, batch 32, frozen"),
    "resnet50_224": lambda out: keras_cnn(
        out, "resnet50_224", lambda rng: _application(rng, keras.applications.ResNet50, 32),
        "keras.applications.ResNet50, 224x224, batch 32, frozen"),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=list(GRAPHS) + list(LARGE))
    parser.add_argument("--out", default=str(ROOT / "bench" / "graphs"))
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for name in args.only or list(GRAPHS):
        manifest[name] = {**GRAPHS, **LARGE}[name](out)
    manifest = {k: manifest[k] for k in {**GRAPHS, **LARGE} if k in manifest}
    manifest_path.write_text(json.dumps(dict(manifest, tensorflow_version=tf.__version__), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
