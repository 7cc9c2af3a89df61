"""Gradients through control flow: v1 cond and while loops (built or imported), functional
If/While, function calls, second derivatives, and the memory of loop gradients."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import gradreg as gr
from gradreg.registry import get_registry
from gradreg.testing import compute_gradient_error


def test_cond_gradient_takes_the_branch_taken(graph):
    x = gr.placeholder(gr.float64, [3], name="x")
    p = gr.placeholder(gr.bool, [], name="p")
    y = gr.reduce_sum(gr.cond(p, lambda: x * x * x, lambda: gr.sin(x)))
    (dx,) = gr.gradients(y, [x])
    v = np.array([0.5, -1.0, 2.0])
    sess = gr.Session(graph)
    np.testing.assert_allclose(sess.run(dx, {x: v, p: True}), 3 * v ** 2)
    np.testing.assert_allclose(sess.run(dx, {x: v, p: False}), np.cos(v))


def test_second_derivative_through_cond(graph):
    x = gr.placeholder(gr.float64, [3], name="x")
    p = gr.placeholder(gr.bool, [], name="p")
    y = gr.reduce_sum(gr.cond(p, lambda: x * x * x, lambda: gr.sin(x)))
    (dx,) = gr.gradients(y, [x])
    (ddx,) = gr.gradients(gr.reduce_sum(dx), [x])
    v = np.array([0.5, -1.0, 2.0])
    sess = gr.Session(graph)
    np.testing.assert_allclose(sess.run(ddx, {x: v, p: True}), 6 * v)
    np.testing.assert_allclose(sess.run(ddx, {x: v, p: False}), -np.sin(v))


def test_first_and_second_derivatives_through_a_function_call(graph):
    x = gr.placeholder(gr.float64, [4], name="x")

    @gr.function
    def cube_tanh(a):
        return gr.tanh(a) * a * a
    y = gr.reduce_sum(cube_tanh(x))
    (dx,) = gr.gradients(y, [x])
    (ddx,) = gr.gradients(gr.reduce_sum(dx), [x])
    assert dx.op.type == "SymbolicGradient"
    v = np.linspace(-1.5, 1.5, 4)
    t = np.tanh(v)
    first = (1 - t ** 2) * v ** 2 + 2 * v * t
    second = -2 * t * (1 - t ** 2) * v ** 2 + 4 * v * (1 - t ** 2) + 2 * t
    got, got2 = gr.Session(graph).run([dx, ddx], {x: v})
    np.testing.assert_allclose(got, first, rtol=1e-10)
    np.testing.assert_allclose(got2, second, rtol=1e-10)


def test_a_registered_gradient_for_a_function_name_is_used(graph):
    x = gr.placeholder(gr.float64, [2], name="x")

    @gr.function
    def double(a):
        return a * 2.0
    y = double(x)
    name = y.op.get_attr("f").name
    gr.RegisterGradient(name)(lambda op, grad: [grad * 100.0])
    (dx,) = gr.gradients(gr.reduce_sum(y), [x])
    np.testing.assert_allclose(gr.Session(graph).run(dx, {x: [1.0, 2.0]}), [100.0, 100.0])


def test_while_loop_gradient_is_numerically_right(graph):
    x = gr.placeholder(gr.float64, [3], name="x")
    _, y = gr.while_loop(lambda i, a: i < 4, lambda i, a: (i + 1, gr.tanh(a * 1.5 + x)), [0, x])
    assert compute_gradient_error(x, [3], y, [3], delta=1e-6) < 1e-7


def test_cond_nested_in_a_while_loop(graph):
    x = gr.placeholder(gr.float64, [3], name="x")

    def body(i, a):
        return i + 1, gr.cond(gr.reduce_sum(a) > 0.0, lambda: gr.tanh(a * 1.5), lambda: a * a + 1.0)
    _, y = gr.while_loop(lambda i, a: i < 3, body, [0, x])
    for value in ([0.1, -0.2, 0.3], [-0.5, -0.2, 0.3]):
        assert compute_gradient_error(x, [3], y, [3], x_init_value=np.array(value), delta=1e-6) < 1e-7


def test_nested_while_loops_gradient(graph):
    x = gr.placeholder(gr.float64, [2], name="x")

    def outer(i, a):
        _, inner = gr.while_loop(lambda j, b: j < i + 1, lambda j, b: (j + 1, gr.sin(b) * 1.2), [0, a])
        return i + 1, inner * a
    _, y = gr.while_loop(lambda i, a: i < 3, outer, [0, x])
    assert compute_gradient_error(x, [2], y, [2], x_init_value=np.array([0.3, -0.4]), delta=1e-6) < 1e-7


def test_lstm_style_loop_built_with_the_builders(graph):
    steps, batch, features, hidden = 4, 2, 3, 3
    rng = np.random.default_rng(0)
    inputs = gr.constant(rng.normal(size=(steps, batch, features)))
    w = gr.placeholder(gr.float64, [features, 4 * hidden], name="w")
    u = gr.placeholder(gr.float64, [hidden, 4 * hidden], name="u")
    b = gr.constant(np.zeros(4 * hidden))

    def cell(t, h, c):
        gates = gr.matmul(gr.gather(inputs, t), w) + gr.matmul(h, u) + b
        i, f, g, o = gr.split(gates, 4, axis=1)
        c_next = gr.sigmoid(f) * c + gr.sigmoid(i) * gr.tanh(g)
        return t + 1, gr.sigmoid(o) * gr.tanh(c_next), c_next
    zeros = gr.constant(np.zeros((batch, hidden)))
    _, h, c = gr.while_loop(lambda t, h, c: t < steps, cell, [0, zeros, zeros])
    loss = gr.reduce_sum(h * h) + gr.reduce_sum(c)
    w_value = rng.normal(0, 0.5, (features, 4 * hidden))
    u_value = rng.normal(0, 0.5, (hidden, 4 * hidden))
    error_w = compute_gradient_error(w, w_value.shape, loss, [], x_init_value=w_value, extra_feed_dict={u: u_value},
                                     delta=1e-6)
    error_u = compute_gradient_error(u, u_value.shape, loss, [], x_init_value=u_value, extra_feed_dict={w: w_value},
                                     delta=1e-6)
    assert error_w < 1e-7 and error_u < 1e-7


def test_functional_while_and_if_gradients(graph):
    x = gr.placeholder(gr.float64, [2], name="x")

    @gr.function
    def step(i, a):
        return i + 1, gr.sin(a) * a

    @gr.function
    def keep_going(i, a):
        return i < 3
    i0 = gr.constant(0)
    out = gr.raw_ops.StatelessWhile([i0, x], cond=_fn(graph, keep_going, [i0, x]),
                                    body=_fn(graph, step, [i0, x]))
    y = gr.reduce_sum(out[1])
    (dx,) = gr.gradients(y, [x])
    v = np.array([0.4, -0.7])

    def f(a):
        for _ in range(3):
            a = np.sin(a) * a
        return a.sum()
    numeric = np.array([(f(v + e) - f(v - e)) / 2e-6 for e in np.eye(2) * 1e-6])
    np.testing.assert_allclose(gr.Session(graph).run(dx, {x: v}), numeric, rtol=1e-6)


def _fn(graph, function, args):
    """The library name a gradreg.function was traced under for these argument types."""
    function(*args)
    return gr.proto.attr_value_pb2.NameAttrList(name=list(function._traces.values())[-1][0])


def test_loop_forward_values_are_released_as_backprop_pops_them(graph, monkeypatch):
    steps, size = 12, 200_000                     # 1.6 MB per float64 value
    x = gr.placeholder(gr.float64, [size], name="x")
    _, y = gr.while_loop(lambda i, a: i < steps, lambda i, a: (i + 1, gr.sin(a) * 1.01), [0, x])
    (dx,) = gr.gradients(gr.reduce_sum(y), [x])
    memory_at_pop = []
    table = get_registry().kernels("numpy")
    original = table._entries["StackPopV2"]

    def recording_factory(op, ctx):
        pop = original.value(op, ctx)

        def recorded(stack):
            memory_at_pop.append(tracemalloc.get_traced_memory()[0])
            return pop(stack)
        return recorded
    monkeypatch.setitem(table._entries, "StackPopV2", type(original)(recording_factory, original.plugin))
    session = gr.Session(graph)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        value = session.run(dx, {x: np.full(size, 0.3)})
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    pops = memory_at_pop
    assert len(pops) % steps == 0          # one pop per saved value per iteration
    one_value = size * 8
    # Each backward iteration frees the forward value it popped: memory falls by about one
    # value per iteration, and nothing the loop accumulated outlives the run.
    assert pops[0] - pops[-1] > (steps - 3) * one_value
    assert after - before < 2 * one_value + value.nbytes


def test_second_order_gradient_of_a_while_loop_is_refused(graph):
    # The backward loop reads forward values from stacks, whose pops have no gradient:
    # differentiating it again would drop terms silently, so (as TensorFlow) it is an error
    # naming the loop — also when the gradient graph was saved and loaded again.
    x = gr.placeholder(gr.float64, [2, 3], name="x")
    w = gr.placeholder(gr.float64, [3, 3], name="w")
    _, h = gr.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, gr.tanh(gr.matmul(a, w))), [0, x])
    (dw,) = gr.gradients(gr.reduce_sum(h * h), [w])
    with pytest.raises(gr.errors.GradientError, match="while_context_grad.*second-order gradients of while loops"):
        gr.gradients(gr.reduce_sum(dw * dw), [w])
    loaded = gr.import_graph_def(graph.as_graph_def())
    with loaded.as_default():
        dw2, w2 = loaded.get_tensor_by_name(dw.name), loaded.get_tensor_by_name("w:0")
        with pytest.raises(gr.errors.GradientError, match="second-order gradients of while loops"):
            gr.gradients(gr.reduce_sum(dw2 * dw2), [w2])
