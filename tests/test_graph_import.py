"""Importing a GraphDef from its nodes' bytes (issue 27, gradreg.model.node_bytes): what the graph
holds is what the file says, however protobuf laid each node out; nodes sharing their attrs share
one decoding of them but stay separate nodes; the import's checks and its manners are unchanged."""
from __future__ import annotations

import gc

import numpy as np
import pytest
from google.protobuf import text_format

import gradreg as gr
from gradreg import errors
from gradreg.model.node_bytes import read_head, read_parsed, split_graph_def
from gradreg.proto import graph_pb2, node_def_pb2

CHAIN = '''
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }
node { name: "a" op: "Neg" input: "x" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "b" op: "Neg" input: "a" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "c" op: "AddV2" input: "a" input: "b:0" attr { key: "T" value { type: DT_FLOAT } } }
versions { producer: 1234 }
'''


def _gd(text: str) -> graph_pb2.GraphDef:
    return text_format.Parse(text, graph_pb2.GraphDef())


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + _varint(len(payload)) + payload


def test_a_node_is_read_as_protobuf_lays_it_out():
    node = node_def_pb2.NodeDef(name="scope/n", op="MatMul", input=["a:1", "^b"], device="/cpu:0")
    text_format.Parse('attr { key: "T" value { type: DT_FLOAT } } attr { key: "transpose_a" value { b: true } }',
                      node)
    raw = node.SerializeToString()
    head = read_head(raw)
    assert head is not None and head == read_parsed(node)
    name, op, inputs, device, attrs = head
    assert (name, op, inputs, device) == ("scope/n", "MatMul", ["a:1", "^b"], "/cpu:0")
    assert node_def_pb2.NodeDef.FromString(attrs).attr == node.attr


@pytest.mark.parametrize("raw", [
    _field(0x12, b"Neg") + _field(0x0A, b"a"),                                   # op before name: fine
    _field(0x0A, b"a") + _field(0x2A, _field(0x0A, b"T")) + _field(0x1A, b"x"),   # an input after the attrs
    _field(0x0A, b"a") + bytes([0x32]) + _varint(2) + b"\x0a\x00",               # field 6 (debug info)
    _field(0x0A, b"a" * 300) + _field(0x12, b"Neg"),                             # a two-byte length
])
def test_other_layouts_read_the_same_through_protobuf(raw):
    head = read_head(raw)
    expected = read_parsed(node_def_pb2.NodeDef.FromString(raw))
    assert head is None or head == expected


def test_a_graph_splits_into_its_nodes_and_the_rest():
    gd = _gd(CHAIN)
    template, nodes = split_graph_def(gd.SerializeToString())
    assert nodes == [n.SerializeToString() for n in gd.node]
    assert not template.node and template.versions.producer == 1234


def test_nodes_laid_out_otherwise_load_and_write_back_unchanged(tmp_path):
    gd = _gd(CHAIN)
    weird = bytearray()
    for node in gd.node:
        raw = node.SerializeToString()
        if node.name == "b":                       # attrs first, then op, input, name
            raw = (b"".join(_field(0x2A, e.SerializeToString()) for e in node.attr) + _field(0x12, b"Neg")
                   + _field(0x1A, b"a") + _field(0x0A, b"b"))
        if node.name == "c":                       # with experimental_debug_info (field 6)
            raw += _field(0x32, _field(0x0A, b"original"))
        weird += _field(0x0A, raw)
    weird += _field(0x22, gd.versions.SerializeToString())
    path = tmp_path / "weird.pb"
    path.write_bytes(bytes(weird))
    graph = gr.load_graph(path)
    assert [op.name for op in graph.get_operations()] == ["x", "a", "b", "c"]
    assert [t.name for t in graph.get_operation("c").inputs] == ["a:0", "b:0"]
    assert graph.get_operation("c").node_def.experimental_debug_info.original_node_names == ["original"]
    assert graph.as_graph_def() == graph_pb2.GraphDef.FromString(bytes(weird))
    value = gr.Session(graph).run("c:0", {"x:0": 2.0})
    assert value == np.float32(-2.0 + 2.0)


def test_nodes_with_the_same_attrs_share_their_decoding_not_their_changes():
    graph = gr.import_graph_def(_gd(CHAIN))
    a, b = graph.get_operation("a"), graph.get_operation("b")
    assert a.get_attr("T") is gr.float32 and b.get_attr("T") is gr.float32
    assert a.has_attr("T") and a.attr_names() == ["T"] and not a.has_attr("U")
    a.cache_attr("T", gr.float64)                  # recorded for a only
    assert a.get_attr("T") is gr.float64 and b.get_attr("T") is gr.float32
    b.set_attr("T", gr.int32)
    assert b.get_attr("T") is gr.int32 and b.node_def.attr[0].value.type == gr.int32.enum
    assert graph.get_operation("a").node_def.attr[0].value.type == gr.float32.enum
    assert graph.get_operation("c").get_attr("T") is gr.float32


def test_forward_references_load_and_cycles_do_not():
    gd = _gd(CHAIN)
    reordered = graph_pb2.GraphDef()
    reordered.node.extend(reversed(gd.node))       # every input after its consumer
    graph = gr.import_graph_def(reordered)
    assert [t.name for t in graph.get_operation("c").inputs] == ["a:0", "b:0"]
    assert [c.name for c in graph.get_operation("a").outputs[0].consumers()] == ["c", "b"]   # the file's order
    assert gr.Session(graph).run("c:0", {"x:0": 3.0}) == np.float32(0.0)
    for text in ('node { name: "n" op: "Neg" input: "n" attr { key: "T" value { type: DT_FLOAT } } }',
                 'node { name: "n" op: "Neg" input: "n:0" attr { key: "T" value { type: DT_FLOAT } } }',
                 'node { name: "n" op: "NoOp" input: "^n" }'):
        with pytest.raises(errors.GraphError, match="cycle through node 'n'"):
            gr.import_graph_def(_gd(text), source="self.pb")


@pytest.mark.parametrize("extra, message", [
    ('node { name: "a" op: "NoOp" }', "duplicate node name 'a'"),
    ('node { name: "d" op: "Neg" input: "zz" attr { key: "T" value { type: DT_FLOAT } } }',
     "input 'zz' naming missing node 'zz'"),
    ('node { name: "d" op: "Neg" input: "^a" input: "x" attr { key: "T" value { type: DT_FLOAT } } }',
     "lists data input 'x' after a control input"),
    ('node { name: "d" op: "Neg" input: "a:3" attr { key: "T" value { type: DT_FLOAT } } }',
     r"has input 'a:3', but 'a' \(Neg\) has 1 outputs"),
    ('node { name: "d" op: "Neg" input: "x" attr { key: "T" value { type: DT_INT32 } } }',
     r"input 0 \(x:0\) is float32, expected int32"),
    ('node { name: "d" op: "Neg" input: "x" attr { key: "T" value { i: 3 } } }', "attr 'T'"),
])
def test_the_import_still_refuses_what_it_refused(extra, message):
    with pytest.raises(errors.GraphError, match=message):
        gr.import_graph_def(_gd(CHAIN + extra), source="bad.pb")


@pytest.mark.parametrize("enabled", [True, False])
def test_the_import_leaves_the_cycle_collector_as_it_found_it(enabled):
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        gr.import_graph_def(_gd(CHAIN))
        assert gc.isenabled() is enabled
        with pytest.raises(errors.GraphError):
            gr.import_graph_def(_gd(CHAIN + 'node { name: "a" op: "NoOp" }'))
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_names_of_an_imported_graph_are_taken_when_new_nodes_come():
    graph = gr.import_graph_def(_gd(CHAIN))
    with graph.as_default():
        assert gr.constant(1.0, name="a").op.name == "a_1"
        assert gr.constant(1.0, name="A").op.name == "A_2"      # names are taken case-blind
        assert gr.constant(1.0, name="new").op.name == "new"
