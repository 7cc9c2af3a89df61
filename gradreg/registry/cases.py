"""Check cases: how the plugin checker (gradreg.testing.check_plugin) tries an op type.

A plugin declares them next to the op, with ``family.case`` (or a ``gradreg_cases`` hook)::

    family.case("Swish", [2, 3])                                # one input of shape (2, 3)
    family.case("OuterSum", [3], [4])                           # two vectors
    family.case("Log", [2, 3], domain=(0.1, 3.0))               # values where the op is defined
    family.case("Sum", [2, 3], np.array([1], np.int32), attrs={"keep_dims": True})  # a fixed input
    family.case("Round", [2, 3], domain=(-3, 3), vjp=lambda x, dy: dy)   # a surrogate gradient

Each input is a shape (a list of ints; ``[]`` is a scalar), whose values the checker draws
uniformly from ``domain`` in the dtype being checked and differentiates; a list of shapes, for a
list input (``N * T``); or an array, a value held fixed (an axis, indices), never differentiated.
An op type with no declared case gets one from its definition when every input is a single
tensor of a float type and every attr has a default: shape (2, 3) for each input.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gradreg.errors import PluginError
from gradreg.model import dtypes

DEFAULT_DOMAIN = (-1.0, 1.0)
DEFAULT_TOLERANCE = 1e-5
Domain = tuple[float, float]


@dataclass(frozen=True)
class Case:
    """One way to try an op type (see the module docstring).

    ``dtypes``: the dtype names to try (default: every type the op's definition allows that
    the checker can feed). ``domain``: where random values come from, one (low, high) pair for
    every input or one per input. ``vjp(*inputs, *cotangents)``: for a rule that is not the
    derivative on purpose (a straight-through estimator), the NumPy gradients it must give
    instead (one per input, None for none); finite differences are then not asked.
    ``tolerance``: the largest error allowed, relative to max(1, the largest derivative).
    ``second_order``: also check the gradient of the gradient, where the rule's ops have rules.
    ``departs_from_tensorflow``: why the rule differs from TensorFlow's on purpose (then
    TensorFlow's gradient is not compared). ``label`` names the case in reports.
    """
    op_type: str
    inputs: tuple[Any, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)
    dtypes: tuple[str, ...] | None = None
    domain: tuple[Domain, ...] | Domain = DEFAULT_DOMAIN
    vjp: Callable[..., Any] | None = None
    tolerance: float = DEFAULT_TOLERANCE
    second_order: bool = True
    departs_from_tensorflow: str = ""
    label: str = ""

    def domain_of(self, index: int) -> Domain:
        """The (low, high) of input ``index``."""
        domain: Any = self.domain
        if domain and isinstance(domain[0], (tuple, list)):   # one pair per input
            return (float(domain[index][0]), float(domain[index][1])) if index < len(domain) else DEFAULT_DOMAIN
        return (float(domain[0]), float(domain[1]))

    def describe(self) -> str:
        """The case in a report: its label, else its inputs' shapes."""
        if self.label:
            return self.label
        return ", ".join(_describe_input(i) for i in self.inputs) or "no inputs"


def _describe_input(value: Any) -> str:
    if is_shape(value):
        return "[" + ", ".join(str(int(d)) for d in value) + "]"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_describe_input(v) for v in value) + "]"
    return "fixed " + "x".join(str(d) for d in getattr(value, "shape", ())) or "fixed scalar"


def is_shape(value: Any) -> bool:
    """Whether a case input is a shape (a list or tuple of ints), as opposed to a list of
    shapes (a list input) or an array (a fixed value)."""
    return isinstance(value, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in value)


def make_case(op_type: str, inputs: Sequence[Any], *, attrs: Mapping[str, Any] | None = None,
              dtypes: Sequence[Any] | None = None, domain: Any = None, vjp: Callable[..., Any] | None = None,
              tolerance: float | None = None, second_order: bool = True, departs_from_tensorflow: str = "",
              label: str = "") -> Case:
    """A validated Case (PluginError naming the op type for a malformed one)."""
    for i, value in enumerate(inputs):
        if is_shape(value):
            if any(d < 0 for d in value):
                raise PluginError(f"check case of '{op_type}': input {i} has a negative dimension: {list(value)}")
        elif isinstance(value, (list, tuple)):
            if not all(is_shape(v) for v in value):
                raise PluginError(f"check case of '{op_type}': input {i} is neither a shape, a list of shapes nor "
                                  f"an array: {value!r}")
        elif not hasattr(value, "dtype"):
            raise PluginError(f"check case of '{op_type}': input {i} is neither a shape, a list of shapes nor an "
                              f"array: {value!r}")
    names = None if dtypes is None else tuple(_dtype_name(op_type, d) for d in dtypes)
    return Case(op_type, tuple(inputs), dict(attrs or {}), names, _domain(op_type, domain), vjp,
                DEFAULT_TOLERANCE if tolerance is None else float(tolerance), bool(second_order),
                departs_from_tensorflow, label)


def _dtype_name(op_type: str, value: Any) -> str:
    try:
        return dtypes.as_dtype(value).name
    except Exception as exc:
        raise PluginError(f"check case of '{op_type}': {value!r} is not a dtype ({exc})") from None


def _domain(op_type: str, domain: Any) -> tuple[Domain, ...] | Domain:
    if domain is None:
        return DEFAULT_DOMAIN
    pairs = [domain] if len(domain) == 2 and not isinstance(domain[0], (tuple, list)) else list(domain)
    checked = []
    for pair in pairs:
        if pair is None:
            checked.append(DEFAULT_DOMAIN)
            continue
        low, high = (float(v) for v in pair)
        if not low < high:
            raise PluginError(f"check case of '{op_type}': domain ({low}, {high}) is empty")
        checked.append((low, high))
    if len(pairs) == 1 and not isinstance(domain[0], (tuple, list)):
        return checked[0]
    return tuple(checked)
