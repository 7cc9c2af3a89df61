"""Math kernels beyond the TensorFlow reference values: the element limit on every kernel
whose output can outgrow its inputs, errors that name the node, constant folding of
shape arithmetic, and the numerics gradreg implements itself (special functions,
bfloat16 rounding, TensorFlow's float-to-integer conversion)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import gradreg as gr
from gradreg.errors import ElementLimitError, ExecutionError, GradregError
from gradreg.model.shape_inference import constant_value
from gradreg_plugins.math import numerics as nm

LIMIT = 1000


def _refused(graph, fetch, feeds=None):
    with pytest.raises(ElementLimitError) as info:
        gr.Session(graph, max_elements=LIMIT).run(fetch, feeds or {})
    assert fetch.op.name in str(info.value)


def test_broadcasting_ops_refuse_big_outputs(graph):
    x = gr.placeholder(gr.float32, [None, 1], name="x")
    y = gr.placeholder(gr.float32, [1, None], name="y")
    feeds = {x: np.ones((100, 1), np.float32), y: np.ones((1, 100), np.float32)}
    for out in (x + y, gr.maximum(x, y), gr.equal(x, y), gr.raw_ops.SelectV2(condition=x > 0, t=x, e=y),
                gr.raw_ops.Complex(real=x, imag=y)):
        _refused(graph, out, feeds)
    small_feeds = {x: np.ones((10, 1), np.float32), y: np.ones((1, 10), np.float32)}
    small = gr.Session(graph, max_elements=LIMIT).run(x + y, small_feeds)
    assert small.shape == (10, 10)


def test_products_refuse_big_outputs(graph):
    a = gr.placeholder(gr.float32, [None, 1], name="a")
    b = gr.placeholder(gr.float32, [1, None], name="b")
    feeds = {a: np.ones((50, 1), np.float32), b: np.ones((1, 50), np.float32)}
    _refused(graph, gr.matmul(a, b), feeds)
    _refused(graph, gr.einsum("i,j->ij", gr.reshape(a, [-1]), gr.reshape(b, [-1])), feeds)
    c = gr.placeholder(gr.float32, [None, None, 1, 1], name="c")
    d = gr.placeholder(gr.float32, [None, 1, 1], name="d")
    _refused(graph, gr.matmul(c, d), {c: np.ones((40, 1, 1, 1), np.float32), d: np.ones((40, 1, 1), np.float32)})


def test_sequences_and_segments_refuse_big_outputs(graph):
    n = gr.placeholder(gr.int32, [], name="n")
    _refused(graph, gr.range(n), {n: 10 ** 6})
    _refused(graph, gr.raw_ops.LinSpace(start=0.0, stop=1.0, num=n), {n: 10 ** 6})
    _refused(graph, gr.unsorted_segment_sum(gr.constant([1.0]), [0], n), {n: 10 ** 6})
    ids = gr.placeholder(gr.int32, [None], name="ids")
    _refused(graph, gr.segment_sum(gr.constant([1.0, 2.0]), ids), {ids: [0, 10 ** 6]})


def test_a_huge_range_is_refused_while_building(graph):
    r = gr.range(10 ** 12)
    assert r.shape.dims == (10 ** 12,)
    with pytest.raises(ElementLimitError):
        gr.Session(graph).run(r)


def test_bad_runtime_inputs_name_the_node(graph):
    x = gr.placeholder(gr.int32, [None], name="x")
    with pytest.raises(ExecutionError, match="'quotient'.*division by zero"):
        gr.Session(graph).run(gr.floordiv(x, x, name="quotient"), {x: [1, 0]})
    axes = gr.placeholder(gr.int32, [None], name="axes")
    with pytest.raises(ExecutionError, match="'total'.*Invalid reduction dimension 3"):
        gr.Session(graph).run(gr.reduce_sum(gr.constant([[1.0]]), axes, name="total"), {axes: [3]})


def test_unsupported_attr_combinations_are_refused_when_compiling(graph):
    s = gr.constant([b"1"])
    cast = gr.raw_ops.Cast(x=s, DstT=gr.int32, name="parse")
    with pytest.raises(ExecutionError, match="'parse'.*string"):
        gr.Session(graph).run(cast)
    z = gr.constant([1 + 1j], gr.complex64)
    with pytest.raises(ExecutionError, match="FloorDiv is not defined for complex64"):
        gr.Session(graph).run(gr.raw_ops.FloorDiv(x=z, y=z))


def test_shape_arithmetic_folds_to_constants(graph):
    x = gr.placeholder(gr.float32, [4, 6])
    size = gr.reduce_prod(gr.shape(x))
    assert constant_value(size) == 24
    assert constant_value(gr.range(3) * 2).tolist() == [0, 2, 4]
    assert constant_value(gr.cast(gr.shape(x), gr.float32) / 2.0).tolist() == [2.0, 3.0]
    half = gr.floordiv(gr.shape(x), 2)
    assert gr.reshape(x, gr.maximum(half, [1, 12])).shape.dims == (2, 12)


def test_kernels_leave_inputs_unchanged(graph):
    x = gr.placeholder(gr.float32, [2, 3])
    value = np.array([[1.0, -2.0, 3.0], [0.5, 0.0, -1.0]], np.float32)
    before = value.copy()
    outs = [gr.cumsum(x, 1, exclusive=True, reverse=True), gr.clip_by_value(x, 0.0, 1.0), gr.sigmoid(x),
            gr.unsorted_segment_max(x, [1, 0], 2), gr.raw_ops.Select(condition=gr.constant(True), t=x, e=x),
            gr.argmax(x, 1), gr.cast(x, gr.bfloat16), gr.matmul(x, x, transpose_b=True)]
    gr.Session(graph).run(outs, {x: value})
    assert np.array_equal(value, before)


def test_default_backend_falls_back_to_the_numpy_kernels(graph):
    x = gr.placeholder(gr.float32, [3])
    y = gr.reduce_sum(gr.erf(x) * 2.0)
    np.testing.assert_allclose(gr.Session(graph).run(y, {x: [0.0, 1.0, -1.0]}), 0.0, atol=1e-6)


# -- numerics ---------------------------------------------------------------------------------------

def test_erf_and_erfc_are_double_precision():
    xs = np.concatenate([np.linspace(-7, 7, 2801), [2.4999, 2.5, 2.5001, 26.0, -26.0, 1e-12]])
    np.testing.assert_allclose(nm.erf(xs), [math.erf(v) for v in xs], rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(nm.erfc(xs), [math.erfc(v) for v in xs], rtol=1e-10, atol=1e-300)
    assert nm.erf(np.array([np.inf, -np.inf])).tolist() == [1.0, -1.0]
    assert nm.erfc(np.array([np.inf, -np.inf])).tolist() == [0.0, 2.0]


def test_lgamma_is_double_precision():
    xs = np.concatenate([np.linspace(-30.05, 60, 9011), [1e-8, 0.5, 1.0, 2.0, 1e6, 1e300]])
    with np.errstate(all="ignore"):
        ours = nm.lgamma(xs)
    expected = np.array([math.lgamma(v) for v in xs])
    np.testing.assert_allclose(ours, expected, rtol=1e-11, atol=1e-13)
    assert nm.lgamma(np.array([0.0, -3.0, -np.inf, np.inf])).tolist() == [np.inf] * 4


def test_digamma_against_known_values_and_the_recurrence():
    euler = 0.5772156649015329
    known = {1.0: -euler, 0.5: -euler - 2 * math.log(2), 2.0: 1 - euler, -0.5: 2 - euler - 2 * math.log(2),
             1e-9: -1e9 - euler}
    ours = nm.digamma(np.array(list(known)))
    np.testing.assert_allclose(ours, list(known.values()), rtol=1e-13)
    xs = np.linspace(-9.9, 30, 4001)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(nm.digamma(xs + 1), nm.digamma(xs) + 1 / xs, rtol=1e-11, atol=1e-11)
        assert np.isnan(nm.digamma(np.array([0.0, -1.0, -7.0, -np.inf]))).all()


def test_bfloat16_rounding_is_to_nearest_even():
    one_ulp = 2.0 ** -7
    values = np.array([1 + one_ulp / 2, 1 + 1.5 * one_ulp, 1 + one_ulp / 2 + 1e-6, -(1 + one_ulp / 2), np.nan,
                       np.inf, 3.4e38], np.float32)
    rounded = nm.round_bfloat16(values)
    assert rounded[:4].tolist() == [1.0, 1 + 2 * one_ulp, 1 + one_ulp, -1.0]
    assert np.isnan(rounded[4]) and rounded[5] == np.inf and rounded[6] == np.inf
    assert nm.truncate_bfloat16(np.float32(1 + 1.9 * one_ulp)) == 1 + one_ulp


def test_float_to_int_follows_tensorflow_on_x86():
    values = np.array([np.nan, np.inf, -2.7, 2.7, 3e9, 1e20, 300.0, -129.0])
    assert nm.float_to_int(values, np.int32).tolist() == [-2 ** 31, -2 ** 31, -2, 2, -2 ** 31, -2 ** 31, 300, -129]
    assert nm.float_to_int(values, np.uint8).tolist() == [0, 0, 254, 2, 0, 0, 44, 127]
    assert nm.float_to_int(values, np.int64)[4] == 3_000_000_000
    assert nm.float_to_int(np.array([1.5e19]), np.uint64)[0] == 15_000_000_000_000_000_000


def test_range_size():
    assert nm.range_size(0, 10, 3, np.dtype(np.int32)) == 4
    assert nm.range_size(np.float32(0), np.float32(1), np.float32(0.1), np.dtype(np.float32)) == 10
    for args in ((0, 5, 0), (5, 0, 1), (0, 5, -1)):
        with pytest.raises(ValueError):
            nm.range_size(*args, np.dtype(np.int64))


def test_einsum_equations():
    assert nm.parse_einsum("ab, bc -> ac", 2) == (["ab", "bc"], "ac")
    assert nm.einsum_output_dims(["a.b", "b"], ".a", [(2, 5, 7, 3), (3,)]) == [5, 7, 2]
    assert nm.einsum_output_dims([".ij", ".jk"], ".ik", [(4, 1, 2, 3), (5, 3, 6)]) == [4, 5, 2, 6]
    assert nm.einsum_output_dims(["ij", "jk"], "ik", [None, (3, None)]) == [None, None]
    for bad in ("ab,bc", "ab->ab->c", "a-b->a", "ab->z"):
        with pytest.raises(ValueError):
            nm.parse_einsum(bad, bad.count(",") + 1)
    with pytest.raises(ValueError):
        nm.einsum_output_dims(["ij", "jk"], "ik", [(2, 3), (4, 5)])


def test_gradreg_errors_are_catchable_as_one_type(graph):
    with pytest.raises(GradregError):
        gr.Session(graph).run(gr.raw_ops.MatrixInverse(input=gr.constant(np.zeros((2, 2)))))


@pytest.mark.parametrize("keep", [False, True])
def test_a_sum_over_leading_or_trailing_axes_follows_every_shape_it_is_fed(graph, keep):
    """Sum over static leading or trailing axes is a product with a vector of ones, set up per
    input shape and kept (reduce_kernels._outer_sum): a node fed more shapes than it keeps, in
    turn and again, sums each (small ones and ones past OpenBLAS's threaded-gemv size)."""
    x = gr.placeholder(gr.float64, [None, None, 3], name="x")
    leading = gr.reduce_sum(x, axis=[0, 1], keepdims=keep)
    trailing = gr.reduce_sum(x, axis=[1, 2], keepdims=keep)
    session = gr.Session(graph)
    rng = np.random.default_rng(5)
    shapes = [(a, b, 3) for a in (1, 2, 5, 8) for b in (1, 4, 6, 7, 9)]
    shapes += [(40, 100, 3), (2, 4, 3), (1, 1, 3), (40, 100, 3)]
    assert len(set(shapes)) > 16
    for shape in shapes:
        value = rng.standard_normal(shape)
        got_leading, got_trailing = session.run([leading, trailing], {x: value})
        np.testing.assert_allclose(got_leading, value.sum(axis=(0, 1), keepdims=keep), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got_trailing, value.sum(axis=(1, 2), keepdims=keep), rtol=1e-12, atol=1e-12)
