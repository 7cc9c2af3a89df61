"""Ragged tensors as variants (the sparse family's ragged_variants module) beyond the op sweep's
cases and tests/data/tf_models' tf.map_fn graphs: the gradient op's zeros for an element no
gradient reached, ZerosLike and AddN of a vector of encodings, and bad input."""
from __future__ import annotations

import numpy as np
import pytest

import gradreg as gr
from gradreg.errors import ExecutionError

R = gr.raw_ops
SPLITS = np.array([0, 2, 2, 5], np.int64)
VALUES = np.arange(10.0).reshape(5, 2)


@pytest.fixture(autouse=True)
def graph():
    with gr.Graph().as_default() as g:
        yield g


def _run(fetches):
    return gr.Session(gr.get_default_graph()).run(fetches)


def _rows():
    return R.RaggedTensorToVariant(rt_nested_splits=[SPLITS], rt_dense_values=VALUES, batched_input=True)


def test_the_gradient_op_concatenates_each_elements_values():
    """RaggedTensorToVariantGradient: the values of each element of the encoded gradient, in order
    (here a zeroed encoding and another), as one tensor of the dense values' shape."""
    one_row = R.RaggedTensorToVariant(rt_nested_splits=[], rt_dense_values=np.ones((3, 2)), batched_input=False)
    encoded = gr.stack([R.ZerosLike(x=one_row), one_row])     # a vector of two encodings
    grad = R.RaggedTensorToVariantGradient(encoded_ragged_grad=encoded, row_splits=np.array([0, 3, 6], np.int64),
                                           dense_values_shape=np.array([6, 2], np.int32), Tvalues=gr.float64)
    value = _run(grad)
    np.testing.assert_array_equal(value, np.concatenate([np.zeros((3, 2)), np.ones((3, 2))]))


def test_zeros_and_sums_of_a_vector_of_encodings_keep_each_rows_structure():
    rows = _rows()
    doubled = R.AddN(inputs=[rows, rows])
    zeros = R.ZerosLike(x=rows)
    decoded = [R.RaggedTensorFromVariant(encoded_ragged=v, input_ragged_rank=0, output_ragged_rank=1,
                                         Tvalues=gr.float64) for v in (doubled, zeros)]
    (splits_2, values_2), (splits_0, values_0) = _run([[d[0][0], d[1]] for d in decoded])
    np.testing.assert_array_equal(splits_2, SPLITS)
    np.testing.assert_array_equal(values_2, 2 * VALUES)
    np.testing.assert_array_equal(splits_0, SPLITS)
    np.testing.assert_array_equal(values_0, np.zeros_like(VALUES))


def test_decoding_with_the_wrong_ragged_rank_is_an_error_naming_the_node():
    decoded = R.RaggedTensorFromVariant(encoded_ragged=_rows(), input_ragged_rank=1, output_ragged_rank=2,
                                        Tvalues=gr.float64, name="decode")
    with pytest.raises(ExecutionError, match="decode.*has ragged_rank=0.  Expected ragged_rank=1"):
        _run(decoded[-1])


def test_decoding_the_wrong_value_type_is_an_error():
    decoded = R.RaggedTensorFromVariant(encoded_ragged=_rows(), input_ragged_rank=0, output_ragged_rank=1,
                                        Tvalues=gr.float32, name="decode")
    with pytest.raises(ExecutionError, match="Expected values Tensor dtype: float32"):
        _run(decoded[-1])
