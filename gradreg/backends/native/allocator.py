"""A NumPy allocator that keeps a plan's freed arrays for its next call, set only during gradreg's calls.

A plan allocates the same large arrays on every call. glibc's malloc serves a block of 128 KiB
or more with a fresh mmap and unmaps it when freed (and trims its heap's freed top), so every
call takes its page faults again and the kernel zero-fills every page: a thousand faults a
MobileNetV2-64 step, 10-30% of a small CNN's step. Raising malloc's thresholds
(gradreg.backends.memory.retain_freed_memory) removes them, but for the whole process and for
good; this allocator removes them for gradreg's arrays only.

It is a NumPy memory handler (NEP 49: ``PyDataMem_SetHandler``), in machine code compiled by
LLVM (gradreg.backends.native.engine). A freed block of ``MIN_BYTES`` to ``MAX_BLOCK`` bytes is
kept in one of ``SLOTS`` slots, up to ``CAP`` bytes in all, the oldest given back to malloc to
make room; an allocation of the same size takes the one freed last. Each block carries its size in a
header before the data (so a free does not rely on the size NumPy passes); blocks of 4 MiB or
more are advised to use huge pages, as NumPy's own handler does (unless
``NUMPY_MADVISE_HUGEPAGE=0``). A spin lock guards the slots
(NumPy allocates with the GIL held; the lock costs nothing then).

The handler is NumPy's per-context setting (a context variable): :func:`using` sets it for the
duration of a call and puts the caller's back after; arrays allocated meanwhile keep the
handler and return their blocks to it when freed, whenever that is. Nothing else in the
process changes.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import threading
from collections.abc import Iterator
from typing import Any

from gradreg.backends.native import engine

NAME = b"gradreg_plan_allocator"
SLOTS = 256
MIN_BYTES = 32 << 10
MAX_BLOCK = 16 << 20
# Kept blocks are memory the process holds beyond its arrays: at 512 MiB, ResNet50's step at
# batch 32 (a 2.7 GB live set) peaked at 1.23x its live set instead of 1.11x, reusing few of
# them; the small CNNs keep 24-42 MiB, so 64 MiB serves them.
CAP = 64 << 20
HEADER = 64             # bytes before the data: the block's size (keeps malloc's 16-byte alignment)
MAX_REQUEST = 1 << 62   # larger requests fail (null: NumPy's MemoryError) before the header overflows
HUGE_BYTES = 4 << 20    # NumPy's own handler advises huge pages from this size on
_MADV_HUGEPAGE = 14
_PAGE = 4096


class _Allocator(ctypes.Structure):
    _fields_ = [("ctx", ctypes.c_void_p), ("malloc", ctypes.c_void_p), ("calloc", ctypes.c_void_p),
                ("realloc", ctypes.c_void_p), ("free", ctypes.c_void_p)]


class _Handler(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 127), ("version", ctypes.c_uint8), ("allocator", _Allocator)]


def _globals(m: Any, t: Any, *names: str, linkage: str = "internal") -> list[Any]:
    """Zero-initialized globals of IR type ``t`` in the module ``m``."""
    from llvmlite import ir
    made = []
    for name in names:
        g = ir.GlobalVariable(m, t, name=name)
        g.initializer = ir.Constant(t, None)
        g.linkage = linkage
        made.append(g)
    return made


def _blocks(f: Any, *names: str) -> list[Any]:
    """New basic blocks of the IR function ``f``."""
    return [f.append_basic_block(n) for n in names]


def _module() -> str:
    """The IR of the four functions (malloc, calloc, realloc, free with NumPy's signatures) and
    their state: the slots (block, size, age), the bytes kept, a clock, a lock and counters."""
    from llvmlite import ir  # (llvmlite is imported once the allocator is made, not before)
    _I8, _I32, _I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    _PTR = _I8.as_pointer()
    m = ir.Module(name="gradreg_allocator")
    void = ir.VoidType()
    slots_t = ir.ArrayType(_I64, SLOTS)

    blocks, sizes, ages = _globals(m, slots_t, "blocks", "sizes", "ages")
    clock, lock = _globals(m, _I64, "clock", "lock")
    # the counters and the limit, read and set from Python (counters, set_limit)
    hits, misses, kept, limit = _globals(m, _I64, "stat_hits", "stat_misses", "stat_kept", "stat_limit",
                                         linkage="")
    limit.initializer = ir.Constant(_I64, CAP)

    c_malloc = ir.Function(m, ir.FunctionType(_PTR, [_I64]), name="malloc")
    c_calloc = ir.Function(m, ir.FunctionType(_PTR, [_I64, _I64]), name="calloc")
    c_realloc = ir.Function(m, ir.FunctionType(_PTR, [_PTR, _I64]), name="realloc")
    c_free = ir.Function(m, ir.FunctionType(void, [_PTR]), name="free")
    c_madvise = ir.Function(m, ir.FunctionType(_I32, [_PTR, _I64, _I32]), name="madvise")
    memset = m.declare_intrinsic("llvm.memset", [_PTR, _I64])
    huge = platform.system() == "Linux" and os.environ.get("NUMPY_MADVISE_HUGEPAGE", "").strip() != "0"

    def const(v: int) -> ir.Constant:
        return ir.Constant(_I64, v)

    def slot(b: ir.IRBuilder, array: ir.GlobalVariable, i: ir.Value) -> ir.Value:
        return b.gep(array, [const(0), i], inbounds=True)

    def acquire(b: ir.IRBuilder, f: ir.Function) -> None:
        spin, got = f.append_basic_block("spin"), f.append_basic_block("locked")
        b.branch(spin)
        b.position_at_end(spin)
        pair = b.cmpxchg(lock, const(0), const(1), "acquire", "monotonic")
        b.cbranch(b.extract_value(pair, 1), got, spin)
        b.position_at_end(got)

    def release(b: ir.IRBuilder) -> None:
        b.store_atomic(const(0), lock, "release", 8)

    def header(b: ir.IRBuilder, data: ir.Value) -> ir.Value:
        return b.gep(data, [const(-HEADER)])

    def data_of(b: ir.IRBuilder, block: ir.Value, size: ir.Value) -> ir.Value:
        b.store(size, b.bitcast(block, _I64.as_pointer()))
        return b.gep(block, [const(HEADER)])

    def advise(b: ir.IRBuilder, f: ir.Function, data: ir.Value, size: ir.Value) -> None:
        if not huge:
            return
        yes, done = f.append_basic_block("advise"), f.append_basic_block("advised")
        b.cbranch(b.icmp_unsigned(">=", size, const(HUGE_BYTES)), yes, done)
        b.position_at_end(yes)
        start = b.and_(b.add(b.ptrtoint(data, _I64), const(_PAGE - 1)), const(-_PAGE))
        end = b.and_(b.add(b.ptrtoint(data, _I64), size), const(-_PAGE))
        b.call(c_madvise, [b.inttoptr(start, _PTR), b.sub(end, start), ir.Constant(_I32, _MADV_HUGEPAGE)])
        b.branch(done)
        b.position_at_end(done)

    # take(size): the most recently kept block of exactly ``size`` bytes (its data), or null:
    # the last freed is the likeliest still in the caches, as malloc's own free lists give it
    take = ir.Function(m, ir.FunctionType(_PTR, [_I64]), name="take")
    take.linkage = "internal"
    (size,) = take.args
    entry, look, loop, check, done, found, miss, out = _blocks(
        take, "entry", "look", "loop", "check", "done", "found", "miss", "out")
    b = ir.IRBuilder(entry)
    in_range = b.and_(b.icmp_unsigned(">=", size, const(MIN_BYTES)), b.icmp_unsigned("<=", size, const(MAX_BLOCK)))
    b.cbranch(in_range, look, out)
    b.position_at_end(look)
    acquire(b, take)
    locked = b.block
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(_I64)
    best = b.phi(_I64)          # the slot found so far (-1: none)
    best_age = b.phi(_I64)
    i.add_incoming(const(0), locked)
    best.add_incoming(const(-1), locked)
    best_age.add_incoming(const(0), locked)
    b.cbranch(b.icmp_unsigned("<", i, const(SLOTS)), check, done)
    b.position_at_end(check)
    age = b.load(slot(b, ages, i))
    better = b.and_(b.icmp_unsigned("==", b.load(slot(b, sizes, i)), size), b.icmp_unsigned(">=", age, best_age))
    i.add_incoming(b.add(i, const(1)), check)
    best.add_incoming(b.select(better, i, best), check)
    best_age.add_incoming(b.select(better, age, best_age), check)
    b.branch(loop)
    b.position_at_end(done)
    b.cbranch(b.icmp_signed(">=", best, const(0)), found, miss)
    b.position_at_end(found)
    block = b.inttoptr(b.load(slot(b, blocks, best)), _PTR)
    b.store(const(0), slot(b, sizes, best))
    b.store(const(0), slot(b, blocks, best))
    b.store(b.sub(b.load(kept), size), kept)
    b.store(b.add(b.load(hits), const(1)), hits)
    release(b)
    b.ret(b.gep(block, [const(HEADER)]))
    b.position_at_end(miss)
    b.store(b.add(b.load(misses), const(1)), misses)
    release(b)
    b.branch(out)
    b.position_at_end(out)
    b.ret(ir.Constant(_PTR, None))

    def refuse_huge(f: ir.Function, b: ir.IRBuilder, size: ir.Value) -> None:
        """Return null (NumPy's MemoryError) for a size the header would overflow."""
        huge_size, sane = f.append_basic_block("huge_size"), f.append_basic_block("sane")
        b.cbranch(b.icmp_unsigned(">", size, const(MAX_REQUEST)), huge_size, sane)
        b.position_at_end(huge_size)
        b.ret(ir.Constant(_PTR, None))
        b.position_at_end(sane)

    def serve(f: ir.Function, b: ir.IRBuilder, size: ir.Value, zeroed: bool) -> None:
        """Return a kept block of ``size`` bytes (cleared if ``zeroed``), else a new one."""
        refuse_huge(f, b, size)
        kept_data = b.call(take, [size])
        fresh, reuse = f.append_basic_block("fresh"), f.append_basic_block("reuse")
        b.cbranch(b.icmp_unsigned("!=", kept_data, ir.Constant(_PTR, None)), reuse, fresh)
        b.position_at_end(reuse)
        if zeroed:
            b.call(memset, [kept_data, ir.Constant(_I8, 0), size, ir.Constant(ir.IntType(1), 0)])
        b.ret(kept_data)
        b.position_at_end(fresh)
        total = b.add(size, const(HEADER))
        block = b.call(c_calloc, [const(1), total]) if zeroed else b.call(c_malloc, [total])
        failed, ok = f.append_basic_block("failed"), f.append_basic_block("ok")
        b.cbranch(b.icmp_unsigned("==", block, ir.Constant(_PTR, None)), failed, ok)
        b.position_at_end(failed)
        b.ret(ir.Constant(_PTR, None))
        b.position_at_end(ok)
        data = data_of(b, block, size)
        advise(b, f, data, size)
        b.ret(data)

    # gr_malloc(ctx, size)
    f = ir.Function(m, ir.FunctionType(_PTR, [_PTR, _I64]), name="gr_malloc")
    serve(f, ir.IRBuilder(f.append_basic_block("entry")), f.args[1], zeroed=False)

    # gr_calloc(ctx, nelem, elsize)
    f = ir.Function(m, ir.FunctionType(_PTR, [_PTR, _I64, _I64]), name="gr_calloc")
    _, nelem, elsize = f.args
    b = ir.IRBuilder(f.append_basic_block("entry"))
    umul = ir.Function(m, ir.FunctionType(ir.LiteralStructType([_I64, ir.IntType(1)]), [_I64, _I64]),
                       name="llvm.umul.with.overflow.i64")
    product = b.call(umul, [nelem, elsize])
    overflow, fits = f.append_basic_block("overflow"), f.append_basic_block("fits")
    b.cbranch(b.extract_value(product, 1), overflow, fits)
    b.position_at_end(overflow)
    b.ret(ir.Constant(_PTR, None))
    b.position_at_end(fits)
    serve(f, b, b.extract_value(product, 0), zeroed=True)

    # gr_realloc(ctx, ptr, new_size)
    f = ir.Function(m, ir.FunctionType(_PTR, [_PTR, _PTR, _I64]), name="gr_realloc")
    _, ptr, size = f.args
    b = ir.IRBuilder(f.append_basic_block("entry"))
    refuse_huge(f, b, size)
    null, some = f.append_basic_block("null"), f.append_basic_block("some")
    b.cbranch(b.icmp_unsigned("==", ptr, ir.Constant(_PTR, None)), null, some)
    b.position_at_end(null)
    block = b.call(c_malloc, [b.add(size, const(HEADER))])
    b.ret(b.select(b.icmp_unsigned("==", block, ir.Constant(_PTR, None)), ir.Constant(_PTR, None),
                   data_of(b, block, size)))
    b.position_at_end(some)
    block = b.call(c_realloc, [header(b, ptr), b.add(size, const(HEADER))])
    failed, ok = f.append_basic_block("failed"), f.append_basic_block("ok")
    b.cbranch(b.icmp_unsigned("==", block, ir.Constant(_PTR, None)), failed, ok)
    b.position_at_end(failed)
    b.ret(ir.Constant(_PTR, None))
    b.position_at_end(ok)
    b.ret(data_of(b, block, size))

    # gr_free(ctx, ptr, size): NumPy's size is not used (the header has the block's own)
    f = ir.Function(m, ir.FunctionType(void, [_PTR, _PTR, _I64]), name="gr_free")
    _, ptr, _ = f.args
    entry = f.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    null, some = f.append_basic_block("null"), f.append_basic_block("some")
    b.cbranch(b.icmp_unsigned("==", ptr, ir.Constant(_PTR, None)), null, some)
    b.position_at_end(null)
    b.ret_void()
    b.position_at_end(some)
    block = header(b, ptr)
    size = b.load(b.bitcast(block, _I64.as_pointer()))
    give_back = f.append_basic_block("give_back")
    keep = f.append_basic_block("keep")
    b.cbranch(b.and_(b.icmp_unsigned(">=", size, const(MIN_BYTES)), b.icmp_unsigned("<=", size, const(MAX_BLOCK))),
              keep, give_back)
    b.position_at_end(give_back)
    b.call(c_free, [block])
    b.ret_void()
    # keep: under the lock, room made (the oldest blocks freed) until ``size`` fits, then the
    # block put in an empty slot
    b.position_at_end(keep)
    acquire(b, f)
    locked = b.block
    scan, body, chosen = _blocks(f, "scan", "body", "chosen")
    b.branch(scan)
    # one pass over the slots: the first empty one, and the oldest full one
    b.position_at_end(scan)
    j = b.phi(_I64)
    empty = b.phi(_I64)
    oldest = b.phi(_I64)
    oldest_age = b.phi(_I64)
    j.add_incoming(const(0), locked)
    empty.add_incoming(const(-1), locked)
    oldest.add_incoming(const(-1), locked)
    oldest_age.add_incoming(const(-1), locked)     # (unsigned: the largest)
    b.cbranch(b.icmp_unsigned("<", j, const(SLOTS)), body, chosen)
    b.position_at_end(body)
    s_size = b.load(slot(b, sizes, j))
    s_age = b.load(slot(b, ages, j))
    is_empty = b.icmp_unsigned("==", s_size, const(0))
    first_empty = b.and_(is_empty, b.icmp_signed("<", empty, const(0)))
    older = b.and_(b.not_(is_empty), b.icmp_unsigned("<", s_age, oldest_age))
    j.add_incoming(b.add(j, const(1)), body)
    empty.add_incoming(b.select(first_empty, j, empty), body)
    oldest.add_incoming(b.select(older, j, oldest), body)
    oldest_age.add_incoming(b.select(older, s_age, oldest_age), body)
    b.branch(scan)
    b.position_at_end(chosen)
    total = b.add(b.load(kept), size)
    fits = b.and_(b.icmp_unsigned("<=", total, b.load(limit)), b.icmp_signed(">=", empty, const(0)))
    store_it, evict = f.append_basic_block("store"), f.append_basic_block("evict")
    b.cbranch(fits, store_it, evict)
    # no room: the oldest block goes back to malloc, then scan again (or, with none kept, this one goes)
    b.position_at_end(evict)
    nothing, drop = f.append_basic_block("nothing_kept"), f.append_basic_block("drop_oldest")
    b.cbranch(b.icmp_signed("<", oldest, const(0)), nothing, drop)
    b.position_at_end(nothing)
    release(b)
    b.call(c_free, [block])
    b.ret_void()
    b.position_at_end(drop)
    old_block = b.inttoptr(b.load(slot(b, blocks, oldest)), _PTR)
    b.store(b.sub(b.load(kept), b.load(slot(b, sizes, oldest))), kept)
    b.store(const(0), slot(b, sizes, oldest))
    b.store(const(0), slot(b, blocks, oldest))
    b.call(c_free, [old_block])
    b.branch(scan)
    j.add_incoming(const(0), drop)
    empty.add_incoming(const(-1), drop)
    oldest.add_incoming(const(-1), drop)
    oldest_age.add_incoming(const(-1), drop)
    b.position_at_end(store_it)
    now = b.add(b.load(clock), const(1))
    b.store(now, clock)
    b.store(b.ptrtoint(block, _I64), slot(b, blocks, empty))
    b.store(size, slot(b, sizes, empty))
    b.store(now, slot(b, ages, empty))
    b.store(total, kept)
    release(b)
    b.ret_void()
    return str(m)


def _make() -> tuple[Any, dict[str, int]] | None:
    """The capsule NumPy takes as a memory handler, and the counters' addresses; None where it
    cannot be made (no native compiler, a NumPy without NEP 49's handlers)."""
    if not engine.available() or _set_handler() is None:
        return None
    names = ["gr_malloc", "gr_calloc", "gr_realloc", "gr_free"]
    addresses = engine.compile_ir(_module(), names, ("stat_hits", "stat_misses", "stat_kept", "stat_limit"))
    handler = _Handler(NAME, 1, _Allocator(None, *(addresses[n] for n in names)))
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new(ctypes.addressof(handler), b"mem_handler", None)
    _keep.append(handler)       # lives as long as the process: arrays hold the capsule, not the struct
    return capsule, {n: addresses[n] for n in ("stat_hits", "stat_misses", "stat_kept", "stat_limit")}


_made: list[tuple[Any, dict[str, int]] | None] = []      # [] until prepare() ran; then [made or None]
_lock = threading.Lock()


def prepare() -> bool:
    """Compile the allocator (or load it from the disk cache) now, once: True when it is
    ready. Off with ``GRADREG_MALLOC=default`` (NumPy's allocator throughout)."""
    if not _made:
        with _lock:
            if not _made:
                off = os.environ.get("GRADREG_MALLOC", "").strip().lower() == "default"
                _made.append(None if off else _make())
    return _made[0] is not None


_keep: list[Any] = []


@functools.cache
def _set_handler() -> Any:
    """NumPy's ``PyDataMem_SetHandler`` (its C API table's entry 304, NumPy >= 1.22), or None."""
    import importlib
    umath: Any = None
    for name in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):     # NumPy 2, 1
        try:
            umath = importlib.import_module(name)
            break
        except ImportError:
            continue
    if umath is None or not hasattr(umath, "get_handler_name"):
        return None     # pragma: no cover (NumPy < 1.22)
    pointer = ctypes.pythonapi.PyCapsule_GetPointer
    pointer.restype = ctypes.c_void_p
    pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    table = pointer(umath._ARRAY_API, None)
    entry = ctypes.c_void_p.from_address(table + 304 * ctypes.sizeof(ctypes.c_void_p)).value
    if not entry:
        return None     # pragma: no cover
    return ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(entry)


def ready() -> bool:
    """Whether :func:`prepare` has made the allocator (the calls use it from then on)."""
    return bool(_made) and _made[0] is not None


@contextlib.contextmanager
def using() -> Iterator[None]:
    """NumPy allocates with this allocator in the ``with`` block (in this thread's context) if
    :func:`prepare` has made it, and as before after the block."""
    made = _made[0] if _made else None
    if made is None:
        yield
        return
    set_handler = _set_handler()
    previous = set_handler(made[0])
    try:
        yield
    finally:
        set_handler(previous)


def adopt() -> bool:
    """Set the allocator for good in this thread's context, if :func:`prepare` has made it: for
    gradreg's own kernel threads (gradreg.backends.workers), whose work is always a call's.
    True when it is set."""
    made = _made[0] if _made else None
    if made is None:
        return False
    _set_handler()(made[0])
    return True


def set_limit(limit: int) -> None:
    """Keep at most ``limit`` bytes of freed blocks from now on (CAP by default; blocks kept
    beyond it go back to malloc as the next block is freed)."""
    made = _made[0] if _made else None
    if made is not None:
        ctypes.c_int64.from_address(made[1]["stat_limit"]).value = limit


def counters() -> dict[str, int]:
    """Allocations served from kept blocks ("hits"), those of a keepable size that were not
    ("misses"), the bytes kept now ("kept") and the most it keeps ("limit")."""
    made = _made[0] if _made else None
    if made is None:
        return {"hits": 0, "misses": 0, "kept": 0}
    return {name[5:]: ctypes.c_int64.from_address(address).value for name, address in made[1].items()}
