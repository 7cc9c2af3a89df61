"""The TPU collectives CrossReplicaSum and AllToAll on the one replica gradreg runs, and
_EagerConst (the array family's replicas module), against the graphs TensorFlow built
(tests/data/replicas, see its make_reference.py). TensorFlow has no CPU kernel for the
collectives: it cannot run them, but it builds their gradient graphs, which gradreg runs; gradreg's
own gradients must be those, and the collectives give their input back."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

import gradreg as gr
from gradreg.errors import ExecutionError, GradientError

DATA = pathlib.Path(__file__).parent / "data" / "replicas"
RNG = np.random.default_rng(7)
FEEDS = {"x:0": RNG.normal(size=(2, 3)), "y:0": RNG.normal(size=(4, 2)).astype(np.float32),
         "dsum:0": RNG.normal(size=(2, 3)), "dexchanged:0": RNG.normal(size=(4, 2)).astype(np.float32)}


def _expected_gradients():
    x, y = FEEDS["x:0"], FEEDS["y:0"]
    return [2 * x * FEEDS["dsum:0"], (1 - np.tanh(y) ** 2) * FEEDS["dexchanged:0"]]


def test_one_replica_gets_its_input_back():
    graph = gr.load_graph(DATA / "forward.pb")
    total, exchanged = gr.Session(graph).run(["sum:0", "exchanged:0"], {k: FEEDS[k] for k in ("x:0", "y:0")})
    np.testing.assert_allclose(total, FEEDS["x:0"] ** 2, rtol=1e-15)
    np.testing.assert_allclose(exchanged, np.tanh(FEEDS["y:0"]), rtol=1e-6)


def test_tensorflows_gradient_graph_runs_in_gradreg():
    graph = gr.load_graph(DATA / "tf_grad.pb")
    dx, dy = gr.Session(graph).run(["gradients/AddN:0",
                                    "gradients/Tanh_grad/TanhGrad:0"], FEEDS)
    expected = _expected_gradients()
    np.testing.assert_allclose(dx, expected[0], rtol=1e-12)
    np.testing.assert_allclose(dy, expected[1], rtol=1e-6)


def test_gradreg_differentiates_the_collectives_as_tensorflow_does():
    """The same values, and the same collectives in the gradient graph: a cross-replica sum of the
    gradient, an all-to-all with the split and concat dimensions exchanged."""
    graph = gr.load_graph(DATA / "forward.pb")
    with graph.as_default():
        ys = [graph.get_tensor("sum:0"), graph.get_tensor("exchanged:0")]
        cotangents = [gr.placeholder(gr.float64, [2, 3], name="dsum"), gr.placeholder(gr.float32, [4, 2],
                                                                                    name="dexchanged")]
        grads = gr.gradients(ys, [graph.get_tensor("x:0"), graph.get_tensor("y:0")], grad_ys=cotangents)
    for got, expected in zip(gr.Session(graph).run(grads, FEEDS), _expected_gradients()):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    exchange = next(op for op in graph.get_operations() if op.type == "AllToAll" and "gradients" in op.name)
    assert (exchange.get_attr("concat_dimension"), exchange.get_attr("split_dimension")) == (0, 1)
    assert any(op.type == "CrossReplicaSum" and "gradients" in op.name for op in graph.get_operations())


@pytest.mark.parametrize("groups", [[[0, 1]], [[1, 0], [2, 3]]])
def test_a_group_of_several_replicas_is_an_error_naming_the_node(groups):
    with gr.Graph().as_default() as graph:
        total = gr.raw_ops.CrossReplicaSum(input=np.ones(3), group_assignment=np.array(groups, np.int32),
                                           name="sum_over_group")
    with pytest.raises(ExecutionError, match="sum_over_group.*gradreg runs one replica"):
        gr.Session(graph).run(total)


def test_all_to_all_into_several_splits_is_an_error():
    with gr.Graph().as_default() as graph:
        out = gr.raw_ops.AllToAll(input=np.ones((4, 2)), group_assignment=np.array([[0]], np.int32),
                                  concat_dimension=1, split_dimension=0, split_count=2, name="exchange")
    assert out.shape.as_list() == [2, 4]
    with pytest.raises(ExecutionError, match="exchange.*gradreg runs one replica"):
        gr.Session(graph).run(out)


def test_eager_const_is_its_input_and_refuses_gradients():
    graph = gr.load_graph(DATA / "forward.pb")
    expected = np.load(DATA / "values.npz")["eager"]
    np.testing.assert_array_equal(gr.Session(graph).run("eager:0"), expected)
    with graph.as_default():
        eager = graph.get_tensor("eager:0")
        with pytest.raises(GradientError, match="eager.*_EagerConst should never meet gradients"):
            gr.gradients(eager * 2.0, [eager.op.inputs[0]])
