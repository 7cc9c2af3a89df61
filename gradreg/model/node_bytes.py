"""Serialized NodeDefs, read without parsing each one whole.

A graph of 10**6 nodes parsed as one GraphDef message takes ~350 bytes of protobuf memory a node
and ~4 us a node to read back into Python through the message API. The importer
(gradreg.model.graph.import_graph_def) instead splits the GraphDef's bytes into one ``bytes``
per node (:func:`split_graph_def`, ~75 bytes a node), reads what it needs of each -- name, op
type, inputs, device, and its attrs as they are serialized (:func:`read_head`) -- and keeps the
node's bytes, parsed into a NodeDef only when something asks for it. Nodes whose attrs are the
same bytes share one decoding of them.

The bytes come from a GraphDef that protobuf has parsed (the caller's, or its serialization):
they are well formed, and :func:`read_head` only has to find its fields. It reads nodes laid
out as protobuf writes them (fields 1-5, in order, one-byte tags); for anything else it returns
None and the node is parsed whole.
"""
from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from gradreg.proto import graph_pb2, node_def_pb2


def _node_list_class() -> Any:
    """A message with a GraphDef's field 1 (``node``) as ``repeated bytes``: parsing a GraphDef's
    bytes with it splits them into the nodes' bytes, every other field kept as an unknown one."""
    file = descriptor_pb2.FileDescriptorProto(name="gradreg/node_list.proto", package="gradreg.internal",
                                              syntax="proto3")
    message = file.message_type.add(name="NodeList")
    message.field.add(name="node", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("gradreg.internal.NodeList"))


_NodeList = _node_list_class()

_NAME, _OP, _INPUT, _DEVICE, _ATTR = 0x0A, 0x12, 0x1A, 0x22, 0x2A     # tags of NodeDef fields 1-5


def split_graph_def(data: bytes) -> tuple[graph_pb2.GraphDef, list[bytes]]:
    """A serialized GraphDef (one protobuf has parsed) as its other fields -- a GraphDef without
    nodes: the library, versions, unknown fields -- and the list of its nodes' bytes."""
    whole = _NodeList.FromString(data)
    nodes: list[bytes] = list(whole.node)
    whole.ClearField("node")
    return graph_pb2.GraphDef.FromString(whole.SerializeToString()), nodes


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def read_head(raw: bytes) -> tuple[str, str, list[str], str, bytes] | None:
    """(name, op type, inputs, device, attrs) of a serialized NodeDef laid out as protobuf writes
    one: fields name, op, input, device, attr, each length-delimited with a one-byte tag, the
    attrs last. ``attrs`` is their serialized form (tags included), in order: with the op type,
    the key of what nodes with the same attrs share. None for any other layout."""
    name = op = device = ""
    inputs: list[str] = []
    attrs_from = -1
    pos, end = 0, len(raw)
    while pos < end:
        head = pos
        tag = raw[pos]
        size = raw[pos + 1]
        pos += 2
        if size > 0x7F:
            size, pos = _varint(raw, pos - 1)
        stop = pos + size
        if tag == _ATTR:
            if attrs_from < 0:
                attrs_from = head
        elif attrs_from >= 0:
            return None          # a field after the attrs
        elif tag == _INPUT:
            inputs.append(raw[pos:stop].decode())
        elif tag == _NAME:
            name = raw[pos:stop].decode()
        elif tag == _OP:
            op = raw[pos:stop].decode()
        elif tag == _DEVICE:
            device = raw[pos:stop].decode()
        else:
            return None
        pos = stop
    return name, op, inputs, device, raw[attrs_from:] if attrs_from >= 0 else b""


def read_parsed(node: node_def_pb2.NodeDef) -> tuple[str, str, list[str], str, bytes]:
    """What :func:`read_head` gives, from a parsed NodeDef (a node laid out otherwise)."""
    attrs = b"".join(_field(_ATTR, entry.SerializeToString()) for entry in node.attr)
    return node.name, node.op, list(node.input), node.device, attrs


def _field(tag: int, payload: bytes) -> bytes:
    size = len(payload)
    out = bytearray([tag])
    while size > 0x7F:
        out.append(size & 0x7F | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out) + payload


def attrs_of(attrs: bytes) -> Any:
    """The attr entries serialized in ``attrs`` (read_head's), as a NodeDef's ``attr`` field."""
    return node_def_pb2.NodeDef.FromString(attrs).attr
