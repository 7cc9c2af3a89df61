"""Tables of what the installed plugins provide: ``gradreg ops`` (one row per op type: kernels
per backend, shape function, gradient rule, family), ``gradreg plugins`` (one row per plugin)
and ``gradreg plugins --op X`` (who provides each piece of op type X).

Tables print with rich when it is installed and the output is a terminal, else as plain
aligned text (what pipes, files and tests see).
"""
from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from gradreg.cli_plugins import cmd_check_plugin, cmd_trace
from gradreg.cli_values import UsageError, suggestion
from gradreg.errors import GradregError, PluginError
from gradreg.model.frames import STRUCTURE
from gradreg.registry import Registry, get_registry
from gradreg.registry.census import CENSUS_FILE, coverage, load_census

NOT_DIFFERENTIABLE = "not differentiable"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO | None = None) -> None:
    """Print a table: rich's when rich is installed and ``out`` is a terminal, else plain text
    with columns aligned by padding."""
    out = out or sys.stdout
    if out.isatty():
        with contextlib.suppress(ImportError):
            from rich.console import Console  # optional: nicer tables on a terminal
            from rich.table import Table

            table = Table(*headers, box=None, pad_edge=False, header_style="bold")
            for row in rows:
                table.add_row(*row)
            Console(file=out).print(table)
            return
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for row in [list(headers), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip(), file=out)


# -- gradreg ops -------------------------------------------------------------------------------

def _provider(table: Any, key: str) -> str | None:
    try:
        found = table.lookup(key)
    except PluginError:
        return "conflict"
    return None if found is None else str(found.plugin)


def shape_provider(registry: Registry, op_type: str) -> str | None:
    """The plugin giving ``op_type``'s shape function (its own table, else the op definition's)."""
    own = _provider(registry.shapes, op_type)
    if own is not None:
        return own
    try:
        definition = registry.op_definition(op_type)
    except PluginError:
        return "conflict"
    return _provider(registry.ops, op_type) if definition is not None and definition.shape is not None else None


def gradient_provider(registry: Registry, op_type: str) -> str | None:
    """The plugin giving ``op_type``'s gradient rule, "not differentiable", or None."""
    try:
        found = registry.gradients.lookup(op_type)
    except PluginError:
        return "conflict"
    if found is None:
        return None
    return NOT_DIFFERENTIABLE if found.value is None else str(found.plugin)


def kernel_provider(registry: Registry, op_type: str, backend: str) -> str | None:
    """The plugin giving ``backend``'s own kernel for ``op_type`` (v1 control flow: the plan compiler)."""
    if op_type in STRUCTURE:
        return "plan compiler"
    return _provider(registry.kernels(backend), op_type)


def op_rows(registry: Registry, backends: Sequence[str]) -> list[dict[str, Any]]:
    """One row per op type any plugin defines, gives a kernel, shape function or gradient for."""
    op_types = set(registry.ops) | set(registry.gradients) | set(registry.shapes)
    for backend in backends:
        op_types |= set(registry.kernels(backend))
    rows = []
    for op_type in sorted(op_types):
        rows.append({"op": op_type, "family": _provider(registry.ops, op_type),
                     "kernels": {b: kernel_provider(registry, op_type, b) for b in backends},
                     "shape": shape_provider(registry, op_type), "gradient": gradient_provider(registry, op_type)})
    return rows


def op_table(rows: Sequence[dict[str, Any]], backends: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    headers = ["op type", *(f"kernel {b}" for b in backends), "shape fn", "gradient", "family"]
    table = [[r["op"], *("yes" if r["kernels"][b] else "-" for b in backends), "yes" if r["shape"] else "-",
              "rule" if r["gradient"] not in (None, NOT_DIFFERENTIABLE) else r["gradient"] or "-",
              r["family"] or "-"] for r in rows]
    return headers, table


def ops_summary(rows: Sequence[dict[str, Any]], backends: Sequence[str]) -> str:
    """One line of counts: op types, kernels per backend, shape functions, gradient rules."""
    rules = sum(r["gradient"] not in (None, NOT_DIFFERENTIABLE) for r in rows)
    nondiff = sum(r["gradient"] == NOT_DIFFERENTIABLE for r in rows)
    kernels = ", ".join(f"{sum(bool(r['kernels'][b]) for r in rows)} with a {b} kernel" for b in backends)
    return (f"{len(rows)} op types: {kernels}, {sum(bool(r['shape']) for r in rows)} with a shape function, "
            f"{rules} with a gradient rule, {nondiff} not differentiable, "
            f"{sum(r['gradient'] is None for r in rows)} without a gradient entry")


def missing_gradients(registry: Registry) -> dict[str, Any]:
    """TensorFlow's registered gradients gradreg does not cover, from the op census shipped with
    the package (gradreg.registry.census): {"tensorflow": version, "covered": n, "registered": n,
    "missing": [{op, tf, used_by_models}]}."""
    try:
        census = load_census()
    except (OSError, ValueError) as exc:
        raise GradregError(f"the op census ({CENSUS_FILE}, package data of gradreg.registry) cannot be read: "
                           f"{exc}") from None
    figures = coverage(census, registry)
    rows = figures["rows"]
    return {"tensorflow": census.get("tensorflow"), "covered": figures["covered"],
            "registered": figures["registered"], "considered": figures["considered"],
            "missing": [{"op": op, "tf": rows[op]["tf"], "used_by_models": rows[op]["used_by_models"]}
                        for op in figures["missing"]]}


# -- gradreg plugins -----------------------------------------------------------------------------

PLUGIN_KINDS = ("op", "shape")                 # counted before the kernels
PLUGIN_KINDS_AFTER = ("gradient", "builder")   # ... and after them


def plugin_table(registry: Registry, backends: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """One row per plugin: name, version, ops, shape functions, kernels per backend, gradients,
    builders, other things it provides (backends, formats), overrides, status."""
    headers = ["plugin", "version", "ops", "shapes", *(f"{b} kernels" for b in backends), "gradients", "builders",
               "other", "overrides", "status"]
    rows = []
    for record in registry.plugins.values():
        def count(kind: str, provides: dict[str, set[str]] = record.provides) -> str:
            return str(len(provides.get(kind, ())))
        shown = {*PLUGIN_KINDS, *PLUGIN_KINDS_AFTER, "iteration sum", *(f"kernel:{b}" for b in backends)}
        other = ", ".join(f"{kind} {', '.join(sorted(names))}" for kind, names in sorted(record.provides.items())
                          if kind not in shown)
        status = "FAILED: " + "; ".join(record.errors) if record.errors else "ok"
        rows.append([record.name, record.version or "?", *map(count, PLUGIN_KINDS),
                     *(count(f"kernel:{b}") for b in backends), *map(count, PLUGIN_KINDS_AFTER), other or "-",
                     ", ".join(sorted(record.overrides)) or "-", status])
    return headers, rows


def op_provenance(registry: Registry, op_type: str, backends: Sequence[str]) -> list[tuple[str, str]]:
    """``plugins --op X``: (what, who) for the definition, each backend's kernel, the shape
    function, the gradient rule, the builders and the plugins declaring an override of X."""
    definition = _provider(registry.ops, op_type)
    rows = [("op definition", definition or "none")]
    for backend in backends:
        own = kernel_provider(registry, op_type, backend)
        if own is None and backend != "numpy":
            tables = registry.backend(backend).kernel_tables
            fallback = next((t for t in tables if t != backend and _provider(registry.kernels(t), op_type)), None)
            own = f"none (runs the {fallback} kernel)" if fallback else None
        rows.append((f"{backend} kernel", own or "none"))
    rows.append(("shape function", shape_provider(registry, op_type) or "none"))
    gradient = gradient_provider(registry, op_type)
    if gradient is None or gradient in (NOT_DIFFERENTIABLE, "conflict"):
        rows.append(("gradient", gradient or "none"))
    else:
        rows.append(("gradient", f"rule from {gradient}"))
    definers = [r.name for r in registry.plugins.values() if op_type in r.provides.get("op", ())]
    rows.append(("also defined by", ", ".join(d for d in definers if d != definition) or "none"))
    overriders = sorted(r.name for r in registry.plugins.values() if op_type in r.overrides)
    rows.append(("overridden by", ", ".join(overriders) or "none"))
    return rows


def known_op_types(registry: Registry, backends: Sequence[str]) -> list[str]:
    """Every op type any plugin provides something for (for "did you mean")."""
    found = set(registry.ops) | set(registry.gradients) | set(registry.shapes)
    for backend in backends:
        found |= set(registry.kernels(backend))
    return sorted(found)


# -- the commands ---------------------------------------------------------------------------------

def _usable_backends(registry: Registry) -> list[str]:
    """The installed backends whose kernel tables load (a conflict is reported, not raised)."""
    backends = []
    for backend in registry.backend_names():
        with contextlib.suppress(GradregError):   # a conflict is listed by `plugins`
            registry.kernels(backend)
        backends.append(backend)
    return sorted(backends, key=lambda b: (b != "numpy", b))    # numpy first: every op has that kernel


def _op_type(registry: Registry, op_type: str, backends: Sequence[str]) -> str:
    """``op_type`` if a plugin provides anything for it; UsageError with a suggestion otherwise."""
    known = known_op_types(registry, backends)
    if op_type not in known:
        raise UsageError(f"no installed plugin provides op type {op_type!r}{suggestion(op_type, known)}")
    return op_type


def cmd_plugins(args: argparse.Namespace) -> int:
    if args.check:
        return cmd_check_plugin(args)
    if args.trace:
        return cmd_trace(args)
    registry = get_registry()
    registry.complete_all()     # deferred families (onnx) list what they provide
    backends = _usable_backends(registry)
    if args.op:
        rows = op_provenance(registry, _op_type(registry, args.op, backends), backends)
        if args.json:
            print(json.dumps({"op": args.op, **dict(rows)}, indent=2))
        else:
            print(f"op type {args.op}:")
            render_table(["what", "provided by"], [list(r) for r in rows])
        return 0
    conflicts = registry.conflicts()
    resolved = registry.resolved_conflicts()
    if args.json:
        print(json.dumps({
            "plugins": [{"name": r.name, "version": r.version, "distribution": r.distribution,
                         "target": r.target, "errors": r.errors,
                         "provides": {k: sorted(v) for k, v in sorted(r.provides.items())},
                         "overrides": sorted(r.overrides)} for r in registry.plugins.values()],
            "conflicts": conflicts,
            "resolved": {kind: {key: {"used": used, "over": list(others)} for key, (used, others) in entries.items()}
                         for kind, entries in resolved.items()},
        }, indent=2))
        return 0
    headers, table = plugin_table(registry, backends)
    render_table(headers, table)
    if conflicts:
        print("CONFLICTS:")
        for kind, entries in conflicts.items():
            for key, plugins in entries.items():
                print(f"  {kind} of '{key}': {' and '.join(plugins)}")
    else:
        print("no conflicts")
    for kind, overridden in resolved.items():
        for key, (used, others) in overridden.items():
            print(f"RESOLVED: {kind} of '{key}': '{used}' is used over {' and '.join(repr(o) for o in others)} "
                  f"(all declare the override; the first by name wins)")
    print("`gradreg plugins --op OP` shows who provides an op type; `gradreg ops` lists every op type")
    return 0


def cmd_ops(args: argparse.Namespace) -> int:
    """One row per op type: kernels per backend, shape function, gradient rule, family."""
    registry = get_registry()
    registry.complete_all()
    backends = _usable_backends(registry)
    if args.missing:
        return _print_missing(registry, args.json)
    rows = op_rows(registry, backends)
    if args.pattern:
        chosen = [r for r in rows if fnmatch.fnmatchcase(r["op"], args.pattern)]
        if not chosen:
            raise UsageError(f"no op type matches {args.pattern!r}{suggestion(args.pattern, [r['op'] for r in rows])}")
        rows = chosen
    if args.json:
        print(json.dumps({"backends": backends, "ops": rows, "summary": ops_summary(rows, backends)}, indent=2))
        return 0
    headers, table = op_table(rows, backends)
    render_table(headers, table)
    print(ops_summary(rows, backends))
    return 0


def _print_missing(registry: Registry, as_json_document: bool) -> int:
    found = missing_gradients(registry)
    if as_json_document:
        print(json.dumps(found, indent=2))
        return 0
    render_table(["op type", "tensorflow's rule", "used by zoo models"],
                 [[m["op"], m["tf"], str(m["used_by_models"])] for m in found["missing"]])
    print(f"{len(found['missing'])} of TensorFlow {found['tensorflow']}'s {found['considered']} registered gradients "
          f"(infrastructure excluded) have no gradreg gradient; gradreg covers {found['covered']} of "
          f"{found['registered']} (the op census; tools/op_coverage.py in a source checkout reports more)")
    return 0
