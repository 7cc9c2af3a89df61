"""Loop-hoist rules (gradreg.registry.hookspecs.gradreg_loop_hoists): a v1 loop's ``xs[t] W``, with
xs and W loop invariants, is computed as one product ``xs W`` before the loop, and each iteration
takes its row t. Anything the rule cannot vouch for (values of another rank or type, an index out
of range, a loop that never runs) falls back to the node's own kernel, errors included."""
from __future__ import annotations

import numpy as np
import pytest
from tf_models import assert_close, load_case

import gradreg as gr
from gradreg.errors import GradregError
from gradreg.registry import get_registry

STEPS, BATCH, INPUT, HIDDEN = 6, 3, 4, 5


def _plan_lines(session, fetches, feeds):
    """(source lines, {line number: node}) of the plan the session compiled."""
    compiled = session.plan_for(fetches, feeds)._compiled
    return compiled.source.splitlines(), compiled.line_ops


def _hoisted(session, fetches, feeds, node_name):
    """Whether the plan computes ``node_name`` before its loop (a line naming it precedes the
    first ``while True:``) and not by a call of its kernel alone inside the loop."""
    lines, line_ops = _plan_lines(session, fetches, feeds)
    loop = next(i for i, text in enumerate(lines, 1) if text.strip() == "while True:")
    return any(op.name == node_name and i < loop for i, op in line_ops.items())


def _rnn(dtype, transpose, reverse=False, steps=STEPS):
    xs = gr.placeholder(dtype, [steps, BATCH, INPUT], name="xs")
    w = gr.placeholder(dtype, [HIDDEN, INPUT] if transpose else [INPUT, HIDDEN], name="w")
    u = gr.placeholder(dtype, [HIDDEN, HIDDEN], name="u")

    def body(t, h):
        row = xs[-1 - t] if reverse else xs[t]
        return t + 1, gr.tanh(gr.matmul(row, w, transpose_b=transpose, name="project") + gr.matmul(h, u))
    _, h = gr.while_loop(lambda t, h: t < steps, body, [0, gr.zeros([BATCH, HIDDEN], dtype=dtype)])
    return (xs, w, u), gr.reduce_sum(h * h, name="loss")


def _numpy_rnn(x, w, u, reverse=False):
    hs = [np.zeros((x.shape[1], w.shape[1]), x.dtype)]
    order = list(range(x.shape[0]))
    rows = [x[-1 - t] for t in order] if reverse else [x[t] for t in order]
    for row in rows:
        hs.append(np.tanh(row @ w + hs[-1] @ u))
    loss = np.sum(hs[-1] ** 2)
    dh, dx, dw, du = 2 * hs[-1], np.zeros_like(x), np.zeros_like(w), np.zeros_like(u)
    for t in reversed(order):
        dz = dh * (1 - hs[t + 1] ** 2)
        index = -1 - t if reverse else t
        dx[index] += dz @ w.T
        dw += rows[t].T @ dz
        du += hs[t].T @ dz
        dh = dz @ u.T
    return loss, dx, dw, du


def _values(dtype, transpose, steps=STEPS):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(steps, BATCH, INPUT)).astype(dtype)
    w = rng.normal(0, 0.5, (INPUT, HIDDEN)).astype(dtype)
    u = rng.normal(0, 0.5, (HIDDEN, HIDDEN)).astype(dtype)
    return x, w, u


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_an_input_projection_is_one_product_before_the_loop(graph, dtype, transpose, reverse):
    (xs, w, u), loss = _rnn(gr.as_dtype(dtype), transpose, reverse)
    grads = gr.gradients(loss, [xs, w, u])
    x_value, w_value, u_value = _values(dtype, transpose)
    feeds = {xs: x_value, w: w_value.T.copy() if transpose else w_value, u: u_value}
    session = gr.Session(graph)
    assert _hoisted(session, [loss], [xs, w, u], "while/project")
    got = session.run([loss, *grads], feeds)
    expected = _numpy_rnn(x_value, w_value, u_value, reverse)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got[0], expected[0], rtol=tolerance)
    for g, e in zip(got[1:], (expected[1], expected[2].T if transpose else expected[2], expected[3])):
        np.testing.assert_allclose(g, e, rtol=tolerance * 10, atol=tolerance)


def test_tensorflows_rnn_graph_hoists_both_projections_and_matches_tensorflow():
    # issue 14's RNN as TensorFlow 2.21 wrote it (tests/data/tf_models/tf1_sliced_rnn):
    # xs[t] W and xs[-1 - t] V^T are each one product before the loop
    case = load_case("tf1_sliced_rnn")
    graph = gr.load_graph(str(case.graph_path("forward")))
    session = gr.Session(graph)
    session.run(case.meta["init_op"])
    fetches = case.meta["fetches"]
    feeds = case.feeds("forward")
    products = [op.name for op in graph.get_operations() if op.type == "MatMul" and op.name.startswith("while/")]
    assert len(products) == 3
    feed_tensors = [graph.get_tensor(name) for name in feeds]
    hoisted = [name for name in products if _hoisted(session, [graph.get_tensor(f) for f in fetches],
                                                      feed_tensors, name)]
    assert len(hoisted) == 2      # h U depends on the loop's state
    for fetch, value in zip(fetches, session.run(fetches, feeds)):
        assert_close(value, case.forward_values()[fetch], fetch, case.tolerance)


def test_values_the_rule_cannot_take_run_the_nodes_kernel(graph):
    # Unknown static shapes: a float32 xs whose rows do not match W's rows fails in the
    # product's own kernel, naming it, when the loop runs; a loop that runs no iteration has
    # no error (the table is never needed).
    xs = gr.placeholder(gr.float32, [None, BATCH, None], name="xs")
    w = gr.placeholder(gr.float32, [None, HIDDEN], name="w")
    n = gr.placeholder(gr.int32, [], name="n")

    def body(t, h):
        return t + 1, h + gr.matmul(xs[t], w, name="project")
    _, h = gr.while_loop(lambda t, h: t < n, body, [0, gr.zeros([BATCH, HIDDEN])])
    session = gr.Session(graph)
    x_value = np.ones((2, BATCH, 3), np.float32)
    w_value = np.ones((4, HIDDEN), np.float32)
    np.testing.assert_array_equal(session.run(h, {xs: x_value, w: w_value, n: 0}), np.zeros((BATCH, HIDDEN)))
    with pytest.raises(GradregError, match="project"):
        session.run(h, {xs: x_value, w: w_value, n: 1})
    # Matching shapes: the table's rows.
    w_value = np.arange(3 * HIDDEN, dtype=np.float32).reshape(3, HIDDEN)
    got = session.run(h, {xs: x_value, w: w_value, n: 2})
    np.testing.assert_allclose(got, 2 * x_value[0] @ w_value, rtol=1e-6)


def test_an_index_past_the_rows_is_the_slices_error(graph):
    xs = gr.placeholder(gr.float64, [None, BATCH, INPUT], name="xs")
    w = gr.placeholder(gr.float64, [INPUT, HIDDEN], name="w")

    def body(t, h):
        return t + 1, h + gr.matmul(xs[t], w, name="project")
    _, h = gr.while_loop(lambda t, h: t < STEPS, body, [0, gr.zeros([BATCH, HIDDEN], gr.float64)])
    session = gr.Session(graph)
    assert _hoisted(session, [h], [xs, w], "while/project")
    x_value, w_value, _ = _values(np.float64, False, steps=STEPS - 2)   # two rows short
    with pytest.raises(GradregError, match="strided_slice"):
        session.run(h, {xs: x_value, w: w_value})
    x_value, w_value, _ = _values(np.float64, False, steps=STEPS)
    np.testing.assert_allclose(session.run(h, {xs: x_value, w: w_value}), x_value.sum(0) @ w_value, rtol=1e-12)


def test_a_weight_that_changes_in_the_loop_is_not_hoisted(graph):
    xs = gr.placeholder(gr.float64, [STEPS, BATCH, INPUT], name="xs")
    w0 = gr.placeholder(gr.float64, [INPUT, INPUT], name="w0")

    def body(t, h, w):
        return t + 1, h + gr.matmul(xs[t], w, name="project"), w * 0.5
    _, h, _ = gr.while_loop(lambda t, h, w: t < STEPS, body,
                            [0, gr.zeros([BATCH, INPUT], gr.float64), w0])
    session = gr.Session(graph)
    assert not _hoisted(session, [h], [xs, w0], "while/project")
    x_value, w_value = np.random.default_rng(5).normal(size=(STEPS, BATCH, INPUT)), np.eye(INPUT) * 3
    expected = sum(x_value[t] @ (w_value * 0.5 ** t) for t in range(STEPS))
    np.testing.assert_allclose(session.run(h, {xs: x_value, w0: w_value}), expected, rtol=1e-12)


def test_matmuls_loop_hoist_rule_comes_from_the_math_family():
    found = get_registry().loop_hoists.lookup("MatMul")
    assert found is not None and found.plugin == "math"
