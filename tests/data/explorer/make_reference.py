"""Generate TensorFlow reference data for tests/test_explorer.py (gradient magnitudes per op).

    python tests/data/explorer/make_reference.py        # needs tensorflow-cpu (the tf extra)

Writes next to this script:

* ``model.pb`` -- a small TF1 graph TensorFlow built: a two-layer network in name scopes
  (``dense``, ``act``, ``head``, ``loss``), a branch that reaches the loss only through
  ``tf.stop_gradient`` (its ops are on the path but no gradient reaches them), a ReLU that is
  never active (the gradient reaching ``dead/sub`` is exactly zero), the batch size taken from
  ``tf.shape`` of the unknown batch dimension (integer outputs: no gradient) and a
  ``Const``-valued weight read through an ``Identity``;
* ``inputs.npz`` -- the feed ``x:0``;
* ``expected.npz`` -- for every op on a data path into ``loss/total:0``: ``l2:<op>`` and
  ``max_abs:<op>`` of TensorFlow's ``tf.gradients(loss, <its float outputs>)`` (L2 over all its
  outputs together), and ``disconnected``: the names of the ops whose every gradient TensorFlow
  returns as None.
"""
from __future__ import annotations

import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
LOSS = "loss/total:0"


def build() -> tf.Graph:
    v1 = tf.compat.v1
    rng = np.random.default_rng(32)
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 3], name="x")
        with tf.name_scope("dense"):
            w = tf.identity(tf.constant(rng.normal(size=(3, 5)).astype(np.float32), name="w"), name="w_read")
            b = tf.constant(rng.normal(size=5).astype(np.float32), name="b")
            h = tf.nn.bias_add(tf.matmul(x, w), b)
        with tf.name_scope("act"):
            r = tf.nn.relu(h)
        with tf.name_scope("head"):
            logits = tf.matmul(r, tf.constant(rng.normal(size=(5, 2)).astype(np.float32), name="w"))
        with tf.name_scope("dead"):
            dead = tf.nn.relu(-tf.abs(h) - 1.0)          # never positive: zero gradient below it
        with tf.name_scope("frozen"):
            frozen = tf.stop_gradient(tf.tanh(x * 2.0))  # on the path, no gradient through it
        with tf.name_scope("loss"):
            n = tf.cast(tf.shape(x)[0], tf.float32)      # Shape, StridedSlice: integer outputs
            total = tf.add_n([tf.reduce_sum(tf.square(logits)) / n, tf.reduce_sum(dead),
                              tf.reduce_sum(frozen) * 0.5], name="total")
        assert total.name == LOSS
    return graph


def path_ops(loss: tf.Tensor) -> list[tf.Operation]:
    seen, stack = set(), [loss.op]
    while stack:
        op = stack.pop()
        if op not in seen:
            seen.add(op)
            stack.extend(t.op for t in op.inputs)
    return sorted(seen, key=lambda op: op.name)


def main() -> None:
    graph = build()
    forward = graph.as_graph_def().SerializeToString()
    x_value = np.random.default_rng(7).normal(size=(4, 3)).astype(np.float32)
    loss = graph.get_tensor_by_name(LOSS)
    ops = path_ops(loss)
    expected: dict[str, np.ndarray] = {}
    disconnected = []
    with graph.as_default():
        targets = [(op, t) for op in ops for t in op.outputs if t.dtype.is_floating]
        grads = tf.compat.v1.gradients(loss, [t for _, t in targets])
        fetched = {i: g for i, g in enumerate(grads) if g is not None}
        with tf.compat.v1.Session() as session:
            values = session.run(fetched, {"x:0": x_value})
    for op in ops:
        found = [values[i] for i, (owner, _) in enumerate(targets) if owner is op and i in values]
        if not found:
            disconnected.append(op.name)
            continue
        expected[f"l2:{op.name}"] = np.sqrt(sum(np.sum(np.square(v, dtype=np.float64)) for v in found))
        expected[f"max_abs:{op.name}"] = np.max([np.max(np.abs(v)) for v in found]).astype(np.float64)
    expected["disconnected"] = np.array(sorted(disconnected))
    (HERE / "model.pb").write_bytes(forward)
    np.savez(HERE / "inputs.npz", **{"x:0": x_value})
    np.savez(HERE / "expected.npz", **expected)
    print(f"{len(ops)} ops on the path, {len(disconnected)} disconnected: {', '.join(sorted(disconnected))}")


if __name__ == "__main__":
    main()
