"""``gradreg plugins --check PACKAGE`` (the plugin checker, gradreg.testing.check_plugin: exit 1
with one line per failure) and ``gradreg plugins --trace GRAPH`` (which plugin, distribution and
version made each gradient subgraph of a file, from its nodes' ``_gradreg_rule`` attrs, against
what is installed here).
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from gradreg.autodiff.provenance import RuleOrigin, rule_origins
from gradreg.cli_values import UsageError
from gradreg.errors import PluginError
from gradreg.formats import load_graph
from gradreg.registry import Registry, get_registry
from gradreg.testing import check_plugin
from gradreg.testing.references import REFERENCES


def cmd_check_plugin(args: argparse.Namespace) -> int:
    """Check every op type PACKAGE's plugins provide: one line per failure; exit 1 if any."""
    chosen = args.references.strip().lower()
    references = () if chosen == "none" else tuple(r.strip() for r in chosen.split(",") if r.strip())
    unknown = sorted(set(references) - set(REFERENCES))
    if unknown:
        raise UsageError(f"--references: unknown {', '.join(unknown)} (known: {', '.join(REFERENCES)}, none)")
    try:
        report = check_plugin(args.check, references)
    except PluginError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps({
            "package": report.package, "plugins": report.plugins, "ok": report.ok,
            "ops": [{"plugin": op.plugin, "op": op.op_type, "provides": list(op.provides), "passed": op.passed,
                     "failed": [str(f) for f in op.failures], "not_checked": op.skipped} for op in report.ops],
            "failures": [{"plugin": f.plugin, "op": f.op_type, "dtype": f.dtype, "check": f.check,
                          "message": f.message, "largest_error": f.error, "case": f.case} for f in report.failures],
        }, indent=2))
        return 0 if report.ok else 1
    for failure in report.failures:
        print(f"FAILED {failure.plugin}: {failure}")
    if args.verbose:
        for op in report.ops:
            for skipped in op.skipped:
                print(f"not checked {op.plugin}: {op.op_type} {skipped}")
    print(report.summary())
    return 0 if report.ok else 1


def trace_rows(origins: dict[RuleOrigin, list[str]], registry: Registry) -> list[dict[str, Any]]:
    """One row per rule origin: what the file says, how many nodes, and what is installed now."""
    rows = []
    for origin, nodes in origins.items():
        rows.append({"rule": origin.rule, "source": origin.source, "distribution": origin.distribution,
                     "version": origin.version, "nodes": len(nodes), "example": nodes[0],
                     "here": _installed(origin, registry)})
    return rows


def _installed(origin: RuleOrigin, registry: Registry) -> str:
    plugin = origin.plugin
    if plugin is None:
        return "Python code, not an installable plugin" if origin.source.startswith("python:") else \
            "a custom_gradient function of the process that wrote the file"
    record = registry.plugins.get(plugin)
    if record is None:
        wanted = f"{origin.distribution}=={origin.version}" if origin.version else origin.distribution or plugin
        return f"not installed (pip install {wanted})"
    release = registry.release(plugin)
    written = f"{origin.distribution}=={origin.version}" if origin.version else origin.distribution
    if written and release != written:
        return f"installed as {release or 'a plugin added at run time'}: differs from the file's {written}"
    provider = registry.gradient_plugin(origin.rule)
    if provider != plugin:
        return f"installed, but the rule for {origin.rule} in use comes from '{provider}'"
    return "installed, same version"


def cmd_trace(args: argparse.Namespace) -> int:
    graph = load_graph(args.trace)
    registry = get_registry()
    origins = rule_origins(graph.operations())
    rows = trace_rows(origins, registry)
    if args.json:
        print(json.dumps({"graph": args.trace, "rules": rows}, indent=2))
        return 0
    if not rows:
        print(f"{args.trace}: no node records the gradient rule that made it (_gradreg_rule)")
        return 0
    print(f"{args.trace}: gradient nodes by the rule that made them")
    for row in rows:
        written = f"{row['distribution']}=={row['version']}" if row["version"] else row["distribution"] or "-"
        print(f"  {row['source']}:{row['rule']}  from {written}  {row['nodes']} nodes (e.g. {row['example']})  "
              f"here: {row['here']}")
    return 0
