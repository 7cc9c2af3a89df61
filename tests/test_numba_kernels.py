"""The numba backend's kernels agree with the NumPy kernels.

Every elementwise description is compiled (many ops per kernel, to keep compiling
cheap) and run on random and special values, float32 and float64, arrays, scalars and
empty arrays; its outputs are compared with the op's NumPy kernel. The compiled
non-elementwise kernels (segment sums, bias, softmax) are compared the same way.
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

import gradreg as gr
from gradreg.backends.numba import description, kernels
from gradreg.registry import get_registry
from gradreg.registry.kernels import Tiered
from gradreg.runtime.context import SessionContext as KernelContext

pytest.importorskip("numba")

CTX = KernelContext()
TOLERANCE = {np.float32: dict(rtol=2e-6, atol=1e-30), np.float64: dict(rtol=1e-13, atol=1e-300)}
# gradreg's NumPy erf/erfc/lgamma are its own series; the fused loops call libm's.
SPECIAL_FUNCTIONS = {"Erf", "Erfc", "Lgamma"}
SPECIAL_TOLERANCE = {np.float32: dict(rtol=2e-6, atol=1e-12), np.float64: dict(rtol=1e-10, atol=1e-14)}

UNARY = ["Neg", "Abs", "Square", "Sqrt", "Exp", "Expm1", "Log", "Log1p", "Tanh", "Sin", "Cos", "Tan", "Asin",
         "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Floor", "Ceil", "Rint", "Round",
         "Reciprocal", "Inv", "IsFinite", "IsNan", "IsInf", "Sign", "Rsqrt", "Sigmoid", "Erf", "Erfc", "Lgamma",
         "Relu", "Relu6", "Elu", "Selu", "Softplus", "Softsign"]
BINARY = ["AddV2", "Add", "Sub", "Mul", "Div", "RealDiv", "Maximum", "Minimum", "Atan2", "Pow", "TruncateMod",
          "Mod", "Less", "LessEqual", "Greater", "GreaterEqual", "Equal", "NotEqual", "FloorDiv", "TruncateDiv",
          "FloorMod", "SquaredDifference", "DivNoNan", "MulNoNan", "Xlogy", "Xdivy", "Xlog1py",
          "ReluGrad", "Relu6Grad", "EluGrad", "SeluGrad", "SoftplusGrad", "SoftsignGrad"]
SAME_SHAPE_BINARY = ["TanhGrad", "SigmoidGrad", "SqrtGrad", "RsqrtGrad", "ReciprocalGrad", "InvGrad"]
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 6.0, 1e-30, -1e-30, 1e-42, 88.7, 89.0, -103.0, -104.0, 710.0,
           -745.0, 1e30, -1e30, np.inf, -np.inf, np.nan]


def values(dtype, n: int, seed: int) -> np.ndarray:
    """Random values of several scales, then the special ones."""
    rng = np.random.default_rng(seed)
    scales = rng.choice([0.01, 1.0, 3.0, 30.0], size=n)
    random = rng.standard_normal(n) * scales
    return np.concatenate([random, SPECIAL]).astype(dtype)


def build(graph, op_types, arity: int, dtype, **attrs):
    """One node per op type, all reading the same placeholders."""
    with graph.as_default():
        inputs = [gr.placeholder(gr.as_dtype(dtype), None, name=f"in{i}") for i in range(arity)]
        ops = [gr.apply_op(t, *inputs, name=t, **attrs).op for t in op_types]
    return inputs, ops


def run_both(ops, inputs, feeds):
    """(fused outputs, NumPy outputs) of ``ops`` as one fused group on ``feeds``."""
    registry = get_registry()
    descriptions = [registry.kernel_factory(op.type, "numba")(op, CTX) for op in ops]
    assert all(isinstance(d, description.Elementwise) for d in descriptions), [op.type for op in ops]
    outputs = {op.outputs[0] for op in ops}
    group = kernels.FusedGroup(ops, descriptions, outputs, ops)
    values_of = dict(zip(inputs, feeds))
    with np.errstate(all="ignore"):   # as plans run
        fused = group.kernel.build()(*[values_of[t] for t in group.inputs])   # the compiled kernel
        expected = []
        for op, d in zip(ops, descriptions):
            expected.append(d.fallback(*[values_of[t] for t in op.inputs]))
            values_of[op.outputs[0]] = expected[-1]
    fused = fused if isinstance(fused, tuple) else (fused,)
    return group, dict(zip(group.outputs, fused)), expected


def assert_same(ops, fused, expected, dtype):
    for op, want in zip(ops, expected):
        got = fused[op.outputs[0]]
        assert got.dtype == np.asarray(want).dtype, op.type
        assert got.shape == np.shape(want), op.type
        if got.dtype == bool:
            np.testing.assert_array_equal(got, want, err_msg=op.type)
        else:
            tolerance = (SPECIAL_TOLERANCE if op.type in SPECIAL_FUNCTIONS else TOLERANCE)[dtype]
            np.testing.assert_allclose(got, want, equal_nan=True, err_msg=op.type, **tolerance)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_descriptions(dtype):
    graph = gr.Graph()
    (x,), ops = build(graph, UNARY, 1, dtype)
    for feed in (values(dtype, 3000, 1), np.zeros(0, dtype), values(dtype, 10, 2).reshape(4, 8)):
        group, fused, expected = run_both(ops, [x], [feed])
        assert_same(ops, fused, expected, dtype)
    # all inputs scalars: the NumPy kernels run (nothing to gain from a loop)
    group, fused, expected = run_both(ops, [x], [np.asarray(dtype(0.7))])
    assert_same(ops, fused, expected, dtype)


def binary_values(dtype):
    a, b = values(dtype, 2000, 3), values(dtype, 2000, 4)
    b[:40] = a[:40]   # equal values, for the comparisons and the zero divisors
    b[40:60] = 0
    return a, b


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binary_descriptions(dtype):
    graph = gr.Graph()
    (x, y), ops = build(graph, BINARY, 2, dtype)
    a, b = binary_values(dtype)
    for feeds in [(a, b), (np.zeros((0, 3), dtype), np.zeros((0, 3), dtype))]:
        group, fused, expected = run_both(ops, [x, y], list(feeds))
        assert_same(ops, fused, expected, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scalar_operands_broadcast(dtype):
    graph = gr.Graph()
    (x, y), ops = build(graph, ["Sub", "Pow", "Maximum", "Less", "DivNoNan", "FloorMod", "Xlogy", "ReluGrad"], 2,
                        dtype)
    a, b = binary_values(dtype)
    for feeds in [(a, np.asarray(b[5])), (np.asarray(a[7]), b), (np.asarray(dtype(0)), b), (a, np.asarray(dtype(0)))]:
        group, fused, expected = run_both(ops, [x, y], list(feeds))
        assert_same(ops, fused, expected, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_same_shape_descriptions(dtype):
    graph = gr.Graph()
    (y, dy), ops = build(graph, SAME_SHAPE_BINARY, 2, dtype)
    group, fused, expected = run_both(ops, [y, dy], [values(dtype, 500, 5), values(dtype, 500, 6)])
    assert_same(ops, fused, expected, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_descriptions_with_attrs_and_other_arities(dtype):
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.as_dtype(dtype), None, name="x")
        y = gr.placeholder(gr.as_dtype(dtype), None, name="y")
        z = gr.placeholder(gr.as_dtype(dtype), None, name="z")
        c = gr.placeholder(gr.bool, None, name="c")
        other = gr.float64 if dtype == np.float32 else gr.float32
        nodes = [
            gr.apply_op("LeakyRelu", x, alpha=0.3), gr.apply_op("LeakyReluGrad", x, y, alpha=0.1),
            gr.apply_op("ApproximateEqual", x, y, tolerance=0.5), gr.apply_op("AddN", [x, y, z]),
            gr.apply_op("ClipByValue", x, y, z), gr.apply_op("Select", c, x, y), gr.apply_op("SelectV2", c, x, y),
            gr.apply_op("Equal", x, y, incompatible_shape_error=False),
            gr.apply_op("Cast", x, DstT=other), gr.apply_op("Cast", x, DstT=gr.bool),
            gr.apply_op("Cast", c, DstT=gr.as_dtype(dtype)), gr.apply_op("LogicalNot", c),
            gr.apply_op("LogicalAnd", c, gr.apply_op("Less", x, y)),
            gr.apply_op("LogicalOr", c, gr.apply_op("Less", y, x)),
        ]
        ops = [t.op.inputs[1].op for t in nodes[-2:]] + [t.op for t in nodes]
    rng = np.random.default_rng(7)
    a = values(dtype, 300, 8)
    bound = np.abs(values(dtype, 300, 10))
    cond = rng.random(a.size) < 0.5
    group, fused, expected = run_both(ops, [x, y, z, c], [a, -bound, bound, cond])
    assert_same(ops, fused, expected, dtype)


def test_cast_with_truncation_stays_numpy():
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float64, None)
        cast = gr.apply_op("Cast", x, DstT=gr.float32, Truncate=True)
    assert get_registry().kernel_factory("Cast", "numba")(cast.op, CTX) is None


def test_half_types_are_not_fused():
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float16, None)
        node = gr.apply_op("Tanh", x)
    assert get_registry().kernel_factory("Tanh", "numba")(node.op, CTX) is None


def test_unfused_description_runs_the_numpy_kernel():
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, None)
        node = gr.apply_op("Exp", x)
    description = get_registry().kernel_factory("Exp", "numba")(node.op, CTX)
    value = np.linspace(-3, 3, 7, dtype=np.float32)
    np.testing.assert_array_equal(description(value), np.exp(value))


# -- compiled (non-elementwise) kernels --------------------------------------------------------

def kernels_of(node):
    """(the compiled kernel, the NumPy kernel) of a node: the numba factory's Tiered kernel, built."""
    registry = get_registry()
    tiered = registry.kernel_factory(node.op.type, "numba")(node.op, CTX)
    numpy_kernel = registry.kernel_factory(node.op.type, "numpy")(node.op, CTX)
    assert isinstance(tiered, Tiered)
    return tiered.build(), numpy_kernel


def assert_kernels_agree(node, *args, dtype=np.float32):
    numba_kernel, numpy_kernel = kernels_of(node)
    with np.errstate(all="ignore"):
        got, want = numba_kernel(*args), numpy_kernel(*args)
    assert got.dtype == want.dtype and got.shape == want.shape
    tolerance = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, want, equal_nan=True, **tolerance)


@pytest.fixture
def scattered(monkeypatch):
    """The dtypes of the rows the compiled scatter-add has run on (not only the NumPy kernel)."""
    from gradreg_plugins.math import numba_kernels
    seen = []
    original = numba_kernels._scatter

    def spy(data, *args):
        seen.append(data.dtype)
        return original(data, *args)
    monkeypatch.setattr(numba_kernels, "_scatter", spy)
    return seen


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_unsorted_segment_sum(dtype, scattered):
    rng = np.random.default_rng(11)
    graph = gr.Graph()
    with graph.as_default():
        data = gr.placeholder(gr.as_dtype(dtype), None)
        ids = gr.placeholder(gr.int32, None)
        num = gr.placeholder(gr.int32, [])
        node = gr.apply_op("UnsortedSegmentSum", data, ids, num)
    values_ = (rng.standard_normal((40, 6, 3)) * 10).astype(dtype)
    segment_ids = rng.integers(-2, 9, (40, 6)).astype(np.int32)   # negative ids are dropped
    assert_kernels_agree(node, values_, segment_ids, np.int32(9), dtype=dtype)
    assert_kernels_agree(node, values_[:, 0, 0], segment_ids[:, 0], np.int32(9), dtype=dtype)
    assert_kernels_agree(node, values_[:0], segment_ids[:0], np.int32(4), dtype=dtype)
    assert_kernels_agree(node, values_, segment_ids, np.int32(0) + 9, dtype=dtype)
    assert np.dtype(dtype) in scattered
    numba_kernel, _ = kernels_of(node)
    with pytest.raises(ValueError, match="out of range"):
        numba_kernel(values_, segment_ids, np.int32(5))


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_unsorted_segment_sum_of_rows_in_order(dtype, scattered):
    # ids 0, 1, ..., n - 1 (a loop gradient's rows of xs[t]): each segment is its row, no scatter;
    # ids almost in order, or fewer segments than ids, are scattered
    rng = np.random.default_rng(17)
    graph = gr.Graph()
    with graph.as_default():
        node = gr.apply_op("UnsortedSegmentSum", gr.placeholder(gr.as_dtype(dtype), None),
                           gr.placeholder(gr.int64, None), gr.placeholder(gr.int32, []))
    values_ = (rng.standard_normal((12, 4, 3)) * 10).astype(dtype)
    in_order = np.arange(12, dtype=np.int64)
    assert_kernels_agree(node, values_, in_order, np.int32(12), dtype=dtype)
    assert_kernels_agree(node, values_[:, :1], in_order.reshape(12, 1), np.int32(12), dtype=dtype)  # ids [12, 1]
    assert not scattered
    swapped = in_order.copy()
    swapped[[3, 4]] = swapped[[4, 3]]
    assert_kernels_agree(node, values_, swapped, np.int32(12), dtype=dtype)
    assert_kernels_agree(node, values_, in_order, np.int32(13), dtype=dtype)   # one more, empty segment
    assert len(scattered) == 2


@pytest.mark.parametrize("op_type", ["UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_unsorted_segment_max_min_prod(op_type, dtype):
    """Empty segments get TensorFlow's identity (lowest / max / 1), negative ids are dropped,
    a NaN in a segment stays."""
    rng = np.random.default_rng(14)
    graph = gr.Graph()
    with graph.as_default():
        node = gr.apply_op(op_type, gr.placeholder(gr.as_dtype(dtype), None), gr.placeholder(gr.int32, None),
                           gr.placeholder(gr.int32, []))
    values_ = (rng.standard_normal((40, 3, 2)) * (1.5 if op_type.endswith("Prod") else 10)).astype(dtype)
    segment_ids = rng.integers(-2, 12, (40, 3)).astype(np.int32)   # ids 0..11 of 14: some empty
    assert_kernels_agree(node, values_, segment_ids, np.int32(14), dtype=dtype)
    assert_kernels_agree(node, values_[:0], segment_ids[:0], np.int32(3), dtype=dtype)
    if np.dtype(dtype).kind == "f":
        values_[5, 1, 0] = np.nan
        assert_kernels_agree(node, values_, segment_ids, np.int32(14), dtype=dtype)
    numba_kernel, _ = kernels_of(node)
    with pytest.raises(ValueError, match="out of range"):
        numba_kernel(values_, segment_ids, np.int32(5))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_segment_sum(dtype, scattered):
    rng = np.random.default_rng(12)
    graph = gr.Graph()
    with graph.as_default():
        node = gr.apply_op("SegmentSum", gr.placeholder(gr.as_dtype(dtype), None), gr.placeholder(gr.int64, None))
    ids = np.sort(rng.integers(0, 7, 50)).astype(np.int64)
    assert_kernels_agree(node, rng.standard_normal((50, 4)).astype(dtype), ids, dtype=dtype)
    assert_kernels_agree(node, np.zeros((0, 4), dtype), ids[:0], dtype=dtype)
    assert np.dtype(dtype) in scattered
    numba_kernel, _ = kernels_of(node)
    with pytest.raises(ValueError, match="not increasing"):
        numba_kernel(np.ones((3, 2), dtype), np.array([1, 0, 2]))


@pytest.fixture
def rows_scattered(monkeypatch):
    """The dtypes of the rows the array family's compiled scatter-add has run on."""
    from gradreg_plugins.array import numba_kernels
    seen = []
    original = numba_kernels.scatter_add_rows

    def spy(out, ids, rows):
        seen.append(rows.dtype)
        return original(out, ids, rows)
    monkeypatch.setattr(numba_kernels, "scatter_add_rows", spy)
    return seen


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_scatter_nd_and_tensor_scatter_add(dtype, rows_scattered):
    """The array family's compiled scatters: repeated indices add up in order, slices of any
    depth; bad indices and the IGNORE policy go to the NumPy kernel (its error, its skipping)."""
    rng = np.random.default_rng(13)
    graph = gr.Graph()
    with graph.as_default():
        t = gr.as_dtype(dtype)
        scatter = gr.apply_op("ScatterNd", gr.placeholder(gr.int32, None), gr.placeholder(t, None),
                              gr.placeholder(gr.int32, [None]))
        tensor_add = gr.apply_op("TensorScatterAdd", gr.placeholder(t, None), gr.placeholder(gr.int32, None),
                                 gr.placeholder(t, None))
        ignoring = gr.raw_ops.ScatterNd(indices=gr.placeholder(gr.int32, None), updates=gr.placeholder(t, None),
                                        shape=gr.placeholder(gr.int32, [None]), bad_indices_policy="IGNORE")
    rows = rng.integers(0, 4, (30, 2)).astype(np.int32)   # repeats
    updates = (rng.standard_normal((30, 5)) * 10).astype(dtype)
    assert_kernels_agree(scatter, rows, updates, np.array([4, 4, 5], np.int32), dtype=dtype)
    assert_kernels_agree(scatter, rows[:, :1], updates[:, :3], np.array([4, 3], np.int32), dtype=dtype)
    assert_kernels_agree(scatter, rows[:0], updates[:0], np.array([4, 4, 5], np.int32), dtype=dtype)
    base = (rng.standard_normal((4, 4, 5)) * 10).astype(dtype)
    assert_kernels_agree(tensor_add, base, rows, updates, dtype=dtype)
    assert np.dtype(dtype) in rows_scattered
    numba_scatter, _ = kernels_of(scatter)
    with pytest.raises(IndexError, match="does not index into shape"):
        numba_scatter(np.array([[9, 0]], np.int32), updates[:1], np.array([4, 4, 5], np.int32))
    assert get_registry().kernel_factory("ScatterNd", "numba")(ignoring.op, CTX) is None   # NumPy's kernel


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_bias_add_and_grad(dtype, data_format):
    rng = np.random.default_rng(13)
    graph = gr.Graph()
    with graph.as_default():
        value = gr.placeholder(gr.as_dtype(dtype), None)
        bias = gr.placeholder(gr.as_dtype(dtype), None)
        add = gr.apply_op("BiasAdd", value, bias, data_format=data_format)
        grad = gr.apply_op("BiasAddGrad", value, data_format=data_format)
    channels_last = data_format == "NHWC"
    for shape in [(5, 3, 4, 6), (7, 6), (0, 6), (2, 6, 0, 6)]:
        x = rng.standard_normal(shape).astype(dtype)
        channels = shape[-1] if channels_last or len(shape) == 2 else shape[1]
        assert_kernels_agree(add, x, rng.standard_normal(channels).astype(dtype), dtype=dtype)
        if channels_last:
            assert_kernels_agree(grad, x, dtype=dtype)
    if not channels_last:   # NumPy sums the middle axis as fast
        assert get_registry().kernel_factory("BiasAddGrad", "numba")(grad.op, CTX) is None
    numba_add, _ = kernels_of(add)
    with pytest.raises(ValueError, match="biases"):
        numba_add(np.ones((2, 3), dtype), np.ones(4, dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
def test_softmax(dtype, op_type):
    rng = np.random.default_rng(14)
    graph = gr.Graph()
    with graph.as_default():
        node = gr.apply_op(op_type, gr.placeholder(gr.as_dtype(dtype), None))
    logits = (rng.standard_normal((6, 5, 37)) * 5).astype(dtype)
    logits[0, 0, 3] = -np.inf
    logits[0, 1, :] = -np.inf
    logits[1, 2, 4] = np.nan
    logits[2, 0, 5] = np.inf
    logits[3, 1, 0] = np.nan        # the row's max is NaN from its first value on
    logits[3, 2, -1] = 1e3          # ... and its largest value the last
    logits[4, 0, :] = np.inf        # inf - inf: NaN, as NumPy's
    for x in (logits, logits[0, 0], np.zeros((3, 0), dtype), np.zeros((0, 4), dtype)):
        assert_kernels_agree(node, x, dtype=dtype)


# -- depthwise convolution: the compiled loops against TensorFlow's numbers (tests/data/ops_nn) ------

def _depthwise_cases():
    from reference_data import load_reference
    cases, array = load_reference("ops_nn", "reference")
    graph = gr.load_graph(str(pathlib.Path(__file__).parent / "data" / "ops_nn" / "conv.pb"))
    found = [name for name, spec in sorted(cases.items()) if spec["group"] == "conv"
             and any("Depthwise" in graph.get_tensor(f).op.type for f in spec["fetches"])]
    return graph, cases, array, found


_DW_GRAPH, _DW_CASES, _DW_ARRAY, _DW_NAMES = _depthwise_cases()


@pytest.mark.parametrize("case", _DW_NAMES)
def test_depthwise_loops_match_tensorflow(case, monkeypatch):
    monkeypatch.setenv("GRADREG_THREADS", "2")      # the batch split over threads where it is large enough
    spec = _DW_CASES[case]
    feeds = {name: _DW_ARRAY(key) for name, key in spec["feeds"].items()}
    session = gr.Session(_DW_GRAPH, backend="numba")
    plan = session.plan_for(spec["fetches"], list(feeds))
    assert any(type(plan._fn.__globals__[name]).__name__ == "function" for name, _ in plan.upgrades)
    values = session.run(spec["fetches"], feeds)
    for j in spec["compare"]:
        expected = _DW_ARRAY(f"{case}/out{j}")
        tolerance = (1e-6, 1e-10) if expected.dtype == np.float64 else (2e-3, 2e-5)
        assert values[j].dtype == expected.dtype and values[j].shape == expected.shape
        np.testing.assert_allclose(values[j], expected, rtol=tolerance[0], atol=tolerance[1])


@pytest.mark.parametrize("multiplier", [1, 2, None])
def test_depthwise_loops_split_the_batch_like_one_thread(monkeypatch, multiplier):
    """The batch split over threads gives what one thread computes (the filter gradient's
    partial sums added in order); with a multiplier of 1 (its own loops), another, and one
    the graph does not say (both built, the one for the filter given taken)."""
    from gradreg_plugins.nn import numba_kernels
    rng = np.random.default_rng(5)
    m = multiplier or 1
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [6, 9, 9, 5])
        f = gr.placeholder(gr.float32, [3, 3, 5, multiplier])
        y = gr.apply_op("DepthwiseConv2dNative", x, f, strides=[1, 2, 2, 1], padding="SAME")
        dy = gr.placeholder(gr.float32, [6, 5, 5, 5 * multiplier if multiplier else None])
        dx = gr.apply_op("DepthwiseConv2dNativeBackpropInput", gr.constant([6, 9, 9, 5]), f, dy,
                         strides=[1, 2, 2, 1], padding="SAME")
        df = gr.apply_op("DepthwiseConv2dNativeBackpropFilter", x, gr.constant([3, 3, 5, m]), dy,
                         strides=[1, 2, 2, 1], padding="SAME")
    assert numba_kernels.depthwise_variants(y.op, "forward") == ((m == 1,) if multiplier else (True, False))
    assert numba_kernels.depthwise_variants(df.op, "filter") == (m == 1,)
    values = {x: rng.standard_normal((6, 9, 9, 5)).astype(np.float32),
              f: rng.standard_normal((3, 3, 5, m)).astype(np.float32),
              dy: rng.standard_normal((6, 5, 5, 5 * m)).astype(np.float32)}
    want = gr.Session(graph, backend="numpy").run([y, dx, df], values)
    monkeypatch.setattr(numba_kernels.ks, "threads_for", lambda work, per_thread: 3)
    monkeypatch.setenv("GRADREG_JIT", "eager")
    session = gr.Session(graph, backend="numba")
    plan = session.plan_for([y, dx, df], list(values))
    assert sum(type(plan._fn.__globals__[name]).__name__ == "function" for name, _ in plan.upgrades) == 3
    got = session.run([y, dx, df], values)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    got = session.run([y, dx, df], values)      # the compiled loops' results, not the NumPy kernels'
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, filt, strides, forward, backprop_input, backprop_filter, direct", [
    ([2, 8, 8, 16], [1, 1, 16, 4], [1, 1, 1, 1], False, False, False, 0),   # pointwise: one product
    ([2, 8, 8, 3], [3, 3, 3, 8], [1, 2, 2, 1], False, True, False, 2),      # a stem: strided, few channels
    ([2, 8, 8, 16], [3, 3, 16, 4], [1, 1, 1, 1], True, False, True, 3),     # 16 -> 4: the tap form
    ([2, 8, 8, 64], [3, 3, 64, 64], [1, 1, 1, 1], False, False, False, 0),  # as many each way: im2col
    ([2, 8, 8, 4], [3, 3, 4, 8], [1, 1, 1, 1], False, True, False, 3),      # 4 -> 8: col2im
    ([2, 8, 8, 4], [1, 1, 4, 8], [1, 2, 2, 1], False, True, False, 2),      # 1x1 strided: not pointwise
    ([2, 8, 8, None], [3, 3, None, 4], [1, 1, 1, 1], True, True, True, 0),  # unknown channels: may run
])
def test_convolutions_compile_only_the_loops_their_shapes_can_take(monkeypatch, shape, filt, strides, forward,
                                                                  backprop_input, backprop_filter, direct):
    """A convolution node whose static shapes show the NumPy form is the one every call takes
    gets the NumPy kernel alone (nothing compiled for it); the others a compiled loop (the
    direct form's where conv.direct_form gives one: ``direct`` of the three kinds), which gives
    the NumPy kernel's values."""
    from gradreg_plugins.nn import conv
    rng = np.random.default_rng(3)
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, shape)
        f = gr.placeholder(gr.float32, filt)
        y = gr.apply_op("Conv2D", x, f, strides=strides, padding="SAME")
        dy = gr.placeholder(gr.float32, y.shape)
        dx = gr.apply_op("Conv2DBackpropInput", gr.constant(shape), f, dy, strides=strides, padding="SAME") \
            if None not in shape else None
        df = gr.apply_op("Conv2DBackpropFilter", x, gr.constant(filt), dy, strides=strides, padding="SAME") \
            if None not in filt else None
    assert conv.compiled_loop_may_run(y.op, "forward") is forward
    if dx is not None:
        assert conv.compiled_loop_may_run(dx.op, "input") is backprop_input
        assert conv.compiled_loop_may_run(df.op, "filter") is backprop_filter
        nodes = [(y.op, "forward", forward), (dx.op, "input", backprop_input), (df.op, "filter", backprop_filter)]
        assert sum(conv.direct_form(op, kind) is not None for op, kind, _ in nodes) == direct
        full = [n if n is not None else 5 for n in shape]
        values = {x: rng.standard_normal(full).astype(np.float32),
                  f: rng.standard_normal(filt).astype(np.float32)}
        values[dy] = rng.standard_normal(gr.Session(graph, backend="numpy").run(y, values).shape).astype(np.float32)
        want = gr.Session(graph, backend="numpy").run([y, dx, df], values)
        monkeypatch.setenv("GRADREG_JIT", "eager")       # the compiled loops from the first call
        session = gr.Session(graph, backend="numba")
        plan = session.plan_for([y, dx, df], list(values))
        assert len(plan.upgrades) == sum(may_run or conv.direct_form(op, kind) is not None
                                         for op, kind, may_run in nodes)
        for _ in range(2):
            got = session.run([y, dx, df], values)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_frozen_weights_take_the_loops_built_in_the_background(monkeypatch):
    """A frozen graph's filter and bias are plan constants, read-only arrays: a type of their
    own to numba. The loops, built for writable arrays, are given a copy, so no call compiles
    a read-only variant in the caller's thread."""
    from numba import types

    from gradreg_plugins.nn import numba_kernels
    monkeypatch.setenv("GRADREG_JIT", "eager")
    rng = np.random.default_rng(8)
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [2, 7, 7, 3])
        f = gr.constant(rng.standard_normal((3, 3, 3, 2)).astype(np.float32))
        b = gr.constant(rng.standard_normal(6).astype(np.float32))
        y = gr.apply_op("DepthwiseConv2dNative", x, f, strides=[1, 1, 1, 1], padding="SAME")
        dy = gr.placeholder(gr.float32, [2, 7, 7, 6])
        dx = gr.apply_op("DepthwiseConv2dNativeBackpropInput", gr.constant([2, 7, 7, 3]), f, dy,
                         strides=[1, 1, 1, 1], padding="SAME")
        z = gr.apply_op("BiasAdd", gr.transpose(y, [0, 3, 1, 2]), b, data_format="NCHW")  # not fused
    values = {x: rng.standard_normal((2, 7, 7, 3)).astype(np.float32),
              dy: rng.standard_normal((2, 7, 7, 6)).astype(np.float32)}
    want = gr.Session(graph, backend="numpy").run([y, dx, z], values)
    session = gr.Session(graph, backend="numba")
    for _ in range(2):
        got = session.run([y, dx, z], values)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    forward, backprop_input = (numba_kernels._depthwise_loop(np.dtype(np.float32), kind, False)   # multiplier 2
                               for kind in ("forward", "input"))
    bias = numba_kernels._loop(np.dtype(np.float32), "bias_add_middle")
    if not hasattr(forward, "signatures"):
        # native loops (gradreg.backends.native): one machine code for any array, read-only or not
        assert not any(hasattr(loop, "signatures") for loop in (backprop_input, bias))
        return
    assert forward.signatures and bias.signatures
    for loop in (forward, backprop_input, bias):
        assert all(t.mutable for sig in loop.signatures for t in sig if isinstance(t, types.Array)), loop


def test_constant_ids_and_data_take_the_loops_built_in_the_background(monkeypatch):
    """A Const's indices or data reach the scatter and resize loops read-only; they get a
    writable copy (kernel_support.writable), so no call compiles a read-only variant in the
    caller's thread. Values as the NumPy backend's."""
    from numba import types

    from gradreg import kernel_support as ks
    from gradreg_plugins.image import numba_kernels as image_kernels
    from gradreg_plugins.math import numba_kernels as math_kernels
    monkeypatch.setenv("GRADREG_JIT", "eager")
    rng = np.random.default_rng(9)
    graph = gr.Graph()
    with graph.as_default():
        data = gr.placeholder(gr.float32, [6, 4])
        ids = gr.constant(np.array([0, 2, 1, 0, 2, 2], np.int32))
        total = gr.apply_op("UnsortedSegmentSum", data, ids, gr.constant(3))
        largest = gr.apply_op("UnsortedSegmentMax", data, ids, gr.constant(3))
        fed_ids = gr.placeholder(gr.int32, [6])
        of_const = gr.apply_op("UnsortedSegmentSum", gr.constant(rng.standard_normal((6, 4)).astype(np.float32)),
                               fed_ids, gr.constant(3))
        scattered = gr.apply_op("ScatterNd", gr.constant(np.array([[1], [3]], np.int32)),
                                gr.constant(rng.standard_normal((2, 4)).astype(np.float32)),
                                gr.constant(np.array([5, 4], np.int32)))
        image = gr.constant(rng.standard_normal((1, 5, 6, 2)).astype(np.float32))
        resized = gr.apply_op("ResizeBilinear", image, gr.constant(np.array([7, 9], np.int32)))
    feeds = {data: rng.standard_normal((6, 4)).astype(np.float32), fed_ids: np.array([0, 1, 1, 2, 0, 0], np.int32)}
    fetches = [total, largest, of_const, scattered, resized]
    want = gr.Session(graph, backend="numpy").run(fetches, feeds)
    session = gr.Session(graph, backend="numba")
    for _ in range(2):
        for got, expected in zip(session.run(fetches, feeds), want):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
    loops = [math_kernels._scatter_loop("add", f32, i32), math_kernels._scatter_loop("max", f32, i32),
             image_kernels._loop(np.float32, "rows"), image_kernels._loop(np.float32, "cols")]
    if not hasattr(loops[0], "signatures"):
        # native loops (gradreg.backends.native): one machine code for any array, read-only or not
        assert not any(hasattr(loop, "signatures") for loop in loops)
    else:
        for loop in loops:
            assert loop.signatures, loop
            assert all(t.mutable for sig in loop.signatures for t in sig if isinstance(t, types.Array)), loop
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    copy, kept = ks.writable(frozen), np.arange(3.0)
    assert copy.flags.writeable and copy is not frozen and np.array_equal(copy, frozen)
    assert ks.writable(kept) is kept and ks.writable(2.5) == 2.5


# -- max pooling's gradient: the compiled loop against TensorFlow's numbers (tests/data/ops_nn) ------

def _max_pool_grad_cases():
    from reference_data import load_reference
    cases, array = load_reference("ops_nn", "reference")
    graph = gr.load_graph(str(pathlib.Path(__file__).parent / "data" / "ops_nn" / "pool.pb"))
    found = [name for name, spec in sorted(cases.items()) if spec["group"] == "pool"
             and any(graph.get_tensor(f).op.type == "MaxPoolGrad" for f in spec["fetches"])]
    return graph, cases, array, found


_MPG_GRAPH, _MPG_CASES, _MPG_ARRAY, _MPG_NAMES = _max_pool_grad_cases()


@pytest.mark.parametrize("case", _MPG_NAMES)
def test_max_pool_grad_loop_matches_tensorflow(case, monkeypatch):
    """Ties to the first maximum, NaN and infinities, SAME/VALID/explicit pads, a window over the
    whole input: the compiled loop (float32/float64, NHWC) gives TensorFlow's numbers; other
    types and layouts keep the NumPy kernel."""
    monkeypatch.setenv("GRADREG_THREADS", "2")
    spec = _MPG_CASES[case]
    feeds = {name: _MPG_ARRAY(key) for name, key in spec["feeds"].items()}
    session = gr.Session(_MPG_GRAPH, backend="numba")
    plan = session.plan_for(spec["fetches"], list(feeds))
    (node,) = [op for op in (_MPG_GRAPH.get_tensor(f).op for f in spec["fetches"]) if op.type == "MaxPoolGrad"]
    compiled = node.get_attr("T") in (gr.float32, gr.float64) and node.get_attr("data_format") == b"NHWC"
    assert any(tiered.name == f"MaxPoolGrad {node.name}" for _, tiered in plan.upgrades) == compiled
    assert all(type(plan._fn.__globals__[name]).__name__ == "function" for name, _ in plan.upgrades)
    values = session.run(spec["fetches"], feeds)
    for j in spec["compare"]:
        expected = _MPG_ARRAY(f"{case}/out{j}")
        assert values[j].dtype == expected.dtype and values[j].shape == expected.shape
        np.testing.assert_allclose(values[j], expected, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_max_pool_grad_loop_splits_the_batch_and_refuses_bad_shapes(monkeypatch):
    from gradreg_plugins.nn import numba_kernels
    rng = np.random.default_rng(6)
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [5, 9, 8, 4])
        y = gr.nn.max_pool2d(x, 3, 2, "SAME")
        dy = gr.placeholder(gr.float32, y.shape)
        (dx,) = gr.gradients(y, [x], dy)
    # integers: many ties within a window (the first maximum takes the gradient)
    values = {x: rng.integers(0, 3, (5, 9, 8, 4)).astype(np.float32),
              dy: rng.standard_normal((5, 5, 4, 4)).astype(np.float32)}
    want = gr.Session(graph, backend="numpy").run(dx, values)
    monkeypatch.setattr(numba_kernels.ks, "threads_for", lambda work, per_thread: 3)
    got = gr.Session(graph, backend="numba").run(dx, values)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert dx.op.type == "MaxPoolGrad"
    numba_kernel, _ = kernels_of(dx)
    with pytest.raises(ValueError, match="grad has shape"):
        numba_kernel(values[x], np.zeros((5, 5, 4, 4), np.float32), np.zeros((5, 4, 4, 4), np.float32))
