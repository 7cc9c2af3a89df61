"""The Numba backend: the plan compiler with the op families' numba kernels (NumPy's where
an op has none), chains of elementwise ops fused into compiled loops. Available when numba
is installed (a dependency of gradreg); numba itself is imported only when a kernel is built,
and kernels are built in the background when a plan is reused (jit; GRADREG_JIT=eager builds
them before a plan's first run), the NumPy kernels serving until then.

Its parts: description (what op families return for elementwise ops), grouping (which ops
fuse), codegen (the loops' source), mathlib (the scalar functions they call), kernels (the
fused groups' run-time dispatch), jit (when kernels are built), cache (generated modules and
numba's code on disk)."""
from __future__ import annotations

from gradreg.backends import memory, threads
from gradreg.backends.numba import jit
from gradreg.backends.numba.description import numba_available
from gradreg.backends.numba.grouping import fuse
from gradreg.backends.numba.jit import wait_for_kernels
from gradreg.registry.extensions import Backend
from gradreg.registry.hookspecs import hookimpl
from gradreg.registry.kernels import KernelContext
from gradreg.runtime.plan import PlanCompiler

__all__ = ["BACKEND", "KERNEL_TABLES", "create_executor", "gradreg_backends", "wait_for_kernels"]

KERNEL_TABLES = ("numba", "numpy")


def create_executor(context: KernelContext, check_outputs: bool = False) -> PlanCompiler:
    # Background: numba kernels are built when a plan is reused, NumPy's serving meanwhile (jit).
    tier_up = jit.tier_up if jit.mode() == "background" else None
    memory.retain_freed_memory()
    return PlanCompiler(context, KERNEL_TABLES, fuse=fuse, check_outputs=check_outputs, tier_up=tier_up,
                        side_tasks=threads.SideTasks)


BACKEND = Backend("numba", create_executor, available=numba_available, priority=10,
                  kernel_tables=KERNEL_TABLES, summary="numba kernels; elementwise chains fused into compiled loops")


@hookimpl
def gradreg_backends() -> list[Backend]:
    return [BACKEND]
