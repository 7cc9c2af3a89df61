"""StridedSlice's fast path (NumPy basic indexing, gradreg_plugins.array.slicing.basic_index)
selects what TensorFlow's step-by-step resolution (slicing.resolve) selects, and raises where
it raises, for random specs without ellipsis or new axes."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gradreg_plugins.array import slicing


@st.composite
def specs(draw):
    rank = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(0, 5), min_size=rank, max_size=rank))
    n = draw(st.integers(1, rank))
    bound = st.integers(-7, 7)
    begin = draw(st.lists(bound, min_size=n, max_size=n))
    end = draw(st.lists(bound, min_size=n, max_size=n))
    strides = draw(st.lists(st.sampled_from([-3, -2, -1, 1, 2, 3]), min_size=n, max_size=n))
    masks = slicing.Masks(draw(st.integers(0, 2 ** n - 1)), draw(st.integers(0, 2 ** n - 1)), 0, 0,
                          draw(st.integers(0, 2 ** n - 1)))
    return shape, begin, end, strides, masks


def outcome(fn):
    try:
        return fn()
    except (ValueError, IndexError) as exc:
        return type(exc)


@settings(max_examples=400, deadline=None)
@given(specs())
def test_basic_indexing_selects_what_tensorflow_selects(spec):
    shape, begin, end, strides, masks = spec
    x = np.arange(int(np.prod(shape))).reshape(shape)

    def reference():
        resolved = slicing.resolve(shape, begin, end, strides, masks)
        return np.reshape(x[resolved.numpy_index()], resolved.final_shape)

    def fast():
        return x[slicing.basic_index(shape, begin, end, strides, masks)]
    want, got = outcome(reference), outcome(fast)
    if isinstance(want, type):
        assert got is want
    else:
        assert not isinstance(got, type) and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_ellipsis_and_new_axes_take_the_step_by_step_path():
    assert slicing.basic_index([2, 3], [0], [1], [1], slicing.Masks(ellipsis=1)) is None
    assert slicing.basic_index([2, 3], [0], [1], [1], slicing.Masks(new_axis=1)) is None
    assert slicing.basic_index([2], [0, 0], [1, 1], [1, 1], slicing.Masks()) is None   # more entries than dims


def test_a_loops_xs_t_takes_one_index_and_fails_like_tensorflow_out_of_range():
    # StridedSlice(xs, [t], [t + 1], [1], shrink_axis_mask=1): xs[t], negative t counting from the end
    import pytest

    import gradreg as gr
    from gradreg.errors import GradregError

    graph = gr.Graph()
    with graph.as_default():
        xs = gr.placeholder(gr.float32, [4, 3], name="xs")
        t = gr.placeholder(gr.int32, [], name="t")
        row = gr.strided_slice(xs, gr.stack([t]), gr.stack([t + 1]), [1], shrink_axis_mask=1, name="row")
    session = gr.Session(graph)
    values = np.arange(12, dtype=np.float32).reshape(4, 3)
    for index in (0, 3, -1, -4):
        np.testing.assert_array_equal(session.run(row, {xs: values, t: index}), values[index])
    for index in (4, -5):
        with pytest.raises(GradregError, match="row"):
            session.run(row, {xs: values, t: index})
