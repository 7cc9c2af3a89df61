"""TensorFlow's GraphDef, binary (.pb), text (.pbtxt) and protobuf JSON (.json), as three
graph formats.

A graph read and written unchanged is byte-identical, unknown fields included (the graph
model keeps every NodeDef as it was read). JSON is protobuf's canonical JSON mapping
(``google.protobuf.json_format``: field names in lowerCamelCase, bytes as base64, 64-bit
integers as strings); it keeps every known field but not unknown ones. This module is a plugin
(entry point ``graphdef``): it registers the formats through the ``gradreg_graph_formats`` hook.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from google.protobuf import json_format, text_format, unknown_fields
from google.protobuf import message as protobuf_message

from gradreg import deadline
from gradreg.config import MAX_MESSAGE_DEPTH
from gradreg.errors import GraphFileError
from gradreg.model.graph import Graph, import_graph_def
from gradreg.model.node_bytes import split_graph_def
from gradreg.proto import graph_pb2
from gradreg.registry.extensions import GraphFormat
from gradreg.registry.hookspecs import hookimpl

TEXT_SUFFIXES = (".pbtxt", ".pbtext", ".txt", ".prototxt")
BINARY_SUFFIXES = (".pb", ".graphdef", ".bin")
JSON_SUFFIXES = (".json",)


def looks_like_text(head: bytes) -> bool:
    """Whether content starting with ``head`` is a text proto (a field name or a comment first)."""
    head = head.lstrip()
    if not head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    first = head[:1]
    return first.isalpha() or first == b"#"


# The tokens of a text proto that matter for nesting: strings and comments (skipped whole, so the
# braces inside them do not count) and the message delimiters.
_NESTING_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|#[^\n]*|[{}<>]')


def text_nesting_depth(text: str) -> int:
    """How deeply messages nest in a text proto (``node { attr { ... } }`` is 2)."""
    depth = deepest = 0
    for token in _NESTING_TOKENS.findall(text):
        if token in ("{", "<"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("}", ">"):
            depth -= 1
    return deepest


def parse_text(data: bytes, where: str) -> graph_pb2.GraphDef:
    graph_def = graph_pb2.GraphDef()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise GraphFileError(f"{where}: not a text GraphDef (the file is not UTF-8)") from None
    # Checked before parsing (the text parser recurses once per level): a graph nested deeper than
    # the binary decoder accepts would load but could not be written as .pb and read back.
    depth = text_nesting_depth(text)
    if depth > MAX_MESSAGE_DEPTH:
        raise GraphFileError(f"{where}: messages nested {depth} deep, more than the {MAX_MESSAGE_DEPTH} "
                             f"levels a binary GraphDef may have")
    try:
        # ParseLines is public protobuf API that the type stubs leave out
        text_format.ParseLines(_lines_in_time(text, where), graph_def)  # type: ignore[attr-defined]
    except text_format.ParseError as exc:
        raise GraphFileError(f"{where}: not a text GraphDef: {exc}") from None
    return graph_def


def _lines_in_time(text: str, where: str) -> Iterator[str]:
    """The lines of ``text`` for protobuf's parser, which reads them as it goes (a few hundred
    kilobytes a second: a large file takes minutes), checking the current deadline
    (gradreg.deadline) every 4,096 lines."""
    for i, line in enumerate(text.split("\n")):
        if not i & 4095:
            deadline.check(where, f"while parsing the text (line {i + 1:,})")
        yield line


def looks_like_json(head: bytes) -> bool:
    """Whether content starting with ``head`` is a JSON object."""
    return head.lstrip()[:1] == b"{"


def parse_json(data: bytes, where: str) -> graph_pb2.GraphDef:
    graph_def = graph_pb2.GraphDef()
    try:
        json_format.Parse(data.decode("utf-8"), graph_def)
    except UnicodeDecodeError:
        raise GraphFileError(f"{where}: not a JSON GraphDef (the file is not UTF-8)") from None
    except json_format.ParseError as exc:   # protobuf's message spans lines: keep it on one
        raise GraphFileError(f"{where}: not a JSON GraphDef: {' '.join(str(exc).split())}") from None
    return graph_def


def parse_binary(data: bytes, where: str) -> graph_pb2.GraphDef:
    graph_def = graph_pb2.GraphDef()
    try:
        graph_def.ParseFromString(data)
    except (protobuf_message.DecodeError, ValueError, RuntimeError) as exc:
        if "MaxDepth" in str(exc):
            raise GraphFileError(f"{where}: messages nested more than the {MAX_MESSAGE_DEPTH} levels a binary "
                                 f"GraphDef may have") from None
        raise GraphFileError(f"{where}: not a binary GraphDef (truncated or corrupt: {exc})") from None
    if not graph_def.node and not graph_def.library.function and len(unknown_fields.UnknownFieldSet(graph_def)):
        raise GraphFileError(f"{where}: the bytes parse as protobuf but hold no GraphDef "
                             f"(no nodes, only unknown fields)")
    return graph_def


def _graph_def_of(graph: Any) -> graph_pb2.GraphDef:
    if isinstance(graph, Graph):
        return graph.as_graph_def()
    if isinstance(graph, graph_pb2.GraphDef):
        return graph
    raise GraphFileError(f"cannot write {type(graph).__name__} as a GraphDef: expected a Graph or GraphDef")


def read_text(data: bytes, where: str) -> Graph:
    return import_graph_def(parse_text(data, where), source=where)


def read_binary(data: bytes, where: str) -> Graph:
    graph_def = parse_binary(data, where)     # what does not parse is refused here, as a whole
    # The graph keeps each node's bytes, parsed when needed: the parsed GraphDef is dropped
    # before the graph is built (a quarter of the memory for a graph of a million nodes).
    del graph_def
    template, nodes = split_graph_def(data)
    return import_graph_def(template, source=where, node_bytes=nodes)


def read_json(data: bytes, where: str) -> Graph:
    return import_graph_def(parse_json(data, where), source=where)


def write_json(graph: Any) -> bytes:
    return (json_format.MessageToJson(_graph_def_of(graph), indent=1) + "\n").encode("utf-8")


def write_text(graph: Any) -> bytes:
    return text_format.MessageToString(_graph_def_of(graph)).encode("utf-8")


def write_binary(graph: Any) -> bytes:
    return _graph_def_of(graph).SerializeToString()


BINARY = GraphFormat(
    "graphdef", suffixes=BINARY_SUFFIXES, read=read_binary, write=write_binary,
    sniff=lambda head: True, sniff_order=-100,   # any bytes may be a binary protobuf: tried last
    aliases=("binary",), summary="TensorFlow GraphDef, binary protobuf")
TEXT = GraphFormat(
    "graphdef-text", suffixes=TEXT_SUFFIXES, read=read_text, write=write_text, sniff=looks_like_text,
    aliases=("text",), summary="TensorFlow GraphDef, protobuf text format")
JSON = GraphFormat(
    "graphdef-json", suffixes=JSON_SUFFIXES, read=read_json, write=write_json, sniff=looks_like_json,
    aliases=("json",), summary="TensorFlow GraphDef, protobuf JSON (json_format)")


@hookimpl
def gradreg_graph_formats() -> list[GraphFormat]:
    return [BINARY, TEXT, JSON]
