"""Graphviz DOT text of a folded view, and SVG/PNG through Graphviz's ``dot`` program.

DOT needs nothing installed; SVG and PNG need Graphviz (``apt install graphviz``,
``brew install graphviz`` or ``conda install graphviz``).
"""
from __future__ import annotations

import math
import shutil
import subprocess
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from gradreg.errors import RenderError
from gradreg.viz import style
from gradreg.viz.fold import Folding
from gradreg.viz.model import GRADIENT, Box, Node

INSTALL_HINT = ("install Graphviz to make SVG or PNG pictures: 'apt install graphviz' (Debian, Ubuntu), "
                "'brew install graphviz' (macOS) or 'conda install graphviz'; or write .dot or .html, "
                "which need nothing")


def to_dot(folding: Folding, title: str = "", mirror: bool = True) -> str:
    """The DOT text of ``folding``: open boxes as clusters, folded boxes as single nodes;
    ``mirror`` runs the gradient part upward beside the forward part (see _edge_lines)."""
    plan = plan_edges(folding)
    font = "Helvetica,Arial,sans-serif"
    out = ["digraph gradreg {",
           (f'  graph [rankdir=TB, newrank=true, nodesep=0.22, ranksep=0.32, fontname="{font}", fontsize=11, '
           f"labeljust=l, labelloc=t, margin=0.2];"),
           (f'  node [shape=box, style="rounded,filled", fontname="{font}", fontsize=10, margin="0.10,0.04", '
           f"height=0.3, penwidth=1.2];"),
           f'  edge [color="{style.DATA_EDGE}", arrowsize=0.6, fontname="{font}", fontsize=8, fontcolor="#555555"];',
           f"  label=<{_legend(folding, title)}>;"]
    _emit_contents(out, folding, folding.view.boxes[""], "  ", plan.notes)
    out.extend(_edge_lines(folding, plan, mirror))
    out.append("}")
    return "\n".join(out) + "\n"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _emit_contents(out: list[str], folding: Folding, box: Box, indent: str, notes: dict[str, str]) -> None:
    view = folding.view
    for child_id in box.boxes:
        child = view.boxes[child_id]
        if child_id in folding.open:
            _emit_cluster(out, folding, child, indent, notes)
        else:
            out.append(indent + _folded_stmt(folding, child, notes.get(child_id, "")))
    for node_id in box.nodes:
        node = view.nodes[node_id]
        out.append(indent + _node_stmt(node, note=notes.get(node_id, ""),
                                       params=node.params if view.plumbing_hidden else ()))


def _emit_cluster(out: list[str], folding: Folding, box: Box, indent: str, notes: dict[str, str]) -> None:
    """An open box as a cluster; a scope holding nothing but one open scope merges with it (a/b)."""
    view = folding.view
    title = style.box_title(box)
    while (box.kind in ("scope", "group") and not box.nodes and len(box.boxes) == 1
           and box.boxes[0] in folding.open and view.boxes[box.boxes[0]].kind in ("scope", "group")):
        box = view.boxes[box.boxes[0]]
        title += "/" + style.box_title(box)
    colours = style.colours(box.kind_colour)
    attrs = {"label": f"<<b>{escape(title)}</b>>", "style": '"rounded,filled"', "fillcolor": _quote(colours["box"]),
             "color": _quote(colours["box_line"]), "fontsize": "10", "tooltip": _quote(box.key)}
    if box.kind == "frame":
        attrs.update(style='"rounded,dashed,filled"', color=_quote(style.FRAME_LINE), penwidth="1.5")
    elif box.kind in ("call", "function"):
        attrs.update(color=_quote(style.CALL_LINE), penwidth="1.5")
        if box.kind == "call":
            call = view.nodes[box.nodes[0]]
            attrs["label"] = f"<<b>call {escape(call.op_type)}</b> {escape(style.shorten(box.label, 36))}>"
    out.append(f"{indent}subgraph {_quote('cluster_' + box.id)} {{")
    out.extend(f"{indent}  {k}={v};" for k, v in attrs.items())
    _emit_contents(out, folding, box, indent + "  ", notes)
    out.append(indent + "}")


def _node_stmt(node: Node, extra: str = "", node_id: str | None = None, note: str = "",
               params: Sequence[str] = ()) -> str:
    op_type, name, shapes = style.node_lines(node)
    colours = style.colours(node.kind)
    small = node.op_type in style.CONSTANT_TYPES
    parts = [f"<b>{escape(op_type)}</b>" if not small else escape(op_type)]
    if name:
        parts.append(f'<font point-size="{8 if small else 9}">{escape(name)}</font>')
    if shapes:
        parts.append(f'<font point-size="8" color="#555555">{escape(shapes)}</font>')
    for line in params:
        parts.append(f'<font point-size="7" color="{style.PARAM_TEXT}">{escape(style.shorten(line, 44))}</font>')
    if extra:
        parts.append(f'<font point-size="8" color="{style.CALL_LINE}">{escape(extra)}</font>')
    if note:
        parts.append(f'<font point-size="8" color="{style.CONTROL_EDGE}">{escape(note)}</font>')
    attrs = {"label": "<" + "<br/>".join(parts) + ">", "tooltip": _quote(f"{node.name} ({node.op_type})"),
             "fillcolor": _quote(style.CONSTANT_FILL if small else colours["fill"]),
             "color": _quote(style.CONSTANT_LINE if small else colours["line"])}
    if small:
        attrs.update(fontsize="8", height="0.2", margin='"0.06,0.02"')
    if node.calls and extra:
        attrs.update(shape="component", style='"filled"', color=_quote(style.CALL_LINE), penwidth="1.5")
    if node.context:
        attrs.update(style='"rounded,dashed,filled"', fillcolor='"#ffffff"', fontcolor='"#777777"')
    body = ", ".join(f"{k}={v}" for k, v in attrs.items())
    return f"{_quote(node_id or node.id)} [{body}];"


def _folded_stmt(folding: Folding, box: Box, note: str = "") -> str:
    """A folded box as one node; a folded call keeps its op's label and names its functions."""
    view = folding.view
    if box.kind == "call":
        call = view.nodes[box.nodes[0]]
        functions = [view.boxes[c].label for c in box.boxes]
        return _node_stmt(call, "\u0192 " + ", ".join(style.shorten(f, 28) for f in functions), node_id=box.id,
                          note=note)
    colours = style.colours(box.kind_colour)
    label = f"<b>{escape(style.box_title(box))}</b><br/><font point-size=\"8\">{escape(style.box_summary(box))}</font>"
    if note:
        label += f'<br/><font point-size="8" color="{style.CONTROL_EDGE}">{escape(note)}</font>'
    attrs = {"label": f"<{label}>", "tooltip": _quote(f"{box.key}: {style.box_summary(box)} (folded)"),
             "fillcolor": _quote(colours["fill"]), "color": _quote(colours["line"]), "penwidth": "2.2",
             "style": '"rounded,filled,bold"'}
    if box.kind == "frame":
        attrs.update(color=_quote(style.FRAME_LINE), style='"rounded,filled,dashed,bold"')
    body = ", ".join(f"{k}={v}" for k, v in attrs.items())
    return f"{_quote(box.id)} [{body}];"


# An item with more control edges than this has them summarized in its label, not drawn:
# the NoOp that TensorFlow hangs every stateful op of a function on would tie the picture in knots.
CONTROL_HUB = 6


@dataclass
class EdgePlan:
    """The edges between visible items, aggregated, and notes for items whose control
    edges are summarized instead of drawn."""
    data: dict[tuple[str, str], list]
    control: dict[tuple[str, str], list]
    notes: dict[str, str]


def plan_edges(folding: Folding) -> EdgePlan:
    view = folding.view
    data: dict[tuple[str, str], list] = defaultdict(list)
    control: dict[tuple[str, str], list] = defaultdict(list)
    for edge in view.edges:
        src, dst = folding.rep(edge.src), folding.rep(edge.dst)
        if src != dst:
            (control if edge.control else data)[(src, dst)].append(edge)
    into = Counter(dst for _, dst in control)
    out_of = Counter(src for src, _ in control)
    hubs_in = {item for item, n in into.items() if n > CONTROL_HUB}
    hubs_out = {item for item, n in out_of.items() if n > CONTROL_HUB} - hubs_in
    notes: dict[str, str] = {}
    for item in hubs_in:
        notes[item] = f"⇠ control from {into[item]} items"
    for item in hubs_out:
        notes[item] = f"control to {out_of[item]} items ⇢"
    kept = {k: v for k, v in control.items() if k[1] not in hubs_in and k[0] not in hubs_out}
    return EdgePlan(dict(data), kept, notes)


def is_gradient_item(folding: Folding, item: str) -> bool:
    view = folding.view
    if item in view.nodes:
        return view.nodes[item].kind == GRADIENT
    return view.boxes[item].kind_colour == GRADIENT


def _edge_lines(folding: Folding, plan: EdgePlan, mirror: bool) -> list[str]:
    """One line per aggregated edge. With ``mirror``, edges between two gradient items are
    ranked backwards (``dir=back``), so the gradient runs upward beside the forward pass and
    the activations it reads cross over sideways instead of down the whole picture."""
    view = folding.view
    lines = []
    for control, groups in ((False, plan.data), (True, plan.control)):
        for (src, dst), edges in groups.items():
            attrs: dict[str, str] = {}
            if control:
                attrs.update(style="dashed", color=_quote(style.CONTROL_EDGE), arrowhead="odot")
            else:
                label = _edge_label(folding, src, dst, edges)
                if label:
                    attrs["label"] = _quote(label)
            if len(edges) > 1:
                attrs["penwidth"] = f"{1 + min(3.0, math.log2(len(edges))):.2f}"
            if any(view.nodes[e.src].op_type in style.BACK_EDGE_TYPES for e in edges):
                attrs["constraint"] = "false"
            tail, head = src, dst
            if mirror and is_gradient_item(folding, src) and is_gradient_item(folding, dst):
                tail, head = dst, src
                attrs["dir"] = "back"
                if control:
                    attrs.update(arrowtail="odot", arrowhead="none")
            body = ", ".join(f"{k}={v}" for k, v in attrs.items())
            lines.append(f"  {_quote(tail)} -> {_quote(head)}" + (f" [{body}];" if body else ";"))
    return lines


def _edge_label(folding: Folding, src: str, dst: str, edges: list) -> str:
    view = folding.view
    folded = src not in view.nodes or dst not in view.nodes
    multi_output = src in view.nodes and len(view.nodes[src].shapes) > 1
    if not (folded or multi_output):
        return ""
    shapes = list(dict.fromkeys(e.shape for e in edges if e.shape))
    text = shapes[0] if len(shapes) == 1 else (f"\u00d7{len(edges)}" if len(edges) > 1 else "")
    if multi_output and not folded:
        text = f":{edges[0].port} {text}".strip()
    elif len(edges) > 1 and len(shapes) == 1:
        text += f" \u00d7{len(edges)}"
    return text


def _legend(folding: Folding, title: str) -> str:
    view = folding.view
    total = len(view.nodes)
    grads = sum(n.kind == "gradient" for n in view.nodes.values())
    f, g = style.COLOURS["forward"], style.COLOURS["gradient"]
    head = f"<b>{escape(title)}</b>  " if title else ""
    return (f'<table border="0" cellspacing="4"><tr><td>{head}{total} ops ({grads} gradient), '
            f"{folding.visible()} shown</td>"
            f'<td bgcolor="{f["fill"]}" color="{f["line"]}" border="1">forward</td>'
            f'<td bgcolor="{g["fill"]}" color="{g["line"]}" border="1">gradient</td>'
            f'<td border="1" style="dashed" color="{style.FRAME_LINE}">loop frame</td>'
            f'<td border="1" color="{style.CALL_LINE}">function call</td>'
            f"<td>bold box: folded scope; dashed edge: control dependency</td></tr></table>")


def run_graphviz(dot_text: str, fmt: str, timeout: float | None = None) -> bytes:
    """``dot -T<fmt>`` of the text; RenderError with install instructions when dot is missing."""
    program = shutil.which("dot")
    if program is None:
        raise RenderError(f"Graphviz's 'dot' program is not on PATH: {INSTALL_HINT}")
    try:
        result = subprocess.run([program, f"-T{fmt}"], input=dot_text.encode("utf-8"), capture_output=True,
                                timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise RenderError(f"Graphviz took more than {timeout:g} s; fold more (--depth) or select a path "
                          f"(--ys/--xs)") from None
    if result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RenderError(f"Graphviz failed (exit {result.returncode}): {message[-1] if message else 'no message'}")
    return result.stdout
