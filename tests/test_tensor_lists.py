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


def empty(shape=(2,), dtype=gr.float32):
    return ops.EmptyTensorList(element_shape=gr.constant(list(shape), gr.int32), max_num_elements=-1,
                               element_dtype=dtype)


def push(handle, value):
    return ops.TensorListPushBack(input_handle=handle, tensor=value)


def test_every_version_of_a_pushed_list_keeps_its_values(graph):
    # every version keeps its own elements: branches from older versions, set items, pops
    values = [gr.constant(np.full(2, v, np.float32)) for v in range(40)]
    versions = [empty()]
    for v in values:
        versions.append(push(versions[-1], v))
    branch = push(versions[16], gr.constant(np.full(2, -1, np.float32)))      # two branches of an older version
    branch2 = push(versions[16], gr.constant(np.full(2, -2, np.float32)))
    middle = push(versions[5], gr.constant(np.full(2, -3, np.float32)))
    changed = set_item(versions[40], 3, gr.constant(np.full(2, 9, np.float32)))
    popped, last = ops.TensorListPopBack(input_handle=versions[10], element_shape=gr.constant([2], gr.int32),
                                         element_dtype=gr.float32)
    after_pop = push(popped, gr.constant(np.full(2, 7, np.float32)))
    fetches = [stack(versions[40]), stack(versions[16]), stack(branch), stack(branch2), stack(middle),
               stack(changed), stack(after_pop), last, stack(versions[10]), get_item(versions[40], 39),
               ops.TensorListLength(input_handle=versions[17]), stack(versions[0])]
    rows = np.repeat(np.arange(40, dtype=np.float32)[:, None], 2, axis=1)
    for _ in range(2):
        got = gr.Session(graph).run(fetches)
        np.testing.assert_array_equal(got[0], rows)
        np.testing.assert_array_equal(got[1], rows[:16])
        np.testing.assert_array_equal(got[2], np.vstack([rows[:16], [[-1, -1]]]))
        np.testing.assert_array_equal(got[3], np.vstack([rows[:16], [[-2, -2]]]))
        np.testing.assert_array_equal(got[4], np.vstack([rows[:5], [[-3, -3]]]))
        np.testing.assert_array_equal(got[5], np.vstack([rows[:3], [[9, 9]], rows[4:]]))
        np.testing.assert_array_equal(got[6], np.vstack([rows[:9], [[7, 7]]]))
        np.testing.assert_array_equal(got[7], [9, 9])
        np.testing.assert_array_equal(got[8], rows[:10])
        np.testing.assert_array_equal(got[9], [39, 39])
        assert got[10] == 17
        assert got[11].shape == (0, 2)


def test_a_pushed_element_of_another_shape_keeps_the_list_whole(graph):
    l1 = push(empty(shape=(-1,)), gr.constant(np.ones(2, np.float32)))
    l2 = push(l1, gr.constant(np.full(3, 2, np.float32)))      # an element shape -1 lets shapes differ
    items = [get_item(l2, 0), ops.TensorListGetItem(input_handle=l2, index=1,
                                                    element_shape=gr.constant([-1], gr.int32),
                                                    element_dtype=gr.float32)]
    first, second = gr.Session(graph).run(items)
    np.testing.assert_array_equal(first, [1, 1])
    np.testing.assert_array_equal(second, [2, 2, 2])
