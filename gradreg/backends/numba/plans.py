"""The numba backend's plan compiler: the op families' numba kernels (NumPy's where an op has
none), fused elementwise groups, numba kernels built in the background, and each plan's
choice among side tasks on the kernel thread, kernels split over the threads, or one thread.
Imported when the backend builds its first plan (gradreg.backends.numba)."""
from __future__ import annotations

from gradreg.backends import call_modes, memory
from gradreg.backends.native import allocator
from gradreg.backends.numba import KERNEL_TABLES, jit
from gradreg.backends.numba.grouping import fuse
from gradreg.registry.kernels import KernelContext
from gradreg.runtime.plan import CallModes, PlanCompiler


def create_executor(context: KernelContext, check_outputs: bool = False) -> PlanCompiler:
    # Background: numba kernels are built when a plan is reused, NumPy's serving meanwhile (jit);
    # eager: before its first call runs.
    tier_up = jit.tier_up if jit.mode() == "background" else jit.tier_up_eager
    memory.retain_freed_memory()
    return PlanCompiler(context, KERNEL_TABLES, fuse=fuse, check_outputs=check_outputs, tier_up=tier_up,
                        modes=MODES)


# A call may run its side items on the kernel thread, or keep to one thread (Plan._runner).
# Its arrays come from the plan allocator once a plan's first call has made it (jit.tier_up).
MODES = CallModes(side=call_modes.SideTasks, single=call_modes.SingleThreaded, memory=allocator.using)
