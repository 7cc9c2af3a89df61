"""Each gradient rule's nodes written as one call of a model-local function
(gradreg_plugins.onnx.local_functions): the MLP's gradient model reads as its forward and one
``<Op>Grad`` per op; onnxruntime and gradreg itself run the written model to PyTorch's gradients;
a group a path leaves and re-enters stays as nodes; two groups that would feed each other both
ways are not both gathered."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.inliner import inline_local_functions  # noqa: E402
from test_onnx_opsets import assert_torchs_gradients, gradient_graph, run_in_onnxruntime  # noqa: E402

import gradreg as gr  # noqa: E402
from gradreg_plugins.onnx.format import graph_to_model  # noqa: E402
from gradreg_plugins.onnx.local_functions import GRADIENTS_DOMAIN, gather_groups  # noqa: E402


@pytest.fixture(scope="module")
def mlp():
    return gradient_graph("mlp_gelu_opset20")


def test_the_mlps_gradient_model_is_its_forward_and_one_call_per_ops_gradient(mlp):
    _, graph, outputs = mlp
    model = graph_to_model(graph, outputs)
    calls = [(n.domain, n.op_type) for n in model.graph.node if n.domain == GRADIENTS_DOMAIN]
    forward = [n.op_type for n in model.graph.node if n.domain == ""]
    # the last Gemm's output is not needed: its gradient needs only its inputs
    assert forward == ["Gemm", "LayerNormalization", "Gelu", "Gemm", "LayerNormalization", "Gelu"]
    assert sorted(op for _, op in calls) == ["GeluGrad", "GeluGrad_2", "GemmGrad", "GemmGrad_2", "GemmGrad_2",
                                             "LayerNormalizationGrad", "LayerNormalizationGrad"]
    # the two LayerNormalizations' gradients share one body; Gelu's exact and tanh forms differ, and the
    # last Gemm's (its seed a constant input, no input gradient) differs from the two others
    assert sorted(f.name for f in model.functions) == ["GeluGrad", "GeluGrad_2", "GemmGrad", "GemmGrad_2",
                                                       "LayerNormalizationGrad"]
    layer_norm = next(f for f in model.functions if f.name == "LayerNormalizationGrad")
    assert [n.op_type for n in layer_norm.node].count("ReduceMean") == 2


@pytest.mark.parametrize("opset", [17, 28])
def test_gradreg_reads_the_written_gradient_model_back_and_computes_torchs_gradients(mlp, opset, tmp_path):
    case, graph, outputs = mlp
    model = graph_to_model(graph, outputs, opset=opset)
    path = tmp_path / "grad.onnx"
    onnx.save(model, str(path))
    loaded = gr.load_graph(str(path))
    names = [f"d_{i}" for i in range(len(outputs))]
    values = gr.Session(loaded).run(names, case.feeds())
    assert_torchs_gradients(values, case)
    assert_torchs_gradients(run_in_onnxruntime(model, case), case)


@pytest.mark.parametrize("name", ["resnet_opset18", "mobilenetv2_opset18", "unet_opset17", "transformer_opset17"])
def test_other_gradient_models_gather_their_rules_and_run_to_torchs_gradients(name):
    case, graph, outputs = gradient_graph(name)
    model = graph_to_model(graph, outputs)
    flat = inline_local_functions(model)
    assert len(model.graph.node) < len(flat.graph.node) and model.functions
    assert_torchs_gradients(run_in_onnxruntime(model, case), case)


def model_of(nodes, initializers=()):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=[numpy_helper.from_array(v, n)
                                                                  for n, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def gathered(model, scopes):
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    gather_groups(copy, scopes)
    onnx.checker.check_model(copy, full_check=True)
    return copy


def run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2


def test_a_rules_nodes_become_one_call_whose_body_holds_its_coefficients():
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"], name="f_grad/Mul"),
             helper.make_node("Add", ["a", "x"], ["b"], name="f_grad/Add"),
             helper.make_node("Neg", ["b"], ["y"], name="g")]
    model = model_of(nodes, [("two", np.float32(2))])
    small = gathered(model, {"f_grad": "F"})
    assert [(n.domain, n.op_type) for n in small.graph.node] == [(GRADIENTS_DOMAIN, "FGrad"), ("", "Neg")]
    (function,) = small.functions
    assert [n.op_type for n in function.node] == ["Constant", "Mul", "Add"] and list(function.input) == ["in0"]
    assert not small.graph.initializer
    np.testing.assert_array_equal(run(small, X), -3 * X)


def test_a_group_that_a_path_leaves_and_reenters_stays_as_nodes():
    nodes = [helper.make_node("Neg", ["x"], ["a"], name="f_grad/Neg"),
             helper.make_node("Abs", ["a"], ["b"], name="outside"),
             helper.make_node("Add", ["a", "b"], ["y"], name="f_grad/Add")]
    model = model_of(nodes)
    small = gathered(model, {"f_grad": "F"})
    assert [n.op_type for n in small.graph.node] == ["Neg", "Abs", "Add"] and not small.functions
    np.testing.assert_array_equal(run(small, X), -X + np.abs(X))


def test_two_groups_that_would_feed_each_other_both_ways_are_not_both_gathered():
    # f's first node feeds g's second, g's first feeds f's second: each group alone is convex
    nodes = [helper.make_node("Neg", ["x"], ["f1"], name="f_grad/Neg"),
             helper.make_node("Abs", ["x"], ["g1"], name="g_grad/Abs"),
             helper.make_node("Add", ["f1", "x"], ["g2"], name="g_grad/Add"),
             helper.make_node("Mul", ["g1", "x"], ["f2"], name="f_grad/Mul"),
             helper.make_node("Sub", ["f2", "g2"], ["y"], name="h")]
    model = model_of(nodes)
    small = gathered(model, {"f_grad": "F", "g_grad": "G"})
    assert len(small.functions) == 1 and len(small.graph.node) == 4
    np.testing.assert_array_equal(run(small, X), np.abs(X) * X - (-X + X))


def test_flat_writes_no_functions_and_the_same_values(mlp, tmp_path):
    case, graph, outputs = mlp
    gr.save_onnx(graph, tmp_path / "flat.onnx", outputs, opset=17, flat=True)
    flat = onnx.load(str(tmp_path / "flat.onnx"))
    assert not flat.functions and len(flat.graph.node) == 72     # the forward's Gelu bodies and every rule's nodes
    assert_torchs_gradients(run_in_onnxruntime(flat, case), case)
