"""The executor interface: what a backend provides to run graphs.

A Session asks the registry for the backend it was given (``Session(backend="numba")``,
``GRADREG_BACKEND``, or the preferred available one), and the backend's
``create_executor(context, check_outputs)`` returns an :class:`Executor`. The Session
hands it (fetches, feeds) pairs and calls what it compiles; it knows nothing else about
how values are computed, so a backend that runs plans on another device, or sends them
to other machines, plugs in by registering a Backend (gradreg.registry.extensions) from
a plugin — the gradient code, the graph model and the Session stay as they are.

gradreg's own backends (gradreg.backends) share one executor, the plan compiler
(gradreg.runtime.plan.PlanCompiler), with different kernel tables and fusers.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from gradreg.model.graph import Operation, Tensor
from gradreg.registry.kernels import KernelContext


class Executor(Protocol):
    """Compiles fetches and feeds into a function from feed values to fetch values."""

    def compile(self, fetches: Sequence[Tensor | Operation], feeds: Sequence[Tensor]) -> Callable[[Sequence[Any]], Any]:
        """``run(feed_values)`` returning one value per fetch (None for an Operation), in order.
        Errors are gradreg's own (ExecutionError naming the node, ...)."""


class FusedKernel(Protocol):
    """Several ops run as one kernel (what a fuser returns among the plan's operations)."""

    name: str
    type: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    kernel: Callable[..., Any]


class Fuser(Protocol):
    """Groups the elementwise ops of a plan: returns ``order``'s operations with some of them
    replaced by FusedKernels, in an order respecting every edge. ``keep``: tensors needed
    outside ``order``; ops in ``exclude`` stay on their own."""

    def __call__(self, order: Sequence[Operation], fed: set[Tensor], keep: set[Tensor], ctx: KernelContext,
                 exclude: Iterable[Operation] = ()) -> list[Any]:
        ...


class InPlace:
    """The runner of a plan call without side tasks (gradreg.runtime.plan.SideRunner): every
    side item runs where it is."""

    @staticmethod
    def submit(fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    @staticmethod
    def take(value: Any) -> Any:
        return value

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        pass
