"""The op-surface census: TensorFlow's registered Python gradients against gradreg's registry.

    python tools/op_coverage.py                  # coverage from the committed census (no TensorFlow needed)
    python tools/op_coverage.py --table          # ... and one row per op type
    python tools/op_coverage.py --refresh        # re-read TensorFlow (and the model zoo), rewrite the census
    python tools/op_coverage.py --write-baseline # record today's figure as the floor tests/test_op_sweep.py holds

The census, gradreg/registry/tf_gradient_registry.json (package data: ``gradreg ops --missing``
reads it from an installed wheel; the comparison lives in gradreg.registry.census), is written
from TensorFlow 2.21's gradient registry
(``tensorflow.python.framework.ops._gradient_registry``, a private table: only this dev tool reads
it) after ``import tensorflow``. Every registered op type gets a kind:

* ``not_differentiable`` — registered through ``tf.no_gradient`` / ``NotDifferentiable`` (the rule is None);
* ``returns_none`` — a rule whose every ``return`` gives None or a list/tuple of Nones (ArgMax, Floor);
* ``raises`` — a rule that only raises (PreventGradient, SparseDenseCwiseAdd): TensorFlow cannot
  differentiate the op either;
* ``differentiable`` — any other rule.

"TensorFlow's registered gradients" are the op types with a rule (every kind but
``not_differentiable``): 414 in TensorFlow 2.21. Device and distribution infrastructure that
means nothing to a CPU interpreter is excluded by op-type pattern (EXCLUDED_PATTERNS; the
census lists the op types each pattern removed).

An op type counts as covered when gradreg has its op definition, a NumPy kernel and a gradient
entry — a rule, or NotDifferentiable where TensorFlow's own rule gives no gradient (kinds
``returns_none`` and ``raises``). The census also records, per op type, how many items of the
model zoo (tools/op_zoo.py: keras.applications, keras.layers, keras activations and losses,
TF1 idioms) emit it, so the missing op types can be ranked by use.
"""
from __future__ import annotations

import argparse
import ast
import inspect
import json
import pathlib
import subprocess
import sys
import textwrap

from gradreg.registry.census import (  # noqa: F401  (re-exported: the tool's public names)
    CENSUS_FILE,
    EXCLUDED_PATTERNS,
    REGISTERED_KINDS,
    coverage,
    excluded_by,
    gradreg_status,
    is_covered,
    load_census,
    models_using,
)

HERE = pathlib.Path(__file__).resolve().parent
CENSUS = HERE.parent / "gradreg" / "registry" / CENSUS_FILE   # written by --refresh in a source checkout
BASELINE = HERE / "op_coverage_baseline.json"


# -- reading TensorFlow (dev only) ------------------------------------------------------------------

def _gives_nothing(node: ast.AST | None) -> bool:
    """Whether a return value is None, a list/tuple of Nones, ``[None] * n`` or ``[None for ...]``."""
    if node is None:
        return True
    if isinstance(node, ast.Constant):
        return node.value is None
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_gives_nothing(e) for e in node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return any(isinstance(side, (ast.List, ast.Tuple)) and _gives_nothing(side) for side in (node.left, node.right))
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        return _gives_nothing(node.elt)
    return False


def rule_kind(rule) -> str:
    """Classify a TensorFlow gradient function by reading its source (see the module docstring)."""
    if rule is None:
        return "not_differentiable"
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(rule)))
    except (OSError, TypeError, SyntaxError):
        return "differentiable"
    returns = [n for n in ast.walk(tree) if isinstance(n, ast.Return)]
    if not returns and any(isinstance(n, ast.Raise) for n in ast.walk(tree)):
        return "raises"
    return "returns_none" if all(_gives_nothing(r.value) for r in returns) else "differentiable"


def read_tensorflow_registry() -> dict:
    """{op type: {"tf": kind, "source": file of the rule}} for every registered gradient."""
    import tensorflow  # noqa: F401  (registers the gradients of every module tensorflow imports)
    from tensorflow.python.framework import ops
    table = ops._gradient_registry._registry   # private; read only by this dev tool
    out = {}
    for op_type, entry in sorted(table.items()):
        rule = entry["type"]
        source = ""
        if rule is not None:
            try:
                source = inspect.getsourcefile(rule).split("site-packages/")[-1]
            except TypeError:
                source = ""
        out[op_type] = {"tf": rule_kind(rule), "source": source}
    return out


def refresh(zoo_json: str | None = None) -> dict:
    """Rebuild the census from TensorFlow and the model zoo (runs tools/op_zoo.py in a subprocess,
    which needs keras and tf-keras), and write it."""
    import tensorflow as tf
    ops = read_tensorflow_registry()
    if zoo_json:
        zoo = json.loads(pathlib.Path(zoo_json).read_text())
    else:
        done = subprocess.run([sys.executable, str(HERE / "op_zoo.py")], capture_output=True, text=True, check=True)
        zoo = json.loads(done.stdout)
    used: dict[str, int] = {}
    for op_types in zoo["items"].values():
        for op_type in op_types:
            used[op_type] = used.get(op_type, 0) + 1
    for op_type in sorted(set(used) - set(ops)):
        ops[op_type] = {"tf": "unregistered", "source": ""}
    for op_type, entry in ops.items():
        entry["excluded"] = excluded_by(op_type)
        entry["used_by_models"] = used.get(op_type, 0)
    import keras
    census = {
        "about": "Written by tools/op_coverage.py --refresh; see its docstring for the kinds and the exclusions.",
        "tensorflow": tf.__version__, "keras": keras.__version__,
        "excluded_patterns": EXCLUDED_PATTERNS,
        "ops": dict(sorted(ops.items())),
        "zoo": zoo,
    }
    CENSUS.write_text(json.dumps(census, indent=1, sort_keys=False) + "\n")
    return census


def _print_report(figures: dict, census: dict, table: bool) -> None:
    rows = figures["rows"]
    print(f"TensorFlow {census['tensorflow']} registers Python gradients for {figures['registered']} op types; "
          f"{len(figures['excluded'])} are device/distribution infrastructure ({', '.join(EXCLUDED_PATTERNS)}).")
    print(f"gradreg covers {figures['covered']} of {figures['registered']} "
          f"({100.0 * figures['covered'] / figures['registered']:.0f}%), "
          f"{figures['covered_considered']} of the {figures['considered']} outside the infrastructure "
          f"(covered = op definition + NumPy kernel + gradient rule, or NotDifferentiable where TensorFlow's "
          f"rule gives none); {figures['with_gradient_entry']} have any gradient entry.")
    zoo = census["zoo"]["items"]
    print(f"\nMissing op types by the number of zoo items ({len(zoo)}) emitting them:")
    for op in figures["missing"]:
        row = rows[op]
        have = ",".join(k for k in ("definition", "numpy", "shape") if row["gradreg"][k]) or "-"
        print(f"  {row['used_by_models']:4d}  {op:42s} tf={row['tf']:15s} gradreg has: {have}")
    print("\nOp types the zoo emits that gradreg cannot load or run (no definition or NumPy kernel):")
    for op in figures["zoo_unrunnable"]:
        print(f"  {rows[op]['used_by_models']:4d}  {op:42s} tf={rows[op]['tf']}")
    if table:
        print(f"\n{'op type':42s} {'tf':18s} def np  nb  shp grad  covered  models")
        for op, row in rows.items():
            g = row["gradreg"]
            flag = lambda v: " y " if v else " . "  # noqa: E731
            print(f"{op:42s} {row['tf'] + ('*' if row['excluded'] else ''):18s}{flag(g['definition'])} "
                  f"{flag(g['numpy'])} {flag(g['numba'])} {flag(g['shape'])} {(g['gradient'] or '.')[:4]:5s} "
                  f"{'yes' if row['covered'] else '':7s} {row['used_by_models']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refresh", action="store_true",
                        help="re-read TensorFlow and the model zoo (needs tf, keras, tf-keras)")
    parser.add_argument("--zoo-json",
                        help="with --refresh: reuse a tools/op_zoo.py output instead of rebuilding the zoo")
    parser.add_argument("--table", action="store_true", help="print one row per op type")
    parser.add_argument("--write-baseline", action="store_true", help=f"record today's figures in {BASELINE.name}")
    args = parser.parse_args(argv)
    census = refresh(args.zoo_json) if args.refresh else load_census()
    figures = coverage(census)
    _print_report(figures, census, args.table)
    if args.write_baseline:
        BASELINE.write_text(json.dumps({"covered": figures["covered"], "of": figures["registered"],
                                        "covered_considered": figures["covered_considered"],
                                        "considered": figures["considered"]}, indent=1) + "\n")
        print(f"\nwrote {BASELINE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
