"""What kernels see and return.

A kernel factory ``factory(op, ctx)`` runs once per node when a plan is compiled and
returns one of:

* a callable ``compute(*inputs)`` returning the output: the bare value when the node has one
  output (even when that output is a list argument of length 1, as Split with num_split=1),
  a tuple or list of values when it has several;
* :data:`IDENTITY` — the outputs are the inputs, unchanged (Identity, StopGradient, ...);
  the plan aliases them and calls nothing;
* :class:`Constant` — the output is known at compile time (Const); the plan binds it;
* :data:`NOOP` — nothing to compute (NoOp, ControlTrigger);
* :class:`Tiered` — a kernel to run now and a faster one that takes long to make (numba
  compiling): the executor runs the first and swaps in the second once it is built;
* :class:`Absorbing` — a kernel that also computes the node producing one of the inputs
  (an SGD update that accumulates the weight gradient's product into the variable): a
  plan whose only use of that producer is this node runs the one kernel; elsewhere
  ``fallback`` runs, after the producer.

A loop-hoist rule (gradreg.registry.hookspecs.gradreg_loop_hoists) answers with a
:class:`LoopHoist`: a table computed once before a v1 loop, from which each iteration
picks the node's output.

Kernels never modify their inputs in place; an output may share memory with an input.

The ``ctx`` a factory receives is a :class:`KernelContext`: the element limit, seeded
random generators, and (in a Session) the session's resources and library functions.
This module is the contract between op families and the runtime; the runtime implements
the context (gradreg.runtime.context), this layer folds constants with the NumPy kernels.
"""
from __future__ import annotations

import operator
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from gradreg import config
from gradreg.deadline import CallDeadlines
from gradreg.errors import ElementLimitError, ExecutionError, FileAccessError, describe_node
from gradreg.file_access import FileAccess

if TYPE_CHECKING:
    from gradreg.model.graph import Operation

IDENTITY = object()
NOOP = object()


@dataclass(frozen=True)
class Constant:
    """A kernel factory's answer for an output known at compile time (the plan binds ``value``)."""
    value: Any


@dataclass(frozen=True)
class Absorbing:
    """A kernel factory's answer for a node that can compute one of its inputs itself:
    ``absorbed`` are the nodes making it (the producer, then the Identity nodes between it and
    this node, as TensorFlow's gradients put them); ``kernel(*inputs)`` replaces this node's
    kernel and theirs when nothing else in the plan uses them (outputs neither fetched nor
    consumed by other nodes, no control edge from them); otherwise the plan runs them and
    ``fallback``, the node's usual kernel (which may itself be Tiered)."""
    kernel: Callable[..., Any]
    inputs: tuple[Any, ...]          # Tensors: the node's other inputs and the producer's
    absorbed: tuple[Operation, ...]
    fallback: Any


@dataclass(frozen=True)
class LoopHoist:
    """A loop-hoist rule's answer (hookspecs.gradreg_loop_hoists): before the loop, the plan
    computes ``precompute(*values of inputs)`` once (``inputs``: tensors outside the loop);
    in each iteration, ``pick(table, *values of pick_inputs)`` gives the node's output, or
    None, and then the node's own kernel runs. ``precompute`` returns None when the values
    do not suit it (the node's kernel then runs in every iteration and reports any error)."""
    inputs: tuple[Any, ...]          # Tensors outside the loop
    precompute: Callable[..., Any]
    pick_inputs: tuple[Any, ...]     # Tensors in the loop
    pick: Callable[..., Any]


class VariantValue(Protocol):
    """A DT_VARIANT value (a TensorList, ...) that generic ops can handle: ZerosLike and AddN of
    variant tensors call these methods, as TensorFlow's registry of unary and binary variant
    operations does. A family's variant class implements them; other families' kernels reach
    them through :func:`variant_zeros_like` and :func:`variant_add` without importing it. A kind
    whose values can be conjugated (the sparse family's CSR matrices) also has ``conj()``, which
    Conj of a variant tensor calls (:func:`variant_conj`)."""

    def zeros_like(self) -> VariantValue:
        """A value of the same structure with every element zero."""

    def add(self, other: Any) -> VariantValue:
        """The element-wise sum with ``other`` (ValueError if the structures differ)."""


def _each_variant(fn: Callable[..., Any], *values: Any) -> Any:
    """``fn`` of variant values, element by element for arrays of them (NumPy object arrays: a
    vector of ragged tensor encodings, a batch of TensorLists)."""
    first = values[0]
    if not isinstance(first, np.ndarray):
        return fn(*values)
    if any(np.shape(v) != first.shape for v in values[1:]):
        raise ValueError(f"variant arrays of shapes {[list(np.shape(v)) for v in values]} do not match")
    out = np.empty(first.shape, dtype=object)
    for index in np.ndindex(first.shape):
        out[index] = fn(*(v[index] for v in values))
    return out


def variant_zeros_like(value: Any, op: Operation) -> Any:
    """ZerosLike of a variant value (or an array of them); ExecutionError naming the node if its
    kind has no zeros."""
    if isinstance(value, np.ndarray):
        return _each_variant(lambda v: variant_zeros_like(v, op), value)
    method = getattr(value, "zeros_like", None)
    if method is None:
        raise ExecutionError(f"{describe_node(op.name, op.type)}: ZerosLike is not defined for the variant "
                             f"value {value!r}", op.name, op.type)
    return method()


def variant_conj(value: Any, op: Operation) -> Any:
    """Conj of a variant value; ExecutionError naming the node if its kind has no conjugate."""
    method = getattr(value, "conj", None)
    if method is None:
        raise ExecutionError(f"{describe_node(op.name, op.type)}: Conj is not defined for the variant value "
                             f"{value!r}", op.name, op.type)
    return method()


def variant_add(a: Any, b: Any, op: Operation) -> Any:
    """The sum of two variant values (or arrays of them, element by element); ExecutionError
    naming the node if their kind has no sum."""
    if isinstance(a, np.ndarray):
        try:
            return _each_variant(lambda x, y: variant_add(x, y, op), a, b)
        except ValueError as exc:
            raise ExecutionError(f"{describe_node(op.name, op.type)}: {exc}", op.name, op.type) from None
    method = getattr(a, "add", None)
    if method is None:
        raise ExecutionError(f"{describe_node(op.name, op.type)}: addition is not defined for the variant "
                             f"value {a!r}", op.name, op.type)
    return method(b)


@dataclass(frozen=True)
class Tiered:
    """A kernel factory's answer when the best kernel for a node takes a while to make.

    ``initial`` computes the node now (NumPy); ``build()`` returns a kernel giving the same
    results faster, and may take seconds (it compiles). The executor decides when
    ``build`` runs -- at once, or in the background while ``initial`` serves -- and swaps
    the built kernel in; if ``build`` fails, ``initial`` stays. ``name`` names the kernel in
    messages about building it; ``weight`` (the work of a call, e.g. its elements or flops)
    lets the heaviest be built first when nothing was measured. Kernels of one ``family``
    share one compiled loop (the first to build pays for the rest; None: kernels of one op
    type, the first word of ``name``); a function giving the family is called only by a
    backend that will build in the background (the numba backend: as a plan's first call
    returns; a key that takes a while to work out stays off the plan's making)."""
    initial: Callable[..., Any]
    build: Callable[[], Callable[..., Any]]
    name: str = ""
    weight: float = 0.0
    family: Hashable | Callable[[], Hashable] | None = None

    def __call__(self, *args: Any) -> Any:
        return self.initial(*args)


class ShapeMemo:
    """What a kernel works out from its inputs' shapes (checks, output sizes, pads, reshaped
    views' shapes), kept for the last few keys it met: a plan's kernel meets the same shapes
    call after call, and working them out in Python can cost as much as a small op's work.
    ``get(key, make)`` returns the value kept for ``key``, else ``make()``'s, kept from then on
    (at most ``size`` keys: all are dropped when one more comes). An exception from ``make``
    propagates and nothing is kept, so a failing check raises on every call."""

    def __init__(self, size: int = 8):
        self.size = size
        self.known: dict[Any, Any] = {}

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        found = self.known.get(key)
        if found is None:
            found = make()
            if len(self.known) >= self.size:
                self.known.clear()
            self.known[key] = found
        return found


def constant_factory(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A kernel factory for a kernel that needs nothing from the node (``np.sin``)."""
    def factory(op: Any, ctx: Any) -> Callable[..., Any]:
        return fn
    factory.simple_kernel = fn  # type: ignore[attr-defined]
    return factory


class KernelContext(Protocol):
    """What a kernel factory may ask of its context."""

    max_elements: int
    backend: str
    resources: dict[str, Any]
    loop_iteration_limit: int | None
    loop_timeout: float | None          # seconds each loop may run (None: no limit)
    deadlines: CallDeadlines            # the deadlines of the calls running (gradreg.deadline)

    def check_elements(self, n: int, op: Any) -> None:
        """Refuse (before allocating) an output of ``n`` elements above the limit."""

    def check_shape(self, shape: Any, op: Any) -> tuple[int, ...]:
        """``shape`` as a tuple of ints, checked (non-negative, within the element limit)."""

    def file_path(self, op: Any, path: Any, verb: str) -> str:
        """The resolved path ``op``'s kernel may ``verb`` ("read", "write", "delete");
        FileAccessError naming the node otherwise (see gradreg.file_access)."""

    def rng(self, op: Any) -> np.random.Generator:
        """The node's random generator (seeded from the graph and the node's seed attrs)."""


class BasicKernelContext:
    """The stateless part of a kernel context: the element limit and seeded random generators.
    Constant folding uses it as it is; a Session's context adds its resources."""

    def __init__(self, graph: Any = None, max_elements: int | None = None, backend: str = "numpy",
                 loop_iteration_limit: int | None = None, files: FileAccess | None = None,
                 loop_timeout: float | None = None):
        self.graph = graph
        # Where file ops may read and write: the graph's model root and the caller's grants.
        self.files = files if files is not None else FileAccess(getattr(graph, "model_root", None))
        # None: the process default (gradreg.config.max_loop_iterations, .loop_timeout); 0: no limit.
        limit = config.max_loop_iterations if loop_iteration_limit is None else int(loop_iteration_limit)
        self.loop_iteration_limit = limit if limit > 0 else None
        seconds = config.loop_timeout if loop_timeout is None else float(loop_timeout)
        self.loop_timeout = seconds if seconds > 0 else None
        self.deadlines = CallDeadlines()
        self.max_elements = config.max_elements if max_elements is None else int(max_elements)
        self.backend = backend
        self.resources: dict[str, Any] = {}
        self._rngs: dict[str, np.random.Generator] = {}

    def check_elements(self, n: int, op: Any) -> None:
        """Refuse (before allocating) an output of ``n`` elements above the limit."""
        if n > self.max_elements:
            raise ElementLimitError(
                f"{describe_node(op.name, op.type)}: output of {int(n):,} elements exceeds the limit of "
                f"{self.max_elements:,} (Session(max_elements=...), {config.how_to_raise('max_elements')})")

    def check_shape(self, shape: Any, op: Any) -> tuple[int, ...]:
        dims = tuple(int(d) for d in np.asarray(shape).reshape(-1))
        n = 1
        for d in dims:
            if d < 0:
                raise ExecutionError(f"{describe_node(op.name, op.type)}: negative dimension in shape {list(dims)}",
                                     op.name, op.type)
            n *= d
        self.check_elements(n, op)
        return dims

    def file_path(self, op: Any, path: Any, verb: str) -> str:
        """The resolved path ``op``'s kernel may ``verb`` ("read", "write", "delete"), as its
        context's :class:`~gradreg.file_access.FileAccess` allows; FileAccessError naming the
        node otherwise. The op's definition must declare the verb (``files=``): a kernel cannot
        touch files its op type does not say it touches."""
        definition = op.definition
        if definition is None or verb not in definition.files:
            raise FileAccessError(f"{describe_node(op.name, op.type)}: its op type does not declare that it may "
                                  f"{verb} files (OpDefinition files=), so its kernel may not")
        text = path.decode("utf-8", "surrogateescape") if isinstance(path, bytes) else str(path)
        if not text or "\0" in text:
            raise FileAccessError(f"{describe_node(op.name, op.type)}: the path {text!r} is not a file name")
        return self.files.check(text, verb, describe_node(op.name, op.type))

    def rng(self, op: Any) -> np.random.Generator:
        """The node's random generator: seeded from the graph seed and the op's seed/seed2
        attrs when either is set (reproducible across sessions), else from fresh entropy."""
        gen = self._rngs.get(op.name)
        if gen is None:
            seed = op.get_attr("seed") if op.has_attr("seed") else 0
            seed2 = op.get_attr("seed2") if op.has_attr("seed2") else 0
            graph_seed = getattr(self.graph, "seed", None)
            if seed or seed2:
                # TensorFlow's seeds are int64 and may be negative; PCG64 wants non-negative words.
                gen = np.random.Generator(np.random.PCG64([seed & _UINT64, seed2 & _UINT64]))
            elif graph_seed is not None:
                gen = np.random.Generator(np.random.PCG64([graph_seed, op.id]))
            else:
                gen = np.random.default_rng()
            self._rngs[op.name] = gen
        return gen


_UINT64 = (1 << 64) - 1
_FOLDING_CONTEXT = BasicKernelContext(max_elements=100_000)


def fold_constant(op: Operation, values: list[Any], factory: Callable[..., Any] | None) -> Any:
    """Run ``op``'s NumPy kernel (made by ``factory``) on constant inputs at graph-construction
    time; None when there is no kernel or it fails (shape inference then treats the value as
    unknown)."""
    if factory is None:
        return None
    try:
        kernel = factory(op, _FOLDING_CONTEXT)
        if kernel is IDENTITY:
            return values[0] if len(values) == 1 else tuple(values)
        if isinstance(kernel, Constant):
            return kernel.value
        if kernel is NOOP:
            return None
        with np.errstate(all="ignore"):   # as at run time: 1.0 / 0.0 is inf, silently
            return kernel(*values)
    except Exception:
        return None




_SCALAR_OPERATORS = {
    np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul,
    np.less: operator.lt, np.less_equal: operator.le, np.greater: operator.gt,
    np.greater_equal: operator.ge, np.equal: operator.eq, np.not_equal: operator.ne,
}


def broadcasting(fn: Any, op: Any, ctx: KernelContext) -> Any:
    """``fn`` (a broadcasting NumPy function of several arrays) guarded by the element limit.

    When the node's static output shape is fully known and within the limit, ``fn`` itself
    is returned (no per-call cost); otherwise each call first checks the broadcast size,
    bounded cheaply by the product of the input sizes.
    """
    shape = op.outputs[0].shape
    n = shape.num_elements()
    limit = ctx.max_elements
    if n is not None and n <= limit:
        scalar = _SCALAR_OPERATORS.get(fn)
        if scalar is not None and all(t.shape.rank == 0 and t.dtype.kind in "iuf" for t in op.inputs):
            # Scalars (loop counters, bounds): Python's operators on NumPy scalars give the same
            # typed result as the ufunc at a tenth of its call cost.
            return scalar
        return fn

    def checked(a: Any, b: Any) -> Any:
        # The broadcast size is at most the product of the sizes: look closer only above the limit.
        if np.size(a) * np.size(b) > limit:
            ctx.check_elements(int(np.prod(np.broadcast_shapes(np.shape(a), np.shape(b)), dtype=np.int64)), op)
        return fn(a, b)

    def checked_n(*args: Any) -> Any:
        total = 1
        for a in args:
            total *= np.size(a)
        if total > limit:
            ctx.check_elements(int(np.prod(np.broadcast_shapes(*(np.shape(a) for a in args)), dtype=np.int64)), op)
        return fn(*args)
    return checked if len(op.inputs) == 2 else checked_n
