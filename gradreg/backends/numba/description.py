"""What a numba kernel factory returns for an elementwise op: an :class:`Elementwise`
description (see :func:`elementwise`), a scalar expression template such as
``"{1} * ({=1} - {0} * {0})"`` (TanhGrad: ``{i}`` is input i, ``{=c}`` the constant c in the
node's float type, ``{tanh}`` a function of the math library, gradreg.backends.numba.codegen
.LIBRARY). Calling the description runs the op's NumPy kernel, so an elementwise op that is
not fused runs as before. Op families import this module to describe their ops; it does not
import numba.
"""
from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradreg.model import dtypes
from gradreg.model.graph import Operation
from gradreg.registry import get_registry
from gradreg.registry.kernels import KernelContext

# The tensor types a fused loop handles.
FUSIBLE_DTYPES = (dtypes.float32, dtypes.float64, dtypes.bool_)

# A lone elementwise op is compiled only when its NumPy kernel makes at least this many
# passes over the data (Sigmoid, Softplus, ...); one ufunc call gains nothing from numba.
SINGLE_OP_MIN_COST = 3

@functools.cache
def numba_available() -> bool:
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):
        return False


def accept_any(flags: tuple[bool, ...]) -> bool:
    return True


def accept_arrays(flags: tuple[bool, ...]) -> bool:
    """No scalar inputs; a row broadcasts (BiasAdd: a scalar bias is an error)."""
    return not any(flags)


# The ``accepts`` of ops that broadcast a row input (a bias) over the others' leading dims.
ROW_BROADCASTING = (accept_any, accept_arrays)


def same_shapes(flags: tuple[bool, ...]) -> bool:
    """All inputs scalars or all of one shape (ops that do not broadcast)."""
    return all(flags) or not any(flags)


@dataclass(frozen=True)
class Elementwise:
    """What a numba kernel factory returns for an elementwise op.

    ``expr`` is the scalar expression (module docstring); ``fallback`` the op's NumPy
    kernel, run when the op is not fused (calling the description runs it); ``dtype`` the
    float type of ``{=c}`` and named constants; ``consts`` named constants (attrs);
    ``accepts(flags)`` says whether the NumPy kernel would broadcast inputs whose
    scalar-ness is ``flags`` (else the group falls back and the NumPy kernel decides);
    ``cost`` is the number of passes the NumPy kernel makes over the data.
    """
    expr: str
    fallback: Callable[..., Any]
    dtype: np.dtype
    consts: tuple[tuple[str, float], ...] = ()
    accepts: Callable[[tuple[bool, ...]], bool] = accept_any
    cost: int = 1

    def __call__(self, *args: Any) -> Any:
        return self.fallback(*args)

    @property
    def broadcasts_rows(self) -> bool:
        """Whether a row input (a value repeated over the output's leading dims) may be fused."""
        return self.accepts in ROW_BROADCASTING

    @property
    def unfused(self) -> Callable[..., Any]:
        """The kernel a plan binds when the op runs on its own."""
        return self.fallback


def elementwise(op: Operation, ctx: KernelContext, expr: str, *, cost: int = 1,
                accepts: Callable[[tuple[bool, ...]], bool] = accept_any, dtype: Any = None,
                unfused: Any = None, **consts: float) -> Elementwise | None:
    """The description of ``op`` (for a numba kernel factory), or None — the NumPy kernel
    then runs — when a type is not fusible or the NumPy kernel is not a computation.
    ``unfused``: the kernel that runs the op when it is not fused (default: its NumPy
    kernel; a Tiered one is built like any other)."""
    if len(op.outputs) != 1 or not op.inputs:
        return None
    # By identity: an unknown op's output has dtype None, which DType equality would not refuse.
    if not all(any(t.dtype is d for d in FUSIBLE_DTYPES) for t in (*op.inputs, *op.outputs)):
        return None
    factory = get_registry().kernel_factory(op.type, "numpy")
    fallback = unfused if unfused is not None else factory(op, ctx) if factory is not None else None
    if not callable(fallback):   # IDENTITY, Constant, NOOP: nothing to fuse
        return None
    if dtype is None:
        floats = [t.dtype for t in (*op.inputs, *op.outputs) if t.dtype is not dtypes.bool_]
        dtype = floats[0] if floats else dtypes.bool_
    return Elementwise(expr, fallback, dtype.storage, tuple(sorted(consts.items())), accepts, cost)
