"""Waiting without the GIL and without sleeping: the spinning half of gradreg's kernel threads
(gradreg.backends.threads). Needs numba; imported only by a process that already has it.

A worker that sleeps between tasks costs each parallel call 40-200 us on the 2-vCPU machines
this project runs on (a futex wake-up, more once the idle vCPU has halted): more than the
kernels a CNN step splits take. Spinning for a while after each task, as TensorFlow's and
OpenBLAS's pools do, brings the hand-off to ~15 us. The spin runs in compiled code with the
GIL released, reading one slot of an int64 array with acquire loads (a plain load could be
hoisted out of the loop by the compiler); a ``pause`` instruction on x86 eases the spin on
the sibling hyperthread."""
from __future__ import annotations

import platform
import time
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")


@intrinsic
def _load(typingctx: Any, array: Any, index: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        return builder.load_atomic(builder.gep(data, [args[1]]), "acquire", 8)
    return types.int64(array, index), codegen


@intrinsic
def _store(typingctx: Any, array: Any, index: Any, value: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        builder.store_atomic(args[2], builder.gep(data, [args[1]]), "release", 8)
        return context.get_dummy_value()
    return types.void(array, index, value), codegen


@intrinsic
def _pause(typingctx: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        if _X86:
            fn = builder.module.declare_intrinsic("llvm.x86.sse2.pause", fnty=ir.FunctionType(ir.VoidType(), []))
            builder.call(fn, [])
        return context.get_dummy_value()
    return types.void(), codegen


@njit(nogil=True, cache=True)
def wait_change(state: np.ndarray, index: int, old: int, spins: int) -> bool:   # pragma: no cover (compiled)
    """Whether ``state[index]`` differs from ``old`` within ``spins`` reads."""
    for _ in range(spins):
        if _load(state, index) != old:  # type: ignore[call-arg]  # an intrinsic: numba passes the typing context
            return True
        _pause()
    return False


@njit(nogil=True, cache=True)
def publish(state: np.ndarray, index: int, value: int) -> None:   # pragma: no cover (compiled)
    """``state[index] = value``, seen by a spinning reader once it is written."""
    _store(state, index, value)  # type: ignore[call-arg]


def reads_per_second() -> float:
    """How many reads :func:`wait_change` makes a second here (measured once; a spin's length
    is given in reads)."""
    state = np.zeros(1, np.int64)
    wait_change(state, 0, 0, 1)
    spins = 20_000
    start = time.perf_counter()
    wait_change(state, 0, 0, spins)
    elapsed = max(time.perf_counter() - start, 1e-6)
    return spins / elapsed
