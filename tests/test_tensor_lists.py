"""TensorList kernels: reserved lists keep their elements in one array, written in place only
where no version of the list has an element yet, so every version keeps its own values."""
from __future__ import annotations

import numpy as np

import gradreg as gr

ops = gr.raw_ops


def reserve(n, shape=(2,), dtype=gr.float32):
    return ops.TensorListReserve(element_shape=gr.constant(list(shape), gr.int32), num_elements=n,
                                 element_dtype=dtype)


def stack(handle, shape=(2,), dtype=gr.float32):
    return ops.TensorListStack(input_handle=handle, element_shape=gr.constant(list(shape), gr.int32),
                               element_dtype=dtype)


def set_item(handle, i, value):
    return ops.TensorListSetItem(input_handle=handle, index=i, item=value)


def get_item(handle, i, dtype=gr.float32):
    return ops.TensorListGetItem(input_handle=handle, index=i, element_shape=gr.constant([2], gr.int32),
                                 element_dtype=dtype)


def test_every_version_of_a_reserved_list_keeps_its_values(graph):
    a, b, c, d = (gr.constant(np.full(2, v, np.float32)) for v in (1, 2, 3, 4))
    l0 = reserve(3)
    l1 = set_item(l0, 1, a)
    l2 = set_item(l1, 0, b)          # the newest version: written in place
    l2b = set_item(l1, 0, c)         # an older version's branch: a copy
    l3 = set_item(l2, 1, d)          # overwriting a set element: a copy
    full = set_item(l2, 2, c)
    with graph.control_dependencies([l2.op]):
        l2c = set_item(l1, 2, d)     # after l2: an unset element, but of an older version
    fetches = [stack(l1), stack(l2), stack(l2b), stack(l3), stack(full), get_item(l0, 1), get_item(full, 2),
               ops.TensorListLength(input_handle=full), stack(l2c)]
    for _ in range(2):               # plans may run these in any order; all orders give the same
        got = gr.Session(graph).run(fetches)
        np.testing.assert_array_equal(got[0], [[0, 0], [1, 1], [0, 0]])
        np.testing.assert_array_equal(got[1], [[2, 2], [1, 1], [0, 0]])
        np.testing.assert_array_equal(got[2], [[3, 3], [1, 1], [0, 0]])
        np.testing.assert_array_equal(got[3], [[2, 2], [4, 4], [0, 0]])
        np.testing.assert_array_equal(got[4], [[2, 2], [1, 1], [3, 3]])
        np.testing.assert_array_equal(got[5], [0, 0])
        np.testing.assert_array_equal(got[6], [3, 3])
        assert got[7] == 3
        np.testing.assert_array_equal(got[8], [[0, 0], [1, 1], [4, 4]])


def test_filling_a_reserved_list_in_a_loop_stacks_its_array(graph):
    x = gr.placeholder(gr.float64, [5, 3], name="x")
    n = gr.placeholder(gr.int32, [], name="n")
    handle = reserve(n, (3,), gr.float64)

    def body(i, h):
        return i + 1, set_item(h, i, gr.gather(x, i) * 2.0)
    _, filled = gr.while_loop(lambda i, h: i < n, body, [0, handle])
    out = stack(filled, (3,), gr.float64)
    popped_list, last = ops.TensorListPopBack(input_handle=filled, element_shape=gr.constant([3], gr.int32),
                                              element_dtype=gr.float64)
    pushed = ops.TensorListPushBack(input_handle=popped_list, tensor=last + 1.0)
    value = np.arange(15.0).reshape(5, 3)
    session = gr.Session(graph)
    for steps in (5, 2, 0):
        got, again = session.run([out, stack(pushed, (3,), gr.float64)] if steps else [out, out],
                                 {x: value, n: steps})
        np.testing.assert_array_equal(got, value[:steps] * 2)
        if steps:
            want = value[:steps] * 2
            want[-1] += 1
            np.testing.assert_array_equal(again, want)


def test_a_reserved_list_of_unknown_element_shape_still_works(graph):
    n = gr.placeholder(gr.int32, [], name="n")
    handle = ops.TensorListReserve(element_shape=gr.constant(-1, gr.int32), num_elements=n, element_dtype=gr.int32)
    filled = set_item(set_item(handle, 0, gr.constant([1, 2])), 1, gr.constant([3, 4]))
    out = ops.TensorListStack(input_handle=filled, element_shape=gr.constant([2], gr.int32), element_dtype=gr.int32)
    np.testing.assert_array_equal(gr.Session(graph).run(out, {n: 2}), [[1, 2], [3, 4]])
