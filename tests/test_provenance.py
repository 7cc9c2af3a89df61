"""Gradient graphs record which rule made each node (``_gradreg_rule``: the plugin or Python source,
the rule, the distribution and version), the record survives GraphDef files, TensorFlow's
importer and ONNX conversion, and ``gradreg plugins --trace`` reads it back against what is
installed."""
from __future__ import annotations

import json

import numpy as np
import pytest

import gradreg as gr
from gradreg.autodiff.provenance import RULE_ATTR, RuleOrigin, rule_origins
from gradreg.cli import main
from gradreg.registry import get_registry


def _rule(op):
    return op.get_attr(RULE_ATTR).decode() if op.has_attr(RULE_ATTR) else None


def _tanh_gradient():
    g = gr.Graph()
    with g.as_default():
        x = gr.placeholder(gr.float32, [3], name="x")
        y = gr.reduce_sum(gr.tanh(x) * x)
        (dx,) = gr.gradients(y, [x])
    return g, x, dx


def test_each_rule_marks_the_nodes_it_makes_and_gradreg_its_own_none():
    g, _, _ = _tanh_gradient()
    release = get_registry().release("math")
    assert release.startswith("gradreg==")
    rules = {op.name: _rule(op) for op in g.get_operations()}
    assert rules["gradients/Tanh_grad/TanhGrad"] == f"math:Tanh {release}"
    assert rules["gradients/mul_grad/mul"] == rules["gradients/mul_grad/mul_1"] == f"math:Mul {release}"
    assert rules["gradients/Sum_grad/BroadcastTo"] == f"math:Sum {release}"
    assert rules["gradients/x_grad/AddN"] is None       # summing contributions is gradreg's own
    assert rules["Tanh"] is None and rules["x"] is None  # the forward graph is untouched
    origins = rule_origins(g.get_operations())
    assert {(o.source, o.rule, o.distribution) for o in origins} == {
        ("math", "Tanh", "gradreg"), ("math", "Mul", "gradreg"), ("math", "Sum", "gradreg")}


def test_python_rules_and_custom_gradients_are_named_by_their_source():
    @gr.RegisterGradient("ProvenanceDoubleSquare")
    def _double(op, grad):
        return grad * 4.0 * op.inputs[0]

    @gr.custom_gradient
    def clipped(x):
        return gr.identity(x), lambda dy: gr.clip_by_value(dy, -1.0, 1.0)

    g = gr.Graph()
    with g.as_default():
        x = gr.placeholder(gr.float32, [2], name="x")
        with g.gradient_override_map({"Square": "ProvenanceDoubleSquare"}):
            y = gr.square(x)
        (dx,) = gr.gradients(clipped(y), [x])
    rules = {_rule(op) for op in g.get_operations()} - {None}
    assert f"python:{__name__}:ProvenanceDoubleSquare" in rules
    assert any(r.startswith("custom_gradient:CustomGradient-") for r in rules)
    np.testing.assert_allclose(gr.Session(g).run(dx, {x: [0.1, 2.0]}), [0.4, 8.0], rtol=1e-6)


def test_rule_origins_parse_back_what_was_written():
    for text in ("swish:Swish gradreg-swish==0.1.0", "python:my.module:Square", "custom_gradient:CustomGradient-3",
                 "adhoc:Frob", "adhoc:Frob some-dist"):
        assert str(RuleOrigin.parse(text)) == text
    origin = RuleOrigin.parse(b"swish:Swish gradreg-swish==0.1.0")
    assert (origin.plugin, origin.rule, origin.distribution, origin.version) == ("swish", "Swish", "gradreg-swish",
                                                                                 "0.1.0")
    assert RuleOrigin.parse("python:m:Square").plugin is None


def test_the_record_survives_a_graphdef_file(tmp_path):
    g, _, _ = _tanh_gradient()
    for name in ("grad.pb", "grad.pbtxt"):
        gr.save_graph(g, tmp_path / name)
        loaded = gr.load_graph(tmp_path / name)
        assert rule_origins(loaded.get_operations()) == rule_origins(g.get_operations())


def test_gradreg_plugins_trace_names_each_rule_and_compares_it_with_what_is_installed(tmp_path, capsys):
    g, _, dx = _tanh_gradient()
    with g.as_default():
        gone = gr.identity(dx, name="from_elsewhere")
        gone.op.set_attr(RULE_ATTR, b"gone:Frob gone-dist==1.2", "string")
        older = gr.identity(dx, name="older")
        older.op.set_attr(RULE_ATTR, b"math:Tanh gradreg==0.0.1", "string")
    gr.save_graph(g, tmp_path / "grad.pbtxt")
    assert main(["plugins", "--trace", str(tmp_path / "grad.pbtxt"), "--json"]) == 0
    rows = {f"{r['source']}:{r['rule']} {r['version']}": r for r in json.loads(capsys.readouterr().out)["rules"]}
    release = get_registry().release("math")
    assert rows[f"math:Tanh {release.split('==')[1]}"]["here"] == "installed, same version"
    assert rows["math:Tanh 0.0.1"]["here"] == f"installed as {release}: differs from the file's gradreg==0.0.1"
    assert rows["gone:Frob 1.2"] == {"rule": "Frob", "source": "gone", "distribution": "gone-dist", "version": "1.2",
                                     "nodes": 1, "example": "from_elsewhere",
                                     "here": "not installed (pip install gone-dist==1.2)"}
    assert rows[f"math:Mul {release.split('==')[1]}"]["nodes"] == 2
    assert main(["plugins", "--trace", str(tmp_path / "grad.pbtxt")]) == 0
    assert "  gone:Frob  from gone-dist==1.2  1 nodes (e.g. from_elsewhere)  here: not installed (pip install " \
           "gone-dist==1.2)" in capsys.readouterr().out


def test_tensorflow_imports_and_runs_a_gradient_graph_with_the_record():
    tf = pytest.importorskip("tensorflow")
    g, x, dx = _tanh_gradient()
    value = np.array([0.5, -1.0, 2.0], np.float32)
    ours = gr.Session(g).run(dx, {x: value})
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(tf.compat.v1.GraphDef.FromString(g.as_graph_def().SerializeToString()), name="")
        assert graph.get_operation_by_name("gradients/Tanh_grad/TanhGrad").get_attr(RULE_ATTR).startswith(b"math:Tanh ")
        with tf.compat.v1.Session(graph=graph) as session:
            theirs = session.run(dx.name, {x.name: value})
    np.testing.assert_allclose(theirs, ours, rtol=1e-6)


def test_a_gradient_graph_with_the_record_converts_to_onnx_that_onnxruntime_runs(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    g = gr.Graph()
    with g.as_default():
        x = gr.placeholder(gr.float32, [3], name="x")
        (dx,) = gr.gradients(gr.sin(x) * x, [x])
    assert any(op.has_attr(RULE_ATTR) for op in g.get_operations())
    gr.save_graph(g, tmp_path / "grad.onnx", outputs={"dx": dx})
    import onnx
    metadata = {p.key: p.value for p in onnx.load(str(tmp_path / "grad.onnx")).metadata_props}
    release = get_registry().release("math")
    assert json.loads(metadata["gradreg.gradient_rules"]) == {f"math:Mul {release}": 2, f"math:Sin {release}": 2}
    value = np.array([0.5, -1.0, 2.0], np.float32)
    got = ort.InferenceSession(str(tmp_path / "grad.onnx"), providers=["CPUExecutionProvider"]).run(["dx"],
                                                                                                    {"x": value})
    np.testing.assert_allclose(got[0], gr.Session(g).run(dx, {x: value}), rtol=1e-6)
