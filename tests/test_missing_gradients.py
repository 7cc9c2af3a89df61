"""Never a silently missing gradient: an x is "not connected" only when no path reaches it; a
path through an op gradreg cannot type, run or differentiate is an error naming the node, its op
type, what is missing and which known plugin would provide it (`gradreg check` lists them)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from google.protobuf import text_format

import gradreg as gr
from gradreg import cli, dtypes
from gradreg.errors import NoGradientError, TypeMismatchError
from gradreg.proto import graph_pb2
from gradreg.registry import PluginSource, Registry, get_registry
from gradreg.registry.family import OpFamily
from gradreg.registry.support import op_support

_F = 'attr { key: "T" value { type: DT_FLOAT } }'


def _graph(text: str) -> gr.Graph:
    return gr.import_graph_def(text_format.Parse(text, graph_pb2.GraphDef()))


# x feeds y = Frobnicate(x) + Sin(x): one path through an unknown op, one through Sin; w only
# through the unknown op; z only through Sin; v through Sin and a StopGradient of the unknown op.
TWO_PATHS = f'''
node {{ name: "x" op: "Placeholder" attr {{ key: "dtype" value {{ type: DT_FLOAT }} }} }}
node {{ name: "u" op: "Frobnicate" input: "x" }}
node {{ name: "s" op: "Sin" input: "x" {_F} }}
node {{ name: "y" op: "AddV2" input: "u" input: "s" {_F} }}
node {{ name: "z" op: "Cos" input: "s" {_F} }}
node {{ name: "w" op: "Sin" input: "u" {_F} }}
node {{ name: "stopped" op: "StopGradient" input: "u" {_F} }}
node {{ name: "v" op: "AddV2" input: "stopped" input: "s" {_F} }}
node {{ name: "other" op: "Placeholder" attr {{ key: "dtype" value {{ type: DT_FLOAT }} }} }}
'''


def test_dtype_never_equals_none():
    # np.dtype(None) is float64: a DType must not compare equal to None through it.
    assert dtypes.float64 != None  # noqa: E711  (the comparison under test)
    assert not dtypes.float64.__eq__(None)
    with pytest.raises(TypeMismatchError):
        dtypes.as_dtype(None)


def test_unknown_op_on_one_of_two_paths_is_an_error_not_a_partial_gradient():
    g = _graph(TWO_PATHS)
    with g.as_default(), pytest.raises(NoGradientError) as info:
        gr.gradients(g.get_tensor("y:0"), g.get_tensor("x:0"))
    message = str(info.value)
    assert "node 'u' (op Frobnicate)" in message
    assert "no op definition or gradient rule" in message


def test_unknown_op_as_the_only_path_is_an_error_not_unconnected():
    g = _graph(TWO_PATHS)
    with g.as_default(), pytest.raises(NoGradientError, match=r"node 'u' \(op Frobnicate\)"):
        gr.gradients(g.get_tensor("w:0"), g.get_tensor("x:0"))
    unknown = r"u:0: the type of node 'u' \(op Frobnicate\) is unknown"
    with g.as_default(), pytest.raises(NoGradientError, match=unknown):
        gr.gradients(g.get_tensor("u:0"), g.get_tensor("x:0"))


def test_a_stop_gradient_after_an_unknown_op_cuts_the_path_as_usual():
    # v = StopGradient(Frobnicate(x)) + Sin(x): the gradient never reaches the unknown op, so
    # building it is no error (running it needs the unknown op's value, which is one).
    g = _graph(TWO_PATHS)
    x = g.get_tensor("x:0")
    with g.as_default():
        (dv,) = gr.gradients(g.get_tensor("v:0"), [x])
    assert dv is not None
    assert not any(t.op.name == "u" for op in g.get_operations() if op.name.startswith("gradients")
                   for t in op.inputs if op.type not in ("Shape", "ShapeN"))


def test_unknown_op_off_the_path_changes_nothing():
    g = _graph(TWO_PATHS)
    x = g.get_tensor("x:0")
    with g.as_default():
        dz, dother = gr.gradients(g.get_tensor("z:0"), [x, g.get_tensor("other:0")])
    assert dother is None   # truly unconnected
    assert dz is not None
    error = gr.testing.compute_gradient_error(x, [2], g.get_tensor("z:0"), [2],
                                              x_init_value=np.array([0.3, -1.2], np.float32))
    assert error < 2e-2   # float32 central differences


def test_a_defined_op_without_a_gradient_names_the_plugin_that_defines_it():
    family = OpFamily("kerasgrad_test_nograd")
    family.op("KerasgradNoGrad", inputs=["x: T"], outputs=["y: T"], attrs=["T: type"])
    family.simple_kernel("KerasgradNoGrad", lambda x: x)
    registry = get_registry()
    registry.add_plugin(PluginSource("kerasgrad_test_nograd", lambda: family))
    try:
        g = gr.Graph()
        with g.as_default():
            x = gr.placeholder(gr.float32, [2], name="x")
            y = gr.sin(gr.apply_op("KerasgradNoGrad", x, name="n"))
            with pytest.raises(NoGradientError) as info:
                gr.gradients(y, x)
    finally:
        registry.remove_plugin("kerasgrad_test_nograd")
    message = str(info.value)
    assert "operation 'n' (op type: KerasgradNoGrad): no gradient rule" in message
    assert "plugin 'kerasgrad_test_nograd' defines the op but no gradient" in message


def test_support_names_a_known_plugin_that_is_not_loaded():
    # A registry with only the math family: Conv2D is the nn family's, which it lacks.
    registry = Registry([PluginSource("math", lambda: __import__("gradreg_plugins.math").math.family)])
    support = op_support("Conv2D", registry=registry)
    assert support.missing() == ["op definition", "numpy kernel", "gradient rule"]
    assert "plugin 'nn' provides op type 'Conv2D'" in support.hint()
    swish = op_support("Swish", registry=registry)
    if swish.definition is None:
        assert "pip install ./plugins/gradreg-swish" in swish.hint()
    assert op_support("MatMul", registry=registry).missing() == []
    assert op_support("NoSuchOpAnywhere", registry=registry).hint() == ""


def _write(tmp_path, text):
    path = tmp_path / "g.pbtxt"
    path.write_text(text)
    return str(path)


def test_cli_grad_exits_1_naming_the_unknown_op(tmp_path, capsys):
    path = _write(tmp_path, TWO_PATHS)
    code = cli.main(["grad", path, "--ys", "y", "--xs", "x", "-o", str(tmp_path / "out.pb")])
    _, err = capsys.readouterr()
    assert code == 1
    assert "node 'u' (op Frobnicate)" in err and "no op definition" in err
    code = cli.main(["grad", path, "--ys", "z", "--xs", "x,other", "-o", str(tmp_path / "out.pb")])
    out, _ = capsys.readouterr()
    assert code == 0 and "d/dother:0: none (not connected)" in out


def test_cli_check_lists_incomplete_op_types_and_fails_only_on_the_path(tmp_path, capsys):
    path = _write(tmp_path, TWO_PATHS)
    code = cli.main(["check", path])            # the outputs y, w, v need u: exit 1, NEEDED
    out, _ = capsys.readouterr()
    assert code == 1
    assert "NEEDED Frobnicate: no op definition, " in out and "numpy kernel, gradient rule (e.g. u)" in out
    assert "ON PATH" not in out
    code = cli.main(["check", path, "--ys", "y", "--xs", "x", "--backend", "numpy"])
    out, _ = capsys.readouterr()
    assert code == 1
    assert "ON PATH Frobnicate: no op definition, numpy kernel, gradient rule (e.g. u)" in out
    code = cli.main(["check", path, "--ys", "z", "--xs", "x", "--json"])
    report = json.loads(capsys.readouterr()[0])
    assert code == 0 and report["path_ok"]
    assert [r["op_type"] for r in report["incomplete"]] == ["Frobnicate"]


def test_cli_check_looks_inside_functions_called_on_the_path(tmp_path, capsys):
    g = gr.Graph()
    with g.as_default():
        x = gr.placeholder(gr.float32, [3], name="x")

        @gr.function
        def f(v):
            return gr.sin(v) * 2.0
        gr.identity(f(x), name="y")
    fdef = g.library.get(g.library.names()[0])
    sin = next(n for n in fdef.node_def if n.op == "Sin")
    sin.op = "Frobnicate"
    path = str(tmp_path / "f.pb")
    gr.save_graph(g, path)
    code = cli.main(["check", path, "--ys", "y", "--xs", "x", "--backend", "numpy"])
    out, _ = capsys.readouterr()
    assert code == 1
    assert f"ON PATH Frobnicate: no op definition, numpy kernel, gradient rule (e.g. {fdef.signature.name}/" in out
