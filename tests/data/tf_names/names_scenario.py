"""TF1-style programs written against a module ``tf`` that is either TensorFlow's tf.compat.v1
with TensorFlow 2's functions where gradreg follows them (make_reference.py's ``api``; it
records the name and op type TensorFlow gives every node, in names.json) or gradreg
(tests/test_tf_names.py checks gradreg's builders give the same names). Each program builds
one graph in the default graph."""
from __future__ import annotations

import numpy as np


def operators(tf):
    """Python operators with Python scalars on either side: the constants go inside the op's
    scope (``sub/x``, ``mul/y``), never under a name the user gives a tensor later."""
    p = tf.placeholder(tf.float32, [2, 3], name="p")
    q = 2.0 - p
    x = tf.placeholder(tf.float32, [2, 3], name="x")
    tf.reduce_sum(x * 4.0, name="y")
    _ = p + 1.0, 1.0 + p, p - 1.0, p * 3.0, 3.0 * p, p / 2.0, 2.0 / p, p ** 2.0, 2.0 ** p
    _ = p // 2.0, p % 2.0, -p, abs(p), p < 1.0, p <= 1.0, p > 1.0, p >= 1.0
    _ = p @ tf.transpose(x), q[0], p[:, 1:], p[1, ::2]
    b = tf.placeholder(tf.bool, [2], name="b")
    _ = b & True, b | False, ~b


def functions_with_scalars(tf):
    """TensorFlow's named functions: their default names and their constants' names."""
    p = tf.placeholder(tf.float32, [2, 3], name="p")
    _ = tf.add(p, 1.0), tf.subtract(p, 1.0), tf.multiply(p, 2.0), tf.divide(p, 2.0), tf.truediv(p, 2.0)
    _ = tf.maximum(p, 0.0), tf.minimum(p, 1.0), tf.pow(p, 2.0), tf.squared_difference(p, 1.0)
    _ = tf.equal(p, 1.0), tf.not_equal(p, 1.0), tf.less(p, 1.0), tf.greater_equal(p, 1.0)
    _ = tf.floordiv(p, 2.0), tf.floormod(p, 2.0), tf.math.xlogy(p, 2.0)
    _ = tf.abs(p), tf.negative(p), tf.square(p), tf.sqrt(p), tf.rsqrt(p), tf.exp(p), tf.log(p)
    _ = tf.sigmoid(p), tf.tanh(p), tf.sign(p), tf.floor(p), tf.round(p), tf.reciprocal(p)
    _ = tf.math.log1p(p), tf.math.erf(p), tf.math.softplus(p)
    _ = tf.cast(p, tf.int32), tf.identity(p), tf.stop_gradient(p)
    _ = tf.clip_by_value(p, 0.0, 1.0), tf.add_n([p, p, p])
    tf.placeholder(tf.float32, [], name="x")
    tf.placeholder(tf.float32, [], name="y")


def reductions(tf):
    x = tf.placeholder(tf.float32, [2, 3, 4], name="x")
    tf.reduce_sum(x * 4.0, name="y")
    _ = tf.reduce_sum(x), tf.reduce_sum(x, axis=1), tf.reduce_mean(x, axis=[0, 2], keepdims=True)
    _ = tf.reduce_max(x, 0), tf.reduce_min(x), tf.reduce_prod(x, -1), tf.reduce_mean(x, name="mean")
    _ = tf.argmax(x, 1), tf.argmin(x, axis=2), tf.cumsum(x, 1), tf.cumprod(x, axis=0)
    _ = tf.reduce_all(x > 0.0), tf.reduce_any(x > 0.0, axis=1), tf.count_nonzero(x)
    u = tf.placeholder(tf.float32, None, name="unknown_rank")
    _ = tf.reduce_sum(u), tf.reduce_mean(u, name="mean")


def products(tf):
    a = tf.placeholder(tf.float32, [2, 3], name="a")
    b = tf.placeholder(tf.float32, [3, 4], name="b")
    c = tf.placeholder(tf.float32, [5, 2, 3], name="c")
    _ = tf.matmul(a, b), tf.matmul(a, b, name="mm"), tf.matmul(a, a, transpose_b=True)
    _ = tf.matmul(c, b), tf.linalg.matmul(a, b), tf.einsum("ij,jk->ik", a, b)
    _ = tf.matmul(a, np.ones((3, 2), np.float32))


def arrays(tf):
    x = tf.placeholder(tf.float32, [2, 3], name="x")
    _ = tf.reshape(x, [3, 2]), tf.reshape(x, [-1]), tf.transpose(x), tf.transpose(x, [1, 0])
    _ = tf.expand_dims(x, 0), tf.squeeze(tf.expand_dims(x, 0)), tf.concat([x, x], 0), tf.concat([x, x], axis=1)
    _ = tf.stack([x, x]), tf.unstack(x), tf.split(x, 3, axis=1), tf.tile(x, [2, 1])
    _ = tf.pad(x, [[1, 1], [0, 0]]), tf.gather(x, [1, 0]), tf.one_hot([0, 2], 3)
    _ = tf.where(x > 0.0), tf.where(x > 0.0, x, 0.0 * x)
    _ = tf.zeros([2, 2]), tf.ones([3]), tf.zeros_like(x), tf.ones_like(x), tf.fill([2, 2], 5.0)
    _ = tf.shape(x), tf.size(x), tf.rank(x), tf.range(5), tf.range(1, 7, 2)
    u = tf.placeholder(tf.float32, [None, 3], name="u")
    _ = tf.shape(u), tf.zeros_like(u), tf.ones(tf.shape(u)), tf.reshape(u, [tf.shape(u)[0], 3, 1])
    _ = tf.ones_like(u), tf.zeros_like(u, dtype=tf.int32), tf.ones_like(u, dtype=tf.int64), tf.zeros([tf.shape(u)[0]])
    _ = tf.constant([1, 2]), tf.constant(3.0, name="three"), tf.slice(x, [0, 1], [2, 2])


def neural_networks(tf):
    x = tf.placeholder(tf.float32, [4, 8, 8, 3], name="x")
    w = tf.constant(np.ones((3, 3, 3, 5), np.float32), name="w")
    bias = tf.constant(np.ones(5, np.float32), name="bias")
    y = tf.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME")
    y = tf.nn.relu(tf.nn.bias_add(y, bias))
    y = tf.nn.max_pool2d(y, 2, 2, "VALID")
    y = tf.nn.avg_pool2d(y, 2, 2, "SAME")
    _ = tf.nn.avg_pool(y, [1, 2, 2, 1], [1, 1, 1, 1], "SAME"), tf.nn.max_pool(y, 2, 1, "VALID")
    logits = tf.reshape(y, [4, -1])
    labels = tf.placeholder(tf.float32, [4, 20], name="labels")
    ids = tf.placeholder(tf.int32, [4], name="ids")
    _ = tf.nn.softmax(logits), tf.nn.log_softmax(logits), tf.nn.softmax(logits, axis=0)
    _ = tf.nn.relu6(logits), tf.nn.elu(logits), tf.nn.selu(logits), tf.nn.softplus(logits)
    _ = tf.nn.leaky_relu(logits), tf.nn.sigmoid(logits), tf.nn.tanh(logits), tf.nn.l2_loss(logits)
    _ = tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    _ = tf.image.flip_left_right(x), tf.image.flip_up_down(x), tf.image.transpose(x), tf.image.transpose(x, name="t")
    _ = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids, logits=logits)
    _ = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)


def control_flow(tf):
    """v1 control flow: a value entering a branch or a loop gets its Switch or Enter in the scope
    of the op that uses it (``cond/mul/Switch``, ``while/Exp/Enter``)."""
    x = tf.placeholder(tf.float32, [], name="x")
    tf.cond(x > 0.0, lambda: x * 2.0, lambda: x - 1.0)
    tf.cond(x < 1.0, lambda: tf.exp(x), lambda: tf.square(x), name="branch")
    tf.while_loop(lambda i, s: i < 5, lambda i, s: (i + 1, s * x), [0, 1.0])
    tf.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s + tf.exp(x)), [0, 0.0], name="loop")


def variables(tf):
    """A dense layer written with variable scopes: the variables, their initial values and the
    layer's ops."""
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    with tf.variable_scope("dense"):
        w = tf.get_variable("kernel", [3, 2], initializer=tf.ones_initializer())
        b = tf.get_variable("bias", [2], initializer=tf.zeros_initializer())
        y = tf.nn.relu(tf.matmul(x, w) + b)
    with tf.variable_scope("out"):
        v = tf.get_variable("v", [2, 1], initializer=tf.constant_initializer(0.5))
        tf.reduce_mean(tf.square(tf.matmul(y, v) - 1.0), name="loss")


# Programs whose graph gradreg builds node for node as TensorFlow does (the order may differ:
# gradreg makes a branch's Switch before the op that uses it, TensorFlow after). In the others,
# TensorFlow builds nodes gradreg does not (a softmax permutation computed at run time where
# gradreg writes a Const, reshapes around a matrix cross entropy, variables' IsInitialized), so
# the test checks the names of the nodes gradreg does build.
PROGRAMS = {f.__name__: f for f in (operators, functions_with_scalars, reductions, products, arrays,
                                    neural_networks, control_flow, variables)}
SAME_GRAPH = ("operators", "functions_with_scalars", "reductions", "products", "arrays", "control_flow")
