"""Error paths of the array family: the element limit refuses oversized outputs before
allocating; bad static inputs fail while building, naming the node; builders reject
arguments TensorFlow's builders reject."""
from __future__ import annotations

import numpy as np
import pytest

import gradreg
from gradreg.errors import ElementLimitError, ExecutionError, ShapeError


def run(fetch, feeds=None, max_elements=None):
    return gradreg.Session(fetch.graph, max_elements=max_elements).run(fetch, feeds or {})


def test_fill_of_a_trillion_elements_is_refused_at_once(graph):
    huge = gradreg.fill([1_000_000, 1_000_000], 1.0, name="huge")
    with pytest.raises(ElementLimitError, match="huge"):
        run(huge)


def _ints(name, shape):
    return gradreg.placeholder(gradreg.int32, shape, name=name)


# Each builds an op whose output (more than 1000 elements) is bigger than its inputs.
ALLOCATING = {
    "Fill": lambda: gradreg.fill(_ints("d", [2]), 1.0),
    "Tile": lambda: gradreg.tile(gradreg.zeros([10]), _ints("m", [1])),
    "BroadcastTo": lambda: gradreg.broadcast_to(gradreg.zeros([10]), _ints("s", [2])),
    "Pad": lambda: gradreg.pad(gradreg.zeros([10]), _ints("p", [1, 2])),
    "PadV2": lambda: gradreg.pad(gradreg.zeros([10]), _ints("p", [1, 2]), constant_values=1.0),
    "MirrorPad": lambda: gradreg.pad(gradreg.zeros([600]), _ints("p", [1, 2]), "SYMMETRIC"),
    "OneHot": lambda: gradreg.one_hot(gradreg.zeros([10], gradreg.int32), _ints("d", [])),
    "ScatterNd": lambda: gradreg.scatter_nd([[0]], [1.0], _ints("s", [1])),
    "StridedSliceGrad": lambda: gradreg.raw_ops.StridedSliceGrad(
        _ints("s", [1]), [0], [1], [1], gradreg.zeros([1])),
    "GatherV2": lambda: gradreg.gather(gradreg.zeros([10, 100]), _ints("i", [None])),
    "GatherNd": lambda: gradreg.gather_nd(gradreg.zeros([10, 100]), _ints("i", [None, 1])),
    "MatrixDiag": lambda: gradreg.matrix_diag(gradreg.zeros(_ints("n", [1]))),
}
FEEDS = {
    "Fill": {"d:0": [100, 100]}, "Tile": {"m:0": [1000]}, "BroadcastTo": {"s:0": [1000, 10]},
    "Pad": {"p:0": [[2000, 0]]}, "PadV2": {"p:0": [[0, 2000]]}, "MirrorPad": {"p:0": [[300, 300]]},
    "OneHot": {"d:0": 1000}, "ScatterNd": {"s:0": [5000]}, "StridedSliceGrad": {"s:0": [5000]},
    "GatherV2": {"i:0": [0] * 20}, "GatherNd": {"i:0": [[1]] * 20}, "MatrixDiag": {"n:0": [100]},
}


@pytest.mark.parametrize("op_type", sorted(ALLOCATING))
def test_allocating_kernels_check_the_element_limit(graph, op_type):
    out = ALLOCATING[op_type]()
    assert out.op.type == op_type
    feeds = FEEDS[op_type]
    with pytest.raises(ElementLimitError, match=out.op.name):
        run(out, feeds, max_elements=1000)
    assert np.size(run(out, feeds, max_elements=10_000_000)) > 1000   # within the limit it runs


def test_like_and_where_check_the_limit(graph):
    x = gradreg.placeholder(gradreg.float32, [None], name="x")
    for out in (gradreg.zeros_like(x), gradreg.ones_like(x), gradreg.where(x)):
        with pytest.raises(ElementLimitError):
            run(out, {x: np.ones(2000, np.float32)}, max_elements=1000)
    assert run(gradreg.where(x), {x: np.zeros(2000, np.float32)}, max_elements=1000).shape == (0, 1)


def test_runtime_errors_name_the_node(graph):
    x = gradreg.placeholder(gradreg.float32, [None], name="x")
    i = gradreg.placeholder(gradreg.int32, [None], name="i")
    picked = gradreg.gather(x, i, name="picked")
    with pytest.raises(ExecutionError, match=r"'picked'.*indices\[1\] = 5 is not in \[0, 3\)") as info:
        run(picked, {x: [1.0, 2.0, 3.0], i: [0, 5]})
    assert info.value.node_name == "picked"


def test_unfed_placeholder_is_a_feed_error(graph):
    x = gradreg.placeholder(gradreg.float32, [2], name="x")
    with pytest.raises(gradreg.errors.FeedError, match="'x'"):
        run(gradreg.identity(x))


def test_placeholder_with_default_runs_unfed_and_fed(graph):
    x = gradreg.placeholder_with_default([1.0, 2.0], [None], name="x")
    y = gradreg.identity(x)
    np.testing.assert_array_equal(run(y), [1.0, 2.0])
    np.testing.assert_array_equal(run(y, {x: [5.0, 6.0, 7.0]}), [5.0, 6.0, 7.0])
    assert x.shape == gradreg.TensorShape([None])
    with pytest.raises(ShapeError):
        gradreg.placeholder_with_default([1.0, 2.0], [3])


STATIC_ERRORS = {
    "reshape": lambda x: gradreg.reshape(x, [5, 5]),
    "reshape_two_unknown": lambda x: gradreg.reshape(x, [-1, -1]),
    "concat_ranks": lambda x: gradreg.concat([x, gradreg.zeros([2])], 0),
    "concat_dims": lambda x: gradreg.concat([x, gradreg.zeros([2, 4])], 0),
    "concat_scalars": lambda x: gradreg.concat([1.0, 2.0], 0),
    "two_ellipses": lambda x: x[..., 0, ...],
    "slice_scalar": lambda x: x[0, 0][0],
    "too_many_indices": lambda x: x[0, 0, 0],
    "shrink_out_of_range": lambda x: x[3],
    "zero_stride": lambda x: x[::0],
    "squeeze": lambda x: gradreg.squeeze(x, [1]),
    "transpose": lambda x: gradreg.transpose(x, [0, 1, 2]),
    "gather_axis": lambda x: gradreg.gather(x, [0], axis=2),
    "split": lambda x: gradreg.split(x, 2, axis=1),
    "split_v": lambda x: gradreg.split(x, [1, 1], axis=1),
    "tile": lambda x: gradreg.tile(x, [2]),
    "pad": lambda x: gradreg.pad(x, [[-1, 0], [0, 0]]),
    "expand_dims": lambda x: gradreg.expand_dims(x, 3),
    "one_hot_axis": lambda x: gradreg.one_hot([1, 2], 3, axis=2),
    "stack": lambda x: gradreg.raw_ops.Pack([x, gradreg.zeros([3, 2])]),
    "unstack": lambda x: gradreg.raw_ops.Unpack(x, num=3),
    "broadcast_to": lambda x: gradreg.broadcast_to(x, [2, 4]),
    "gather_nd_depth": lambda x: gradreg.gather_nd(x, [[0, 0, 0]]),
    "scatter_nd_updates": lambda x: gradreg.scatter_nd([[0], [1]], [1.0], [4]),
    "matrix_diag_part": lambda x: gradreg.matrix_diag_part([1.0, 2.0]),
    "ensure_shape": lambda x: gradreg.ensure_shape(x, [3, None]),
    "fill_value_not_scalar": lambda x: gradreg.fill([2], [1.0, 2.0]),
}


@pytest.mark.parametrize("name", sorted(STATIC_ERRORS))
def test_static_errors_while_building(graph, name):
    x = gradreg.placeholder(gradreg.float32, [2, 3], name="x")
    with pytest.raises(ShapeError, match=r"node '"):
        STATIC_ERRORS[name](x)


BUILDER_ERRORS = {
    "float_index": (TypeError, lambda x, n: x[1.5]),
    "bool_index": (TypeError, lambda x, n: x[True]),
    "vector_tensor_index": (TypeError, lambda x, n: x[gradreg.constant([0, 1])]),
    "float_tensor_index": (TypeError, lambda x, n: x[gradreg.constant(1.0)]),
    "split_num_unknown": (ValueError, lambda x, n: gradreg.split(x, n)),
    "split_scalar_sizes": (ValueError, lambda x, n: gradreg.split(x, gradreg.constant(2))),
    "unstack_num_unknown": (ValueError, lambda x, n: gradreg.unstack(gradreg.placeholder(gradreg.float32))),
    "unstack_axis": (ValueError, lambda x, n: gradreg.unstack(x, axis=2)),
    "stack_axis": (ValueError, lambda x, n: gradreg.stack([x, x], axis=3)),
    "pad_mode": (ValueError, lambda x, n: gradreg.pad(x, [[0, 0], [0, 0]], "WRAP")),
    "where_x_only": (ValueError, lambda x, n: gradreg.where(x > 0.0, x)),
    "one_hot_dtype": (TypeError, lambda x, n: gradreg.one_hot([0], 2, on_value=1.5, dtype=gradreg.int32)),
    "one_hot_on_off": (TypeError, lambda x, n: gradreg.one_hot([0], 2, on_value=1.0, off_value=0)),
    "gather_nd_batch_dims": (ValueError, lambda x, n: gradreg.gather_nd(x, [[0]], batch_dims=1)),
    "concat_axis_vector": (ValueError, lambda x, n: gradreg.concat([x], [0])),
}


@pytest.mark.parametrize("name", sorted(BUILDER_ERRORS))
def test_builders_reject_bad_arguments(graph, name):
    error, build = BUILDER_ERRORS[name]
    x = gradreg.placeholder(gradreg.float32, [2, 3], name="x")
    n = gradreg.placeholder(gradreg.int32, [None], name="n")
    with pytest.raises(error):
        build(x, n)


@pytest.mark.parametrize("use_resource", [True, False])
def test_a_gathered_row_of_a_variable_keeps_its_value_after_an_update(graph, use_resource):
    # Rows of constants and feeds are views (nothing writes to them while a plan runs); a
    # variable's row must not change when an update runs after the gather.
    var = gradreg.Variable(np.arange(6.0).reshape(3, 2), name="v", use_resource=use_resource)
    x = gradreg.placeholder(gradreg.float64, [3, 2], name="x")
    i = gradreg.placeholder(gradreg.int32, [], name="i")
    row, fed_row = gradreg.gather(var.read_value() if use_resource else var.handle, i), gradreg.gather(x, i)
    with graph.control_dependencies([row.op, fed_row.op]):
        update = [gradreg.train.GradientDescentOptimizer(1.0).apply_gradients([(np.full((3, 2), -10.0), var)]),
                  var.scatter_add(gradreg.IndexedSlices(gradreg.constant(np.ones((1, 2))), gradreg.constant([1])))]
    session = gradreg.Session(graph)
    session.run(var.initializer)
    fed = np.arange(6.0).reshape(3, 2) * -1
    got, got_fed, _ = session.run([row, fed_row, update], {x: fed, i: 1})
    np.testing.assert_array_equal(got, [2.0, 3.0])
    np.testing.assert_array_equal(got_fed, [-2.0, -3.0])
    np.testing.assert_array_equal(session.run(var), np.arange(6.0).reshape(3, 2) + [[10], [11], [10]])
