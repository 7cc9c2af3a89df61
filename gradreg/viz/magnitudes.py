"""Where a gradient flows: per op, the size of the gradient of the ys with respect to its outputs.

    >>> found = gradient_magnitudes(graph, [loss], feeds={"x:0": batch})
    >>> found["dense/MatMul"]          # NodeGradient(status='flows', l2=0.83, max_abs=0.41)

For every op on a data path into the ys (and, given xs, out of the xs), the gradient of
``sum(ys * grad_ys)`` with respect to each of its floating-point outputs (a variable op: with
respect to the variable) is computed with gradreg.gradients in one backward pass and
evaluated with the feeds (reduced in the graph to a sum of squares and a max, in float64);
the op's L2 norm is that of all its outputs' gradients together,
its max-abs their largest element. An op none of whose outputs a gradient reaches (integer
outputs such as Shape's, a path cut by StopGradient or by an op without a gradient) is
``disconnected``, with no magnitude: a missing gradient is never reported as a zero one. Ops
off the path are not in the result at all.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gradreg.autodiff.gradients import as_dense_gradients, gradients
from gradreg.build.builders import apply_op, constant
from gradreg.model import dtypes
from gradreg.runtime.session import Session
from gradreg.training.variables import VARIABLE_OP_TYPES, find_variables

FLOWS = "flows"                 # a gradient with a nonzero element reaches the op
ZERO = "zero"                   # a gradient reaches it, and every element is 0 (a dead ReLU)
DISCONNECTED = "disconnected"   # on the path, but no gradient reaches its outputs
NON_FINITE = "non-finite"       # the gradient holds a NaN or an infinity

# The scope the backward ops are built in.
SCOPE = "explorer_gradients"


@dataclasses.dataclass(frozen=True)
class NodeGradient:
    """The gradient of the ys at one op: its status, and (flows/zero) its L2 norm and max |g|."""
    status: str
    l2: float | None = None
    max_abs: float | None = None


def path_ops(ys: Sequence[Any], xs: Sequence[Any] | None = None) -> list[Any]:
    """The ops on data paths into the ys (out of the xs, when given), in graph order."""
    seen: set[Any] = set()
    stack = [y.op for y in ys]
    while stack:
        op = stack.pop()
        if op not in seen:
            seen.add(op)
            stack.extend(t.op for t in op.inputs)
    if xs:
        seen &= _descendants([getattr(x, "op", x) for x in xs])
    return sorted(seen, key=lambda op: op.id)


def _descendants(ops: Iterable[Any]) -> set[Any]:
    seen: set[Any] = set()
    stack = list(ops)
    while stack:
        op = stack.pop()
        if op not in seen:
            seen.add(op)
            stack.extend(c for t in op.outputs for c in t.consumers())
    return seen


def _targets(op: Any, variables: Mapping[Any, Any]) -> list[Any]:
    """What an op's gradient is taken with respect to: its variable, or its float outputs."""
    if op.type in VARIABLE_OP_TYPES:
        return [variables[op]] if op in variables else []
    return [t for t in op.outputs if t.dtype is not None and (t.dtype.is_floating or t.dtype.is_complex)]


def gradient_magnitudes(graph: Any, ys: Sequence[Any], feeds: Mapping[Any, Any] | None = None, *,
                        xs: Sequence[Any] | None = None, grad_ys: Sequence[Any] | None = None,
                        stop_gradients: Sequence[Any] | None = None, ops: Iterable[str] | None = None,
                        session: Session | None = None, custom_gradient: str | None = None
                        ) -> dict[str, NodeGradient]:
    """``{op name: NodeGradient}`` for the ops of ``graph`` on a path into ``ys`` (Tensors),
    see the module docstring. ``xs`` (Tensors or Operations) keep only the ops on paths out of
    them; ``ops`` (names) only these ops (the nodes a picture shows); ``grad_ys`` weights the
    ys (default: ones), ``stop_gradients`` are treated as constants. The backward ops are added
    to ``graph`` under the scope ``explorer_gradients`` (the reductions to two scalars per
    gradient under ``explorer_gradients_measures``) and run in ``session`` (default: a new
    Session on ``graph``) with ``feeds``."""
    wanted = None if ops is None else set(ops)
    on_path = [op for op in path_ops(ys, xs) if wanted is None or op.name in wanted]
    variables = {v.op: v for v in find_variables(graph)} if any(op.type in VARIABLE_OP_TYPES for op in on_path) \
        else {}
    targets = {op: _targets(op, variables) for op in on_path}
    flat = [t for op in on_path for t in targets[op]]
    with graph.as_default():
        grads = as_dense_gradients(gradients(list(ys), flat, grad_ys=grad_ys, name=SCOPE,
                                             stop_gradients=stop_gradients, custom_gradient=custom_gradient)) \
            if flat else []
        with graph.name_scope(SCOPE + "_measures"):
            shared = _Constants()
            measures = {id(g): _measures(g, shared) for g in grads if g is not None}
    fetches = list(measures.values())
    values = (session or Session(graph)).run(fetches, dict(feeds or {})) if fetches else []
    value_of = {key: values[i] for i, key in enumerate(measures)}
    out: dict[str, NodeGradient] = {}
    position = 0
    for op in on_path:
        count = len(targets[op])
        found = [value_of[id(g)] for g in grads[position:position + count] if g is not None]
        position += count
        out[op.name] = summarize(found)
    return out


class _Constants:
    """The constants every gradient's reductions share: built once."""

    def __init__(self) -> None:
        self.flat = constant([-1], dtypes.int32, name="flat")
        self.axis = constant(0, dtypes.int32, name="axis")
        self.zero = constant([0.0], dtypes.float64, name="zero")


def _measures(gradient: Any, shared: _Constants) -> tuple[Any, Any]:
    """(sum of squares, max |g|) of a gradient as float64 scalars computed in the graph, so
    that only two numbers per tensor leave the backend (a gradient's memory is freed as the
    plan runs). Where the gradient may be empty, the max is taken with a 0 appended."""
    flat = apply_op("Reshape", gradient, shared.flat)
    magnitude = apply_op("ComplexAbs" if gradient.dtype.is_complex else "Abs", flat)
    wide = apply_op("Cast", magnitude, DstT=dtypes.float64)
    squares = apply_op("Sum", apply_op("Square", wide), shared.axis)
    elements = gradient.shape.num_elements() if gradient.shape.is_fully_defined() else None
    if not elements:
        wide = apply_op("ConcatV2", [wide, shared.zero], shared.axis)
    return squares, apply_op("Max", wide, shared.axis)


def summarize(measures: Sequence[tuple[Any, Any]]) -> NodeGradient:
    """The NodeGradient of one op from (sum of squares, max |g|) of its outputs' gradients
    (none: disconnected)."""
    if not measures:
        return NodeGradient(DISCONNECTED)
    squares = sum(float(s) for s, _ in measures)
    largest = max(float(m) for _, m in measures)
    if not (math.isfinite(squares) and math.isfinite(largest)):
        return NodeGradient(NON_FINITE)
    return NodeGradient(ZERO if largest == 0 else FLOWS, math.sqrt(squares), largest)


__all__ = ["DISCONNECTED", "FLOWS", "NON_FINITE", "ZERO", "NodeGradient", "gradient_magnitudes", "path_ops",
           "summarize"]
