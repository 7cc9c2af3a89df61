"""Every kind of bad input is a typed GradregError naming the file or node; the command line
prints one line and exits 1 (2 for usage errors), with no traceback and no hang."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from corpus import ROOT

import gradreg as gr
from gradreg import cli, errors
from gradreg.proto import graph_pb2

GOOD = ROOT / "mlp_softmax_xent" / "forward.pb"


def _attr(node, key, **value):
    entry = node.attr.add()
    entry.key = key
    for field, v in value.items():
        if field == "type":
            entry.value.type = v.enum
        elif field == "shape":
            entry.value.shape.CopyFrom(gr.TensorShape(v).as_proto())
        else:
            setattr(entry.value, field, v)
    return entry.value


def _placeholder(gd, name, dtype=gr.float32, shape=(2,)):
    node = gd.node.add(name=name, op="Placeholder")
    _attr(node, "dtype", type=dtype)
    _attr(node, "shape", shape=list(shape))
    return node


def _binary(gd, name, op, a, b, dtype=gr.float32):
    node = gd.node.add(name=name, op=op, input=[a, b])
    _attr(node, "T", type=dtype)
    return node


def _write(tmp_path, gd, name="g.pb"):
    path = tmp_path / name
    path.write_bytes(gd.SerializeToString())
    return str(path)


def _run_cli(argv, capsys):
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line_error(err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


# -- files -------------------------------------------------------------------------------

@pytest.mark.parametrize("cut", [0.5, 0.9, 0.13])
def test_truncated_file(tmp_path, capsys, cut):
    data = GOOD.read_bytes()
    path = tmp_path / "truncated.pb"
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises((errors.GraphFileError, errors.GraphError)) as info:
        gr.load_graph(str(path))
    assert "truncated.pb" in str(info.value)
    code, _, err = _run_cli(["inspect", str(path)], capsys)
    assert code == 1
    _one_line_error(err, "truncated.pb")


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", b"\xff" * 64,
                                     b'{"not": "a graph"}', b"node { name: 'x' op: \n"])
def test_non_graphdef_bytes(tmp_path, capsys, content):
    path = tmp_path / "junk.bin"
    path.write_bytes(content)
    with pytest.raises(errors.GraphFileError, match="junk.bin"):
        gr.load_graph(str(path))
    code, _, err = _run_cli(["inspect", str(path)], capsys)
    assert code == 1
    _one_line_error(err, "junk.bin")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.pb"
    path.write_bytes(b"")
    with pytest.raises(errors.GraphFileError, match="empty.pb: the file is empty"):
        gr.load_graph(str(path))


def test_missing_file(capsys):
    code, _, err = _run_cli(["inspect", "/no/such/graph.pb"], capsys)
    assert code == 1
    _one_line_error(err, "/no/such/graph.pb", "cannot read")


# -- graphs ------------------------------------------------------------------------------

def test_input_naming_a_missing_node(tmp_path, capsys):
    gd = graph_pb2.GraphDef()
    _placeholder(gd, "x")
    _binary(gd, "y", "Mul", "x", "ghost")
    with pytest.raises(errors.GraphError, match=r"node 'y' \(op Mul\).*missing node 'ghost'"):
        gr.import_graph_def(gd)
    code, _, err = _run_cli(["inspect", _write(tmp_path, gd)], capsys)
    assert code == 1
    _one_line_error(err, "'y'", "ghost")


def test_names_that_do_not_print_are_escaped_in_one_line(tmp_path, capsys):
    # a mangled text file's name holding a newline (found by the fuzz campaign, seed 20261131)
    gd = graph_pb2.GraphDef()
    _placeholder(gd, "x")
    _binary(gd, "y", "Mul", "x", "gh\nost:0")
    with pytest.raises(errors.GraphError) as caught:
        gr.import_graph_def(gd)
    message = str(caught.value)
    assert "\n" not in message
    assert "node 'y' (op Mul) has input 'gh\\nost:0' naming missing node 'gh\\nost'" in message
    code, _, err = _run_cli(["inspect", _write(tmp_path, gd)], capsys)
    assert code == 1
    _one_line_error(err, "'y'", "gh\\nost")
    assert errors.shown("a/b_1") == "a/b_1" and errors.shown("a\tb") == "a\\tb"


def test_duplicate_node_names(tmp_path, capsys):
    gd = graph_pb2.GraphDef()
    _placeholder(gd, "x")
    _placeholder(gd, "x")
    with pytest.raises(errors.GraphError, match="duplicate node name 'x'"):
        gr.import_graph_def(gd)
    code, _, err = _run_cli(["inspect", _write(tmp_path, gd)], capsys)
    assert code == 1
    _one_line_error(err, "duplicate node name 'x'")


def test_cycle_outside_a_loop_frame(tmp_path, capsys):
    gd = graph_pb2.GraphDef()
    _placeholder(gd, "x")
    _binary(gd, "a", "Mul", "x", "b")
    _binary(gd, "b", "Mul", "a", "x")
    with pytest.raises(errors.GraphError, match="cycle through node 'a'"):
        gr.import_graph_def(gd)
    code, _, err = _run_cli(["inspect", _write(tmp_path, gd)], capsys)
    assert code == 1
    _one_line_error(err, "cycle")


def test_const_with_wrong_tensor_content_length(tmp_path, capsys):
    gd = graph_pb2.GraphDef()
    node = gd.node.add(name="w", op="Const")
    _attr(node, "dtype", type=gr.float32)
    value = _attr(node, "value")
    value.tensor.dtype = gr.float32.enum
    value.tensor.tensor_shape.CopyFrom(gr.TensorShape([3]).as_proto())
    value.tensor.tensor_content = b"\x00" * 10
    with pytest.raises(errors.TensorValueError, match=r"node 'w' \(op Const\).*10 bytes.*needs 12"):
        gr.Session(gr.import_graph_def(gd)).run("w:0")
    code, _, err = _run_cli(["run", _write(tmp_path, gd), "--fetch", "w"], capsys)
    assert code == 1
    _one_line_error(err, "'w'", "10 bytes")


def test_unknown_op_type_fails_at_plan_time_naming_the_node(tmp_path, capsys):
    gd = graph_pb2.GraphDef()
    _placeholder(gd, "x")
    gd.node.add(name="weird", op="FrobnicateV7", input=["x"])
    g = gr.import_graph_def(gd)          # loading works: inspect can describe it
    session = gr.Session(g)
    with pytest.raises(errors.UnknownOpError, match=r"node 'weird' \(op FrobnicateV7\)"):
        session.run("weird:0", {"x:0": np.ones(2, np.float32)})
    path = _write(tmp_path, gd)
    code, out, _ = _run_cli(["inspect", path], capsys)
    assert code == 0 and "FrobnicateV7" in out
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    code, _, err = _run_cli(["run", path, "--feed", f"x={tmp_path / 'x.npy'}", "--fetch", "weird"], capsys)
    assert code == 1
    _one_line_error(err, "'weird'", "FrobnicateV7")


# -- feeds and fetches -------------------------------------------------------------------

@pytest.fixture
def mul_graph(tmp_path):
    gd = graph_pb2.GraphDef()
    _placeholder(gd, "x", shape=(2,))
    _binary(gd, "y", "Mul", "x", "x")
    return gr.import_graph_def(gd), _write(tmp_path, gd)


def test_missing_feed(mul_graph, capsys):
    graph, path = mul_graph
    with pytest.raises(errors.FeedError, match="placeholder 'x'.*must be fed"):
        gr.Session(graph).run("y:0")
    code, _, err = _run_cli(["run", path, "--fetch", "y"], capsys)
    assert code == 1
    _one_line_error(err, "placeholder 'x'")


def test_misshaped_feed(mul_graph, tmp_path, capsys):
    graph, path = mul_graph
    with pytest.raises(errors.FeedError, match=r"shape \[3\] to tensor 'x:0', which has shape \(2,\)"):
        gr.Session(graph).run("y:0", {"x:0": np.ones(3, np.float32)})
    np.save(tmp_path / "x3.npy", np.ones(3, np.float32))
    code, _, err = _run_cli(["run", path, "--feed", f"x={tmp_path / 'x3.npy'}", "--fetch", "y"], capsys)
    assert code == 1
    _one_line_error(err, "x:0")


def test_mistyped_feed(mul_graph):
    graph, _ = mul_graph
    with pytest.raises(errors.FeedError, match="cannot feed <U1 value to x:0, which is float32"):
        gr.Session(graph).run("y:0", {"x:0": np.array(["a", "b"])})
    with pytest.raises(errors.FeedError, match="complex128 value to x:0"):
        gr.Session(graph).run("y:0", {"x:0": np.ones(2, np.complex128)})


def test_feed_naming_no_tensor(mul_graph):
    graph, _ = mul_graph
    with pytest.raises(errors.FeedError, match="feed 'nope:0' names no tensor"):
        gr.Session(graph).run("y:0", {"nope:0": 1.0})


def test_fetch_that_does_not_exist(mul_graph, capsys):
    graph, path = mul_graph
    with pytest.raises(errors.FetchError, match="fetch 'zzz:0' does not exist"):
        gr.Session(graph).run("zzz:0", {"x:0": np.ones(2, np.float32)})
    code, _, err = _run_cli(["run", path, "--fetch", "zzz"], capsys)
    assert code == 1
    _one_line_error(err, "zzz")


# -- usage errors ----------------------------------------------------------------------

def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["run", str(GOOD), "--backend", "numpi"])      # no such backend
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        cli.main(["run", str(GOOD), "--fetch", "x", "--feed", "nonsense"])
    assert info.value.code == 2


def test_real_process_exit_codes_and_no_traceback(tmp_path):
    path = tmp_path / "junk.pb"
    path.write_bytes(b"\xff" * 32)
    done = subprocess.run([sys.executable, "-m", "gradreg", "inspect", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "junk.pb" in done.stderr
    done = subprocess.run([sys.executable, "-m", "gradreg", "--debug", "inspect", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" in done.stderr
    done = subprocess.run([sys.executable, "-m", "gradreg", "bogus"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
