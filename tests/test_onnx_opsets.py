"""Gradient models written at older ai.onnx opsets (issue 32, point 5): ``save_onnx(..., opset=N)``
for every N from 17 to the family's, checked by onnx's full checker and run by onnxruntime to
PyTorch's gradients (tests/data/onnx_models).

Below the opset that introduced an op (Gelu 20), the op is written as its schema's function body;
ops that only gained types since N are written as they are (onnx's converter has no down adapter
for most of them); reductions whose axes PyTorch computes from constants and Splits into
``num_outputs`` parts get explicit axes and sizes below opset 18.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx.inliner import inline_local_functions  # noqa: E402
from onnx_models import load_case  # noqa: E402

import gradreg as gr  # noqa: E402
from gradreg.errors import GraphError  # noqa: E402
from gradreg_plugins.onnx.format import graph_to_model, save_onnx  # noqa: E402
from gradreg_plugins.onnx.schemas import OPSET_VERSIONS  # noqa: E402

FAMILY_OPSET = OPSET_VERSIONS[""]
OLDEST = 17


def gradient_graph(name: str):
    """The case's graph with the gradients of sum(y * cotangent) w.r.t. its xs, as ONNX outputs."""
    case = load_case(name)
    graph = gr.load_graph(str(case.model_path))
    ys = [graph.get_tensor(n) for n in case.meta["outputs"]]
    xs = [graph.get_tensor(n) for n in case.meta["xs"]]
    with graph.as_default():
        seeds = [gr.constant(case.cotangents()[n]) for n in case.meta["outputs"]]
    grads = gr.gradients(ys, xs, grad_ys=seeds)
    return case, graph, {f"d_{i}": g for i, g in enumerate(grads)}


def run_in_onnxruntime(model, case) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: case.feeds()[i.name] for i in session.get_inputs()}
    return session.run([f"d_{i}" for i in range(len(case.meta["xs"]))], feeds)


def assert_torchs_gradients(values, case) -> None:
    for name, value in zip(case.meta["xs"], values):
        expected = np.asarray(case.gradients()[name], dtype=np.float64)
        atol = 1e-4 * max(float(np.abs(expected).max()), 1.0)
        np.testing.assert_allclose(value, expected, rtol=2e-4, atol=atol, err_msg=f"{case.name}: d/d{name}")


def ai_onnx(model) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


@pytest.fixture(scope="module")
def mlp():
    return gradient_graph("mlp_gelu_opset20")   # Gemm, LayerNormalization, Gelu: the 7-node MLP


@pytest.mark.parametrize("opset", range(OLDEST, FAMILY_OPSET + 1))
def test_the_mlps_gradient_model_at_every_opset_passes_the_checker_and_runs_in_onnxruntime(mlp, opset):
    case, graph, outputs = mlp
    model = graph_to_model(graph, outputs, opset=opset)     # onnx.checker (full) ran on it
    assert ai_onnx(model) == opset
    assert model.ir_version == onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    if opset < 20:    # Gelu did not exist: written as its function body (a model-local function)
        nodes = [n for body in [model.graph, *model.functions] for n in body.node]
        assert ("", "Gelu") not in {(n.domain, n.op_type) for n in nodes}
        assert {(f.domain, f.name) for f in model.functions} >= {("gradreg.expanded", "Gelu")}
    assert_torchs_gradients(run_in_onnxruntime(model, case), case)


# The fewest ai.onnx nodes each op's gradient takes (ai.onnx has no LayerNormalizationGrad or GeluGrad; those
# are com.microsoft training ops that onnxruntime's CPU build lacks). Gemm: dA, dB (a Gemm each, the trans
# flags doing the transposes), dC (one ReduceSum). LayerNormalization: the statistics (one LayerNormalization
# of scale 1), dbias (ReduceSum), dscale (Mul, ReduceSum), dx = r (gn - mean(gn) - n mean(gn n)) with gn = g scale
# (Mul, 2 ReduceMean, Mul, 2 Sub, 2 Mul). Gelu's tanh form: v = 2 sqrt(2/pi) (x + 0.044715 x^3) and v' (x^2, 2 Mul,
# 2 Add, 1 Mul), s = sigmoid(v), g s (1 + x (1 - s) v') (Sub, 2 Mul, Add, 2 Mul); its erf form takes 9.
BACKWARD_NODES = {"Gemm": 3, "LayerNormalization": 12, "Gelu": 13}
PLUMBING = {"Shape", "Size", "Reshape", "Expand", "Transpose", "Identity", "Constant", "CastLike", "Cast",
            "ConstantOfShape", "Unsqueeze", "Squeeze"}


@pytest.mark.parametrize("opset", [OLDEST, 19, 20, FAMILY_OPSET])
def test_the_mlps_gradient_model_is_its_forward_and_each_ops_closed_form_gradient_with_no_plumbing(mlp, opset):
    """Issue 32: no more than 3x the forward's nodes. The main graph holds the forward and one call of a
    model-local function per op's gradient (gradreg_plugins.onnx.local_functions); inlined, the model is
    the forward and each op's closed-form gradient, with no plumbing either way."""
    case, graph, outputs = mlp
    torch_forward = onnx.load(case.model_path).graph.node
    model = graph_to_model(graph, outputs, opset=opset)
    assert len(model.graph.node) <= 3 * len(torch_forward)
    forward = graph_to_model(graph, opset=opset)        # below 20, Gelu a call of its (folded) function body
    assert len(forward.graph.node) == len(torch_forward)
    flat = [n for n in inline_local_functions(model).graph.node if n.op_type != "Constant"]   # bodies' constants
    flat_forward = [n for n in inline_local_functions(forward).graph.node if n.op_type != "Constant"]
    assert len(flat) <= len(flat_forward) + sum(BACKWARD_NODES[n.op_type] for n in torch_forward)
    assert not PLUMBING & {n.op_type for n in model.graph.node}
    assert not PLUMBING & {n.op_type for n in flat}


@pytest.mark.parametrize("name", ["cond_opset18", "loop_opset13", "resnet_opset18", "mobilenetv2_opset18",
                                  "transformer_opset17"])
def test_gradient_models_of_control_flow_reductions_and_splits_convert_to_opset_17(name):
    case, graph, outputs = gradient_graph(name)
    model = graph_to_model(graph, outputs, opset=OLDEST)
    assert ai_onnx(model) == OLDEST and model.ir_version == 8
    assert_torchs_gradients(run_in_onnxruntime(model, case), case)


def test_save_onnx_writes_the_opset_asked_for(mlp, tmp_path):
    case, graph, outputs = mlp
    save_onnx(graph, tmp_path / "grad.onnx", outputs, opset=18)
    written = onnx.load(str(tmp_path / "grad.onnx"))
    onnx.checker.check_model(written, full_check=True)
    assert ai_onnx(written) == 18 and written.ir_version == 8


def test_an_opset_newer_than_the_familys_or_one_the_converter_cannot_reach_is_a_graph_error(mlp):
    _, graph, outputs = mlp
    with pytest.raises(GraphError, match=f"opset {FAMILY_OPSET + 1}: gradreg's onnx op family implements "
                                         f"opset {FAMILY_OPSET}"):
        graph_to_model(graph, outputs, opset=FAMILY_OPSET + 1)
    with pytest.raises(GraphError, match="cannot convert the written model to opset 1:"):
        graph_to_model(graph, outputs, opset=1)


def test_the_facade_and_the_command_line_take_the_opset(mlp, tmp_path, capsys):
    from gradreg.cli import main
    case, graph, outputs = mlp
    gr.save_onnx(graph, tmp_path / "facade.onnx", outputs, opset=19)
    assert ai_onnx(onnx.load(str(tmp_path / "facade.onnx"))) == 19
    model, out = str(case.model_path), str(tmp_path / "grad.onnx")
    assert main(["grad", model, "--ys", case.meta["outputs"][0], "--xs", "fc1.weight", "-o", out, "--opset", "17"]) == 0
    written = onnx.load(out)
    onnx.checker.check_model(written, full_check=True)
    assert ai_onnx(written) == 17 and written.ir_version == 8
    assert main(["convert", model, str(tmp_path / "mlp.onnx"), "--opset", "18"]) == 0
    assert ai_onnx(onnx.load(str(tmp_path / "mlp.onnx"))) == 18
    capsys.readouterr()
    with pytest.raises(SystemExit) as usage:
        main(["convert", model, str(tmp_path / "mlp.pbtxt"), "--opset", "18"])
    assert usage.value.code == 2
    assert "--opset applies to an ONNX output" in capsys.readouterr().err


def test_the_command_line_writes_flat_gradient_models(mlp, tmp_path, capsys):
    from gradreg.cli import main
    case, _, _ = mlp
    model, y = str(case.model_path), case.meta["outputs"][0]
    grouped, flat = str(tmp_path / "grouped.onnx"), str(tmp_path / "flat.onnx")
    assert main(["grad", model, "--ys", y, "--xs", "fc1.weight", "-o", grouped, "--opset", "17"]) == 0
    assert main(["grad", model, "--ys", y, "--xs", "fc1.weight", "-o", flat, "--flat", "--opset", "17"]) == 0
    grouped_model, flat_model = onnx.load(grouped), onnx.load(flat)
    assert len(grouped_model.functions) > 0 and len(flat_model.functions) == 0
    onnx.checker.check_model(flat_model, full_check=True)
    assert ai_onnx(flat_model) == 17
    # the same gradient: every node of the grouped model's function bodies is in the flat graph
    inlined = onnx.inliner.inline_local_functions(grouped_model)
    assert sorted(n.op_type for n in flat_model.graph.node if n.op_type != "Constant") == \
        sorted(n.op_type for n in inlined.graph.node if n.op_type != "Constant")
    capsys.readouterr()
    with pytest.raises(SystemExit) as usage:
        main(["convert", model, str(tmp_path / "mlp.pbtxt"), "--flat"])
    assert usage.value.code == 2 and "--flat applies to an ONNX output" in capsys.readouterr().err


def test_a_format_without_options_refuses_one(mlp, tmp_path):
    _, graph, _ = mlp
    with pytest.raises(gr.errors.GradregError, match="the graphdef format takes no option opset"):
        gr.save_graph(graph, str(tmp_path / "g.pb"), opset=17)
