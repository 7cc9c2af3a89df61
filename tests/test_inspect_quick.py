"""``gradreg inspect`` of a big binary GraphDef: summarized from its node table
(gradreg.model.node_bytes.read_table, gradreg.cli_inspect.QuickGraph) without building the graph.
It must say the same as the full summary of the built graph, but for the output shapes it does
not infer, and leave every file it cannot read that way to the full load, whose errors name the
node."""
from __future__ import annotations

import json
import pathlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradreg import cli, config, load_graph
from gradreg import cli_inspect as ci
from gradreg.errors import GraphError
from gradreg.model.node_bytes import read_table, split_graph_def
from gradreg.proto import graph_pb2, node_def_pb2

DATA = pathlib.Path(__file__).parent / "data"

# TF-written graphs of every kind the summary rules care about: placeholders with and without
# defaults and shapes, unused second outputs, savers, functions, v2 control flow, many op families.
GRAPHS = sorted({*DATA.glob("tf_corpus/*/forward.pb"), *DATA.glob("tf_corpus/*/tf_grad.pb"),
                 DATA / "op_sweep" / "array.forward.pb", DATA / "ops_array" / "ops.pb",
                 DATA / "random" / "stateless.pb"})


@pytest.fixture
def quick_from_zero(monkeypatch):
    """Every binary GraphDef is read quickly, however small."""
    monkeypatch.setattr(ci, "QUICK_FROM", 0)


def _without_output_shapes(summary):
    summary = json.loads(json.dumps(summary))
    for t in summary["signature"]["outputs"]:
        t["shape"] = None
    summary.pop("quick", None)
    return summary


@pytest.mark.parametrize("path", GRAPHS, ids=lambda p: str(p.relative_to(DATA)))
def test_the_quick_summary_says_what_the_full_one_says(path, quick_from_zero):
    graph = load_graph(path)
    full = ci.graph_summary(graph)
    quick_graph = ci.QuickGraph.read(path.read_bytes(), str(path), config.max_nodes)
    if quick_graph is None:
        # only graphs with v1 loops (or a SavedModel's .pb) are left to the full load
        assert {"Enter", "RefEnter"} & set(full["op_types"]), path
        return
    quick = quick_graph.summary()
    assert quick["quick"]["shapes"] == "not inferred"
    assert all(t["shape"] is None for t in quick["signature"]["outputs"])
    assert _without_output_shapes(quick) == _without_output_shapes(full)


def _attr(node, key):
    """A new attr entry of ``node`` (gradreg's NodeDef keeps them as written: a repeated field)."""
    entry = node.attr.add()
    entry.key = key
    return entry.value


def _chain(n: int) -> graph_pb2.GraphDef:
    """x -> Identity -> AddV2(prev, prev) -> ... n nodes; x with a declared shape [2, 3]."""
    graph_def = graph_pb2.GraphDef()
    x = graph_def.node.add(name="x", op="Placeholder")
    _attr(x, "dtype").type = 1
    shape = _attr(x, "shape").shape
    shape.dim.add(size=2)
    shape.dim.add(size=3)
    previous = "x"
    for i in range(1, n):
        node = graph_def.node.add(name=f"n{i}", op="Identity" if i % 2 else "AddV2")
        node.input.extend([previous] if i % 2 else [previous, previous])
        _attr(node, "T").type = 1
        previous = node.name
    return graph_def


def test_inspect_of_a_big_graph_reads_it_quickly_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ci, "QUICK_FROM", 1000)
    path = tmp_path / "chain.pb"
    path.write_bytes(_chain(1500).SerializeToString())
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "nodes: 1500" in out
    assert "  x:0  float32 [2, 3]" in out                      # the placeholder's declared shape
    assert "  n1499:0  float32 (shape not inferred)" in out
    assert "read quickly (over 1,000 nodes" in out and "--full builds it" in out
    assert "     750  Identity" in out and "     749  AddV2" in out

    assert cli.main(["inspect", str(path), "--full"]) == 0
    out = capsys.readouterr().out
    assert "  n1499:0  float32 [2, 3]" in out and "read quickly" not in out

    assert cli.main(["inspect", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["quick"]["from_nodes"] == 1000
    assert info["signature"]["outputs"] == [{"name": "n1499:0", "dtype": "float32", "shape": None}]


def test_a_small_graph_is_built_as_before(tmp_path, capsys):
    path = tmp_path / "chain.pb"
    path.write_bytes(_chain(50).SerializeToString())
    assert ci.quick_graph_summary(str(path)) is None
    assert cli.main(["inspect", str(path)]) == 0
    assert "read quickly" not in capsys.readouterr().out


@pytest.mark.parametrize("breakage, message", [
    (lambda g: g.node.add(name="n7", op="NoOp"), "duplicate node name 'n7'"),
    (lambda g: g.node[5].input.__setitem__(0, "nowhere"), "naming missing node 'nowhere'"),
    (lambda g: g.node[5].input.__setitem__(0, "n4:3"), "has input 'n4:3'"),
])
def test_a_graph_the_full_load_refuses_is_refused_the_same(tmp_path, quick_from_zero, capsys, breakage, message):
    graph_def = _chain(40)
    breakage(graph_def)
    path = tmp_path / "broken.pb"
    path.write_bytes(graph_def.SerializeToString())
    with pytest.raises(GraphError, match=message):
        load_graph(path)
    if "duplicate" in message or "missing node" in message:
        assert ci.quick_graph_summary(str(path)) is None       # left to the full load
    code = cli.main(["inspect", str(path)])
    _, err = capsys.readouterr()
    if "n4:3" in message:
        # A port past a node's outputs is not checked by the quick read: it summarizes (see
        # QuickGraph's docstring); `gradreg check` and every other command load the graph.
        assert code == 0
    else:
        assert code == 1 and message in err and "Traceback" not in err


def test_v1_loops_are_left_to_the_full_load(quick_from_zero):
    path = DATA / "tf_corpus" / "while_v1" / "forward.pb"
    assert ci.QuickGraph.read(path.read_bytes(), str(path), config.max_nodes) is None


def test_fields_in_any_order_are_read_as_protobuf_reads_them():
    node = node_def_pb2.NodeDef(name="b", op="AddV2", input=["a", "a:1", "^c"])
    _attr(node, "T").type = 1
    raw = node.SerializeToString()
    without_attr = node_def_pb2.NodeDef(name="b", op="AddV2", input=["a", "a:1", "^c"]).SerializeToString()
    attr_field = raw[len(without_attr):]       # protobuf writes fields in number order: attr (5) last
    # attr first, then the inputs, op and name: protobuf reads any order
    shuffled = attr_field + _field(3, b"a") + _field(3, b"a:1") + _field(3, b"^c") + _field(2, b"AddV2") + \
        _field(1, b"b")
    assert node_def_pb2.NodeDef.FromString(shuffled) == node
    table = read_table([shuffled, _field(1, b"c") + _field(2, b"NoOp")])
    assert table.names == ["b", "c"] and table.ops == ["AddV2", "NoOp"]
    assert table.inputs == ["a", "a:1", "^c"] and table.input_start.tolist() == [0, 3, 3]


def _field(number: int, payload: bytes) -> bytes:
    size = len(payload)
    out = bytearray([number << 3 | 2])
    while size > 0x7F:
        out.append(size & 0x7F | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out) + payload


def test_a_long_field_size_is_read():
    name = "s" * 300
    node = node_def_pb2.NodeDef(name=name, op="Const", input=["i" * 200])
    _attr(node, "value").tensor.tensor_content = bytes(range(256)) * 40
    table = read_table([node.SerializeToString()])
    assert table.names == [name] and table.ops == ["Const"] and table.inputs == ["i" * 200]


_NODES = [n.SerializeToString() for n in _chain(6).node]


def _head_class():
    """NodeDef's fields 1-4 as NodeDef has them, its attrs (5) as bytes."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="test_inspect_quick/head.proto", package="t", syntax="proto3")
    message = file.message_type.add(name="Head")
    for number, name, kind, label in [(1, "name", field.TYPE_STRING, field.LABEL_OPTIONAL),
                                      (2, "op", field.TYPE_STRING, field.LABEL_OPTIONAL),
                                      (3, "input", field.TYPE_STRING, field.LABEL_REPEATED),
                                      (4, "device", field.TYPE_STRING, field.LABEL_OPTIONAL),
                                      (5, "attr", field.TYPE_BYTES, field.LABEL_REPEATED)]:
        message.field.add(name=name, number=number, type=kind, label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("t.Head"))


_Head = _head_class()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(0, 5), st.integers(0, 200)), max_size=3))
def test_mutated_nodes_are_read_right_or_not_at_all(flips, cuts):
    """Whatever the bytes, read_table returns None or exactly what protobuf parses."""
    nodes = [bytearray(raw) for raw in _NODES]
    for i, at, value in flips:
        if at < len(nodes[i]):
            nodes[i][at] = value
    for i, at in cuts:
        del nodes[i][at:at + 3]
    table = read_table([bytes(raw) for raw in nodes])
    if table is None:
        return
    for i, raw in enumerate(nodes):
        # The quick read checks a node's fields, not what its attrs hold (see QuickGraph): the
        # referee is protobuf parsing the node with its attrs kept as bytes.
        parsed = _Head.FromString(bytes(raw))     # raises if read_table read what is no node
        assert table.names[i] == parsed.name and table.ops[i] == parsed.op
        assert table.inputs[table.input_start[i]:table.input_start[i + 1]] == list(parsed.input)


def test_a_split_of_the_chain_matches_the_nodes():
    data = _chain(30).SerializeToString()
    _, nodes = split_graph_def(data)
    table = read_table(nodes)
    assert table.names == ["x"] + [f"n{i}" for i in range(1, 30)]
    assert table.inputs[:4] == ["x", "n1", "n1", "n2"]


def test_a_node_with_more_fields_than_the_passes_is_left_to_the_full_load(monkeypatch):
    from gradreg.model import node_bytes

    monkeypatch.setattr(node_bytes, "_MAX_SCANNED_FIELDS", 5)
    node = node_def_pb2.NodeDef(name="s", op="AddN", input=[f"x{i}" for i in range(4)])
    assert read_table([node.SerializeToString()]) is None        # 6 fields
    node = node_def_pb2.NodeDef(name="s", op="AddN", input=[f"x{i}" for i in range(3)])
    assert read_table([node.SerializeToString()]).inputs == ["x0", "x1", "x2"]


def test_a_graph_most_of_whose_nodes_nobody_reads_is_built(tmp_path, monkeypatch):
    """Each node nobody reads is looked at (tens of us): with many, building the graph is faster."""
    monkeypatch.setattr(ci, "QUICK_FROM", 0)
    monkeypatch.setattr(ci, "QUICK_CANDIDATES", 5)
    graph_def = _chain(2)
    for i in range(40):
        node = graph_def.node.add(name=f"fan{i}", op="Identity", input=["x"])
        _attr(node, "T").type = 1
    path = tmp_path / "fan.pb"
    path.write_bytes(graph_def.SerializeToString())
    assert ci.QuickGraph.read(path.read_bytes(), str(path), config.max_nodes) is None
    monkeypatch.setattr(ci, "QUICK_CANDIDATES", 100)
    quick = ci.QuickGraph.read(path.read_bytes(), str(path), config.max_nodes).summary()
    assert _without_output_shapes(quick) == _without_output_shapes(ci.graph_summary(load_graph(path)))


def test_a_corrupt_attr_of_a_node_looked_at_is_a_graph_file_error(tmp_path, quick_from_zero):
    from gradreg.errors import GraphFileError

    graph_def = _chain(5)
    raw = bytearray(graph_def.SerializeToString())
    # the last node's attr entry: its AttrValue's type field (tag 0x30) made a length-delimited
    # field running past the entry
    at = raw.rindex(b"\x30")
    raw[at] = 0x32
    path = tmp_path / "corrupt.pb"
    path.write_bytes(bytes(raw))
    with pytest.raises(GraphFileError, match="truncated or corrupt"):
        ci.quick_graph_summary(str(path))
