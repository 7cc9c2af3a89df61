"""Pictures that show the network (gradreg.viz): constants, variables and their reads listed
inside the ops that use them (as Netron draws ONNX initializers), control-only NoOps left out,
the plumbing behind one switch; SavedModels drawn as their signature with the functions inlined;
gradient graphs with their backward ops. Checked on the view model, DOT, the HTML page's data,
and in headless Chromium with screenshots (skipped without Chromium)."""
from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest
from tf_models import load_saved_model_case

import gradreg as gr
from gradreg import cli
from gradreg.viz import build_view, fold, render
from gradreg.viz.model import GRADIENT, hide_plumbing

ONNX = pathlib.Path(__file__).parent / "data" / "onnx_models"
CNN = load_saved_model_case("keras_cnn").model_path
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _page_json(page: str) -> dict:
    return json.loads(re.search(r"const DATA = (\{.*?\});</script>", page, re.S).group(1))


def dense_layer(graph):
    """x @ w + b with w a resource variable and b a constant, in scope ``dense``."""
    x = gr.placeholder(gr.float32, [2, 3], name="x")
    with gr.name_scope("dense"):
        w = gr.Variable(np.ones((3, 4), np.float32), name="kernel", use_resource=True)
        b = gr.constant(np.arange(4, dtype=np.float32), name="bias")
        y = gr.nn.relu(gr.matmul(x, w) + b, name="relu")
    return x, w, y


def test_constants_and_variables_are_listed_inside_the_ops_that_use_them(graph):
    _, _, y = dense_layer(graph)
    view = build_view(graph, ys=[y])
    plumbing = {n.name: n.op_type for n in view.nodes.values() if n.plumbing}
    assert plumbing == {"dense/kernel": "VarHandleOp", "dense/MatMul/ReadVariableOp": "ReadVariableOp",
                        "dense/bias": "Const"}
    assert view.nodes["dense/MatMul"].params == ["b: dense/kernel [3,4]"]       # MatMul(a, b)
    assert view.nodes["dense/add"].params == ["y: bias [4] = [0,1,2,3]"]        # few elements: shown
    assert view.nodes["dense/relu"].params == []
    shown = hide_plumbing(view)
    assert sorted(shown.nodes) == ["dense/MatMul", "dense/add", "dense/relu", "x"]
    assert {(e.src, e.dst) for e in shown.edges} == {("x", "dense/MatMul"), ("dense/MatMul", "dense/add"),
                                                      ("dense/add", "dense/relu")}
    assert sorted(b.key for b in shown.boxes.values()) == ["", "dense"]      # the box of the variable is gone


def test_a_value_derived_from_constants_only_is_listed_as_one_value(graph):
    x = gr.placeholder(gr.float32, [2, 3], name="x")
    table = gr.constant(np.ones((5, 3), np.float32), name="table")
    rows = gr.shape(table, name="rows")
    multiples = gr.stack([1, rows[0] // 5])                  # computed from constants only
    y = gr.tile(x, multiples, name="tiled")
    view = build_view(graph, ys=[y])
    assert view.nodes["tiled"].params == [f"multiples: {multiples.op.name} [2]"]
    assert [n.name for n in view.nodes.values() if not n.plumbing] == ["x", "tiled"]


def test_a_scope_left_with_one_op_is_drawn_as_that_op(graph):
    x = gr.placeholder(gr.float32, [2, 3], name="x")
    with gr.name_scope("layer"):
        with gr.name_scope("scale"):
            y = gr.multiply(x, gr.constant(2.0, name="factor"), name="mul")    # scale/ holds mul and factor
        gr.nn.relu(y, name="relu")
    full = build_view(graph)
    assert {b.key for b in full.boxes.values()} == {"", "layer", "layer/scale"}
    shown = hide_plumbing(full)
    assert {b.key for b in shown.boxes.values()} == {"", "layer"}
    layer = next(b for b in shown.boxes.values() if b.key == "layer")
    assert sorted(layer.nodes) == ["layer/relu", "layer/scale/mul"] and shown.nodes["layer/scale/mul"].box == layer.id
    assert full.nodes["layer/scale/mul"].box != layer.id                        # the full view keeps its box


def test_ops_named_x_grad_are_gradient_ops(graph):
    x = gr.placeholder(gr.float32, [3], name="x")
    y = gr.reduce_sum(x * x, name="y")
    (g,) = gr.gradients(y, [x])
    gr.identity(g, name="x_grad")
    view = build_view(graph)
    assert view.nodes["x_grad"].kind == GRADIENT and view.nodes["y"].kind != GRADIENT


def test_dot_lists_the_plumbing_inside_its_users_unless_asked_to_draw_it(graph):
    _, _, y = dense_layer(graph)
    hidden, drawn = render(graph, "dot"), render(graph, "dot", plumbing=True)
    assert "b: dense/kernel [3,4]" in hidden and "VarHandleOp" not in hidden
    assert "VarHandleOp" in drawn and "b: dense/kernel [3,4]" not in drawn


def test_html_page_marks_the_plumbing_and_starts_with_the_switch_off(graph):
    dense_layer(graph)
    data = _page_json(render(graph, "html"))
    assert data["plumbing"] == 0 and data["plumbingCount"] >= 3
    marked = {n["name"] for n in data["nodes"] if n.get("plumb")}
    assert {"dense/kernel", "dense/bias"} <= marked
    matmul = next(n for n in data["nodes"] if n["op"] == "MatMul")
    assert matmul["params"] == ["b: dense/kernel [3,4]"]
    assert 'id="plumbing"' in render(graph, "html")
    assert _page_json(render(graph, "html", plumbing=True))["plumbing"] == 1


def test_onnx_initializers_are_inside_their_consumers():
    graph = gr.load_graph(ONNX / "resnet_opset18" / "model.onnx")
    view = build_view(graph)
    shown = hide_plumbing(view)
    consts = [n for n in view.nodes.values() if n.op_type == "Const"]
    assert len(consts) > 40 and all(n.plumbing for n in consts)
    assert not any(n.op_type == "Const" for n in shown.nodes.values())
    conv = shown.nodes["conv2d"]
    assert conv.params == ["W: conv1.weight [8,3,7,7]"]
    batch_norm = next(n for n in shown.nodes.values() if n.op_type == "onnx::BatchNormalization")
    assert [p.split(":")[0] for p in batch_norm.params] == ["scale", "B", "input_mean", "input_var"]
    assert fold(shown).visible() < fold(view).visible() // 2


def _run(argv, capsys):
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr()


def test_an_onnx_gradient_model_is_drawn_with_its_backward_ops(tmp_path, capsys):
    """gradreg writes each op's gradient as a call of a model-local function: the picture draws
    the calls' nodes, as in the graph the file was written from (--flat writes them so)."""
    pytest.importorskip("onnx")
    from gradreg.viz.sources import graph_to_draw
    model = ONNX / "resnet_opset18" / "model.onnx"
    grouped, flat = tmp_path / "grad.onnx", tmp_path / "flat.onnx"
    for out, extra in ((grouped, []), (flat, ["--flat"])):
        assert _run(["grad", model, "--ys", "logits", "--xs", "x,conv1.weight", "-o", out, *extra], capsys)[0] == 0
    assert any(op.type.startswith("gradreg.gradients::") for op in gr.load_graph(grouped).get_operations())
    drawn, _ = graph_to_draw(grouped)
    types = sorted(op.type for op in drawn.get_operations())
    assert not any(t.startswith("gradreg.") for t in types)
    assert set(types) - {"Const"} == {op.type for op in graph_to_draw(flat)[0].get_operations()} - {"Const"}
    assert {"onnx::ScatterElements", "onnx::ConvTranspose"} <= set(types)   # MaxPool's and Conv's gradients
    assert _run(["view", grouped, "-o", tmp_path / "grad.dot"], capsys)[0] == 0
    assert "ScatterElements" in (tmp_path / "grad.dot").read_text()


def test_view_of_a_saved_model_draws_its_signature_inlined(tmp_path, capsys):
    code, out = _run(["view", CNN, "-o", tmp_path / "cnn.html"], capsys)
    assert code == 0, out.err
    data = _page_json((tmp_path / "cnn.html").read_text())
    assert "signature serving_default" in data["title"]
    types = {n["op"] for n in data["nodes"]}
    assert not types & {"StatefulPartitionedCall", "PartitionedCall", "VarIsInitializedOp", "AssignVariableOp",
                        "RestoreV2", "SaveV2"}
    assert {"Conv2D", "MaxPool", "Softmax"} <= types
    conv = next(n for n in data["nodes"] if n["op"] == "Conv2D")
    assert conv["params"] == ["filter: conv1/kernel [3,3,2,4]"] and conv["shapes"] == "[?,6,6,4]"
    params = [p for n in data["nodes"] for p in n.get("params", [])]
    assert any("bn1/moving_mean [4]" in p for p in params)
    assert {n["name"] for n in data["nodes"] if n.get("plumb")} >= {"conv1/kernel", "bn1/moving_mean"}
    code, out = _run(["view", CNN, "-o", tmp_path / "serve.dot", "--signature", "serve"], capsys)
    assert code == 0 and "signature serve" in (tmp_path / "serve.dot").read_text()
    code, out = _run(["view", ONNX / "resnet_opset18" / "model.onnx", "-o", tmp_path / "r.dot", "--signature", "s"],
                     capsys)
    assert code == 2 and "--signature applies to a SavedModel directory" in out.err


# -- in Chromium ----------------------------------------------------------------------------------
def _chromium(page, *flags: str) -> str:
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={page.parent / ('profile-' + page.stem)}", "--hide-scrollbars",
            "--window-size=1400,2000", "--virtual-time-budget=5000", *flags, page.as_uri()]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout


def _drawn(dom: str) -> dict[str, str]:
    """{drawn op name: its label text} from the page's DOM."""
    found = {}
    for match in re.finditer(r'<g class="node[^"]*" data-name="([^"]*)">(.*?)</g>', dom, re.S):
        found[match.group(1)] = " ".join(re.findall(r">([^<>]+)</text>", match.group(2)))
    return found


def _pictures(tmp_path, capsys) -> dict[str, object]:
    """The default pictures of the Keras SavedModel, a PyTorch ONNX file and their gradient graphs."""
    code, _ = _run(["grad", CNN, "--ys", "output_0", "--xs", "image,conv1/kernel", "-o", tmp_path / "cnn_grad.pb"],
                   capsys)
    assert code == 0
    onnx_model = ONNX / "resnet_opset18" / "model.onnx"
    code, _ = _run(["grad", onnx_model, "--ys", "logits", "--xs", "x,conv1.weight",
                    "-o", tmp_path / "resnet_grad.onnx"],
                   capsys)
    assert code == 0
    pages = {}
    for name, source in [("cnn", CNN), ("cnn_grad", tmp_path / "cnn_grad.pb"), ("resnet", onnx_model),
                         ("resnet_grad", tmp_path / "resnet_grad.onnx")]:
        page = tmp_path / f"{name}.html"
        assert _run(["view", source, "-o", page], capsys)[0] == 0
        pages[name] = page
    return pages


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM, reason="Chromium is not installed")
def test_default_pictures_show_the_network_in_chromium(tmp_path, capsys):
    image = pytest.importorskip("PIL.Image")
    pages = _pictures(tmp_path, capsys)
    drawn = {name: _drawn(_chromium(page, "--dump-dom")) for name, page in pages.items()}
    cnn = drawn["cnn"]
    assert not any(label.split(" ")[0] in ("VarHandleOp", "ReadVariableOp", "NoOp", "Const") for label in cnn.values())
    conv = next(label for label in cnn.values() if label.startswith("Conv2D"))
    assert "filter: conv1/kernel [3,3,2,4]" in conv
    grad_types = {label.split(" ")[0] for name, label in drawn["cnn_grad"].items() if name.startswith("gradients/")}
    assert {"Conv2DBackpropFilter", "ReluGrad", "MaxPoolGrad"} <= grad_types
    resnet = drawn["resnet"]
    assert not any(label.startswith("Const") for label in resnet.values())
    assert any("W: conv1.weight [8,3,7,7]" in label for label in resnet.values())
    assert any(label.startswith("onnx::ConvTranspose") for label in drawn["resnet_grad"].values())
    for name, page in pages.items():             # a picture, not a blank page
        shot = tmp_path / f"{name}.png"
        _chromium(page, f"--screenshot={shot}")
        pixels = np.asarray(image.open(shot).convert("L"))
        ink = (pixels < 200).mean()
        assert 0.005 < ink < 0.5, (name, ink)


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM, reason="Chromium is not installed")
def test_the_switch_draws_the_plumbing_in_chromium(tmp_path, capsys):
    page = tmp_path / "cnn.html"
    assert _run(["view", CNN, "-o", page], capsys)[0] == 0
    switch = """<script>
    const box = document.getElementById("plumbing");
    box.checked = true; box.dispatchEvent(new Event("change"));
    </script></body>"""
    page.write_text(page.read_text().replace("</body>", switch))
    drawn = _drawn(_chromium(page, "--dump-dom"))
    assert "conv1/kernel" in drawn and drawn["conv1/kernel"].startswith("VarHandleOp")
    conv = next(label for label in drawn.values() if label.startswith("Conv2D"))
    assert "filter:" not in conv
