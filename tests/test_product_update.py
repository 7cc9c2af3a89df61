"""Gradient descent whose delta is a MatMul accumulates the product into the variable by BLAS
(gradreg_plugins.training.product_update, an Absorbing kernel): the plan drops the MatMul
when the update is its only use, the values are the separate product's and update's, and
anything the BLAS call cannot take goes through the usual kernels."""
from __future__ import annotations

import numpy as np
import pytest

import gradreg as gr
from gradreg.errors import GradregError
from gradreg_plugins.math import blas

pytestmark = pytest.mark.skipif(not blas.available(np.dtype(np.float32)),
                                reason="NumPy's BLAS has no CBLAS gemm gradreg can find")

BACKENDS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("numba") is None, reason="numba not installed"))]


def calls(session, fetches, feeds=()):
    return {op.name for op in session.plan_for(fetches, list(feeds))._compiled.line_ops.values()}


def build(dtype, ta, tb, resource=True, through_identity=False):
    rng = np.random.default_rng(0)
    graph = gr.Graph()
    with graph.as_default():
        t = gr.as_dtype(dtype)
        w0 = rng.standard_normal((6, 4)).astype(dtype)
        w = gr.Variable(w0, name="w", use_resource=resource)
        a = gr.placeholder(t, [9, 6] if ta else [6, 9], name="a")
        b = gr.placeholder(t, [4, 9] if tb else [9, 4], name="b")
        delta = gr.matmul(a, b, transpose_a=ta, transpose_b=tb, name="product")
        if through_identity:     # as TensorFlow's gradients hand a weight gradient on (tf.tuple)
            delta = gr.identity(delta, name="tuple/control_dependency")
        lr = gr.constant(np.asarray(0.05, dtype), name="lr")
        name = "ResourceApplyGradientDescent" if resource else "ApplyGradientDescent"
        train = gr.apply_op(name, w.handle, lr, delta, name="update")
        init = gr.global_variables_initializer()
    av = rng.standard_normal((9, 6) if ta else (6, 9)).astype(dtype)
    bv = rng.standard_normal((4, 9) if tb else (9, 4)).astype(dtype)
    expected = w0 - np.asarray(0.05, dtype) * ((av.T if ta else av) @ (bv.T if tb else bv))
    return graph, w, a, b, delta, train, init, av, bv, expected


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("resource", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_the_product_is_accumulated_into_the_variable(backend, resource, dtype, ta, tb):
    graph, w, a, b, _, train, init, av, bv, expected = build(dtype, ta, tb, resource, through_identity=ta)
    session = gr.Session(graph, backend=backend)
    session.run(init)
    target = train.op if isinstance(train, gr.Tensor) else train
    ran = calls(session, [target], [a, b])
    assert "update" in ran and "product" not in ran
    session.run(target, {a: av, b: bv})
    got = session.run(w)
    assert got.dtype == dtype
    tolerance = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(got, expected, **tolerance)


def test_the_update_is_in_place():
    graph, w, a, b, _, train, init, av, bv, expected = build(np.float32, True, False)
    session = gr.Session(graph)
    session.run(init)
    state = session.resources["variables"][w.op.name]
    address = state.value.ctypes.data    # no reference kept: one would make the update copy
    session.run(train, {a: av, b: bv})
    assert state.value.ctypes.data == address
    np.testing.assert_allclose(session.run(w), expected, rtol=1e-5, atol=1e-6)


def test_a_fetched_product_is_computed_and_the_update_still_right():
    graph, w, a, b, delta, train, init, av, bv, expected = build(np.float32, False, False)
    session = gr.Session(graph)
    session.run(init)
    assert "product" in calls(session, [delta, train], [a, b])
    product, _ = session.run([delta, train], {a: av, b: bv})
    np.testing.assert_allclose(product, av @ bv, rtol=1e-5)
    np.testing.assert_allclose(session.run(w), expected, rtol=1e-5, atol=1e-6)


def test_an_update_reading_its_own_variable_sees_the_old_value():
    # w -= lr * (w^T-free) product of w's own value: BLAS must not read what it writes
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal((5, 5)).astype(np.float32)
    graph = gr.Graph()
    with graph.as_default():
        w = gr.Variable(w0, name="w")
        x = gr.placeholder(gr.float32, [5, 5], name="x")
        delta = gr.matmul(w.read_value(), x, name="product")
        train = gr.apply_op("ResourceApplyGradientDescent", w.handle, gr.constant(np.float32(0.5)), delta)
        init = gr.global_variables_initializer()
    session = gr.Session(graph)
    session.run(init)
    xv = rng.standard_normal((5, 5)).astype(np.float32)
    session.run(train, {x: xv})
    np.testing.assert_allclose(session.run(w), w0 - 0.5 * (w0 @ xv), rtol=1e-5, atol=1e-6)


def test_operands_blas_cannot_take_go_through_the_usual_kernels():
    graph, w, a, b, _, train, init, av, bv, expected = build(np.float32, False, False)
    session = gr.Session(graph)
    session.run(init)
    strided = np.zeros((6, 18), np.float32)
    strided[:, ::2] = av          # neither C- nor F-contiguous
    session.run(train, {a: strided[:, ::2], b: bv})
    np.testing.assert_allclose(session.run(w), expected, rtol=1e-5, atol=1e-6)


def test_a_mismatched_product_fails_naming_the_node():
    graph = gr.Graph()
    with graph.as_default():
        w = gr.Variable(np.zeros((3, 3), np.float32), name="w")
        a = gr.placeholder(gr.float32, None, name="a")
        b = gr.placeholder(gr.float32, None, name="b")
        train = gr.apply_op("ResourceApplyGradientDescent", w.handle, gr.constant(np.float32(0.1)),
                            gr.matmul(a, b, name="product"), name="update")
        init = gr.global_variables_initializer()
    session = gr.Session(graph)
    session.run(init)
    with pytest.raises(GradregError, match="'product'"):
        session.run(train, {a: np.ones((3, 2), np.float32), b: np.ones((3, 3), np.float32)})
    with pytest.raises(GradregError, match="'update'"):     # a (2, 3) delta for a (3, 3) variable
        session.run(train, {a: np.ones((2, 3), np.float32), b: np.ones((3, 3), np.float32)})
    np.testing.assert_array_equal(session.run(w), np.zeros((3, 3), np.float32))   # nothing half-written
