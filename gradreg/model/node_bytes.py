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

import numpy as np
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


# -- a GraphDef's nodes as columns -------------------------------------------------------------

class NodeTable:
    """What a GraphDef's nodes say of their names, op types and inputs, as columns: read at C
    speed with NumPy (:func:`read_table`), with no Python object per node but its strings. For a
    summary of a graph too big to build quickly (``gradreg inspect``): a Graph of 10**6 nodes
    takes ~10 s to build, its table ~1 s.

    ``names[i]``, ``ops[i]``: node i's name and op type; its inputs are
    ``inputs[input_start[i]:input_start[i + 1]]`` as written, in order."""

    def __init__(self, names: list[str], ops: list[str], inputs: list[str], input_start: Any):
        self.names = names
        self.ops = ops
        self.inputs = inputs
        self.input_start = input_start

    def __len__(self) -> int:
        return len(self.names)


_WIRE_LENGTH_DELIMITED = 2
_MAX_SCANNED_FIELDS = 10_000   # fields of one node read in passes; a node with more is read the long way


def read_table(nodes: list[bytes]) -> NodeTable | None:
    """The :class:`NodeTable` of the nodes' bytes (split_graph_def's), or None where a node is
    not laid out as protobuf writes NodeDefs -- a tag of more than one byte, a field other than
    length-delimited, a size past the node's end, not exactly one name and one op, text that is
    not UTF-8 or holds a line break -- for the caller to read the graph the long way, which
    says what is wrong. What the attrs hold is not looked at."""
    n = len(nodes)
    # One byte more at the end: the line break after the last field's text (see _strings).
    buf = np.frombuffer(b"".join([*nodes, b"\n"]), np.uint8)
    position = np.int32 if buf.size < 2**31 - 1 else np.int64
    lengths = np.fromiter(map(len, nodes), position, n)
    ends = np.cumsum(lengths, dtype=position)
    found = _scan_fields(buf, ends - lengths, ends)
    if found is None:
        return None
    texts: dict[int, list[str]] = {}
    for tag in (_NAME, _OP, _INPUT):
        node, start, stop = (np.concatenate(parts) if parts else np.zeros(0, position) for parts in found[tag])
        if tag != _INPUT:
            if not np.array_equal(np.bincount(node, minlength=n), np.ones(n, np.int64)):
                return None        # no name or op, or several (protobuf would keep the last)
            order = np.empty(n, np.int64)
            order[node] = np.arange(n)
        else:
            # the nodes' inputs in order: nodes and their fields lie in the buffer in order
            order = np.argsort(start, kind="stable")
            input_start = np.zeros(n + 1, np.int64)
            np.cumsum(np.bincount(node, minlength=n), out=input_start[1:])
        text = _strings(buf, start[order], stop[order])
        if text is None:
            return None
        texts[tag] = text
    return NodeTable(texts[_NAME], texts[_OP], texts[_INPUT], input_start)


def _scan_fields(buf: Any, cursor: Any, end: Any) -> dict[int, tuple[list[Any], list[Any], list[Any]]] | None:
    """The name, op and input fields of the nodes at ``buf[cursor[i]:end[i]]``, read one pass
    over all nodes per field: per tag, the node numbers and the payloads' starts and stops, a
    list of arrays each (one per pass). None for a field that is not one-byte tagged and
    length-delimited, or runs past its node."""
    node = np.arange(cursor.size, dtype=cursor.dtype)
    found: dict[int, tuple[list[Any], list[Any], list[Any]]] = {tag: ([], [], []) for tag in (_NAME, _OP, _INPUT)}
    for _ in range(_MAX_SCANNED_FIELDS + 1):      # the last pass finds no field left
        live = cursor < end
        if not live.all():
            node, cursor, end = node[live], cursor[live], end[live]
        if not node.size:
            return found
        if (cursor + 1 >= end).any():
            return None
        tag = buf[cursor]
        if ((tag & 0x87) != _WIRE_LENGTH_DELIMITED).any() or (tag < 8).any():
            return None        # not a one-byte tag of a length-delimited field numbered 1-15
        size = buf[cursor + 1].astype(cursor.dtype)
        start = cursor + 2
        for k in np.flatnonzero(size >= 0x80).tolist():      # a size of more than one byte: rare
            value, after = _varint_within(buf, int(cursor[k]) + 1, int(end[k]))
            if after < 0 or value >= 2**31 - 1:
                return None
            size[k], start[k] = value, after
        stop = start + size
        if (stop > end).any() or (stop < start).any():
            return None
        for kind, (nodes, starts, stops) in found.items():
            chosen = tag == kind
            if chosen.any():
                nodes.append(node[chosen])
                starts.append(start[chosen])
                stops.append(stop[chosen])
        cursor = stop
    return None


def _varint_within(buf: Any, at: int, end: int) -> tuple[int, int]:
    """The varint at ``buf[at]`` (at most 5 bytes, before ``end``) and the position after it;
    (0, -1) if it runs past ``end`` or is longer."""
    value = shift = 0
    while at < end and shift < 35:
        byte = int(buf[at])
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    return 0, -1


def _strings(buf: Any, starts: Any, stops: Any) -> list[str] | None:
    """The UTF-8 texts ``buf[starts[i]:stops[i]]`` (in the buffer's order, not overlapping),
    decoded at once: the bytes of all of them, each with the byte after it, are picked out with
    one mask, that byte turned into a line break, decoded and split. None if one is not UTF-8 or holds a
    line break itself."""
    count = starts.size
    if not count:
        return []
    # The buffer as runs: a gap, a text and the byte after it, a gap, ..., the last gap.
    runs = np.empty(2 * count + 1, np.int64)
    runs[1::2] = stops + 1 - starts
    runs[0] = starts[0]
    runs[2:-1:2] = starts[1:] - stops[:-1] - 1
    runs[-1] = buf.size - stops[-1] - 1
    flags = np.zeros(2 * count + 1, bool)
    flags[1::2] = True
    picked = buf[np.repeat(flags, runs)]
    picked[np.cumsum(runs[1::2]) - 1] = 0x0A
    try:
        text: str = picked.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        return None
    parts = text.split("\n")
    if len(parts) != count + 1:
        return None
    parts.pop()
    return parts
