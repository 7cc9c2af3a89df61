"""TensorFlow's graphs of the TPU collectives and of _EagerConst, for tests/test_replicas.py
(dev only, needs the ``tf`` extra):

    python tests/data/replicas/make_reference.py

TensorFlow has no CPU kernel (nor an XLA CPU one) for CrossReplicaSum and AllToAll, but builds
their graphs and its gradients of them. Writes next to this script:

* ``forward.pb`` — placeholders ``x`` [2, 3] and ``y`` [4, 2]; ``sum`` = CrossReplicaSum(x * x,
  group_assignment [[0]]), ``exchanged`` = AllToAll(tanh(y), [[0]], concat_dimension 1,
  split_dimension 0, split_count 1), and ``eager`` = _EagerConst of a Const (how eager
  TensorFlow makes constants; TensorFlow's graph mode builds it only through ``create_op``);
* ``tf_grad.pb`` — the same with tf.gradients([sum, exchanged], [x, y], grad_ys=[dsum, dexchanged])
  under ``gradients/`` (``dsum``, ``dexchanged`` are placeholders);
* ``values.npz`` — TensorFlow's run of ``eager`` (the op it can run).
"""
from __future__ import annotations

import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
tf1 = tf.compat.v1
tf1.disable_eager_execution()
R = tf.raw_ops
EAGER_VALUE = np.array([[1.5, -2.0], [0.25, 4.0]], np.float32)


def build(with_gradients: bool):
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float64, [2, 3], name="x")
        y = tf1.placeholder(tf.float32, [4, 2], name="y")
        total = tf.identity(R.CrossReplicaSum(input=x * x, group_assignment=[[0]]), name="sum")
        exchanged = tf.identity(R.AllToAll(input=tf.tanh(y), group_assignment=[[0]], concat_dimension=1,
                                           split_dimension=0, split_count=1), name="exchanged")
        graph.create_op("_EagerConst", [tf.constant(EAGER_VALUE)], [tf.float32], name="eager")
        if with_gradients:
            cotangents = [tf1.placeholder(tf.float64, [2, 3], name="dsum"),
                          tf1.placeholder(tf.float32, [4, 2], name="dexchanged")]
            tf.gradients([total, exchanged], [x, y], grad_ys=cotangents, name="gradients")
    return graph


def main() -> None:
    forward = build(False)
    (HERE / "forward.pb").write_bytes(forward.as_graph_def().SerializeToString(deterministic=True))
    (HERE / "tf_grad.pb").write_bytes(build(True).as_graph_def().SerializeToString(deterministic=True))
    alone = tf.Graph()     # TensorFlow's placer refuses a graph holding ops without a CPU kernel
    with alone.as_default():
        alone.create_op("_EagerConst", [tf.constant(EAGER_VALUE)], [tf.float32], name="eager")
    with tf1.Session(graph=alone) as sess:
        eager = sess.run("eager:0")
    np.savez(HERE / "values.npz", eager=eager)
    print("wrote forward.pb, tf_grad.pb, values.npz")


if __name__ == "__main__":
    main()
