"""The ``gradreg view`` and ``gradreg tensorboard`` subcommands.

gradreg/cli.py adds them to its parser with ``add_view_commands(subparsers, parents=[common])``;
each sets ``func`` to a function of the parsed arguments returning the exit status and
raising GradregError (one line on stderr, exit 1) for a bad graph or a missing Graphviz.
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from gradreg.cli_values import UsageError
from gradreg.errors import RenderError
from gradreg.formats import atomic_write, load_graph
from gradreg.formats.model_kinds import is_saved_model_dir

# gradreg.viz (the view model, DOT, HTML, TensorBoard's event files) is imported by the
# commands below when they run: importing it costs every command 20-35 ms otherwise.

VIEW_EPILOG = """\
examples:
  gradreg view model.pb -o model.html                  # open in a browser; click boxes to open them
  gradreg view grad.pb -o grad.svg --depth 2           # scopes two levels deep, deeper ones folded
  gradreg view grad.pb -o grad.png --expand 'gradients/dense*'
  gradreg view grad.pb -o path.svg --ys loss --xs dense/kernel   # only the ops from xs to ys
  gradreg view model.pb -o model.dot && dot -Tpdf model.dot -o model.pdf
  gradreg view export_dir -o model.html                # a SavedModel: its signature, functions inlined
  gradreg view model.onnx -o model.html --plumbing     # initializers drawn as nodes too

Constants, variables and their reads are listed inside the ops that use them (as Netron draws
ONNX initializers), NoOps that only order other ops are left out: --plumbing draws them as
nodes, and the HTML page has a switch for it.

.dot and .html need nothing installed; .svg and .png need Graphviz
(apt install graphviz | brew install graphviz | conda install graphviz).

Every command also takes --debug, --quiet, --allow-files and the resource limits:
`gradreg --help` describes them.
"""

GRAPH_HELP = ("a graph file (GraphDef .pb, .pbtxt or .json; ONNX .onnx; any format a plugin adds), or a "
              "SavedModel directory")

TENSORBOARD_EPILOG = """\
examples:
  gradreg tensorboard grad.pb runs/grad && tensorboard --logdir runs

Every command also takes --debug, --quiet, --allow-files and the resource limits:
`gradreg --help` describes them.
"""


EXPLORER_EPILOG = """\
examples:
  gradreg explorer model.pb -o me/                      # the graph only
  gradreg explorer model.pb -o me/ --ys loss --feed batch.npz        # and where the gradient of loss flows
  gradreg explorer model.onnx -o me/ --feed x=x.npy     # ys: the model's declared outputs
  gradreg explorer export_dir -o me/ --feed inputs.npz --grad-ys output_0=onehot.npy
  model-explorer me/graph.json --node_data_paths=me/gradient_l2.json,me/gradient_status.json

Writes OUT_DIR/graph.json (Model Explorer's graph JSON: name scopes as layers, op types, edges
with dtypes and shapes, attributes; what `gradreg view` shows) and, with --ys, --xs, --feed,
--grad-ys or --stop, one overlay per measure of the gradient of the ys with respect to each op's
outputs: gradient_l2.json, gradient_max_abs.json, gradient_log10_l2.json, gradient_status.json
(flows, zero, disconnected: on the path but no gradient reaches it; ops off the path have no
value). Opening them needs Model Explorer (pip install "gradreg[explorer]"); writing them does not.
`model-explorer MODEL --extensions=gradreg_model_explorer` opens a model file directly.

Every command also takes --debug, --quiet, --allow-files and the resource limits:
`gradreg --help` describes them.
"""


def _picture_path(text: str) -> str:
    from gradreg.viz.render import format_for_path  # start-up cost (see the imports above)
    try:
        format_for_path(text)
    except RenderError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _names(text: str | None) -> list[str]:
    return [n.strip() for n in (text or "").split(",") if n.strip()]


def add_view_commands(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    """Add ``view`` and ``tensorboard`` to an argparse subparsers object."""
    formatter = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "view", parents=list(parents), help="draw a graph: DOT, SVG, PNG or an interactive HTML page",
        description="Draw a graph with name scopes folded into boxes, the gradient part in its own colour, "
                    "loop frames and function calls as boxes, op types and static shapes on the nodes.",
        epilog=VIEW_EPILOG, formatter_class=formatter)
    p.add_argument("graph", help=GRAPH_HELP + " (drawn as one signature with its functions inlined)")
    p.add_argument("-o", "--output", required=True, type=_picture_path, metavar="OUT.(svg|png|dot|html)",
                   help="the picture; its suffix chooses the format")
    p.add_argument("--ys", metavar="NAMES", help="show only ops on paths into these tensors or ops (comma-separated)")
    p.add_argument("--xs", metavar="NAMES", help="show only ops on paths out of these tensors or ops (comma-separated)")
    p.add_argument("--depth", type=int, metavar="N",
                   help="open scopes up to N levels deep (default: as many as keep about --budget items)")
    p.add_argument("--expand", action="append", default=[], metavar="SCOPE",
                   help="open this scope, loop frame or call (and those around it); fnmatch patterns "
                        "like 'gradients/*' work; repeatable")
    p.add_argument("--budget", type=int, default=None, metavar="N",
                   help="without --depth: open boxes while at most N items show (default 90)")
    p.add_argument("--flow", action="store_true",
                   help="draw the gradient part flowing downward below the forward part, instead of "
                        "upward beside it")
    p.add_argument("--plumbing", action="store_true",
                   help="draw constants, variables, their reads and NoOps that only order other ops as nodes "
                        "(default: listed inside the ops that use them; the HTML page has a switch)")
    p.add_argument("--signature", default=None, metavar="S",
                   help="SavedModel: the signature to draw (default: serving_default, or the only one)")
    p.add_argument("--tags", default=None, metavar="TAGS",
                   help="SavedModel MetaGraph tag set, comma-separated (default: serve)")
    p.add_argument("--title", help="a title for the picture (default: the file name)")
    p.set_defaults(func=cmd_view)

    _add_explorer(subparsers, parents, formatter)

    p = subparsers.add_parser(
        "tensorboard", parents=list(parents), help="write a TensorBoard event file holding a graph",
        description="Write LOGDIR/events.out.tfevents.* holding the graph; TensorBoard's graph tab shows it.",
        epilog=TENSORBOARD_EPILOG, formatter_class=formatter)
    p.add_argument("graph", help=GRAPH_HELP)
    p.add_argument("logdir", help="directory for the event file (created if missing)")
    p.set_defaults(func=cmd_tensorboard)


def _add_explorer(subparsers: Any, parents: Sequence[argparse.ArgumentParser], formatter: Any) -> None:
    p = subparsers.add_parser(
        "explorer", parents=list(parents), help="write a graph and its gradient magnitudes for Google's Model Explorer",
        description="Write a model as Model Explorer's graph JSON and, per op, the size of the gradient of the ys "
                    "with respect to its outputs as node-data overlays.",
        epilog=EXPLORER_EPILOG, formatter_class=formatter)
    p.add_argument("graph", help=GRAPH_HELP)
    p.add_argument("-o", "--output", required=True, metavar="OUT_DIR",
                   help="directory for graph.json and the overlays (created if missing)")
    p.add_argument("--ys", metavar="NAMES", help="comma-separated tensors to differentiate (default: the model's "
                   "declared floating-point outputs; SavedModel: signature outputs)")
    p.add_argument("--xs", metavar="NAMES", help="measure only ops on paths out of these tensors (comma-separated; "
                   "SavedModel: signature inputs or variables)")
    p.add_argument("--grad-ys", action="append", default=None, metavar="WEIGHTS",
                   help="weights of the ys, as for grad (NAME=VALUE, NAME=FILE.npy, FILE.npz, or tensor names)")
    p.add_argument("--stop", metavar="NAMES", help="tensors to treat as constants")
    p.add_argument("--feed", action="append", default=[], metavar="FEED",
                   help="feed values, as for run and grad: FILE.npz, NAME=FILE.npy or NAME=VALUE; repeatable")
    p.add_argument("--custom-gradient", choices=["error", "forward"], default="error",
                   help="a node naming a gradient this process lacks: fail (default), or differentiate through its "
                        "forward ops, as for grad")
    p.add_argument("--checkpoint", metavar="CKPT", help="graph files: restore the graph's variables first, as for grad")
    p.add_argument("--backend", default=None, metavar="NAME", help="execution backend: numpy or numba")
    p.add_argument("--max-elements", type=int, default=None, metavar="N",
                   help="refuse tensors with more than N elements (default 2**30)")
    p.add_argument("--plumbing", action="store_true",
                   help="show constants, variables and their reads as nodes (default: listed in the ops using them)")
    p.add_argument("--signature", default=None, metavar="S",
                   help="SavedModel: the signature (default: serving_default, or the only one)")
    p.add_argument("--tags", default=None, metavar="TAGS", help="SavedModel MetaGraph tag set (default: serve)")
    p.add_argument("--title", help="the graph's name in Model Explorer (default: the file name)")
    p.set_defaults(func=_explorer)


def _explorer(args: argparse.Namespace) -> int:
    from gradreg.cli_explorer import cmd_explorer  # start-up cost: sessions and differentiation (see above)
    return cmd_explorer(args)


def cmd_view(args: argparse.Namespace) -> int:
    import gradreg.viz as viz  # noqa: PLC0415  (start-up cost, see the imports above)
    if not is_saved_model_dir(args.graph):
        for option in ("signature", "tags"):
            if getattr(args, option) is not None:
                raise UsageError(f"--{option} applies to a SavedModel directory, and {args.graph} is not one")
    graph, title = viz.graph_to_draw(args.graph, args.signature, _names(args.tags) or None)
    fmt = viz.format_for_path(args.output)
    start = time.perf_counter()
    picture = viz.render(graph, fmt, ys=_names(args.ys) or None, xs=_names(args.xs) or None, depth=args.depth,
                         expand=args.expand, **({"budget": args.budget} if args.budget else {}),
                         mirror=not args.flow, title=args.title or title, plumbing=args.plumbing)
    data = picture.encode("utf-8") if isinstance(picture, str) else picture
    atomic_write(args.output, data)
    print(f"wrote {args.output} ({fmt}, {len(graph)} ops, {time.perf_counter() - start:.1f} s)")
    return 0


def cmd_tensorboard(args: argparse.Namespace) -> int:
    from gradreg.viz.tensorboard import write_tensorboard_events  # start-up cost (see the imports above)
    graph = load_graph(args.graph)
    path = write_tensorboard_events(graph, args.logdir)
    print(f"wrote {path} ({len(graph)} ops); run: tensorboard --logdir {args.logdir}")
    return 0
