"""Running library functions: each (function, call attrs) pair compiled once by the session's
executor and kept in the session's kernel context (SessionContext.function_plans)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gradreg import deadline
from gradreg.build.functions import call_attrs_key, function_graph, function_nesting
from gradreg.errors import InvalidGraphFunctionError, describe_node
from gradreg.model.graph import FunctionLibrary, Operation
from gradreg.runtime.context import SessionContext


def function_plan(ctx: SessionContext, library: FunctionLibrary, name: str, call_attrs: dict[str, Any],
                  caller: Operation, *, repeated: bool = False) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """A compiled plan running function ``name`` (compiled once, cached in the kernel context),
    callable with a sequence of argument values and returning the outputs. Each call first
    checks the run's deadline (gradreg.deadline), naming ``caller``: a library of functions
    calling others twice over, 40 deep, runs 2**40 calls without a loop. ``repeated``: the
    caller calls it many times in one run (a loop's condition or body), each call in place
    (gradreg.runtime.plan.Plan.call_in_place, where the executor's plans have it)."""
    compiled, n_out = _compiled(ctx, library, name, call_attrs, caller)
    plan = getattr(compiled, "call_in_place", compiled) if repeated else compiled
    deadlines, clock = ctx.deadlines, deadline.clock
    late = (describe_node(caller.name, caller.type), f"calling function '{name}'", caller.name, caller.type)

    def run(args: Sequence[Any]) -> tuple[Any, ...]:
        if clock() > deadlines.at:
            raise deadlines.error(*late)
        outputs: tuple[Any, ...] = plan(args)
        return outputs if n_out is None else outputs[:n_out]
    return run


def _compiled(ctx: SessionContext, library: FunctionLibrary, name: str, call_attrs: dict[str, Any],
              caller: Operation) -> tuple[Callable[[Sequence[Any]], tuple[Any, ...]], int | None]:
    """The plan of function ``name`` and how many of its results are outputs (None: all; the
    others are its control outputs), compiled once per session."""
    key = (id(library), name, call_attrs_key(call_attrs))
    cache = ctx.function_plans
    found: tuple[Callable[[Sequence[Any]], tuple[Any, ...]], int | None] | None = cache.get(key)
    if found is not None:
        return found
    stack = ctx.compiling_functions
    if name in stack:
        chain = " -> ".join(stack[stack.index(name):] + [name])
        raise InvalidGraphFunctionError(f"{describe_node(caller.name, caller.type)}: the function library calls "
                                        f"itself without end ({chain})")
    stack.append(name)
    where = describe_node(caller.name, caller.type)
    try:
        body = function_graph(library, name, call_attrs, where)
        with function_nesting(f"{where}: function '{name}'"):   # compiling it compiles those it calls
            plan = ctx.executor.compile(body.outputs + body.control_outputs, body.inputs)
    finally:
        stack.pop()
    found = cache[key] = (plan, len(body.outputs) if body.control_outputs else None)
    return found


def symbolic_gradient_plan(ctx: SessionContext, library: FunctionLibrary, name: str, call_attrs: dict[str, Any],
                           caller: Operation) -> Callable[[Sequence[Any]], Any]:
    """A compiled plan of :func:`symbolic_gradient_graph` (differentiated once, cached)."""
    # start-up: constant folding imports the control-flow kernels, and this module, as a graph
    # loads; differentiation is imported when a SymbolicGradient node first runs
    from gradreg.autodiff import function_gradients

    mode = function_gradients.custom_gradient_of(caller)
    symmetric = function_gradients.symmetric_inputs_of(caller)
    # The caller's resource inputs say what their variables hold: their gradients have that type.
    resources = function_gradients.resource_dtypes_of(caller.inputs)
    key = ("gradient", id(library), name, call_attrs_key(call_attrs), mode, symmetric,
           tuple(sorted(resources.items())))
    cache = ctx.function_plans
    found = cache.get(key)
    if found is None:
        graph = function_gradients.symbolic_gradient_graph(
            library, name, call_attrs, describe_node(caller.name, caller.type), resources, custom_gradient=mode,
            symmetric_inputs=symmetric)
        plan = ctx.executor.compile(graph.outputs, graph.inputs)
        found = cache[key] = lambda args: plan(args)
    return found
