"""The commands that run, differentiate, check and convert graphs (``gradreg run``, ``grad``,
``check``, ``convert``, the SavedModel forms of ``inspect``, ``freeze``, ``plugins``, ``ops``).

gradreg.cli builds the parser and imports this module only when one of these commands runs:
what they need (sessions, differentiation, checkpoints, SavedModels) would otherwise be
imported by every command, ``gradreg inspect`` and ``--help`` included.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from gradreg.autodiff.coverage import (
    gradient_overrides_in,
    library_function_types,
    op_types_in,
    op_types_needed,
    op_types_on_path,
)
from gradreg.autodiff.gradients import as_dense_gradients, gradients
from gradreg.cli_inspect import default_outputs
from gradreg.cli_ops import cmd_ops, cmd_plugins
from gradreg.cli_saved_model import cmd_freeze, grad_saved_model, graph_only, inspect_saved_model, run_saved_model
from gradreg.cli_values import (
    PRINT_THRESHOLD,
    UsageError,
    as_json,
    describe,
    find_tensor,
    find_tensors,
    names,
    print_values,
    read_feeds,
    save_npz,
    suggestion,
)
from gradreg.cli_weights import parse_weights, weight_tensors, zero_gradients_note
from gradreg.distributed import run_distributed_grad
from gradreg.errors import FeedError
from gradreg.formats import format_for_path, formats, load_graph, save_graph
from gradreg.formats.model_kinds import is_saved_model_dir
from gradreg.formats.signature_graph import restore_from_saved_model
from gradreg.model.graph import Graph
from gradreg.model.model_file import declared_name
from gradreg.registry import Registry, get_registry
from gradreg.registry.support import op_support
from gradreg.runtime.session import Session
from gradreg.training.checkpoint import Saver
from gradreg.training.variables import find_variables

__all__ = ["cmd_check", "cmd_convert", "cmd_freeze", "cmd_grad", "cmd_ops", "cmd_plugins", "cmd_run",
           "command_grad_ys", "command_session", "inspect_saved_model"]


def _backend(name: str | None) -> str | None:
    """``--backend``: None (the default) or an installed backend's name."""
    known = get_registry().backend_names()
    if name is not None and name not in known:
        raise UsageError(f"--backend {name!r}: the installed backends are {', '.join(known)}{suggestion(name, known)}")
    return name


def command_session(graph: Graph, args: argparse.Namespace) -> Session:
    """A Session on ``graph`` with the options' backend and element limit, variables restored
    from ``--checkpoint`` when given."""
    session = Session(graph, max_elements=args.max_elements, backend=_backend(args.backend))
    if getattr(args, "checkpoint", None):
        variables = find_variables(graph)
        if not variables:
            raise UsageError(f"--checkpoint: {args.graph} has no variables (VarHandleOp or VariableV2) to restore")
        if is_saved_model_dir(args.checkpoint):     # a SavedModel's values, by its variables' names
            restore_from_saved_model(session, variables, args.checkpoint)
        else:
            Saver(var_list=variables).restore(session, args.checkpoint)
    return session


def _fetch_targets(graph: Graph, specs: Sequence[str] | None) -> list[tuple[str, str]]:
    """(the name the Session takes, the name printed) of each ``--fetch`` name: ``x`` is ``x:0``,
    or the op ``x`` when it has no outputs; unknown names are errors with a suggestion. Without
    --fetch, the outputs ``inspect`` lists (a model file's declared outputs, else the graph's
    results). A tensor prints under its name in the model file, as ``inspect`` and ``grad`` show it."""
    fetches = [n for spec in specs or [] for n in names(spec)]
    if not fetches:
        outputs = default_outputs(graph)
        if not outputs:
            raise UsageError("the graph has no outputs to run by default: name tensors with --fetch")
        return [(t.name, declared_name(graph, t)) for t in outputs]
    resolved = []
    for name in fetches:
        if ":" not in name and name in graph and not graph.get_operation(name).outputs:
            resolved.append((name, name))            # an op without outputs: run it
        else:
            tensor = find_tensor(graph, name, "--fetch")
            resolved.append((tensor.name, declared_name(graph, tensor)))
    return resolved


def cmd_run(args: argparse.Namespace) -> int:
    if is_saved_model_dir(args.graph):
        return run_saved_model(args)
    graph_only(args, "signature")
    graph = load_graph(args.graph)
    feeds = read_feeds(args.feed, graph)
    targets = _fetch_targets(graph, args.fetch)
    values = command_session(graph, args).run([target for target, _ in targets], feeds)
    shown = [name for _, name in targets]
    if args.json:
        print(json.dumps({"outputs": [as_json(n, v) for n, v in zip(shown, values)]}))
    else:
        print_values(list(zip(shown, values)), args.threshold)
    if args.output:
        arrays = {name: _storable(v) for name, v in zip(shown, values) if v is not None}
        save_npz(args.output, arrays)
        if not args.json:
            print(f"wrote {len(arrays)} arrays to {args.output}")
    return 0


def _storable(value: Any) -> np.ndarray:
    """A fetched value as an array .npz can hold without pickling: strings (object arrays of
    bytes) become fixed-width byte strings."""
    array = np.asarray(value)
    if array.dtype == object:
        return array.astype(np.bytes_) if array.size else np.zeros(array.shape, np.bytes_)
    return array


def cmd_convert(args: argparse.Namespace) -> int:
    fmt = format_for_path(args.output)
    if fmt is None or fmt.write is None:
        writable = ", ".join(s for f in formats() if f.write is not None for s in f.suffixes)
        what = "tell the format of" if fmt is None else f"write {fmt.name} files such as"
        raise UsageError(f"cannot {what} {args.output!r}: use a suffix of a writable format ({writable})")
    options = _write_options(args, fmt)
    graph = load_graph(args.input)   # validates the graph before anything is written
    save_graph(graph, args.output, fmt.name, **options)
    print(f"wrote {args.output} ({fmt.name}, {len(graph)} nodes)")
    return 0


def _write_options(args: argparse.Namespace, fmt: Any) -> dict[str, Any]:
    """The format options the command line gave (``--opset``, ``--flat``), checked against what the
    output's format takes (UsageError otherwise)."""
    given = {"opset": getattr(args, "opset", None), "flat": getattr(args, "flat", False) or None}
    options = {name: value for name, value in given.items() if value is not None}
    for name in options:
        if fmt is None or name not in fmt.write_options:
            output = getattr(args, "output", None) or "none"
            raise UsageError(f"--{name} applies to an ONNX output (.onnx), not {output}")
    return options


def cmd_grad(args: argparse.Namespace) -> int:
    if is_saved_model_dir(args.graph):
        if args.opset is not None or args.flat:
            flag = "--opset" if args.opset is not None else "--flat"
            raise UsageError(f"{flag} applies to an ONNX output of a graph file, not a SavedModel's gradients")
        return grad_saved_model(args)
    graph_only(args, "signature")
    if args.freeze:
        raise UsageError(f"--freeze applies to a SavedModel directory, and {args.graph} is not one")
    chosen = format_for_path(args.output) if args.output else None
    options = _write_options(args, chosen)
    graph = load_graph(args.graph)
    ys = find_tensors(graph, args.ys, "--ys")
    xs = find_tensors(graph, args.xs, "--xs")
    stop = find_tensors(graph, args.stop, "--stop") if args.stop else None
    if not ys or not xs:
        raise UsageError("--ys and --xs each need at least one tensor name")
    grad_ys = command_grad_ys(graph, ys, args)
    feeds = read_feeds(args.feed, graph)
    _backend(args.backend)
    with graph.as_default():
        grads = gradients(ys, xs, grad_ys=grad_ys, stop_gradients=stop, unconnected_gradients=args.unconnected,
                          custom_gradient=args.custom_gradient, symmetric_inputs=args.symmetric_inputs)
        grads = as_dense_gradients(grads)
    values = _grad_values(args, graph, ys, xs, grads, feeds, grad_ys)
    note = None if grad_ys else zero_gradients_note([values.get(g.name) for g in grads if g is not None],
                                                    names(args.ys))
    if note:
        print(f"gradreg grad: note: {note}", file=sys.stderr)
    # (x as the user sees it, its gradient's name) per x, and the names values are shown under
    rows = [(declared_name(graph, x), None if g is None else g.name) for x, g in zip(xs, grads)]
    shown = {t.name: declared_name(graph, t) for t in [*ys, *(g for g in grads if g is not None)]}
    if chosen is not None and chosen.write_outputs is not None:
        rows, shown = _save_gradient_model(graph, args, ys, grads, chosen.name, options)
    elif args.output:
        save_graph(graph, args.output)
    if args.json:
        document: dict[str, Any] = {"gradients": dict(rows)}
        if values:
            document["values"] = [as_json(shown.get(name, name), value) for name, value in values.items()]
        print(json.dumps(document))
        return 0
    _print_gradients(rows, grads, shown, values, args)
    if args.output:
        print(f"wrote {args.output} ({len(graph)} nodes)")
    return 0


def _print_gradients(rows: Sequence[tuple[str, str | None]], grads: Sequence[Any], shown: dict[str, str],
                     values: dict[str, Any], args: argparse.Namespace) -> None:
    """The ys' values, then ``d/dx: gradient`` per x (its value when evaluated)."""
    threshold = getattr(args, "threshold", PRINT_THRESHOLD)
    gradient_names = {g.name for g in grads if g is not None}
    for name, value in values.items():
        if name not in gradient_names:
            print(describe(shown.get(name, name), value, threshold))
    for (x, gradient), g in zip(rows, grads):
        if g is None:
            print(f"d/d{x}: none (not connected)")
        elif g.name in values:
            print(f"d/d{x}: {describe(gradient or g.name, values[g.name], threshold)}")
        else:
            print(f"d/d{x}: {gradient}")


def _save_gradient_model(graph: Graph, args: argparse.Namespace, ys: Sequence[Any], grads: Sequence[Any],
                         format_name: str, options: dict[str, Any]) -> tuple[list[tuple[str, str | None]],
                                                                              dict[str, str]]:
    """Write a model format with named outputs (ONNX): the ys under their names on the command
    line and one gradient per x, named ``<x>_grad``. Returns the rows (x as named on the command
    line, its gradient's output name or None) and the output name of each y and gradient tensor."""
    outputs: dict[str, Any] = {}
    shown: dict[str, str] = {}
    for name, y in zip(names(args.ys), ys):
        outputs.setdefault(name, y)
        shown.setdefault(y.name, name)
    rows: list[tuple[str, str | None]] = []
    for name, g in zip(names(args.xs), grads):
        rows.append((name, None if g is None else f"{name}_grad"))
        if g is not None:
            outputs[f"{name}_grad"] = g
            shown.setdefault(g.name, f"{name}_grad")
    save_graph(graph, args.output, format_name, outputs=outputs, **options)
    return rows, shown


def command_grad_ys(graph: Graph, ys: list[Any], args: argparse.Namespace) -> list[Any] | None:
    """The --grad-ys weights of the ys (None: ones for all): values, or tensors of the graph."""
    values, tensors = parse_weights(args.grad_ys)
    if tensors:
        found = [find_tensor(graph, name, "--grad-ys") for name in tensors]
        if len(found) != len(ys):
            raise UsageError(f"--grad-ys names {len(found)} tensors for {len(ys)} ys")
        return found
    if not values:
        return None
    labels = [[given, y.name, declared_name(graph, y)] for given, y in zip(names(args.ys), ys)]
    return weight_tensors(graph, ys, labels, values)


def _grad_values(args: argparse.Namespace, graph: Graph, ys: list[Any], xs: list[Any], grads: list[Any],
                 feeds: dict[str, np.ndarray], grad_ys: list[Any] | None = None) -> dict[str, Any]:
    """The values of the ys and the gradients with the --feed values, keyed by tensor name: on
    the --dask cluster (data-parallel), else in this process; {} when only -o is wanted."""
    if args.dask is not None:
        if args.symmetric_inputs != "tensorflow":
            raise UsageError("--symmetric-inputs applies to gradients computed in this process, not with --dask")
        if grad_ys is not None:   # the cluster takes the weights as tensors of the graph, by name
            if any(t is None for t in grad_ys):
                raise UsageError("with --dask, --grad-ys gives a weight for every y")
            args = argparse.Namespace(**{**vars(args), "grad_ys": ",".join(t.name for t in grad_ys)})
        y_values, x_grads = run_distributed_grad(args, graph, feeds)
        return {**y_values, **{g.name: x_grads[x.name] for x, g in zip(xs, grads) if g is not None}}
    if args.output and not args.feed:
        return {}
    fetches = ys + [g for g in grads if g is not None]
    try:
        return dict(zip([t.name for t in fetches], command_session(graph, args).run(fetches, feeds)))
    except FeedError as exc:
        if args.feed:
            raise
        # without -o, the values are what the user wants: say how to give the inputs
        raise FeedError(f"{exc} (give the inputs with --feed, or save the gradient graph with -o)") from None


def cmd_check(args: argparse.Namespace) -> int:
    """List the op types of a graph that lack an op definition, a kernel (per backend) or a
    gradient rule; exit 1 if one of them lies on the path from --xs to --ys, or, without them,
    if the graph's outputs (those ``inspect`` lists) need an op type without a definition or a
    kernel."""
    graph = load_graph(args.graph)
    registry = get_registry()
    backends = _check_backends(args.backend, registry)
    if bool(args.ys) != bool(args.xs):
        raise UsageError("--ys and --xs go together")
    functions = library_function_types(graph)
    used = op_types_in(graph)
    on_path: dict[str, list[str]] = {}
    needed: dict[str, list[str]] = {}
    if args.ys:
        on_path = op_types_on_path(find_tensors(graph, args.ys, "--ys"), find_tensors(graph, args.xs, "--xs"))
    else:
        needed = op_types_needed(default_outputs(graph))
    rows: list[dict[str, Any]] = []
    for op_type in sorted(set(used) | set(on_path)):
        support = op_support(op_type, backends, library_function=op_type in functions, registry=registry)
        missing = support.missing(backends)
        if missing:
            runs = missing == ["gradient rule"]
            rows.append({"op_type": op_type, "nodes": (on_path.get(op_type) or needed.get(op_type)
                                                       or used[op_type])[:3],
                         "on_path": op_type in on_path, "needed_by_outputs": op_type in needed and not runs,
                         "missing": missing, "hint": support.hint()})
    rows += _override_rows(graph, registry, on_path, args.custom_gradient)
    blocking = [r for r in rows if r["on_path"] or r.get("needed_by_outputs")]
    if args.json:
        print(json.dumps({"backends": list(backends), "op_types": len(used), "incomplete": rows,
                          "path_checked": bool(args.ys), "path_ok": not blocking,
                          "outputs_checked": not args.ys, "outputs_ok": not blocking}, indent=2))
        return 1 if blocking else 0
    _print_check(args, used, backends, rows, blocking)
    return 1 if blocking else 0


def _print_check(args: argparse.Namespace, used: dict[str, list[str]], backends: Sequence[str],
                 rows: list[dict[str, Any]], blocking: list[dict[str, Any]]) -> None:
    print(f"graph: {args.graph}: {len(used)} op types (functions included); backends: {', '.join(backends)}")
    if not rows:
        print("every op type has an op definition, kernels and a gradient rule")
    for r in rows:
        where = "ON PATH " if r["on_path"] else "NEEDED " if r.get("needed_by_outputs") else ""
        hint = f"; {r['hint']}" if r["hint"] else ""
        print(f"  {where}{r['op_type']}: no {', '.join(r['missing'])} (e.g. {', '.join(r['nodes'])}){hint}")
    if args.ys:
        print(f"path {args.xs} -> {args.ys}: " + (f"{len(blocking)} op types cannot be run or differentiated"
                                                   if blocking else "ok"))
    else:
        count = f"{len(blocking)} op type" + ("" if len(blocking) == 1 else "s")
        print("outputs: " + (f"{count} (NEEDED) cannot be run" if blocking else "every op they need can run"))
def _override_rows(graph: Graph, registry: Registry, on_path: dict[str, list[str]], mode: str) -> list[dict[str, Any]]:
    """Rows for nodes naming a gradient (_gradient_op_type) this process does not have: no
    gradient rule for them, unless --custom-gradient forward differentiates them by op type."""
    path_nodes = {n for nodes in on_path.values() for n in nodes}
    rows: list[dict[str, Any]] = []
    for key, nodes in sorted(gradient_overrides_in(graph).items()):
        if key in graph.custom_gradients or registry.gradients.lookup(key) is not None or \
                graph.library.registered_gradient(key) is not None:      # saved with the graph
            continue
        rows.append({"op_type": f"_gradient_op_type '{key}'", "nodes": nodes[:3],
                     "on_path": mode != "forward" and any(n in path_nodes for n in nodes),
                     "missing": ["gradient rule"],
                     "hint": "--custom-gradient forward differentiates these nodes through their forward ops"})
    return rows


def _check_backends(chosen: list[str] | None, registry: Registry) -> tuple[str, ...]:
    known = registry.backend_names()
    if not chosen:
        return tuple(b for b in known if registry.backend(b).available())
    for name in chosen:
        if name not in known:
            raise UsageError(f"--backend {name!r}: the installed backends are {', '.join(known)}"
                             f"{suggestion(name, known)}")
    return tuple(chosen)
