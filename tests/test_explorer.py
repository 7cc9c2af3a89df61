"""``gradreg explorer`` and gradreg.viz.explorer: models as Google Model Explorer's graph JSON, and
where their gradient flows as node-data overlays.

The graph JSON is checked against the model it was written from (nodes, namespaces, edges,
shapes, the constants listed in the ops that use them); the gradient magnitudes against
TensorFlow's (tests/data/explorer: tf.gradients for every op of a TF-written graph;
tests/data/keras_softmax: a SavedModel's GradientTape gradients) and, for an ONNX model,
against gradreg.gradients taken one tensor at a time. Model Explorer's own data classes
read both documents where the package is installed (the ``explorer`` extra).
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import gradreg
from gradreg.cli import main
from gradreg.viz.explorer import explorer_graph, node_data
from gradreg.viz.magnitudes import DISCONNECTED, FLOWS, ZERO, NodeGradient, gradient_magnitudes, summarize

DATA = pathlib.Path(__file__).parent / "data"
TF_MODEL = DATA / "explorer" / "model.pb"
TF_INPUTS = DATA / "explorer" / "inputs.npz"
TF_EXPECTED = DATA / "explorer" / "expected.npz"
ONNX_CASE = DATA / "onnx_models" / "mlp_gelu_opset18"
SAVED_MODEL = DATA / "keras_softmax"
OVERLAYS = ("l2", "max_abs", "log10_l2", "status")


def run_explorer(tmp_path: pathlib.Path, model: pathlib.Path, *flags: str) -> dict[str, dict]:
    """Run ``gradreg explorer`` into tmp_path/out; the documents written, by overlay ("graph" too)."""
    out = tmp_path / "out"
    assert main(["explorer", str(model), "-o", str(out), *flags]) == 0
    found = {"graph": json.loads((out / "graph.json").read_text())}
    for overlay in OVERLAYS:
        path = out / f"gradient_{overlay}.json"
        if path.exists():
            (document,) = json.loads(path.read_text()).values()
            found[overlay] = document
    return found


def nodes_by_id(collection: dict) -> dict[str, dict]:
    (graph,) = collection["graphs"]
    return {node["id"]: node for node in graph["nodes"]}


def attr(node: dict, key: str):
    return next(a["value"] for a in node["attrs"] if a["key"] == key)


def scope_of(name: str) -> str:
    return name.rpartition("/")[0]


# -- the graph JSON --------------------------------------------------------------------------

def test_graph_json_of_a_tensorflow_graph_has_its_ops_scopes_edges_and_shapes():
    graph = gradreg.load_graph(str(TF_MODEL))
    nodes = nodes_by_id(explorer_graph(graph, "model.pb", plumbing=True))
    assert set(nodes) == {op.name for op in graph.get_operations()}
    for op in graph.get_operations():
        node = nodes[op.name]
        assert node["label"] == op.type
        assert attr(node, "name") == op.name
        # an op whose name is a scope of other ops (loss/mul beside loss/mul/y) sits in that scope
        own_scope = any(other.name.startswith(op.name + "/") for other in graph.get_operations())
        assert node["namespace"] == (op.name if own_scope else scope_of(op.name))
        assert node["incomingEdges"] == [
            {"sourceNodeId": t.op.name, "sourceNodeOutputId": str(t.value_index), "targetNodeInputId": str(i)}
            for i, t in enumerate(op.inputs)]
        shapes = [{a["key"]: a["value"] for a in meta["attrs"]} for meta in node["outputsMetadata"]]
        dims = [",".join("?" if d is None else str(d) for d in t.shape.as_list()) for t in op.outputs]
        assert shapes == [{"tensor_name": t.name, "dtype": t.dtype.name, "shape": f"{t.dtype.name}[{d}]"}
                          for t, d in zip(op.outputs, dims)]


def test_graph_json_lists_constants_in_the_ops_that_use_them():
    graph = gradreg.load_graph(str(TF_MODEL))
    collection = explorer_graph(graph, "model.pb")
    nodes = nodes_by_id(collection)
    hidden = {op.name for op in graph.get_operations()} - set(nodes)
    assert collection["graphs"][0]["groupNodeAttributes"][""] == {
        "ops": str(len(graph)), "nodes": str(len(nodes)), "listed in the ops using them": str(len(hidden))}
    assert {"dense/w", "dense/w_read", "dense/b", "head/w", "dead/sub/y"} <= hidden
    assert all(graph.get_operation(name).type in ("Const", "Identity") for name in hidden)
    matmul = nodes["dense/MatMul"]
    assert [a["value"] for a in matmul["attrs"] if a["key"].startswith("reads")] == ["b: w [3,5]"]
    assert matmul["incomingEdges"] == [{"sourceNodeId": "x", "sourceNodeOutputId": "0", "targetNodeInputId": "0"}]
    assert [m["attrs"][0]["value"] for m in matmul["inputsMetadata"]] == ["a", "b"]
    assert attr(matmul, "transpose_b") == "False"
    # an op whose scope holds only its hidden constant sits in the enclosing scope
    assert nodes["loss/mul"]["namespace"] == "loss"


def test_graph_json_of_an_onnx_model_draws_initializers_inside_their_consumers():
    graph = gradreg.load_graph(str(ONNX_CASE / "model.onnx"))
    nodes = nodes_by_id(explorer_graph(graph, "model.onnx"))
    gemm = nodes["linear"]
    assert gemm["label"] == "Gemm" and attr(gemm, "op") == "onnx::Gemm"
    assert [a["value"] for a in gemm["attrs"] if a["key"].startswith("reads")] == \
        ["B: fc1.weight [16,8]", "C: fc1.bias [16]"]
    assert attr(gemm, "transB") == "1"
    assert gemm["incomingEdges"] == [{"sourceNodeId": "x", "sourceNodeOutputId": "0", "targetNodeInputId": "0"}]
    compute = [op for op in graph.get_operations() if op.type not in ("Const", "onnx::Constant")]
    assert set(nodes) <= {op.name for op in graph.get_operations()}
    assert {op.name for op in compute} - set(nodes) == set()


def test_function_bodies_are_layers_inside_their_call():
    graph = gradreg.load_graph(str(DATA / "tf_models" / "lstm" / "forward.pb"))
    nodes = nodes_by_id(explorer_graph(graph, "lstm"))
    (loop,) = [op for op in graph.get_operations() if op.type == "While"]
    body = loop.get_attr("body").name
    # the loop op sits in a call layer named after it, which holds a layer per function it runs
    inside = [n for n in nodes.values() if n["namespace"].startswith(f"{loop.name}/while/\u0192 {body}")]
    assert inside and all(n["id"] not in graph for n in inside)
    assert {n["label"] for n in inside} >= {"_Arg", "_Retval", "MatMul"}
    for node in nodes.values():             # every edge joins two nodes of the graph JSON
        assert all(edge["sourceNodeId"] in nodes for edge in node["incomingEdges"]), node["id"]


def test_gradient_ops_carry_the_gradient_colour():
    graph = gradreg.load_graph(str(TF_MODEL))
    with graph.as_default():
        gradreg.gradients([graph.get_tensor("loss/total:0")], [graph.get_tensor("x:0")])
    nodes = nodes_by_id(explorer_graph(graph, "grad.pb"))
    backward = [n for n in nodes.values() if n["namespace"].startswith("gradients")]
    assert backward and all(n["style"]["borderColor"] == "#ea580c" for n in backward)
    assert "style" not in nodes["dense/MatMul"]


# -- gradient magnitudes -----------------------------------------------------------------------

def test_gradient_magnitudes_equal_tensorflows(tmp_path):
    found = run_explorer(tmp_path, TF_MODEL, "--ys", "loss/total", "--feed", str(TF_INPUTS), "--plumbing")
    assert found["l2"]["name"] == "gradient L2 norm (of loss/total:0)"
    expected = np.load(TF_EXPECTED)
    measured = [key.split(":", 1)[1] for key in expected if key.startswith("l2:")]
    disconnected = set(expected["disconnected"].tolist())
    status = {name: result["value"] for name, result in found["status"]["results"].items()}
    assert set(status) == set(measured) | disconnected          # every op on the path, nothing else
    for name in measured:
        assert found["l2"]["results"][name]["value"] == pytest.approx(float(expected[f"l2:{name}"]), rel=1e-5,
                                                                       abs=1e-7), name
        assert found["max_abs"]["results"][name]["value"] == pytest.approx(float(expected[f"max_abs:{name}"]),
                                                                            rel=1e-5, abs=1e-7), name
        assert status[name] == (ZERO if expected[f"l2:{name}"] == 0 else FLOWS), name
    for name in disconnected:                 # reported as missing, never as a magnitude of 0
        assert status[name] == DISCONNECTED
        assert name not in found["l2"]["results"] and name not in found["max_abs"]["results"]
    zero = {"dead/Abs", "dead/Neg", "dead/sub"}
    assert all(found["l2"]["results"][name]["value"] == 0 for name in zero)
    assert not zero & set(found["log10_l2"]["results"])
    assert found["log10_l2"]["results"]["x"]["value"] == pytest.approx(np.log10(float(expected["l2:x"])), rel=1e-5)


def test_ops_off_the_path_from_the_xs_get_no_value(tmp_path):
    found = run_explorer(tmp_path, TF_MODEL, "--ys", "loss/total", "--xs", "dense/MatMul", "--feed", str(TF_INPUTS))
    status = found["status"]["results"]
    assert {"x", "frozen/StopGradient", "loss/Cast"}.isdisjoint(status)
    assert {"dense/MatMul", "act/Relu", "head/MatMul", "loss/total"} <= set(status)
    expected = np.load(TF_EXPECTED)
    assert found["l2"]["results"]["act/Relu"]["value"] == pytest.approx(float(expected["l2:act/Relu"]), rel=1e-5)


def test_gradient_magnitudes_of_an_onnx_model_equal_its_gradients_one_by_one(tmp_path):
    found = run_explorer(tmp_path, ONNX_CASE / "model.onnx", "--feed", str(ONNX_CASE / "inputs.npz"))
    inputs = dict(np.load(ONNX_CASE / "inputs.npz"))
    graph = gradreg.load_graph(str(ONNX_CASE / "model.onnx"))
    y = graph.get_tensor("y:0")                # the declared output: the default ys
    session = gradreg.Session(graph)
    shown = set(nodes_by_id(found["graph"]))
    assert set(found["l2"]["results"]) == shown
    for name in shown:
        (output,) = [t for t in graph.get_operation(name).outputs if t.dtype.is_floating][:1] or [None]
        with graph.as_default():
            (g,) = gradreg.gradients([y], [output])
        value = session.run(g, {"x:0": inputs["x"]})
        assert found["l2"]["results"][name]["value"] == pytest.approx(float(np.linalg.norm(value)), rel=1e-5), name
        assert found["max_abs"]["results"][name]["value"] == pytest.approx(float(np.abs(value).max()), rel=1e-5)
    assert found["l2"]["results"]["y"]["value"] == pytest.approx(np.sqrt(y.shape.num_elements()))


def test_gradient_magnitudes_of_a_saved_model_equal_tensorflows(tmp_path):
    expected = np.load(SAVED_MODEL / "expected.npz")
    np.save(tmp_path / "features.npy", expected["features"])
    np.save(tmp_path / "r.npy", expected["r"])
    found = run_explorer(tmp_path, SAVED_MODEL / "model", "--feed", f"features={tmp_path / 'features.npy'}",
                         "--grad-ys", f"output_0={tmp_path / 'r.npy'}", "--plumbing")
    l2, max_abs = found["l2"]["results"], found["max_abs"]["results"]
    for node, key in [("features", "grad/r/features"), ("probs/kernel", "grad/r/kernel")]:
        assert l2[node]["value"] == pytest.approx(float(np.linalg.norm(expected[key])), rel=1e-4)
        assert max_abs[node]["value"] == pytest.approx(float(np.abs(expected[key]).max()), rel=1e-4)
    assert found["graph"]["label"] == "model \u2014 signature serving_default"


def test_summarize_tells_missing_from_zero_and_from_non_finite():
    assert summarize([]) == NodeGradient(DISCONNECTED)
    assert summarize([(0.0, 0.0)]) == NodeGradient(ZERO, 0.0, 0.0)
    assert summarize([(9.0, 3.0), (16.0, 4.0)]) == NodeGradient(FLOWS, 5.0, 4.0)
    assert summarize([(np.nan, np.nan)]).status == "non-finite"
    assert summarize([(1.0, 1.0), (np.inf, np.inf)]).status == "non-finite"


def test_magnitudes_of_complex_empty_and_non_finite_gradients():
    graph = gradreg.Graph()
    with graph.as_default():
        x = gradreg.placeholder(gradreg.float32, [None], name="x")
        z = gradreg.complex(x, 2.0 * x, name="z")                  # complex: |g| is the modulus
        empty = gradreg.slice(x, [0], [0], name="empty")           # no elements: max |g| is 0
        logged = gradreg.log(x, name="logged")                     # 1/x at x = 0: an infinity
        loss = gradreg.add_n([gradreg.reduce_sum(gradreg.abs(z) ** 2), gradreg.reduce_sum(empty),
                              gradreg.reduce_sum(logged)], name="loss")
    found = gradient_magnitudes(graph, [loss], {"x:0": np.array([0.0, 1.0], np.float32)})
    with graph.as_default():
        (dz,) = gradreg.gradients([loss], [z])
    expected = gradreg.Session(graph).run(dz, {"x:0": np.array([0.0, 1.0], np.float32)})
    assert found["z"].l2 == pytest.approx(float(np.linalg.norm(expected)), rel=1e-6)
    assert found["z"].max_abs == pytest.approx(float(np.abs(expected).max()), rel=1e-6)
    assert found["empty"] == NodeGradient(ZERO, 0.0, 0.0)
    assert found["x"].status == "non-finite"


def test_node_data_keeps_disconnected_ops_out_of_the_numbers():
    found = {"a": NodeGradient(FLOWS, 2.0, 1.5), "b": NodeGradient(DISCONNECTED), "c": NodeGradient(ZERO, 0.0, 0.0)}
    l2 = node_data("g", found, "l2")["g"]
    assert l2["results"] == {"a": {"value": 2.0}, "c": {"value": 0.0}}
    status = node_data("g", found, "status")["g"]["results"]
    assert {k: v["value"] for k, v in status.items()} == {"a": "flows", "b": "disconnected", "c": "zero"}
    with pytest.raises(ValueError, match="unknown overlay"):
        node_data("g", found, "mean")


# -- the command line --------------------------------------------------------------------------

def test_without_gradient_flags_only_the_graph_is_written(tmp_path, capsys):
    found = run_explorer(tmp_path, TF_MODEL)
    assert set(found) == {"graph"}
    assert "open with: model-explorer " in capsys.readouterr().out


def test_the_printed_command_names_every_file(tmp_path, capsys):
    run_explorer(tmp_path, TF_MODEL, "--feed", str(TF_INPUTS))
    line = next(text for text in capsys.readouterr().out.splitlines() if text.startswith("open with:"))
    out = tmp_path / "out"
    assert line == (f"open with: model-explorer {out / 'graph.json'} --node_data_paths="
                    + ",".join(str(out / f"gradient_{o}.json") for o in OVERLAYS))


@pytest.mark.parametrize("flags, code, message", [
    (["--signature", "serve"], 2, "--signature applies to a SavedModel directory"),
    (["--ys", "nope"], 1, "nope"),
    (["--ys", "loss/total"], 1, "x"),                      # x is not fed
])
def test_errors_are_one_line_with_the_exit_code(tmp_path, capsys, flags, code, message):
    with pytest.raises(SystemExit) if code == 2 else _no_raise():
        result = main(["explorer", str(TF_MODEL), "-o", str(tmp_path / "out"), *flags])
        assert result == code
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "gradient_l2.json").exists()


def test_a_failed_run_leaves_no_directory_and_a_graph_only_run_flags_old_overlays(tmp_path, capsys):
    assert main(["explorer", str(TF_MODEL), "-o", str(tmp_path / "out"), "--ys", "nope"]) == 1
    assert not (tmp_path / "out").exists()
    run_explorer(tmp_path, TF_MODEL, "--feed", str(TF_INPUTS))
    capsys.readouterr()
    run_explorer(tmp_path, TF_MODEL)
    assert "gradient_l2.json, gradient_max_abs.json" in capsys.readouterr().err


def test_an_output_that_is_a_file_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "taken").write_text("")
    with pytest.raises(SystemExit) as exit_info:
        main(["explorer", str(TF_MODEL), "-o", str(tmp_path / "taken")])
    assert exit_info.value.code == 2 and "not a directory" in capsys.readouterr().err


class _no_raise:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_importing_gradreg_does_not_import_model_explorer():
    code = ("import sys, gradreg, gradreg.viz.explorer, gradreg.cli_explorer; "
            "print('model_explorer' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# -- Model Explorer's own data classes (the explorer extra) -------------------------------------

def test_model_explorer_reads_the_graph_and_the_node_data(tmp_path):
    pytest.importorskip("model_explorer")
    dacite = pytest.importorskip("dacite")
    from model_explorer import graph_builder, node_data_builder

    found = run_explorer(tmp_path, TF_MODEL, "--feed", str(TF_INPUTS))
    (graph_json,) = found["graph"]["graphs"]
    config = dacite.Config(strict=True)
    graph = dacite.from_dict(graph_builder.Graph, graph_json, config=config)
    assert [n.id for n in graph.nodes] == [n["id"] for n in graph_json["nodes"]]
    matmul = next(n for n in graph.nodes if n.id == "dense/MatMul")
    assert matmul.namespace == "dense" and matmul.incomingEdges[0].sourceNodeId == "x"
    for overlay in OVERLAYS:
        document = json.loads((tmp_path / "out" / f"gradient_{overlay}.json").read_text())
        # the status overlay's values are words, which Model Explorer's page shows (its summaries of
        # a group count them) but its Python class types as numbers only
        checked = config if overlay != "status" else dacite.Config(check_types=False)
        model_data = node_data_builder.ModelNodeData(graphsData={
            key: dacite.from_dict(node_data_builder.GraphNodeData, value, config=checked)
            for key, value in document.items()})
        (read,) = json.loads(model_data.to_json_string()).values()
        (ours,) = document.values()
        assert {key: read[key] for key in ours} == ours
        assert set(document) == {graph.id}


def test_the_adapter_extension_converts_model_files():
    pytest.importorskip("model_explorer")
    from model_explorer.utils import convert_adapter_response

    from gradreg_model_explorer.main import GradregAdapter

    adapter = GradregAdapter()
    assert {"onnx", "pb", "pbtxt"} <= set(adapter.metadata.fileExts)
    response = convert_adapter_response(adapter.convert(str(SAVED_MODEL / "model" / "saved_model.pb"), {}))
    (collection,) = response["graphCollections"]
    (graph,) = collection["graphs"]
    assert graph["id"] == "model \u2014 signature serving_default"
    ids = [n["id"] for n in graph["nodes"]]
    assert "functional_1/hidden_1/MatMul" in ids and not any(n["label"] == "VarHandleOp" for n in graph["nodes"])
    response = convert_adapter_response(adapter.convert(str(ONNX_CASE / "model.onnx"), {}))
    (graph,) = response["graphCollections"][0]["graphs"]
    written = nodes_by_id(explorer_graph(gradreg.load_graph(str(ONNX_CASE / "model.onnx")), "model.onnx"))
    assert [n["id"] for n in graph["nodes"]] == list(written)
