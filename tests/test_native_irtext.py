"""The native kernels' IR text writer (gradreg.backends.native.irtext): what it writes, and that
LLVM reads it and computes what it says (the kernels' own tests cover the tracer on top)."""
import ctypes
import math

import numpy as np
import pytest

from gradreg.backends.native import irtext as ir

F32, F64, I64, I1 = ir.FloatType(), ir.DoubleType(), ir.IntType(64), ir.IntType(1)


def test_constants_are_exact_text():
    # a float's constant is the double of its value's bits: 0.1 in float32 is not 0.1 in float64
    assert ir.Constant(F32, float(np.float32(0.1))).ref == "0x3FB99999A0000000"
    assert ir.Constant(F64, 0.1).ref == "0x3FB999999999999A"
    assert ir.Constant(F64, -0.0).ref == "0x8000000000000000"
    assert ir.Constant(F64, math.inf).ref == "0x7FF0000000000000"
    assert ir.Constant(I1, 1).ref == "true" and ir.Constant(I1, 0).ref == "false"
    assert ir.Constant(I64, -3).ref == "-3"
    assert ir.Constant(I64.as_pointer(), None).ref == "null"
    assert ir.Constant(ir.VectorType(ir.IntType(32), 2), [0, 1]).ref == "<i32 0, i32 1>"
    assert ir.Constant(ir.VectorType(F32, 2), ir.Undefined).ref == "undef"


def test_types_compare_by_text_and_name_intrinsics():
    assert ir.DoubleType() == F64 and F32 != F64
    assert ir.VectorType(F32, 8).text == "<8 x float>" and F32.as_pointer().text == "float*"
    module = ir.Module("m")
    fabs = module.declare_intrinsic("llvm.fabs", [F32], ir.FunctionType(F32, [F32]))
    assert fabs.name == "llvm.fabs.f32"
    assert module.declare_intrinsic("llvm.fabs", [F32]) is fabs     # declared once
    assert module.declare_intrinsic("llvm.fabs", [ir.VectorType(F64, 4)]).name == "llvm.fabs.v4f64"
    with pytest.raises(KeyError):
        module.get_global("missing")


def test_block_names_are_unique_and_terminators_are_tracked():
    module = ir.Module("m")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), []), "f")
    first, second = fn.append_basic_block("ok"), fn.append_basic_block("ok")
    assert (first.name, second.name) == ("ok", "ok.1")
    b = ir.IRBuilder(first)
    assert not first.is_terminated
    b.branch(second)
    assert first.is_terminated
    b.position_at_end(second)
    b.ret_void()
    assert 'define void @"f"()' in str(module) and 'br label %"ok.1"' in str(module)


def _compile(module: ir.Module, name: str, restype, argtypes):
    from gradreg.backends.native import engine
    if not engine.available():
        pytest.skip("LLVM (llvmlite) is not available")
    address = engine.compile_ir(str(module), [name])[name]
    return ctypes.CFUNCTYPE(restype, *argtypes)(address)


def test_llvm_reads_the_text_and_computes_it():
    # f(x, y) = select(x != x, 7.0, fmod(x, y) + |x|), and g(p, n) = p[0] + ... + p[n-1] via a loop
    module = ir.Module("irtext_demo")
    f = ir.Function(module, ir.FunctionType(F64, [F64, F64]), "f")
    x, y = f.args
    b = ir.IRBuilder(f.append_basic_block("entry"))
    fabs = module.declare_intrinsic("llvm.fabs", [F64])
    value = b.fadd(b.frem(x, y), b.call(fabs, [x]))
    b.ret(b.select(b.fcmp_unordered("!=", x, x), ir.Constant(F64, 7.0), value))

    g = ir.Function(module, ir.FunctionType(F64, [F64.as_pointer(), I64]), "g")
    p, n = g.args
    p.add_attribute("noalias")
    entry, loop, body, done = (g.append_basic_block(s) for s in ("entry", "loop", "body", "done"))
    b = ir.IRBuilder(entry)
    i_slot, acc_slot = b.alloca(I64), b.alloca(F64)
    b.store(ir.Constant(I64, 0), i_slot)
    b.store(ir.Constant(F64, 0.0), acc_slot)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.load(i_slot)
    b.cbranch(b.icmp_signed("<", i, n), body, done)
    b.position_at_end(body)
    b.store(b.fadd(b.load(acc_slot), b.load(b.gep(p, [i], inbounds=True), align=8)), acc_slot)
    b.store(b.add(i, ir.Constant(I64, 1), flags=["nsw"]), i_slot)
    b.branch(loop)
    b.position_at_end(done)
    b.ret(b.load(acc_slot))

    text = str(module)
    assert "noalias" in text and "getelementptr inbounds double" in text
    f_native = _compile(module, "f", ctypes.c_double, [ctypes.c_double, ctypes.c_double])
    assert f_native(-7.5, 2.0) == math.fmod(-7.5, 2.0) + 7.5
    assert f_native(math.nan, 2.0) == 7.0
    g_native = _compile(module, "g", ctypes.c_double, [ctypes.c_void_p, ctypes.c_int64])
    data = np.array([1.5, 2.25, -4.0, 8.0])
    assert g_native(data.ctypes.data, 4) == float(data.sum())
    assert g_native(data.ctypes.data, 0) == 0.0
