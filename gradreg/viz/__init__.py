"""Pictures of graphs and TensorBoard event files.

    >>> from gradreg.viz import render, write_tensorboard_events
    >>> open("grad.html", "w").write(render(graph, "html"))       # or "dot"; "svg"/"png" return bytes
    >>> write_tensorboard_events(graph, "runs/grad")

Modules: ``sources`` (what a path draws: a graph file, or a SavedModel signature inlined),
``model`` (ops placed in scope, loop-frame, call and function boxes; which ops are gradient
ops; the plumbing drawn inside the ops that use it), ``fold`` (which boxes are open), ``dot``
(DOT text, Graphviz for SVG/PNG), ``html`` + ``page.js`` (the self-contained interactive
page), ``tensorboard`` (event files), ``explorer`` (Google Model Explorer's graph JSON and
node-data documents) with ``magnitudes`` (the size of the gradient at each op), and
gradreg.cli_view (the ``view``, ``explorer`` and ``tensorboard`` subcommands).
"""
from gradreg.errors import RenderError
from gradreg.viz.fold import fold
from gradreg.viz.model import build_view
from gradreg.viz.render import format_for_path, render
from gradreg.viz.sources import graph_to_draw
from gradreg.viz.tensorboard import write_tensorboard_events

__all__ = ["render", "format_for_path", "RenderError", "build_view", "fold", "write_tensorboard_events",
           "graph_to_draw"]
