"""NumPy kernels of the math family's products: MatMul, BatchMatMul (V1-V3), Einsum,
MatrixInverse and MatrixDeterminant; and of its linear algebra (definitions in linalg.py):
decompositions, solves, determinants, square roots, tridiagonal and banded systems, Cross."""
from __future__ import annotations

import numpy as np

from gradreg import kernel_support as ks
from gradreg.registry.kernels import LoopHoist
from gradreg_plugins._lazy import LazyModule
from gradreg_plugins.array import slicing
from gradreg_plugins.math import family
from gradreg_plugins.math import numerics as nm
from gradreg_plugins.math.kernels import cast_array, kernel

scipy_linalg = LazyModule("scipy.linalg")


def _compute_type(dtype: np.dtype) -> np.dtype:
    """float16 products accumulate in float32, as TensorFlow's CPU kernels do."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _product(a, b, out_dtype, recycler=None):
    ct = _compute_type(out_dtype)
    if recycler is not None and ct == out_dtype and a.dtype == ct and b.dtype == ct and a.ndim == b.ndim == 2:
        return np.matmul(a, b, out=recycler.empty((a.shape[0], b.shape[1]), ct))
    return np.matmul(a.astype(ct, copy=False), b.astype(ct, copy=False)).astype(out_dtype, copy=False)


def _size_check(op, ctx):
    """A function refusing an output shape over the element limit, or None when the static
    shape already proves it fits."""
    n = op.outputs[0].shape.num_elements()
    if n is not None and n <= ctx.max_elements:
        return None
    return lambda shape: ctx.check_shape(shape, op)


# OpenBLAS splits a product over all cores from m*n*k > 262144 on; from there gradreg chooses
# the threads (gradreg.kernel_support): one per this many flops, as many as are free. Two
# threads beat one from there on (a 128x512 by 512x10 product: 30 vs 39 us with OpenBLAS's
# threads awake, 65 vs 89 us after a 2 ms pause; bench/foreign_mlp.py's small products), and
# a product OpenBLAS threads then asks for as many threads as it has when cores are free:
# changing BLAS's thread count costs more than such a product (its idle threads sleep).
THREADED_PRODUCT = 2 * 262144
FLOPS_PER_THREAD = THREADED_PRODUCT / 2


def _static_flops(op) -> int | None:
    """2*m*n*k of a MatMul whose static shapes are known, else None."""
    a, b = op.inputs[0].shape, op.inputs[1].shape
    if not (a.is_fully_defined() and b.is_fully_defined()):
        return None
    (m, k), n = (a.as_list()[::-1] if op.get_attr("transpose_a") else a.as_list()), \
        b.as_list()[0 if op.get_attr("transpose_b") else 1]
    return 2 * m * n * k


def _threaded(product, flops: int):
    """``product`` with the BLAS threads a call of ``flops`` gets."""
    def compute(a, b):
        with ks.blas_threads(ks.threads_for(flops, FLOPS_PER_THREAD)):
            return product(a, b)
    return compute


def _sized(product, ta: bool, tb: bool):
    """``product`` of matrices whose sizes are known at run time only: small ones as they are,
    large ones with the BLAS threads their size gets."""
    def compute(a, b):
        m = a.shape[1] if ta else a.shape[0]
        k = a.shape[0] if ta else a.shape[1]
        n = b.shape[0] if tb else b.shape[-1]
        flops = 2 * m * n * k
        if flops <= THREADED_PRODUCT:
            return product(a, b)
        with ks.blas_threads(ks.threads_for(flops, FLOPS_PER_THREAD)):
            return product(a, b)
    return compute


@kernel("MatMul")
def _matmul(op, ctx):
    ta, tb = bool(op.get_attr("transpose_a")), bool(op.get_attr("transpose_b"))
    check = _size_check(op, ctx)
    if check is None and op.outputs[0].dtype.storage.kind in "fc" and op.outputs[0].dtype.storage != np.float16:
        # The common case, kept lean (it runs once per layer per step): BLAS does the work,
        # NumPy's errors for mismatched shapes still name the node through the plan.
        if op.inputs[0].shape.rank == 2 and op.inputs[1].shape.rank == 2:
            # Matrices by the static shapes: nothing to check per call. np.dot reaches the same
            # BLAS call as np.matmul for matrices with less dispatch (0.5-1.4 us a call: an
            # RNN's 16x64 products); with a transposed first operand, a large product is 5%
            # faster through np.matmul (x^T dy, 784x128 by 128x512: 584 vs 613 us).
            flops = _static_flops(op)
            if ta and flops is not None and flops > THREADED_PRODUCT:
                product = lambda a, b: np.matmul(a.T, b.T if tb else b)  # noqa: E731
            elif ta or tb:
                product = lambda a, b: np.dot(a.T if ta else a, b.T if tb else b)  # noqa: E731
            else:
                product = np.dot
            if flops is None:
                return _sized(product, ta, tb)
            return _threaded(product, flops) if flops > THREADED_PRODUCT else product

        def fast(a, b):
            if a.ndim != 2 or b.ndim != 2:
                raise ValueError(f"In[0] and In[1] must be matrices: shapes {list(a.shape)}, {list(b.shape)}")
            return np.matmul(a.T if ta else a, b.T if tb else b)
        return fast

    return _checked(ta, tb, check)


def _checked(ta: bool, tb: bool, check):
    """MatMul of shapes known only when it runs (a loop gradient's stacked rows, ...): the
    shapes checked, the BLAS threads its size earns, and its output reused from call to call."""
    recycler = ks.Recycler()

    def compute(a, b):
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError(f"In[0] and In[1] must be matrices: shapes {list(a.shape)}, {list(b.shape)}")
        a = a.T if ta else a
        b = b.T if tb else b
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"Matrix size-incompatible: In[0]: {list(a.shape)}, In[1]: {list(b.shape)}")
        if check is not None:
            check((a.shape[0], b.shape[1]))
        flops = 2 * a.shape[0] * a.shape[1] * b.shape[1]
        if flops <= THREADED_PRODUCT:
            return _product(a, b, a.dtype, recycler)
        with ks.blas_threads(ks.threads_for(flops, FLOPS_PER_THREAD)):   # as the products of static sizes
            return _product(a, b, a.dtype, recycler)
    return compute


def _row_of(t, outside):
    """(the invariant X outside the loop, the slice's begin) when ``t`` is ``X[i]`` sliced in a
    loop (gradreg_plugins.array.slicing.reads_one_row: row i of X, negative i counting from
    the end)."""
    op = t.op
    if op.type != "StridedSlice" or not slicing.reads_one_row(op):
        return None
    source = outside(op.inputs[0])
    return None if source is None else (source, op.inputs[1])


@family.loop_hoist("MatMul")
def _matmul_loop_hoist(op, ctx, outside):
    """``X[t] W`` in a loop over t, X and W invariant (an RNN's input projection): ``X W`` as one
    product before the loop (rows of X stacked), and row t of it in each iteration: one BLAS
    call instead of one per iteration. Rows the loop never reads are computed too; a result
    over the element limit, or values that do not fit (rank, types), leave the node to run."""
    a, b = op.inputs
    row = _row_of(a, outside)
    invariant = outside(b)
    dtype = op.outputs[0].dtype
    if row is None or invariant is None or op.get_attr("transpose_a") or op.control_inputs \
            or dtype is None or dtype.storage not in (np.float32, np.float64):
        return None
    source, begin = row
    tb = bool(op.get_attr("transpose_b"))
    storage = dtype.storage
    recycler = ks.Recycler()    # the table: the same size each call
    product = _sized(lambda p, q: np.dot(p, q.T if tb else q,
                                         out=recycler.empty((p.shape[0], q.shape[0 if tb else 1]), storage)),
                     False, tb)

    def precompute(x, w):
        if type(x) is not np.ndarray or type(w) is not np.ndarray or x.ndim != 3 or w.ndim != 2 \
                or x.dtype != storage or w.dtype != storage:
            return None
        k, n = (w.shape[1], w.shape[0]) if tb else w.shape
        if x.shape[2] != k or x.shape[0] * x.shape[1] * n > ctx.max_elements:
            return None
        return product(x.reshape(-1, k), w).reshape(x.shape[0], x.shape[1], n)

    def pick(table, index):
        i = int(index[0])
        return table[i] if -table.shape[0] <= i < table.shape[0] else None
    return LoopHoist((source, invariant), precompute, (begin,), pick)


def _adjoint(x):
    x = np.swapaxes(x, -1, -2)
    return np.conj(x) if x.dtype.kind == "c" else x


def _batch_matmul(op_type: str, broadcast: bool) -> None:
    @kernel(op_type)
    def factory(op, ctx):
        adj_x, adj_y = bool(op.get_attr("adj_x")), bool(op.get_attr("adj_y"))
        out_type = op.outputs[0].dtype
        check = _size_check(op, ctx)

        def compute(x, y):
            if x.ndim < 2 or y.ndim < 2:
                raise ValueError(f"In[0] and In[1] must have rank >= 2: shapes {list(x.shape)}, {list(y.shape)}")
            if not broadcast and (x.ndim != y.ndim or x.shape[:-2] != y.shape[:-2]):
                raise ValueError(f"In[0] and In[1] must have the same batch dimensions: "
                                 f"{list(x.shape)} vs {list(y.shape)}")
            if x.dtype != out_type.storage:   # BatchMatMulV3 computes in its output type
                x = cast_array(x, op.get_attr("Ta"), out_type, False)
            if y.dtype != out_type.storage:
                y = cast_array(y, op.get_attr("Tb"), out_type, False)
            x = _adjoint(x) if adj_x else x
            y = _adjoint(y) if adj_y else y
            if x.shape[-1] != y.shape[-2]:
                raise ValueError(f"Matrix size-incompatible: In[0]: {list(x.shape)}, In[1]: {list(y.shape)}")
            if check is not None:
                batch = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
                check(batch + (x.shape[-2], y.shape[-1]))
            return _product(x, y, out_type.storage)
        return compute


_batch_matmul("BatchMatMul", broadcast=False)
_batch_matmul("BatchMatMulV2", broadcast=True)
_batch_matmul("BatchMatMulV3", broadcast=True)


@kernel("Einsum")
def _einsum(op, ctx):
    equation = op.get_attr("equation").decode()
    terms, rhs = nm.parse_einsum(equation, len(op.inputs))
    unique_rhs = "".join(dict.fromkeys(rhs))
    subscripts = ",".join(t.replace(".", "...") for t in terms) + "->" + unique_rhs.replace(".", "...")

    def compute(*inputs):
        dims = nm.einsum_output_dims(terms, rhs, [np.shape(x) for x in inputs])
        ctx.check_shape(dims, op)
        if len(inputs) == 1:
            out = np.einsum(subscripts, inputs[0]).copy()   # einsum may return a view (diagonals)
        else:
            ct = _compute_type(inputs[0].dtype)
            out = np.einsum(subscripts, *(x.astype(ct, copy=False) for x in inputs), optimize=True)
            out = np.asarray(out).astype(inputs[0].dtype, copy=False)
        return out if unique_rhs == rhs else _inflate(out, unique_rhs, rhs, dims)
    return compute


def _inflate(values: np.ndarray, unique_rhs: str, rhs: str, dims: list) -> np.ndarray:
    """The output of an equation whose output repeats a label ('ij->iji'): zeros except on the
    diagonals of the repeated axes, which hold ``values`` (computed for the output without
    repeats), as TensorFlow's kernel does (its gradients emit such equations)."""
    n_ellipsis = values.ndim - len(unique_rhs.replace(".", ""))
    axes_of: dict[str, list[int]] = {}
    axis = 0
    for label in unique_rhs:
        width = n_ellipsis if label == "." else 1
        axes_of[label] = list(range(axis, axis + width))
        axis += width
    ranges = [np.arange(n).reshape([-1 if k == i else 1 for k in range(values.ndim)])
              for i, n in enumerate(values.shape)]
    index = tuple(ranges[a] for label in rhs for a in axes_of[label])
    out = np.zeros(dims, dtype=values.dtype)
    out[index] = values
    return out


def _square_matrices(x, what: str):
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{what} must be (batches of) square matrices, got shape {list(x.shape)}")


@kernel("MatrixInverse")
def _matrix_inverse(op, ctx):
    adjoint = bool(op.get_attr("adjoint"))

    def compute(x):
        _square_matrices(x, "input")
        m = _adjoint(x) if adjoint else x
        try:
            inverse = np.linalg.inv(m.astype(_compute_type(x.dtype), copy=False))
        except np.linalg.LinAlgError:
            raise ValueError("Input is not invertible.") from None
        return inverse.astype(x.dtype, copy=False)
    return compute


@kernel("MatrixDeterminant")
def _matrix_determinant(op, ctx):
    def compute(x):
        _square_matrices(x, "input")
        return np.asarray(np.linalg.det(x.astype(_compute_type(x.dtype), copy=False))).astype(x.dtype)
    return compute


# -- decompositions, solves and the other linear-algebra ops (definitions: linalg.py) -----------------
# numpy.linalg where it takes batches; scipy.linalg (per matrix) for what numpy lacks.

def _each_matrix(fn, *arrays):
    """``fn`` applied to the matrices of same-batch ``arrays``, stacked back."""
    batch = arrays[0].shape[:-2]
    flat = [a.reshape((-1,) + a.shape[-2:]) for a in arrays]
    results = [fn(*(a[i] for a in flat)) for i in range(flat[0].shape[0])]
    if not results:
        return None
    first = np.asarray(results[0])
    return np.stack(results).reshape(batch + first.shape) if results else None


def _float_work(x: np.ndarray) -> np.ndarray:
    """float16 / bfloat16 (stored as float32 in gradreg) computed in float32."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


@kernel("Cholesky")
def _cholesky(op, ctx):
    def compute(x):
        _square_matrices(x, "input")
        work = _float_work(x)
        try:
            out = np.linalg.cholesky(work)
        except np.linalg.LinAlgError:
            # TensorFlow fills the lower triangle of a matrix that is not positive definite
            # with NaN (and warns) instead of failing.
            out = _each_matrix(_cholesky_or_nan, work)
        return out.astype(x.dtype, copy=False)
    return compute


def _cholesky_or_nan(m: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.cholesky(m)
    except np.linalg.LinAlgError:
        return np.where(np.tri(m.shape[-1], dtype=bool), np.nan, 0).astype(m.dtype)


@kernel("CholeskyGrad")
def _cholesky_grad(op, ctx):
    def compute(chol, grad):
        _square_matrices(chol, "l")
        work_l, work_g = _float_work(np.tril(chol)), _float_work(np.tril(grad))
        middle = np.tril(np.swapaxes(work_l, -1, -2) @ work_g)
        middle = middle - 0.5 * np.tril(np.triu(middle))          # the diagonal halved
        inverse = _each_matrix(lambda m: scipy_linalg.solve_triangular(m, np.eye(m.shape[-1]), lower=True), work_l)
        if inverse is None:
            return np.zeros_like(chol)
        s = np.swapaxes(inverse, -1, -2) @ middle @ inverse
        return (0.5 * (s + np.swapaxes(s, -1, -2))).astype(chol.dtype, copy=False)
    return compute


@kernel("LogMatrixDeterminant")
def _log_matrix_determinant(op, ctx):
    def compute(x):
        _square_matrices(x, "input")
        sign, log_abs = np.linalg.slogdet(_float_work(x))
        return np.asarray(sign).astype(x.dtype), np.asarray(log_abs).astype(x.dtype)
    return compute


@kernel("MatrixSolve")
def _matrix_solve(op, ctx):
    adjoint = bool(op.get_attr("adjoint"))

    def compute(matrix, rhs):
        _square_matrices(matrix, "matrix")
        _solve_shapes(matrix, rhs, broadcast=False)
        m = _adjoint(matrix) if adjoint else matrix
        try:
            return np.linalg.solve(_float_work(m), _float_work(rhs)).astype(matrix.dtype, copy=False)
        except np.linalg.LinAlgError:
            raise ValueError("Input matrix is not invertible.") from None
    return compute


def _solve_shapes(matrix: np.ndarray, rhs: np.ndarray, broadcast: bool) -> None:
    if rhs.ndim < 2 or rhs.shape[-2] != matrix.shape[-1]:
        raise ValueError(f"Input matrix and right-hand side must have the same number of rows: "
                         f"{list(matrix.shape)} vs. {list(rhs.shape)}")
    if not broadcast and matrix.shape[:-2] != rhs.shape[:-2]:
        raise ValueError(f"matrix and rhs must have the same batch dimensions: "
                         f"{list(matrix.shape)} vs. {list(rhs.shape)}")


def _triangular_solve(matrix: np.ndarray, rhs: np.ndarray, lower: bool, adjoint: bool) -> np.ndarray:
    """Solve with the lower (upper) triangle of each matrix, its batch dims broadcast with rhs's.
    A zero on the diagonal gives inf/NaN, as TensorFlow's substitution does (no error)."""
    batch = np.broadcast_shapes(matrix.shape[:-2], rhs.shape[:-2])
    matrix = np.broadcast_to(matrix, batch + matrix.shape[-2:])
    rhs = np.broadcast_to(rhs, batch + rhs.shape[-2:])
    trans = "C" if adjoint else "N"

    def solve(m, b):
        try:
            return scipy_linalg.solve_triangular(m, b, lower=lower, trans=trans, check_finite=False)
        except (np.linalg.LinAlgError, ValueError):
            return _substitution(m, b, lower, adjoint)
    out = _each_matrix(solve, matrix, rhs)
    return np.zeros(batch + rhs.shape[-2:], rhs.dtype) if out is None else out


def _substitution(m: np.ndarray, b: np.ndarray, lower: bool, adjoint: bool) -> np.ndarray:
    """Forward or back substitution without checks (for singular triangles: inf/NaN)."""
    a = np.tril(m) if lower else np.triu(m)
    if adjoint:
        a, lower = np.conj(a.T), not lower
    n = a.shape[0]
    x = np.zeros(np.broadcast_shapes(b.shape, (n, 1)), np.result_type(a, b))
    with np.errstate(all="ignore"):
        for i in (range(n) if lower else range(n - 1, -1, -1)):
            x[i] = (b[i] - a[i] @ x) / a[i, i]
    return x


@kernel("MatrixTriangularSolve")
def _matrix_triangular_solve(op, ctx):
    lower, adjoint = bool(op.get_attr("lower")), bool(op.get_attr("adjoint"))

    def compute(matrix, rhs):
        _square_matrices(matrix, "matrix")
        _solve_shapes(matrix, rhs, broadcast=True)
        return _triangular_solve(_float_work(matrix), _float_work(rhs), lower, adjoint).astype(matrix.dtype, copy=False)
    return compute


def bands_to_matrix(bands: np.ndarray, lower: bool) -> np.ndarray:
    """The dense triangular matrices of BandedTriangularSolve's bands [..., K, M] (LEFT_RIGHT
    alignment): lower, row d is the d-th subdiagonal right-aligned (A[i, i-d] = bands[d, i]);
    upper, row r is the (K-1-r)-th superdiagonal left-aligned (A[i, i+k] = bands[r, i])."""
    count, n = bands.shape[-2:]
    out = np.zeros(bands.shape[:-2] + (n, n), bands.dtype)
    for row in range(min(count, n)):
        d = row if lower else count - 1 - row
        if d >= n:
            continue
        i = np.arange(d, n) if lower else np.arange(n - d)
        j = i - d if lower else i + d
        out[..., i, j] = bands[..., row, i]
    return out


@kernel("BandedTriangularSolve")
def _banded_triangular_solve(op, ctx):
    lower, adjoint = bool(op.get_attr("lower")), bool(op.get_attr("adjoint"))

    def compute(bands, rhs):
        if bands.ndim < 2 or rhs.ndim < 2 or bands.shape[-1] != rhs.shape[-2]:
            raise ValueError(f"matrix [..., K, M] and rhs [..., M, N] do not agree: {list(bands.shape)} vs. "
                             f"{list(rhs.shape)}")
        if bands.shape[-2] > bands.shape[-1]:
            raise ValueError(f"the number of bands ({bands.shape[-2]}) exceeds the matrix size ({bands.shape[-1]})")
        dense = bands_to_matrix(_float_work(bands), lower)
        return _triangular_solve(dense, _float_work(rhs), lower, adjoint).astype(bands.dtype, copy=False)
    return compute


@kernel("MatrixSolveLs")
def _matrix_solve_ls(op, ctx):
    fast = bool(op.get_attr("fast"))

    def compute(matrix, rhs, l2_regularizer):
        if matrix.ndim < 2 or rhs.ndim < 2 or matrix.shape[:-1] != rhs.shape[:-1]:
            raise ValueError(f"matrix [..., M, N] and rhs [..., M, K] do not agree: {list(matrix.shape)} vs. "
                             f"{list(rhs.shape)}")
        a, b = _float_work(matrix), _float_work(rhs)
        if not fast:
            out = _each_matrix(lambda m, r: np.linalg.lstsq(m, r, rcond=None)[0], a, b)
            shape = matrix.shape[:-2] + (matrix.shape[-1], rhs.shape[-1])
            return (np.zeros(shape, matrix.dtype) if out is None else out).astype(matrix.dtype, copy=False)
        return _normal_equations(a, b, float(l2_regularizer)).astype(matrix.dtype, copy=False)
    return compute


def _normal_equations(a: np.ndarray, b: np.ndarray, l2: float) -> np.ndarray:
    """TensorFlow's fast path: (A^H A + l2 I)^-1 A^H B when A has at least as many rows as
    columns, else A^H (A A^H + l2 I)^-1 B, by Cholesky."""
    rows, cols = a.shape[-2:]
    ah = _adjoint(a)
    over = rows >= cols
    gram = ah @ a if over else a @ ah
    gram = gram + l2 * np.eye(gram.shape[-1], dtype=gram.dtype)
    try:
        chol = np.linalg.cholesky(gram)
    except np.linalg.LinAlgError:
        raise ValueError("Input matrix is not invertible (the regularized Gramian is not positive definite).") from None
    target = ah @ b if over else b
    z = _triangular_solve(chol, _triangular_solve(chol, target, True, False), True, True)
    return z if over else ah @ z


@kernel("Qr")
def _qr(op, ctx):
    mode = "complete" if op.get_attr("full_matrices") else "reduced"

    def compute(x):
        if x.ndim < 2:
            raise ValueError(f"input must have rank >= 2, got shape {list(x.shape)}")
        q, r = np.linalg.qr(_float_work(x), mode=mode)
        return q.astype(x.dtype, copy=False), r.astype(x.dtype, copy=False)
    return compute


@kernel("Svd")
def _svd(op, ctx):
    compute_uv, full = bool(op.get_attr("compute_uv")), bool(op.get_attr("full_matrices"))

    def compute(x):
        if x.ndim < 2:
            raise ValueError(f"input must have rank >= 2, got shape {list(x.shape)}")
        work = _float_work(x)
        if not compute_uv:
            s = np.linalg.svd(work, compute_uv=False)
            empty = np.zeros([0], x.dtype)
            return s.astype(x.dtype), empty, empty
        u, s, vh = np.linalg.svd(work, full_matrices=full)
        return s.astype(x.dtype), u.astype(x.dtype, copy=False), _adjoint(vh).astype(x.dtype)
    return compute


@kernel("SelfAdjointEigV2")
def _self_adjoint_eig(op, ctx):
    compute_v = bool(op.get_attr("compute_v"))

    def compute(x):
        _square_matrices(x, "input")
        work = _float_work(x)
        if not compute_v:
            return np.linalg.eigvalsh(work).astype(x.dtype), np.zeros([0], x.dtype)
        e, v = np.linalg.eigh(work)
        return e.astype(x.dtype), v.astype(x.dtype, copy=False)
    return compute


@kernel("Eig")
def _eig(op, ctx):
    compute_v = bool(op.get_attr("compute_v"))
    out_type = op.get_attr("Tout").storage

    def compute(x):
        _square_matrices(x, "input")
        if x.dtype.kind == "c":
            e, v = _sorted_by_magnitude(*np.linalg.eig(x))
        else:
            # TensorFlow's real path (Eigen's real Schur form) orders eigenvalues its own way,
            # which gradreg does not reproduce: LAPACK's order (often the same).
            e, v = np.linalg.eig(x)
        e = e.astype(out_type, copy=False)
        return (e, v.astype(out_type, copy=False)) if compute_v else (e, np.zeros([0], out_type))
    return compute


def _sorted_by_magnitude(e: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues of a complex matrix in TensorFlow's order: Eigen's ComplexEigenSolver
    selection-sorts them by increasing magnitude (the first minimum of the rest swapped into
    place), the eigenvectors following; LAPACK leaves them in the Schur form's order."""
    e, v = e.copy(), v.copy()
    flat_e, flat_v = e.reshape(-1, e.shape[-1]), v.reshape((-1,) + v.shape[-2:])
    for values, vectors in zip(flat_e, flat_v):
        for i in range(values.shape[0]):
            k = i + int(np.argmin(np.abs(values[i:])))
            if k != i:
                values[[i, k]] = values[[k, i]]
                vectors[:, [i, k]] = vectors[:, [k, i]]
    return flat_e.reshape(e.shape), flat_v.reshape(v.shape)


@kernel("Lu")
def _lu(op, ctx):
    index_type = op.get_attr("output_idx_type").storage

    def compute(x):
        _square_matrices(x, "input")
        n = x.shape[-1]

        def factor(m):
            lu, pivots = scipy_linalg.lu_factor(m, check_finite=False)
            perm = np.arange(n)
            for i, j in enumerate(pivots):
                perm[[i, j]] = perm[[j, i]]
            return lu, perm
        work = _float_work(x)
        flat = work.reshape((-1, n, n))
        results = [factor(m) for m in flat]
        lu = np.stack([r[0] for r in results]) if results else np.zeros_like(flat)
        perm = np.stack([r[1] for r in results]) if results else np.zeros((0, n), np.int64)
        return lu.reshape(x.shape).astype(x.dtype, copy=False), perm.reshape(x.shape[:-1]).astype(index_type)
    return compute


@kernel("MatrixSquareRoot")
def _matrix_square_root(op, ctx):
    def compute(x):
        _square_matrices(x, "input")
        work = _float_work(x)
        out = _each_matrix(lambda m: _sqrtm(m), work)
        return (np.zeros_like(x) if out is None else out).astype(x.dtype, copy=False)
    return compute


def _sqrtm(m: np.ndarray) -> np.ndarray:
    """The principal square root (scipy's Schur method); for a real matrix without a real one
    (a negative real eigenvalue), NaN, as TensorFlow's real Schur method gives."""
    if m.size == 0:
        return m
    with np.errstate(all="ignore"):
        root = scipy_linalg.sqrtm(m)
    if m.dtype.kind != "c" and np.iscomplexobj(root):
        if np.max(np.abs(root.imag), initial=0.0) > 1e3 * np.finfo(m.dtype).eps * max(1.0, np.max(np.abs(root))):
            return np.full(m.shape, np.nan, m.dtype)
        root = root.real
    return root


@kernel("TridiagonalSolve")
def _tridiagonal_solve(op, ctx):
    def compute(diagonals, rhs):
        if diagonals.ndim < 2 or diagonals.shape[-2] != 3:
            raise ValueError(f"diagonals must have shape [..., 3, M], got {list(diagonals.shape)}")
        if rhs.ndim < 2 or rhs.shape[-2] != diagonals.shape[-1] or rhs.shape[:-2] != diagonals.shape[:-2]:
            raise ValueError(f"diagonals [..., 3, M] and rhs [..., M, K] do not agree: {list(diagonals.shape)} vs. "
                             f"{list(rhs.shape)}")

        def solve(d, b):
            banded = np.zeros_like(d)
            banded[0, 1:], banded[1], banded[2, :-1] = d[0, :-1], d[1], d[2, 1:]
            try:
                return scipy_linalg.solve_banded((1, 1), banded, b, check_finite=False)
            except np.linalg.LinAlgError:
                raise ValueError("The matrix is not invertible.") from None
        out = _each_matrix(solve, diagonals, rhs)
        return np.zeros_like(rhs) if out is None else out.astype(rhs.dtype, copy=False)
    return compute


@kernel("TridiagonalMatMul")
def _tridiagonal_matmul(op, ctx):
    def compute(superdiag, maindiag, subdiag, rhs):
        n = rhs.shape[-2] if rhs.ndim >= 2 else -1
        for name, d in (("superdiag", superdiag), ("maindiag", maindiag), ("subdiag", subdiag)):
            if d.ndim < 2 or d.shape[-2] != 1 or d.shape[-1] != n:
                raise ValueError(f"{name} must have shape [..., 1, M] with M = {n} (the rows of rhs), "
                                 f"got {list(d.shape)}")
        column = lambda d: np.swapaxes(d, -1, -2)   # noqa: E731  [..., 1, M] -> [..., M, 1]
        out = column(maindiag) * rhs
        out[..., :-1, :] += column(superdiag)[..., :-1, :] * rhs[..., 1:, :]
        out[..., 1:, :] += column(subdiag)[..., 1:, :] * rhs[..., :-1, :]
        return out.astype(rhs.dtype, copy=False)
    return compute


@kernel("Cross")
def _cross(op, ctx):
    def compute(a, b):
        if a.shape != b.shape:
            raise ValueError(f"a and b must be the same shape: {list(a.shape)} vs. {list(b.shape)}")
        if a.ndim == 0 or a.shape[-1] != 3:
            raise ValueError(f"a and b must have a last dimension of size 3, got shape {list(a.shape)}")
        with np.errstate(all="ignore"):
            return np.cross(a, b).astype(a.dtype, copy=False)
    return compute
