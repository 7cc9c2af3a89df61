"""The kernel context of a Session: the element limit, the loop limits, the deadlines of the
runs going on, seeded random generators, and the session's resources (variables, stacks,
compiled library functions) that live between runs."""
from __future__ import annotations

from typing import Any

from gradreg.file_access import FileAccess
from gradreg.registry.kernels import BasicKernelContext


class SessionContext(BasicKernelContext):
    """Per-session services for kernels (see gradreg.registry.kernels.KernelContext)."""

    def __init__(self, graph: Any = None, max_elements: int | None = None, backend: str = "numpy",
                 resources: dict[str, Any] | None = None, session: Any = None, loop_iteration_limit: int | None = None,
                 files: FileAccess | None = None, loop_timeout: float | None = None):
        super().__init__(graph, max_elements, backend, loop_iteration_limit, files, loop_timeout)
        self.resources = {} if resources is None else resources
        self.session = session
        self.executor: Any = None      # the session's executor (gradreg.runtime.executor), set by the Session
        # Library functions compiled for this session (gradreg.runtime.functions), by function
        # and call attrs, and the chain of those being compiled (to catch endless recursion).
        self.function_plans: dict[tuple[Any, ...], Any] = {}
        self.compiling_functions: list[str] = []
