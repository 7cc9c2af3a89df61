"""Wall-clock limits (issue 27, gradreg.deadline): a run's deadline and each loop's own time limit stop
endless work -- inside a functional While, a v1 loop, an ONNX Loop, a chain of library function
calls, between nodes, while loading -- with a DeadlineExceededError naming the node, loop or file and
how to raise the limit; the command line prints one line and exits 1; legitimate work under the
defaults is untouched.

No test asserts how long anything took (the machine is shared): the limits are set either far
below any run's duration (a deadline already past when the work starts) or far above it."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from corpus import ROOT
from google.protobuf import text_format

import gradreg as gr
from gradreg import cli, config, deadline, errors
from gradreg.proto import function_pb2, graph_pb2

BACKENDS = ["numpy", "numba"]
PAST = 1e-9          # a time limit that has passed by the first check


def _one_line(err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


# -- graphs with loops that never end ---------------------------------------------------------------

def endless_while_v2() -> tuple[graph_pb2.GraphDef, list[str], dict]:
    """The corpus's TensorFlow-written functional While, its condition made always true."""
    gd = graph_pb2.GraphDef.FromString((ROOT / "cond_while_v2" / "forward.pb").read_bytes())
    loop = next(n for n in gd.node if n.op in ("While", "StatelessWhile"))
    cond_name = next(e.value.func.name for e in loop.attr if e.key == "cond")
    cond = next(f for f in gd.library.function if f.signature.name == cond_name)
    true = cond.node_def.add(name="always", op="Const")
    text_format.Parse('attr { key: "dtype" value { type: DT_BOOL } } '
                      'attr { key: "value" value { tensor { dtype: DT_BOOL tensor_shape {} bool_val: true } } }', true)
    for entry in cond.ret:
        entry.value = "always:output:0"
    import json
    case = json.loads((ROOT / "cond_while_v2" / "case.json").read_text())
    feeds = dict(np.load(ROOT / "cond_while_v2" / "inputs.npz"))
    return gd, case["ys"], feeds


def endless_v1_loop() -> tuple[gr.Graph, gr.Tensor]:
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [], name="x")
        _, y = gr.while_loop(lambda i, a: gr.constant(True), lambda i, a: (i + 1, a * 0.5), [0, x])
    return graph, y


def huge_onnx_loop():
    """An ONNX Loop of 2**62 iterations adding 1 to a float."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from gradreg_plugins.onnx.format import load_onnx
    tvi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Add", ["x_in", "one"], ["x_out"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body",
        [tvi("i", TensorProto.INT64, []), tvi("c_in", TensorProto.BOOL, []), tvi("x_in", TensorProto.FLOAT, [])],
        [tvi("c_out", TensorProto.BOOL, []), tvi("x_out", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    graph = helper.make_graph([helper.make_node("Loop", ["n", "", "x0"], ["y"], body=body)], "g",
                              [tvi("n", TensorProto.INT64, [])], [tvi("y", TensorProto.FLOAT, [])],
                              [numpy_helper.from_array(np.array(0.0, np.float32), "x0")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert onnx is not None
    return load_onnx(model)


def doubling_calls(depth: int) -> gr.Graph:
    """f0(x) = f1(x) + f1(x), f1 likewise, ... f<depth>(x) = x: 2**depth calls, no loop."""
    library = function_pb2.FunctionDefLibrary()
    for k in range(depth + 1):
        f = library.function.add()
        f.signature.name = f"f{k}"
        f.signature.input_arg.add(name="x", type=gr.float32.enum)
        f.signature.output_arg.add(name="y", type=gr.float32.enum)
        if k == depth:
            text_format.Parse('name: "i" op: "Identity" input: "x" attr { key: "T" value { type: DT_FLOAT } }',
                              f.node_def.add())
            f.ret.add(key="y", value="i:output:0")
            continue
        for call in ("a", "b"):
            text_format.Parse(f'name: "{call}" op: "PartitionedCall" input: "x" '
                              'attr { key: "Tin" value { list { type: DT_FLOAT } } } '
                              'attr { key: "Tout" value { list { type: DT_FLOAT } } } '
                              f'attr {{ key: "f" value {{ func {{ name: "f{k + 1}" }} }} }}', f.node_def.add())
        text_format.Parse('name: "s" op: "AddV2" input: "a:output:0" input: "b:output:0" '
                          'attr { key: "T" value { type: DT_FLOAT } }', f.node_def.add())
        f.ret.add(key="y", value="s:z:0")
    gd = graph_pb2.GraphDef()
    gd.library.CopyFrom(library)
    text_format.Parse('node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } } '
                      'node { name: "call" op: "PartitionedCall" input: "x" '
                      'attr { key: "Tin" value { list { type: DT_FLOAT } } } '
                      'attr { key: "Tout" value { list { type: DT_FLOAT } } } '
                      'attr { key: "f" value { func { name: "f0" } } } }', gd)
    return gr.import_graph_def(gd, source="doubling.pb")


def scalar_chain(n: int) -> tuple[gr.Graph, gr.Tensor, gr.Tensor]:
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [], name="x")
        y = x
        for _ in range(n):
            y = y * 1.0001
    return graph, x, y


# -- the deadline fires where the work is -----------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_past_its_deadline_stops_inside_a_functional_while(backend):
    gd, ys, feeds = endless_while_v2()
    graph = gr.import_graph_def(gd, source="endless.pb")
    session = gr.Session(graph, backend=backend, loop_timeout=0)
    with pytest.raises(errors.DeadlineExceededError, match="--timeout") as caught:
        session.run(ys, feeds, timeout=0.2)
    assert caught.value.op_type in ("While", "StatelessWhile")
    assert f"(op {caught.value.op_type})" in str(caught.value)
    assert isinstance(caught.value, errors.ExecutionError)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_past_its_own_time_limit_stops(backend):
    gd, ys, feeds = endless_while_v2()
    graph = gr.import_graph_def(gd, source="endless.pb")
    with pytest.raises(errors.DeadlineExceededError, match=r"ran longer than its time limit of 0\.2 s") as caught:
        gr.Session(graph, backend=backend, loop_timeout=0.2).run(ys, feeds)
    assert "--loop-timeout" in str(caught.value) and "GRADREG_LOOP_TIMEOUT" in str(caught.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_v1_loop_stops_at_the_deadline_and_at_its_time_limit(backend):
    graph, y = endless_v1_loop()
    session = gr.Session(graph, backend=backend, loop_timeout=0)
    with pytest.raises(errors.DeadlineExceededError, match=r"loop frame '.*' \(LoopCond '.*'\).*--timeout"):
        session.run(y, {"x:0": 1.0}, timeout=0.2)
    with pytest.raises(errors.DeadlineExceededError, match="ran longer than its time limit of 0.2 s"):
        gr.Session(graph, backend=backend, loop_timeout=0.2).run(y, {"x:0": 1.0})


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_onnx_loop_with_a_huge_trip_count_stops(backend):
    graph = huge_onnx_loop()
    with pytest.raises(errors.DeadlineExceededError, match=r"\(op onnx::Loop\): the loop ran longer") as caught:
        gr.Session(graph, backend=backend, loop_timeout=0.2).run("y", {"n": np.int64(2**62)})
    assert caught.value.op_type == "onnx::Loop"
    with pytest.raises(errors.DeadlineExceededError, match="time limit of 0.2 s passed"):
        gr.Session(graph, backend=backend, loop_timeout=0).run("y", {"n": np.int64(2**62)}, timeout=0.2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_library_functions_calling_each_other_twice_over_stop_at_the_deadline(backend):
    graph = doubling_calls(40)              # 2**40 calls: no loop, no end in sight
    # The check that fires is one at a call or one after a node of the functions (their values'
    # sizes are unknown): it names that node.
    with pytest.raises(errors.DeadlineExceededError, match=r"node '[abs]' \(op \w+\): the time limit of 0\.3 s "
                                                           r"passed") as caught:
        gr.Session(graph, backend=backend).run("call:0", {"x:0": 1.0}, timeout=0.3)
    assert caught.value.node_name in {"a", "b", "s"}
    assert gr.Session(doubling_calls(3), backend=backend).run("call:0", {"x:0": 1.5}) == 12.0
    # A call checks the deadline before the function's first node.
    with pytest.raises(errors.DeadlineExceededError, match=r"node 'call' \(op PartitionedCall\): the time limit "
                                                           r"of 1e-09 s passed calling function 'f0'"):
        gr.Session(doubling_calls(0), backend=backend).run("call:0", {"x:0": 1.0}, timeout=PAST)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_plan_checks_its_deadline_between_nodes(backend):
    graph, x, y = scalar_chain(600)        # small nodes: a check every few hundred
    session = gr.Session(graph, backend=backend)
    assert session.run(y, {x: 1.0}) == pytest.approx(1.0001 ** 600, rel=1e-4)
    with pytest.raises(errors.DeadlineExceededError, match=r"\(op Mul\): the time limit .* after this node"):
        session.run(y, {x: 1.0}, timeout=PAST)
    big = gr.Graph()
    with big.as_default():                  # a node of unknown size: checked right after it
        v = gr.placeholder(gr.float32, None, name="v")
        w = gr.reduce_sum(gr.exp(v), name="w")
    with pytest.raises(errors.DeadlineExceededError, match=r"node 'Exp' \(op Exp\)"):
        gr.Session(big, backend=backend, timeout=PAST).run(w, {v: np.ones(10, np.float32)})


def test_loading_checks_the_current_deadline(tmp_path):
    graph, _, _ = scalar_chain(50)
    path = tmp_path / "chain.pb"
    gr.save_graph(graph, path)
    text = tmp_path / "chain.pbtxt"
    gr.save_graph(graph, text)
    for file in (path, text):
        with pytest.raises(errors.DeadlineExceededError, match=f"{file.name}: the time limit of 1e-09 s passed "
                                                               f"while (loading|parsing)"), gr.time_limit(PAST):
            gr.load_graph(file)
    assert len(gr.load_graph(path)) == len(graph)     # no deadline outside the block


def test_the_earlier_deadline_holds_and_each_run_leaves_none_behind():
    graph, x, y = scalar_chain(600)
    session = gr.Session(graph, timeout=3600)
    with gr.time_limit(PAST), pytest.raises(errors.DeadlineExceededError):
        session.run(y, {x: 1.0})           # the enclosing limit, not the session's hour
    with gr.time_limit(3600) as outer:
        with gr.time_limit(7200) as inner:
            assert inner is outer          # a later one does not extend it
        with gr.time_limit(10) as inner:
            assert inner.at < outer.at and inner.seconds == 10
    assert deadline.current() is None
    assert session.context.deadlines.at == deadline.NEVER
    with pytest.raises(errors.DeadlineExceededError):
        session.run(y, {x: 1.0}, timeout=PAST)
    assert session.context.deadlines.at == deadline.NEVER      # taken down after the error too
    assert session.run(y, {x: 2.0}) == pytest.approx(2 * 1.0001 ** 600, rel=1e-4)


# -- the defaults -----------------------------------------------------------------------------------

def test_the_defaults():
    assert config.loop_timeout == config.DEFAULT_LOOP_TIMEOUT == 10.0
    assert config.timeout == config.DEFAULT_TIMEOUT == 0.0
    assert config.CLI_DEFAULT_TIMEOUT == 300.0
    session = gr.Session(gr.Graph())
    assert session.context.loop_timeout == 10.0 and session.timeout == 0.0
    assert gr.Session(gr.Graph(), loop_timeout=0).context.loop_timeout is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_legitimate_loop_under_the_defaults_runs_to_its_end(backend):
    gd, ys, feeds = endless_while_v2()
    graph = gr.import_graph_def(graph_pb2.GraphDef.FromString((ROOT / "cond_while_v2" / "forward.pb").read_bytes()))
    expected = dict(np.load(ROOT / "cond_while_v2" / "expected.npz")) if (
        ROOT / "cond_while_v2" / "expected.npz").exists() else None
    values = gr.Session(graph, backend=backend).run(ys, feeds)
    if expected is not None:
        for name, value in zip(ys, values):
            key = name if name in expected else name.replace(":", "_")
            if key in expected:
                np.testing.assert_allclose(value, expected[key], rtol=1e-5)
    graph, y = gr.Graph(), None
    with graph.as_default():
        x = gr.placeholder(gr.float64, [], name="x")
        _, y = gr.while_loop(lambda i, a: i < 20_000, lambda i, a: (i + 1, a + 1.0), [0, x])
    assert gr.Session(graph, backend=backend).run(y, {x: 0.5}) == 20_000.5


@pytest.mark.parametrize("value, expected", [
    ("2.5", 2.5), ("0", 0.0), (" 7 ", 7.0), ("", 10.0), ("soon", 10.0), ("-1", 10.0), ("inf", 10.0), ("nan", 10.0),
])
def test_a_time_limit_from_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv("GRADREG_TEST_SECONDS", value)
    with __import__("warnings").catch_warnings(record=True) as caught:
        __import__("warnings").simplefilter("always")
        assert config._env_seconds("GRADREG_TEST_SECONDS", 10.0) == expected
    assert bool(caught) == (value.strip() not in ("", "0", "2.5", "7")), [str(w.message) for w in caught]


def test_the_environment_is_read_on_import():
    code = "from gradreg import config; print(config.timeout, config.loop_timeout)"
    env = {k: v for k, v in os.environ.items() if not k.endswith("TIMEOUT")}
    done = subprocess.run([sys.executable, "-c", code], env={**env, "GRADREG_TIMEOUT": "2.5",
                                                              "GRADREG_LOOP_TIMEOUT": "0"},
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["2.5", "0.0"]


# -- the command line ---------------------------------------------------------------------------------

def test_the_command_line_stops_an_endless_loop_with_one_line(tmp_path, capsys):
    gd, ys, feeds = endless_while_v2()
    path = tmp_path / "endless.pb"
    path.write_bytes(gd.SerializeToString())
    np.savez(tmp_path / "feeds.npz", **feeds)
    base = ["run", str(path), "--feed", str(tmp_path / "feeds.npz"), "--fetch", ",".join(ys)]
    assert cli.main([*base, "--loop-timeout", "0.2"]) == 1
    _one_line(capsys.readouterr().err, "gradreg run: error:", "ran longer than its time limit of 0.2 s",
              "--loop-timeout")
    assert cli.main([*base, "--loop-timeout", "0", "--timeout", "0.5"]) == 1
    _one_line(capsys.readouterr().err, "time limit of 0.5 s passed", "--timeout")
    assert config.timeout == 0.0 and config.loop_timeout == 10.0 and deadline.current() is None


def test_the_command_line_refuses_a_bad_number_of_seconds(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["inspect", "g.pb", "--timeout", "soon"])
    assert exited.value.code == 2
    assert "not a number of seconds" in capsys.readouterr().err


def test_the_command_line_bounds_loading_and_shows_its_default(tmp_path, capsys, monkeypatch):
    graph, _, _ = scalar_chain(20)
    path = tmp_path / "g.pbtxt"
    gr.save_graph(graph, path)
    assert cli.main(["inspect", str(path), "--timeout", "1e-9"]) == 1
    _one_line(capsys.readouterr().err, "g.pbtxt: the time limit of 1e-09 s passed", "--timeout")
    assert cli.main(["inspect", str(path)]) == 0
    capsys.readouterr()
    monkeypatch.delenv("GRADREG_TIMEOUT", raising=False)
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    assert "--loop-timeout, --timeout" in " ".join(capsys.readouterr().out.split())   # named, described once:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--timeout SECONDS stop the command, loading included" in help_text and "(default 300)" in help_text
    assert "--loop-timeout SECONDS stop any loop after SECONDS" in help_text


def test_a_process_running_an_endless_loop_exits_1(tmp_path):
    graph, y = endless_v1_loop()
    path = tmp_path / "loop.pb"
    gr.save_graph(graph, path)
    done = subprocess.run([sys.executable, "-m", "gradreg", "run", str(path), "--feed", "x=1", "--fetch", y.name,
                           "--loop-timeout", "0.5"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    _one_line(done.stderr, "ran longer than its time limit of 0.5 s")
