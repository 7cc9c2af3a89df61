"""``render(graph, fmt)``: a picture of a graph as DOT text, SVG, PNG or a self-contained HTML page."""
from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from gradreg.errors import RenderError
from gradreg.viz.dot import run_graphviz, to_dot
from gradreg.viz.fold import DEFAULT_BUDGET, Folding, fold
from gradreg.viz.html import to_html
from gradreg.viz.model import build_view, hide_plumbing

FORMATS = ("dot", "svg", "png", "html")


def render(graph, fmt: str, ys: Sequence[Any] | None = None, xs: Sequence[Any] | None = None, *,
           depth: int | None = None, expand: Iterable[str] = (), budget: int = DEFAULT_BUDGET,
           gradient_ops: Iterable[Any] | None = None, title: str = "", mirror: bool = True,
           plumbing: bool = False, timeout: float | None = None) -> str | bytes:
    """A picture of ``graph``: ``fmt`` is "dot" or "html" (text, no dependency) or "svg" or
    "png" (bytes, through Graphviz's ``dot``; RenderError saying how to install it if missing).

    ``ys``/``xs`` (tensor or op names, Tensors, Operations) keep only the ops on paths from
    the xs to the ys and their direct inputs. ``depth``/``expand``/``budget`` choose which
    scopes are open (see gradreg.viz.fold); in HTML they set the first view, and every box
    opens and closes on click. ``gradient_ops`` overrides which ops count as gradient ops
    (see gradreg.viz.model). ``mirror`` draws the gradient part running upward beside the
    forward part it differentiates (False: everything flows downward). Constants, variables,
    their reads and NoOps that only order other ops are drawn inside the ops that use them
    (see gradreg.viz.model.mark_plumbing) unless ``plumbing``; the HTML page has a switch.

        >>> svg = render(graph, "svg", ys=["loss"], depth=2)
    """
    if fmt not in FORMATS:
        raise RenderError(f"unknown picture format {fmt!r}: use one of {', '.join(FORMATS)}")
    view = build_view(graph, ys=ys, xs=xs, gradient_ops=gradient_ops)
    shown = view if plumbing else hide_plumbing(view)
    folding = fold(shown, depth=depth, expand=expand, budget=budget)
    if fmt == "html":    # the whole view, the plumbing marked: the page shows and hides it
        return to_html(Folding(view, folding.open), title=title, mirror=mirror, plumbing=plumbing)
    text = to_dot(folding, title=title, mirror=mirror)
    if fmt == "dot":
        return text
    return run_graphviz(text, fmt, timeout=timeout)


def format_for_path(path: str | os.PathLike) -> str:
    """The picture format named by a file's suffix (.dot/.gv, .svg, .png, .html/.htm)."""
    suffix = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    fmt = {"gv": "dot", "htm": "html"}.get(suffix, suffix)
    if fmt not in FORMATS:
        raise RenderError(f"{os.fspath(path)}: cannot tell the picture format from the suffix "
                          f"'.{suffix}': use .dot, .svg, .png or .html")
    return fmt
