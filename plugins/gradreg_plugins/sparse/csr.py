"""CSR sparse matrices (tf.linalg.experimental.sparse / tf.raw_ops.SparseMatrix*): a DT_VARIANT
holding a matrix, or a batch of matrices of one shape, in compressed sparse row form — the
conversions from and to dense and COO tensors (DenseToCSRSparseMatrix, CSRSparseMatrixToDense,
SparseTensorToCSRSparseMatrix, CSRSparseMatrixToSparseTensor, CSRSparseMatrixComponents), the
products with a dense and a sparse matrix (SparseMatrixMatMul, SparseMatrixSparseMatMul), the
sum, scaling, transpose and row-wise softmax (SparseMatrixAdd, SparseMatrixMul,
SparseMatrixTranspose, SparseMatrixSoftmax and its gradient op), SparseMatrixZeros and
SparseMatrixNNZ — definitions, kernels, shape functions and rules.

A matrix keeps its entries as TensorFlow's CSR does: ordered by batch and row, and within a row
in the order they were given (TensorFlow assumes a COO input sorted by row and keeps the order of
its columns). Products, sums and transposes give rows with sorted columns. A product keeps the
entries its operands' structure gives even where their sum is zero (as TensorFlow's Eigen
product); a sum keeps the union of both structures. Zeros of a matrix (ZerosLike, for
aggregating gradients) have no entries, and two matrices add as SparseMatrixAdd with unit
factors (TensorFlow's CPU has neither).

The rules follow tensorflow/python/ops/linalg/sparse/sparse_csr_matrix_grad.py: a matrix's
gradient is a matrix of its structure (pruned to it). Where they depart:

* SparseMatrixAdd: TensorFlow gives alpha and beta no gradient, and scales the operands'
  gradients by alpha and beta unconjugated; gradreg gives alpha and beta theirs (the sum over
  each operand's entries of the gradient times the conjugate entry) and conjugates the factors.
* SparseMatrixMul: TensorFlow's rule raises; gradreg's scales the gradient by conj(b) and gives
  b the sum over the entries (per batch member when b is one per member).
* The products' rules are one formula each (with P = op_a(A), Q = op_b(B), the product's
  gradient G: dP = G Q^H, dQ = P^H G, taken back through each operand's transpose or adjoint)
  where TensorFlow's enumerate the flag combinations; the values are the same.

TensorFlow 2.21's CPU build has no kernel for SparseMatrixAdd, SparseMatrixMul,
SparseMatrixSoftmax (and its gradient op) or SparseMatrixZeros: the op sweep checks those
against TensorFlow's SparseTensor ops computing the same functions (tests/data/op_sweep).
"""
from __future__ import annotations

import numpy as np

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op, as_dense, constant
from gradreg.errors import GradientError, describe_node
from gradreg.model import dtypes
from gradreg.model import shape_fns as sf
from gradreg.model.graph import Tensor
from gradreg.model.shapes import TensorShape
from gradreg_plugins.rule_helpers import conj
from gradreg_plugins.sparse import family

op = family.op
kernel = family.kernel

_TYPES = "{float32, float64, complex64, complex128}"


# -- the value ----------------------------------------------------------------------------------------------------

class CSRSparseMatrix:
    """A CSR matrix (rank 2) or batch of matrices (rank 3): ``indices`` [nnz, rank] int64 of its
    entries, ordered by batch and row, ``values`` [nnz], ``dense_shape`` (a tuple) and the gradreg
    dtype of its values."""

    __slots__ = ("dtype", "dense_shape", "indices", "values")

    def __init__(self, dtype, dense_shape, indices: np.ndarray, values: np.ndarray):
        self.dtype = dtype
        self.dense_shape = tuple(int(d) for d in dense_shape)
        self.indices = indices
        self.values = values

    @classmethod
    def from_entries(cls, dtype, dense_shape, indices, values, sort_columns: bool = False) -> CSRSparseMatrix:
        """The matrix of COO entries (validated), stably ordered by batch and row (and by column
        with ``sort_columns``)."""
        shape = np.asarray(dense_shape, np.int64).reshape(-1)
        indices = np.asarray(indices, np.int64)
        values = np.asarray(values, dtype.storage)
        if shape.size not in (2, 3):
            raise ValueError(f"sparse tensor must have rank 2 or 3; but dense shape has size {shape.size}")
        if (shape < 0).any():
            raise ValueError(f"dense shape must be non-negative, got {shape.tolist()}")
        if indices.ndim != 2 or indices.shape[1] != shape.size:
            raise ValueError(f"indices must be a matrix with {shape.size} columns, got shape {list(indices.shape)}")
        if values.ndim != 1 or values.shape[0] != indices.shape[0]:
            raise ValueError(f"values must be a vector of {indices.shape[0]} entries, got shape {list(values.shape)}")
        if indices.size and ((indices < 0).any() or (indices >= shape).any()):
            bad = int(np.flatnonzero(((indices < 0) | (indices >= shape)).any(axis=1))[0])
            raise ValueError(f"indices[{bad}] = {indices[bad].tolist()} is out of bounds for dense shape "
                             f"{shape.tolist()}")
        matrix = cls(dtype, shape, indices, values)
        key = matrix.linear() if sort_columns else matrix.linear() // max(matrix.cols, 1)
        order = np.argsort(key, kind="stable")
        return cls(dtype, shape, indices[order], values[order])

    @property
    def rank(self) -> int:
        return len(self.dense_shape)

    @property
    def batch_size(self) -> int:
        return self.dense_shape[0] if self.rank == 3 else 1

    @property
    def rows(self) -> int:
        return self.dense_shape[-2]

    @property
    def cols(self) -> int:
        return self.dense_shape[-1]

    def batch_index(self) -> np.ndarray:
        return self.indices[:, 0] if self.rank == 3 else np.zeros(len(self.indices), np.int64)

    def linear(self) -> np.ndarray:
        """Each entry's position in the dense (batch, row, column) layout."""
        batch, row, col = self.batch_index(), self.indices[:, -2], self.indices[:, -1]
        return (batch * self.rows + row) * self.cols + col

    def with_entries(self, batch, row, col, values, dense_shape=None, dtype=None) -> CSRSparseMatrix:
        """A matrix of this one's rank from (batch, row, column) entries, sorted by position."""
        shape = tuple(dense_shape if dense_shape is not None else self.dense_shape)
        columns = [batch, row, col] if len(shape) == 3 else [row, col]
        indices = np.stack([np.asarray(c, np.int64) for c in columns], axis=1).reshape(-1, len(shape))
        return CSRSparseMatrix.from_entries(dtype or self.dtype, shape, indices, values, sort_columns=True)

    def to_dense(self) -> np.ndarray:
        out = np.zeros(self.dense_shape, self.dtype.storage)
        out[tuple(self.indices.T)] = self.values      # a repeated position keeps its last value (TensorFlow)
        return out

    def nnz(self) -> np.ndarray:
        """Entries per batch member (int32)."""
        return np.bincount(self.batch_index(), minlength=self.batch_size).astype(np.int32)

    def components(self, batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row pointers, column indices, values) of batch member ``batch`` (int32 indices)."""
        mine = self.batch_index() == batch
        rows = self.indices[mine, -2]
        pointers = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=self.rows))])
        return pointers.astype(np.int32), self.indices[mine, -1].astype(np.int32), self.values[mine]

    # -- the variant protocol (gradreg.registry.kernels.VariantValue) -----------------------------------------------
    def zeros_like(self) -> CSRSparseMatrix:
        """The zero matrix of the same shape and type: no entries."""
        return CSRSparseMatrix(self.dtype, self.dense_shape, self.indices[:0], self.values[:0])

    def conj(self) -> CSRSparseMatrix:
        """The complex conjugate (Conj of a variant tensor: TensorFlow's CONJ variant op)."""
        return CSRSparseMatrix(self.dtype, self.dense_shape, self.indices, np.conj(self.values))

    def add(self, other) -> CSRSparseMatrix:
        """The sum (SparseMatrixAdd with alpha = beta = 1): the union of both structures."""
        if not isinstance(other, CSRSparseMatrix):
            raise ValueError(f"cannot add a CSRSparseMatrix and {other!r}")
        return add(self, other, 1, 1)

    def __repr__(self) -> str:
        return f"<CSRSparseMatrix {list(self.dense_shape)} {self.dtype.name}, {len(self.values)} entries>"


def add(a: CSRSparseMatrix, b: CSRSparseMatrix, alpha, beta) -> CSRSparseMatrix:
    """alpha a + beta b, over the union of their structures (a position in both is summed)."""
    if a.dense_shape != b.dense_shape:
        raise ValueError(f"a.dense_shape {list(a.dense_shape)} != b.dense_shape {list(b.dense_shape)}")
    if a.dtype is not b.dtype:
        raise ValueError(f"a and b have different types: {a.dtype.name} and {b.dtype.name}")
    storage = a.dtype.storage
    positions, inverse = np.unique(np.concatenate([a.linear(), b.linear()]), return_inverse=True)
    sums = np.zeros(positions.size, storage)
    np.add.at(sums, inverse.reshape(-1), np.concatenate([np.asarray(alpha, storage) * a.values,
                                                           np.asarray(beta, storage) * b.values]))
    return _at_positions(a, positions, sums)


def _at_positions(like: CSRSparseMatrix, positions: np.ndarray, values, dense_shape=None) -> CSRSparseMatrix:
    shape = tuple(dense_shape if dense_shape is not None else like.dense_shape)
    rows, cols = shape[-2], shape[-1]
    return like.with_entries(positions // (rows * cols), positions // cols % rows, positions % cols, values, shape)


def _matrix(value, what: str, dtype=None) -> CSRSparseMatrix:
    if not isinstance(value, CSRSparseMatrix):
        raise ValueError(f"{what} must be a CSRSparseMatrix, got {value!r}")
    if dtype is not None and value.dtype is not dtype:
        raise ValueError(f"dtype of {what} is not equal to 'type': {value.dtype.name} vs. {dtype.name}")
    return value


# -- conversions ---------------------------------------------------------------------------------------------------

op("DenseToCSRSparseMatrix", inputs=["dense_input: T", "indices: int64"], outputs=["sparse_output: variant"],
   attrs=[f"T: {_TYPES}"], shape=sf.scalar)
op("CSRSparseMatrixToDense", inputs=["sparse_input: variant"], outputs=["dense_output: type"],
   attrs=[f"type: {_TYPES}"], shape=sf.unknown)
op("SparseTensorToCSRSparseMatrix", inputs=["indices: int64", "values: T", "dense_shape: int64"],
   outputs=["sparse_matrix: variant"], attrs=[f"T: {_TYPES}"], shape=sf.scalar)


def _coo_shape(ctx):
    return [TensorShape([None, None]), TensorShape([None]), TensorShape([None])]


op("CSRSparseMatrixToSparseTensor", inputs=["sparse_matrix: variant"],
   outputs=["indices: int64", "values: type", "dense_shape: int64"], attrs=[f"type: {_TYPES}"], shape=_coo_shape)
op("CSRSparseMatrixComponents", inputs=["csr_sparse_matrix: variant", "index: int32"],
   outputs=["row_ptrs: int32", "col_inds: int32", "values: type"], attrs=[f"type: {_TYPES}"],
   shape=lambda ctx: [TensorShape([None])] * 3)


@kernel("DenseToCSRSparseMatrix")
def _dense_to_csr(op, ctx):
    dtype = op.get_attr("T")

    def convert(dense, indices):
        dense, indices = np.asarray(dense), np.asarray(indices, np.int64)
        if dense.ndim not in (2, 3):
            raise ValueError(f"dense_input must have rank 2 or 3, got shape {list(dense.shape)}")
        if indices.ndim != 2 or indices.shape[1] != dense.ndim:
            raise ValueError(f"indices must be a matrix with {dense.ndim} columns, got shape {list(indices.shape)}")
        if indices.size and ((indices < 0).any() or (indices >= dense.shape).any()):
            raise ValueError(f"indices are out of bounds for the dense input's shape {list(dense.shape)}")
        return CSRSparseMatrix.from_entries(dtype, dense.shape, indices, dense[tuple(indices.T)])
    return convert


@kernel("SparseTensorToCSRSparseMatrix")
def _sparse_tensor_to_csr(op, ctx):
    dtype = op.get_attr("T")
    return lambda indices, values, shape: CSRSparseMatrix.from_entries(dtype, shape, indices, values)


@kernel("CSRSparseMatrixToDense")
def _csr_to_dense(op, ctx):
    dtype = op.get_attr("type")

    def convert(matrix):
        matrix = _matrix(matrix, "sparse_input", dtype)
        ctx.check_shape(matrix.dense_shape, op)
        return matrix.to_dense()
    return convert


@kernel("CSRSparseMatrixToSparseTensor")
def _csr_to_sparse_tensor(op, ctx):
    dtype = op.get_attr("type")

    def convert(matrix):
        matrix = _matrix(matrix, "sparse_matrix", dtype)
        return matrix.indices.copy(), matrix.values.copy(), np.array(matrix.dense_shape, np.int64)
    return convert


@kernel("CSRSparseMatrixComponents")
def _csr_components(op, ctx):
    dtype = op.get_attr("type")

    def components(matrix, index):
        matrix = _matrix(matrix, "csr_sparse_matrix", dtype)
        if np.ndim(index) != 0 or not 0 <= int(index) < matrix.batch_size:
            raise ValueError(f"index ({int(np.asarray(index).reshape(-1)[0])}) not in [0, {matrix.batch_size})")
        return matrix.components(int(index))
    return components


# -- zeros, counts, transpose, scaling, sums ----------------------------------------------------------------------

op("SparseMatrixZeros", inputs=["dense_shape: int64"], outputs=["sparse_matrix: variant"], attrs=[f"type: {_TYPES}"],
   shape=sf.scalar)
op("SparseMatrixNNZ", inputs=["sparse_matrix: variant"], outputs=["nnz: int32"], shape=sf.unknown)
op("SparseMatrixTranspose", inputs=["input: variant"], outputs=["output: variant"],
   attrs=["conjugate: bool = false", f"type: {_TYPES}"], shape=sf.scalar)
op("SparseMatrixMul", inputs=["a: variant", "b: T"], outputs=["output: variant"], attrs=["T: type"], shape=sf.scalar)
op("SparseMatrixAdd", inputs=["a: variant", "b: variant", "alpha: T", "beta: T"], outputs=["c: variant"],
   attrs=[f"T: {_TYPES}"], shape=sf.scalar)


@kernel("SparseMatrixZeros")
def _zeros(op, ctx):
    dtype = op.get_attr("type")
    return lambda shape: CSRSparseMatrix.from_entries(dtype, shape, np.zeros((0, np.size(shape)), np.int64),
                                                      np.zeros(0, dtype.storage))


@kernel("SparseMatrixNNZ")
def _nnz(op, ctx):
    def nnz(matrix):
        matrix = _matrix(matrix, "sparse_matrix")
        counts = matrix.nnz()
        return counts if matrix.rank == 3 else counts[0]
    return nnz


def transpose(matrix: CSRSparseMatrix, conjugate: bool) -> CSRSparseMatrix:
    """Each batch member transposed (and conjugated), its rows' columns sorted."""
    values = np.conj(matrix.values) if conjugate else matrix.values
    shape = list(matrix.dense_shape)
    shape[-2:] = shape[-1], shape[-2]
    return matrix.with_entries(matrix.batch_index(), matrix.indices[:, -1], matrix.indices[:, -2], values, shape)


@kernel("SparseMatrixTranspose")
def _transpose(op, ctx):
    dtype, conjugate = op.get_attr("type"), op.get_attr("conjugate")
    return lambda matrix: transpose(_matrix(matrix, "input", dtype), conjugate)


@kernel("SparseMatrixMul")
def _sparse_matrix_mul(op, ctx):
    dtype = op.get_attr("T")

    def mul(matrix, b):
        matrix = _matrix(matrix, "a", dtype)
        b = np.asarray(b, dtype.storage)
        if b.ndim == 0:
            return CSRSparseMatrix(dtype, matrix.dense_shape, matrix.indices, matrix.values * b)
        if matrix.rank != 3 or b.shape != (matrix.batch_size, 1, 1):
            raise ValueError(f"b must be a scalar or shaped [batch_size, 1, 1] (batch size "
                             f"{matrix.batch_size}), got shape {list(b.shape)}")
        return CSRSparseMatrix(dtype, matrix.dense_shape, matrix.indices,
                               matrix.values * b.reshape(-1)[matrix.batch_index()])
    return mul


@kernel("SparseMatrixAdd")
def _add(op, ctx):
    dtype = op.get_attr("T")

    def add_op(a, b, alpha, beta):
        for value, name in ((alpha, "alpha"), (beta, "beta")):
            if np.ndim(value) != 0:
                raise ValueError(f"{name} must be a scalar, got shape {list(np.shape(value))}")
        return add(_matrix(a, "a", dtype), _matrix(b, "b", dtype), alpha, beta)
    return add_op


# -- softmax ----------------------------------------------------------------------------------------------------

op("SparseMatrixSoftmax", inputs=["logits: variant"], outputs=["softmax: variant"],
   attrs=["type: {float32, float64}"], shape=sf.scalar)
op("SparseMatrixSoftmaxGrad", inputs=["softmax: variant", "grad_softmax: variant"], outputs=["gradient: variant"],
   attrs=["type: {float32, float64}"], shape=sf.scalar)


def _row_ids(matrix: CSRSparseMatrix) -> np.ndarray:
    return matrix.batch_index() * matrix.rows + matrix.indices[:, -2]


@kernel("SparseMatrixSoftmax")
def _softmax(op, ctx):
    dtype = op.get_attr("type")

    def softmax(matrix):
        matrix = _matrix(matrix, "logits", dtype)
        rows, count = _row_ids(matrix), matrix.batch_size * matrix.rows
        peak = np.full(count, -np.inf, dtype.storage)
        np.maximum.at(peak, rows, matrix.values)
        exp = np.exp(matrix.values - peak[rows])
        total = np.zeros(count, dtype.storage)
        np.add.at(total, rows, exp)
        return CSRSparseMatrix(dtype, matrix.dense_shape, matrix.indices, exp / total[rows])
    return softmax


def values_at(matrix: CSRSparseMatrix, pattern: CSRSparseMatrix) -> np.ndarray:
    """``matrix``'s values at ``pattern``'s entries, zero where it has none."""
    positions = matrix.linear()
    order = np.argsort(positions, kind="stable")
    sorted_positions = positions[order]
    wanted = pattern.linear()
    at = np.minimum(np.searchsorted(sorted_positions, wanted), max(len(positions) - 1, 0))
    found = (sorted_positions[at] == wanted) if len(positions) else np.zeros(len(wanted), bool)
    out = np.zeros(len(wanted), matrix.dtype.storage)
    out[found] = matrix.values[order][at[found]]
    return out


@kernel("SparseMatrixSoftmaxGrad")
def _softmax_grad(op, ctx):
    dtype = op.get_attr("type")

    def softmax_grad(softmax, grad):
        softmax, grad = _matrix(softmax, "softmax", dtype), _matrix(grad, "grad_softmax", dtype)
        if softmax.dense_shape != grad.dense_shape:
            raise ValueError(f"Shapes of softmax and grad_softmax matrices differ: {list(softmax.dense_shape)} vs. "
                             f"{list(grad.dense_shape)}")
        g = values_at(grad, softmax)
        rows = _row_ids(softmax)
        dots = np.zeros(softmax.batch_size * softmax.rows, dtype.storage)
        np.add.at(dots, rows, g * softmax.values)
        return CSRSparseMatrix(dtype, softmax.dense_shape, softmax.indices, softmax.values * (g - dots[rows]))
    return softmax_grad


# -- products ------------------------------------------------------------------------------------------------------

_PRODUCT_FLAGS = ["transpose_a: bool = false", "transpose_b: bool = false", "adjoint_a: bool = false",
                  "adjoint_b: bool = false"]
op("SparseMatrixMatMul", inputs=["a: variant", "b: T"], outputs=["output: T"],
   attrs=["T: type", *_PRODUCT_FLAGS, "transpose_output: bool = false", "conjugate_output: bool = false"],
   shape=sf.unknown)
op("SparseMatrixSparseMatMul", inputs=["a: variant", "b: variant"], outputs=["c: variant"],
   attrs=[f"type: {_TYPES}", *_PRODUCT_FLAGS], shape=sf.scalar)


def _flags(op, side: str) -> tuple[bool, bool]:
    """(transposed, conjugated) of operand ``side`` ("a" or "b")."""
    t, h = op.get_attr(f"transpose_{side}"), op.get_attr(f"adjoint_{side}")
    if t and h:
        raise ValueError(f"Only one of adjoint_{side} and transpose_{side} may be true.")
    return t or h, h


def _oriented(matrix: CSRSparseMatrix, flags: tuple[bool, bool]):
    """(batch, row, column, value) of op(matrix)'s entries, and its [rows, columns]."""
    transposed, conjugated = flags
    row, col = matrix.indices[:, -2], matrix.indices[:, -1]
    values = np.conj(matrix.values) if conjugated else matrix.values
    dims = (matrix.rows, matrix.cols)
    if transposed:
        row, col, dims = col, row, dims[::-1]
    return matrix.batch_index(), row, col, values, dims


def _check_inner(a_dims, b_dims, a_shape, b_shape) -> None:
    if a_dims[1] != b_dims[0]:
        raise ValueError(f"Inner product dimensions of A and B do not agree.  Shapes are: {list(a_shape)} vs. "
                         f"{list(b_shape)}")


@kernel("SparseMatrixMatMul")
def _mat_mul(op, ctx):
    a_flags, (b_transposed, b_conjugated) = _flags(op, "a"), _flags(op, "b")
    transpose_output, conjugate_output = op.get_attr("transpose_output"), op.get_attr("conjugate_output")

    def mat_mul(a, b):
        a, b = _matrix(a, "a"), np.asarray(b)
        if b.ndim != a.rank:
            raise ValueError(f"Ranks of a and b must match, saw: {a.rank} vs. {b.ndim}.")
        if b.dtype != a.dtype.storage:
            raise ValueError(f"dtype of a is not equal to the dtype of b: {a.dtype.name} vs. {b.dtype}")
        dense = b if b.ndim == 3 else b[None]
        if dense.shape[0] != a.batch_size:
            raise ValueError(f"Batch sizes of A and B do not agree: {a.batch_size} vs. {dense.shape[0]}")
        if b_transposed:
            dense = np.swapaxes(dense, -1, -2)
        if b_conjugated:
            dense = np.conj(dense)
        batch, row, col, values, dims = _oriented(a, a_flags)
        _check_inner(dims, dense.shape[1:], a.dense_shape, b.shape)
        out = np.zeros((a.batch_size, dims[0], dense.shape[2]), np.result_type(a.values, dense))
        np.add.at(out, (batch, row), values[:, None] * dense[batch, col])
        if transpose_output:
            out = np.swapaxes(out, -1, -2)
        if conjugate_output:
            out = np.conj(out)
        return out if b.ndim == 3 else out[0]
    return mat_mul


@kernel("SparseMatrixSparseMatMul")
def _sparse_mat_mul(op, ctx):
    dtype = op.get_attr("type")
    a_flags, b_flags = _flags(op, "a"), _flags(op, "b")

    def sparse_mat_mul(a, b):
        a, b = _matrix(a, "a", dtype), _matrix(b, "b", dtype)
        if a.rank != b.rank or a.batch_size != b.batch_size:
            raise ValueError(f"Batch sizes of A and B do not agree.  Batch sizes are: {a.batch_size} vs. "
                             f"{b.batch_size}")
        a_batch, a_row, a_col, a_values, a_dims = _oriented(a, a_flags)
        b_batch, b_row, b_col, b_values, b_dims = _oriented(b, b_flags)
        _check_inner(a_dims, b_dims, a.dense_shape, b.dense_shape)
        # Every pair of a's entry (i, k) and b's entry (k, j) in one batch member: b's entries
        # grouped by (batch, row), each of a's entries meets its group.
        group = b_batch * b_dims[0] + b_row
        order = np.argsort(group, kind="stable")
        starts = np.searchsorted(group[order], a_batch * b_dims[0] + a_col)
        ends = np.searchsorted(group[order], a_batch * b_dims[0] + a_col, side="right")
        counts = ends - starts
        ctx.check_elements(int(counts.sum()), op)
        left = np.repeat(np.arange(len(a_values)), counts)
        right = order[np.repeat(starts, counts) + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts,
                                                                                      counts)]
        shape = ([a.batch_size] if a.rank == 3 else []) + [a_dims[0], b_dims[1]]
        positions = (a_batch[left] * a_dims[0] + a_row[left]) * b_dims[1] + b_col[right]
        unique, inverse = np.unique(positions, return_inverse=True)
        sums = np.zeros(unique.size, dtype.storage)
        np.add.at(sums, inverse.reshape(-1), a_values[left] * b_values[right])
        return _at_positions(a, unique, sums, shape)
    return sparse_mat_mul


# -- gradient rules -----------------------------------------------------------------------------------------------

def _entries(matrix: Tensor, dtype) -> tuple[Tensor, Tensor, Tensor]:
    return apply_op("CSRSparseMatrixToSparseTensor", matrix, type=dtype)


def pruned(grad: Tensor, pattern: Tensor, dtype) -> tuple[Tensor, Tensor, Tensor]:
    """(indices, values, dense shape) of ``pattern``'s entries with ``grad``'s values there (zero
    where ``grad`` has none): TensorFlow's _PruneCSRMatrix, keeping every entry of the pattern."""
    g_indices, g_values, shape = _entries(grad, dtype)
    g_indices, g_values = apply_op("SparseReorder", g_indices, g_values, shape)
    p_indices, _, _ = _entries(pattern, dtype)
    strides = apply_op("Cumprod", shape, rules.ints(0), exclusive=True, reverse=True)

    def linear(indices):
        return apply_op("Sum", indices * strides, rules.ints(1))
    # A sentinel past every position, so the searched position is always a valid index.
    known = apply_op("ConcatV2", [linear(g_indices), apply_op("Reshape", apply_op("Prod", shape, rules.ints(0)),
                                                                 rules.ints([1]))], rules.ints(0))
    padded = apply_op("ConcatV2", [g_values, constant(np.zeros(1, dtype.storage), dtype)], rules.ints(0))
    wanted = linear(p_indices)
    at = apply_op("Reshape", apply_op("LowerBound", apply_op("Reshape", known, rules.ints([1, -1])),
                                      apply_op("Reshape", wanted, rules.ints([1, -1])), out_type=dtypes.int64),
                  rules.ints([-1]))
    found = apply_op("Equal", apply_op("GatherV2", known, at, rules.ints(0)), wanted)
    values = apply_op("SelectV2", found, apply_op("GatherV2", padded, at, rules.ints(0)),
                      constant(np.zeros((), dtype.storage), dtype))
    return p_indices, values, shape


def _pruned_matrix(grad: Tensor, pattern: Tensor, dtype) -> Tensor:
    return apply_op("SparseTensorToCSRSparseMatrix", *pruned(grad, pattern, dtype))


@family.gradient("DenseToCSRSparseMatrix")
def _dense_to_csr_grad(op, grad):
    return apply_op("CSRSparseMatrixToDense", grad, type=op.get_attr("T")), None


@family.gradient("CSRSparseMatrixToDense")
def _csr_to_dense_grad(op, grad):
    grad = as_dense(grad)
    indices, _, _ = _entries(op.inputs[0], op.get_attr("type"))
    return apply_op("SparseTensorToCSRSparseMatrix", indices, apply_op("GatherNd", grad, indices),
                    apply_op("Shape", grad, out_type=dtypes.int64))


@family.gradient("SparseTensorToCSRSparseMatrix")
def _sparse_tensor_to_csr_grad(op, grad):
    _, values, _ = _entries(grad, op.get_attr("T"))
    return None, values, None


@family.gradient("CSRSparseMatrixToSparseTensor")
def _csr_to_sparse_tensor_grad(op, _indices_grad, values_grad, _shape_grad):
    return apply_op("SparseTensorToCSRSparseMatrix", op.outputs[0], as_dense(values_grad), op.outputs[2])


family.not_differentiable("SparseMatrixNNZ", "SparseMatrixZeros", "CSRSparseMatrixComponents",
                          "SparseMatrixSoftmaxGrad")


@family.gradient("SparseMatrixTranspose")
def _transpose_grad(op, grad):
    return apply_op("SparseMatrixTranspose", grad, type=op.get_attr("type"), conjugate=op.get_attr("conjugate"))


@family.gradient("SparseMatrixSoftmax")
def _softmax_grad_rule(op, grad):
    return apply_op("SparseMatrixSoftmaxGrad", op.outputs[0], grad, type=op.get_attr("type"))


def _factor_grad(grad: Tensor, operand: Tensor, factor: Tensor, dtype, batched: bool) -> tuple[Tensor, Tensor]:
    """For out = factor * operand over the operand's entries: (d operand, a matrix of its
    structure; d factor, the sum over the entries of the gradient times the conjugate entry —
    per batch member where ``batched``: a factor [batch, 1, 1])."""
    indices, values, shape = pruned(grad, operand, dtype)
    _, entries, _ = _entries(operand, dtype)
    products = values * conj(entries)
    if not batched:
        return (apply_op("SparseTensorToCSRSparseMatrix", indices, values * conj(factor), shape),
                apply_op("Reshape", apply_op("Sum", products, rules.ints(0)), apply_op("Shape", factor)))
    batch = apply_op("StridedSlice", indices, rules.ints([0, 0]), rules.ints([0, 1]), rules.ints([1, 1]),
                     begin_mask=1, end_mask=1, shrink_axis_mask=2)
    per_member = apply_op("UnsortedSegmentSum", products, batch, apply_op("Size", factor))
    scale = apply_op("GatherV2", apply_op("Reshape", conj(factor), rules.ints([-1])), batch, rules.ints(0))
    return (apply_op("SparseTensorToCSRSparseMatrix", indices, values * scale, shape),
            apply_op("Reshape", per_member, apply_op("Shape", factor)))


@family.gradient("SparseMatrixAdd")
def _add_grad(op, grad):
    a, b, alpha, beta = op.inputs
    dtype = op.get_attr("T")
    da, dalpha = _factor_grad(grad, a, alpha, dtype, batched=False)
    db, dbeta = _factor_grad(grad, b, beta, dtype, batched=False)
    return da, db, dalpha, dbeta


@family.gradient("SparseMatrixMul")
def _mul_grad(op, grad):
    a, b = op.inputs
    if b.shape.rank is None:
        raise GradientError(f"{describe_node(op.name, op.type)}: the rank of b (a scalar, or one per batch "
                            f"member) must be known to differentiate it")
    return _factor_grad(grad, a, b, op.get_attr("T"), batched=b.shape.rank == 3)


def _mat_mul_grad_values(op, g: Tensor, q: Tensor, indices: Tensor, rank: int) -> Tensor:
    """dA at A's entries for the product P Q (P = op_a(A)): dP = G Q^H, read at each entry's
    position in P (its row and column exchanged where op_a transposes, conjugated where it
    adjoints)."""
    transposed, conjugated = _flags(op, "a")
    row = apply_op("StridedSlice", indices, rules.ints([0, rank - 2]), rules.ints([0, rank - 1]),
                   rules.ints([1, 1]), begin_mask=1, end_mask=1)
    col = apply_op("StridedSlice", indices, rules.ints([0, rank - 1]), rules.ints([0, rank]), rules.ints([1, 1]),
                   begin_mask=1, end_mask=1)
    if transposed:
        row, col = col, row
    if rank == 3:
        batch = apply_op("StridedSlice", indices, rules.ints([0, 0]), rules.ints([0, 1]), rules.ints([1, 1]),
                         begin_mask=1, end_mask=1)
        row, col = (apply_op("ConcatV2", [batch, t], rules.ints(1)) for t in (row, col))
    else:
        row, col = (apply_op("Reshape", t, rules.ints([-1])) for t in (row, col))
    gather = (lambda m, i: apply_op("GatherNd", m, i)) if rank == 3 else \
        (lambda m, i: apply_op("GatherV2", m, i, rules.ints(0)))
    values = apply_op("Sum", gather(g, row) * conj(gather(q, col)), rules.ints(-1))
    return conj(values) if conjugated else values


@family.gradient("SparseMatrixMatMul")
def _mat_mul_grad(op, grad):
    """With C = op_out(P Q): G, the gradient of P Q (undoing conjugate_output and
    transpose_output); dA at A's entries from dP = G Q^H; dB from dQ = P^H G, through op_b."""
    a, b = op.inputs
    g = as_dense(grad)
    rank = b.shape.rank
    if rank is None:
        raise GradientError(f"{describe_node(op.name, op.type)}: the rank of b must be known to differentiate it")
    swap = list(range(rank - 2)) + [rank - 1, rank - 2]
    if op.get_attr("conjugate_output"):
        g = conj(g)
    if op.get_attr("transpose_output"):
        g = apply_op("Transpose", g, rules.ints(swap))
    b_transposed, b_conjugated = _flags(op, "b")
    q = apply_op("Transpose", b, rules.ints(swap)) if b_transposed else b
    q = conj(q) if b_conjugated else q
    dtype = op.get_attr("T")
    indices, _, shape = _entries(a, dtype)
    da = apply_op("SparseTensorToCSRSparseMatrix", indices, _mat_mul_grad_values(op, g, q, indices, rank), shape)
    # dQ = P^H G: P^H is A^H (a plain), conj(A) (a transposed: conj(A G~) with G~ = conj(G)), or A.
    a_transposed, a_conjugated = _flags(op, "a")
    if not a_transposed:
        dq = apply_op("SparseMatrixMatMul", a, g, adjoint_a=True)
    elif a_conjugated:
        dq = apply_op("SparseMatrixMatMul", a, g)
    else:
        dq = conj(apply_op("SparseMatrixMatMul", a, conj(g)))
    db = apply_op("Transpose", dq, rules.ints(swap)) if b_transposed else dq
    return da, conj(db) if b_conjugated else db


def _sparse_conj(m: Tensor, dtype) -> Tensor:
    """conj(M) of a CSR matrix (the identity for real types)."""
    return apply_op("Conj", m) if dtype.is_complex else m


def _sparse_oriented_back(m: Tensor, flags: tuple[bool, bool], dtype) -> Tensor:
    """An operand's gradient from its oriented form's: transposed back, and conjugated back."""
    transposed, conjugated = flags
    if transposed:
        return apply_op("SparseMatrixTranspose", m, type=dtype, conjugate=conjugated)
    return m


@family.gradient("SparseMatrixSparseMatMul")
def _sparse_mat_mul_grad(op, grad):
    """dP = G Q^H and dQ = P^H G (sparse products), each taken back through its operand's flags
    and pruned to the operand's structure."""
    a, b = op.inputs
    dtype = op.get_attr("type")
    a_flags, b_flags = _flags(op, "a"), _flags(op, "b")

    def adjoint_product(left, left_flags, right, right_flags, adjoint_left: bool):
        """G op(X)^H (adjoint_left false: X is ``right``) or op(X)^H G (X is ``left``)."""
        x, (transposed, conjugated) = (left, left_flags) if adjoint_left else (right, right_flags)
        # op(X)^H is X^H (X plain), conj(X) (X transposed) or X (X adjointed).
        if transposed and not conjugated:
            x = _sparse_conj(x, dtype)
        operands = (x, right) if adjoint_left else (left, x)
        return apply_op("SparseMatrixSparseMatMul", *operands, type=dtype, adjoint_a=adjoint_left and not transposed,
                        adjoint_b=not adjoint_left and not transposed)

    dp = adjoint_product(grad, None, b, b_flags, adjoint_left=False)
    dq = adjoint_product(a, a_flags, grad, None, adjoint_left=True)
    da = _sparse_oriented_back(dp, a_flags, dtype)
    db = _sparse_oriented_back(dq, b_flags, dtype)
    return _pruned_matrix(da, a, dtype), _pruned_matrix(db, b, dtype)
