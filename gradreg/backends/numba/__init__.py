"""The Numba backend: the plan compiler with the op families' numba kernels (NumPy's where
an op has none), chains of elementwise ops fused into compiled loops. Available when numba
is installed (a dependency of gradreg); numba itself is imported only when a kernel is built,
and kernels are built in the background when a plan is reused (jit; GRADREG_JIT=eager builds
them before a plan's first run), the NumPy kernels serving until then.

Its parts: description (what op families return for elementwise ops), plans (the plan
compiler it creates), grouping (which ops fuse), codegen (the loops' source), mathlib (the
scalar functions they call), kernels (the fused groups' run-time dispatch), jit (when kernels
are built), cache (generated modules and numba's code on disk)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradreg.backends.numba.description import numba_available
from gradreg.registry.extensions import Backend
from gradreg.registry.hookspecs import hookimpl
from gradreg.registry.kernels import KernelContext

if TYPE_CHECKING:
    from gradreg.runtime.plan import PlanCompiler

__all__ = ["BACKEND", "KERNEL_TABLES", "create_executor", "gradreg_backends"]

KERNEL_TABLES = ("numba", "numpy")


def create_executor(context: KernelContext, check_outputs: bool = False) -> PlanCompiler:
    # start-up: the registry lists this backend for every command; the plan compiler, fusion and
    # the thread pools (gradreg.backends.numba.plans) are imported when a plan is first built
    from gradreg.backends.numba import plans
    return plans.create_executor(context, check_outputs)


BACKEND = Backend("numba", create_executor, available=numba_available, priority=10,
                  kernel_tables=KERNEL_TABLES, summary="numba kernels; elementwise chains fused into compiled loops")


@hookimpl
def gradreg_backends() -> list[Backend]:
    return [BACKEND]
