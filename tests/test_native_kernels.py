"""gradreg's native kernels (gradreg.backends.native): the traced loops, the math library
and the fused elementwise groups agree with numba's and NumPy's.

The float32 math functions are the numba math library's polynomials traced again: they must
give the same bits. Fused groups of the ops with a native form are built with numba's path
made to fail, so each test fails if a group did not take the native one.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradreg as gr
from gradreg.backends import native
from gradreg.backends.numba import kernels
from gradreg.backends.numba.codegen import static_states

pytestmark = pytest.mark.skipif(not native.available(), reason="llvmlite missing")

from gradreg.backends.native import dsl, fused  # noqa: E402
from tests.test_numba_kernels import SPECIAL, assert_same, binary_values, build, run_both, values  # noqa: E402

# The ops whose templates have a native form: every one test_numba_kernels checks.
UNARY = ["Neg", "Abs", "Square", "Sqrt", "Exp", "Expm1", "Log", "Log1p", "Tanh", "Sin", "Cos", "Tan", "Asin",
         "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Erf", "Erfc", "Lgamma", "Floor", "Ceil",
         "Rint", "Round", "Reciprocal", "Inv", "IsFinite", "IsNan", "IsInf", "Sign", "Rsqrt", "Sigmoid", "Relu",
         "Relu6", "Elu", "Selu", "Softplus", "Softsign"]
BINARY = ["AddV2", "Add", "Sub", "Mul", "Div", "RealDiv", "Maximum", "Minimum", "Atan2", "Pow", "TruncateMod", "Mod",
          "Less", "LessEqual", "Greater", "GreaterEqual", "Equal", "NotEqual", "FloorDiv", "TruncateDiv", "FloorMod",
          "SquaredDifference", "DivNoNan", "MulNoNan", "Xlogy", "Xdivy", "Xlog1py", "ReluGrad", "Relu6Grad",
          "EluGrad", "SeluGrad", "SoftplusGrad", "SoftsignGrad"]
SAME_SHAPE_BINARY = ["TanhGrad", "SigmoidGrad", "SqrtGrad", "RsqrtGrad", "ReciprocalGrad", "InvGrad"]


@pytest.fixture
def native_only(monkeypatch):
    """numba's path fails: a group that did not take the native one fails the test."""
    def refuse(source):
        raise AssertionError("a fused group went to numba")
    monkeypatch.setattr(kernels, "load_kernel", refuse)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_ops_fused_natively_agree_with_numpy(dtype, native_only):
    graph = gr.Graph()
    (x,), ops = build(graph, UNARY, 1, dtype)
    for feed in (values(dtype, 3000, 1), np.zeros(0, dtype), values(dtype, 10, 2).reshape(4, 8)):
        group, got, expected = run_both(ops, [x], [feed])
        assert_same(ops, got, expected, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binary_ops_fused_natively_agree_with_numpy(dtype, native_only):
    graph = gr.Graph()
    (x, y), ops = build(graph, BINARY, 2, dtype)
    a, b = binary_values(dtype)
    for feeds in [(a, b), (a, np.asarray(b[5])), (np.asarray(a[7]), b), (np.asarray(dtype(0)), b)]:
        group, got, expected = run_both(ops, [x, y], list(feeds))
        assert_same(ops, got, expected, dtype)
    (x, y), ops = build(gr.Graph(), SAME_SHAPE_BINARY, 2, dtype)
    group, got, expected = run_both(ops, [x, y], [a, b])
    assert_same(ops, got, expected, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_static_chain_with_a_row_runs_natively_in_parts(dtype, native_only):
    """A layer's BiasAdd + Relu6 + Mul of static shapes: the static loop, its outer dim split in
    parts (lo, hi) as the kernel threads call it, equals NumPy's."""
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.as_dtype(dtype), (6, 5, 7), name="x")
        bias = gr.placeholder(gr.as_dtype(dtype), (7,), name="bias")
        scale = gr.placeholder(gr.as_dtype(dtype), (), name="scale")
        a = gr.apply_op("BiasAdd", x, bias, name="a")
        r = gr.apply_op("Relu6", a, name="r")
        m = gr.apply_op("Mul", r, scale, name="m")
    ops = [a.op, r.op, m.op]
    rng = np.random.default_rng(0)
    feeds = [(rng.standard_normal((6, 5, 7)) * 4).astype(dtype), rng.standard_normal(7).astype(dtype),
             np.asarray(dtype(1.5))]
    group, got, expected = run_both(ops, [x, bias, scale], feeds)
    assert_same(ops, got, expected, dtype)
    state = static_states(group)
    assert state is not None
    loop = fused.static_loop(group, state)
    outs = [np.full((6, 5, 7), np.nan, dtype) for _ in group.outputs]
    by_tensor = dict(zip([x, bias, scale], feeds))
    args = [by_tensor[t] if t is not scale else dtype(1.5) for t in group.inputs]
    for lo, hi in [(0, 2), (2, 3), (3, 6)]:
        loop(lo, hi, 5, 7, *args, *outs)
    for t, out in zip(group.outputs, outs):
        np.testing.assert_array_equal(out, got[t])


def _map_kernel(name: str, dtype):
    k = dsl.Kernel("f")
    x = k.array(dtype, 1)
    out = k.array(dtype, 1)
    for i in k.range(x.shape[0]):
        out[i] = fused._FUNCTIONS[name](k, x[i])
    return k.compile()


MATH = {"exp": "exp_f32", "log": "log_f32", "expm1": "expm1_f32", "log1p": "log1p_f32", "tanh": "tanh_f32",
        "sigmoid": "sigmoid_f32"}


@pytest.mark.parametrize("name", sorted(MATH))
def test_float32_math_gives_the_bits_of_numbas(name):
    numba = pytest.importorskip("numba")
    from gradreg.backends.numba import mathlib
    scalar = getattr(mathlib, MATH[name])

    @numba.njit
    def reference(x, out):
        for i in range(x.shape[0]):
            out[i] = scalar(x[i])
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(20000) * rng.choice([1e-3, 0.3, 1.0, 10.0, 100.0], 20000),
                        np.array(SPECIAL), np.array([1e-40, -1e-40, 1.1754944e-38, 0.625, -0.625, 0.3, -0.3,
                                                     88.72284, 88.72285, -103.97208, -103.9721])]).astype(np.float32)
    got, want = np.empty_like(x), np.empty_like(x)
    _map_kernel(name, np.float32)(x, got)
    reference(x, want)
    np.testing.assert_array_equal(got.view(np.int32)[~np.isnan(want)], want.view(np.int32)[~np.isnan(want)])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("name, numpy", [("exp", np.exp), ("log", np.log), ("expm1", np.expm1),
                                         ("log1p", np.log1p), ("tanh", np.tanh)])
def test_float64_math_is_the_c_librarys(name, numpy):
    x = values(np.float64, 5000, 3)
    got = np.empty_like(x)
    _map_kernel(name, np.float64)(x, got)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(got, numpy(x), rtol=1e-15, atol=0, equal_nan=True)


def test_a_kernel_checks_its_arguments_and_refuses_mixed_types():
    k = dsl.Kernel("add_one")
    x = k.array(np.float32, 2)
    out = k.array(np.float32, 2)
    for i in k.range(x.shape[0]):
        for j in k.range(x.shape[1]):
            out[i, j] = x[i, j] + 1.0
    add_one = k.compile()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.empty_like(a)
    add_one(a, b)
    np.testing.assert_array_equal(b, a + 1)
    with pytest.raises(TypeError, match="float32, 2-d"):
        add_one(a.astype(np.float64), b)
    with pytest.raises(TypeError, match="float32, 2-d"):
        add_one(a.reshape(-1), b)
    with pytest.raises(ValueError, match="contiguous"):
        add_one(a[:, ::2], b[:, :2])     # not contiguous: refused, never read as if it were
    k = dsl.Kernel("mixed")
    x = k.array(np.float32, 1)
    y = k.array(np.float64, 1)
    with pytest.raises(dsl.Unsupported, match="f32 and f64"):
        x[0] + y[0]


def test_bool_arrays_and_vars():
    """A bool array read and written (NumPy's one byte per value), a running sum in a var."""
    k = dsl.Kernel("count")
    mask = k.array(np.bool_, 1)
    x = k.array(np.float64, 1)
    out = k.array(np.bool_, 1)
    total = k.array(np.float64, 1)
    s = k.var(k.const(0.0, dsl.F64))
    for i in k.range(x.shape[0]):
        out[i] = ~mask[i] & (x[i] > 0.0)
        s.value = s.value + k.where(mask[i], x[i], 0.0)
    total[0] = s.value
    count = k.compile()
    rng = np.random.default_rng(1)
    m, v = rng.random(101) < 0.5, rng.standard_normal(101)
    o, t = np.empty(101, bool), np.zeros(1)
    count(m, v, o, t)
    np.testing.assert_array_equal(o, ~m & (v > 0))
    want = 0.0
    for keep, value in zip(m, v):
        want += value if keep else 0.0
    assert t[0] == want


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lanes", [1, 3, 4, 7, 10, 16, 20])
def test_vectors_of_any_lanes(dtype, lanes):
    """dsl.Vector: rows of ``lanes`` loaded, splat, multiplied and added (fma), summed and
    stored, in parts of powers of two lanes; the row after each is left alone."""
    k = dsl.Kernel(f"axpy{lanes}")
    a, x, out = k.array(dtype, 2), k.array(dtype, 2), k.array(dtype, 2)
    s = k.array(dtype, 1)
    vec = k.vector(dsl.type_of(dtype), lanes)
    assert sum(n for _, n in vec.parts) == lanes and all(n & (n - 1) == 0 for _, n in vec.parts)
    for i in k.range(a.shape[0]):
        total = vec.var(vec.zero())
        total.value = vec.fma(vec.splat(s[i]), vec.load(x, i, 0), vec.load(a, i, 0))
        vec.store(vec.add(total.value, vec.load(a, i, 0)), out, i, 0)
    run = k.compile()
    rng = np.random.default_rng(5)
    av, xv, sv = (rng.standard_normal(shape).astype(dtype) for shape in ((6, lanes), (6, lanes), (6,)))
    result = np.full((6, lanes), 9.0, dtype)
    run(av, xv, result, sv)
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(result, sv[:, None] * xv + 2 * av, rtol=tol, atol=tol)
    wide = np.full((7, lanes), 9.0, dtype)          # one row more than the loop's: left as it was
    run(av, xv, wide[:6], sv)
    assert (wide[6] == 9.0).all()
    with pytest.raises(dsl.Unsupported):
        k2 = dsl.Kernel("bad")
        k2.vector(dsl.I64, 4)


def test_a_kernel_traced_again_is_the_same_ir():
    """Its machine code is found in the disk cache by a hash of its IR: the IR must not depend
    on what the process traced before (block names are numbered within the kernel)."""
    def trace():
        k = dsl.Kernel("twice")
        x = k.array(np.float64, 2)
        for i in k.range(x.shape[0]):
            with k.if_(x[i, 0] > 0.0):
                for j in k.range(x.shape[1]):
                    x[i, j] = x[i, j] * 2.0
        return k.ir_source()
    first = trace()
    _map_kernel("exp", np.float32)          # another kernel traced in between
    assert trace() == first


def test_a_kernel_compiled_without_the_unroller_computes_the_same_and_is_cached_apart(tmp_path, monkeypatch):
    """``unroll=False`` (the direct convolutions') leaves LLVM's loop unroller out: the same
    values, and machine code kept under another name in the disk cache, so that a kernel
    compiled one way is never loaded for the other."""
    from gradreg.backends.native import engine
    monkeypatch.setenv("GRADREG_CACHE_DIR", str(tmp_path))

    def axpy(unroll: bool):
        k = dsl.Kernel("axpy_unroll" if unroll else "axpy_no_unroll", distinct=True, unroll=unroll)
        x, y = k.array(np.float64, 1), k.array(np.float64, 1)
        a = k.scalar(np.float64)
        for i in k.range(x.shape[0]):
            y[i] = y[i] + a * x[i]
        return k

    x = np.linspace(-3.0, 5.0, 1001)
    results = []
    for unroll in (True, False):
        y = np.cos(x)
        axpy(unroll).compile()(x, y, 0.75)
        results.append(y)
    np.testing.assert_array_equal(results[0], np.cos(x) + 0.75 * x)
    np.testing.assert_array_equal(results[1], results[0])
    source = axpy(True).ir_source()
    assert engine._cache_path(source, unroll=False) != engine._cache_path(source)
    assert engine._pass_builder(False)[1].loop_unrolling is False
    assert engine._pass_builder(True)[1].loop_unrolling is True
    assert len(list((tmp_path / "native").rglob("*.o"))) == 2


def test_the_entry_reads_arrays_itself_and_leaves_the_rest_to_the_wrapper():
    """Where NumPy's struct layout holds (pycall.layout_ok), a kernel is a builtin function
    that reads its arguments in machine code; a subclass, another byte order, a bad int or
    float goes to the ctypes wrapper, which converts it or raises its error."""
    from gradreg.backends.native import pycall
    k = dsl.Kernel("axpy")
    x, y = k.array(np.float64, 1), k.array(np.float64, 1)
    a, n = k.scalar(np.float32), k.int_param()
    for i in k.range(n):
        y[i] = y[i] + x[i] * a.cast(dsl.F64)
    axpy = k.compile()
    if pycall.layout_ok():
        assert type(axpy).__name__ == "builtin_function_or_method"
    x_, y_ = np.arange(5.0), np.ones(5)
    axpy(x_, y_, np.float32(0.5), np.int64(4))
    np.testing.assert_array_equal(y_, [1.0, 1.5, 2.0, 2.5, 1.0])

    class Sub(np.ndarray):
        pass
    axpy(x_.view(Sub), y_, 2.0, 5)               # a subclass: the wrapper takes its buffer
    np.testing.assert_array_equal(y_, [1.0, 3.5, 6.0, 8.5, 9.0])
    with pytest.raises(TypeError, match="float64, 1-d"):
        axpy(x_.astype(">f8"), y_, 2.0, 5)       # another byte order: refused, not misread
    with pytest.raises(TypeError):
        axpy(x_, y_, 2.0, 2.5)                   # an int parameter given a float
    with pytest.raises(TypeError):
        axpy(x_, y_, "two", 5)
    with pytest.raises(TypeError):
        axpy(x_, y_, 2.0)                        # an argument missing
    with pytest.raises(ValueError, match="contiguous"):
        axpy(x_[::2], y_[:3], 2.0, 3)
    np.testing.assert_array_equal(y_, [1.0, 3.5, 6.0, 8.5, 9.0])     # untouched by the refusals


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_float32_sin_and_cos_give_the_bits_of_numbas_and_its_second_pass(name):
    """Within |x| <= 1024 the polynomials are numba mathlib's, bit for bit; a loop that met a
    larger or non-finite argument computes again with the C library's, as numba's loops do."""
    numba = pytest.importorskip("numba")
    from gradreg.backends.numba import mathlib
    scalar = getattr(mathlib, f"{name}_f32")

    @numba.njit
    def reference(x, out):
        for i in range(x.shape[0]):
            out[i] = scalar(x[i])

    def kernel(exact):
        k = dsl.Kernel(f"{name}_{exact}")
        x, out = k.array(np.float32, 1), k.array(np.float32, 1)
        for i in k.range(x.shape[0]):
            out[i] = fused.lower(k, "{" + name + "}({0})", np.float32, (), [x[i]], exact)
        return k.compile()
    rng = np.random.default_rng(3)
    x = (rng.uniform(-1024, 1024, 20000) * rng.choice([1e-3, 0.1, 1.0], 20000)).astype(np.float32)
    x[:4] = [0.0, -0.0, 1024.0, -1024.0]
    got, want = np.empty_like(x), np.empty_like(x)
    kernel(False)(x, got)
    reference(x, want)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
    kernel(True)(x, got)                       # the C library's sinf / cosf
    np.testing.assert_allclose(got, getattr(np, name)(x), rtol=2e-6, atol=1e-7)
