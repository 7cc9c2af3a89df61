"""Node names as TensorFlow gives them: builders put the Consts of Python values and their helper
nodes inside the op's scope (``sub/x``, ``mul/y``, ``Reshape/shape``), so they never take a name
a user gives a tensor of their own. The programs of tests/data/tf_names/names_scenario.py are
built by gradreg and compared with the names TensorFlow 2.21 gave the same programs in graph
mode (names.json, written by make_reference.py)."""
from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import pytest

import gradreg as gr
from gradreg import cli

DATA = pathlib.Path(__file__).resolve().parent / "data" / "tf_names"
sys.path.insert(0, str(DATA))
from names_scenario import PROGRAMS, SAME_GRAPH  # noqa: E402  (the scenario sits with its data)

REFERENCE = json.loads((DATA / "names.json").read_text())["programs"]


def gradreg_nodes(program) -> list[tuple[str, str]]:
    graph = gr.Graph()
    with graph.as_default():
        program(gr)
    return [(op.name, op.type) for op in graph.get_operations()]


def tensorflow_nodes(program: str) -> list[tuple[str, str]]:
    return [(name, op_type) for name, op_type in REFERENCE[program]]


@pytest.mark.parametrize("program", SAME_GRAPH)
def test_builders_name_every_node_as_tensorflow(program):
    assert sorted(gradreg_nodes(PROGRAMS[program])) == sorted(tensorflow_nodes(program))


@pytest.mark.parametrize("program", sorted(set(PROGRAMS) - set(SAME_GRAPH)))
def test_builders_that_build_fewer_nodes_name_those_they_build_as_tensorflow(program):
    """Every node gradreg builds is TensorFlow's node of that name and type, or a Const of gradreg's
    own inside the scope of an op both graphs have (``transpose/perm`` where TensorFlow computes
    the permutation)."""
    theirs = dict(tensorflow_nodes(program))
    ours = gradreg_nodes(PROGRAMS[program])
    shared = {name for name, op_type in ours if theirs.get(name) == op_type}
    for name, op_type in ours:
        if name in shared:
            continue
        scope = name.rpartition("/")[0]
        assert op_type == "Const" and scope in shared and theirs[scope] != "Const", (name, op_type, theirs.get(name))
    assert len(shared) >= 0.9 * len(ours)


def test_a_constant_never_takes_the_name_of_a_later_placeholder():
    """The issue's program: the 2.0 of ``2.0 - p`` was named "x" and the placeholder became x_1."""
    graph = gr.Graph()
    with graph.as_default():
        p = gr.placeholder(gr.float32, [3], name="p")
        q = 2.0 - p
        x = gr.placeholder(gr.float32, [3], name="x")
        y = gr.reduce_sum(x * 4.0, name="y")
    assert (q.name, x.name, y.name) == ("sub:0", "x:0", "y:0")
    assert q.op.inputs[0].name == "sub/x:0" and y.op.inputs[0].op.inputs[1].name == "mul/y:0"


def test_a_name_that_cannot_be_a_scope_still_names_the_op():
    """An imported node's name may hold characters no scope takes: its Consts get plain names."""
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [2], name="x")
        y = gr.raw_ops.AddV2(x=x, y=1.0, name="_odd name")
    assert y.op.name == "_odd name" and y.op.inputs[1].op.type == "Const"


def test_grad_from_the_command_line_differentiates_the_users_tensors(tmp_path, capsys):
    """Saved and reloaded, ``gradreg grad q.pb --ys y --xs x`` differentiates the placeholder x,
    not the constant of ``2.0 - p``."""
    graph = gr.Graph()
    with graph.as_default():
        p = gr.placeholder(gr.float32, [3], name="p")
        _ = 2.0 - p
        x = gr.placeholder(gr.float32, [3], name="x")
        gr.reduce_sum(x * 4.0, name="y")
    path = tmp_path / "q.pb"
    gr.save_graph(graph, str(path))
    code = cli.main(["grad", str(path), "--ys", "y", "--xs", "x", "--feed", "x=[1,2,3]", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    values = {v["name"]: v["values"] for v in out["values"]}
    assert values["y:0"] == 24.0
    np.testing.assert_array_equal(values[out["gradients"]["x:0"]], [4.0, 4.0, 4.0])
