"""A self-contained HTML page of a folded view: the graph as JSON, the page's own layout and
drawing code (page.js, inline), no network access and no dependency.

Boxes open and close on click; the wheel zooms, dragging pans, clicking an op shows its
inputs and consumers, the search field finds an op by name and opens the boxes around it.
``page.html#open=KEY,KEY`` opens boxes by key when the page loads.
"""
from __future__ import annotations

import json
from html import escape
from importlib import resources
from typing import Any

from gradreg.viz import style
from gradreg.viz.dot import CONTROL_HUB
from gradreg.viz.fold import Folding
from gradreg.viz.model import GRADIENT

_CSS = """
html, body { margin: 0; height: 100%; font: 13px Helvetica, Arial, sans-serif; color: #1f2937; }
#bar { position: fixed; top: 0; left: 0; right: 0; height: 34px; display: flex; gap: 10px; align-items: center;
       padding: 0 10px; background: #f8fafc; border-bottom: 1px solid #d1d5db; z-index: 2; white-space: nowrap; }
#bar b { font-size: 14px; } #bar button { font: inherit; padding: 2px 8px; }
#bar .sw { display: inline-block; padding: 1px 6px; border: 1px solid; border-radius: 4px; font-size: 12px; }
#search { width: 180px; } #search.miss { background: #fee2e2; }
#graph { position: fixed; top: 35px; left: 0; right: 0; bottom: 0; width: 100%; height: calc(100% - 35px);
         cursor: grab; background: #ffffff; }
#info { position: fixed; right: 10px; bottom: 10px; max-width: 520px; max-height: 40%; overflow: auto; display: none;
        background: #ffffffee; border: 1px solid #9ca3af; border-radius: 6px; padding: 8px 10px; font-size: 12px;
        word-break: break-all; z-index: 3; }
text { font-family: Helvetica, Arial, sans-serif; text-anchor: middle; fill: #111827; pointer-events: none; }
.t-bold { font-size: 11px; font-weight: bold; } .t-small { font-size: 11px; }
.t-shape { font-size: 9px; fill: #4b5563; } .t-call { font-size: 9px; fill: #047857; }
.t-note { font-size: 9px; fill: #6b7280; } .t-tiny { font-size: 9px; font-weight: normal; }
.t-param { font-size: 9px; fill: #4b5563; }
.title { text-anchor: start; font-size: 11px; font-weight: bold; fill: #374151; }
.plus { font-size: 12px; font-weight: bold; fill: #374151; }
.header, .folded, .node { cursor: pointer; } .header:hover .title { fill: #000; text-decoration: underline; }
.folded:hover rect, .node:hover rect { filter: brightness(0.95); }
.context text { fill: #6b7280; }
.edge { fill: none; stroke: #4b5563; } .edge.control { stroke: #9ca3af; stroke-dasharray: 5 4; }
.elabel { font-size: 9px; fill: #4b5563; text-anchor: start; paint-order: stroke; stroke: #fff; stroke-width: 3px; }
"""


def _node_record(node) -> dict:
    title, label, shapes = style.node_lines(node)
    record = {"name": node.name, "type": title, "op": node.op_type, "label": label, "shapes": shapes,
              "shapesAll": ", ".join(node.shapes), "kind": int(node.kind == GRADIENT), "context": int(node.context),
              "small": int(node.op_type in style.CONSTANT_TYPES), "nout": len(node.shapes),
              "calls": ", ".join(node.calls)}
    if node.plumbing:
        record["plumb"] = 1
    if node.params:
        record["params"] = [style.shorten(line, 44) for line in node.params]
    return record


def _live_counts(view) -> dict[str, int]:
    """Per box, the nodes inside it that are not plumbing (what the page shows by default)."""
    counts = dict.fromkeys(view.boxes, 0)
    for node in view.nodes.values():
        if node.plumbing:
            continue
        holder = node.box
        while holder is not None:
            counts[holder] += 1
            holder = view.boxes[holder].parent
    return counts


def page_data(folding: Folding, title: str = "", mirror: bool = True, plumbing: bool = False) -> dict:
    """The JSON the page draws: nodes, boxes and edges by index, the boxes open at first, and
    whether the plumbing (gradreg.viz.model.mark_plumbing) shows at first."""
    view = folding.view
    box_ids = list(view.boxes)               # the root ("") first
    box_index = {b: i for i, b in enumerate(box_ids)}
    node_ids = list(view.nodes)
    node_index = {n: i for i, n in enumerate(node_ids)}
    nodes = []
    for n in node_ids:
        record = _node_record(view.nodes[n])
        record["box"] = box_index[view.nodes[n].box]
        nodes.append(record)
    boxes = []
    live = _live_counts(view)
    for b in box_ids:
        box = view.boxes[b]
        boxes.append({"key": box.key, "title": style.box_title(box), "summary": style.box_summary(box),
                      "live": live[b],
                      "kind": box.kind, "parent": -1 if box.parent is None else box_index[box.parent],
                      "grad": int(box.kind_colour == GRADIENT), "boxes": [box_index[c] for c in box.boxes],
                      "nodes": [node_index[n] for n in box.nodes],
                      "functions": ", ".join(style.shorten(view.boxes[c].label, 28) for c in box.boxes)
                      if box.kind == "call" else ""})
    edges = [[node_index[e.src], node_index[e.dst], e.port, e.shape, int(e.control)] for e in view.edges]
    colours: dict[str, Any] = dict(style.COLOURS)      # kinds' colour sets and single colours
    colours.update(frame=style.FRAME_LINE, call=style.CALL_LINE, constant_fill=style.CONSTANT_FILL,
                   constant_line=style.CONSTANT_LINE)
    return {"title": title, "total": len(nodes), "gradients": sum(r["kind"] for r in nodes),
            "plumbing": int(plumbing), "plumbingCount": sum(1 for n in view.nodes.values() if n.plumbing),
            "nodes": nodes, "boxes": boxes, "edges": edges,
            "open": sorted(box_index[b] for b in folding.open if b),
            "colours": colours, "controlHub": CONTROL_HUB, "backTypes": sorted(style.BACK_EDGE_TYPES),
            "mirror": mirror}


def script_json(data: dict) -> str:
    """``data`` as JSON safe inside a <script> element."""
    # "</" would end the script element early; "\u2028/9" are line ends in older JavaScript.
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return text.replace("</", "<\\/").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def to_html(folding: Folding, title: str = "", mirror: bool = True, plumbing: bool = False) -> str:
    """The page, as text."""
    script = resources.files("gradreg.viz").joinpath("page.js").read_text(encoding="utf-8")
    f, g = style.COLOURS["forward"], style.COLOURS["gradient"]
    heading = escape(title or "graph")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{heading} \u2014 gradreg view</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head>
<body>
<div id="bar"><b>{heading}</b><span id="count"></span>
<span class="sw" style="background:{f['fill']};border-color:{f['line']}">forward</span>
<span class="sw" style="background:{g['fill']};border-color:{g['line']}">gradient</span>
<span class="sw" style="border-color:{style.FRAME_LINE};border-style:dashed">loop frame</span>
<span class="sw" style="border-color:{style.CALL_LINE}">function call</span>
<span>click a box to open or fold it</span>
<label title="constants, variables, their reads and NoOps that only order other ops: drawn as nodes, or listed \
inside the ops that use them"><input type="checkbox" id="plumbing"> variables &amp; constants</label>
<button id="open-level">open one level</button><button id="fold-all">fold all</button><button id="fit">fit</button>
<input id="search" placeholder="find op (Enter)"></div>
<svg id="graph" xmlns="http://www.w3.org/2000/svg"><defs>
<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" markerUnits="userSpaceOnUse"
 orient="auto-start-reverse">
<path d="M0,0 L10,5 L0,10 z" fill="#4b5563"/></marker>
<marker id="dot" viewBox="0 0 10 10" refX="5" refY="5" markerWidth="7" markerHeight="7" markerUnits="userSpaceOnUse">
<circle cx="5" cy="5" r="3.5" fill="#fff" stroke="#9ca3af" stroke-width="1.5"/></marker></defs></svg>
<div id="info" title="click to close"></div>
<script>const DATA = {script_json(page_data(folding, title, mirror, plumbing))};</script>
<script>{script}</script>
</body></html>
"""
