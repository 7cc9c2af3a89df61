"""Colours and label text shared by the DOT and HTML pictures."""
from __future__ import annotations

from gradreg.viz.model import FORWARD, GRADIENT, Box, Node

# fill of an op, its outline, the background of an open box of that kind
COLOURS = {
    FORWARD: {"fill": "#dbeafe", "line": "#2563eb", "box": "#f4f8ff", "box_line": "#93b4f0"},
    GRADIENT: {"fill": "#ffe4cc", "line": "#ea580c", "box": "#fff7ef", "box_line": "#f3b07c"},
}
CONSTANT_FILL = "#eeeeee"
CONSTANT_LINE = "#9a9a9a"
FRAME_LINE = "#7c3aed"
CALL_LINE = "#047857"
CONTROL_EDGE = "#8a8a8a"
DATA_EDGE = "#4b5563"
PARAM_TEXT = "#6b7280"     # the constants and variables an op reads, listed inside it

# Ops drawn small and grey: they hold values rather than compute.
CONSTANT_TYPES = frozenset({"Const", "HostConst", "_Arg", "_Retval", "Placeholder", "PlaceholderWithDefault",
                            "VarHandleOp", "VariableV2", "NoOp"})
# Ops whose data output feeds an earlier op: their edges must not pull the layout apart.
BACK_EDGE_TYPES = frozenset({"NextIteration", "RefNextIteration"})


def shorten(text: str, limit: int = 30) -> str:
    """``text`` cut in the middle with an ellipsis when longer than ``limit``."""
    if len(text) <= limit:
        return text
    keep = limit - 1
    return text[: (keep + 1) // 2] + "\u2026" + text[len(text) - keep // 2:]


def shapes_line(shapes: list[str], limit: int = 3) -> str:
    shown = [s for s in shapes[:limit]]
    text = " ".join(shown)
    if len(shapes) > limit:
        text += f" +{len(shapes) - limit}"
    return text


def node_lines(node: Node) -> tuple[str, str, str]:
    """(op type, short name, output shapes) of an op's label."""
    leaf = node.name.rsplit("/", 1)[-1]
    name = "" if leaf == node.op_type else shorten(leaf)
    if node.op_type in ("_Arg", "_Retval"):
        return ("arg" if node.op_type == "_Arg" else "return", shorten(leaf), shapes_line(node.shapes))
    return node.op_type, name, shapes_line(node.shapes)


def box_title(box: Box) -> str:
    if box.kind == "frame":
        return "\u21bb loop " + shorten(box.label, 40)
    if box.kind == "function":
        return "\u0192 " + shorten(box.label, 40)
    return shorten(box.label, 36)


def box_summary(box: Box) -> str:
    text = f"{box.count} op" + ("s" if box.count != 1 else "")
    if 0 < box.gradient_count < box.count:
        text += f", {box.gradient_count} gradient"
    return text


def colours(kind: str) -> dict[str, str]:
    return COLOURS.get(kind, COLOURS[FORWARD])


__all__ = ["COLOURS", "GRADIENT", "FORWARD", "node_lines", "box_title", "box_summary", "shorten", "colours"]
