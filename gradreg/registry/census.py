"""The op census: TensorFlow's registered Python gradients against the installed op families
(``gradreg ops --missing``; the developer report is tools/op_coverage.py).

The census, ``tf_gradient_registry.json`` beside this module (package data: it ships in the
wheel), is written by ``python tools/op_coverage.py --refresh`` from TensorFlow 2.21's gradient
registry. Every registered op type has a kind: ``not_differentiable`` (registered through
``tf.no_gradient``), ``returns_none`` (a rule that only gives None: ArgMax, Floor), ``raises``
(a rule that only raises: TensorFlow cannot differentiate the op either), ``differentiable``
(any other rule); ``unregistered`` marks op types only the model zoo emits. Device and
distribution infrastructure is excluded by op-type pattern (EXCLUDED_PATTERNS).

An op type counts as covered when gradreg has its op definition, a NumPy kernel and a gradient
entry: a rule, or NotDifferentiable where TensorFlow's own rule gives no gradient.

    >>> figures = coverage()
    >>> figures["covered"], figures["registered"]
    (..., 414)
"""
from __future__ import annotations

import fnmatch
import importlib.resources
import json
from typing import Any

from gradreg.model.frames import V1_CONTROL_FLOW_OPS
from gradreg.registry.plugins import Registry, get_registry

__all__ = ["CENSUS_FILE", "EXCLUDED_PATTERNS", "REGISTERED_KINDS", "coverage", "excluded_by", "gradreg_status",
           "is_covered", "load_census", "models_using"]

CENSUS_FILE = "tf_gradient_registry.json"   # package data of gradreg.registry
# The list of device and distribution infrastructure (fnmatch patterns on the op type).
EXCLUDED_PATTERNS = ["TPU*", "Xla*", "Nccl*", "Collective*", "*Mesh*", "Relayout*", "Cudnn*", "Debug*",
                     "Print", "EagerPyFunc"]
REGISTERED_KINDS = ("differentiable", "returns_none", "raises")   # TensorFlow has a rule for these


def excluded_by(op_type: str) -> str | None:
    """The EXCLUDED_PATTERNS entry matching ``op_type``, or None."""
    return next((p for p in EXCLUDED_PATTERNS if fnmatch.fnmatchcase(op_type, p)), None)


def load_census() -> dict[str, Any]:
    """The committed census (see the module docstring)."""
    text = importlib.resources.files("gradreg.registry").joinpath(CENSUS_FILE).read_text(encoding="utf-8")
    census: dict[str, Any] = json.loads(text)
    return census


def gradreg_status(op_type: str, registry: Registry | None = None) -> dict[str, Any]:
    """What gradreg provides for ``op_type``: op definition, numpy/numba kernels, shape function,
    gradient ("rule", "not_differentiable" or None). v1 control flow (Switch, Merge, Enter, ...)
    has no kernel: the interpreter compiles it into loops and branches; it counts as "numpy"."""
    registry = registry or get_registry()
    gradient = registry.gradients.lookup(op_type)
    return {
        "definition": registry.op_definition(op_type) is not None,
        "numpy": registry.kernel_factory(op_type, "numpy") is not None or op_type in V1_CONTROL_FLOW_OPS,
        "numba": registry.kernel_factory(op_type, "numba") is not None,
        "shape": registry.shape_function(op_type) is not None,
        "gradient": None if gradient is None else ("rule" if gradient.value is not None else "not_differentiable"),
    }


def is_covered(tf_kind: str, status: dict[str, Any]) -> bool:
    """Definition, NumPy kernel and gradient entry; NotDifferentiable only where TF gives no gradient."""
    if not (status["definition"] and status["numpy"] and status["gradient"]):
        return False
    return status["gradient"] == "rule" or tf_kind != "differentiable"


def coverage(census: dict[str, Any] | None = None, registry: Registry | None = None) -> dict[str, Any]:
    """The coverage figures and the rows behind them (see the module docstring)."""
    census = census or load_census()
    rows = {}
    for op_type, entry in census["ops"].items():
        status = gradreg_status(op_type, registry)
        rows[op_type] = dict(entry, gradreg=status, covered=is_covered(entry["tf"], status))
    registered = [op for op, row in rows.items() if row["tf"] in REGISTERED_KINDS]
    considered = [op for op in registered if not rows[op]["excluded"]]
    return {
        "registered": len(registered),
        "considered": len(considered),
        "covered": sum(rows[op]["covered"] for op in registered),
        "covered_considered": sum(rows[op]["covered"] for op in considered),
        "with_gradient_entry": sum(bool(rows[op]["gradreg"]["gradient"]) for op in registered),
        "excluded": sorted(op for op in registered if rows[op]["excluded"]),
        "missing": sorted((op for op in considered if not rows[op]["covered"]),
                          key=lambda op: (-rows[op]["used_by_models"], op)),
        "zoo_unrunnable": sorted((op for op, row in rows.items() if row["used_by_models"]
                                  and not (row["gradreg"]["definition"] and row["gradreg"]["numpy"])),
                                 key=lambda op: (-rows[op]["used_by_models"], op)),
        "rows": rows,
    }


def models_using(census: dict[str, Any], op_type: str) -> list[str]:
    """The model-zoo items (tools/op_zoo.py) that emit ``op_type``."""
    return sorted(name for name, ops in census["zoo"]["items"].items() if op_type in ops)
