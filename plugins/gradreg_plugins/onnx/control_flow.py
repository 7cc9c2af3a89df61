"""Kernels of the ONNX ops with subgraphs: If, Loop, Scan, SequenceMap.

Their subgraphs are library functions (see :mod:`gradreg_plugins.onnx.importer`) taking the
subgraph's inputs followed by the outer values the node passes as ``captured``; each is
compiled once into a gradreg plan, on first use, and called per branch or iteration.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gradreg import config, deadline
from gradreg.errors import ExecutionError, IterationLimitError, describe_node
from gradreg.runtime.functions import function_plan
from gradreg_plugins.onnx import family
from gradreg_plugins.onnx.nodes import input_layout

kernel = family.kernel


def _body(op, ctx, attr: str, repeated: bool = False) -> Callable[[list], tuple]:
    """The compiled function of subgraph attr ``attr``, compiled when first called (``repeated``:
    called once per iteration, see function_plan)."""
    name = op.get_attr(attr).name
    compiled: list = []

    def run(args: list) -> tuple:
        if not compiled:
            compiled.append(function_plan(ctx, op.graph.library, name, {}, op, repeated=repeated))
        return compiled[0](args)
    return run


def _split(op) -> tuple[list, int]:
    """(ONNX input layout, number of flat ONNX inputs): the values after those are the captures."""
    layout = input_layout(op)
    return layout, sum(1 for i in layout if i is not None)


def _result(values: list) -> Any:
    return values[0] if len(values) == 1 else tuple(values)


def _error(op, message: str) -> ExecutionError:
    return ExecutionError(f"{describe_node(op.name, op.type)}: {message}", op.name, op.type)


def _truth(value: Any, op, what: str) -> bool:
    if type(value) is np.bool_:     # what comparisons give: a loop's condition, each iteration
        return bool(value)
    array = np.asarray(value)
    if array.size != 1:
        raise _error(op, f"{what} must hold one value, got shape {list(array.shape)}")
    return bool(array.reshape(-1)[0])


@kernel("onnx::If")
def _if(op, ctx):
    then_branch, else_branch = _body(op, ctx, "then_branch"), _body(op, ctx, "else_branch")

    def compute(cond, *captured):
        branch = then_branch if _truth(cond, op, "the condition") else else_branch
        return _result(list(branch(list(captured))))
    return compute


def _stacked(values: list, t) -> np.ndarray:
    """A Loop scan output: the iterations' values stacked (an empty first axis if none ran)."""
    if values:
        return np.stack([np.asarray(v) for v in values])
    inner = t.shape.dims[1:] if t.shape.rank else ()
    dims = (0,) + tuple(d if d is not None else 0 for d in inner)
    return np.empty(dims, dtype=t.dtype.base_dtype.storage)


@kernel("onnx::Loop")
def _loop(op, ctx):
    body = _body(op, ctx, "body", repeated=True)
    layout, n_flat = _split(op)
    n_carried = len(op.get_attr("T_v_initial"))
    scan_outputs = op.outputs[n_carried:]
    limit = ctx.loop_iteration_limit or _NO_LIMIT

    def compute(*args):
        trip, cond = (None if i is None else args[i] for i in layout[:2])
        carried = [args[i] for i in layout[2:] if i is not None]
        captured = list(args[n_flat:])
        trips = _NO_LIMIT if trip is None else int(np.asarray(trip).reshape(-1)[0])
        keep = True if cond is None else _truth(cond, op, "the loop condition")
        scans: list[list] = [[] for _ in scan_outputs]
        clock = _Clock(ctx, op)
        i = 0
        while keep and i < trips:
            if i >= limit:
                raise IterationLimitError(f"{describe_node(op.name, op.type)}: more than {limit} iterations "
                                          f"(Session(loop_iteration_limit=...), "
                                          f"{config.how_to_raise('max_loop_iterations')})", op.name, op.type)
            clock.check(i)
            # The iteration number and condition as NumPy scalars, as plans pass 0-d values.
            outs = body([np.int64(i), np.bool_(keep), *carried, *captured])
            keep = _truth(outs[0], op, "the body's condition output")
            carried = outs[1:1 + n_carried]
            for values, v in zip(scans, outs[1 + n_carried:]):
                values.append(v)
            i += 1
        return _result([*carried, *(_stacked(v, t) for v, t in zip(scans, scan_outputs))])
    return compute


_NO_LIMIT = 1 << 63


class _Clock:
    """A loop's time limits (gradreg.deadline): its own budget and its run's deadline, from
    the loop's start; ``check`` raises once either has passed."""

    __slots__ = ("end", "ctx", "op")

    def __init__(self, ctx, op):
        self.end = deadline.loop_end(ctx.deadlines, ctx.loop_timeout)
        self.ctx, self.op = ctx, op

    def check(self, iterations: int) -> None:
        if deadline.clock() > self.end:
            ctx, op = self.ctx, self.op
            raise deadline.loop_error(ctx.deadlines, ctx.loop_timeout, describe_node(op.name, op.type), iterations,
                                      op.name, op.type)


def _scan_attrs(op, n_scan_in: int, n_scan_out: int) -> tuple[list, list, list, list]:
    def ints(name: str, n: int) -> list[int]:
        value = op.get_attr(name)
        return list(value) if value is not None else [0] * n
    return (ints("scan_input_axes", n_scan_in), ints("scan_input_directions", n_scan_in),
            ints("scan_output_axes", n_scan_out), ints("scan_output_directions", n_scan_out))


@kernel("onnx::Scan")
def _scan(op, ctx):
    body = _body(op, ctx, "body", repeated=True)
    _, n_flat = _split(op)
    n_scan_in = op.get_attr("num_scan_inputs")
    n_state = n_flat - n_scan_in
    n_scan_out = len(op.outputs) - n_state
    in_axes, in_dirs, out_axes, out_dirs = _scan_attrs(op, n_scan_in, n_scan_out)

    def compute(*args):
        states, xs, captured = list(args[:n_state]), args[n_state:n_flat], list(args[n_flat:])
        xs = [np.moveaxis(np.asarray(x), axis, 0) for x, axis in zip(xs, in_axes)]
        lengths = {x.shape[0] for x in xs}
        if len(lengths) != 1:
            raise _error(op, f"the scanned inputs have different lengths {sorted(lengths)}")
        length = lengths.pop()
        ys: list[list] = [[] for _ in range(n_scan_out)]
        clock = _Clock(ctx, op)
        for t in range(length):
            clock.check(t)
            elements = [x[length - 1 - t] if d else x[t] for x, d in zip(xs, in_dirs)]
            outs = body(states + elements + captured)
            states = list(outs[:n_state])
            for values, v in zip(ys, outs[n_state:]):
                values.append(np.asarray(v))
        scanned = []
        for values, axis, direction, t in zip(ys, out_axes, out_dirs, op.outputs[n_state:]):
            stacked = _stacked(values[::-1] if direction else values, t)
            scanned.append(np.moveaxis(stacked, 0, axis if axis >= 0 else axis + stacked.ndim))
        return _result(states + scanned)
    return compute


@kernel("onnx::SequenceMap")
def _sequence_map(op, ctx):
    body = _body(op, ctx, "body", repeated=True)
    _, n_flat = _split(op)
    n_out = len(op.outputs)

    def compute(*args):
        inputs, captured = args[:n_flat], list(args[n_flat:])
        length = len(inputs[0])
        for s in inputs[1:]:
            if isinstance(s, list) and len(s) != length:
                raise _error(op, f"the sequences have different lengths ({length} and {len(s)})")
        results: list[list] = [[] for _ in range(n_out)]
        clock = _Clock(ctx, op)
        for i in range(length):
            clock.check(i)
            outs = body([s[i] if isinstance(s, list) else s for s in inputs] + captured)
            for values, v in zip(results, outs):
                values.append(np.asarray(v))
        return _result(results)
    return compute
