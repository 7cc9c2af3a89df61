"""A kernel written in Python, traced into LLVM IR: gradreg's native kernels.

A :class:`Kernel` is written once, as Python that runs once: its parameters are
:class:`Array` (C-contiguous, of one dtype and rank), ``int`` and float scalars; its loops
are ``for i in k.range(lo, hi)``; its conditions ``with k.if_(cond)``; its values
:class:`Value` objects whose operators emit instructions (Python numbers next to them take
their type). :meth:`Kernel.compile` optimizes and compiles the IR (engine: LLVM, through
llvmlite, with the GIL released) and returns a Python function of the parameters: a
function in machine code that reads NumPy's arrays itself (pycall; about half a microsecond a
call), with a ctypes wrapper for what it does not take. The GIL is released during the call.

Values follow IEEE arithmetic as NumPy's loops do (no fast-math: no reassociation, no
contraction into fused multiply-adds, NaN compared unordered by ``!=`` only). Operands of
one operation must have one type: a kernel converts with :meth:`Value.cast`.
"""
from __future__ import annotations

import builtins
import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from gradreg.backends.native import Unsupported, engine, pycall
from gradreg.backends.native import irtext as ir

__all__ = ["BOOL", "F32", "F64", "I32", "I64", "Array", "Kernel", "Type", "Unsupported", "Value", "Var",
           "Vector", "compile_loop", "type_of"]


class Type:
    """A scalar type: its IR type, the NumPy dtype of arrays holding it and its C name."""

    def __init__(self, name: str, ir_type: ir.Type, dtype: Any, c_name: str):
        self.name, self.ir, self.dtype, self.c = name, ir_type, np.dtype(dtype), c_name

    @property
    def is_float(self) -> bool:
        return isinstance(self.ir, (ir.FloatType, ir.DoubleType))

    @property
    def is_bool(self) -> bool:
        return self is BOOL

    def __repr__(self) -> str:
        return self.name


F32 = Type("f32", ir.FloatType(), np.float32, "float")
F64 = Type("f64", ir.DoubleType(), np.float64, "double")
I64 = Type("i64", ir.IntType(64), np.int64, "int64_t")
I32 = Type("i32", ir.IntType(32), np.int32, "int32_t")
BOOL = Type("bool", ir.IntType(1), np.bool_, "_Bool")
_BYTE = ir.IntType(8)
_BY_DTYPE = {F32.dtype: F32, F64.dtype: F64, I64.dtype: I64, I32.dtype: I32, BOOL.dtype: BOOL}


def type_of(dtype: Any) -> Type:
    try:
        return _BY_DTYPE[np.dtype(dtype)]
    except KeyError:
        raise Unsupported(f"no native type for {np.dtype(dtype)}") from None


class Value:
    """A scalar of a kernel: operators emit instructions into the kernel's current block."""

    __slots__ = ("k", "type", "ir")

    def __init__(self, kernel: Kernel, type_: Type, value: Any):   # (None: a parameter bound later)
        self.k, self.type = kernel, type_
        self.ir: ir.Value = value

    def _other(self, other: Any) -> Value:
        if isinstance(other, Value):
            if other.type is not self.type:
                raise Unsupported(f"operands of types {self.type} and {other.type}")
            return other
        return self.k.const(other, self.type)

    def _binary(self, other: Any, float_op: str, int_op: str | None, swap: bool = False) -> Value:
        o = self._other(other)
        a, b = (o, self) if swap else (self, o)
        bld = self.k.b
        if self.type.is_float:
            return Value(self.k, self.type, getattr(bld, float_op)(a.ir, b.ir))
        if int_op is None or self.type.is_bool and int_op not in ("and_", "or_", "xor"):
            raise Unsupported(f"{float_op} on {self.type}")
        # integers wrap around as NumPy's do (index arithmetic, which cannot, is marked: _index)
        return Value(self.k, self.type, getattr(bld, int_op)(a.ir, b.ir))

    def __add__(self, o: Any) -> Value: return self._binary(o, "fadd", "add")
    def __radd__(self, o: Any) -> Value: return self._binary(o, "fadd", "add", True)
    def __sub__(self, o: Any) -> Value: return self._binary(o, "fsub", "sub")
    def __rsub__(self, o: Any) -> Value: return self._binary(o, "fsub", "sub", True)
    def __mul__(self, o: Any) -> Value: return self._binary(o, "fmul", "mul")
    def __rmul__(self, o: Any) -> Value: return self._binary(o, "fmul", "mul", True)
    def __truediv__(self, o: Any) -> Value: return self._binary(o, "fdiv", None)
    def __rtruediv__(self, o: Any) -> Value: return self._binary(o, "fdiv", None, True)

    def _bits(self, other: Any, op: str, swap: bool = False) -> Value:
        if self.type.is_float:
            raise Unsupported(f"{op} on {self.type}")
        return self._binary(other, "", op, swap)

    def __and__(self, o: Any) -> Value: return self._bits(o, "and_")
    def __rand__(self, o: Any) -> Value: return self._bits(o, "and_", True)
    def __or__(self, o: Any) -> Value: return self._bits(o, "or_")
    def __ror__(self, o: Any) -> Value: return self._bits(o, "or_", True)
    def __xor__(self, o: Any) -> Value: return self._bits(o, "xor")
    def __lshift__(self, o: Any) -> Value: return self._bits(o, "shl")
    def __rshift__(self, o: Any) -> Value: return self._bits(o, "ashr")

    def __invert__(self) -> Value:
        """Logical not of a bool; bitwise not of an int."""
        if self.type.is_float:
            raise Unsupported("~ on a float")
        return Value(self.k, self.type, self.k.b.not_(self.ir))

    def __neg__(self) -> Value:
        if self.type.is_float:
            return Value(self.k, self.type, self.k.b.fneg(self.ir))
        return Value(self.k, self.type, self.k.b.neg(self.ir))

    def compare(self, other: Any, op: str) -> Value:
        """``self op other`` for op one of <, <=, >, >=, ==, !=."""
        o = self._other(other)
        bld = self.k.b
        if self.type.is_float:
            # NaN: every comparison false but !=, as in Python and NumPy
            result = bld.fcmp_unordered(op, self.ir, o.ir) if op == "!=" else bld.fcmp_ordered(op, self.ir, o.ir)
        else:
            result = bld.icmp_signed(op, self.ir, o.ir)
        return Value(self.k, BOOL, result)

    def __lt__(self, o: Any) -> Value: return self.compare(o, "<")
    def __le__(self, o: Any) -> Value: return self.compare(o, "<=")
    def __gt__(self, o: Any) -> Value: return self.compare(o, ">")
    def __ge__(self, o: Any) -> Value: return self.compare(o, ">=")
    def __eq__(self, o: Any) -> Value: return self.compare(o, "==")  # type: ignore[override]
    def __ne__(self, o: Any) -> Value: return self.compare(o, "!=")  # type: ignore[override]
    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        raise Unsupported("a traced value has no truth value in Python: use k.if_ or k.where")

    def cast(self, to: Type) -> Value:
        """This value converted to ``to`` as NumPy's astype does (floats to ints truncate)."""
        src, bld = self.type, self.k.b
        if src is to:
            return self
        if src.is_float and to.is_float:
            op = bld.fpext if to is F64 else bld.fptrunc
            return Value(self.k, to, op(self.ir, to.ir))
        if src.is_bool:
            return Value(self.k, to, bld.uitofp(self.ir, to.ir) if to.is_float else bld.zext(self.ir, to.ir))
        if to.is_bool:
            return self != 0
        if src.is_float:
            return Value(self.k, to, bld.fptosi(self.ir, to.ir))
        if to.is_float:
            return Value(self.k, to, bld.sitofp(self.ir, to.ir))
        op = bld.sext if to.dtype.itemsize > src.dtype.itemsize else bld.trunc
        return Value(self.k, to, op(self.ir, to.ir))

    def bitcast(self, to: Type) -> Value:
        """The same bits as a value of ``to`` (float32 <-> int32)."""
        return Value(self.k, to, self.k.b.bitcast(self.ir, to.ir))


class Var:
    """A mutable local of a kernel (a stack slot; LLVM keeps it in a register)."""

    def __init__(self, kernel: Kernel, initial: Value):
        self.k, self.type = kernel, initial.type
        with kernel._at_entry():
            self.slot = kernel.b.alloca(initial.type.ir)
        kernel.b.store(initial.ir, self.slot)

    @property
    def value(self) -> Value:
        return Value(self.k, self.type, self.k.b.load(self.slot))

    @value.setter
    def value(self, new: Any) -> None:
        v = new if isinstance(new, Value) else self.k.const(new, self.type)
        if v.type is not self.type:
            raise Unsupported(f"a {self.type} variable set to a {v.type}")
        self.k.b.store(v.ir, self.slot)


def _index(k: Kernel, op: str, a: Value, b: Value) -> Value:
    """Index arithmetic, which never overflows (an array's elements fit in an int64): marked
    so (``nsw``), which lets LLVM reason about the loops' strides and vectorize them."""
    return Value(k, I64, getattr(k.b, op)(a.ir, b.ir, flags=["nsw"]))


class Array:
    """A C-contiguous array parameter (or a sub-array of one: :meth:`sub`)."""

    def __init__(self, kernel: Kernel, type_: Type, pointer: Any, dims: Sequence[Value]):
        self.k, self.type, self._shape = kernel, type_, tuple(dims)
        self.pointer: ir.Value = pointer     # (None: a parameter bound later)

    @property
    def shape(self) -> tuple[Value, ...]:
        self.k.begin()     # a parameter's dims are bound when the body starts
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def _offset(self, index: Sequence[Any]) -> Value:
        if len(index) > self.ndim:
            raise Unsupported(f"{len(index)} indices into a {self.ndim}-d array")
        k = self.k
        flat: Value | None = None
        for d, i in enumerate(index):
            iv = k.int(i)
            flat = iv if flat is None else _index(k, "add", _index(k, "mul", flat, self.shape[d]), iv)
        for d in range(len(index), self.ndim):     # the elements of the dims not indexed
            flat = _index(k, "mul", k.int(0) if flat is None else flat, self.shape[d])
        return flat if flat is not None else k.int(0)

    def _address(self, index: Any) -> ir.Value:
        index = index if isinstance(index, tuple) else (index,)
        if len(index) != self.ndim:
            raise Unsupported(f"{len(index)} indices into a {self.ndim}-d array (use sub)")
        return self.k.b.gep(self.pointer, [self._offset(index).ir], inbounds=True)

    def __getitem__(self, index: Any) -> Value:
        raw = self.k.b.load(self._address(index))
        if self.type.is_bool:
            return Value(self.k, BOOL, self.k.b.icmp_unsigned("!=", raw, ir.Constant(_BYTE, 0)))
        return Value(self.k, self.type, raw)

    def __setitem__(self, index: Any, value: Any) -> None:
        v = value if isinstance(value, Value) else self.k.const(value, self.type)
        if v.type is not self.type:
            raise Unsupported(f"a {v.type} stored into a {self.type} array")
        raw = self.k.b.zext(v.ir, _BYTE) if self.type.is_bool else v.ir
        self.k.b.store(raw, self._address(index))

    def sub(self, *index: Any) -> Array:
        """The sub-array at the leading ``index`` (``x.sub(n, h)`` is NumPy's ``x[n, h]``)."""
        pointer = self.k.b.gep(self.pointer, [self._offset(index).ir], inbounds=True)
        return Array(self.k, self.type, pointer, self.shape[len(index):])

    def size(self) -> Value:
        total = self.k.int(1)
        for d in self.shape:
            total = total * d
        return total

    def flat(self) -> Array:
        """The same elements as a 1-d array (NumPy's ``a.reshape(-1)``)."""
        return Array(self.k, self.type, self.pointer, (self.size(),))


class Vector:
    """Explicit SIMD: values of ``lanes`` consecutive elements of one float type, for a loop
    that LLVM would not vectorize by itself (a few output channels, each accumulated over a
    window: every element's sum is a chain the loop vectorizer leaves scalar). A vector value
    is a tuple of LLVM vectors whose lane counts are powers of two, ``lanes`` in binary (10:
    8 and 2): LLVM lowered a vector of 10, 12 or 24 float32 lanes into code about twice as
    slow as im2col's products, the same lanes as powers of two into registers. :meth:`fma` is
    ``llvm.fmuladd``: fused where the machine has FMA, so its bits may differ from a multiply
    and an add (a kernel that must match another's bits uses :class:`Value` arithmetic)."""

    def __init__(self, kernel: Kernel, t: Type, lanes: builtins.int):
        if not t.is_float or lanes < 1:
            raise Unsupported(f"a vector of {lanes} {t}")
        self.k, self.t, self.lanes = kernel, t, lanes
        # (first lane, lanes) of each part, the widest first
        self.parts = [(lanes & ~((bit << 1) - 1), bit) for bit in reversed([1 << b for b in range(lanes.bit_length())])
                      if lanes & bit]
        self._types = [ir.VectorType(t.ir, n) for _, n in self.parts]
        self._align = t.dtype.itemsize

    def _pointers(self, array: Array, index: tuple[Any, ...]) -> list[ir.Value]:
        if array.type is not self.t:
            raise Unsupported(f"a vector of {self.t} from a {array.type} array")
        b = self.k.b
        first = array._address(index)
        return [b.bitcast(b.gep(first, [ir.Constant(I64.ir, offset)], inbounds=True), vt.as_pointer())
                for (offset, _), vt in zip(self.parts, self._types)]

    def load(self, array: Array, *index: Any) -> tuple[ir.Value, ...]:
        """``array[index]`` and the ``lanes - 1`` elements after it (the caller keeps them inside the array)."""
        return tuple(self.k.b.load(p, align=self._align) for p in self._pointers(array, index))

    def store(self, value: tuple[ir.Value, ...], array: Array, *index: Any) -> None:
        """``array[index]`` and the ``lanes - 1`` elements after it set to ``value``'s lanes."""
        for part, p in zip(value, self._pointers(array, index)):
            self.k.b.store(part, p, align=self._align)

    def splat(self, value: Value) -> tuple[ir.Value, ...]:
        """``value`` in every lane."""
        b, i32 = self.k.b, ir.IntType(32)
        widest = self._types[0]
        one = b.insert_element(ir.Constant(widest, ir.Undefined), value.ir, ir.Constant(i32, 0))
        return tuple(b.shuffle_vector(one, ir.Constant(widest, ir.Undefined),
                                      ir.Constant(ir.VectorType(i32, n), [0] * n)) for _, n in self.parts)

    def zero(self) -> tuple[ir.Value, ...]:
        return tuple(ir.Constant(vt, [ir.Constant(self.t.ir, 0.0)] * n) for (_, n), vt in zip(self.parts, self._types))

    def add(self, a: tuple[ir.Value, ...], b: tuple[ir.Value, ...]) -> tuple[ir.Value, ...]:
        return tuple(self.k.b.fadd(x, y) for x, y in zip(a, b))

    def fma(self, a: tuple[ir.Value, ...], b: tuple[ir.Value, ...],
            c: tuple[ir.Value, ...]) -> tuple[ir.Value, ...]:
        """``a * b + c`` lane by lane (llvm.fmuladd)."""
        module = self.k.module
        out = []
        for (_, n), vt, x, y, z in zip(self.parts, self._types, a, b, c):
            name = f"llvm.fmuladd.v{n}{'f32' if self.t is F32 else 'f64'}"
            try:
                fn = module.get_global(name)
            except KeyError:
                fn = ir.Function(module, ir.FunctionType(vt, [vt] * 3), name=name)
            out.append(self.k.b.call(fn, [x, y, z]))
        return tuple(out)

    def var(self, initial: tuple[ir.Value, ...]) -> VectorVar:
        return VectorVar(self, initial)


class VectorVar:
    """A mutable vector local (stack slots; LLVM keeps them in registers)."""

    def __init__(self, vector: Vector, initial: tuple[ir.Value, ...]):
        self.k = vector.k
        with self.k._at_entry():
            self.slots = [self.k.b.alloca(vt) for vt in vector._types]
        self.value = initial

    @property
    def value(self) -> tuple[ir.Value, ...]:
        return tuple(self.k.b.load(slot) for slot in self.slots)

    @value.setter
    def value(self, new: tuple[ir.Value, ...]) -> None:
        for part, slot in zip(new, self.slots, strict=True):
            self.k.b.store(part, slot)


class Kernel:
    """One kernel: declare its parameters in order, write its body, then :meth:`compile`.

    ``distinct``: the arrays it is given never share memory, and LLVM may assume so (noalias:
    no checks for overlap, more loops vectorized). ``unroll=False``: compiled without LLVM's
    loop unroller, for loops unrolled by hand (a block of accumulators), where it only makes
    more code to compile and to run."""

    def __init__(self, name: str, distinct: bool = False, unroll: bool = True):
        self.name = name
        self.distinct = distinct    # its arrays never share memory: LLVM may assume so (noalias)
        self.unroll = unroll        # False: LLVM's loop unroller left out (engine.compile_ir)
        # block names numbered within the kernel: the same kernel traced in another process is
        # the same IR, hence the same machine code in the disk cache (engine)
        self._names = itertools.count()
        self.module = ir.Module(name=name)
        self.params: list[tuple[str, Type, int]] = []    # ("array", Type, ndim) | ("int"|"scalar", Type, 0)
        self._arg_types: list[ir.Type] = []
        self._array_positions: list[int] = []    # where each array's pointer is among the arguments
        self._pending: list[Callable[[list[ir.Argument]], None]] = []
        self.function: Any = None        # the ir.Function, made when the body starts
        self._b: ir.IRBuilder | None = None    # set when the body starts
        self._entry: Any = None          # its first block, which holds the stack slots

    # -- parameters (all declared before the first statement of the body) --------------------------

    def array(self, dtype: Any, ndim: int) -> Array:
        t = type_of(dtype)
        self.params.append(("array", t, ndim))
        storage = _BYTE if t.is_bool else t.ir
        first = len(self._arg_types)
        self._array_positions.append(first)
        self._arg_types.append(storage.as_pointer())
        self._arg_types.extend([I64.ir] * ndim)
        array = Array(self, t, None, ())

        def bind(args: list[ir.Argument]) -> None:
            array.pointer = args[first]
            array._shape = tuple(Value(self, I64, args[first + 1 + d]) for d in range(ndim))
        self._pending.append(bind)
        return array

    def local(self, dtype: Any, size: builtins.int) -> Array:
        """A 1-d array of ``size`` elements on the kernel's stack (made once, in its entry block)."""
        t = type_of(dtype)
        with self._at_entry():
            pointer = self.b.alloca(_BYTE if t.is_bool else t.ir, size=ir.Constant(I64.ir, size))
        return Array(self, t, pointer, (self.int(size),))

    def int_param(self) -> Value:
        return self._scalar_param(I64, "int")

    def scalar(self, dtype: Any) -> Value:
        return self._scalar_param(type_of(dtype), "scalar")

    def _scalar_param(self, t: Type, kind: str) -> Value:
        self.params.append((kind, t, 0))
        position = len(self._arg_types)
        self._arg_types.append(t.ir)
        value = Value(self, t, None)

        def bind(args: list[ir.Argument]) -> None:
            value.ir = args[position]
        self._pending.append(bind)
        return value

    @property
    def b(self) -> ir.IRBuilder:
        """The builder at the body's current block (the body starts at the first use)."""
        if self._b is None:
            self.begin()
        assert self._b is not None
        return self._b

    def begin(self) -> None:
        """Start the body (called by the first statement that needs it)."""
        if self.function is not None:
            return
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), self._arg_types), name=self.name)
        self.function = fn
        args = list(fn.args)
        for bind in self._pending:
            bind(args)
        if self.distinct:
            for position in self._array_positions:
                args[position].add_attribute("noalias")
        self._entry = fn.append_basic_block("entry")
        start = fn.append_basic_block("start")
        self._b = ir.IRBuilder(start)

    @contextlib.contextmanager
    def _at_entry(self) -> Iterator[None]:
        self.begin()
        here = self.b.block
        self.b.position_at_end(self._entry)
        try:
            yield
        finally:
            self.b.position_at_end(here)

    # -- values --------------------------------------------------------------------------------------

    def const(self, value: Any, t: Type) -> Value:
        self.begin()
        if t.is_bool:
            return Value(self, t, ir.Constant(t.ir, int(bool(value))))
        if t.is_float:
            return Value(self, t, ir.Constant(t.ir, float(t.dtype.type(value))))
        return Value(self, t, ir.Constant(t.ir, int(value)))

    def int(self, value: Any) -> Value:
        """An int64 value (a Python int made constant)."""
        if isinstance(value, Value):
            return value if value.type is I64 else value.cast(I64)
        return self.const(value, I64)

    def var(self, initial: Value) -> Var:
        return Var(self, initial)

    def quotient(self, a: Value, divisor: builtins.int) -> Value:
        """``a // divisor`` for ``a >= 0`` and a positive Python int ``divisor`` (an extent cut into blocks)."""
        if divisor < 1:
            raise Unsupported(f"a quotient by {divisor}")
        return Value(self, I64, self.b.sdiv(self.int(a).ir, ir.Constant(I64.ir, divisor)))

    def vector(self, t: Type, lanes: builtins.int) -> Vector:
        """Vectors of ``lanes`` elements of ``t`` (:class:`Vector`)."""
        return Vector(self, t, lanes)

    def where(self, condition: Value, a: Any, b: Any) -> Value:
        """``a`` where ``condition`` else ``b`` (both computed)."""
        first = a if isinstance(a, Value) else None
        second = b if isinstance(b, Value) else None
        if first is None and second is None:
            raise Unsupported("where of two Python numbers")
        t = (first if first is not None else second).type  # type: ignore[union-attr]
        av = first if first is not None else self.const(a, t)
        bv = second if second is not None else self.const(b, t)
        if av.type is not bv.type:
            raise Unsupported(f"where of {av.type} and {bv.type}")
        return Value(self, t, self.b.select(condition.ir, av.ir, bv.ir))

    def intrinsic(self, name: str, *args: Value) -> Value:
        """An LLVM intrinsic of the first argument's type (``llvm.fabs``, ``llvm.floor``, ...)."""
        t = args[0].type
        fn = self.module.declare_intrinsic(name, [t.ir], ir.FunctionType(t.ir, [a.type.ir for a in args]))
        return Value(self, t, self.b.call(fn, [a.ir for a in args]))

    def libm(self, name: str, *args: Value) -> Value:
        """A call of the C math library's ``name`` (double -> double, float names end in f)."""
        t = args[0].type
        try:
            fn = self.module.get_global(name)
        except KeyError:
            fn = ir.Function(self.module, ir.FunctionType(t.ir, [a.type.ir for a in args]), name=name)
        return Value(self, t, self.b.call(fn, [a.ir for a in args]))

    # -- control -------------------------------------------------------------------------------------

    def range(self, lo: Any, hi: Any = None) -> Iterator[Value]:
        """``for i in k.range(lo, hi):`` -- the body is traced once, run for lo <= i < hi."""
        if hi is None:
            lo, hi = 0, lo
        self.begin()
        lo_v, hi_v = self.int(lo), self.int(hi)
        counter = self.var(lo_v)
        fn = self.function
        n = next(self._names)
        header, body, done = (fn.append_basic_block(f"{part}{n}") for part in ("loop", "body", "done"))
        b = self.b
        b.branch(header)
        b.position_at_end(header)
        i = counter.value
        b.cbranch(b.icmp_signed("<", i.ir, hi_v.ir), body, done)
        b.position_at_end(body)
        yield i
        counter.value = _index(self, "add", i, self.int(1))
        b.branch(header)
        b.position_at_end(done)

    @contextlib.contextmanager
    def if_(self, condition: Value) -> Iterator[None]:
        """``with k.if_(c):`` -- the block runs where ``c`` holds."""
        fn = self.function
        n = next(self._names)
        then, after = fn.append_basic_block(f"then{n}"), fn.append_basic_block(f"endif{n}")
        self.b.cbranch(condition.ir, then, after)
        self.b.position_at_end(then)
        yield
        self.b.branch(after)
        self.b.position_at_end(after)

    def fill(self, array: Array, value: Any) -> None:
        """Every element of ``array`` set to ``value``."""
        self.begin()
        flat = array.flat()
        for i in self.range(flat.shape[0]):
            flat[i] = value

    # -- the machine code ----------------------------------------------------------------------------

    def finish(self) -> None:
        """End the kernel's body: its last block returns, its entry block branches to the first."""
        self.begin()
        if not self.b.block.is_terminated:
            self.b.ret_void()
        entry_builder = ir.IRBuilder(self._entry)
        if not self._entry.is_terminated:
            entry_builder.branch(self.function.blocks[1])

    def ir_source(self) -> str:
        self.finish()
        return str(self.module)

    def compile(self) -> Callable[..., None]:
        """The kernel as a Python function of its parameters (arrays: C-contiguous NumPy arrays
        of the declared dtype and rank; ints; floats), compiled now."""
        fast = pycall.layout_ok()
        if fast:
            self.finish()          # the kernel complete, then its entry for Python beside it
            pycall.add_entry(self.module, self.function, self.params, f"{self.name}.py")
        source = self.ir_source()
        variables = tuple(f"{self.name}.py.{g}" for g in ("ndarray", "fallback", "none")) if fast else ()
        addresses = engine.compile_ir(source, [self.name, f"{self.name}.py"] if fast else [self.name], variables,
                                      unroll=self.unroll)
        address = addresses[self.name]
        c_params = []
        lines = []
        call = []
        scope: dict[str, Any] = {"address": engine.data_address, "as_int": engine.as_int,
                                 "as_float": engine.as_float}
        names = []
        for k, (kind, t, ndim) in enumerate(self.params):
            p = f"p{k}"
            names.append(p)
            if kind == "array":
                scope[f"d{k}"] = t.dtype
                lines.append(f"    if {p}.dtype != d{k} or {p}.ndim != {ndim}:\n"
                             f"        raise TypeError('{self.name}: argument {k} is ' + str({p}.dtype) + ', '"
                             f" + str({p}.ndim) + '-d; the kernel takes {t.dtype}, {ndim}-d')\n")
                c_params.append("char*")
                c_params.extend(["int64_t"] * ndim)
                call.append(f"address({p}, '{self.name}: argument {k}')")
                call.extend(f"{p}.shape[{d}]" for d in range(ndim))
            else:
                c_params.append(t.c)
                call.append(f"bool({p})" if t.is_bool else f"as_float({p})" if t.is_float else f"as_int({p})")
        scope["fn"] = engine.function(address, "void", c_params)
        text = (f"def {self.name}({', '.join(names)}):\n" + "".join(lines)
                + f"    fn({', '.join(call)})\n")
        exec(compile(text, f"<gradreg-native-{self.name}>", "exec"), scope)
        kernel: Callable[..., None] = scope[self.name]
        if not fast:
            return kernel
        # the entry reading its arguments in machine code, the wrapper above for the rest
        return pycall.make_callable(f"{self.name}.py", addresses[f"{self.name}.py"], addresses.__getitem__, kernel)


def compile_loop(name: str, dtype: Any, write: Callable[[Kernel, np.dtype], None], distinct: bool = False,
                 unroll: bool = True) -> Any:
    """The loop ``write(k, dtype)`` traces into a new kernel ``k`` for arrays of ``dtype``
    (float32 or float64: anything else raises Unsupported), compiled now: what a family's
    table of loop writers builds one loop with. ``distinct`` and ``unroll``: as Kernel's."""
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise Unsupported(f"the loop {name} of {dtype}")
    k = Kernel(f"{name}_{dtype.name}", distinct=distinct, unroll=unroll)
    write(k, dtype)
    return k.compile()
