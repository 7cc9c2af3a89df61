"""LLVM IR written as text as it is traced: what the native kernels' tracer (dsl) and their
Python entries (pycall) build modules with, in place of ``llvmlite.ir``.

Why not llvmlite.ir: its objects print through layers of ``str.format``; tracing and printing a
MobileNetV2's 18 kernel modules held the GIL for 100-150 ms of Python in the background builder,
and the caller's calls waited for it about as long (its calls need the GIL between their NumPy
kernels). Here each instruction is one line of text when it is made: about a fifth of the time.

The API is the subset of llvmlite.ir's that dsl and pycall use, with its meaning: types, constants,
a module of functions (defined or declared) and global variables, basic blocks, and an IRBuilder
whose methods append one instruction each and return its value. Pointers are typed (``float*``),
as llvmlite.ir writes them and LLVM's parser reads them. Names are numbered per function
(``%.N``), blocks named by the caller and made unique, so the same trace is the same text in
every process (the disk cache is keyed by the text: engine).
"""
from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["Argument", "Block", "Constant", "DoubleType", "FloatType", "Function", "FunctionType",
           "GlobalVariable", "IRBuilder", "IntType", "Module", "PointerType", "Type", "Undefined", "Value",
           "VectorType", "VoidType"]


# -- types -------------------------------------------------------------------------------------------

class Type:
    """An LLVM type: its text; equal types have equal text."""

    __slots__ = ("text", "intrinsic_name")

    def __init__(self, text: str, intrinsic_name: str = ""):
        self.text, self.intrinsic_name = text, intrinsic_name

    def as_pointer(self) -> PointerType:
        return PointerType(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Type) and other.text == self.text

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.text)

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


class IntType(Type):
    __slots__ = ("width",)

    def __init__(self, bits: int):
        super().__init__(f"i{bits}", f"i{bits}")
        self.width = bits


class FloatType(Type):
    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("float", "f32")


class DoubleType(Type):
    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("double", "f64")


class VoidType(Type):
    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("void")


class VectorType(Type):
    __slots__ = ("element", "count")

    def __init__(self, element: Type, count: int):
        super().__init__(f"<{count} x {element.text}>", f"v{count}{element.intrinsic_name}")
        self.element, self.count = element, count


class PointerType(Type):
    __slots__ = ("pointee",)

    def __init__(self, pointee: Type):
        super().__init__(f"{pointee.text}*", f"p0{pointee.intrinsic_name}")
        self.pointee = pointee


class FunctionType:
    def __init__(self, return_type: Type, args: Sequence[Type]):
        self.return_type, self.args = return_type, list(args)


# -- values ------------------------------------------------------------------------------------------

class Value:
    """A value of a function: its type and how an instruction refers to it (``%.7``, ``1.0``...)."""

    __slots__ = ("type", "ref")

    def __init__(self, type_: Type, ref: str):
        self.type, self.ref = type_, ref


class _Undefined:
    """``Constant(t, Undefined)``: LLVM's undef."""


Undefined = _Undefined()


def _constant_text(t: Type, value: Any) -> str:
    if value is Undefined:
        return "undef"
    if isinstance(t, PointerType):
        if value is not None:
            raise ValueError("a pointer constant other than null")
        return "null"
    if isinstance(t, VectorType):
        parts = [v if isinstance(v, Constant) else Constant(t.element, v) for v in value]
        return "<" + ", ".join(f"{p.type.text} {p.ref}" for p in parts) + ">"
    if isinstance(t, (FloatType, DoubleType)):
        # LLVM reads a float's constant as a double's bits, which must be a float's exactly
        return f"0x{struct.unpack('<Q', struct.pack('<d', float(value)))[0]:016X}"
    if isinstance(t, IntType):
        if t.width == 1:
            return "true" if value else "false"
        return str(int(value))
    raise ValueError(f"a constant of type {t}")


class Constant(Value):
    __slots__ = ()

    def __init__(self, type_: Type, value: Any):
        super().__init__(type_, _constant_text(type_, value))


class Argument(Value):
    __slots__ = ("attributes",)

    def __init__(self, type_: Type, ref: str):
        super().__init__(type_, ref)
        self.attributes: list[str] = []

    def add_attribute(self, attribute: str) -> None:
        self.attributes.append(attribute)


# -- modules, functions, blocks ---------------------------------------------------------------------------

class Module:
    """Functions and global variables, printed in the order they were made."""

    def __init__(self, name: str = ""):
        self.name = name
        self.globals: dict[str, Any] = {}

    def get_global(self, name: str) -> Any:
        return self.globals[name]    # KeyError when there is none

    def declare_intrinsic(self, intrinsic: str, tys: Sequence[Type] = (), fnty: FunctionType | None = None) -> Function:
        name = ".".join([intrinsic, *(t.intrinsic_name for t in tys)])
        if name in self.globals:
            return self.globals[name]
        if fnty is None:
            if len(tys) != 1:
                raise NotImplementedError(f"the type of intrinsic {intrinsic!r}")
            fnty = FunctionType(tys[0], list(tys))
        return Function(self, fnty, name)

    def __str__(self) -> str:
        lines = [f'; ModuleID = "{self.name}"', 'target triple = "unknown-unknown-unknown"',
                 'target datalayout = ""', ""]
        lines.extend(g.text() for g in self.globals.values())
        return "\n".join(lines) + "\n"

    __repr__ = __str__


class GlobalVariable(Value):
    __slots__ = ("module", "name", "value_type", "initializer")

    def __init__(self, module: Module, type_: Type, name: str):
        super().__init__(type_.as_pointer(), f'@"{name}"')
        self.module, self.name, self.value_type = module, name, type_
        self.initializer: Constant | None = None
        module.globals[name] = self

    def text(self) -> str:
        init = self.initializer.ref if self.initializer is not None else "zeroinitializer"
        return f"{self.ref} = global {self.value_type.text} {init}"


class Function(Value):
    __slots__ = ("module", "name", "ftype", "args", "blocks", "_labels", "_count")

    def __init__(self, module: Module, ftype: FunctionType, name: str):
        super().__init__(ftype.return_type, f'@"{name}"')   # (the type a call of it has)
        self.module, self.name, self.ftype = module, name, ftype
        self._count = 0
        self.args = [Argument(t, self._name()) for t in ftype.args]
        self.blocks: list[Block] = []
        self._labels: set[str] = set()
        module.globals[name] = self

    def _name(self) -> str:
        self._count += 1
        return f"%.{self._count}"

    def append_basic_block(self, name: str = "") -> Block:
        label, n = name or "b", 0
        while label in self._labels:
            n += 1
            label = f"{name or 'b'}.{n}"
        self._labels.add(label)
        block = Block(self, label)
        self.blocks.append(block)
        return block

    def text(self) -> str:
        ret = self.ftype.return_type.text
        if not self.blocks:
            return f"declare {ret} {self.ref}({', '.join(t.text for t in self.ftype.args)})\n"
        params = ", ".join(" ".join([a.type.text, *a.attributes, a.ref]) for a in self.args)
        body = "".join(f'"{b.name}":\n' + "".join(b.instructions) for b in self.blocks)
        return f"define {ret} {self.ref}({params})\n{{\n{body}}}\n"


class Block:
    __slots__ = ("function", "name", "instructions", "is_terminated", "ref")

    def __init__(self, function: Function, name: str):
        self.function, self.name = function, name
        self.ref = f'%"{name}"'
        self.instructions: list[str] = []
        self.is_terminated = False


# -- the builder --------------------------------------------------------------------------------------

_FCMP_ORDERED = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "one",
                 "ord": "ord", "uno": "uno"}
_FCMP_UNORDERED = {"<": "ult", "<=": "ule", ">": "ugt", ">=": "uge", "==": "ueq", "!=": "une",
                   "ord": "ord", "uno": "uno"}
_ICMP_SIGNED = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}
_ICMP_UNSIGNED = {"<": "ult", "<=": "ule", ">": "ugt", ">=": "uge", "==": "eq", "!=": "ne"}
_BOOL = IntType(1)


class IRBuilder:
    """Appends instructions at the end of a block (``position_at_end``)."""

    def __init__(self, block: Block | None = None):
        self._block: Block | None = block

    @property
    def block(self) -> Block:
        assert self._block is not None
        return self._block

    basic_block = block

    @property
    def function(self) -> Function:
        return self.block.function

    def position_at_end(self, block: Block) -> None:
        self._block = block

    def append_basic_block(self, name: str = "") -> Block:
        return self.function.append_basic_block(name)

    def _emit(self, type_: Type, text: str) -> Value:
        block = self.block
        ref = block.function._name()
        block.instructions.append(f"  {ref} = {text}\n")
        return Value(type_, ref)

    def _do(self, text: str, terminates: bool = False) -> None:
        block = self.block
        block.instructions.append(f"  {text}\n")
        if terminates:
            block.is_terminated = True

    # arithmetic
    def _binary(self, op: str, a: Value, b: Value, flags: Sequence[str] = ()) -> Value:
        head = " ".join([op, *flags])
        return self._emit(a.type, f"{head} {a.type.text} {a.ref}, {b.ref}")

    def fadd(self, a: Value, b: Value) -> Value: return self._binary("fadd", a, b)
    def fsub(self, a: Value, b: Value) -> Value: return self._binary("fsub", a, b)
    def fmul(self, a: Value, b: Value) -> Value: return self._binary("fmul", a, b)
    def fdiv(self, a: Value, b: Value) -> Value: return self._binary("fdiv", a, b)
    def add(self, a: Value, b: Value, flags: Sequence[str] = ()) -> Value: return self._binary("add", a, b, flags)
    def sub(self, a: Value, b: Value, flags: Sequence[str] = ()) -> Value: return self._binary("sub", a, b, flags)
    def mul(self, a: Value, b: Value, flags: Sequence[str] = ()) -> Value: return self._binary("mul", a, b, flags)
    def frem(self, a: Value, b: Value) -> Value: return self._binary("frem", a, b)
    def sdiv(self, a: Value, b: Value) -> Value: return self._binary("sdiv", a, b)
    def srem(self, a: Value, b: Value) -> Value: return self._binary("srem", a, b)
    def udiv(self, a: Value, b: Value) -> Value: return self._binary("udiv", a, b)
    def urem(self, a: Value, b: Value) -> Value: return self._binary("urem", a, b)
    def lshr(self, a: Value, b: Value) -> Value: return self._binary("lshr", a, b)
    def and_(self, a: Value, b: Value) -> Value: return self._binary("and", a, b)
    def or_(self, a: Value, b: Value) -> Value: return self._binary("or", a, b)
    def xor(self, a: Value, b: Value) -> Value: return self._binary("xor", a, b)
    def shl(self, a: Value, b: Value) -> Value: return self._binary("shl", a, b)
    def ashr(self, a: Value, b: Value) -> Value: return self._binary("ashr", a, b)

    def fneg(self, a: Value) -> Value:
        return self._emit(a.type, f"fneg {a.type.text} {a.ref}")

    def neg(self, a: Value) -> Value:
        return self.sub(Constant(a.type, 0), a)

    def not_(self, a: Value) -> Value:
        ones = Constant(a.type, (-1,) * a.type.count) if isinstance(a.type, VectorType) else Constant(a.type, -1)
        return self.xor(a, ones)

    # comparisons and choices
    def _compare(self, op: str, a: Value, b: Value) -> Value:
        t = VectorType(_BOOL, a.type.count) if isinstance(a.type, VectorType) else _BOOL
        return self._emit(t, f"{op} {a.type.text} {a.ref}, {b.ref}")

    def fcmp_ordered(self, op: str, a: Value, b: Value) -> Value:
        return self._compare(f"fcmp {_FCMP_ORDERED[op]}", a, b)

    def fcmp_unordered(self, op: str, a: Value, b: Value) -> Value:
        return self._compare(f"fcmp {_FCMP_UNORDERED[op]}", a, b)

    def icmp_signed(self, op: str, a: Value, b: Value) -> Value:
        return self._compare(f"icmp {_ICMP_SIGNED[op]}", a, b)

    def icmp_unsigned(self, op: str, a: Value, b: Value) -> Value:
        return self._compare(f"icmp {_ICMP_UNSIGNED[op]}", a, b)

    def select(self, cond: Value, a: Value, b: Value) -> Value:
        return self._emit(a.type, f"select {cond.type.text} {cond.ref}, {a.type.text} {a.ref}, {b.type.text} {b.ref}")

    # conversions
    def _cast(self, op: str, a: Value, to: Type) -> Value:
        return self._emit(to, f"{op} {a.type.text} {a.ref} to {to.text}")

    def fpext(self, a: Value, to: Type) -> Value: return self._cast("fpext", a, to)
    def fptrunc(self, a: Value, to: Type) -> Value: return self._cast("fptrunc", a, to)
    def uitofp(self, a: Value, to: Type) -> Value: return self._cast("uitofp", a, to)
    def sitofp(self, a: Value, to: Type) -> Value: return self._cast("sitofp", a, to)
    def fptosi(self, a: Value, to: Type) -> Value: return self._cast("fptosi", a, to)
    def zext(self, a: Value, to: Type) -> Value: return self._cast("zext", a, to)
    def sext(self, a: Value, to: Type) -> Value: return self._cast("sext", a, to)
    def trunc(self, a: Value, to: Type) -> Value: return self._cast("trunc", a, to)
    def bitcast(self, a: Value, to: Type) -> Value: return self._cast("bitcast", a, to)

    # memory
    def alloca(self, t: Type, size: Value | None = None) -> Value:
        count = f", {size.type.text} {size.ref}" if size is not None else ""
        return self._emit(t.as_pointer(), f"alloca {t.text}{count}")

    def load(self, pointer: Value, align: int | None = None) -> Value:
        t = pointer.type.pointee   # type: ignore[attr-defined]
        tail = f", align {align}" if align else ""
        return self._emit(t, f"load {t.text}, {pointer.type.text} {pointer.ref}{tail}")

    def store(self, value: Value, pointer: Value, align: int | None = None) -> None:
        tail = f", align {align}" if align else ""
        self._do(f"store {value.type.text} {value.ref}, {pointer.type.text} {pointer.ref}{tail}")

    def gep(self, pointer: Value, indices: Sequence[Value], inbounds: bool = False) -> Value:
        if len(indices) != 1:
            raise NotImplementedError("getelementptr of one index")
        t = pointer.type.pointee   # type: ignore[attr-defined]
        i = indices[0]
        kind = "getelementptr inbounds" if inbounds else "getelementptr"
        return self._emit(pointer.type, f"{kind} {t.text}, {pointer.type.text} {pointer.ref}, {i.type.text} {i.ref}")

    # vectors
    def insert_element(self, vector: Value, value: Value, index: Value) -> Value:
        return self._emit(vector.type, f"insertelement {vector.type.text} {vector.ref}, {value.type.text} "
                                       f"{value.ref}, {index.type.text} {index.ref}")

    def shuffle_vector(self, a: Value, b: Value, mask: Constant) -> Value:
        t = VectorType(a.type.element, mask.type.count)   # type: ignore[attr-defined]
        return self._emit(t, f"shufflevector {a.type.text} {a.ref}, {b.type.text} {b.ref}, {mask.type.text} {mask.ref}")

    # calls and control
    def call(self, fn: Function, args: Sequence[Value]) -> Value:
        ret = fn.ftype.return_type
        text = f"call {ret.text} {fn.ref}({', '.join(f'{a.type.text} {a.ref}' for a in args)})"
        if isinstance(ret, VoidType):
            self._do(text)
            return Value(ret, "")
        return self._emit(ret, text)

    def branch(self, target: Block) -> None:
        self._do(f"br label {target.ref}", True)

    def cbranch(self, cond: Value, then: Block, otherwise: Block) -> None:
        self._do(f"br i1 {cond.ref}, label {then.ref}, label {otherwise.ref}", True)

    def ret(self, value: Value) -> None:
        self._do(f"ret {value.type.text} {value.ref}", True)

    def ret_void(self) -> None:
        self._do("ret void", True)

    @contextlib.contextmanager
    def if_then(self, pred: Value) -> Iterator[Block]:
        """The block after it runs only where ``pred`` holds (then joins, unless it branched away)."""
        here = self.block.name
        then, after = self.append_basic_block(f"{here}.if"), self.append_basic_block(f"{here}.endif")
        self.cbranch(pred, then, after)
        self.position_at_end(then)
        yield after
        if not self.block.is_terminated:
            self.branch(after)
        self.position_at_end(after)
