"""Sweep cases: SparseTensor ops (COO indices/values/shape) and the CSR sparse-matrix ops."""
from __future__ import annotations

import numpy as np
from sweep import R, c64, case, f32, f64, family, inp, short, values

family("sparse")

IDX = np.array([[0, 1], [1, 0], [1, 3], [3, 2]], np.int64)
SHAPE = np.array([4, 4], np.int64)
UNORDERED = np.array([[3, 2], [0, 1], [1, 3], [1, 0]], np.int64)
B_IDX = np.array([[0, 1], [2, 2], [3, 2]], np.int64)
VALS = lambda dt=f64, n=4, key=None: inp(values("any", (n,), key), dt)  # noqa: E731

for dt in (f32, f64):
    case("SparseAdd", short(dt), lambda a, b: R.SparseAdd(a_indices=IDX, a_values=a, a_shape=SHAPE, b_indices=B_IDX,
                                                          b_values=b, b_shape=SHAPE,
                                                          thresh=np.float64(0.0) if a.dtype == f64 else np.float32(0.0)
                                                          )[1],
         a=VALS(dt), b=VALS(dt, 3, 1))
case("SparseAdd", "f64_thresh", lambda a, b: R.SparseAdd(a_indices=IDX, a_values=a, a_shape=SHAPE, b_indices=B_IDX,
                                                         b_values=b, b_shape=SHAPE, thresh=np.float64(0.5))[1],
     a=VALS(), b=VALS(n=3, key=1))
for op in ("SparseDenseCwiseMul", "SparseDenseCwiseDiv"):
    fn = getattr(R, op)
    for dt in (f32, f64):
        case(op, short(dt), lambda v, d, fn=fn: fn(sp_indices=IDX, sp_values=v, sp_shape=SHAPE, dense=d),
             v=VALS(dt), d=inp(values("pos", (4, 4)), dt))
    case(op, "f64_bcast_dense", lambda v, d, fn=fn: fn(sp_indices=IDX, sp_values=v, sp_shape=SHAPE, dense=d),
         v=VALS(), d=inp(values("pos", (4,)), f64))
for dt in (f32, f64):
    case("SparseFillEmptyRows", short(dt), lambda v, dv: R.SparseFillEmptyRows(
        indices=np.array([[0, 1], [2, 0], [2, 3]], np.int64), values=v, dense_shape=SHAPE, default_value=dv)[1],
         v=VALS(dt, 3), dv=inp(0.5, dt))
    case("SparseReduceSum", short(dt), lambda v: R.SparseReduceSum(input_indices=IDX, input_values=v, input_shape=SHAPE,
                                                                   reduction_axes=[1]), v=VALS(dt))
    case("SparseReorder", short(dt),
         lambda v: R.SparseReorder(input_indices=UNORDERED, input_values=v, input_shape=SHAPE)[1],
         v=VALS(dt))
    case("SparseSlice", short(dt), lambda v: R.SparseSlice(indices=IDX, values=v, shape=SHAPE,
                                                           start=np.array([1, 0], np.int64), size=np.array([3, 3],
                                                                                                           np.int64))[1],
         v=VALS(dt))
    case("SparseSoftmax", short(dt), lambda v: R.SparseSoftmax(sp_indices=IDX, sp_values=v, sp_shape=SHAPE), v=VALS(dt))
    case("SparseTensorDenseAdd", short(dt),
         lambda v, b: R.SparseTensorDenseAdd(a_indices=IDX, a_values=v, a_shape=SHAPE, b=b),
         v=VALS(dt), b=inp(values("any", (4, 4)), dt))
    case("SparseTensorDenseMatMul", short(dt), lambda v, b: R.SparseTensorDenseMatMul(a_indices=IDX, a_values=v,
                                                                                     a_shape=SHAPE, b=b),
         v=VALS(dt), b=inp(values("any", (4, 3)), dt))
    case("SparseToDense", short(dt),
         lambda v, dv: R.SparseToDense(sparse_indices=IDX, output_shape=SHAPE, sparse_values=v,
                                                                   default_value=dv), v=VALS(dt), dv=inp(-0.5, dt))
case("SparseReduceSum", "f64_all_keepdims",
     lambda v: R.SparseReduceSum(input_indices=IDX, input_values=v, input_shape=SHAPE,
                                                                        reduction_axes=[0,
                                                                                        1], keep_dims=True), v=VALS())
case("SparseSoftmax", "f64_rank3", lambda v: R.SparseSoftmax(
    sp_indices=np.array([[0, 0, 1], [0, 0, 2], [1, 1, 0]], np.int64), sp_values=v, sp_shape=np.array([2, 2, 3],
                                                                                                     np.int64)),
     v=VALS(n=3))
for adj_a in (False, True):
    for adj_b in (False, True):
        if adj_a or adj_b:
            case("SparseTensorDenseMatMul", f"f64_adj{int(adj_a)}{int(adj_b)}", lambda v, b, aa=adj_a, ab=adj_b:
                 R.SparseTensorDenseMatMul(a_indices=IDX, a_values=v, a_shape=SHAPE, b=b, adjoint_a=aa, adjoint_b=ab),
                 v=VALS(), b=inp(values("any", (3, 4) if adj_b else (4, 3)), f64))
case("SparseTensorDenseMatMul", "c64_int32_indices", lambda v, b: R.SparseTensorDenseMatMul(
    a_indices=IDX.astype(np.int32), a_values=v, a_shape=SHAPE, b=b, adjoint_a=True), v=VALS(c64),
     b=inp(values("any", (4, 2)), c64))
case("SparseToDense", "f64_vector_int32", lambda v, dv: R.SparseToDense(
    sparse_indices=np.array([0, 3, 4], np.int32), output_shape=np.array([6],
                                                                        np.int32), sparse_values=v, default_value=dv),
     v=VALS(n=3), dv=inp(0.0, f64))
case("SparseToDense", "f64_scalar_value", lambda v, dv: R.SparseToDense(sparse_indices=IDX, output_shape=SHAPE,
                                                                        sparse_values=v, default_value=dv),
     v=inp(2.5, f64), dv=inp(0.0, f64))

# -- CSR sparse matrices (variant tensors): dense -> CSR -> op -> dense -----------------------------------------
NZ = np.array([[0, 0], [0, 2], [1, 1], [2, 0], [2, 3], [3, 3]], np.int64)
def DENSE(key=None):
    return inp(np.where(values("any", (4, 4), key) > -10, values("any", (4, 4), key), 0.0), f32)





def csr(x, idx=NZ):
    return R.DenseToCSRSparseMatrix(dense_input=x, indices=idx)


def dense(m):
    return R.CSRSparseMatrixToDense(sparse_input=m, type=f32)


case("DenseToCSRSparseMatrix", "f32", lambda x: dense(csr(x)), x=DENSE())
case("CSRSparseMatrixToDense", "f32", lambda x: dense(csr(x)) * 2.0, x=DENSE())
case("CSRSparseMatrixToSparseTensor", "f32",
     lambda x: R.CSRSparseMatrixToSparseTensor(sparse_matrix=csr(x), type=f32)[1],
     x=DENSE())
case("SparseTensorToCSRSparseMatrix", "f32", lambda v: dense(R.SparseTensorToCSRSparseMatrix(
    indices=NZ, values=v, dense_shape=SHAPE)), v=inp(values("any", (6,)), f32))
case("SparseMatrixMatMul", "f32", lambda a, b: R.SparseMatrixMatMul(a=csr(a), b=b), a=DENSE(),
     b=inp(values("any", (4, 3)), f32))
case("SparseMatrixMatMul", "f32_transpose_a", lambda a, b: R.SparseMatrixMatMul(a=csr(a), b=b, transpose_a=True),
     a=DENSE(),
     b=inp(values("any", (4, 3)), f32))
case("SparseMatrixSparseMatMul", "f32", lambda a, b: dense(R.SparseMatrixSparseMatMul(a=csr(a), b=csr(b), type=f32)),
     a=DENSE(), b=DENSE(1))
case("SparseMatrixTranspose", "f32", lambda a: dense(R.SparseMatrixTranspose(input=csr(a), type=f32)), a=DENSE())


# -- more CSR cases: other types, flags, batches; twins where TensorFlow's CPU has no kernel ------------------
import tensorflow as tf  # noqa: E402

c128 = tf.complex128
NZ3 = np.array([[0, 0, 1], [0, 2, 0], [0, 2, 2], [1, 0, 0], [1, 1, 2], [1, 2, 1]], np.int64)   # [2, 3, 3]
NZ3_B = np.array([[0, 0, 0], [0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [1, 2, 2]], np.int64)
NZ_EMPTY_ROW = np.array([[0, 0], [0, 2], [2, 0], [2, 1], [2, 3], [3, 3]], np.int64)          # row 1 empty


def dense_input(shape, dt, key=None):
    return inp(values("any", shape, key), dt)


def to_csr(x, idx):
    return R.DenseToCSRSparseMatrix(dense_input=x, indices=idx)


def to_dense(m, dt):
    return R.CSRSparseMatrixToDense(sparse_input=m, type=dt)


def entries(x, idx):
    return tf.gather_nd(x, idx)


def coo_dense(idx, v, shape):
    return R.SparseToDense(sparse_indices=idx, output_shape=shape, sparse_values=v,
                           default_value=tf.zeros([], v.dtype))


case("DenseToCSRSparseMatrix", "f64_batched", lambda x: to_dense(to_csr(x, NZ3), f64) * 2.0,
     x=dense_input((2, 3, 3), f64))
case("DenseToCSRSparseMatrix", "c128", lambda x: to_dense(to_csr(x, NZ), c128), x=dense_input((4, 4), c128))
case("CSRSparseMatrixToSparseTensor", "f64_batched",
     lambda x: R.CSRSparseMatrixToSparseTensor(sparse_matrix=to_csr(x, NZ3), type=f64)[1],
     x=dense_input((2, 3, 3), f64))
case("SparseMatrixTranspose", "c64_conjugate",
     lambda a: to_dense(R.SparseMatrixTranspose(input=to_csr(a, NZ), type=c64, conjugate=True), c64),
     a=dense_input((4, 4), c64))
case("SparseMatrixTranspose", "f64_batched",
     lambda a: to_dense(R.SparseMatrixTranspose(input=to_csr(a, NZ3), type=f64), f64), a=dense_input((2, 3, 3), f64))
case("SparseMatrixMatMul", "f64_adjoint_b_transpose_output",
     lambda a, b: R.SparseMatrixMatMul(a=to_csr(a, NZ), b=b, adjoint_b=True, transpose_output=True),
     a=dense_input((4, 4), f64), b=dense_input((3, 4), f64, 1))
case("SparseMatrixMatMul", "c128_adjoint_a_conjugate_output",
     lambda a, b: R.SparseMatrixMatMul(a=to_csr(a, NZ), b=b, adjoint_a=True, conjugate_output=True),
     a=dense_input((4, 4), c128), b=dense_input((4, 2), c128, 1))
case("SparseMatrixMatMul", "c64_transpose_a_transpose_b",
     lambda a, b: R.SparseMatrixMatMul(a=to_csr(a, NZ), b=b, transpose_a=True, transpose_b=True),
     a=dense_input((4, 4), c64), b=dense_input((2, 4), c64, 1))
case("SparseMatrixMatMul", "f64_batched", lambda a, b: R.SparseMatrixMatMul(a=to_csr(a, NZ3), b=b),
     a=dense_input((2, 3, 3), f64), b=dense_input((2, 3, 2), f64, 1))
case("SparseMatrixSparseMatMul", "f64_transpose_a_adjoint_b",
     lambda a, b: to_dense(R.SparseMatrixSparseMatMul(a=to_csr(a, NZ), b=to_csr(b, NZ_EMPTY_ROW), type=f64,
                                                      transpose_a=True, adjoint_b=True), f64),
     a=dense_input((4, 4), f64), b=dense_input((4, 4), f64, 1))
case("SparseMatrixSparseMatMul", "c128_adjoint_a",
     lambda a, b: to_dense(R.SparseMatrixSparseMatMul(a=to_csr(a, NZ), b=to_csr(b, NZ_EMPTY_ROW), type=c128,
                                                      adjoint_a=True), c128),
     a=dense_input((4, 4), c128), b=dense_input((4, 4), c128, 1))
case("SparseMatrixSparseMatMul", "f64_batched",
     lambda a, b: to_dense(R.SparseMatrixSparseMatMul(a=to_csr(a, NZ3_B), b=to_csr(b, NZ3),
                                                      type=f64), f64),
     a=dense_input((2, 3, 3), f64), b=dense_input((2, 3, 3), f64, 1))

# TensorFlow 2.21's CPU has no kernel for SparseMatrixAdd, SparseMatrixMul and SparseMatrixSoftmax:
# each case's twin computes the same function with SparseTensor ops.
NO_KERNEL = "TensorFlow 2.21 has no CPU kernel for {}: the values and gradients are its twin's ({})"
B_NZ = NZ[::2]
SHAPE3 = np.array([2, 3, 3], np.int64)


def _add_twin(a, b, al, be):
    """alpha a + beta b over the union of the two structures, by SparseAdd of the scaled entries."""
    thresh = tf.zeros([], a.dtype.real_dtype)
    _, summed, _ = (s := R.SparseAdd(a_indices=NZ, a_values=entries(a, NZ) * al, a_shape=SHAPE, b_indices=B_NZ,
                                     b_values=entries(b, B_NZ) * be, b_shape=SHAPE, thresh=thresh))
    return coo_dense(s[0], summed, SHAPE)


def _softmax_twin(idx, shape):
    return lambda a: coo_dense(idx, R.SparseSoftmax(sp_indices=idx, sp_values=entries(a, idx), sp_shape=shape), shape)


for dt in (f32, f64, c128):
    case("SparseMatrixAdd", short(dt),
         lambda a, b, al, be, dt=dt: to_dense(R.SparseMatrixAdd(a=to_csr(a, NZ), b=to_csr(b, B_NZ), alpha=al, beta=be),
                                              dt),
         twin=_add_twin, tf_runs=False, note=NO_KERNEL.format("SparseMatrixAdd", "SparseAdd of the scaled entries"),
         a=dense_input((4, 4), dt), b=dense_input((4, 4), dt, 1), al=inp(0.5, dt), be=inp(-1.5, dt))
for dt in (f32, f64):
    case("SparseMatrixSoftmax", short(dt),
         lambda a, dt=dt: to_dense(R.SparseMatrixSoftmax(logits=to_csr(a, NZ_EMPTY_ROW), type=dt), dt),
         twin=_softmax_twin(NZ_EMPTY_ROW, SHAPE), tf_runs=False,
         note=NO_KERNEL.format("SparseMatrixSoftmax", "SparseSoftmax"), a=dense_input((4, 4), dt))
case("SparseMatrixSoftmax", "f64_batched",
     lambda a: to_dense(R.SparseMatrixSoftmax(logits=to_csr(a, NZ3), type=f64), f64),
     twin=_softmax_twin(NZ3, SHAPE3), tf_runs=False, note=NO_KERNEL.format("SparseMatrixSoftmax", "SparseSoftmax"),
     a=dense_input((2, 3, 3), f64))
MUL_NOTE = NO_KERNEL.format("SparseMatrixMul", "the entries times b") + "; TensorFlow's rule raises, gradreg's is " \
                                                                        "the twin's"
case("SparseMatrixMul", "f64", lambda a, b: to_dense(R.SparseMatrixMul(a=to_csr(a, NZ), b=b), f64),
     twin=lambda a, b: coo_dense(NZ, entries(a, NZ) * b, SHAPE), tf_runs=False, note=MUL_NOTE,
     a=dense_input((4, 4), f64), b=inp(1.5, f64))
case("SparseMatrixMul", "c128_batched", lambda a, b: to_dense(R.SparseMatrixMul(a=to_csr(a, NZ3), b=b), c128),
     twin=lambda a, b: coo_dense(NZ3, entries(a, NZ3) * tf.gather(tf.reshape(b, [-1]), NZ3[:, 0]), SHAPE3),
     tf_runs=False, note=MUL_NOTE, a=dense_input((2, 3, 3), c128), b=inp(values("any", (2, 1, 1), 1), c128))
