"""Calling native kernels from Python as fast as numba's dispatcher: a CPython function in LLVM IR.

Through ctypes (or cffi) a call costs 4-7 us (each array's address taken, a dozen arguments converted);
a plan makes hundreds of kernel calls a step. So each kernel module also holds a function with
CPython's ``METH_FASTCALL`` signature that reads its arguments itself: an array's data
pointer, rank, dims, flags and type number from NumPy's array struct (checked: exactly an
ndarray, C-contiguous, of the kernel's type in native byte order and rank), an int through
``PyLong_AsLongLong``, a float through ``PyFloat_AsDouble``; it releases the GIL around the
kernel (``PyEval_SaveThread``) and returns None. Any argument it does not take -- another
type, a subclass, a strided view -- goes to the ctypes wrapper (the fallback), which converts
or refuses it with its error.

The struct offsets are NumPy's (``PyArrayObject_fields``, the same in NumPy 1 and 2) and
CPython's object header; :func:`layout_ok` checks them on a live array first, and on a build
where they do not hold (a free-threaded or debug CPython, say) only the ctypes wrapper is made.
The process-specific addresses (the ndarray type, the fallback) are globals filled in after
loading, so the IR -- and the machine code in the disk cache -- is the same in every process.
"""
from __future__ import annotations

import ctypes
import functools
import sys
import sysconfig
from collections.abc import Callable
from typing import Any

import numpy as np

from gradreg.backends.native import irtext as ir

# Offsets into the objects (64-bit CPython with the GIL: 16-byte object header).
_OB_TYPE = 8
_DATA, _ND, _DIMS, _DESCR, _FLAGS = 16, 24, 32, 56, 64       # PyArrayObject_fields
_BYTEORDER, _TYPE_NUM = 26, 28                                # PyArray_Descr
_C_CONTIGUOUS = 0x0001
_METH_FASTCALL = 0x0080

_I8, _I32, _I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_PTR = _I8.as_pointer()


@functools.cache
def layout_ok() -> bool:
    """Whether the offsets above hold here (checked on live arrays)."""
    if sys.maxsize != 2**63 - 1 or sysconfig.get_config_var("Py_GIL_DISABLED") or hasattr(sys, "gettotalrefcount"):
        return False
    try:
        for a in (np.zeros((3, 5), np.float32), np.zeros(7, np.int64)[::2]):
            def read(address: int, ctype: Any) -> Any:
                return ctype.from_address(address).value
            base = id(a)
            descr = read(base + _DESCR, ctypes.c_void_p)
            dims = read(base + _DIMS, ctypes.c_void_p)
            if (read(base + _OB_TYPE, ctypes.c_void_p) != id(np.ndarray)
                    or read(base + _DATA, ctypes.c_void_p) != a.__array_interface__["data"][0]
                    or read(base + _ND, ctypes.c_int32) != a.ndim
                    or [read(dims + 8 * d, ctypes.c_int64) for d in range(a.ndim)] != list(a.shape)
                    or descr != id(a.dtype)
                    or bool(read(base + _FLAGS, ctypes.c_int32) & _C_CONTIGUOUS) != a.flags.c_contiguous
                    or read(descr + _TYPE_NUM, ctypes.c_int32) != a.dtype.num
                    or read(descr + _BYTEORDER, ctypes.c_char) not in (b"=", b"|")):
                return False
    except Exception:
        return False
    return True


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p), ("ml_flags", ctypes.c_int),
                ("ml_doc", ctypes.c_char_p)]


_keep: list[Any] = []    # method definitions and names: CPython keeps pointers to them


def _declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    try:
        return module.get_global(name)
    except KeyError:
        return ir.Function(module, ir.FunctionType(ret, args), name=name)


def _load(b: ir.IRBuilder, base: ir.Value, offset: int, t: ir.Type) -> ir.Value:
    return b.load(b.bitcast(b.gep(base, [ir.Constant(_I64, offset)]), t.as_pointer()))


def add_entry(module: ir.Module, kernel: ir.Function, params: list[tuple[str, Any, int]], name: str) -> None:
    """Add ``name``: the METH_FASTCALL function calling ``kernel`` with ``params`` (the Kernel's
    list: ("array", Type, ndim) | ("int"|"scalar", Type, 0)); globals ``name.ndarray``,
    ``name.fallback`` and ``name.none`` are filled in by :func:`make_callable`."""
    fn = ir.Function(module, ir.FunctionType(_PTR, [_PTR, _PTR.as_pointer(), _I64]), name=name)
    _, args, nargs = fn.args
    globals_ = {}
    for g in ("ndarray", "fallback", "none"):
        var = ir.GlobalVariable(module, _PTR, name=f"{name}.{g}")
        var.initializer = ir.Constant(_PTR, None)
        globals_[g] = var
    long_of = _declare(module, "PyLong_AsLongLong", _I64, [_PTR])
    float_of = _declare(module, "PyFloat_AsDouble", ir.DoubleType(), [_PTR])
    truth = _declare(module, "PyObject_IsTrue", _I32, [_PTR])
    raised = _declare(module, "PyErr_Occurred", _PTR, [])
    save = _declare(module, "PyEval_SaveThread", _PTR, [])
    restore = _declare(module, "PyEval_RestoreThread", ir.VoidType(), [_PTR])
    new_ref = _declare(module, "Py_NewRef", _PTR, [_PTR])
    vectorcall = _declare(module, "PyObject_Vectorcall", _PTR, [_PTR, _PTR.as_pointer(), _I64, _PTR])

    b = ir.IRBuilder(fn.append_basic_block("entry"))
    slow = fn.append_basic_block("slow")
    error = fn.append_basic_block("error")

    def check(ok: ir.Value) -> None:
        good = fn.append_basic_block("ok")
        b.cbranch(ok, good, slow)
        b.position_at_end(good)

    def no_error_if(suspicious: ir.Value) -> None:
        """After a conversion returned its error value: NULL if an exception is set."""
        maybe, good = fn.append_basic_block("maybe"), fn.append_basic_block("converted")
        b.cbranch(suspicious, maybe, good)
        b.position_at_end(maybe)
        b.cbranch(b.icmp_unsigned("!=", b.call(raised, []), ir.Constant(_PTR, None)), error, good)
        b.position_at_end(good)

    check(b.icmp_signed("==", nargs, ir.Constant(_I64, len(params))))
    ndarray = b.load(globals_["ndarray"])
    values: list[ir.Value] = []
    for k, (kind, t, ndim) in enumerate(params):
        obj = b.load(b.gep(args, [ir.Constant(_I64, k)]))
        if kind == "array":
            check(b.icmp_unsigned("==", _load(b, obj, _OB_TYPE, _PTR), ndarray))
            flags = _load(b, obj, _FLAGS, _I32)
            check(b.icmp_unsigned("!=", b.and_(flags, ir.Constant(_I32, _C_CONTIGUOUS)), ir.Constant(_I32, 0)))
            check(b.icmp_signed("==", _load(b, obj, _ND, _I32), ir.Constant(_I32, ndim)))
            descr = _load(b, obj, _DESCR, _PTR)
            check(b.icmp_signed("==", _load(b, descr, _TYPE_NUM, _I32), ir.Constant(_I32, t.dtype.num)))
            order = _load(b, descr, _BYTEORDER, _I8)
            check(b.or_(b.icmp_unsigned("==", order, ir.Constant(_I8, ord("="))),
                        b.icmp_unsigned("==", order, ir.Constant(_I8, ord("|")))))
            values.append(b.bitcast(_load(b, obj, _DATA, _PTR), kernel.args[len(values)].type))
            dims = _load(b, obj, _DIMS, _I64.as_pointer())
            values.extend(b.load(b.gep(dims, [ir.Constant(_I64, d)])) for d in range(ndim))
        elif t.is_float:
            v = b.call(float_of, [obj])
            no_error_if(b.fcmp_ordered("==", v, ir.Constant(ir.DoubleType(), -1.0)))
            values.append(b.fptrunc(v, t.ir) if t.ir != ir.DoubleType() else v)
        elif t.is_bool:
            v = b.call(truth, [obj])
            with b.if_then(b.icmp_signed("<", v, ir.Constant(_I32, 0))):
                b.branch(error)
            values.append(b.icmp_signed("!=", v, ir.Constant(_I32, 0)))
        else:
            v = b.call(long_of, [obj])
            no_error_if(b.icmp_signed("==", v, ir.Constant(_I64, -1)))
            values.append(b.trunc(v, t.ir) if t.ir.width < 64 else v)
    state = b.call(save, [])
    b.call(kernel, values)
    b.call(restore, [state])
    b.ret(b.call(new_ref, [b.load(globals_["none"])]))

    b.position_at_end(slow)        # what the fast path does not take: the ctypes wrapper decides
    b.ret(b.call(vectorcall, [b.load(globals_["fallback"]), args, nargs, ir.Constant(_PTR, None)]))
    b.position_at_end(error)
    b.ret(ir.Constant(_PTR, None))


def make_callable(name: str, address: int, global_address: Callable[[str], int],
                  fallback: Callable[..., None]) -> Callable[..., None]:
    """The builtin function calling the entry at ``address``, its globals filled in."""
    refs = {"ndarray": np.ndarray, "fallback": fallback, "none": None}
    for g, obj in refs.items():
        ctypes.c_void_p.from_address(global_address(f"{name}.{g}")).value = id(obj)
    label = name.encode()
    definition = _MethodDef(label, address, _METH_FASTCALL, None)
    new = ctypes.pythonapi.PyCFunction_NewEx
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    function = new(ctypes.addressof(definition), None, None)     # no self, no module
    _keep.append((definition, label, fallback))
    return function
