"""Round and Floor keep their values; their gradients pass straight through."""
from __future__ import annotations

import numpy as np
import pytest

import gradreg as gr
from gradreg.registry import get_registry


@pytest.mark.parametrize("op, expected", [(gr.round, [0.0, 2.0, -3.0, 2.0]), (gr.floor, [0.0, 1.0, -4.0, 2.0])])
def test_values_stay_and_gradients_pass_through(op, expected):
    g = gr.Graph()
    with g.as_default():
        x = gr.placeholder(gr.float32, [4], name="x")
        y = op(x)
        (dx,) = gr.gradients(gr.reduce_sum(y * [1.0, 2.0, 3.0, 4.0]), [x])
    value, grad = gr.Session(g).run([y, dx], {x: [0.2, 1.7, -3.4, 2.5]})
    np.testing.assert_array_equal(value, expected)        # Round: halves to even, as TensorFlow
    np.testing.assert_array_equal(grad, [1.0, 2.0, 3.0, 4.0])


def test_the_rules_in_use_are_this_plugins():
    assert get_registry().gradients.lookup("Round").plugin == "straight_through"
    assert get_registry().gradients.lookup("Floor").plugin == "straight_through"
