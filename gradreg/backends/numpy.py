"""The NumPy backend: the plan compiler with the op families' NumPy kernels."""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradreg.backends import memory
from gradreg.registry.extensions import Backend
from gradreg.registry.hookspecs import hookimpl
from gradreg.registry.kernels import KernelContext

if TYPE_CHECKING:
    from gradreg.runtime.plan import PlanCompiler


def create_executor(context: KernelContext, check_outputs: bool = False) -> PlanCompiler:
    from gradreg.runtime import plan  # start-up: imported when a plan is first built (as the numba backend's)
    memory.retain_freed_memory()
    return plan.PlanCompiler(context, ("numpy",), fuse=None, check_outputs=check_outputs)


BACKEND = Backend("numpy", create_executor, priority=0, kernel_tables=("numpy",),
                  summary="NumPy kernels, one call per node")


@hookimpl
def gradreg_backends() -> list[Backend]:
    return [BACKEND]
