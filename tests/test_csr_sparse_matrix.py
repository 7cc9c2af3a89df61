"""CSR sparse matrices (the sparse family's csr module) beyond the op sweep's cases: the CSR
layout (components, entry counts, TensorFlow's row order), gradients that meet (two consumers of a
matrix: their CSR gradients add up), conjugation of a matrix, and bad input. The op sweep
(tests/test_op_sweep.py) checks every CSR op's values and gradients against TensorFlow."""
from __future__ import annotations

import numpy as np
import pytest

import gradreg as gr
from gradreg.errors import ExecutionError

R = gr.raw_ops
INDICES = np.array([[0, 1], [0, 3], [2, 0], [2, 2]], np.int64)   # row 1 empty
DENSE = np.arange(1.0, 13.0).reshape(3, 4)


def _run(fetches, feeds=None):
    return gr.Session(gr.get_default_graph()).run(fetches, feeds)


@pytest.fixture(autouse=True)
def graph():
    with gr.Graph().as_default() as g:
        yield g


def test_components_and_counts_are_tensorflows_csr_layout():
    matrix = R.DenseToCSRSparseMatrix(dense_input=DENSE, indices=INDICES)
    rows, cols, values = R.CSRSparseMatrixComponents(csr_sparse_matrix=matrix, index=0, type=gr.float64)
    nnz = R.SparseMatrixNNZ(sparse_matrix=matrix)
    got = _run([rows, cols, values, nnz])
    assert got[0].tolist() == [0, 2, 2, 4] and got[0].dtype == np.int32
    assert got[1].tolist() == [1, 3, 0, 2]
    assert got[2].tolist() == [2.0, 4.0, 9.0, 11.0]
    assert int(got[3]) == 4


def test_batched_counts_and_row_order_within_a_row_as_given():
    # TensorFlow keeps a row's entries in the order given (its COO input is assumed sorted by row).
    dense = np.arange(18.0).reshape(2, 3, 3)
    indices = np.array([[0, 2, 2], [0, 2, 0], [1, 0, 1]], np.int64)
    matrix = R.DenseToCSRSparseMatrix(dense_input=dense, indices=indices)
    coo_indices, coo_values, shape = R.CSRSparseMatrixToSparseTensor(sparse_matrix=matrix, type=gr.float64)
    got = _run([coo_indices, coo_values, shape, R.SparseMatrixNNZ(sparse_matrix=matrix)])
    assert got[0].tolist() == [[0, 2, 2], [0, 2, 0], [1, 0, 1]]
    assert got[1].tolist() == [8.0, 6.0, 10.0]
    assert got[2].tolist() == [2, 3, 3]
    assert got[3].tolist() == [2, 1]


def test_gradients_of_a_matrix_used_twice_add_up():
    """f(x) = sum(2 dense(A) * c) + sum(A b * d) with A = csr(x): each use sends a CSR gradient
    back; their sum (AddN of the variants) reaches x at A's entries only."""
    x = gr.placeholder(gr.float64, [3, 4])
    b = np.linspace(-1.0, 1.0, 8).reshape(4, 2)
    c, d = np.linspace(0.5, 2.0, 12).reshape(3, 4), np.array([[1.0, -2.0], [0.5, 0.25], [3.0, 1.0]])
    matrix = R.DenseToCSRSparseMatrix(dense_input=x, indices=INDICES)
    y = gr.reduce_sum(R.CSRSparseMatrixToDense(sparse_input=matrix, type=gr.float64) * 2.0 * c) \
        + gr.reduce_sum(R.SparseMatrixMatMul(a=matrix, b=b) * d)
    (dx,) = gr.gradients(y, [x])
    assert "AddN" in {op.type for op in gr.get_default_graph().get_operations()}
    mask = np.zeros((3, 4))
    mask[tuple(INDICES.T)] = 1.0
    np.testing.assert_allclose(_run(dx, {x: DENSE}), (2.0 * c + d @ b.T) * mask, rtol=1e-12)


def test_conj_of_a_matrix_conjugates_its_entries():
    dense = DENSE * (1 + 2j)
    matrix = R.DenseToCSRSparseMatrix(dense_input=dense, indices=INDICES)
    out = R.CSRSparseMatrixToDense(sparse_input=gr.raw_ops.Conj(input=matrix), type=gr.complex128)
    expected = np.zeros_like(dense)
    expected[tuple(INDICES.T)] = np.conj(dense[tuple(INDICES.T)])
    np.testing.assert_array_equal(_run(out), expected)


def test_zeros_has_no_entries():
    zeros = R.SparseMatrixZeros(dense_shape=np.array([2, 3], np.int64), type=gr.float32)
    dense, nnz = _run([R.CSRSparseMatrixToDense(sparse_input=zeros, type=gr.float32),
                       R.SparseMatrixNNZ(sparse_matrix=zeros)])
    assert dense.shape == (2, 3) and not dense.any() and int(nnz) == 0


def test_sum_keeps_the_union_of_both_structures():
    a = R.SparseTensorToCSRSparseMatrix(indices=np.array([[0, 0], [1, 1]], np.int64), values=np.array([1.0, 2.0]),
                                        dense_shape=np.array([2, 2], np.int64))
    b = R.SparseTensorToCSRSparseMatrix(indices=np.array([[0, 0], [0, 1]], np.int64), values=np.array([-2.0, 5.0]),
                                        dense_shape=np.array([2, 2], np.int64))
    total = R.SparseMatrixAdd(a=a, b=b, alpha=np.float64(2.0), beta=np.float64(1.0))
    indices, values, _ = R.CSRSparseMatrixToSparseTensor(sparse_matrix=total, type=gr.float64)
    got = _run([indices, values])
    assert got[0].tolist() == [[0, 0], [0, 1], [1, 1]]
    assert got[1].tolist() == [0.0, 5.0, 4.0]     # an entry summing to zero stays


def test_bad_indices_are_an_error_naming_the_node():
    x = gr.placeholder(gr.float32, [None, None])
    matrix = R.DenseToCSRSparseMatrix(dense_input=x, indices=np.array([[0, 5]], np.int64), name="to_csr")
    with pytest.raises(ExecutionError, match="to_csr.*out of bounds"):
        _run(R.CSRSparseMatrixToDense(sparse_input=matrix, type=gr.float32), {x: np.ones((2, 2), np.float32)})


def test_type_mismatch_is_an_error_naming_the_node():
    matrix = R.DenseToCSRSparseMatrix(dense_input=DENSE, indices=INDICES)
    with pytest.raises(ExecutionError, match="back.*float64 vs. float32"):
        _run(R.CSRSparseMatrixToDense(sparse_input=matrix, type=gr.float32, name="back"))
