"""Loading ONNX models into gradreg, running them, and writing graphs back as ONNX.

Reference values come from onnxruntime running the same model (or from the model's own
arithmetic where onnxruntime is not the point); tests that need it skip without it.
"""
import json
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnx_parser = pytest.importorskip("onnx.parser")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import gradreg as gr  # noqa: E402
from gradreg.errors import GraphError, GraphFileError, UnknownOpError  # noqa: E402
from gradreg_plugins.onnx.format import graph_to_model, load_onnx, model_info, save_onnx  # noqa: E402

F = TensorProto.FLOAT
tvi = helper.make_tensor_value_info
RNG = np.random.default_rng(7)


def ort_run(model, feeds: dict) -> list:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def make_model(nodes, inputs, outputs, initializers=(), opset=18, functions=(), extra_opsets=()):
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(graph, opset_imports=opsets, functions=list(functions))


def mlp_model(batch="N"):
    """input.1 [N, 4] -> Gemm(fc.weight, fc.bias) -> Relu -> Gemm -> logits; names as torch writes them."""
    w1 = numpy_helper.from_array(RNG.normal(size=(3, 4)).astype(np.float32), "fc.weight")
    b1 = numpy_helper.from_array(RNG.normal(size=3).astype(np.float32), "fc.bias")
    w2 = numpy_helper.from_array(RNG.normal(size=(2, 3)).astype(np.float32), "out.weight")
    nodes = [
        helper.make_node("Gemm", ["input.1", "fc.weight", "fc.bias"], ["onnx::Relu_5"], name="/fc/Gemm", transB=1),
        helper.make_node("Relu", ["onnx::Relu_5"], ["/relu/Relu_output_0"], name="/relu/Relu"),
        helper.make_node("Gemm", ["/relu/Relu_output_0", "out.weight"], ["logits"], name="/out/Gemm", transB=1),
    ]
    return make_model(nodes, [tvi("input.1", F, [batch, 4])],
                      [tvi("logits", F, [batch, 2])], [w1, b1, w2])


# -- loading ------------------------------------------------------------------------------------------

def test_an_onnx_file_loads_by_suffix_and_runs_as_onnxruntime_does(tmp_path):
    model = mlp_model()
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    graph = gr.load_graph(str(path))
    x = RNG.normal(size=(5, 4)).astype(np.float32)
    (expected,) = ort_run(model, {"input.1": x})
    np.testing.assert_allclose(gr.Session(graph).run("logits", {"input.1": x}), expected, rtol=1e-5, atol=1e-6)


def test_onnx_bytes_and_unsuffixed_files_are_recognized_by_content(tmp_path):
    model = mlp_model()
    path = tmp_path / "model.dat"   # no suffix a format claims: recognized by content
    path.write_bytes(model.SerializeToString())
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    a = gr.Session(gr.load_graph(str(path))).run("logits", {"input.1": x})
    b = gr.Session(gr.load_graph(model.SerializeToString())).run("logits", {"input.1": x})
    c = gr.Session(gr.load_onnx(model)).run("logits", {"input.1": x})
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


def test_onnx_value_names_work_wherever_tensor_names_do():
    graph = load_onnx(mlp_model())
    relu_in = graph.get_tensor("onnx::Relu_5")
    assert relu_in.op.type == "onnx::Gemm"
    assert graph.get_tensor("input.1").op.type == "Placeholder"
    assert graph.get_tensor("logits:0") is graph.get_tensor("logits")
    assert graph.get_tensor("fc.weight").op.type == "Const"
    x = np.ones((1, 4), np.float32)
    pre, post = gr.Session(graph).run(["onnx::Relu_5", "/relu/Relu_output_0"], {"input.1:0": x})
    np.testing.assert_array_equal(post, np.maximum(pre, 0))


def test_symbolic_dimensions_are_unknown_and_any_size_runs():
    graph = load_onnx(mlp_model(batch="batch_size"))
    assert graph.get_tensor("input.1").shape.as_list() == [None, 4]
    sess = gr.Session(graph)
    for n in (1, 7):
        assert sess.run("logits", {"input.1": np.zeros((n, 4), np.float32)}).shape == (n, 2)


def test_weights_in_external_data_load_from_beside_the_model(tmp_path):
    model = mlp_model()
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").exists()
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    (expected,) = ort_run(mlp_model_from(path), {"input.1": x})
    np.testing.assert_allclose(gr.Session(gr.load_graph(str(path))).run("logits", {"input.1": x}), expected,
                               rtol=1e-5, atol=1e-6)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(GraphFileError, match="model.onnx"):
        gr.load_graph(str(path))


def mlp_model_from(path):
    return onnx.load(str(path))


def test_an_old_opset_model_is_converted_to_the_family_opset():
    nodes = [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0]),                # axes as attribute (< 13)
             helper.make_node("ReduceSum", ["u"], ["y"], axes=[2], keepdims=0)]
    model = make_model(nodes, [tvi("x", F, [2, 3])],
                       [tvi("y", F, [1, 2])], opset=9)
    graph = load_onnx(model)
    info = model_info(graph)
    assert info.original_opset == 9
    from gradreg_plugins.onnx.schemas import OPSET_VERSIONS
    assert info.opset_imports[""] == OPSET_VERSIONS[""]
    x = RNG.normal(size=(2, 3)).astype(np.float32)
    np.testing.assert_allclose(gr.Session(graph).run("y", {"x": x}), x.sum(axis=1)[None], rtol=1e-6)


def test_a_malformed_model_is_a_graph_error_naming_the_node():
    nodes = [helper.make_node("Relu", ["nowhere"], ["y"], name="bad_relu")]
    model = make_model(nodes, [tvi("x", F, [2])], [tvi("y", F, [2])])
    with pytest.raises(GraphError, match="bad_relu"):
        load_onnx(model)


def test_an_op_outside_the_family_is_an_unknown_op_error_naming_node_and_domain():
    nodes = [helper.make_node("Frobnicate", ["x"], ["y"], name="strange", domain="com.example")]
    model = make_model(nodes, [tvi("x", F, [2])], [tvi("y", F, [2])],
                       extra_opsets=[("com.example", 1)])
    with pytest.raises(UnknownOpError, match="strange.*Frobnicate.*com.example"):
        load_onnx(model)


def test_bytes_that_are_not_a_model_are_a_graph_file_error(tmp_path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x08\x07this is not protobuf at all \xff\xff\xff")
    with pytest.raises(GraphFileError, match="junk.onnx"):
        gr.load_graph(str(path))


def test_without_the_onnx_package_an_onnx_file_names_the_extra(tmp_path, monkeypatch):
    path = tmp_path / "model.onnx"
    onnx.save(mlp_model(), str(path))
    monkeypatch.setitem(sys.modules, "onnx", None)      # import onnx now raises ImportError
    with pytest.raises(GraphFileError, match=r'pip install "gradreg\[onnx\]"'):
        gr.load_graph(str(path))


# -- subgraphs and functions --------------------------------------------------------------------------

def control_flow_model():
    """y = If(sum(x) > 0, x * scale, x - scale), then a Loop adding `step` to it n times, collecting
    each partial value; both subgraphs use values of the outer graph."""
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "scale"], ["t"])], "then", [],
                               [tvi("t", F, [3])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "scale"], ["e"])], "else", [],
                               [tvi("e", F, [3])])
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["acc_out"], ["partial"])],
        "body", [tvi("i", TensorProto.INT64, []),
                 tvi("cond_in", TensorProto.BOOL, []),
                 tvi("acc_in", F, [3])],
        [tvi("cond_out", TensorProto.BOOL, []), tvi("acc_out", F, [3]),
         tvi("partial", F, [3])])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["positive"]),
        helper.make_node("If", ["positive"], ["y"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["n", "true", "y"], ["final", "partials"], body=body),
    ]
    inits = [numpy_helper.from_array(np.array([2.0, 3.0, 4.0], np.float32), "scale"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(True), "true"),
             numpy_helper.from_array(np.array([0.5, 0.5, 0.5], np.float32), "step")]
    return make_model(nodes, [tvi("x", F, [3]),
                              tvi("n", TensorProto.INT64, [])],
                      [tvi("final", F, [3]), tvi("partials", F, ["trips", 3])],
                      inits)


@pytest.mark.parametrize("x", [[1.0, 2.0, -0.5], [-1.0, -2.0, 0.5]])
def test_if_and_loop_subgraphs_using_outer_values_run_as_onnxruntime_does(x):
    model = control_flow_model()
    feeds = {"x": np.array(x, np.float32), "n": np.array(4, np.int64)}
    expected = ort_run(model, feeds)
    graph = load_onnx(model)
    assert len(graph.library) == 3                                   # then, else, body
    got = gr.Session(graph).run(["final", "partials"], feeds)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_written_subgraphs_pass_the_full_check_and_run_in_onnxruntime():
    model = control_flow_model()
    written = graph_to_model(load_onnx(model))                     # checks with full_check=True
    feeds = {"x": np.array([1.0, -2.0, 3.0], np.float32), "n": np.array(3, np.int64)}
    for a, b in zip(ort_run(written, feeds), ort_run(model, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def scaled_add_function():
    """A model-local function y = a * alpha + b, alpha an attribute of the call."""
    return onnx_parser.parse_function("""
        <domain: "custom.ops", opset_import: ["" : 18]>
        ScaledAdd <alpha> (a, b) => (y) {
            alpha_t = Constant <value_float: float = @alpha> ()
            scaled = Mul (a, alpha_t)
            y = Add (scaled, b)
        }""")


def test_model_local_functions_become_library_functions_per_attribute_value():
    nodes = [helper.make_node("ScaledAdd", ["x", "x"], ["y2"], domain="custom.ops", alpha=2.0),
             helper.make_node("ScaledAdd", ["y2", "x"], ["y3"], domain="custom.ops", alpha=3.0)]
    model = make_model(nodes, [tvi("x", F, [2])], [tvi("y3", F, [2])],
                       functions=[scaled_add_function()], extra_opsets=[("custom.ops", 1)])
    graph = load_onnx(model)
    assert sorted(graph.library.names()) == ["custom.ops::ScaledAdd", "custom.ops::ScaledAdd_2"]
    x = np.array([1.0, -2.0], np.float32)
    np.testing.assert_allclose(gr.Session(graph).run("y3", {"x": x}), (x * 2 + x) * 3 + x, rtol=1e-6)
    written = graph_to_model(graph)
    assert {f.name for f in written.functions} == {"ScaledAdd", "ScaledAdd_2"}
    np.testing.assert_allclose(ort_run(written, {"x": x})[0], (x * 2 + x) * 3 + x, rtol=1e-6)


def test_the_onnx_gradient_operator_is_expanded_into_its_gradient_graph():
    nodes = [helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Mul", ["c", "a"], ["d"]),
             helper.make_node("Gradient", ["a", "b"], ["dd_da", "dd_db"], domain="ai.onnx.preview.training",
                              xs=["a", "b"], y="d")]
    model = make_model(nodes, [tvi(n, F, [3]) for n in ("a", "b")],
                       [tvi(n, F, [3]) for n in ("dd_da", "dd_db")],
                       extra_opsets=[("ai.onnx.preview.training", 1)])
    graph = load_onnx(model)
    a, b = np.array([1.0, 2.0, 3.0], np.float32), np.array([0.5, -1.0, 2.0], np.float32)
    da, db = gr.Session(graph).run(["dd_da", "dd_db"], {"a": a, "b": b})
    np.testing.assert_allclose(da, 2 * a + b)       # d = (a + b) a
    np.testing.assert_allclose(db, a)
    written = graph_to_model(graph)          # gradients() adds a few TensorFlow ops; each maps to ONNX
    d_a, d_b = ort_run(written, {"a": a, "b": b})
    np.testing.assert_allclose(d_a, 2 * a + b)
    np.testing.assert_allclose(d_b, a)


# -- writing ------------------------------------------------------------------------------------------

def small_cnn_model():
    w = numpy_helper.from_array(RNG.normal(size=(4, 2, 3, 3)).astype(np.float32), "conv.weight")
    b = numpy_helper.from_array(RNG.normal(size=4).astype(np.float32), "conv.bias")
    fc = numpy_helper.from_array(RNG.normal(size=(3, 16)).astype(np.float32), "fc.weight")
    nodes = [helper.make_node("Conv", ["image", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.weight"], ["z"], transB=1),
             helper.make_node("Softmax", ["z"], ["probs"])]
    return make_model(nodes, [tvi("image", F, ["N", 2, 4, 4])],
                      [tvi("probs", F, ["N", 3])], [w, b, fc])


def test_a_loaded_model_written_back_passes_the_full_check_and_computes_the_same():
    model = small_cnn_model()
    written = graph_to_model(load_onnx(model))
    assert [i.name for i in written.graph.input] == ["image"]
    assert written.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    x = RNG.normal(size=(2, 2, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(ort_run(written, {"image": x})[0], ort_run(model, {"image": x})[0], rtol=1e-5,
                               atol=1e-6)


def write_cnn_with_loss(tmp_path):
    """small_cnn_model plus a cross-entropy loss against a one-hot `target` input."""
    model = small_cnn_model()
    g = model.graph
    g.node.extend([helper.make_node("Log", ["probs"], ["logp"]), helper.make_node("Mul", ["logp", "target"], ["ll"]),
                   helper.make_node("ReduceSum", ["ll"], ["total"], keepdims=0),
                   helper.make_node("Neg", ["total"], ["loss"])])
    g.input.append(tvi("target", F, ["N", 3]))
    g.output.append(tvi("loss", F, []))
    path = tmp_path / "cnn.onnx"
    onnx.save(model, str(path))
    return model, path


def test_cli_grad_writes_an_onnx_gradient_model_onnxruntime_runs(tmp_path, capsys):
    from gradreg.cli import main
    model, path = write_cnn_with_loss(tmp_path)
    out = tmp_path / "grad.onnx"
    assert main(["grad", str(path), "--ys", "loss", "--xs", "image,conv.weight,fc.weight", "-o", str(out),
                 "--json"]) == 0
    mapping = json.loads(capsys.readouterr().out)["gradients"]
    assert mapping == {"image": "image_grad", "conv.weight": "conv.weight_grad", "fc.weight": "fc.weight_grad"}
    written = onnx.load(str(out))
    onnx.checker.check_model(written, full_check=True)
    x = RNG.normal(size=(2, 2, 4, 4)).astype(np.float32)
    target = np.eye(3, dtype=np.float32)[[0, 2]]
    outputs = dict(zip([o.name for o in written.graph.output], ort_run(written, {"image": x, "target": target})))
    graph = gr.load_graph(str(path))
    with graph.as_default():
        names = ["image", "conv.weight", "fc.weight"]
        grads = gr.gradients(graph.get_tensor("loss"), [graph.get_tensor(n) for n in names])
    ours = gr.Session(graph).run(grads, {"image": x, "target": target})
    for name, value in zip(names, ours):
        np.testing.assert_allclose(outputs[mapping[name]], value, rtol=1e-4, atol=1e-5)
    # and fc.weight's gradient is the loss's slope (a central difference along a random direction;
    # the loss is smooth in fc.weight, which comes after the ReLU and MaxPool)
    weight = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "fc.weight"))
    direction = RNG.normal(size=weight.shape).astype(np.float32)

    def loss_at(w):
        moved = onnx.ModelProto()
        moved.CopyFrom(model)
        weight = next(t for t in moved.graph.initializer if t.name == "fc.weight")
        weight.CopyFrom(numpy_helper.from_array(w, "fc.weight"))
        return float(ort_run(moved, {"image": x, "target": target})[1])
    slope = (loss_at(weight + 1e-2 * direction) - loss_at(weight - 1e-2 * direction)) / 2e-2
    np.testing.assert_allclose(np.sum(outputs["fc.weight_grad"] * direction), slope, rtol=1e-2)


def test_cli_grad_on_onnx_prints_values_under_the_models_output_names(tmp_path, capsys):
    """`gradreg grad model.onnx ... --feed` with and without -o: the values as onnxruntime computes
    them from the written gradient model, named as the model's outputs (image_grad, ...)."""
    from gradreg.cli import main
    _, path = write_cnn_with_loss(tmp_path)
    x = RNG.normal(size=(2, 2, 4, 4)).astype(np.float32)
    target = np.eye(3, dtype=np.float32)[[0, 2]]
    np.savez(tmp_path / "feeds.npz", image=x, target=target)
    common = [str(path), "--ys", "loss", "--xs", "image,fc.weight", "--feed", str(tmp_path / "feeds.npz"), "--json"]
    assert main(["grad", *common, "-o", str(tmp_path / "grad.onnx")]) == 0
    document = json.loads(capsys.readouterr().out)
    written = onnx.load(str(tmp_path / "grad.onnx"))
    reference = dict(zip([o.name for o in written.graph.output], ort_run(written, {"image": x, "target": target})))
    values = {v["name"]: np.asarray(v["values"], np.float32) for v in document["values"]}
    assert sorted(values) == ["fc.weight_grad", "image_grad", "loss"]
    for name, value in values.items():
        np.testing.assert_allclose(value, reference[name], rtol=1e-4, atol=1e-5)
    assert main(["grad", *common]) == 0          # no -o: xs and ys under the model's names, gradients' tensor names
    document = json.loads(capsys.readouterr().out)
    values = {v["name"]: np.asarray(v["values"], np.float32) for v in document["values"]}
    assert "loss" in values and sorted(document["gradients"]) == ["fc.weight", "image"]
    for x_name in ("image", "fc.weight"):
        tensor = document["gradients"][x_name]
        np.testing.assert_allclose(values[tensor], reference[f"{x_name}_grad"], rtol=1e-4, atol=1e-5)


def test_onnx_converts_to_a_graphdef_and_back(tmp_path):
    from gradreg.cli import main
    model = small_cnn_model()
    onnx.save(model, str(tmp_path / "m.onnx"))
    assert main(["convert", str(tmp_path / "m.onnx"), str(tmp_path / "m.pb")]) == 0
    assert main(["convert", str(tmp_path / "m.pb"), str(tmp_path / "back.onnx")]) == 0
    from_pb = gr.load_graph(str(tmp_path / "m.pb"))
    assert {op.type for op in from_pb.get_operations()} >= {"onnx::Conv", "onnx::Gemm"}
    x = RNG.normal(size=(1, 2, 4, 4)).astype(np.float32)
    expected = ort_run(model, {"image": x})[0]
    probs = [op for op in from_pb.get_operations() if op.type == "onnx::Softmax"][0].outputs[0]
    np.testing.assert_allclose(gr.Session(from_pb).run(probs, {"image:0": x}), expected, rtol=1e-5, atol=1e-6)
    back = onnx.load(str(tmp_path / "back.onnx"))
    np.testing.assert_allclose(ort_run(back, {"image": x})[0], expected, rtol=1e-5, atol=1e-6)


def test_a_tensorflow_graph_whose_ops_all_map_is_written_as_onnx(tmp_path):
    g = gr.Graph()
    w = RNG.normal(size=(3, 2)).astype(np.float32)
    with g.as_default():
        x = gr.placeholder(gr.float32, [None, 3], name="x")
        h = gr.tanh(gr.matmul(x, gr.constant(w), transpose_b=False) + 1.0)
        y = gr.reduce_mean(gr.softmax(h) * h, axis=1, name="y")
        z = gr.reshape(gr.transpose(h), [-1], name="z")
    mapping = save_onnx(g, tmp_path / "tf.onnx", {"y": y, "z": z})
    assert mapping == {y.name: "y", z.name: "z"}
    value = RNG.normal(size=(4, 3)).astype(np.float32)
    got = ort_run(onnx.load(str(tmp_path / "tf.onnx")), {"x": value})
    for a, b in zip(got, gr.Session(g).run([y, z], {x: value})):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_an_op_without_an_onnx_equivalent_is_named_when_writing():
    g = gr.Graph()
    with g.as_default():
        x = gr.placeholder(gr.float32, [3], name="x")
        y = gr.raw_ops.Cumsum(x, 0, name="running_total")
    with pytest.raises(GraphError, match="running_total.*Cumsum"):
        graph_to_model(g, [y])


def test_aliases_resolve_and_refuse_to_be_redefined():
    g = gr.Graph()
    with g.as_default():
        a = gr.placeholder(gr.float32, [2], name="a")
        b = gr.identity(a, name="b")
    g.add_tensor_alias("input:0 (onnx)", a)
    assert g.get_tensor("input:0 (onnx)") is a
    assert g.as_graph_element("input:0 (onnx)") is a
    g.add_tensor_alias("input:0 (onnx)", a)               # the same tensor again: fine
    with pytest.raises(GraphError, match="already names"):
        g.add_tensor_alias("input:0 (onnx)", b)


def test_the_backend_runs_a_single_node():
    import gradreg_plugins.onnx.backend as backend
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=2.0)
    a, b, c = (RNG.normal(size=s).astype(np.float32) for s in ((2, 3), (4, 3), (4,)))
    (y,) = backend.run_node(node, [a, b, c])
    np.testing.assert_allclose(y, 2 * a @ b.T + c, rtol=1e-5)
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")


def ir3_model():
    """An IR-3 model as most of the ONNX model zoo: its graph inputs list every initializer too,
    ahead of the data input (y = x @ w + b)."""
    w = RNG.normal(size=(3, 2)).astype(np.float32)
    b = RNG.normal(size=2).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc")]
    inputs = [tvi("w", F, [3, 2]), tvi("b", F, [2]), tvi("x", F, [4, 3])]
    model = make_model(nodes, inputs, [tvi("y", F, [4, 2])],
                       [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")], opset=7)
    model.ir_version = 3
    return model, w, b


def test_the_backend_feeds_a_list_to_the_inputs_no_initializer_provides():
    import gradreg_plugins.onnx.backend as backend
    model, w, b = ir3_model()
    x = RNG.normal(size=(4, 3)).astype(np.float32)
    rep = backend.prepare(model)
    (expected,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(rep.run([x])[0], expected, rtol=1e-5)
    np.testing.assert_allclose(x @ w + b, expected, rtol=1e-5)
    w2 = np.ones((3, 2), np.float32)
    np.testing.assert_allclose(rep.run({"x": x, "w": w2})[0], x @ w2 + b, rtol=1e-5)   # by name: overridable
    np.testing.assert_allclose(rep.run([w2, b, x])[0], x @ w2 + b, rtol=1e-5)          # every input, in order
    with pytest.raises(gr.errors.FeedError, match=r"2 inputs given; the model takes 1 \(x\)"):
        rep.run([x, x])


def test_a_saved_graph_of_onnx_ops_loads_and_runs_without_the_onnx_package(tmp_path, monkeypatch):
    model = small_cnn_model()
    x = RNG.normal(size=(2, 2, 4, 4)).astype(np.float32)
    expected = gr.Session(load_onnx(model)).run("probs", {"image": x})
    gr.save_graph(load_onnx(model), str(tmp_path / "cnn.pb"))
    monkeypatch.setitem(sys.modules, "onnx", None)      # the op table is committed; these kernels are NumPy
    graph = gr.load_graph(str(tmp_path / "cnn.pb"))
    probs = next(op for op in graph.get_operations() if op.type == "onnx::Softmax").outputs[0]
    np.testing.assert_allclose(gr.Session(graph).run(probs, {"image:0": x}), expected, rtol=1e-6)
    with graph.as_default():
        odd = gr.raw_ops.__getattr__("onnx::HardSwish")(probs, name="hard_swish")
    with pytest.raises(UnknownOpError, match=r'hard_swish.*pip install "gradreg\[onnx\]"'):
        gr.Session(graph).run(odd, {"image:0": x})


def test_the_example_tensorflow_mlp_converts_to_onnx_and_computes_the_same(tmp_path):
    from pathlib import Path

    from gradreg.cli import main
    example = Path(__file__).resolve().parent.parent / "examples" / "mlp"
    assert main(["convert", str(example / "model.pbtxt"), str(tmp_path / "mlp.onnx")]) == 0
    written = onnx.load(str(tmp_path / "mlp.onnx"))
    onnx.checker.check_model(written, full_check=True)
    with np.load(example / "inputs.npz") as archive:
        feeds = dict(archive)
    (loss,) = ort_run_named(written, ["loss"], {name[:-2]: value for name, value in feeds.items()})
    expected = gr.Session(gr.load_graph(str(example / "model.pbtxt"))).run("loss:0", feeds)
    np.testing.assert_allclose(loss, expected, rtol=1e-6)


def ort_run_named(model, names, feeds: dict) -> list:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(names, feeds)


def test_a_graphdef_of_a_model_with_subgraphs_writes_back_to_onnx(tmp_path):
    """Without the loaded model's types (a .pb keeps none), subgraph argument shapes recorded in the
    functions and the If/Loop shape functions give every written input and output a shape."""
    model = control_flow_model()
    gr.save_graph(load_onnx(model), str(tmp_path / "cf.pb"))
    gr.save_graph(gr.load_graph(str(tmp_path / "cf.pb")), str(tmp_path / "back.onnx"))
    back = onnx.load(str(tmp_path / "back.onnx"))
    feeds = {"x": np.array([1.0, -2.0, 3.0], np.float32), "n": np.array(2, np.int64)}
    for a, b in zip(ort_run(back, feeds), ort_run(model, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_gradients_through_model_local_functions_are_written_as_gradient_functions():
    """A call of a model-local function differentiates by a SymbolicGradient node; written as ONNX,
    that is a call of the function's gradient function (another model-local function)."""
    nodes = [helper.make_node("ScaledAdd", ["x", "x"], ["y2"], domain="custom.ops", alpha=2.0),
             helper.make_node("ScaledAdd", ["y2", "x"], ["y3"], domain="custom.ops", alpha=3.0)]
    model = make_model(nodes, [tvi("x", F, [2])], [tvi("y3", F, [2])],
                       functions=[scaled_add_function()], extra_opsets=[("custom.ops", 1)])
    graph = load_onnx(model)
    with graph.as_default():
        (dx,) = gr.gradients(graph.get_tensor("y3"), [graph.get_tensor("x")])
    written = graph_to_model(graph, {"dx": dx})
    x = np.array([1.0, -2.0], np.float32)
    np.testing.assert_allclose(ort_run(written, {"x": x})[0], [10.0, 10.0])      # (2 + 1) * 3 + 1
    np.testing.assert_allclose(gr.Session(graph).run(dx, {"x": x}), [10.0, 10.0])


def test_cli_inspect_and_run_take_onnx_files(tmp_path, capsys):
    from gradreg.cli import main
    path = tmp_path / "model.onnx"
    onnx.save(mlp_model(), str(path))
    assert main(["inspect", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["op_types"]["onnx::Gemm"] == 2 and summary["op_types"]["onnx::Relu"] == 1
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(path), "--feed", f"input.1={tmp_path / 'x.npy'}", "--fetch", "logits",
                 "-o", str(tmp_path / "out.npz")]) == 0
    (expected,) = ort_run(mlp_model_from(path), {"input.1": x})
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_allclose(next(iter(out.values())), expected, rtol=1e-5, atol=1e-6)
