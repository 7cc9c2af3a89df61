"""Which rule built each node of a gradient graph, written on the node so that it travels with the file.

gradients() creates each op's gradient nodes inside ``graph.attr_scope``: every node a rule
makes gets the string attr ``_gradreg_rule``::

    _gradreg_rule: "swish:Swish gradreg-swish==0.1.0"     plugin swish's rule for Swish,
                                                          from the distribution gradreg-swish 0.1.0
    _gradreg_rule: "math:MatMul gradreg==0.1.0"           a built-in family's rule
    _gradreg_rule: "python:my_module:CustomSquare"        gradreg.RegisterGradient in my_module
    _gradreg_rule: "custom_gradient:CustomGradient-3"     a gradreg.custom_gradient function

that is ``source:rule`` and, when an installed distribution provided the plugin, its name and
version. A node made by a rule called inside another rule (a loop body, a function call) names
the innermost. Nodes gradreg makes itself (sums of contributions, zeros for unused outputs)
have none. TensorFlow's importer accepts attrs whose names start with ``_`` on any op, so the
graph stays loadable by ``tf.compat.v1.import_graph_def``; ``gradreg plugins --trace FILE``
reads the attrs back (:func:`rule_origins`) and compares them with what is installed.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gradreg.model.graph import Operation

RULE_ATTR = "_gradreg_rule"


@dataclass(frozen=True, order=True)
class RuleOrigin:
    """One ``_gradreg_rule`` value, parsed: the plugin (or ``python:module``, ``custom_gradient``),
    the rule's name in the gradient table, and the distribution and version that provided it."""
    source: str
    rule: str
    distribution: str = ""
    version: str = ""

    @classmethod
    def parse(cls, value: str | bytes) -> RuleOrigin:
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        head, _, release = text.strip().partition(" ")
        source, _, rule = head.rpartition(":")
        distribution, _, version = release.partition("==")
        return cls(source or head, rule if source else "", distribution, version)

    def __str__(self) -> str:
        release = f" {self.distribution}=={self.version}" if self.version else \
            (f" {self.distribution}" if self.distribution else "")
        return f"{self.source}:{self.rule}{release}"

    @property
    def plugin(self) -> str | None:
        """The plugin's name, or None for rules registered from Python code and custom gradients."""
        return None if self.source.startswith("python:") or self.source == "custom_gradient" else self.source


def rule_attr(source: str, rule: str, release: str = "") -> str:
    """The ``_gradreg_rule`` value of ``rule`` from ``source`` (``release``: "dist==version")."""
    return f"{source}:{rule} {release}" if release else f"{source}:{rule}"


def rule_origins(ops: Iterable[Operation]) -> dict[RuleOrigin, list[str]]:
    """The rules that built ``ops`` (read from their ``_gradreg_rule`` attrs): origin -> node names."""
    found: dict[RuleOrigin, list[str]] = {}
    for op in ops:
        if op.has_attr(RULE_ATTR):
            found.setdefault(RuleOrigin.parse(op.get_attr(RULE_ATTR)), []).append(op.name)
    return dict(sorted(found.items()))
