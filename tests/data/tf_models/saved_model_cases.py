"""SavedModels and a TF v1 checkpoint for the tf_models corpus (saved_models/<name>/).

Each SavedModel case directory holds model/ (what tf.saved_model.save or Keras' model.export wrote),
case.json, inputs.npz and expected.npz. The values come from TensorFlow loading model/ back
(tf.saved_model.load) — what a user of the SavedModel sees:
- every signature called on stored inputs: outputs;
- for every float output of every signature: gradients w.r.t. the signature's float inputs and
  w.r.t. every float variable object of the loaded SavedModel, keyed by checkpoint key (unique)
  and listed with the variable's name (not unique: Keras' export tracks each variable twice,
  under variables/N and _all_variables/M, and after loading those are two objects of one name of
  which only one is captured by the signatures; the other's gradient is None);
- every variable's value as stored in variables/ (by checkpoint key);
- (cases made since the custom gradients) for a non-scalar output, its gradients w.r.t. the
  float inputs with a cotangent of ones too, what `gradreg grad DIR` computes (din_ones:...).
v1_checkpoint: tf.compat.v1.train.Saver's model.ckpt-N.{index,data-00000-of-00001,meta} and
`checkpoint` of a small graph trained a few steps, with the values and the loss they give.
"""
from __future__ import annotations

import json
import pathlib
import shutil

import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2, trackable_object_graph_pb2
from tfhelpers import default_tolerance, seed_for, tf1

# --- the models ---------------------------------------------------------------------------------

class TwoSignatures(tf.Module):
    """Named variables; serving_default gives logits and probabilities, `loss` a scalar."""

    def __init__(self, rng):
        super().__init__(name="classifier")
        self.kernel = tf.Variable(rng.normal(0, 0.5, (4, 3)).astype(np.float32), name="dense/kernel")
        self.bias = tf.Variable(rng.normal(0, 0.1, (3,)).astype(np.float32), name="dense/bias")
        self.temperature = tf.Variable(np.float32(1.5), name="temperature", trainable=False)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def predict(self, x):
        logits = (tf.matmul(x, self.kernel) + self.bias) / self.temperature
        return {"logits": logits, "probabilities": tf.nn.softmax(logits)}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x"),
                                  tf.TensorSpec([None], tf.int32, name="labels")])
    def loss(self, x, labels):
        logits = self.predict(x)["logits"]
        return {"loss": tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))}


class WhileLoop(tf.Module):
    """tf.while_loop whose trip count is an int variable and whose body reads a weight variable."""

    def __init__(self, rng):
        super().__init__(name="recurrence")
        self.w = tf.Variable(rng.normal(0, 0.6, (3, 3)).astype(np.float32), name="w")
        self.b = tf.Variable(rng.normal(0, 0.1, (3,)).astype(np.float32), name="b")
        self.steps = tf.Variable(4, name="steps", trainable=False)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        _, h = tf.while_loop(lambda i, h: i < self.steps, lambda i, h: (i + 1, tf.tanh(tf.matmul(h, self.w) + self.b)),
                             [tf.constant(0), x])
        return {"y": h}


class CustomGradients(tf.Module):
    """Two tf.custom_gradient nodes: one whose gradient function captures an intermediate tensor
    of the forward function and is not the derivative (a damped, clipped pass-through: only the
    stored function gives TensorFlow's numbers), and tf.nn.silu's (captures its input and beta)."""

    def __init__(self, rng):
        super().__init__(name="custom_gradients")
        self.w = tf.Variable(rng.normal(0, 0.8, (4, 3)).astype(np.float32), name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def predict(self, x):
        @tf.custom_gradient
        def damped(h):
            decay = tf.exp(-tf.abs(h))

            def grad(dy):
                return tf.clip_by_value(dy * decay, -0.3, 0.3)
            return 2.0 * h, grad
        return {"y": tf.nn.silu(damped(tf.matmul(x, self.w)))}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def loss(self, x):
        return {"loss": tf.reduce_sum(tf.square(self.predict(x)["y"]))}


class WhileCond(tf.Module):
    """A tf.while_loop over the rows of a variable-length input, a data-dependent tf.cond in its
    body and another after it (issue 28's model: differentiating and freezing it met shapes of
    unknown rank). The same on the rows reversed and negated as a second signature, so that between them
    both branches of each cond run."""

    def __init__(self, rng):
        super().__init__(name="while_cond")
        self.w = tf.Variable(rng.normal(0, 0.5, (3, 3)).astype(np.float32), name="w")
        self.v = tf.Variable(rng.normal(0, 0.5, (3,)).astype(np.float32), name="v")

    def _run(self, xs):
        n = tf.shape(xs)[0]
        w = self.w.read_value()

        def body(i, h):
            x = xs[i]
            h = tf.cond(tf.reduce_sum(x) > 0, lambda: tf.tanh(tf.linalg.matvec(w, h) + x), lambda: 0.5 * h + x)
            return i + 1, h
        _, h = tf.while_loop(lambda i, h: i < n, body, [tf.constant(0), tf.zeros_like(xs[0])])
        return {"y": tf.cond(tf.reduce_sum(h) > 0, lambda: tf.reduce_sum(h * self.v),
                             lambda: tf.reduce_sum(tf.square(h)))}

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32, name="xs")])
    def forward(self, xs):
        return self._run(xs)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32, name="xs")])
    def reversed(self, xs):
        return self._run(-tf.reverse(xs, [0]))


def save_module(rng, path):
    module = TwoSignatures(rng)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.predict, "loss": module.loss})
    x = rng.normal(0, 1, (2, 4)).astype(np.float32)
    return {"serving_default": {"x": x}, "loss": {"x": x, "labels": np.array([2, 0], np.int32)}}


def save_while_loop(rng, path):
    module = WhileLoop(rng)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})
    return {"serving_default": {"x": rng.normal(0, 1, (2, 3)).astype(np.float32)}}


def save_while_cond(rng, path):
    module = WhileCond(rng)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.forward,
                                                       "reversed": module.reversed})
    xs = np.array([[0.9, -0.2, 0.4], [-1.1, 0.3, -0.5], [0.2, 0.8, -0.3], [-0.4, -0.6, 0.1], [1.2, -0.3, 0.5]],
                  np.float32)
    return {"serving_default": {"xs": xs}, "reversed": {"xs": xs}}


def save_custom_gradients(rng, path):
    module = CustomGradients(rng)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.predict, "loss": module.loss})
    x = rng.normal(0, 1, (3, 4)).astype(np.float32)
    return {"serving_default": {"x": x}, "loss": {"x": x}}


def export_keras(model, path, inputs: dict):
    model.export(str(path), verbose=False)
    return {"serve": inputs, "serving_default": inputs}


def save_keras_mlp(rng, path):
    inp = keras.Input((4,), name="features")
    hidden = keras.layers.Dense(5, activation="relu", name="hidden")(inp)
    model = keras.Model(inp, keras.layers.Dense(3, name="head")(hidden), name="mlp")
    return export_keras(model, path, {"features": rng.normal(0, 1, (2, 4)).astype(np.float32)})


def save_keras_lstm(rng, path):
    inp = keras.Input((5, 4), name="sequence")
    x = keras.layers.LSTM(6, name="lstm")(inp)
    model = keras.Model(inp, keras.layers.Dense(3, name="head")(x), name="lstm_model")
    return export_keras(model, path, {"sequence": rng.normal(0, 1, (2, 5, 4)).astype(np.float32)})


def save_keras_cnn(rng, path):
    """A small image classifier whose BatchNormalization has moving statistics of its own (set, not
    the initial zeros and ones), so that gradients w.r.t. moving_mean/moving_variance are not trivial."""
    inp = keras.Input((6, 6, 2), name="image")
    x = keras.layers.Conv2D(4, 3, padding="same", name="conv1")(inp)
    x = keras.layers.BatchNormalization(name="bn1")(x)
    x = keras.layers.ReLU(name="relu1")(x)
    x = keras.layers.MaxPooling2D(2, name="pool1")(x)
    x = keras.layers.Flatten(name="flat")(x)
    model = keras.Model(inp, keras.layers.Dense(3, activation="softmax", name="probs")(x), name="digits_cnn")
    bn = model.get_layer("bn1")
    bn.set_weights([rng.uniform(0.5, 1.5, 4), rng.normal(0, 0.2, 4), rng.normal(0, 0.3, 4),
                    rng.uniform(0.5, 2.0, 4)])
    return export_keras(model, path, {"image": rng.normal(0, 1, (2, 6, 6, 2)).astype(np.float32)})


def save_keras_efficientnet(rng, path):
    """keras.applications' EfficientNet builder itself (B0's seven stages of MBConv blocks, swish,
    squeeze-excite, the rescaling and normalization stem) at width and depth 0.1 (each stage one
    block of at least 8 channels), 32x32 inputs, 10 logits; statistics, gammas, betas and biases
    randomized. EfficientNetB0 proper would be 34 MB."""
    from keras.src.applications.efficientnet import EfficientNet
    from keras_models import images, randomize_constant_weights
    image = keras.Input((32, 32, 3), name="image")
    model = EfficientNet(0.1, 0.1, 32, input_tensor=image, weights=None, classes=10, classifier_activation=None,
                         name="efficientnet_small")
    randomize_constant_weights(model, rng)
    for v in model.variables:
        if v.path.endswith("/variance"):       # the Normalization stem's: positive
            v.assign(rng.uniform(0.5, 1.5, v.shape).astype(np.float32))
    pixels = (images(rng, 2, 32) + 1.0) * 127.5          # EfficientNet rescales 0..255 itself
    model.export(str(path), verbose=False)
    return {"serving_default": {"image": pixels}}


# Cases whose gradients are far below the corpus' absolute tolerance (2e-5): an input gradient
# through EfficientNet's 1/255 rescaling is ~1e-5. Only the relative terms count there.
TOLERANCES = {"keras_efficientnet": {"rtol": 2e-3, "atol": 0.0, "atol_scale": 1e-4}}

SAVED_MODELS = {
    "module_two_signatures": (save_module, "tf.Module with named variables (dense/kernel, dense/bias, a "
                              "non-trainable temperature) and two signatures: serving_default and loss"),
    "keras_export": (save_keras_mlp, "Keras MLP exported with model.export (signatures serve, serving_default)"),
    "while_loop": (save_while_loop, "tf.Module: tf.while_loop with an int variable as trip count, the body "
                   "reading weight variables"),
    "keras_lstm": (save_keras_lstm, "Keras LSTM + Dense exported with model.export"),
    "keras_cnn": (save_keras_cnn, "Keras CNN (Conv2D, BatchNormalization with moving statistics set, ReLU, "
                  "MaxPooling2D, Flatten, Dense softmax) exported with model.export"),
    "while_cond": (save_while_cond, "tf.Module: tf.while_loop over a variable-length input ([None, None]) with "
                   "a tf.cond in its body and a data-dependent tf.cond after it; signatures serving_default and "
                   "reversed (the rows reversed and negated), which between them take every branch"),
    "custom_gradients": (save_custom_gradients, "tf.Module with two tf.custom_gradient nodes (a damped pass-through "
                         "capturing an intermediate tensor, tf.nn.silu), saved with their gradient functions; "
                         "signatures serving_default and a scalar loss"),
    "keras_efficientnet": (save_keras_efficientnet, "keras.applications' EfficientNet (swish, squeeze-excite) at "
                           "width and depth 0.1, 32x32, exported with model.export: custom gradients saved"),
}


# --- reading back what TensorFlow wrote ---------------------------------------------------------

def signature_defs(path) -> dict:
    """{signature: {"inputs"/"outputs": {key: {tensor, dtype, shape}}}} from saved_model.pb."""
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((path / "saved_model.pb").read_bytes())
    meta_graph = next(m for m in saved.meta_graphs if "serve" in m.meta_info_def.tags)

    def info(tensor_info):
        shape = None if tensor_info.tensor_shape.unknown_rank else [
            d.size if d.size >= 0 else None for d in tensor_info.tensor_shape.dim]
        return {"tensor": tensor_info.name, "dtype": tf.as_dtype(tensor_info.dtype).name, "shape": shape}

    return {name: {"inputs": {k: info(v) for k, v in sorted(s.inputs.items())},
                   "outputs": {k: info(v) for k, v in sorted(s.outputs.items())}}
            for name, s in sorted(meta_graph.signature_def.items()) if not name.startswith("__")}


def checkpoint_variables(path, loaded) -> dict:
    """{checkpoint key: (loaded variable object, stored value)} from the bundle's object graph."""
    reader = tf.train.load_checkpoint(str(path / "variables" / "variables"))
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    objects = {0: loaded}
    for node_id, node in enumerate(graph.nodes):  # breadth first: a parent comes before its children
        if node_id not in objects:
            continue
        children = tf.train.TrackableView.children(objects[node_id])
        for child in node.children:
            # Saved functions' traces have no loaded counterpart; they hold no variables.
            if child.node_id not in objects and child.local_name in children:
                objects[child.node_id] = children[child.local_name]
    found = {}
    for node_id, node in enumerate(graph.nodes):
        for attr in node.attributes:
            if attr.name == "VARIABLE_VALUE":
                found[attr.checkpoint_key] = (objects[node_id], reader.get_tensor(attr.checkpoint_key))
    return found


def signature_values(loaded, calls: dict, variables: dict, rng):
    """Outputs of every signature, gradients of every float output (with a random cotangent
    unless scalar) w.r.t. its float inputs and every float variable."""
    inputs, expected, gradients = {}, {}, []
    keys = [k for k, (v, _) in variables.items() if v.dtype.is_floating]
    for sig_name, feeds in calls.items():
        fn = loaded.signatures[sig_name]
        tensors = {k: tf.constant(v) for k, v in feeds.items()}
        inputs.update({f"{sig_name}/{k}": v for k, v in feeds.items()})
        float_inputs = [k for k, v in feeds.items() if v.dtype.kind == "f"]
        for out_name in sorted(fn.structured_outputs):
            with tf.GradientTape() as tape:
                # Watched explicitly: a tape watches only trainable variables by itself.
                tape.watch([tensors[k] for k in float_inputs] + [variables[k][0] for k in keys])
                out = fn(**tensors)[out_name]
            expected[f"out:{sig_name}/{out_name}"] = out.numpy()
            if not out.dtype.is_floating:
                continue
            cot = None if out.shape.rank == 0 else rng.normal(0, 1, out.shape).astype(out.dtype.as_numpy_dtype)
            grads = tape.gradient(out, [tensors[k] for k in float_inputs] + [variables[k][0] for k in keys],
                                  output_gradients=cot)
            prefix = f"{sig_name}/{out_name}"
            if cot is not None:
                inputs[f"grad_ys:{prefix}"] = cot
                # what the command line computes (the ys weighted by ones)
                with tf.GradientTape() as tape:
                    tape.watch([tensors[k] for k in float_inputs])
                    out = fn(**tensors)[out_name]
                for k, g in zip(float_inputs, tape.gradient(out, [tensors[k] for k in float_inputs])):
                    if g is not None:
                        expected[f"din_ones:{prefix}/{k}"] = np.asarray(tf.convert_to_tensor(g))
            entry = {"signature": sig_name, "output": out_name, "grad_ys": None if cot is None else f"grad_ys:{prefix}",
                     "inputs": {}, "variables": {}}
            for k, g in zip(float_inputs, grads[:len(float_inputs)]):
                entry["inputs"][k] = None if g is None else f"din:{prefix}/{k}"
                if g is not None:
                    expected[f"din:{prefix}/{k}"] = np.asarray(tf.convert_to_tensor(g))
            for k, g in zip(keys, grads[len(float_inputs):]):
                entry["variables"][k] = None if g is None else f"dvar:{prefix}/{k}"
                if g is not None:
                    expected[f"dvar:{prefix}/{k}"] = np.asarray(tf.convert_to_tensor(g))
            gradients.append(entry)
    return inputs, expected, gradients


def write_saved_model_case(name: str, directory: pathlib.Path) -> None:
    save, description = SAVED_MODELS[name]
    keras.utils.set_random_seed(seed_for(name))
    rng = np.random.default_rng(seed_for(name))
    if directory.exists():
        shutil.rmtree(directory)
    model_dir = directory / "model"
    calls = save(rng, model_dir)
    loaded = tf.saved_model.load(str(model_dir))
    variables = checkpoint_variables(model_dir, loaded)
    inputs, expected, gradients = signature_values(loaded, calls, variables, rng)
    expected.update({f"ckpt:{k}": value for k, (_, value) in variables.items()})
    meta = {
        "name": name, "kind": "saved_model", "description": description, "path": "model", "tags": ["serve"],
        "signatures": signature_defs(model_dir),
        "calls": {s: {k: f"{s}/{k}" for k in feeds} for s, feeds in calls.items()},
        "variables": {k: {"name": v.name[:-2], "dtype": v.dtype.name, "shape": v.shape.as_list(),
                          "trainable": bool(v.trainable)} for k, (v, _) in variables.items()},
        "gradients": gradients,
        "tolerance": TOLERANCES.get(name, default_tolerance(np.float32)),
        "tensorflow_version": tf.__version__, "keras_version": keras.__version__,
    }
    (directory / "case.json").write_text(json.dumps(meta, indent=1) + "\n")
    np.savez_compressed(directory / "inputs.npz", **inputs)
    np.savez_compressed(directory / "expected.npz", **expected)


# --- TF v1 checkpoint ------------------------------------------------------------------------------

def write_v1_checkpoint(name: str, directory: pathlib.Path, steps: int = 3) -> None:
    """A small TF1 graph trained `steps` SGD steps and saved with tf.compat.v1.train.Saver."""
    rng = np.random.default_rng(seed_for(name))
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4, 3], name="x")
        y = tf1.placeholder(tf.float32, [4, 2], name="y")
        w = tf1.get_variable("dense/kernel", initializer=rng.normal(0, 0.5, (3, 2)).astype(np.float32),
                             use_resource=False)
        b = tf1.get_variable("dense/bias", initializer=np.zeros(2, np.float32), use_resource=True)
        step = tf1.get_variable("global_step", initializer=np.int64(0), trainable=False, use_resource=False)
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y), name="loss")
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step, name="train_op")
        init = tf1.global_variables_initializer()
        saver = tf1.train.Saver()
        feeds = {"x:0": rng.normal(0, 1, (4, 3)).astype(np.float32), "y:0": rng.normal(0, 1, (4, 2)).astype(np.float32)}
        with tf1.Session(graph=graph) as sess:
            sess.run(init)
            for _ in range(steps):
                sess.run(train, feeds)
            prefix = saver.save(sess, str(directory / "model.ckpt"), global_step=step)
            values = {v.op.name: np.asarray(sess.run(v.value())) for v in tf1.global_variables()}
            loss_value = sess.run(loss, feeds)
    checkpoint_text = (directory / "checkpoint").read_text().replace(str(directory) + "/", "")
    (directory / "checkpoint").write_text(checkpoint_text)  # relative paths, as after moving the directory
    (directory / "graph.pb").write_bytes(graph.as_graph_def().SerializeToString(deterministic=True))
    reader = tf.train.load_checkpoint(prefix)
    meta = {
        "name": name, "kind": "v1_checkpoint", "prefix": pathlib.Path(prefix).name, "graph": "graph.pb",
        "meta_graph": pathlib.Path(prefix).name + ".meta", "steps": steps,
        "description": "tf.compat.v1.train.Saver checkpoint of a linear regression (a ref and a resource "
                       f"variable, an int64 global_step) after {steps} GradientDescentOptimizer(0.1) steps",
        "variables": {k: {"dtype": tf.as_dtype(reader.get_variable_to_dtype_map()[k]).name, "shape": s}
                      for k, s in reader.get_variable_to_shape_map().items()},
        "saver_nodes": {"filename": "save/Const:0", "save": "save/control_dependency:0", "restore": "save/restore_all"},
        "feeds": list(feeds), "loss": "loss:0",
        "tensorflow_version": tf.__version__,
    }
    (directory / "case.json").write_text(json.dumps(meta, indent=1) + "\n")
    np.savez_compressed(directory / "inputs.npz", **feeds)
    expected = {f"var:{k}": v for k, v in values.items()}
    expected["y:loss:0"] = np.asarray(loss_value)
    np.savez_compressed(directory / "expected.npz", **expected)


def make(name: str, directory) -> None:
    if name == "v1_checkpoint":
        write_v1_checkpoint(name, pathlib.Path(directory))
    else:
        write_saved_model_case(name, pathlib.Path(directory))
