"""The command line as a new user meets it (issue 15 item 2, issue 12 item 3): --version, help and
examples, exit codes, closed pipes, run --json / --checkpoint / inline feeds, grad without -o,
--backend, "did you mean", inspect's signature and --nodes, plugins --op, gradreg ops, .json."""
from __future__ import annotations

import argparse
import importlib.metadata
import io
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from corpus import ROOT, assert_close, load_case

import gradreg as gr
from gradreg import cli
from gradreg.registry import get_registry

DATA = pathlib.Path(__file__).parent / "data"
V1 = DATA / "tf_models" / "saved_models" / "v1_checkpoint"     # a TF1 Saver checkpoint and its graph
REPO = pathlib.Path(__file__).resolve().parent.parent


def run_cli(argv, capsys):
    """main() in process: (exit status, stdout, stderr); usage errors exit through SystemExit(2)."""
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def gradreg_process(*argv, **kwargs):
    """gradreg in a child process (python -m gradreg), as a shell runs it."""
    return subprocess.run([sys.executable, "-m", "gradreg", *map(str, argv)], capture_output=True, text=True,
                          timeout=120, **kwargs)


def _subparsers(parser):
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


# -- help, version, exit codes ------------------------------------------------------------------

def test_version_comes_from_the_package_metadata():
    done = gradreg_process("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"gradreg {importlib.metadata.version('gradreg')}"


def test_bare_gradreg_prints_help_and_exits_0(capsys):
    code, out, err = run_cli([], capsys)
    assert code == 0 and err == ""
    assert out.startswith("usage: gradreg")
    for command in _subparsers(cli.build_parser()):
        assert re.search(rf"^    {command}(\s|$)", out, re.MULTILINE), command


def test_every_option_has_help_and_every_command_an_example():
    parser = cli.build_parser()
    for name, sub in _subparsers(parser).items():
        assert sub.epilog and f"gradreg {name} " in sub.epilog, f"{name}: no example in its epilog"
        assert sub.formatter_class is argparse.RawDescriptionHelpFormatter
        for action in sub._actions:
            shared = action.dest in SHARED_OPTIONS   # described once, in `gradreg --help`
            assert action.help and (action.help != argparse.SUPPRESS) != shared, \
                f"{name} {action.option_strings or action.dest}"
        assert "`gradreg --help` describes them" in sub.epilog, name
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            assert action.help and action.help != argparse.SUPPRESS, action.option_strings


SHARED_OPTIONS = {"debug", "quiet", "allow_files", "max_loop_iterations", "max_nodes", "max_function_depth",
                  "max_op_arity", "loop_timeout", "timeout"}


def test_the_resource_limits_are_described_once(capsys):
    """`gradreg --help` describes --debug and the limits; each command's help points there
    instead of repeating their twelve lines, and every command still takes them."""
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    top = capsys.readouterr().out
    assert top.count("stop any while loop after N iterations") == 1 and "resource limits, for every command" in top
    for name in _subparsers(cli.build_parser()):
        with pytest.raises(SystemExit):
            cli.main([name, "--help"])
        text = capsys.readouterr().out
        assert "--max-nodes N" not in text and "refuse graph files" not in text, name
        assert "`gradreg --help` describes them" in text, name
    args = cli.build_parser().parse_args(["inspect", "g.pb", "--max-nodes", "7", "--debug"])
    assert args.max_nodes == 7 and args.debug


def test_exit_codes_and_one_line_errors(tmp_path):
    usage = gradreg_process("run", ROOT / "cond_v1" / "forward.pb", "--no-such-option")
    assert usage.returncode == 2 and "unrecognized arguments" in usage.stderr
    missing = gradreg_process("inspect", tmp_path / "missing.pb")
    assert missing.returncode == 1
    assert len(missing.stderr.strip().splitlines()) == 1 and "missing.pb" in missing.stderr
    assert "Traceback" not in missing.stderr
    debug = gradreg_process("inspect", tmp_path / "missing.pb", "--debug")
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    empty_feed = gradreg_process("run", ROOT / "cond_v1" / "forward.pb", "--feed", "x=/dev/null", "--fetch", "y")
    assert empty_feed.returncode == 1 and len(empty_feed.stderr.strip().splitlines()) == 1
    assert "/dev/null: not a readable .npy" in empty_feed.stderr and "EOFError" not in empty_feed.stderr


def test_a_closed_pipe_ends_quietly(tmp_path):
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [4], name="x")
        for i in range(3000):
            x = gr.identity(x, name=f"a_rather_long_node_name_to_fill_the_pipe_{i}")
    gr.save_graph(graph, tmp_path / "big.pb")
    # `gradreg inspect big.pb --nodes | head -1`: the reader leaves after one line
    process = subprocess.Popen([sys.executable, "-m", "gradreg", "inspect", str(tmp_path / "big.pb"), "--nodes"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = process.stdout.readline()
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 0
    assert first.decode().startswith("graph: ") and stderr == ""


# -- run --------------------------------------------------------------------------------------------

def test_run_json_gives_values_as_nested_lists(capsys):
    case = load_case("mlp_softmax_xent")
    code, out, _ = run_cli(["run", case.forward_pb, "--feed", case.path / "inputs.npz", "--fetch", "loss,h",
                            "--json"], capsys)
    assert code == 0
    outputs = json.loads(out)["outputs"]
    assert [(o["name"], o["dtype"], o["shape"]) for o in outputs] == [("loss:0", "float32", []),
                                                                       ("h:0", "float32", [8, 16])]
    assert_close(np.float32(outputs[0]["values"]), case.expected["y:loss:0"], "loss")
    h = gr.Session(gr.load_graph(str(case.forward_pb))).run("h:0", case.feeds())
    np.testing.assert_array_equal(np.asarray(outputs[1]["values"], np.float32), h)


def test_inline_feeds_take_the_placeholders_dtype(capsys):
    case = load_case("cond_v1")
    x = json.dumps(case.inputs["x:0"].tolist())       # float32 -> decimal -> float32 is exact
    p = json.dumps(bool(case.inputs["p:0"]))
    code, out, _ = run_cli(["run", case.forward_pb, "--feed", f"x={x}", "--feed", f"p={p}", "--fetch", "y,x",
                            "--json"], capsys)
    assert code == 0
    y, fed = json.loads(out)["outputs"]
    assert_close(np.float32(y["values"]), case.expected["y:y:0"], "y")
    assert fed["dtype"] == "float32" and fed["values"] == case.inputs["x:0"].tolist()
    code, out, _ = run_cli(["run", case.forward_pb, "--feed", "x=[1,2,3]", "--feed", "p=1", "--fetch", "x",
                            "--json"], capsys)
    assert code == 0 and json.loads(out)["outputs"][0]["dtype"] == "float32"   # ints given, float32 fed


def test_inline_feed_errors(capsys):
    graph = ROOT / "cond_v1" / "forward.pb"
    code, _, err = run_cli(["run", graph, "--feed", "x=[1,2", "--fetch", "y"], capsys)
    assert code == 1 and "'[1,2' is neither a file nor a value" in err
    code, _, err = run_cli(["run", graph, "--feed", "x=[[1],[2,3]]", "--fetch", "y"], capsys)
    assert code == 1 and "x=" not in err and "[[1],[2,3]]" in err
    code, _, err = run_cli(["run", graph, "--feed", "x=missing.npy", "--fetch", "y"], capsys)
    assert code == 1 and "missing.npy: no such file" in err


def test_small_arrays_print_in_full_large_ones_summarised(capsys):
    case = load_case("mlp_softmax_xent")
    code, out, _ = run_cli(["grad", case.forward_pb, "--ys", "loss", "--xs", "b2,w1", "--feed",
                            case.path / "inputs.npz"], capsys)
    assert code == 0
    b2 = out.split("d/db2:0: ")[1].split("d/dw1:0")[0]
    assert b2.splitlines()[0].endswith("float32 [5]")
    assert_close(_printed_numbers(b2, (5,)), case.gradient_values()["b2:0"], "db2 as printed")
    w1 = out.split("d/dw1:0: ")[1]
    assert "float32 [12, 16]  min=" in w1 and len(w1.splitlines()) == 1
    code, out, _ = run_cli(["grad", case.forward_pb, "--ys", "loss", "--xs", "w1", "--feed",
                            case.path / "inputs.npz", "--threshold", "1000"], capsys)
    assert code == 0
    assert_close(_printed_numbers(out.split("d/dw1:0: ")[1], (12, 16)), case.gradient_values()["w1:0"], "dw1")


def _printed_numbers(text: str, shape: tuple[int, ...]) -> np.ndarray:
    """The numbers of a printed array (the lines after its header), as float32 of ``shape``."""
    body = " ".join(text.splitlines()[1:])
    return np.array([float(v) for v in re.findall(r"-?\d+\.\d*(?:e[-+]?\d+)?", body)], np.float32).reshape(shape)


def test_run_restores_a_tensorflow_checkpoint(capsys):
    expected = np.load(V1 / "expected.npz")
    code, out, _ = run_cli(["run", V1 / "graph.pb", "--checkpoint", V1 / "model.ckpt-3", "--feed",
                            V1 / "inputs.npz", "--fetch", "loss,dense/kernel/read", "--json"], capsys)
    assert code == 0
    loss, kernel = json.loads(out)["outputs"]
    np.testing.assert_allclose(np.float32(loss["values"]), expected["y:loss:0"], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(kernel["values"], np.float32), expected["var:dense/kernel"])
    code, _, err = run_cli(["run", V1 / "graph.pb", "--feed", V1 / "inputs.npz", "--fetch", "loss"], capsys)
    assert code == 1 and "uninitialized" in err     # without the checkpoint


def test_run_restores_a_gradreg_checkpoint(tmp_path, capsys):
    graph = gr.Graph()
    with graph.as_default():
        w = gr.Variable(np.zeros((2, 2), np.float32), name="w")
        x = gr.placeholder(gr.float32, [2], name="x")
        gr.identity(gr.reduce_sum(w * x), name="y")
        session = gr.Session(graph)
        session.run(gr.global_variables_initializer())
        trained = np.array([[1.5, -2.0], [0.25, 4.0]], np.float32)
        session.run(w.assign(trained))
        path = gr.train.Saver().save(session, str(tmp_path / "model"))
    gr.save_graph(graph, tmp_path / "g.pb")
    code, out, _ = run_cli(["run", tmp_path / "g.pb", "--checkpoint", path, "--feed", "x=[2,3]", "--fetch", "y",
                            "--json"], capsys)
    assert code == 0
    assert json.loads(out)["outputs"][0]["values"] == float((trained * np.float32([2, 3])).sum())


# -- grad ----------------------------------------------------------------------------------------------

def test_grad_without_output_prints_values(capsys):
    case = load_case("mlp_softmax_xent")
    code, out, _ = run_cli(["grad", case.forward_pb, "--ys", "loss", "--xs", "w1,b2", "--feed",
                            case.path / "inputs.npz", "--json"], capsys)
    assert code == 0
    document = json.loads(out)
    values = {v["name"]: v for v in document["values"]}
    for x in ("w1:0", "b2:0"):
        gradient = values[document["gradients"][x]]
        assert_close(np.asarray(gradient["values"], np.float32), case.gradient_values()[x], x)
    assert_close(np.float32(values["loss:0"]["values"]), case.expected["y:loss:0"], "loss")


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_backend_on_run_and_grad(backend, capsys):
    pytest.importorskip(backend)
    case = load_case("conv_pool")
    meta = case.meta
    ys, xs = meta["ys"], meta["xs"]
    code, out, _ = run_cli(["grad", case.forward_pb, "--ys", ",".join(ys), "--xs", ",".join(xs), "--feed",
                            case.path / "inputs.npz", "--backend", backend, "--json"], capsys)
    assert code == 0
    document = json.loads(out)
    values = {v["name"]: v for v in document["values"]}
    for x in xs:
        assert_close(np.asarray(values[document["gradients"][x]]["values"], np.float32),
                     case.gradient_values()[x], f"{backend} d{x}")
    code, out, _ = run_cli(["run", case.forward_pb, "--fetch", ys[0], "--feed", case.path / "inputs.npz",
                            "--backend", backend, "--json"], capsys)
    assert code == 0
    assert_close(np.asarray(json.loads(out)["outputs"][0]["values"], np.float32), case.expected[f"y:{ys[0]}"])


def test_an_unknown_backend_is_a_usage_error(capsys):
    code, _, err = run_cli(["run", ROOT / "cond_v1" / "forward.pb", "--fetch", "y", "--backend", "numpi"], capsys)
    assert code == 2 and "did you mean 'numpy'" in err


# -- did you mean ---------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, option, suggested", [
    (["run", "{g}", "--fetch", "los"], "--fetch 'los'", "loss"),
    (["run", "{g}", "--feed", "lables=[1]", "--fetch", "loss"], "--feed 'lables'", "labels"),
    (["grad", "{g}", "--ys", "Loss", "--xs", "w1"], "--ys 'Loss'", "loss"),
    (["grad", "{g}", "--ys", "loss", "--xs", "w_1"], "--xs 'w_1'", "w1"),
    (["check", "{g}", "--ys", "loss", "--xs", "W1"], "--xs 'W1'", "w1"),
])
def test_unknown_tensor_names_get_suggestions(argv, option, suggested, capsys):
    graph = str(ROOT / "mlp_softmax_xent" / "forward.pb")
    code, _, err = run_cli([a.replace("{g}", graph) for a in argv], capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert option in err and f"did you mean '{suggested}'" in err


def test_scoped_names_are_suggested_by_their_last_part(capsys):
    code, _, err = run_cli(["run", ROOT / "cond_v1" / "forward.pb", "--fetch", "Exp"], capsys)
    assert code == 1 and "did you mean 'cond/Exp'" in err


def test_unknown_op_types_get_suggestions(capsys):
    code, _, err = run_cli(["plugins", "--op", "Matmul"], capsys)
    assert code == 2 and "did you mean 'MatMul'" in err
    code, _, err = run_cli(["ops", "Conv2d"], capsys)
    assert code == 2 and "'Conv2D'" in err


# -- inspect ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("graph, inputs, outputs", [
    (ROOT / "while_v1" / "forward.pb", ["x:0"], ["y:0"]),                 # not the loop counter's Exit
    (ROOT / "cond_v1" / "forward.pb", ["x:0", "p:0"], ["y:0"]),           # not switch_t/switch_f, Merge:1
    (ROOT / "cond_while_v2" / "forward.pb", ["x:0", "p:0"], ["y:0"]),     # not the While's Identities
    (DATA / "tf_models" / "gru" / "forward.pb", ["x:0"], ["Identity:0"]),
    (V1 / "graph.pb", ["x:0", "y:0"], ["loss:0"]),                        # not the Saver's nodes
])
def test_inspect_signature_has_the_real_inputs_and_outputs(graph, inputs, outputs, capsys):
    code, out, _ = run_cli(["inspect", graph, "--json"], capsys)
    assert code == 0
    signature = json.loads(out)["signature"]
    assert [t["name"] for t in signature["inputs"]] == inputs
    assert [t["name"] for t in signature["outputs"]] == outputs
    loaded = gr.load_graph(str(graph))
    for t in signature["inputs"] + signature["outputs"]:
        tensor = loaded.get_tensor(t["name"])
        assert t["dtype"] == tensor.dtype.name
        assert t["shape"] == (None if tensor.shape.rank is None else tensor.shape.as_list())


def test_inspect_nodes_lists_every_node(capsys):
    graph_path = ROOT / "mlp_softmax_xent" / "forward.pb"
    graph = gr.load_graph(str(graph_path))
    code, out, _ = run_cli(["inspect", graph_path, "--nodes"], capsys)
    assert code == 0
    listing = out.split("nodes (name  op(inputs) -> outputs):\n")[1].splitlines()
    assert len(listing) == len(graph)
    matmul = next(op for op in graph.get_operations() if op.type == "MatMul")
    line = next(line for line in listing if line.startswith(f"  {matmul.name}  "))
    inputs = ", ".join(t.name for t in matmul.inputs)
    assert line == f"  {matmul.name}  MatMul({inputs}) -> float32 {matmul.outputs[0].shape.as_list()}"
    code, out, _ = run_cli(["inspect", graph_path, "--nodes", "--json"], capsys)
    node = next(n for n in json.loads(out)["node_list"] if n["name"] == matmul.name)
    assert node == {"name": matmul.name, "op": "MatMul", "inputs": [t.name for t in matmul.inputs],
                    "outputs": [{"dtype": "float32", "shape": matmul.outputs[0].shape.as_list()}]}


# -- plugins and ops ----------------------------------------------------------------------------------------

def test_plugins_op_shows_who_provides_an_op(capsys):
    registry = get_registry()
    numba_op = next(op for op in sorted(registry.kernels("numba")) if registry.kernels("numba").provider(op))
    code, out, _ = run_cli(["plugins", "--op", numba_op, "--json"], capsys)
    assert code == 0
    info = json.loads(out)
    assert info["op definition"] == registry.ops.provider(numba_op)
    assert info["numpy kernel"] == registry.kernels("numpy").provider(numba_op)
    assert info["numba kernel"] == registry.kernels("numba").provider(numba_op)
    assert info["gradient"] in (f"rule from {registry.gradients.provider(numba_op)}", "not differentiable")
    code, out, _ = run_cli(["plugins", "--op", "MatMul"], capsys)
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in out.splitlines()[2:])
    assert rows["op definition"] == "math" and rows["gradient"] == "rule from math"
    assert rows["numba kernel"] in ("math", "none (runs the numpy kernel)")


def test_ops_lists_every_op_type_with_its_providers(capsys):
    registry = get_registry()
    code, out, _ = run_cli(["ops", "--json"], capsys)
    assert code == 0
    document = json.loads(out)
    rows = {r["op"]: r for r in document["ops"]}
    assert set(registry.ops) <= set(rows)
    assert rows["MatMul"]["family"] == "math" and rows["MatMul"]["gradient"] == "math"
    assert rows["Shape"]["gradient"] == "not differentiable"
    rules = sum(1 for op in rows if registry.gradients.lookup(op) is not None
                and registry.gradients.lookup(op).value is not None)
    assert f"{rules} with a gradient rule" in document["summary"]
    assert f"{len(rows)} op types" in document["summary"]
    code, out, _ = run_cli(["ops", "MatMul"], capsys)
    header, row, summary = out.splitlines()
    assert header.split() == ["op", "type", "kernel", "numpy", "kernel", "numba", "shape", "fn", "gradient", "family"]
    assert row.split()[0] == "MatMul" and row.split()[1] == "yes" and row.split()[-2:] == ["rule", "math"]
    assert summary.startswith("1 op types: 1 with a numpy kernel")


def test_ops_missing_matches_the_op_census(capsys):
    if not (REPO / "tools" / "op_coverage.py").is_file():
        pytest.skip("not a source checkout")
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import op_coverage
    finally:
        sys.path.pop(0)
    figures = op_coverage.coverage()
    code, out, _ = run_cli(["ops", "--missing", "--json"], capsys)
    assert code == 0
    document = json.loads(out)
    assert [m["op"] for m in document["missing"]] == figures["missing"]
    assert document["covered"] == figures["covered"] and document["registered"] == figures["registered"]


# -- convert ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["while_v1", "function_call", "cond_v1"])
def test_convert_to_and_from_json(case, tmp_path, capsys):
    source = ROOT / case / "forward.pb"
    code, out, _ = run_cli(["convert", source, tmp_path / "g.json"], capsys)
    assert code == 0 and "graphdef-json" in out
    document = json.loads((tmp_path / "g.json").read_text())
    assert len(document["node"]) == len(gr.load_graph(str(source)))
    code, _, _ = run_cli(["convert", tmp_path / "g.json", tmp_path / "g.pb"], capsys)
    assert code == 0
    assert (tmp_path / "g.pb").read_bytes() == source.read_bytes()
    os.rename(tmp_path / "g.json", tmp_path / "g.graph")         # no suffix: the content says JSON
    assert gr.load_graph(str(tmp_path / "g.graph")).as_graph_def() == gr.load_graph(str(source)).as_graph_def()


def test_convert_refuses_a_format_it_cannot_write(tmp_path, capsys):
    read_only = next((f for f in gr.formats.formats() if f.write is None and f.suffixes), None)
    if read_only is None:
        pytest.skip("every installed format is writable")
    with pytest.raises(SystemExit) as info:
        cli.main(["convert", str(ROOT / "while_v1" / "forward.pb"), str(tmp_path / f"g{read_only.suffixes[0]}")])
    assert info.value.code == 2
    assert f"cannot write {read_only.name} files" in capsys.readouterr().err


def test_the_op_census_is_package_data_of_the_registry():
    """`gradreg ops --missing` reads the census from the installed package, not from tools/
    (tests/test_packaging.py runs it from a built wheel)."""
    import importlib.resources

    from gradreg.registry.census import CENSUS_FILE, load_census
    assert importlib.resources.files("gradreg.registry").joinpath(CENSUS_FILE).is_file()
    assert "registry/*.json" in (REPO / "pyproject.toml").read_text()
    census = load_census()
    assert census["tensorflow"] == "2.21.0" and len(census["ops"]) > 400


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_tables_use_rich_on_a_terminal_and_plain_text_elsewhere():
    from gradreg.cli_ops import render_table
    plain = io.StringIO()
    render_table(["op type", "gradient"], [["MatMul", "rule"], ["Shape", "not differentiable"]], plain)
    assert plain.getvalue().splitlines() == ["op type  gradient", "MatMul   rule", "Shape    not differentiable"]
    pytest.importorskip("rich")
    terminal = _Terminal()
    render_table(["op type", "gradient"], [["MatMul", "rule"]], terminal)
    assert "\x1b[1m" in terminal.getvalue()          # rich's bold header
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in terminal.getvalue().splitlines()]
    assert lines[0].split() == ["op", "type", "gradient"] and lines[1].split() == ["MatMul", "rule"]


def test_a_graph_with_a_misspelled_op_type_gets_suggestions(tmp_path, capsys):
    text = (ROOT / "cond_v1" / "forward.pbtxt").read_text()
    assert 'op: "Sin"' in text
    (tmp_path / "bad.pbtxt").write_text(text.replace('op: "Sin"', 'op: "Sinn"'))
    code, _, err = run_cli(["run", tmp_path / "bad.pbtxt", "--feed", "x=[1,2,3]", "--feed", "p=true",
                            "--fetch", "y"], capsys)
    assert code == 1 and "unknown op type 'Sinn'" in err and "did you mean 'Sin'" in err
    code, _, err = run_cli(["grad", tmp_path / "bad.pbtxt", "--ys", "y", "--xs", "x", "--feed", "x=[1,2,3]",
                            "--feed", "p=true"], capsys)
    assert code == 1 and "did you mean 'Sin'" in err
    code, out, _ = run_cli(["check", tmp_path / "bad.pbtxt", "--ys", "y", "--xs", "x"], capsys)
    assert code == 1 and "ON PATH Sinn" in out and "did you mean 'Sin'" in out


def _frob_family(name, overrides=()):
    from gradreg.plugin import OpFamily
    family = OpFamily(name, overrides=overrides)
    family.op("Frob", inputs=["x: T"], outputs=["y: T"], attrs=["T: type"])
    family.gradients["Frob"] = lambda op, grad: grad
    family.simple_kernel("Frob", lambda x: x)
    return family


def _registry_of(monkeypatch, *sources):
    from gradreg import cli_ops
    from gradreg.registry import Registry
    registry = Registry(list(sources))
    monkeypatch.setattr(cli_ops, "get_registry", lambda: registry)
    return registry


def test_plugins_op_names_the_override_and_the_overridden(monkeypatch, capsys):
    from gradreg.registry import PluginSource
    _registry_of(monkeypatch, PluginSource("alpha", lambda: _frob_family("alpha"), version="1.0"),
                 PluginSource("beta", lambda: _frob_family("beta", overrides=["Frob"]), version="2.0"))
    code, out, _ = run_cli(["plugins", "--op", "Frob", "--json"], capsys)
    assert code == 0
    info = json.loads(out)
    assert info["op definition"] == "beta" and info["gradient"] == "rule from beta"
    assert info["also defined by"] == "alpha" and info["overridden by"] == "beta"
    code, out, _ = run_cli(["plugins"], capsys)
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:3]}
    assert rows["beta"][1] == "2.0" and rows["beta"][-2:] == ["Frob", "ok"] and rows["alpha"][-2:] == ["-", "ok"]
    assert "no conflicts" in out


def test_plugins_shows_failures_and_conflicts(monkeypatch, capsys):
    from gradreg.registry import PluginSource

    def broken():
        raise ImportError("no module named frobnicate")

    with pytest.warns(UserWarning):
        _registry_of(monkeypatch, PluginSource("alpha", lambda: _frob_family("alpha")),
                     PluginSource("beta", lambda: _frob_family("beta")), PluginSource("broken", broken))
    code, out, _ = run_cli(["plugins"], capsys)
    assert code == 0
    broken_row = next(line for line in out.splitlines() if line.startswith("broken "))
    assert "FAILED: load: " in broken_row and "no module named frobnicate" in broken_row
    assert "CONFLICTS:" in out and "op definition of 'Frob': alpha and beta" in out
    code, out, _ = run_cli(["plugins", "--op", "Frob", "--json"], capsys)
    assert code == 0 and json.loads(out)["op definition"] == "conflict"
