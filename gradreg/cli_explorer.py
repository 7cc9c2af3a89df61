"""``gradreg explorer``: a model for Google's Model Explorer, with where its gradient flows.

Writes into the directory ``-o OUT_DIR`` (created if missing) the model's graph as Model
Explorer's graph JSON (``graph.json``, gradreg.viz.explorer) and, when a gradient is asked for
(``--ys``, ``--feed``, ``--xs``, ``--grad-ys`` or ``--stop``), one node-data file per overlay:
``gradient_l2.json``, ``gradient_max_abs.json``, ``gradient_log10_l2.json`` and
``gradient_status.json`` (gradreg.viz.magnitudes), and prints the ``model-explorer`` command
that opens them. The flags mean what they mean for ``gradreg grad``; --ys default to the
model's declared floating-point outputs (a SavedModel's signature outputs).

gradreg.cli_view adds the subcommand to the parser and imports this module when it runs.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from gradreg.cli_commands import command_grad_ys, command_session
from gradreg.cli_inspect import default_outputs
from gradreg.cli_saved_model import graph_only
from gradreg.cli_values import UsageError, find_tensors, names, read_feeds
from gradreg.cli_weights import parse_weights, weight_tensors
from gradreg.errors import FetchError
from gradreg.formats.atomic import atomic_write_all
from gradreg.formats.model_kinds import is_saved_model_dir
from gradreg.formats.saved_model import DEFAULT_TAGS
from gradreg.formats.saved_model_loader import load_saved_model
from gradreg.formats.signature_graph import SignatureGraph, signature_graph
from gradreg.model.model_file import declared_name
from gradreg.viz.explorer import OVERLAYS, explorer_graph, node_data
from gradreg.viz.magnitudes import DISCONNECTED, FLOWS, NON_FINITE, ZERO, NodeGradient, gradient_magnitudes
from gradreg.viz.sources import graph_to_draw

GRAPH_FILE = "graph.json"


def overlay_file(overlay: str) -> str:
    return f"gradient_{overlay}.json"


def wants_gradients(args: argparse.Namespace) -> bool:
    return bool(args.ys or args.xs or args.feed or args.grad_ys or args.stop)


def cmd_explorer(args: argparse.Namespace) -> int:
    saved_model = is_saved_model_dir(args.graph)
    if not saved_model:
        graph_only(args, "signature", "tags")
    elif args.checkpoint:
        raise UsageError("--checkpoint applies to graph files: a SavedModel restores its own variables/")
    out_dir = _output_directory(args.output)       # checked first, made when the files are ready
    gradient = wants_gradients(args)
    if saved_model and gradient:
        flat = _signature_graph(args)
        graph, title = flat.graph, f"{os.path.basename(os.path.normpath(args.graph))} \u2014 signature {flat.signature}"
        drawn = list(flat.outputs.values())
    else:
        flat = None
        graph, title = graph_to_draw(args.graph, args.signature, names(args.tags) or None)
        drawn = None
    title = args.title or title
    document = explorer_graph(graph, graph_id=title, ys=drawn, plumbing=args.plumbing)
    shown = [node["id"] for node in document["graphs"][0]["nodes"]]
    summary = document["graphs"][0]["groupNodeAttributes"][""]
    files: list[tuple[str, bytes]] = [(os.path.join(out_dir, GRAPH_FILE), _json(document))]
    found: dict[str, NodeGradient] = {}
    if gradient:
        found, ys = _saved_model_magnitudes(flat, args, shown) if flat is not None else \
            _graph_magnitudes(graph, args, shown)
        of = "of " + ", ".join(ys)
        files += [(os.path.join(out_dir, overlay_file(o)), _json(node_data(title, found, o, of))) for o in OVERLAYS]
    os.makedirs(out_dir, exist_ok=True)
    atomic_write_all(files)
    stale = [overlay_file(o) for o in OVERLAYS if not gradient and os.path.exists(os.path.join(out_dir,
                                                                                              overlay_file(o)))]
    if stale:
        print(f"gradreg explorer: note: {', '.join(stale)} in {out_dir} are from an earlier run, not this graph's",
              file=sys.stderr)
    print(f"wrote {files[0][0]} ({summary['nodes']} nodes; {summary['ops']} ops)")
    if gradient:
        print(f"wrote {len(OVERLAYS)} gradient overlays ({_counts(found)})")
    print("open with: " + open_command([path for path, _ in files]))
    return 0


def open_command(paths: Sequence[str]) -> str:
    """The ``model-explorer`` command that opens a graph JSON with its node-data files."""
    words = ["model-explorer", paths[0]]
    if len(paths) > 1:
        words.append("--node_data_paths=" + ",".join(paths[1:]))
    return " ".join(shlex.quote(w) for w in words)


def _output_directory(path: str) -> str:
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"-o {path}: not a directory (the graph and its overlays are several files)")
    return path


def _json(document: Any) -> bytes:
    return json.dumps(document, indent=1, allow_nan=False).encode("utf-8")


def _counts(found: dict[str, NodeGradient]) -> str:
    counts = {status: sum(1 for f in found.values() if f.status == status)
              for status in (FLOWS, ZERO, DISCONNECTED, NON_FINITE)}
    return ", ".join(f"{n} {status}" for status, n in counts.items() if n) or "no op on the path"


def _differentiable(t: Any) -> bool:
    return t.dtype is not None and bool(t.dtype.is_floating or t.dtype.is_complex)


def _default_ys(outputs: Sequence[Any], what: str) -> list[Any]:
    ys = [t for t in outputs if _differentiable(t)]
    if not ys:
        raise UsageError(f"{what} has no floating-point outputs to differentiate: name them with --ys")
    return ys


def _graph_magnitudes(graph: Any, args: argparse.Namespace, shown: list[str]) -> tuple[dict[str, NodeGradient],
                                                                                        list[str]]:
    """The magnitudes at the ``shown`` ops of a graph file, and the names of the ys."""
    ys = find_tensors(graph, args.ys, "--ys") if args.ys else _default_ys(default_outputs(graph), args.graph)
    if not args.ys:
        args = argparse.Namespace(**{**vars(args), "ys": ",".join(t.name for t in ys)})
    xs = find_tensors(graph, args.xs, "--xs") if args.xs else None
    stop = find_tensors(graph, args.stop, "--stop") if args.stop else None
    grad_ys = command_grad_ys(graph, ys, args)
    feeds = read_feeds(args.feed, graph)
    found = gradient_magnitudes(graph, ys, feeds, xs=xs, grad_ys=grad_ys, stop_gradients=stop, ops=shown,
                                session=command_session(graph, args), custom_gradient=args.custom_gradient)
    return found, [declared_name(graph, y) for y in ys]


def _signature_graph(args: argparse.Namespace) -> SignatureGraph:
    tags = tuple(names(args.tags) or DEFAULT_TAGS)
    model = load_saved_model(args.graph, tags, backend=args.backend)
    return signature_graph(model, args.signature)


def _saved_model_magnitudes(flat: SignatureGraph, args: argparse.Namespace,
                            shown: list[str]) -> tuple[dict[str, NodeGradient], list[str]]:
    """The magnitudes at the ``shown`` ops of a signature's flat graph, and the names of the ys."""
    if args.stop:
        raise UsageError("--stop applies to graph files, not to SavedModel directories")
    y_names = names(args.ys) or [k for k, t in flat.outputs.items() if _differentiable(t)]
    if not y_names:
        raise UsageError(f"{args.graph} has no floating-point outputs to differentiate: name them with --ys")
    ys = [_part(flat.outputs, n, "output", flat) for n in y_names]
    xs = [_x_op(flat, n) for n in names(args.xs)] or None
    weights, tensors = parse_weights(args.grad_ys)
    if tensors:
        raise UsageError(f"--grad-ys {','.join(tensors)}: a SavedModel's ys are weighted by values, "
                         f"NAME=VALUE, NAME=FILE.npy or FILE.npz keyed by output name")
    with flat.graph.as_default():
        grad_ys = weight_tensors(flat.graph, ys, [[n] for n in y_names], weights) if weights else None
    dtypes = {k: t.known_dtype.base_dtype.storage for k, t in flat.inputs.items() if _differentiable(t)}
    feeds = {_part(flat.inputs, k, "input", flat): v for k, v in read_feeds(args.feed, dtypes=dtypes).items()}
    found = gradient_magnitudes(flat.graph, ys, feeds, xs=xs, grad_ys=grad_ys, ops=shown,
                                session=flat.session(args.backend), custom_gradient=args.custom_gradient)
    return found, y_names


def _x_op(flat: SignatureGraph, name: str) -> Any:
    if name in flat.inputs:
        return flat.inputs[name].op
    if name in flat.variables:
        return flat.variables[name].op
    raise FetchError(f"--xs {name!r} is neither an input of signature '{flat.signature}' ({sorted(flat.inputs)}) "
                     f"nor a variable it reads ({sorted(flat.variables)})")


def _part(table: dict[str, Any], name: str, kind: str, flat: SignatureGraph) -> Any:
    if name not in table:
        raise FetchError(f"signature '{flat.signature}' has no {kind} '{name}'; its {kind}s are {sorted(table)}")
    return table[name]


__all__ = ["GRAPH_FILE", "cmd_explorer", "open_command", "overlay_file"]
