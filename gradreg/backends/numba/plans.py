"""The numba backend's plan compiler: the op families' numba kernels (NumPy's where an op has
none), fused elementwise groups, numba kernels built in the background, side tasks on the
kernel thread. Imported when the backend builds its first plan (gradreg.backends.numba)."""
from __future__ import annotations

from gradreg.backends import memory, threads
from gradreg.backends.numba import KERNEL_TABLES, jit
from gradreg.backends.numba.grouping import fuse
from gradreg.registry.kernels import KernelContext
from gradreg.runtime.plan import PlanCompiler


def create_executor(context: KernelContext, check_outputs: bool = False) -> PlanCompiler:
    # Background: numba kernels are built when a plan is reused, NumPy's serving meanwhile (jit).
    tier_up = jit.tier_up if jit.mode() == "background" else None
    memory.retain_freed_memory()
    return PlanCompiler(context, KERNEL_TABLES, fuse=fuse, check_outputs=check_outputs, tier_up=tier_up,
                        side_tasks=threads.SideTasks)
