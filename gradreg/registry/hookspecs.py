"""The hooks a gradreg plugin implements. Every hook is optional.

A plugin is any object or module with functions marked ``@gradreg.hookimpl``, named
by an entry point in the group ``gradreg.plugins``::

    # pyproject.toml of a third-party package
    [project.entry-points."gradreg.plugins"]
    swish = "gradreg_swish:family"

Most plugins build their tables with :class:`gradreg.plugin.OpFamily`, which
implements these hooks from decorators; a plugin may also implement them directly::

    import gradreg

    @gradreg.hookimpl
    def gradreg_gradients():
        return {"MyOp": lambda op, grad: grad * 2.0}

gradreg's built-in op families (the packages of plugins/gradreg_plugins/: array, math, nn,
image, sparse, control_flow, function_call, training, random, onnx) are plugins of exactly this
kind, listed in gradreg's own pyproject.toml.

Two plugins providing the same op type in the same table (kernels of one backend,
gradients, shape functions, op definitions) is a conflict: looking that op type up
raises :class:`~gradreg.errors.PluginError` naming both, unless one of them lists the
op type in :func:`gradreg_overrides`, in which case it wins.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pluggy

PROJECT = "gradreg"
ENTRY_POINT_GROUP = "gradreg.plugins"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def gradreg_op_definitions() -> Iterable[Any]:
    """Return the plugin's op table: an iterable of :class:`gradreg.model.opdefs.OpDefinition`.

    Each definition gives the op type's inputs, outputs, attrs and type constraints,
    optionally its shape function and the names of the Python builders it gets
    (``gradreg.<api>``); every definition also gets ``gradreg.raw_ops.<OpType>``.
    """


@hookspec
def gradreg_shape_functions() -> Mapping[str, Callable[..., Any]]:
    """Return ``{op_type: shape_fn}``, for op types whose definition has no shape function
    or comes from another plugin. ``shape_fn(ctx: InferenceContext)`` returns the output
    shape (several outputs: a sequence of shapes)."""


@hookspec
def gradreg_kernels(backend: str) -> Mapping[str, Callable[..., Any]]:
    """Return ``{op_type: kernel_factory}`` for ``backend`` (the name of a backend from
    :func:`gradreg_backends`: "numpy", "numba", ...).

    ``kernel_factory(op, ctx)`` is called once when a plan is compiled, with the
    :class:`~gradreg.model.graph.Operation` and a :class:`~gradreg.registry.kernels.KernelContext`;
    it returns ``compute(*inputs)`` giving the output array, or a tuple of arrays for an
    op with several outputs. A numba factory may return None to decline (for a dtype it
    does not handle), and the NumPy kernel is used instead.
    """


@hookspec
def gradreg_gradients() -> Mapping[str, Callable[..., Any] | None]:
    """Return ``{op_type: rule}``; ``rule(op, *output_grads)`` returns one gradient (Tensor,
    IndexedSlices or None) per data input of ``op``. A value of None declares the op type
    not differentiable (gradients stop there, as ``gradreg.NotDifferentiable``)."""


@hookspec
def gradreg_api_functions() -> Mapping[str, Callable[..., Any]]:
    """Return ``{name: function}``: Python builders with TensorFlow's names and argument
    order (``reduce_sum(input_tensor, axis=None, keepdims=False, name=None)``), exposed as
    ``gradreg.<name>``. A dotted name puts the builder in a namespace, as TensorFlow's
    (``"nn.relu"`` is ``gradreg.nn.relu``). A value may also be an op definition (of this
    plugin): its generated builder is exposed under that name."""


@hookspec
def gradreg_overrides() -> Iterable[str]:
    """Return the op types for which this plugin deliberately replaces another plugin's
    kernel, gradient, shape function or definition."""


@hookspec
def gradreg_iteration_sums() -> Mapping[str, Callable[..., Any]]:
    """Return ``{op_type: rule}``: how loop gradients sum an op's per-iteration results after
    the loop instead of accumulating them per iteration. ``rule(op)`` returns None (no
    shortcut for this node) or ``(values, build)``: the per-iteration tensors to collect,
    and ``build(stacked)`` making the sum, where ``stacked(value)`` gives the collected
    values of one of them stacked on a new leading axis. (MatMul: sum_t a_t^T b_t is A^T B
    of the stacked rows.) Ops merely linear in their first input declare ``linear=True``
    in their OpDefinition instead."""


@hookspec
def gradreg_iteration_stacks() -> Mapping[str, Callable[..., Any]]:
    """Return ``{op_type: rule}``: how loop gradients get the values a node took in every
    iteration, stacked on a new leading axis, from other per-iteration values, so that the
    node need not run per iteration when only sums after the loop use it. ``rule(op,
    outside)`` returns None or ``(values, build)``: the per-iteration tensors to collect, and
    ``build(stacked)`` making the node's stacked output from ``stacked(value)``.
    ``outside(t)`` is the tensor outside the loop that ``t`` equals in every iteration (a
    loop invariant), or None. (MatMul of a per-iteration ``a_t`` and an invariant ``b``:
    the stacked rows of ``a`` times ``b``, one product after the loop.)"""


@hookspec
def gradreg_loop_hoists() -> Mapping[str, Callable[..., Any]]:
    """Return ``{op_type: rule}``: how a plan computes a node's values for all the iterations
    of a v1 loop at once, before the loop. ``rule(op, ctx, outside)`` (``outside(t)``: the
    tensor outside the loop that ``t`` equals in every iteration, or None) returns None or a
    :class:`gradreg.registry.kernels.LoopHoist`: the outside tensors ``precompute`` takes,
    and ``pick(table, *values)`` of the node's ``pick_inputs`` giving the node's output in
    an iteration from the table, or None (then the node's kernel runs). (MatMul of ``xs[t]``
    and an invariant ``W``: ``xs W`` as one product, then row t of it per iteration.)"""


@hookspec
def gradreg_function_call() -> Any:
    """Return a :class:`gradreg.registry.extensions.FunctionCall`: the kernel factory and the
    gradient rule of nodes whose op type is the name of a function in the graph's library
    (gradreg's function_call family provides them)."""


@hookspec
def gradreg_cases() -> Mapping[str, Iterable[Any]]:
    """Return ``{op_type: [Case, ...]}``: how the plugin checker (``gradreg.testing.check_plugin``,
    ``pytest --gradreg-check``, ``gradreg plugins --check``) tries the op types this plugin
    provides something for: input shapes, fixed inputs, attrs, dtypes, value domains, and for a
    rule that is not the derivative on purpose the gradient it must give instead
    (:class:`gradreg.registry.cases.Case`; ``OpFamily.case`` makes them). An op type without a
    case gets a default one from its definition where that is possible."""


@hookspec
def gradreg_backends() -> Iterable[Any]:
    """Return :class:`gradreg.registry.extensions.Backend` records: execution backends a
    Session can run graphs with (gradreg.backends provides "numpy" and "numba")."""


@hookspec
def gradreg_graph_formats() -> Iterable[Any]:
    """Return :class:`gradreg.registry.extensions.GraphFormat` records: graph file formats
    gradreg.load_graph, gradreg.save_graph and ``gradreg convert`` read and write
    (gradreg.formats.graphdef provides GraphDef's binary and text forms)."""
