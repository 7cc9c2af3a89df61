"""TF1 (tf.compat.v1 graph mode) cases of the tf_models corpus: graphs with variables, not frozen.

Every variable is initialised from a NumPy array (a Const in the graph), so a session that runs
`init` starts from TensorFlow's values with no random op involved. Each case is built three times
into fresh graphs from the same seed (identical node names):
- forward.pb: the model and `init`;
- tf_grad.pb: the same plus tf.gradients(ys, xs[, grad_ys]) — xs are the input placeholders and the
  variables (a ref variable's VariableV2 tensor, a resource variable's VarHandleOp tensor, as
  tf.gradients(ys, variable) uses them);
- train.pb (training cases): the same plus optimizer.minimize(loss, global_step, name="train_op").
Values: forward fetches and the variables after one run from init (forward.pb); gradients from
tf_grad.pb after init; for training cases the variables after `steps` runs of train_op.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf
from tfhelpers import add_tf_gradients, check_close, default_tolerance, op_types, seed_for, tf1, write_case


def variable(name, value, resource: bool, trainable: bool = True):
    return tf1.get_variable(name, initializer=value, use_resource=resource, trainable=trainable)


def var_kind(v) -> str:
    return "ref" if v.op.type == "VariableV2" else "resource"


# --- models: each builds into the default graph and returns its spec ------------------------------

def mlp_softmax(rng, resource: bool):
    """x [4,6] -> tanh dense 8 -> dense 3 -> mean sparse softmax cross-entropy (a scalar loss)."""
    x = tf1.placeholder(tf.float32, [4, 6], name="x")
    labels = tf1.placeholder(tf.int32, [4], name="labels")
    w1 = variable("w1", rng.normal(0, 0.5, (6, 8)).astype(np.float32), resource)
    b1 = variable("b1", rng.normal(0, 0.1, (8,)).astype(np.float32), resource)
    w2 = variable("w2", rng.normal(0, 0.5, (8, 3)).astype(np.float32), resource)
    b2 = variable("b2", rng.normal(0, 0.1, (3,)).astype(np.float32), resource)
    logits = tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2) + b2
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits), name="loss")
    return {"feeds": [x, labels], "fetches": [loss], "ys": [loss], "cotangent": False, "xs": [x, w1, b1, w2, b2]}


class HandwrittenRNNCell:
    """h' = tanh([x, h] W + b): an RNN cell dynamic_rnn accepts (tf.compat.v1's own cells need tf_keras)."""

    def __init__(self, rng, inputs: int, units: int, resource: bool):
        self.state_size = self.output_size = units
        self.w = variable("rnn/w", rng.normal(0, 0.5, (inputs + units, units)).astype(np.float32), resource)
        self.b = variable("rnn/b", rng.normal(0, 0.1, (units,)).astype(np.float32), resource)

    def zero_state(self, batch, dtype):
        return tf.zeros([batch, self.state_size], dtype)

    def __call__(self, inputs, state, scope=None):
        h = tf.tanh(tf.matmul(tf.concat([inputs, state], 1), self.w) + self.b)
        return h, h


def dynamic_rnn(rng):
    """tf.compat.v1.nn.dynamic_rnn over 5 steps with sequence lengths (TensorArray*V3, v1 loop)."""
    x = tf1.placeholder(tf.float32, [2, 5, 3], name="x")
    lengths = tf1.placeholder(tf.int32, [2], name="lengths")
    cell = HandwrittenRNNCell(rng, 3, 4, resource=False)
    outputs, state = tf1.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=tf.float32)
    outputs, state = tf.identity(outputs, name="outputs"), tf.identity(state, name="state")
    return {"feeds": [x, lengths], "fetches": [outputs, state], "ys": [outputs, state], "cotangent": True,
            "xs": [x, cell.w, cell.b]}


def sliced_rnn(rng):
    """Issue 14's RNN (v1 while_loop reading xs[t]) with a second input read from the end through
    transposed weights: h' = tanh(xs[t] W + xs[-1 - t] V^T + h U), 7 steps."""
    xs = tf1.placeholder(tf.float32, [7, 3, 4], name="x")
    w = variable("w", rng.normal(0, 0.5, (4, 5)).astype(np.float32), resource=False)
    v = variable("v", rng.normal(0, 0.5, (5, 4)).astype(np.float32), resource=False)
    u = variable("u", rng.normal(0, 0.5, (5, 5)).astype(np.float32), resource=False)

    def body(t, h):
        return t + 1, tf.tanh(tf.matmul(xs[t], w) + tf.matmul(xs[-1 - t], v, transpose_b=True) + tf.matmul(h, u))
    _, h = tf1.while_loop(lambda t, h: t < 7, body, [tf.constant(0), tf.zeros([3, 5])])
    y = tf.identity(h, name="y")
    return {"feeds": [xs], "fetches": [y], "ys": [y], "cotangent": True, "xs": [xs, w, v, u]}


def while_reads_variable(rng):
    """A v1 while_loop whose body reads a ref variable (RefEnter) and a resource variable, and
    increments a ref counter (AssignAdd) under a control dependency."""
    x = tf1.placeholder(tf.float32, [2, 3], name="x")
    w_ref = variable("w_ref", rng.normal(0, 0.6, (3, 3)).astype(np.float32), resource=False)
    w_res = variable("w_res", rng.normal(0, 0.6, (3, 3)).astype(np.float32), resource=True)
    count = variable("count", np.float32(0), resource=False, trainable=False)

    def body(i, h):
        with tf.control_dependencies([tf1.assign_add(count, 1.0)]):
            return i + 1, tf.tanh(tf.matmul(h, w_ref.read_value()) + tf.matmul(h, w_res.read_value()))

    _, h = tf1.while_loop(lambda i, h: i < 4, body, [0, x])
    y = tf.identity(h, name="y")
    return {"feeds": [x], "fetches": [y], "ys": [y], "cotangent": True, "xs": [x, w_ref, w_res]}


def cond_reads_variable(rng):
    """v1 tf.cond reading a ref and a resource variable in both branches; a second cond assigns to a
    ref variable in each branch (RefSwitch, RefMerge)."""
    x = tf1.placeholder(tf.float32, [2, 3], name="x")
    w_ref = variable("w_ref", rng.normal(0, 0.6, (3, 3)).astype(np.float32), resource=False)
    w_res = variable("w_res", rng.normal(0, 0.6, (3, 3)).astype(np.float32), resource=True)
    acc = variable("acc", np.zeros((3,), np.float32), resource=False, trainable=False)
    p = tf.reduce_sum(x) > 0
    z = tf.cond(p, lambda: tf.matmul(x, w_ref.read_value()) * w_res[0],
                lambda: tf.matmul(x, w_res.read_value()) - w_ref[1])
    y = tf.identity(z, name="y")
    moved = tf.cond(p, lambda: tf1.assign_add(acc, tf.ones([3])), lambda: tf1.assign_sub(acc, tf.ones([3])))
    moved = tf.identity(moved, name="acc_after")
    return {"feeds": [x], "fetches": [y, moved], "ys": [y], "cotangent": True, "xs": [x, w_ref, w_res]}


def ref_loop(rng):
    """A v1 while_loop carrying a ref variable's tensor: RefEnter, RefMerge, RefSwitch, RefIdentity,
    RefNextIteration, RefExit. The body accumulates x into the variable (AssignAdd) three times.
    parallel_iterations=1: with TensorFlow's default of 10, what y reads through the ref races
    (TensorFlow itself gives 2*(v+x), 2*(v+2x) or 2*(v+3x) from run to run)."""
    x = tf1.placeholder(tf.float32, [3], name="x")
    v = variable("v", rng.normal(0, 1, (3,)).astype(np.float32), resource=False)
    _, r = tf1.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, tf1.assign_add(v, x)), [0, v.op.outputs[0]],
                          parallel_iterations=1)
    y = tf.multiply(r, 2.0, name="y")
    return {"feeds": [x], "fetches": [y], "ys": [y], "cotangent": True, "xs": [x]}


def v2_control_flow_resource(rng):
    """Control flow v2 in graph mode: While, If and Case ops whose bodies read resource variables."""
    x = tf1.placeholder(tf.float32, [2, 3], name="x")
    branch = tf1.placeholder(tf.int32, [], name="branch")
    w = variable("w", rng.normal(0, 0.6, (3, 3)).astype(np.float32), resource=True)
    b = variable("b", rng.normal(0, 0.1, (3,)).astype(np.float32), resource=True)
    _, h = tf1.while_loop(lambda i, h: i < 4, lambda i, h: (i + 1, tf.tanh(tf.matmul(h, w) + b)), [0, x])
    z = tf.cond(tf.reduce_sum(x) > 0, lambda: h * w[0], lambda: h - b)
    k = tf.switch_case(branch, [lambda: z * 2.0, lambda: tf.matmul(z, w), lambda: z + b])
    y = tf.identity(k, name="y")
    return {"feeds": [x, branch], "fetches": [y], "ys": [y], "cotangent": True, "xs": [x, w, b]}


def block_lstm(rng):
    """TF1's LSTMBlockFusedCell as its graph holds it: BlockLSTM (peepholes, forget_bias 1, cell_clip 3)
    over a [6, 3, 4] sequence with seq_len_max 5 (the last step is padding), the last valid h through
    a dense layer to a mean softmax cross-entropy; ref variables, trained by SGD."""
    x = tf1.placeholder(tf.float32, [6, 3, 4], name="x")
    labels = tf1.placeholder(tf.int32, [3], name="labels")
    cell = 5
    w = variable("lstm/kernel", rng.normal(0, 0.8, (4 + cell, 4 * cell)).astype(np.float32), resource=False)
    b = variable("lstm/bias", rng.normal(0, 0.3, (4 * cell,)).astype(np.float32), resource=False)
    peepholes = [variable(f"lstm/{n}", rng.normal(0, 0.5, (cell,)).astype(np.float32), resource=False)
                 for n in ("w_i_diag", "w_f_diag", "w_o_diag")]
    w_out = variable("dense/kernel", rng.normal(0, 0.5, (cell, 2)).astype(np.float32), resource=False)
    zeros = tf.zeros([3, cell])
    _, cs, _, _, _, _, h = tf.raw_ops.BlockLSTM(seq_len_max=tf.constant(5, tf.int64), x=x, cs_prev=zeros,
                                                h_prev=zeros, w=w, wci=peepholes[0], wcf=peepholes[1],
                                                wco=peepholes[2], b=b, forget_bias=1.0, cell_clip=3.0,
                                                use_peephole=True)
    logits = tf.matmul(h[4], w_out) + tf.reduce_mean(cs[4], axis=1, keepdims=True)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits), name="loss")
    return {"feeds": [x, labels], "fetches": [loss, tf.identity(h, name="h")], "ys": [loss], "cotangent": False,
            "xs": [x, w, b, *peepholes, w_out]}


def map_fn_ragged(rng):
    """tf.map_fn over the rows of a ragged tensor [4, None, 3] (one row empty): per row, a dense
    layer's tanh summed over the row's items (a dense [4, 4] result), and the row scaled by the
    weights' sum (a ragged result). Each row travels as a RaggedTensorToVariant encoding through a
    TensorArray (control flow v1) or a TensorList (v2); the loop body decodes it."""
    x = tf1.placeholder(tf.float32, [6, 3], name="x")
    w = variable("w", rng.normal(0, 0.6, (3, 4)).astype(np.float32), resource=False)
    rows = tf.RaggedTensor.from_row_splits(x, tf.constant([0, 2, 2, 5, 6], tf.int64))
    summed = tf.map_fn(lambda row: tf.reduce_sum(tf.tanh(tf.matmul(row, w)), axis=0), rows,
                       fn_output_signature=tf.float32)
    scaled = tf.map_fn(lambda row: row * tf.reduce_sum(w), rows,
                       fn_output_signature=tf.RaggedTensorSpec([None, 3], tf.float32, ragged_rank=0))
    summed, scaled = tf.identity(summed, name="summed"), tf.identity(scaled.flat_values, name="scaled")
    return {"feeds": [x], "fetches": [summed, scaled], "ys": [summed, scaled], "cotangent": True, "xs": [x, w]}


def block_lstm_values(rng, steps=3):
    """Feeds for block_lstm: inputs large enough that the cell state reaches the clip."""
    return {"x:0": rng.normal(0, 2, (6, 3, 4)).astype(np.float32), "labels:0": np.array([0, 1, 1], np.int32),
            "train/x:0": rng.normal(0, 2, (steps, 6, 3, 4)).astype(np.float32),
            "train/labels:0": rng.integers(0, 2, (steps, 3)).astype(np.int32)}


# --- building and writing ---------------------------------------------------------------------------

def build(model, seed: int, mode: str, train: dict | None = None):
    """(graph, spec as names, gradient names or None) for mode forward | tf_grad | train."""
    graph = tf.Graph()
    grads = None
    with graph.as_default():
        spec = model(np.random.default_rng(seed))
        names = {k: [t.name for t in spec[k]] for k in ("feeds", "fetches", "ys", "xs")}
        names["variables"] = {v.name[:-2]: var_kind(v) for v in tf1.global_variables()}
        names["cotangent"] = spec["cotangent"]
        if mode == "tf_grad":
            grad_ys = None
            if spec["cotangent"]:
                grad_ys = [(f"grad_ys_{i}:0", y.dtype, y.shape) for i, y in enumerate(spec["ys"])]
            grads = add_tf_gradients(graph, names["ys"], names["xs"], grad_ys)
        elif mode == "train":
            step = variable("global_step", np.int64(0), train["resource"], trainable=False)
            train["optimizer"]().minimize(spec["ys"][0], global_step=step, name="train_op")
            names["variables"] = {v.name[:-2]: var_kind(v) for v in tf1.global_variables()}
        tf1.global_variables_initializer()
    return graph, names, grads


def write_tf1_case(directory, name: str, model, values: dict, description: str, v2: bool = False,
                   train: dict | None = None) -> None:
    """Build, run in TensorFlow, write the case. values: {feed name: array} (train batches under
    'train/<feed>' with the step first)."""
    (tf1.enable_control_flow_v2 if v2 else tf1.disable_control_flow_v2)()
    seed = seed_for(name)
    forward, names, _ = build(model, seed, "forward")
    grad_graph, _, (grads, sparse) = build(model, seed, "tf_grad")
    # Snapshot before running: reading resource variables below adds nodes to the graphs.
    files = {"forward.pb": forward.as_graph_def(), "tf_grad.pb": grad_graph.as_graph_def()}
    feeds = {f: values[f] for f in names["feeds"]}
    outs, state = run_in(forward, names["fetches"], feeds)
    rng = np.random.default_rng(seed + 1)
    grad_ys = []
    if names["cotangent"]:
        for i, y in enumerate(names["ys"]):
            y_value = outs[names["fetches"].index(y)]
            grad_ys.append(f"grad_ys_{i}:0")
            values[f"grad_ys_{i}:0"] = rng.normal(0.0, 1.0, y_value.shape).astype(y_value.dtype)
    grad_values, _ = run_in(grad_graph, names["fetches"] + [g for g in grads if g],
                            dict(feeds, **{g: values[g] for g in grad_ys}))
    tol = default_tolerance(outs[0].dtype)
    for f, a, b in zip(names["fetches"], outs, grad_values):
        check_close(b, a, f"{name} {f} in tf_grad.pb", **tol)
    expected = {f"y:{f}": v for f, v in zip(names["fetches"], outs)}
    connected = iter(grad_values[len(names["fetches"]):])
    expected.update({f"dx:{x}": next(connected) for x, g in zip(names["xs"], grads) if g})
    expected.update({f"var:{v}": value for v, value in state.items()})
    meta = {
        "name": name, "kind": "tf1", "description": description, "control_flow_v2": v2,
        "feeds": names["feeds"], "fetches": names["fetches"], "ys": names["ys"], "grad_ys": grad_ys or None,
        "gradient_of": "ys with a fixed random cotangent (grad_ys)" if grad_ys else "the scalar loss (no grad_ys)",
        "xs": names["xs"], "variables": names["variables"], "init_op": "init",
        "unconnected": [x for x, g in zip(names["xs"], grads) if g is None], "sparse_in_tf": sparse,
        "tolerance": tol, "var_values": "after one run of the forward fetches from init",
        "graphs": {
            "forward": {"file": "forward.pb", "kind": "forward", "ops": op_types(files["forward.pb"])},
            "tf_grad": {"file": "tf_grad.pb", "kind": "tf_gradients", "of": "forward", "grads": grads,
                        "ops": op_types(files["tf_grad.pb"])},
        },
    }
    if train:
        add_training(meta, files, expected, model, seed, values, train)
    write_case(directory, meta, values, expected, files)


def run_in(graph, fetches, feeds):
    """run_from_init on a graph whose variables are listed by the graph itself."""
    with tf1.Session(graph=graph) as sess:
        sess.run("init")
        values = sess.run(fetches, feeds)
        with graph.as_default():
            state = {v.name[:-2]: np.asarray(sess.run(v.read_value() if var_kind(v) == "resource" else v))
                     for v in tf1.global_variables()}
    return [np.asarray(v) for v in values], state


def add_training(meta, files, expected, model, seed, values, train) -> None:
    """train.pb, `steps` runs of train_op from init on the stored batches, the variables after."""
    graph, names, _ = build(model, seed, "train", train)
    files["train.pb"] = graph.as_graph_def()  # before reading variables adds nodes
    batches = {f: values[f"train/{f}"] for f in names["feeds"]}
    steps = len(next(iter(batches.values())))
    with tf1.Session(graph=graph) as sess:
        sess.run("init")
        for i in range(steps):
            sess.run("train_op", {f: b[i] for f, b in batches.items()})
        with graph.as_default():
            state = {v.name[:-2]: np.asarray(sess.run(v.read_value() if var_kind(v) == "resource" else v))
                     for v in tf1.global_variables()}
    expected.update({f"trained:{v}": value for v, value in state.items()})
    meta["graphs"]["train"] = {"file": "train.pb", "kind": "train", "ops": op_types(files["train.pb"])}
    meta["train"] = {"graph": "train", "op": "train_op", "init_op": "init", "steps": steps,
                     "optimizer": train["description"], "feeds": {f: f"train/{f}" for f in names["feeds"]},
                     "variables": names["variables"]}


def mlp_values(rng, steps=5):
    """Feeds for mlp_softmax: one batch for forward/gradients, `steps` batches for training."""
    return {"x:0": rng.normal(0, 1, (4, 6)).astype(np.float32), "labels:0": np.array([0, 2, 1, 2], np.int32),
            "train/x:0": rng.normal(0, 1, (steps, 4, 6)).astype(np.float32),
            "train/labels:0": rng.integers(0, 3, (steps, 4)).astype(np.int32)}


def training_case(resource: bool, optimizer: str):
    make_optimizer = {"sgd": lambda: tf1.train.GradientDescentOptimizer(0.1),
                      "adam": lambda: tf1.train.AdamOptimizer(0.05)}[optimizer]
    text = {"sgd": "GradientDescentOptimizer(0.1)", "adam": "AdamOptimizer(0.05)"}[optimizer]
    kind = "resource" if resource else "ref (VariableV2)"
    return lambda name, directory: write_tf1_case(
        directory, name, lambda rng: mlp_softmax(rng, resource), mlp_values(np.random.default_rng(seed_for(name))),
        f"TF1 MLP training graph, {kind} variables, {text}.minimize, 5 steps",
        train={"resource": resource, "optimizer": make_optimizer, "description": text})


def simple_case(model, description, v2=False, extra_values=None):
    def make_case(name, directory):
        rng = np.random.default_rng(seed_for(name))
        values = {"x:0": model_input(name, rng), **(extra_values or {})}
        write_tf1_case(directory, name, model, values, description, v2=v2)
    return make_case


def model_input(name, rng):
    shapes = {"tf1_dynamic_rnn": (2, 5, 3), "tf1_ref_loop": (3,), "tf1_sliced_rnn": (7, 3, 4),
              "tf1_map_fn_ragged": (6, 3), "tf1_map_fn_ragged_v2": (6, 3)}
    return rng.normal(0, 1, shapes.get(name, (2, 3))).astype(np.float32)


def block_lstm_case(name, directory):
    write_tf1_case(directory, name, block_lstm, block_lstm_values(np.random.default_rng(seed_for(name))),
                   "TF1 LSTMBlockFusedCell training graph: BlockLSTM with peepholes and cell clipping over a padded "
                   "sequence, ref variables, GradientDescentOptimizer(0.1).minimize, 3 steps",
                   train={"resource": False, "optimizer": lambda: tf1.train.GradientDescentOptimizer(0.1),
                          "description": "GradientDescentOptimizer(0.1)"})


CASES = {
    "tf1_train_ref_sgd": training_case(False, "sgd"),
    "tf1_train_ref_adam": training_case(False, "adam"),
    "tf1_train_resource_sgd": training_case(True, "sgd"),
    "tf1_train_resource_adam": training_case(True, "adam"),
    "tf1_dynamic_rnn": simple_case(dynamic_rnn, "tf.compat.v1.nn.dynamic_rnn (control flow v1, TensorArray*V3) "
                                   "with sequence lengths over a handwritten RNN cell with ref variables",
                                   extra_values={"lengths:0": np.array([5, 3], np.int32)}),
    "tf1_sliced_rnn": simple_case(sliced_rnn, "issue 14's RNN: v1 while_loop reading xs[t] and xs[-1 - t] "
                                  "(StridedSlice), the second through transposed weights"),
    "tf1_while_reads_variable": simple_case(while_reads_variable, "v1 while_loop reading a ref and a resource "
                                            "variable inside the body, with an AssignAdd counter"),
    "tf1_cond_reads_variable": simple_case(cond_reads_variable, "v1 tf.cond reading ref and resource variables; "
                                           "a second cond assigns to a ref variable (RefSwitch/RefMerge)"),
    "tf1_ref_loop": simple_case(ref_loop, "v1 while_loop carrying a ref variable (all Ref* control-flow ops)"),
    "tf1_train_block_lstm": block_lstm_case,
    "tf1_map_fn_ragged": simple_case(map_fn_ragged, "tf.map_fn over the rows of a ragged tensor, dense and ragged "
                                     "results (RaggedTensorToVariant/FromVariant, a TensorArray of row encodings, "
                                     "control flow v1)"),
    "tf1_map_fn_ragged_v2": simple_case(map_fn_ragged, "tf.map_fn over the rows of a ragged tensor, dense and ragged "
                                        "results (a TensorList of row encodings in a While, control flow v2)",
                                        v2=True),
    "tf1_v2_control_flow_resource": simple_case(v2_control_flow_resource, "control flow v2 in graph mode: "
                                                "While, If and Case reading resource variables", v2=True,
                                                extra_values={"branch:0": np.array(1, np.int32)}),
}


def make(name: str, directory) -> None:
    CASES[name](name, directory)
