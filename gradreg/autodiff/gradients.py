"""Symbolic reverse-mode differentiation: :func:`gradients`, with graph-mode TensorFlow's semantics.

The algorithm, in one place:

1. :func:`_between_ops` finds the ops on a backpropagatable path from ``xs`` to ``ys``,
   walking backward from ``ys`` and forward from ``xs`` in step, so the cost is bounded by
   the smaller of the two neighbourhoods — never by the size of the whole graph.
2. :func:`_pending_counts` counts, for each of those ops, how many gradient contributions
   it waits for.
3. Starting from ``ys`` (seeded with ``grad_ys``), ops whose contributions have all
   arrived are processed: contributions are aggregated (:func:`_aggregate`), the op's rule
   is looked up (:func:`_rule_for`) and called, its result is checked
   (:func:`_verify_gradients`), and each input receives its share.
4. Each x's aggregated gradient is returned (None, or zeros with ``"zero"``, if unconnected).

Never a silently missing gradient: an output of unknown type (an op type no plugin defines)
does not end a path in step 1, and a gradient reaching such an op, or an op without a rule,
is a NoGradientError naming the node, what is missing and which known plugin provides it
(gradreg.registry.support). An x is unconnected only when no path reaches it.

Gradient rules come from the registry (plugins, ``RegisterGradient``), per-graph custom
gradients (``custom_gradient``), the ``_gradient_op_type`` attr that
``gradient_override_map`` writes on a node, or the gradient functions a SavedModel stores for
such nodes in its function library (:mod:`gradreg.autodiff.stored_gradients`).
"""
from __future__ import annotations

import collections
import contextvars
import enum
from collections.abc import Callable, Iterable, Sequence, Set
from typing import Any

from gradreg.autodiff.loop_gradients import ForwardLoop, analyze_loop, loop_gradient
from gradreg.autodiff.provenance import RULE_ATTR, rule_attr
from gradreg.autodiff.stored_gradients import stored_gradient
from gradreg.build.builders import apply_op, as_dense, convert_to_tensor, graph_of
from gradreg.build.control_flow import tuple_
from gradreg.errors import GradientError, GradregError, NoGradientError, ShapeError, describe_node
from gradreg.model import dtypes
from gradreg.model.frames import (
    EXIT,
    LOOP_BOUNDARY,
    NEXT_ITERATION,
    Frame,
    LoopStructure,
    child_containing,
    subtree_ops,
)
from gradreg.model.graph import Graph, Operation, Tensor, calls_library_function
from gradreg.model.indexed_slices import IndexedSlices
from gradreg.model.shapes import TensorShape
from gradreg.model.traversal import needed_ops, topological_order
from gradreg.registry import get_registry
from gradreg.registry.support import op_support

_BACKPROP_OTHER = frozenset({dtypes.resource, dtypes.variant, dtypes.bfloat16})

GRADIENT_OP_TYPE_ATTR = "_gradient_op_type"
GRADIENT_PLUGIN_ATTR = "_gradient_op_plugin"


class AggregationMethod:
    """How several gradient contributions to one tensor are summed."""
    ADD_N = 0
    DEFAULT = ADD_N
    EXPERIMENTAL_TREE = 1
    EXPERIMENTAL_ACCUMULATE_N = 2


class UnconnectedGradients(enum.Enum):
    """What an x with no path to the ys receives: None, or zeros shaped like x."""
    NONE = "none"
    ZERO = "zero"


# -- public API -----------------------------------------------------------------------

def gradients(ys: Any, xs: Any, grad_ys: Any = None, name: str = "gradients", stop_gradients: Any = None,
              unconnected_gradients: str | UnconnectedGradients = "none", aggregation_method: int | None = None,
              gate_gradients: bool = False, colocate_gradients_with_ops: bool = False,
              custom_gradient: str | None = None, symmetric_inputs: str | None = None) -> list[Any]:
    """Symbolic partial derivatives of ``sum(ys)`` with respect to each of ``xs``.

    >>> x = gradreg.placeholder(gradreg.float32, [3])
    >>> y = gradreg.reduce_sum(x * x)
    >>> (dx,) = gradreg.gradients(y, [x])          # 2 * x when run

    ``grad_ys`` weights each y (default: ones); ``stop_gradients`` tensors are treated as
    constants; unconnected xs get None, or zeros with ``unconnected_gradients="zero"``.
    Returns one Tensor, IndexedSlices or None per x.
    ``colocate_gradients_with_ops`` is accepted for compatibility (gradreg runs on one device).

    ``custom_gradient`` says what to do with a node whose ``_gradient_op_type`` names a gradient
    this process does not have (a custom gradient of the process that built the graph, as
    Keras' swish leaves): ``"error"`` (the default) differentiates it by the gradient function
    TensorFlow saved with the graph, if it did (a SavedModel's registered gradients), and raises
    NoGradientError naming the node otherwise; ``"forward"`` differentiates the node by its own
    op type's rule instead (for the IdentityN that ``custom_gradient`` writes: through the
    forward ops that computed it).

    ``symmetric_inputs`` says what the ops that read only the lower triangle of a Hermitian
    input (Cholesky, SelfAdjointEigV2) give an input that is a free matrix: ``"tensorflow"``
    (the default) TensorFlow's gradients, the symmetric 1/2 (G + G^H) for Cholesky (what
    TensorFlow, JAX and PyTorch all give) and G folded onto the lower triangle for
    SelfAdjointEigV2 (JAX and PyTorch: symmetric); ``"symmetric"`` 1/2 (G + G^H) for both;
    ``"folded"`` the lower triangle for both, the derivative of what the kernels compute from
    the n^2 free entries (what finite differences see). For an input built Hermitian the three agree.

    Both choices hold for everything differentiated during the call (loop bodies, functions).
    """
    mode = _custom_gradient_mode(custom_gradient)
    symmetric = _symmetric_inputs_mode(symmetric_inputs)
    try:
        unconnected = UnconnectedGradients(unconnected_gradients if not isinstance(
            unconnected_gradients, UnconnectedGradients) else unconnected_gradients.value)
    except ValueError:
        raise GradregError(f"unknown value for unconnected_gradients: {unconnected_gradients!r}") from None
    if aggregation_method is None:
        aggregation_method = AggregationMethod.DEFAULT
    if aggregation_method not in (AggregationMethod.ADD_N, AggregationMethod.EXPERIMENTAL_TREE,
                                  AggregationMethod.EXPERIMENTAL_ACCUMULATE_N):
        raise GradregError(f"invalid aggregation_method {aggregation_method!r}")
    ys = _as_list(ys)
    xs = _as_list(xs)
    stop_gradients = _as_list(stop_gradients) if stop_gradients is not None else []
    grad_ys = [None] * len(ys) if grad_ys is None else _as_list(grad_ys)
    if len(grad_ys) != len(ys):
        raise GradregError(f"passed {len(grad_ys)} grad_ys for {len(ys)} ys")
    graph = graph_of((ys, xs))
    with graph.as_default(), graph.name_scope(name):
        ys = [_as_tensor(y, "y") for y in ys]
        xs = [_as_tensor(x, "x") for x in xs]
        stop_tensors = [_as_tensor(s, "stop_gradients") for s in stop_gradients]
        grad_ys = _default_grad_ys(grad_ys, ys)
        token = _CUSTOM_GRADIENT.set(mode)
        symmetric_token = _SYMMETRIC_INPUTS.set(symmetric)
        try:
            return _Backprop(graph, ys, xs, grad_ys, stop_tensors, aggregation_method, gate_gradients).run(unconnected)
        finally:
            _SYMMETRIC_INPUTS.reset(symmetric_token)
            _CUSTOM_GRADIENT.reset(token)


CUSTOM_GRADIENT_MODES = ("error", "forward")
# The custom_gradient choice of the gradients() call in progress: rules that differentiate
# functions call gradients() again, without the argument, and inherit it.
_CUSTOM_GRADIENT: contextvars.ContextVar[str] = contextvars.ContextVar("gradreg_custom_gradient", default="error")


def _custom_gradient_mode(value: str | None) -> str:
    if value is None:
        return _CUSTOM_GRADIENT.get()
    if value not in CUSTOM_GRADIENT_MODES:
        raise GradregError(f"unknown value for custom_gradient: {value!r} (expected 'error' or 'forward')")
    return value


def custom_gradient_mode() -> str:
    """The ``custom_gradient`` choice of the gradients() call in progress ("error" outside one):
    what a rule building gradients later (a SymbolicGradient node) should record."""
    return _CUSTOM_GRADIENT.get()


SYMMETRIC_INPUTS_MODES = ("tensorflow", "symmetric", "folded")
# The symmetric_inputs choice of the gradients() call in progress, inherited as custom_gradient's.
_SYMMETRIC_INPUTS: contextvars.ContextVar[str] = contextvars.ContextVar("gradreg_symmetric_inputs",
                                                                         default="tensorflow")


def _symmetric_inputs_mode(value: str | None) -> str:
    if value is None:
        return _SYMMETRIC_INPUTS.get()
    if value not in SYMMETRIC_INPUTS_MODES:
        raise GradregError(f"unknown value for symmetric_inputs: {value!r} "
                           f"(expected one of {', '.join(map(repr, SYMMETRIC_INPUTS_MODES))})")
    return value


def symmetric_inputs_mode() -> str:
    """The ``symmetric_inputs`` choice of the gradients() call in progress ("tensorflow" outside
    one): what the rules of Cholesky and SelfAdjointEigV2 give a free input."""
    return _SYMMETRIC_INPUTS.get()


def RegisterGradient(op_type: str, override: bool = False) -> Callable[..., Any]:  # noqa: N802  (TensorFlow's name)
    """Decorator registering ``rule(op, *grads)`` as the gradient of ``op_type``.

    >>> @gradreg.RegisterGradient("CustomSquare")
    ... def _grad(op, grad):
    ...     return grad * 2.0 * op.inputs[0]

    The rule is also what ``gradient_override_map({"Square": "CustomSquare"})`` refers to.
    Registering an op type that already has a rule raises unless ``override=True``.
    """
    if not isinstance(op_type, str) or not op_type:
        raise TypeError("RegisterGradient takes an op type string")

    def register(rule: Callable[..., Any]) -> Callable[..., Any]:
        source = f"python:{getattr(rule, '__module__', '?')}"
        get_registry().register_gradient(op_type, rule, source, override=override)
        return rule
    return register


def NotDifferentiable(op_type: str) -> None:  # noqa: N802  (TensorFlow's name)
    """Declare ``op_type`` not differentiable: gradients stop there (None) without error."""
    get_registry().register_gradient(op_type, None, "python:NotDifferentiable", override=True)


NoGradient = NotDifferentiable


def is_trainable(dtype: Any) -> bool:
    """Types that receive gradients (and implicit zero gradients): float, complex, resource."""
    if dtype is None:
        return False
    base = dtype.base_dtype
    return base.kind in "fc" and base is not dtypes.bfloat16 or base in (dtypes.resource, dtypes.variant)


def is_backpropagatable(tensor: Tensor) -> bool:
    dtype = tensor.dtype
    return dtype is not None and (is_trainable(dtype) or dtype.base_dtype is dtypes.bfloat16)


# -- the algorithm ----------------------------------------------------------------------

class _LoopUnit:
    """A whole v1 loop frame (and the frames nested in it), differentiated as one node."""

    def __init__(self, frame: Frame, structure: LoopStructure):
        self.frame = frame
        self.loop = analyze_loop(frame, structure)
        self.enters = self.loop.invariants + [v.enter for v in self.loop.loop_vars]
        self.name = frame.name

    @property
    def inputs(self) -> list[Tensor]:
        return [e.inputs[0] for e in self.enters]

    def __repr__(self) -> str:
        return f"<loop {self.name}>"


class _Backprop:
    """One call of gradients(): state shared by the steps of the algorithm.

    ``base_loop`` is set when differentiating the body of a loop (gradreg.autodiff.loop_gradients):
    that loop's own back edges are then not followed.
    """

    def __init__(self, graph: Graph, ys: list[Tensor], xs: list[Tensor], grad_ys: list[Any],
                 stop_tensors: list[Tensor], aggregation_method: int, gate_gradients: bool,
                 base_loop: ForwardLoop | None = None):
        self.graph = graph
        self.ys = ys
        self.xs = xs
        self.grad_ys = grad_ys
        self.aggregation_method = aggregation_method
        self.gate_gradients = gate_gradients
        self.base_loop = base_loop
        self.to_ops = [t.op for t in ys]
        self.from_ops = [t.op for t in xs]
        if base_loop is not None:
            # Differentiating a loop body: stay inside the loop's frame (and frames nested in it),
            # and do not follow its own back edges.
            blocked = {v.merge for v in base_loop.loop_vars}
            within = set(subtree_ops(base_loop.frame))
        else:
            blocked, within = set(), None
        between = _between_ops(self.to_ops, self.from_ops, blocked, within)
        self.unit_of: dict[Operation, _LoopUnit] = {}
        if any(op.type in LOOP_BOUNDARY for op in between):
            self._collapse_loops(between)
        self.nodes = {self.node_of(op) for op in between}
        self.pending = _pending_counts(self.nodes, self.node_of, self._node_inputs)
        self.stop_ops = _stop_ops(self.from_ops, [t.op for t in stop_tensors], self.pending, self.node_of)
        # op -> per output: list of received contributions (then the aggregate)
        self.grads: dict[Operation, list[Any]] = {}

    # -- loops as units ---------------------------------------------------------------------
    def _collapse_loops(self, between: set[Operation]) -> None:
        structure = LoopStructure(topological_order(needed_ops(self.to_ops, set()), "plan"))
        base = structure.value_frame(self.to_ops[0])
        units: dict[Any, _LoopUnit] = {}
        for op in between:
            frame = structure.frame_of.get(op)
            if frame is None or frame is base:
                continue
            child = child_containing(base, frame)
            if child is None:
                raise GradientError(f"cannot differentiate through {describe_node(op.name, op.type)}: it is in "
                                    f"loop frame '{frame.name}', outside the frame of the ys")
            unit = units.get(child)
            if unit is None:
                unit = units[child] = _LoopUnit(child, structure)
            self.unit_of[op] = unit
        for x in self.xs:
            unit = self.unit_of.get(x.op)
            if unit is not None and x.op.type not in EXIT:
                raise GradientError(f"cannot differentiate with respect to {x.name}: it is inside loop frame "
                                    f"'{unit.name}' (differentiate with respect to the loop's inputs)")

    def node_of(self, op: Operation) -> Operation | _LoopUnit:
        return self.unit_of.get(op, op)

    def _node_inputs(self, node: Operation | _LoopUnit) -> Sequence[Tensor]:
        return node.inputs if isinstance(node, _LoopUnit) else node.inputs

    # -- the walk ------------------------------------------------------------------------------
    def run(self, unconnected: UnconnectedGradients) -> list[Any]:
        for y, grad_y in zip(self.ys, self.grad_ys):
            self._add_grad(y, grad_y)
        queue: collections.deque[Operation | _LoopUnit] = collections.deque()
        queued: set[Any] = set()
        for op in self.to_ops:
            node = self.node_of(op)
            if node in self.nodes and self.pending.get(node, 0) == 0 and node not in queued:
                queued.add(node)
                queue.append(node)
        while queue:
            node = queue.popleft()
            if isinstance(node, _LoopUnit):
                self._backprop_through_loop(node)
            else:
                self._backprop_through(node)
            for t in self._node_inputs(node):
                producer = self.node_of(t.op)
                if producer is node or producer not in self.pending:
                    continue
                self.pending[producer] -= 1
                if self.pending[producer] == 0:
                    queue.append(producer)
        return [self._result_for(x, unconnected) for x in self.xs]

    def _backprop_through(self, op: Operation) -> None:
        graph = self.graph
        with graph.name_scope(op.name + "_grad"):
            out_grads = self._aggregated(op)
            has_out_grads = any(g is not None for g in out_grads)
            in_grads: list[Any] = [None] * len(op.inputs)
            if has_out_grads and op not in self.stop_ops:
                rule = _rule_for(op)
                if rule is not None:
                    self._check_inputs_typed(op)
                    for i, g in enumerate(out_grads):
                        dtype = op.outputs[i].dtype
                        if g is None and dtype is not None and dtype.base_dtype.is_differentiable:
                            # The ys do not depend on this output: its gradient is zero. (Rules
                            # get None for resource and variant outputs, as zeros of those are
                            # not tensors.)
                            out_grads[i] = apply_op("ZerosLike", op.outputs[i])
                    with graph.attr_scope({RULE_ATTR: (rule.provenance.encode(), "string")}):
                        in_grads = _call_rule(rule, op, out_grads)
                    # Gradients for inputs outside the between set are never used: drop them now
                    # so that gating does not make them needed.
                    in_grads = [g if g is not None and self.node_of(t.op) in self.nodes else None
                                for t, g in zip(op.inputs, in_grads)]
                    if self.gate_gradients and sum(g is not None for g in in_grads) > 1:
                        in_grads = tuple_(in_grads)
        for t, g in zip(op.inputs, in_grads):
            if g is not None and self.node_of(t.op) in self.nodes:
                self._add_grad(t, g)

    def _check_inputs_typed(self, op: Operation) -> None:
        """A gradient about to flow into a tensor of unknown type (the output of an op type
        gradreg does not know) could not go further: say so, naming that op, rather than
        let the path end there."""
        for t in op.inputs:
            if t.dtype is None and self.node_of(t.op) in self.nodes and t.op not in self.stop_ops:
                raise NoGradientError(_untyped_message(t.op))

    def _backprop_through_loop(self, unit: _LoopUnit) -> None:
        exit_grads = {e: self._aggregated(e)[0] for e in unit.loop.exits}
        if all(g is None for g in exit_grads.values()):
            return

        def body_gradients(ys: list[Tensor], xs: list[Tensor], grad_ys: list[Any]) -> list[Any]:
            # The xs (switch outputs, merges, invariant Enters) are where the body's gradient is
            # collected: stop there, do not differentiate the loop's header.
            return _Backprop(self.graph, ys, xs, grad_ys, xs, self.aggregation_method, self.gate_gradients,
                             base_loop=unit.loop).run(UnconnectedGradients.NONE)
        with self.graph.name_scope(unit.name.rstrip("/") + "_grad"):
            grads = loop_gradient(self.graph, unit.loop, exit_grads,
                                  lambda t: self.node_of(t.op) in self.nodes, body_gradients)
        for enter, g in grads.items():
            t = enter.inputs[0]
            if self.node_of(t.op) in self.nodes:
                self._add_grad(t, g)

    def _add_grad(self, t: Tensor, grad: Any) -> None:
        slots = self.grads.get(t.op)
        if slots is None:
            slots = self.grads[t.op] = [[] for _ in t.op.outputs]
        slots[t.value_index].append(grad)

    def _aggregated(self, op: Operation) -> list[Any]:
        slots = self.grads.get(op)
        if slots is None:
            return [None] * len(op.outputs)
        out = []
        for t, received in zip(op.outputs, slots):
            if isinstance(received, list):
                received = _aggregate(t, [g for g in received if g is not None], self.aggregation_method)
            out.append(received)
        self.grads[op] = out   # memoized: an x may be asked for after its op was processed
        return list(out)

    def _result_for(self, x: Tensor, unconnected: UnconnectedGradients) -> Any:
        slots = self.grads.get(x.op)
        grad = None
        if slots is not None:
            received = slots[x.value_index]
            if isinstance(received, list):
                with self.graph.name_scope(x.op.name + "_grad"):
                    received = _aggregate(x, [g for g in received if g is not None], self.aggregation_method)
            grad = received
        if grad is None and unconnected is UnconnectedGradients.ZERO:
            dtype = x.dtype if x.dtype is not dtypes.resource else dtypes.float32
            return apply_op("ZerosLike", x) if dtype is x.dtype else apply_op(
                "Fill", apply_op("Shape", x), convert_to_tensor(0, dtype))
        return grad


def ops_between(ys: Sequence[Tensor], xs: Sequence[Tensor]) -> set[Operation]:
    """The ops on a path from ``xs`` to ``ys`` along which a gradient can flow (the ops
    :func:`gradients` would differentiate)."""
    return _between_ops([y.op for y in ys], [x.op for x in xs])


def _between_ops(to_ops: Sequence[Operation], from_ops: Sequence[Operation],
                 blocked_merges: Set[Operation] = frozenset(), within: set[Operation] | None = None) -> set[Operation]:
    """Ops on a path from from_ops to to_ops along which every tensor is backpropagatable.

    Walks backward from to_ops (over inputs) and forward from from_ops (over consumers of
    backpropagatable outputs) alternately; when one walk completes, the other is redone
    restricted to it. Cost: about twice the smaller neighbourhood, independent of graph size.
    Back edges into ``blocked_merges`` (the loop whose body is being differentiated) are
    not followed; with ``within``, the walks stay inside that set of ops.
    """
    backward_step = _backward_step(blocked_merges)
    forward_step = _forward_step(blocked_merges)
    backward = _Walk(to_ops, backward_step, within=within)
    forward = _Walk(from_ops, forward_step, within=within)
    while True:
        if not backward.step():
            ancestors = backward.seen
            reached = _Walk(from_ops, forward_step, within=ancestors).finish()
            break
        if not forward.step():
            reached = forward.seen
            break
    # Keep what leads to to_ops through reached ops only (TensorFlow's between set).
    return _Walk([op for op in to_ops if op in reached], backward_step, within=reached).finish()


def _backward_step(blocked_merges: Set[Operation]) -> Callable[[Operation, Callable[[Operation], None]], None]:
    """Visit an op's producers (not across the back edges into ``blocked_merges``)."""
    def step(op: Operation, visit: Callable[[Operation], None]) -> None:
        blocked = op in blocked_merges
        for t in op.inputs:
            if not (blocked and t.op.type in NEXT_ITERATION):
                visit(t.op)
    return step


def _forward_step(blocked_merges: Set[Operation]) -> Callable[[Operation, Callable[[Operation], None]], None]:
    """Visit the consumers of an op's backpropagatable outputs (not across blocked back edges)."""
    def step(op: Operation, visit: Callable[[Operation], None]) -> None:
        back_edge = op.type in NEXT_ITERATION
        for t in op.outputs:
            dtype = t.dtype
            # An output of unknown type (an op type gradreg does not know) may carry the
            # gradient: follow it, so that the path reaches that op and fails there by name
            # instead of being cut silently.
            if dtype is not None and not (dtype.kind in "fc" or dtype.base_dtype in _BACKPROP_OTHER):
                continue
            for consumer in t.consumers_view():
                if not (back_edge and consumer in blocked_merges):
                    visit(consumer)
    return step


class _Walk:
    """A breadth-first walk that can be advanced a few ops at a time."""

    BATCH = 16   # ops expanded per step: fine enough to stop early, coarse enough to be cheap

    def __init__(self, start: Iterable[Operation], step: Callable[..., Any], within: set[Any] | None = None):
        self.seen: set[Operation] = set()
        self.queue: collections.deque[Operation] = collections.deque()
        self.expand = step
        seen, queue = self.seen, self.queue
        if within is None:
            def visit(op: Operation) -> None:
                if op not in seen:
                    seen.add(op)
                    queue.append(op)
        else:
            def visit(op: Operation) -> None:
                if op not in seen and op in within:
                    seen.add(op)
                    queue.append(op)
        self.visit = visit
        for op in start:
            visit(op)

    def step(self) -> bool:
        queue, expand, visit = self.queue, self.expand, self.visit
        for _ in range(self.BATCH):
            if not queue:
                return False
            expand(queue.popleft(), visit)
        return True

    def finish(self) -> set[Operation]:
        queue, expand, visit = self.queue, self.expand, self.visit
        while queue:
            expand(queue.popleft(), visit)
        return self.seen


def _pending_counts(nodes: set[Any], node_of: Callable[..., Any], node_inputs: Callable[..., Any]) -> dict[Any, int]:
    """For each node (op or loop unit), how many gradient contributions (uses of its outputs by
    other nodes of the between set) it must receive before it is processed."""
    pending = dict.fromkeys(nodes, 0)
    for node in nodes:
        for t in node_inputs(node):
            producer = node_of(t.op)
            if producer is not node and producer in pending:
                pending[producer] += 1
    return pending


def _stop_ops(from_ops: Sequence[Operation], stop_gradient_ops: Sequence[Operation],
              pending: dict[Any, int], node_of: Callable[..., Any]) -> set[Operation]:
    """Ops not differentiated: the from_ops with no between-op before them, and the ops of
    ``stop_gradients``."""
    stop = set()
    for op in from_ops:
        if all(pending.get(node_of(t.op), 0) == 0 for t in op.inputs):
            stop.add(op)
    stop.update(stop_gradient_ops)
    return stop


def _default_grad_ys(grad_ys: list[Any], ys: list[Tensor]) -> list[Any]:
    """Ones shaped like each y where no grad_y is given; given ones checked and named."""
    out: list[Any] = []
    for i, (grad_y, y) in enumerate(zip(grad_ys, ys)):
        if y.dtype is None:
            raise NoGradientError(f"cannot differentiate {y.name}: the type of {describe_node(y.op.name, y.op.type)} "
                                  f"is unknown: {op_support(y.op.type).describe(backends=())}")
        if grad_y is None:
            out.append(_ones_like(y, i))
        elif isinstance(grad_y, IndexedSlices):
            out.append(grad_y)
        else:
            out.append(_checked_grad_y(y, grad_y, i))
    return out


def _ones_like(y: Tensor, i: int) -> Tensor:
    dtype = y.known_dtype
    if dtype.is_complex:
        raise GradientError(f"gradients of complex tensors must set grad_ys ({y.name} is {dtype.name})")
    if not dtype.is_numeric:
        raise GradientError(f"{y.name} of type {dtype.name} must be numeric to obtain a default gradient")
    ones = convert_to_tensor(1, dtype.base_dtype, name=f"grad_ys_{i}")
    if y.shape.is_fully_defined():
        static = [int(d) for d in y.shape.as_list() if d is not None]
        # int64 dims when one is past int32 (Fill takes either; the element limit refuses it at run time)
        dims = convert_to_tensor(static, dtypes.int32 if max(static, default=0) < 2**31 else dtypes.int64)
    else:
        dims = apply_op("Shape", y)
    filled: Tensor = apply_op("Fill", dims, ones)
    return filled


def _checked_grad_y(y: Tensor, grad_y: Any, i: int) -> Tensor:
    """A given grad_y as a Tensor of a type that fits ``y`` (as TensorFlow checks it)."""
    want = y.known_dtype
    grad_y = convert_to_tensor(grad_y, want.base_dtype if not isinstance(grad_y, Tensor) else None)
    given = grad_y.known_dtype
    if want.is_floating or want.is_integer:
        if not (given.is_floating or given.is_integer):
            raise GradientError(f"gradient type {given.name} given for real or integer-valued "
                                f"tensor {y.name} of type {want.name} must be real or integer")
    elif want.is_complex:
        if not given.is_complex:
            raise GradientError(f"gradient type {given.name} given for complex-valued tensor "
                                f"{y.name} must be complex")
    elif want.base_dtype is dtypes.variant:
        if given.base_dtype is not dtypes.variant:
            raise GradientError(f"gradient type {given.name} given for variant tensor {y.name} must be variant")
    elif want.base_dtype is dtypes.resource:
        if given.base_dtype is dtypes.resource:
            raise GradientError(f"gradient given for resource tensor {y.name} must not be a resource")
    else:
        raise GradientError(f"{y.name} of type {want.name} must be numeric to obtain a gradient")
    identity: Tensor = apply_op("Identity", grad_y, name=f"grad_ys_{i}")
    return identity


class _Rule:
    """A gradient rule and where it came from, named in errors ("plugin 'math'", "custom
    gradient 'CustomGradient-3'", ...): worked out only when an error needs it, as a rule is
    looked up for every op differentiated."""

    __slots__ = ("fn", "source", "key", "op_type", "provenance")

    def __init__(self, fn: Callable[..., Any], source: str, key: str = "", op_type: str = "", provenance: str = ""):
        self.fn = fn
        self.source = source      # the registering plugin, "python:<module>", or a description
        self.key = key            # the gradient's name in the table (differs from op_type for overrides)
        self.op_type = op_type
        self.provenance = provenance   # the _gradreg_rule attr of the nodes it makes (gradreg.autodiff.provenance)

    @property
    def origin(self) -> str:
        if not self.key:
            return self.source
        source = self.source
        described = f"python code in module '{source[7:]}'" if source.startswith("python:") else f"plugin '{source}'"
        return described if self.key == self.op_type else f"{described}, as '{self.key}' by gradient_override_map"


def _rule_for(op: Operation) -> _Rule | None:
    """The op's gradient rule; None if the op type is NotDifferentiable. NoGradientError if it
    has none."""
    registry = get_registry()
    override = op.get_attr(GRADIENT_OP_TYPE_ATTR) if op.has_attr(GRADIENT_OP_TYPE_ATTR) else None
    if override is not None:
        key = override.decode() if isinstance(override, bytes) else str(override)
        custom = op.graph.custom_gradients.get(key)
        if custom is not None:
            return _Rule(custom, f"custom gradient '{key}'", provenance=rule_attr("custom_gradient", key))
        found = registry.gradients.lookup(key)
        if found is not None:
            return None if found.value is None else _registered(found.value, found.plugin, key, op.type)
        if _CUSTOM_GRADIENT.get() != "forward":
            stored = stored_gradient(op, key)
            if stored is not None:
                return _Rule(stored[0], f"the gradient function '{stored[1]}' stored with the graph for '{key}'")
            raise NoGradientError(_missing_override_message(op, key))
        # custom_gradient="forward": differentiate the node as its op type, ignoring the override.
    found = registry.gradients.lookup(op.type)
    if found is not None:
        return None if found.value is None else _registered(found.value, found.plugin, op.type, op.type)
    library_function = calls_library_function(op)
    if library_function:
        calls = registry.function_call()
        if calls is not None and calls.value.gradient is not None:
            return _Rule(calls.value.gradient, f"plugin '{calls.plugin}', for library function calls",
                         provenance=rule_attr(calls.plugin, op.type, registry.release(calls.plugin)))
    support = op_support(op.type, library_function=library_function, registry=registry)
    raise NoGradientError(f"No gradient defined for operation '{op.name}' (op type: {op.type}): "
                          f"{support.describe(backends=())}")


def _registered(fn: Callable[..., Any], source: str, key: str, op_type: str) -> _Rule:
    """A rule of the gradient table, from ``source`` (a plugin, or ``python:<module>``)."""
    return _Rule(fn, source, key, op_type, rule_attr(source, key, get_registry().release(source)))


def _untyped_message(op: Operation) -> str:
    support = op_support(op.type, registry=get_registry())
    return (f"cannot differentiate through {describe_node(op.name, op.type)}, which lies on the path from "
            f"the xs to the ys: {support.describe(backends=())}")


def _missing_override_message(op: Operation, key: str) -> str:
    where = f"No gradient '{key}' is registered; node '{op.name}' (op type: {op.type}) names it in " \
            f"{GRADIENT_OP_TYPE_ATTR} (set by gradient_override_map or custom_gradient)"
    plugin = op.get_attr(GRADIENT_PLUGIN_ATTR) if op.has_attr(GRADIENT_PLUGIN_ATTR) else None
    forward = ("; or pass custom_gradient='forward' to gradients() (gradreg grad --custom-gradient forward) to "
               "differentiate through the node's forward ops instead")
    if plugin:
        plugin = plugin.decode() if isinstance(plugin, bytes) else plugin
        if plugin.startswith("python:"):
            return (f"{where}. When the graph was built it was registered by Python code in module "
                    f"'{plugin[7:]}' (gradreg.RegisterGradient); import that module before differentiating{forward}")
        return f"{where}. It is provided by plugin '{plugin}': install that plugin{forward}"
    if key.startswith("CustomGradient-"):
        return (f"{where}. It was a custom_gradient function of the process that built the graph; "
                f"Python functions are not saved with a graph, so rebuild that part of the graph in this process"
                f"{forward}")
    return where + forward


def _call_rule(rule: _Rule, op: Operation, out_grads: list[Any]) -> list[Any]:
    try:
        result = rule.fn(op, *out_grads)
    except GradregError as exc:
        if f"'{op.name}'" in str(exc):
            raise
        raise _located(exc, f"the gradient rule of {describe_node(op.name, op.type)}: {exc}") from None
    except Exception as exc:
        raise GradientError(f"the gradient rule of {describe_node(op.name, op.type)} ({rule.origin}) "
                            f"raised {type(exc).__name__}: {exc}") from exc
    in_grads = list(result) if isinstance(result, (list, tuple)) else [result]
    _verify_gradients(op, in_grads, rule)
    return in_grads


def _located(exc: GradregError, message: str) -> GradregError:
    """``exc`` again, of the same class, with ``message`` (which names the node) instead."""
    try:
        return type(exc)(message)
    except TypeError:                      # a subclass with another constructor
        return GradientError(message)


def _verify_gradients(op: Operation, in_grads: list[Any], rule: _Rule) -> None:
    """A rule must return one gradient per data input, of the input's dtype and a compatible shape."""
    if len(in_grads) != len(op.inputs):
        raise _rule_error(op, rule, f"returned {len(in_grads)} gradients for {len(op.inputs)} inputs")
    for i, (t, g) in enumerate(zip(op.inputs, in_grads)):
        if g is None:
            continue
        if not isinstance(g, (Tensor, IndexedSlices)):
            try:
                g = in_grads[i] = convert_to_tensor(g, t.dtype.base_dtype if t.dtype is not None and
                                                    t.dtype.is_numeric else None)
            except GradregError as exc:
                raise _rule_error(op, rule, f"returned {g!r} for input {i}: {exc}") from None
        want = t.dtype
        if want is not None and want.base_dtype.is_differentiable and g.dtype is not None \
                and g.dtype.base_dtype is not want.base_dtype:
            raise _rule_error(op, rule, f"returned {g.dtype.name} for input {i} ({t.name}), which is {want.name}")
        if isinstance(g, Tensor) and want is not None and want.base_dtype is not dtypes.resource \
                and g.shape.dims != t.shape.dims:
            try:
                g.set_shape(t.shape)
            except ShapeError:
                raise _rule_error(op, rule, f"returned shape {g.shape} for input {i} ({t.name}), "
                                            f"whose shape is {t.shape}") from None


def _rule_error(op: Operation, rule: _Rule, what: str) -> GradientError:
    return GradientError(f"the gradient rule of {describe_node(op.name, op.type)} ({rule.origin}) {what}")


def _aggregate(t: Tensor, received: list[Any], method: int) -> Any:
    """Sum the gradient contributions to tensor ``t`` (None if there are none)."""
    if not received:
        return None
    if len(received) == 1:
        return received[0]
    if all(isinstance(g, Tensor) for g in received):
        if method == AggregationMethod.EXPERIMENTAL_ACCUMULATE_N and len(received) > 2 and \
                _accumulator_shape(received).is_fully_defined():
            return apply_op("AddN", received, name="AccumulateN")
        if method in (AggregationMethod.EXPERIMENTAL_TREE, AggregationMethod.EXPERIMENTAL_ACCUMULATE_N):
            with t.graph.name_scope(t.op.name + "_gradient_sum"):
                total = received[0]
                for g in received[1:]:
                    total = apply_op("AddN", [total, g])
                return total
        return apply_op("AddN", received)
    return _aggregate_indexed_slices(received)


def _accumulator_shape(received: list[Any]) -> TensorShape:
    shape = TensorShape(None)
    for g in received:
        try:
            shape = shape.merge_with(g.shape)
        except ShapeError:
            return TensorShape(None)
    return shape


def _aggregate_indexed_slices(received: list[Any]) -> IndexedSlices:
    """Sum contributions of which some are IndexedSlices: concatenate rows and indices."""
    slices = [_as_indexed_slices(g) for g in received]
    dense_shape = next((s.dense_shape for s in slices if s.dense_shape is not None), None)
    values = apply_op("ConcatV2", [s.values for s in slices], 0)
    indices = apply_op("ConcatV2", [_as_int64_if_mixed(s.indices, slices) for s in slices], 0)
    return IndexedSlices(values, indices, dense_shape)


def _as_int64_if_mixed(indices: Tensor, slices: list[IndexedSlices]) -> Tensor:
    kinds = {s.indices.known_dtype.base_dtype for s in slices}
    if len(kinds) > 1 and indices.known_dtype.base_dtype is not dtypes.int64:
        cast: Tensor = apply_op("Cast", indices, DstT=dtypes.int64)
        return cast
    return indices


def _as_indexed_slices(g: Any) -> IndexedSlices:
    """A dense gradient as IndexedSlices covering every row."""
    if isinstance(g, IndexedSlices):
        return g
    shape = apply_op("Shape", g)
    first = apply_op("StridedSlice", shape, [0], [1], [1], shrink_axis_mask=1)
    return IndexedSlices(g, apply_op("Range", 0, first, 1), shape)


def _as_tensor(value: Any, what: str) -> Tensor:
    if isinstance(value, Tensor):
        return value
    handle = getattr(value, "_gradreg_gradient_target_", None)
    if handle is not None:
        target: Tensor = handle()
        return target
    if isinstance(value, IndexedSlices):
        raise GradregError(f"{what} must be Tensors, not IndexedSlices")
    return convert_to_tensor(value)


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def as_dense_gradients(grads: Sequence[Any]) -> list[Any]:
    """Densify the IndexedSlices among gradients (what the command line hands out)."""
    return [as_dense(g) if g is not None else None for g in grads]
