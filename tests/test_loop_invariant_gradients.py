"""Gradients of loop invariants (an RNN's weights): contributions linear in per-iteration values
are collected in lists and summed by single ops after the backward loop; the rest accumulate
per iteration. Both give the same numbers as a handwritten backward pass."""
from __future__ import annotations

import numpy as np
import pytest
from rnn_reference import tanh_rnn_gradients

import gradreg as gr

STEPS, BATCH, INPUT, HIDDEN = 6, 3, 4, 5


def rnn_values(steps=STEPS):
    rng = np.random.default_rng(1)
    return (rng.normal(size=(steps, BATCH, INPUT)), rng.normal(0, 0.5, (INPUT, HIDDEN)),
            rng.normal(0, 0.5, (HIDDEN, HIDDEN)), rng.normal(0, 0.5, HIDDEN))


def numpy_rnn(x, wx, wh, b):
    """Loss sum(h_T) of h' = tanh(x_t wx + h wh + b) and its gradients, by hand."""
    hs = [np.zeros((x.shape[1], HIDDEN))]
    for t in range(x.shape[0]):
        hs.append(np.tanh(x[t] @ wx + hs[-1] @ wh + b))
    dh, grads = np.ones_like(hs[-1]), [np.zeros_like(wx), np.zeros_like(wh), np.zeros_like(b)]
    for t in reversed(range(x.shape[0])):
        dz = dh * (1 - hs[t + 1] ** 2)
        grads[0] += x[t].T @ dz
        grads[1] += hs[t].T @ dz
        grads[2] += dz.sum(0)
        dh = dz @ wh.T
    return hs[-1].sum(), grads


def build_rnn(batch=BATCH, steps=None):
    """The RNN as a v1 while loop; ``steps`` None makes the trip count a placeholder."""
    x = gr.placeholder(gr.float64, [None, batch, INPUT], name="x")
    wx = gr.placeholder(gr.float64, [INPUT, HIDDEN], name="wx")
    wh = gr.placeholder(gr.float64, [HIDDEN, HIDDEN], name="wh")
    b = gr.placeholder(gr.float64, [HIDDEN], name="b")
    n = gr.placeholder(gr.int32, [], name="n") if steps is None else steps
    h0 = gr.zeros(gr.stack([gr.shape(x)[1], HIDDEN]), dtype=gr.float64) if batch is None else \
        gr.zeros([batch, HIDDEN], dtype=gr.float64)

    def body(t, h):
        return t + 1, gr.tanh(gr.matmul(gr.gather(x, t), wx) + gr.matmul(h, wh) + b)
    _, h = gr.while_loop(lambda t, h: t < n, body, [0, h0])
    loss = gr.reduce_sum(h)
    return (x, wx, wh, b, n), loss, gr.gradients(loss, [wx, wh, b])


def feed(inputs, values, steps=STEPS):
    x, wx, wh, b, n = inputs
    out = dict(zip((x, wx, wh, b), values))
    if isinstance(n, gr.Tensor):
        out[n] = steps
    return out


def ops_of_type(graph, op_type):
    return [op for op in graph.get_operations() if op.type == op_type]


def test_weight_gradients_are_summed_by_one_op_after_the_loop(graph):
    inputs, loss, grads = build_rnn()
    # x_t, h_t and dz_t are collected (dz_t once for all three weights): x_t and h_t, which
    # nothing else in the backward loop needs, on lists the forward loop pushes them on ...
    assert len(ops_of_type(graph, "TensorListPushBack")) == 2
    assert len(ops_of_type(graph, "TensorListSetItem")) == 1
    # ... so only y_t (for TanhGrad) still goes through a stack the forward counter pushes on ...
    pushed = [c for op in ops_of_type(graph, "NextIteration") for c in op.control_inputs
              if c.type == "StackPushV2"]
    assert [op.inputs[1].op.type for op in pushed] == ["Tanh"]
    # ... and no per-iteration accumulator is left: the only backward-loop variables are the
    # trip count, the gradient of h, and the three lists.
    assert not [op for op in graph.get_operations() if op.name.startswith("b_acc")]
    values = rnn_values()
    loss_value, got = gr.Session(graph).run([loss, grads], feed(inputs, values))
    expected_loss, expected = numpy_rnn(*values)
    np.testing.assert_allclose(loss_value, expected_loss, rtol=1e-12)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("steps", [0, 1, 9])
def test_any_trip_count_including_none(graph, steps):
    inputs, loss, grads = build_rnn()
    values = rnn_values(max(steps, 1))
    values = (values[0][:steps],) + values[1:]
    got = gr.Session(graph).run(grads, feed(inputs, values, steps))
    _, expected = numpy_rnn(*values)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_unknown_batch_accumulates_per_iteration(graph):
    # An empty list of unknown element shape cannot be stacked: without a static batch size the
    # weights' gradients are accumulated in the loop, with the same numbers.
    inputs, loss, grads = build_rnn(batch=None, steps=STEPS)
    assert not ops_of_type(graph, "TensorListSetItem")
    values = rnn_values()
    got = gr.Session(graph).run(grads, feed(inputs, values))
    _, expected = numpy_rnn(*values)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_collected_gradients_pass_the_gradient_checker(graph):
    inputs, loss, _ = build_rnn(steps=STEPS)
    x, wx, wh, b, _ = inputs
    values = rnn_values()
    for i, (tensor, value) in enumerate(zip((wx, wh, b), values[1:])):
        others = {t: v for j, (t, v) in enumerate(zip((x, wx, wh, b), values)) if j != i + 1}
        error = gr.testing.compute_gradient_error(tensor, value.shape, loss, [], x_init_value=value,
                                                  extra_feed_dict=others, delta=1e-6)
        assert error < 1e-7, tensor.name


def test_contributions_through_a_reduction_and_a_reshape(graph):
    # An invariant used through a broadcast inside a reshape: its contribution is a Sum and a
    # Reshape of per-iteration values, summed after the loop.
    x = gr.placeholder(gr.float64, [4, 3], name="x")
    scale = gr.placeholder(gr.float64, [1, 3], name="scale")
    _, y = gr.while_loop(lambda i, a: i < 5, lambda i, a: (i + 1, gr.sin(a * gr.reshape(scale, [3]))), [0, x])
    (dscale,) = gr.gradients(gr.reduce_sum(y * y), [scale])
    assert ops_of_type(graph, "TensorListSetItem")
    x_value = np.linspace(-1, 1, 12).reshape(4, 3)
    s_value = np.array([[0.7, -1.2, 0.4]])
    error = gr.testing.compute_gradient_error(scale, [1, 3], gr.reduce_sum(y * y), [], x_init_value=s_value,
                                              extra_feed_dict={x: x_value}, delta=1e-6)
    assert error < 1e-7
    assert gr.Session(graph).run(dscale, {x: x_value, scale: s_value}).shape == (1, 3)


@pytest.mark.tf
def test_tensorflow_runs_the_collected_gradient_graph(graph):
    tf = pytest.importorskip("tensorflow")
    inputs, loss, grads = build_rnn()
    values = rnn_values()
    fetch = [g.name for g in grads]
    ours = gr.Session(graph).run(fetch, {t.name: v for t, v in feed(inputs, values).items()})
    tf_graph = tf.Graph()
    with tf_graph.as_default():
        graph_def = tf.compat.v1.GraphDef.FromString(graph.as_graph_def().SerializeToString())
        tf.graph_util.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=tf_graph) as session:
        theirs = session.run(fetch, {t.name: v for t, v in feed(inputs, values).items()})
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_rows_gathered_from_an_invariant_get_one_sparse_gradient(graph):
    # An embedding looked up in every iteration: the gradient stays IndexedSlices (all
    # iterations' rows, no per-iteration densifying), summed where indices repeat.
    table = gr.placeholder(gr.float64, [7, 3], name="table")
    ids = gr.constant(np.array([[1, 4], [4, 0], [6, 1]], np.int32))
    _, y = gr.while_loop(lambda i, a: i < 3,
                         lambda i, a: (i + 1, gr.tanh(a + gr.gather(table, gr.gather(ids, i)))),
                         [0, gr.zeros([2, 3], dtype=gr.float64)])
    (grad,) = gr.gradients(gr.reduce_sum(y * y), [table])
    assert isinstance(grad, gr.IndexedSlices)
    assert ops_of_type(graph, "TensorListSetItem")
    value = np.random.default_rng(3).normal(size=(7, 3))
    dense = gr.Session(graph).run(gr.convert_to_tensor(grad), {table: value})
    error = gr.testing.compute_gradient_error(table, [7, 3], gr.reduce_sum(y * y), [], x_init_value=value,
                                              delta=1e-6)
    assert error < 1e-7
    assert not dense[[2, 3, 5]].any() and dense[[0, 1, 4, 6]].all()


def test_collected_in_nested_loops_and_under_a_conditional(graph):
    # Inner loop matmuls (their forward values collected by the inner forward loop, once per
    # outer iteration) and a matmul inside a conditional of the loop body (its values pushed
    # only where the branch ran: collected in the backward loop instead).
    x = gr.placeholder(gr.float64, [2, 3], name="x")
    w = gr.placeholder(gr.float64, [3, 3], name="w")
    v = gr.placeholder(gr.float64, [3, 3], name="v")

    def outer(i, a):
        _, inner = gr.while_loop(lambda j, b: j < i + 2,
                                 lambda j, b: (j + 1, gr.tanh(gr.matmul(b, w) + x)), [0, a])
        branch = gr.cond(i < 1, lambda: gr.matmul(inner, v), lambda: inner * 0.5)
        return i + 1, gr.sin(branch)
    _, y = gr.while_loop(lambda i, a: i < 3, outer, [0, x])
    loss = gr.reduce_sum(y * y)
    gr.gradients(loss, [w, v, x])
    assert ops_of_type(graph, "TensorListPushBack") and ops_of_type(graph, "TensorListSetItem")
    rng = np.random.default_rng(1)
    values = {x: rng.normal(size=(2, 3)), w: rng.normal(0, 0.5, (3, 3)), v: rng.normal(0, 0.5, (3, 3))}
    for tensor in (w, v, x):
        others = {t: value for t, value in values.items() if t is not tensor}
        error = gr.testing.compute_gradient_error(tensor, values[tensor].shape, loss, [],
                                                  x_init_value=values[tensor], extra_feed_dict=others, delta=1e-6)
        assert error < 1e-7, tensor.name


def _sliced_rnn(graph, steps=5):
    """Issue 14's RNN: h' = tanh(xs[t] W + h U), xs sliced with StridedSlice (``xs[t]``)."""
    xs = gr.placeholder(gr.float64, [steps, BATCH, INPUT], name="xs")
    w = gr.placeholder(gr.float64, [INPUT, HIDDEN], name="w")
    u = gr.placeholder(gr.float64, [HIDDEN, HIDDEN], name="u")

    def body(t, h):
        return t + 1, gr.tanh(gr.matmul(xs[t], w) + gr.matmul(h, u))
    _, h = gr.while_loop(lambda t, h: t < steps, body, [0, gr.zeros([BATCH, HIDDEN], dtype=gr.float64)])
    loss = gr.reduce_sum(h * h)
    return (xs, w, u), loss


def test_rows_sliced_from_an_invariant_are_scattered_once_after_the_loop(graph):
    # xs[t] in every iteration: the gradient of xs is the iterations' rows added at their
    # indices after the loop, not a full-size StridedSliceGrad added in each iteration.
    (xs, w, u), loss = _sliced_rnn(graph)
    (dxs,) = gr.gradients(loss, [xs])
    assert dxs.op.type == "UnsortedSegmentSum"
    # (the rule's StridedSliceGrad is built, but nothing uses it: it never runs)
    assert not [c for op in ops_of_type(graph, "StridedSliceGrad") for c in op.outputs[0].consumers()]
    # The slice's constant strides are made again in the backward loop, not stacked; its begin
    # vectors go on a list the forward loop fills, and its end vectors nowhere.
    pushed = [c for op in ops_of_type(graph, "NextIteration") for c in op.control_inputs if c.type == "StackPushV2"]
    assert [op.inputs[1].op.type for op in pushed] == ["Tanh"]
    rng = np.random.default_rng(4)
    values = {xs: rng.normal(size=(5, BATCH, INPUT)), w: rng.normal(0, 0.5, (INPUT, HIDDEN)),
              u: rng.normal(0, 0.5, (HIDDEN, HIDDEN))}
    for tensor in (xs, w, u):
        others = {t: v for t, v in values.items() if t is not tensor}
        error = gr.testing.compute_gradient_error(tensor, values[tensor].shape, loss, [],
                                                  x_init_value=values[tensor], extra_feed_dict=others, delta=1e-6)
        assert error < 1e-7, tensor.name


def _backward_products(graph, grads):
    """The MatMul nodes the gradients need that run in a backward loop (once per iteration)."""
    needed, stack = set(), [g.op for g in grads]
    while stack:
        op = stack.pop()
        if op not in needed:
            needed.add(op)
            stack.extend(t.op for t in op.inputs)
            stack.extend(op.control_inputs)
    return [op for op in needed if op.type == "MatMul" and op.name.startswith("gradients/")
            and type(op.control_flow_context).__name__ == "BackwardLoopContext"]


@pytest.mark.parametrize("transpose", [False, True])
def test_gradients_of_sliced_rows_take_one_product_after_the_loop(graph, transpose):
    # d xs[t] = dz_t W^T feeds nothing in the backward loop: it is the stacked dz_t (already
    # collected for dW and dU) times W^T, once after the loop. Per iteration, only dh = dz_t U^T
    # is left. With W stored transposed (xs[t] W^T), the product after the loop is dz W.
    steps = 7
    xs = gr.placeholder(gr.float64, [steps, BATCH, INPUT], name="xs")
    w = gr.placeholder(gr.float64, [HIDDEN, INPUT] if transpose else [INPUT, HIDDEN], name="w")
    u = gr.placeholder(gr.float64, [HIDDEN, HIDDEN], name="u")

    def body(t, h):
        return t + 1, gr.tanh(gr.matmul(xs[t], w, transpose_b=transpose) + gr.matmul(h, u))
    _, h = gr.while_loop(lambda t, h: t < steps, body, [0, gr.zeros([BATCH, HIDDEN], dtype=gr.float64)])
    loss = gr.reduce_sum(h * h)
    grads = gr.gradients(loss, [xs, w, u])
    in_loop = _backward_products(graph, grads)
    assert len(in_loop) == 1 and in_loop[0].inputs[1].op.type == "Enter", [op.name for op in in_loop]
    assert grads[0].op.type == "UnsortedSegmentSum"
    rng = np.random.default_rng(8)
    x_value, u_value = rng.normal(size=(steps, BATCH, INPUT)), rng.normal(0, 0.5, (HIDDEN, HIDDEN))
    w_value = rng.normal(0, 0.5, (INPUT, HIDDEN))
    got = gr.Session(graph).run(grads, {xs: x_value, w: w_value.T if transpose else w_value, u: u_value})
    _, dxs, dw, du = tanh_rnn_gradients(x_value, w_value, u_value)
    for g, e in zip(got, (dxs, dw.T if transpose else dw, du)):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_rows_sliced_again_and_from_the_end_add_up(graph):
    # Rows counted from the end (xs[-3], xs[-2], xs[-1]), each read in two iterations.
    xs = gr.placeholder(gr.float64, [4, 3], name="xs")
    _, y = gr.while_loop(lambda t, a: t < 6,
                         lambda t, a: (t + 1, gr.sin(a * 1.5 + xs[t % 3 - 3])), [0, gr.zeros([3], gr.float64)])
    loss = gr.reduce_sum(y * y)
    (dxs,) = gr.gradients(loss, [xs])
    assert dxs.op.type == "UnsortedSegmentSum"
    value = np.random.default_rng(6).normal(size=(4, 3))
    error = gr.testing.compute_gradient_error(xs, [4, 3], loss, [], x_init_value=value, delta=1e-6)
    assert error < 1e-7
    assert not gr.Session(graph).run(dxs, {xs: value})[0].any()      # row 0 is never read
