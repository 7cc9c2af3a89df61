"""The outputs of a model, the same in every command and format (issue 32, point 7): ``inspect``
lists every declared output with symbolic dimensions by name and the file's facts, ``run`` fetches
them all by default, and a tensor prints under one name in ``inspect``, ``run`` and ``grad``."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
from onnx_models import load_case

import gradreg as gr
from gradreg import cli

DATA = pathlib.Path(__file__).resolve().parent / "data"


def run_cli(argv, capsys) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = int(exc.code)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def resnet_with_loss(tmp_path_factory) -> pathlib.Path:
    """The ResNet of tests/data/onnx_models with a loss after its logits: it declares the outputs
    [logits, loss], and logits is also consumed (by the loss), as the issue's ResNet18 was."""
    onnx = pytest.importorskip("onnx")
    from onnx import helper
    model = onnx.load(str(load_case("resnet_opset18").model_path))
    model.graph.node.extend([helper.make_node("LogSoftmax", ["logits"], ["log_probs"], axis=1),
                             helper.make_node("ReduceMean", ["log_probs"], ["mean_log_prob"], keepdims=0),
                             helper.make_node("Neg", ["mean_log_prob"], ["loss"])])
    model.graph.output.append(helper.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, []))
    path = tmp_path_factory.mktemp("resnet") / "resnet_loss.onnx"
    onnx.save(model, str(path))
    return path


def test_inspect_lists_every_declared_output_of_an_onnx_model(resnet_with_loss, capsys):
    code, out, _ = run_cli(["inspect", str(resnet_with_loss)], capsys)
    assert code == 0
    outputs = out.split("outputs:\n")[1].split("op types:")[0].splitlines()
    assert outputs == ["  logits  float32 [2, 10]", "  loss  float32 []"]
    code, out, _ = run_cli(["inspect", str(resnet_with_loss), "--json"], capsys)
    signature = json.loads(out)["signature"]
    assert [o["name"] for o in signature["outputs"]] == ["logits", "loss"]
    assert signature["inputs"] == [{"name": "x", "dtype": "float32", "shape": [2, 3, 32, 32], "tensor": "x:0"}]


def test_inspect_keeps_symbolic_dimensions_and_shows_the_files_facts(capsys):
    path = load_case("dynamic_batch_opset18").model_path
    code, out, _ = run_cli(["inspect", str(path)], capsys)
    assert code == 0
    assert "  x  float32 [batch, 3, 8, 8]" in out and "  logits  float32 [batch, 5]" in out
    assert "?" not in out.split("op types:")[0]
    facts = out.split("model: ONNX\n")[1].split("nodes:")[0]
    assert "  producer: pytorch 2.13.0" in facts and "  IR version: 10" in facts and "  opsets: ai.onnx 18" in facts
    code, out, _ = run_cli(["inspect", str(path), "--json"], capsys)
    summary = json.loads(out)
    assert summary["signature"]["outputs"][0]["shape"] == ["batch", 5]
    assert summary["model"]["format"] == "onnx" and summary["model"]["IR version"] == "10"


def test_run_fetches_every_declared_output_by_default_as_onnxruntime_computes_them(resnet_with_loss, capsys,
                                                                                 tmp_path):
    ort = pytest.importorskip("onnxruntime")
    case = load_case("resnet_opset18")
    feeds = case.feeds()
    code, out, err = run_cli(["run", str(resnet_with_loss), "--feed", str(case.path / "inputs.npz"), "--json",
                              "-o", str(tmp_path / "out.npz")], capsys)
    assert code == 0, err
    values = {o["name"]: np.asarray(o["values"], np.float32) for o in json.loads(out)["outputs"]}
    assert list(values) == ["logits", "loss"]
    session = ort.InferenceSession(str(resnet_with_loss), providers=["CPUExecutionProvider"])
    logits, loss = session.run(["logits", "loss"], feeds)
    np.testing.assert_allclose(values["logits"], logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(values["loss"], loss, rtol=1e-5)
    with np.load(tmp_path / "out.npz") as saved:
        assert sorted(saved.files) == ["logits", "loss"]


def test_a_tensor_prints_under_one_name_in_inspect_run_and_grad(resnet_with_loss, capsys):
    case = load_case("resnet_opset18")
    inputs = str(case.path / "inputs.npz")
    _, inspected, _ = run_cli(["inspect", str(resnet_with_loss), "--json"], capsys)
    names = {o["name"] for o in json.loads(inspected)["signature"]["outputs"]}
    _, ran, _ = run_cli(["run", str(resnet_with_loss), "--feed", inputs, "--fetch", "loss", "--json"], capsys)
    _, text, _ = run_cli(["run", str(resnet_with_loss), "--feed", inputs, "--fetch", "loss"], capsys)
    _, graded, _ = run_cli(["grad", str(resnet_with_loss), "--feed", inputs, "--ys", "loss", "--xs", "x,fc.weight",
                            "--json"], capsys)
    document = json.loads(graded)
    assert json.loads(ran)["outputs"][0]["name"] == "loss" and "loss" in names
    assert text.startswith("loss  float32 []  = ")
    assert [v["name"] for v in document["values"]][0] == "loss"
    assert set(document["gradients"]) == {"x", "fc.weight"}


def test_run_of_a_graphdef_defaults_to_the_outputs_inspect_lists(tmp_path, capsys):
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [2], name="x")
        gr.identity(x * 2.0, name="doubled")
        gr.reduce_sum(x, name="total")
    path = tmp_path / "g.pb"
    gr.save_graph(graph, str(path))
    code, out, _ = run_cli(["run", str(path), "--feed", "x=[1,2]"], capsys)
    assert code == 0
    assert out.splitlines() == ["doubled:0  float32 [2]", "  [2. 4.]", "total:0  float32 []  = 3"]


def test_run_of_a_graph_without_outputs_asks_for_fetch(tmp_path, capsys):
    graph = gr.Graph()
    with graph.as_default():
        gr.placeholder(gr.float32, [2], name="x")
    path = tmp_path / "g.pb"
    gr.save_graph(graph, str(path))
    code, _, err = run_cli(["run", str(path), "--feed", "x=[1,2]"], capsys)
    assert code == 2 and "--fetch" in err


def test_inspect_of_a_savedmodel_shows_its_tag_sets_and_signatures(capsys):
    code, out, _ = run_cli(["inspect", str(DATA / "keras_softmax" / "model")], capsys)
    assert code == 0
    assert "  tag-sets: serve\n" in out and "written by TensorFlow 2.21.0" in out
    assert "signature 'serving_default'" in out and "    output_0  float32 [?, 4]" in out
    code, out, _ = run_cli(["inspect", str(DATA / "keras_softmax" / "model"), "--json"], capsys)
    summary = json.loads(out)
    assert summary["tag_sets"] == [["serve"]] and set(summary["signatures"]) == {"serve", "serving_default"}


def _graph_with_an_unknown_op(path: pathlib.Path, on_the_outputs: bool) -> None:
    """x -> y = 2x, and a node of an op type no plugin defines: between y and the output, or
    off to the side (a sink nothing fetches)."""
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [2], name="x")
        gr.identity(x * 2.0, name="y")
    graph_def = graph.as_graph_def()
    unknown = graph_def.node.add()
    unknown.name, unknown.op = "unknown", "NoPluginDefinesThis"
    unknown.input.append("y" if on_the_outputs else "x")
    if on_the_outputs:
        out = graph_def.node.add()
        out.name, out.op = "out", "Identity"
        out.input.append("unknown")
        attr = out.attr.add()
        attr.key, attr.value.type = "T", gr.float32.as_datatype_enum
    path.write_bytes(graph_def.SerializeToString())


def test_check_fails_when_the_graphs_outputs_need_an_op_nobody_defines(tmp_path, capsys):
    path = tmp_path / "g.pb"
    _graph_with_an_unknown_op(path, on_the_outputs=True)
    code, out, _ = run_cli(["check", str(path)], capsys)
    assert code == 1
    assert "NEEDED NoPluginDefinesThis: no op definition" in out and "outputs: 1 op type (NEEDED) cannot be run" in out
    code, out, _ = run_cli(["check", str(path), "--json"], capsys)
    assert code == 1 and json.loads(out)["outputs_ok"] is False


def test_check_passes_when_the_unknown_op_is_off_the_outputs(tmp_path, capsys):
    path = tmp_path / "g.pb"
    _graph_with_an_unknown_op(path, on_the_outputs=False)
    code, out, _ = run_cli(["check", str(path)], capsys)
    assert code == 0
    assert "  NoPluginDefinesThis: no op definition" in out and "outputs: every op they need can run" in out


@pytest.mark.parametrize("command", ["view", "tensorboard"])
def test_view_and_tensorboard_say_they_take_every_format(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "ONNX .onnx" in text and "SavedModel directory" in text and "GraphDef .pb" in text


def test_a_savedmodel_named_by_a_relative_path_loads(monkeypatch, capsys):
    """The directory as the user types it, relative to the working directory (the confined reader
    resolves relative paths against the model: gradreg's own must be absolute)."""
    monkeypatch.chdir(DATA)
    code, out, err = run_cli(["inspect", "keras_softmax/model"], capsys)
    assert code == 0, err
    assert out.startswith("SavedModel: keras_softmax/model\n")
    code, out, err = run_cli(["run", "keras_softmax/model", "--feed", "features=[[0,0,0,0,0,0]]"], capsys)
    assert code == 0 and out.startswith("output_0  float32 [1, 4]"), err
