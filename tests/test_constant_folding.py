"""Pure nodes whose inputs are all constants are computed once, when the plan is compiled
(gradreg.runtime.plan.Emitter.fold), as TensorFlow's constant folding does; stateful nodes,
large results, kernels that fail or warn, and nodes under a v1 conditional still run."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import gradreg as gr
from gradreg.errors import GradregError
from gradreg.runtime import plan as plan_module


def ran(session, fetches, feeds=()):
    """The names of the nodes the plan calls a kernel for."""
    return {op.name for op in session.plan_for(fetches, list(feeds))._compiled.line_ops.values()}


@pytest.fixture(params=["numpy", "numba"])
def backend(request):
    if request.param == "numba":
        pytest.importorskip("numba")
    return request.param


def test_a_mean_gradients_seed_is_computed_when_the_plan_is_compiled(graph, backend):
    # TensorFlow's gradient of a Mean: Fill(grad_ys) -> Reshape -> Tile -> RealDiv, all of
    # constants once the shapes are static
    x = gr.placeholder(gr.float32, [4, 3], name="x")
    loss = gr.reduce_mean(gr.square(x), name="loss")
    (dx,) = gr.gradients(loss, [x])
    session = gr.Session(graph, backend=backend)
    calls = ran(session, [dx], [x])
    seed = {op.name for op in graph.get_operations()
            if op.type in ("Fill", "Tile", "RealDiv", "Reshape") and "loss_grad" in op.name}
    assert seed and not seed & calls
    value = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_allclose(session.run(dx, {x: value}), 2 * value / 12, rtol=1e-6)


def test_folded_values_are_the_kernels_values(graph):
    a = gr.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    b = gr.transpose(a) * 2.0 + gr.range(3, dtype=gr.float32)[:, None]
    folded = gr.reduce_sum(b, axis=0, name="folded")
    session = gr.Session(graph)
    assert ran(session, [folded]) == set()
    expected = (np.arange(6, dtype=np.float32).reshape(2, 3).T * 2 + np.arange(3)[:, None]).sum(axis=0)
    np.testing.assert_array_equal(session.run(folded), expected)


def test_a_fetched_folded_value_is_the_callers_to_change(graph):
    c = gr.fill([3], 2.0, name="c")
    session = gr.Session(graph)
    first = session.run(c)
    first += 1.0        # the plan's own constant is not touched
    np.testing.assert_array_equal(session.run(c), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(first, [3.0, 3.0, 3.0])


def test_stateful_nodes_run_every_time(graph):
    r = gr.random.uniform([4], seed=1, name="r")
    doubled = gr.multiply(r, 2.0, name="doubled")
    session = gr.Session(graph)
    assert r.op.name == "r/RandomUniform"    # TensorFlow's name: [0, 1) values need no arithmetic
    assert {"r/RandomUniform", "doubled"} <= ran(session, [doubled])
    assert not np.array_equal(session.run(doubled), session.run(doubled))


def test_results_over_the_size_limit_are_computed_per_run(graph, monkeypatch):
    monkeypatch.setattr(plan_module, "FOLD_BYTES", 64)
    small = gr.fill([4], 1.0, name="small")                 # 16 bytes
    large = gr.fill([32], 1.0, name="large")                # 128 bytes
    session = gr.Session(graph)
    calls = ran(session, [small, large])
    assert "small" not in calls and "large" in calls
    np.testing.assert_array_equal(session.run(large), np.ones(32, np.float32))


def test_a_failing_constant_node_fails_when_run_naming_it(graph):
    bad = gr.gather(gr.constant(np.arange(3.0)), [5], name="bad")     # index out of range
    session = gr.Session(graph)
    assert "bad" in ran(session, [bad])      # compiling does not fail: the node may never run
    with pytest.raises(GradregError, match="bad"):
        session.run(bad)


def test_a_warning_is_left_to_each_run(graph):
    ratio = gr.divide(gr.constant(1.0), gr.constant(0.0), name="ratio")
    session = gr.Session(graph)
    assert "ratio" in ran(session, [ratio])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert session.run(ratio) == np.inf


def test_nodes_under_a_v1_conditional_run_in_the_branch_taken(graph):
    # gradreg's cond is TensorFlow's v1 cond (Switch/Merge): those plans are not folded
    p = gr.placeholder(gr.bool, [], name="p")
    out = gr.cond(p, lambda: gr.fill([2], 3.0), lambda: gr.fill([2], 4.0))
    session = gr.Session(graph)
    np.testing.assert_array_equal(session.run(out, {p: True}), [3.0, 3.0])
    np.testing.assert_array_equal(session.run(out, {p: False}), [4.0, 4.0])
