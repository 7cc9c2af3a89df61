"""Waiting without the GIL and without sleeping: the spinning half of gradreg's kernel threads
(gradreg.backends.threads). Compiled as native kernels (gradreg.backends.native), or with
numba where those are unavailable; imported only by a process that has compiled kernels.

A worker that sleeps between tasks costs each parallel call 40-200 us on the 2-vCPU machines
this project runs on (a futex wake-up, more once the idle vCPU has halted): more than the
kernels a CNN step splits take. Spinning for a while after each task, as TensorFlow's and
OpenBLAS's pools do, brings the hand-off to ~15 us. The spin runs in compiled code with the
GIL released, reading one slot of an int64 array with acquire loads (a plain load could be
hoisted out of the loop by the compiler); a ``pause`` instruction on x86 eases the spin on
the sibling hyperthread."""
from __future__ import annotations

import functools
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import ir

from gradreg.backends import native
from gradreg.backends.native import engine

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")


def _pause(builder: ir.IRBuilder) -> None:
    if _X86:
        fn = builder.module.declare_intrinsic("llvm.x86.sse2.pause", fnty=ir.FunctionType(ir.VoidType(), []))
        builder.call(fn, [])


def _native() -> tuple[Callable[..., bool], Callable[..., None]]:
    """The spin and the publish as native kernels (gradreg.backends.native.engine: LLVM
    compiles them in milliseconds, without numba)."""
    i64 = ir.IntType(64)
    module = ir.Module(name="spin")
    wait = ir.Function(module, ir.FunctionType(i64, [i64.as_pointer(), i64, i64, i64]), name="wait_change")
    state, index, old, spins = wait.args
    entry, loop, body, changed, done = (wait.append_basic_block(part)
                                        for part in ("entry", "loop", "body", "changed", "done"))
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    b.cbranch(b.icmp_signed("<", i, spins), body, done)
    b.position_at_end(body)
    value = b.load_atomic(b.gep(state, [index]), "acquire", 8)
    _pause(b)
    i.add_incoming(b.add(i, ir.Constant(i64, 1)), body)
    b.cbranch(b.icmp_signed("!=", value, old), changed, loop)
    b.position_at_end(changed)
    b.ret(ir.Constant(i64, 1))
    b.position_at_end(done)
    b.ret(ir.Constant(i64, 0))
    publish_fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64.as_pointer(), i64, i64]), name="publish")
    state, index, value = publish_fn.args
    b = ir.IRBuilder(publish_fn.append_basic_block("entry"))
    b.store_atomic(value, b.gep(state, [index]), "release", 8)
    b.ret_void()
    addresses = engine.compile_ir(str(module), ["wait_change", "publish"])
    native_wait = engine.function(addresses["wait_change"], "int64_t", ["char*", "int64_t", "int64_t", "int64_t"])
    native_publish = engine.function(addresses["publish"], "void", ["char*", "int64_t", "int64_t"])
    last: list[tuple[np.ndarray, int]] = [(np.zeros(0, np.int64), 0)]

    def address(state: np.ndarray) -> int:
        # a pool's state is one array for its life: its address is looked up once (2 us), then
        # remembered with it (one tuple, replaced whole: threads may call this at once)
        array, known = last[0]
        if array is state:
            return known
        if state.dtype != np.int64 or state.ndim != 1:
            raise TypeError(f"a spin's state is a 1-d int64 array, not {state.dtype} {state.ndim}-d")
        found = engine.data_address(state, "a spin's state")
        last[0] = (state, found)
        return found

    def wait_change(state: np.ndarray, index: int, old: int, spins: int) -> bool:
        """Whether ``state[index]`` differs from ``old`` within ``spins`` reads."""
        return bool(native_wait(address(state), index, old, spins))

    def publish(state: np.ndarray, index: int, value: int) -> None:
        """``state[index] = value``, seen by a spinning reader once it is written."""
        native_publish(address(state), index, value)
    return wait_change, publish


def _numba() -> tuple[Callable[..., bool], Callable[..., None]]:   # pragma: no cover (where LLVM cannot serve)
    """The same with numba, where native kernels are unavailable."""
    from numba import njit, types
    from numba.extending import intrinsic

    @intrinsic
    def load(typingctx: Any, array: Any, index: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            return builder.load_atomic(builder.gep(data, [args[1]]), "acquire", 8)
        return types.int64(array, index), codegen

    @intrinsic
    def store(typingctx: Any, array: Any, index: Any, value: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            builder.store_atomic(args[2], builder.gep(data, [args[1]]), "release", 8)
            return context.get_dummy_value()
        return types.void(array, index, value), codegen

    @intrinsic
    def pause(typingctx: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            _pause(builder)
            return context.get_dummy_value()
        return types.void(), codegen

    @njit(nogil=True)
    def wait_change(state: np.ndarray, index: int, old: int, spins: int) -> bool:
        for _ in range(spins):
            if load(state, index) != old:  # type: ignore[call-arg]  # an intrinsic: numba passes the typing context
                return True
            pause()
        return False

    @njit(nogil=True)
    def publish(state: np.ndarray, index: int, value: int) -> None:
        store(state, index, value)  # type: ignore[call-arg]
    probe = np.zeros(1, np.int64)
    wait_change(probe, 0, 0, 1)
    publish(probe, 0, 0)
    return wait_change, publish


@functools.cache
def _functions() -> tuple[Callable[..., bool], Callable[..., None]]:
    return _native() if native.available() else _numba()


def wait_change(state: np.ndarray, index: int, old: int, spins: int) -> bool:
    """Whether ``state[index]`` differs from ``old`` within ``spins`` reads (without the GIL)."""
    return _functions()[0](state, index, old, spins)


def publish(state: np.ndarray, index: int, value: int) -> None:
    """``state[index] = value``, seen by a spinning reader once it is written."""
    _functions()[1](state, index, value)


def compiled() -> tuple[Callable[..., bool], Callable[..., None]]:
    """The compiled spin and publish (compiled now, on the first call): what a pool calls."""
    return _functions()


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
