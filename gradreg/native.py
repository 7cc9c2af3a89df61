"""Native kernels for op families: loops written as traced Python and compiled by LLVM.

A plugin's compiled kernel built with :class:`Kernel` compiles in tens of milliseconds with
the GIL released (numba's compiler holds it for about half a second a loop), so a kernel built
in the background does not stall the caller's calls. The machine code is kept in gradreg's
kernel cache. ::

    from gradreg.native import Kernel, Unsupported, available, mathlib

    def scale_loop(dtype):
        k = Kernel("scale")
        x, out = k.array(dtype, 2), k.array(dtype, 2)
        factor = k.scalar(dtype)
        for i in k.range(x.shape[0]):
            for j in k.range(x.shape[1]):
                out[i, j] = mathlib.exp(x[i, j] * factor)
        return k.compile()      # scale(x, out, factor): C-contiguous arrays of dtype

Arrays are C-contiguous NumPy arrays of the declared dtype and rank (checked at each call);
loops are ``for i in k.range(lo, hi)``, conditions ``with k.if_(c)``, selects ``k.where``,
mutable locals ``k.var``, explicit SIMD ``k.vector(type, lanes)``. What has no native form
raises :class:`Unsupported`: build the kernel another way then (a numba loop, the NumPy
kernel). :func:`available` says whether llvmlite is installed and LLVM compiles for this
machine. The reference is gradreg.backends.native.dsl.
"""
from __future__ import annotations

from gradreg.backends.native import available, mathlib
from gradreg.backends.native.dsl import (
    BOOL,
    F32,
    F64,
    I32,
    I64,
    Array,
    Kernel,
    Type,
    Unsupported,
    Value,
    Vector,
    compile_loop,
    type_of,
)

__all__ = ["BOOL", "F32", "F64", "I32", "I64", "Array", "Kernel", "Type", "Unsupported", "Value", "Vector",
           "available", "compile_loop", "mathlib", "type_of"]
