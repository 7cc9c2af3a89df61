"""gradreg's native kernels: loops written as traced Python (dsl), compiled by LLVM (engine).

numba compiles a kernel in Python, holding the GIL for most of half a second; these compile
in LLVM's C++ (llvmlite, the library numba itself compiles with) in tens of milliseconds,
with the GIL released, so a background build does not stall the caller's calls. The numba
backend uses them where a kernel has a native form (fused elementwise groups of the common
ops, the nn family's loops) and numba for the rest.
"""
from __future__ import annotations

import functools
import os
from typing import Any

from gradreg.backends.native import engine


class Unsupported(Exception):
    """What a kernel or an expression asked for has no native form (numba's serves)."""


def native_loop(build: Any, *args: Any) -> Any:
    """``build(*args)`` (a native kernel's builder), or None where native kernels are not
    available here, ``build`` is None (its module could not be imported) or the kernel has
    no native form (:class:`Unsupported`): the caller builds numba's loop then."""
    if build is None or not available():
        return None
    try:
        return build(*args)
    except Unsupported:
        return None


def available() -> bool:
    """Whether native kernels are built here: llvmlite installed, LLVM set up for this
    machine, and not switched off (``GRADREG_NATIVE=0``: numba builds every kernel, as before)."""
    return os.environ.get("GRADREG_NATIVE", "").strip() != "0" and _works()


@functools.cache
def _works() -> bool:
    return engine.available()
