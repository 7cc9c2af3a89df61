"""The sparse op family: TensorFlow's SparseTensor ops (a sparse tensor travels as three
tensors: int64 indices [nnz, rank], values [nnz] and a dense shape [rank]) — SparseAdd,
SparseTensorDenseMatMul / Add, SparseToDense, SparseReduceSum / Max, SparseSoftmax,
SparseReorder, SparseReshape, SparseFillEmptyRows, SparseSlice, SparseConcat,
SparseSparseMaximum / Minimum, SparseDenseCwiseMul / Div / Add — the gradient ops TensorFlow's
rules emit (SparseAddGrad, SparseFillEmptyRowsGrad, SparseSliceGrad); of the ragged ops,
RaggedTensorToSparse, RaggedTensorToTensor, RaggedRange, RaggedGather and RaggedFillEmptyRows
(+Grad, SparseFillEmptyRows' kernels over row ids) and the ragged tensors' variant encodings
(``ragged_variants``: what tf.map_fn over ragged rows builds); the CSR sparse-matrix ops (``csr``: a
DT_VARIANT matrix, or batch of matrices). (SparseMatMul, a dense product with
sparsity hints, is the math family's.) Owns each op's definition, NumPy kernel, shape function
and gradient rule (see gradreg_plugins.sparse.grads for where gradreg's rules differ from
TensorFlow's)."""
from gradreg.plugin import OpFamily

# Modules of kernels and of gradient rules only: imported when a kernel or rule table is first read.
family = OpFamily(
    "sparse",
    kernel_modules=["gradreg_plugins.sparse.kernels"],
    gradient_modules=["gradreg_plugins.sparse.grads"],
)

from gradreg_plugins.sparse import csr, ops, ragged, ragged_variants  # noqa: E402,F401  (they fill the family's tables)
