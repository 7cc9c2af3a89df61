"""Gradient rules of the math family's linear algebra (definitions in linalg.py), emitting
standard TensorFlow ops.

Notation: X^H is the conjugate transpose; gradients follow TensorFlow's convention for complex
values, dL/dRe + i dL/dIm, so a rule is the adjoint of the op's differential under
<P, Q> = Re tr(P^H Q). The formulas are the standard ones (TensorFlow's linalg_grad.py uses
them too) except where noted; where they differ from TensorFlow's, finite differences side with
gradreg (tests/test_linalg_grads.py, the op sweep's TENSORFLOW_WRONG entries):

* LogMatrixDeterminant, complex: log|det A| is real, so only the real part of its cotangent
  counts, and sign = det / |det| moves with A: grad = (Re g_log + i Im(g_sign conj(sign))) A^-H.
  TensorFlow uses the whole complex cotangent and ignores the sign's.
* MatrixSquareRoot, complex: X = sqrtm(A) solves X X = A, so the gradient S solves
  S X^H + X^H S = G (the adjoint of the Sylvester operator), via the Kronecker system
  (I (x) conj(X) + X^H (x) I) vec(S) = vec(G). TensorFlow transposes where the adjoint is needed.
* Svd, complex: the singular values are real, so only the real part of their cotangent counts
  (TensorFlow uses the complex cotangent). The reduced-SVD rule works with unknown matrix dims
  (TensorFlow requires them static).
* Matrix dims known only at run time (or a rank unknown): MatrixSquareRoot builds its system
  from the run-time order, MatrixSolveLs picks the tall or the wide system with a cond, as
  TensorFlow's rules do; Qr and Svd with full_matrices need the dims statically, as TensorFlow's.
* TridiagonalSolve, complex: the transposed system must be the adjoint (conjugated) one, and the
  diagonals' gradient uses conj(x).
* MatrixSolveLs: fast=False (the minimum-norm least-squares solution) has TensorFlow's fast
  rule with l2_regularizer 0 (the same function for a matrix of full rank; TensorFlow has no
  rule); complex matrices use the adjoint where TensorFlow transposes.
* Cholesky and SelfAdjointEigV2 read only the lower triangle of their input, which they take
  to be Hermitian. For an input built Hermitian (x + x^H, a Gram or kernel matrix) every
  convention gives the same result; for a free matrix, gradients(symmetric_inputs=...) (gradreg
  grad --symmetric-inputs) chooses: "tensorflow", the default, gives TensorFlow's values, the
  Hermitian 1/2 (G + G^H) for Cholesky (and so tf.linalg.logdet, built on it), as JAX and
  PyTorch also do, and G folded onto the lower triangle for SelfAdjointEigV2 (G_ij + conj(G_ji)
  below the diagonal, Re G_ii on it, 0 above), where JAX and PyTorch give 1/2 (G + G^H);
  "symmetric" gives 1/2 (G + G^H) for both (JAX's and PyTorch's values); "folded" gives the
  folded gradient for both, the derivative of what the kernels compute from the n^2 entries
  (the only one finite differences on a free input agree with).
* Qr, Eig, SelfAdjointEigV2, MatrixSolve,
  MatrixTriangularSolve, BandedTriangularSolve, TridiagonalMatMul and Cross give TensorFlow's
  values. The Qr rule is derived here for R with a real diagonal (LAPACK's and Eigen's choice):
  grad = (G_q + Q herm(M)) R^-H, M = G_r R^H - Q^H G_q, herm(M) = triu(M, 1) + triu(M, 1)^H +
  Re diag(M); a wide input [X | Y] differentiates X through the square rule and Y through Q.
"""
from __future__ import annotations

import numpy as np

from gradreg.autodiff import rules
from gradreg.autodiff.gradients import symmetric_inputs_mode
from gradreg.build.builders import apply_op, constant
from gradreg.build.control_flow import cond
from gradreg.errors import GradientError, describe_node
from gradreg.model.graph import Tensor
from gradreg_plugins.math import family
from gradreg_plugins.rule_helpers import conj, dense_gradients, unbroadcast_batch

# -- helpers --------------------------------------------------------------------------------------------


def _op(op_type: str, *args, **attrs) -> Tensor:
    return apply_op(op_type, *args, **attrs)


def _c(value, like: Tensor) -> Tensor:
    return constant(value, like.known_dtype.base_dtype)


def _is_complex(t: Tensor) -> bool:
    return t.known_dtype.is_complex


def _matmul(a: Tensor, b: Tensor, adj_a: bool = False, adj_b: bool = False) -> Tensor:
    return _op("BatchMatMulV2", a, b, adj_x=adj_a, adj_y=adj_b)


def _adj(t: Tensor) -> Tensor:
    """The conjugate transpose of the innermost matrices."""
    rank = t.shape.rank
    if rank is not None:
        perm = rules.ints(list(range(rank - 2)) + [rank - 1, rank - 2])
    else:
        r = _op("Rank", t)
        lead = _op("Range", rules.ints(0), r - rules.ints(2), rules.ints(1))
        perm = _op("ConcatV2", [lead, _op("Pack", [r - rules.ints(1), r - rules.ints(2)], axis=0)], rules.ints(0))
    return _op("ConjugateTranspose" if _is_complex(t) else "Transpose", t, perm)


def _diag(v: Tensor) -> Tensor:
    return _op("MatrixDiag", v)


def _diag_part(m: Tensor) -> Tensor:
    return _op("MatrixDiagPart", m)


def _tril(m: Tensor, k: int = 0) -> Tensor:
    """The lower triangle (k = 0) or the strictly lower one (k = -1)."""
    band = _op("MatrixBandPart", m, rules.ints(-1), rules.ints(0))
    return band if k == 0 else band - _diag(_diag_part(m))


def _triu(m: Tensor, k: int = 0) -> Tensor:
    band = _op("MatrixBandPart", m, rules.ints(0), rules.ints(-1))
    return band if k == 0 else band - _diag(_diag_part(m))


def _real_as(t: Tensor, like: Tensor) -> Tensor:
    """Re(t) in like's (complex) type: t itself for real types."""
    if not _is_complex(t):
        return t
    real = _op("Real", t, Tout=t.known_dtype.real_dtype)
    return _op("Complex", real, _op("ZerosLike", real), Tout=like.known_dtype.base_dtype)


def _expand_matrix(t: Tensor) -> Tensor:
    """A batch of scalars [...] as [..., 1, 1]."""
    return _op("ExpandDims", _op("ExpandDims", t, rules.ints(-1)), rules.ints(-1))


def _right_solve_upper_adjoint(y: Tensor, r: Tensor) -> Tensor:
    """Y R^-H for an upper triangular R: (R^-1 Y^H)^H."""
    return _adj(_op("MatrixTriangularSolve", r, _adj(y), lower=False, adjoint=False))


def _pairwise_reciprocal(values: Tensor) -> Tensor:
    """F[i, j] = 1 / (values[j] - values[i]), 0 on the diagonal (and for equal values)."""
    difference = _op("ExpandDims", values, rules.ints(-2)) - _op("ExpandDims", values, rules.ints(-1))
    return _op("DivNoNan", _op("OnesLike", difference), difference)


def _zeros_or(g, like: Tensor) -> Tensor:
    return g if g is not None else _op("ZerosLike", like)


def _static_matrix_dims(op, t: Tensor) -> tuple[int, int]:
    dims = t.shape.as_list() if t.shape.rank is not None else None
    if dims is None or dims[-2] is None or dims[-1] is None:
        raise GradientError(f"{describe_node(op.name, op.type)}: the gradient needs the matrix dimensions "
                            f"statically (got shape {t.shape}), as TensorFlow's does")
    return dims[-2], dims[-1]


# -- determinants, inverses, square roots ---------------------------------------------------------------------

@family.gradient("LogMatrixDeterminant")
@dense_gradients
def _log_matrix_determinant_grad(op, grad_sign, grad_log):
    """Real: g_log A^-T. Complex: (Re g_log + i Im(g_sign conj(sign))) A^-H (see the docstring)."""
    a = op.inputs[0]
    sign, log_abs = op.outputs
    if not _is_complex(a):
        scale = _zeros_or(grad_log, log_abs)
    else:
        scale = _real_as(grad_log, a) if grad_log is not None else _op("ZerosLike", log_abs)
        if grad_sign is not None:
            phase = _op("Imag", grad_sign * _op("Conj", sign), Tout=a.known_dtype.real_dtype)
            scale = scale + _op("Complex", _op("ZerosLike", phase), phase, Tout=a.known_dtype.base_dtype)
    return _expand_matrix(scale) * _op("MatrixInverse", a, adjoint=True)


@family.gradient("MatrixSquareRoot")
@dense_gradients
def _matrix_square_root_grad(op, grad):
    """S with S X^H + X^H S = G (X = sqrtm(A)), from the Kronecker system."""
    x = op.outputs[0]
    n = _matrix_size(x)
    xh = _adj(x)
    eye = _eye(n, x)
    system = _kronecker(eye, conj(x), n) + _kronecker(xh, eye, n)
    batch = _batch_shape(x)
    vec_g = _op("Reshape", grad, _concat_shape(batch, [n * n, 1]))
    solution = _op("MatrixSolve", system, vec_g)
    return _op("Reshape", solution, _concat_shape(batch, [n, n]))


def _matrix_size(t: Tensor):
    """The order of t's (square) matrices: an int when static, else a scalar Tensor."""
    last = t.shape[-1] if t.shape.rank is not None else None
    if last is not None:
        return last
    return _op("StridedSlice", _op("Shape", t), rules.ints([-1]), rules.ints([0]), rules.ints([1]), shrink_axis_mask=1)


def _eye(n, like: Tensor) -> Tensor:
    """The n x n identity in like's type (n an int or a scalar Tensor)."""
    if isinstance(n, int):
        return constant(np.eye(n), like.known_dtype.base_dtype)
    return _diag(_op("Fill", _op("Pack", [n], axis=0), _c(1, like)))


def _batch_shape(t: Tensor):
    """t's batch dims (all but the last two): a list of ints when static, else a Tensor."""
    if t.shape.rank is not None and all(d is not None for d in t.shape.as_list()[:-2]):
        return t.shape.as_list()[:-2]
    return _op("StridedSlice", _op("Shape", t), rules.ints([0]), rules.ints([-2]), rules.ints([1]))


def _concat_shape(batch, inner: list) -> Tensor:
    """batch (ints or a Tensor) followed by inner (ints, or scalar Tensors where not static)."""
    if isinstance(batch, list) and all(isinstance(d, int) for d in inner):
        return rules.ints(batch + inner)
    parts = [rules.ints(batch) if isinstance(batch, list) else batch]
    parts.append(_op("Pack", [rules.ints(d) if isinstance(d, int) else d for d in inner], axis=0))
    return _op("ConcatV2", parts, rules.ints(0))


def _kronecker(a: Tensor, b: Tensor, n) -> Tensor:
    """kron(a, b) of (batches of) n x n matrices: [i*n + k, j*n + l] = a[i, j] b[k, l]; a
    matrix without batch dims broadcasts."""
    def reshape(t, inner):
        batch = _batch_shape(t) if t.shape.rank != 2 else []
        return _op("Reshape", t, _concat_shape(batch, inner))
    product = reshape(a, [n, 1, n, 1]) * reshape(b, [1, n, 1, n])
    batch = _batch_shape(product)
    if isinstance(batch, list):
        batch = batch[:-2]
    else:
        batch = _op("StridedSlice", batch, rules.ints([0]), rules.ints([-2]), rules.ints([1]))
    return _op("Reshape", product, _concat_shape(batch, [n * n, n * n]))


# -- decompositions ---------------------------------------------------------------------------------------------

@family.gradient("Cholesky")
@dense_gradients
def _cholesky_grad(op, grad):
    """S = L^-H Phi(L^H G) L^-1 (Phi: the lower triangle with the diagonal halved), the gradient
    for Hermitian perturbations, made Hermitian or folded onto the lower triangle the kernel
    reads (see the module docstring); Hermitian by default, as TensorFlow, JAX and PyTorch."""
    chol = op.outputs[0]
    middle = _matmul(chol, grad, adj_a=True)
    middle = _tril(middle) - _c(0.5, middle) * _diag(_diag_part(middle))
    left = _op("MatrixTriangularSolve", chol, middle, lower=True, adjoint=True)            # L^-H Phi
    s = _adj(_op("MatrixTriangularSolve", chol, _adj(left), lower=True, adjoint=True))     # (L^-H Phi) L^-1
    return _hermitian_input_grad(s, tensorflow="symmetric")


def _hermitian_input_grad(g: Tensor, tensorflow: str) -> Tensor:
    """The gradient with respect to an input read as Hermitian, from G, one that is right for
    Hermitian perturbations: 1/2 (G + G^H) ("symmetric") or G_ij + conj(G_ji) below the diagonal,
    Re G_ii on it, 0 above ("folded": the gradient of a function of the lower triangle, what the
    kernels read), as gradients()' symmetric_inputs says; ``tensorflow`` is TensorFlow's choice
    for the op, the default."""
    mode = symmetric_inputs_mode()
    if mode == "tensorflow":
        mode = tensorflow
    if mode == "symmetric":
        return _c(0.5, g) * (g + _adj(g))
    folded = _tril(g + _adj(g))
    return _op("MatrixSetDiag", folded, _c(0.5, folded) * _diag_part(folded))


@family.gradient("Qr")
@dense_gradients
def _qr_grad(op, grad_q, grad_r):
    q, r = op.outputs
    a = op.inputs[0]
    m, n = _static_matrix_dims(op, a)
    if m > n and op.get_attr("full_matrices"):
        raise GradientError(f"{describe_node(op.name, op.type)}: no gradient for full_matrices=True with more rows "
                            f"than columns (the extra columns of Q are not determined by the input), as in TensorFlow")
    grad_q, grad_r = _zeros_or(grad_q, q), _zeros_or(grad_r, r)
    if m >= n:
        return _qr_square_or_tall(q, r, grad_q, grad_r)
    # A = [X | Y], X = Q U square, Y = Q V: V's cotangent reaches Q through V = Q^H Y.
    y = a[..., :, m:]
    u = r[..., :, :m]
    grad_u, grad_v = grad_r[..., :, :m], grad_r[..., :, m:]
    grad_x = _qr_square_or_tall(q, u, grad_q + _matmul(y, grad_v, adj_b=True), grad_u)
    return _op("ConcatV2", [grad_x, _matmul(q, grad_v)], rules.ints(-1))


def _qr_square_or_tall(q: Tensor, r: Tensor, grad_q: Tensor, grad_r: Tensor) -> Tensor:
    """(G_q + Q herm(M)) R^-H, M = G_r R^H - Q^H G_q (see the module docstring)."""
    m = _matmul(grad_r, r, adj_b=True) - _matmul(q, grad_q, adj_a=True)
    upper = _triu(m, -1)
    herm = upper + _adj(upper) + _real_as(_diag(_diag_part(m)), m)
    return _right_solve_upper_adjoint(grad_q + _matmul(q, herm), r)


@family.gradient("SelfAdjointEigV2")
@dense_gradients
def _self_adjoint_eig_grad(op, grad_e, grad_v):
    """V (diag(g_e) + F o (V^H g_V)) V^H, F[i, j] = 1 / (e_j - e_i), folded onto the lower
    triangle the kernel reads by default, as TensorFlow (see the module docstring)."""
    a = op.inputs[0]
    e = op.outputs[0]
    if op.get_attr("compute_v"):
        v = op.outputs[1]
    else:
        e, v = _op("SelfAdjointEigV2", a, compute_v=True)
    middle = _diag(_zeros_or(grad_e, e))
    if grad_v is not None and op.get_attr("compute_v"):
        middle = middle + _pairwise_reciprocal(e) * _matmul(v, grad_v, adj_a=True)
    return _hermitian_input_grad(_matmul(v, _matmul(middle, v, adj_b=True)), tensorflow="folded")


@family.gradient("Eig")
@dense_gradients
def _eig_grad(op, grad_e, grad_v):
    """V^-H (diag(g_e) + conj(F) o (V^H g_V - V^H V diag(Re diag(V^H g_V)))) V^H, F[i, j] =
    1 / (e_j - e_i) (eigenvectors of unit norm); the real part for a real input."""
    a = op.inputs[0]
    e = op.outputs[0]
    if op.get_attr("compute_v"):
        v = op.outputs[1]
    else:
        e, v = _op("Eig", a, compute_v=True, Tout=e.known_dtype.base_dtype)
    middle = _diag(_zeros_or(grad_e, e))
    if grad_v is not None and op.get_attr("compute_v"):
        vh_gv = _matmul(v, grad_v, adj_a=True)
        normalization = _matmul(_matmul(v, v, adj_a=True), _diag(_real_as(_diag_part(vh_gv), vh_gv)))
        middle = middle + _op("Conj", _pairwise_reciprocal(e)) * (vh_gv - normalization)
    grad_a = _op("MatrixSolve", v, _matmul(middle, v, adj_b=True), adjoint=True)
    if not _is_complex(a):
        return _op("Real", grad_a, Tout=a.known_dtype.base_dtype)
    return grad_a


@family.gradient("Svd")
@dense_gradients
def _svd_grad(op, grad_s, grad_u, grad_v):
    a = op.inputs[0]
    s = op.outputs[0]
    if grad_s is not None and _is_complex(s):
        grad_s = _real_as(grad_s, s)    # the singular values are real
    if not op.get_attr("compute_uv"):
        _, u, v = _op("Svd", a, compute_uv=True, full_matrices=False)
        return _matmul(u, _matmul(_diag(_zeros_or(grad_s, s)), v, adj_b=True))
    u, v = op.outputs[1:]
    if op.get_attr("full_matrices") and (grad_u is not None or grad_v is not None):
        return _svd_full_matrices_grad(op, s, u, v, grad_s, grad_u, grad_v)
    return _svd_reduced_grad(s, u, v, grad_s, grad_u, grad_v)


def _svd_reduced_grad(s, u, v, grad_s, grad_u, grad_v, extra=None):
    """U [S_bar + (J + J^H) S + S (K + K^H) + 1/2 S^-1 (L^H - L)] V^H + (I - U U^H) G_u S^-1 V^H
    + U S^-1 G_v^H (I - V V^H), J = F o (U^H G_u), K = F o (V^H G_v), L = I o (V^H G_v),
    F[i, j] = 1 / (s_j^2 - s_i^2) (Townsend; Wan and Zhang for the complex L term)."""
    s_matrix = _diag(s)
    s_inverse = _diag(_op("Reciprocal", s))
    f = _pairwise_reciprocal(_op("Square", s))
    inner = _diag(_zeros_or(grad_s, s))
    outer = None
    if grad_u is not None:
        j = f * _matmul(u, grad_u, adj_a=True)
        inner = inner + _matmul(j + _adj(j), s_matrix)
        projected = grad_u - _matmul(u, _matmul(u, grad_u, adj_a=True))
        outer = _matmul(_matmul(projected, s_inverse), v, adj_b=True)
    if grad_v is not None:
        vh_gv = _matmul(v, grad_v, adj_a=True)
        k = f * vh_gv
        inner = inner + _matmul(s_matrix, k + _adj(k))
        if _is_complex(s):
            diagonal = _diag(_diag_part(vh_gv))
            inner = inner + _c(0.5, s) * _matmul(s_inverse, _adj(diagonal) - diagonal)
        projected = grad_v - _matmul(v, vh_gv)
        term = _matmul(_matmul(u, s_inverse), projected, adj_b=True)
        outer = term if outer is None else outer + term
    out = _matmul(u, _matmul(inner, v, adj_b=True))
    for term in (outer, extra):
        if term is not None:
            out = out + term
    return out


def _svd_full_matrices_grad(op, s, u, v, grad_s, grad_u, grad_v):
    """full_matrices=True: the first min(m, n) columns as in the reduced rule; one extra column
    (|m - n| = 1) is the null vector w of A or A^H, determined up to sign: dw = -V1 S^-1 U^H dA w
    (wide) adds -U S^-1 V1^H g_w w^H, and symmetrically for a tall input. TensorFlow likewise
    refuses |m - n| > 1 (the extra columns are not determined)."""
    m, n = _static_matrix_dims(op, op.inputs[0])
    k = min(m, n)
    if abs(m - n) > 1:
        raise GradientError(f"{describe_node(op.name, op.type)}: no gradient of U or V for full_matrices=True with "
                            f"|m - n| > 1 (the extra singular vectors are not determined), as in TensorFlow")
    u1, v1 = u[..., :, :k], v[..., :, :k]
    gu1 = None if grad_u is None else grad_u[..., :, :k]
    gv1 = None if grad_v is None else grad_v[..., :, :k]
    extra = None
    s_inverse = _diag(_op("Reciprocal", s))
    if n > m and grad_v is not None:
        w, gw = v[..., :, k:], grad_v[..., :, k:]
        extra = -_matmul(_matmul(_matmul(u1, s_inverse), _matmul(v1, gw, adj_a=True)), w, adj_b=True)
    elif m > n and grad_u is not None:
        w, gw = u[..., :, k:], grad_u[..., :, k:]
        extra = -_matmul(w, _matmul(_matmul(_matmul(gw, u1, adj_a=True), s_inverse), v1, adj_b=True))
    return _svd_reduced_grad(s, u1, v1, grad_s, gu1, gv1, extra)


# -- solves -------------------------------------------------------------------------------------------------------

def _solve_matrix_grad(op, grad_rhs: Tensor):
    """-(grad_rhs X^H), or -(X grad_rhs^H) with adjoint=True (X: the op's output)."""
    x = op.outputs[0]
    if op.get_attr("adjoint"):
        return -_matmul(x, grad_rhs, adj_b=True)
    return -_matmul(grad_rhs, x, adj_b=True)


@family.gradient("MatrixSolve")
@dense_gradients
def _matrix_solve_grad(op, grad):
    a = op.inputs[0]
    grad_b = _op("MatrixSolve", a, grad, adjoint=not op.get_attr("adjoint"))
    return _solve_matrix_grad(op, grad_b), grad_b


@family.gradient("MatrixTriangularSolve")
@dense_gradients
def _matrix_triangular_solve_grad(op, grad):
    a, b = op.inputs
    lower = op.get_attr("lower")
    grad_b = _op("MatrixTriangularSolve", a, grad, lower=lower, adjoint=not op.get_attr("adjoint"))
    grad_a = _solve_matrix_grad(op, grad_b)
    grad_a = _tril(grad_a) if lower else _triu(grad_a)
    return unbroadcast_batch(a, b, grad_a, grad_b)


@family.gradient("BandedTriangularSolve")
@dense_gradients
def _banded_triangular_solve_grad(op, grad):
    """The dense matrix's gradient, read back into the bands (MatrixDiagPartV3, LEFT_RIGHT)."""
    bands, b = op.inputs
    lower = op.get_attr("lower")
    grad_b = _op("BandedTriangularSolve", bands, grad, lower=lower, adjoint=not op.get_attr("adjoint"))
    grad_dense = _solve_matrix_grad(op, grad_b)
    count = bands.shape.as_list()[-2] if bands.shape.rank is not None else None
    if count is not None:
        k = rules.ints([-(count - 1), 0] if lower else [0, count - 1])
    else:
        last = _op("StridedSlice", _op("Shape", bands), rules.ints([-2]), rules.ints([-1]), rules.ints([1]),
                   shrink_axis_mask=1) - rules.ints(1)
        k = _op("Pack", [-last, rules.ints(0)] if lower else [rules.ints(0), last], axis=0)
    grad_bands = _op("MatrixDiagPartV3", grad_dense, k, _c(0, grad_dense), align="LEFT_RIGHT")
    return unbroadcast_batch(bands, b, grad_bands, grad_b)


@family.gradient("MatrixSolveLs")
@dense_gradients
def _matrix_solve_ls_grad(op, grad):
    """The normal equations' gradients (see the module docstring for fast=False); which system
    (more rows or more columns) is decided at run time when the matrix dims are not static, as
    TensorFlow's rule does."""
    a = op.inputs[0]
    regularizer = _op("Cast", op.inputs[2], DstT=a.known_dtype.base_dtype) if op.get_attr("fast") else _c(0, a)
    dims = a.shape.as_list()[-2:] if a.shape.rank is not None else [None, None]
    if None not in dims:
        solve = _least_squares_tall if dims[0] >= dims[1] else _least_squares_wide
        return (*solve(op, grad, regularizer), None)
    shape = _op("Shape", a)
    rows, cols = (_op("StridedSlice", shape, rules.ints([i]), rules.ints([i + 1]), rules.ints([1]),
                      shrink_axis_mask=1) for i in (-2, -1))
    grad_a, grad_b = cond(_op("GreaterEqual", rows, cols), lambda: _least_squares_tall(op, grad, regularizer),
                          lambda: _least_squares_wide(op, grad, regularizer))
    return grad_a, grad_b, None


def _least_squares_tall(op, grad: Tensor, regularizer: Tensor) -> list[Tensor]:
    """X = C^-1 A^H B, C = A^H A + l2 I: grad_b = A Z, grad_a = -A (Z X^H + X Z^H) + B Z^H, Z = C^-1 G."""
    a, b, _ = op.inputs
    gram = _matmul(a, a, adj_a=True)
    z = _op("MatrixSolve", _regularized(gram, regularizer, _matrix_size(gram)), grad)
    xz = _matmul(op.outputs[0], z, adj_b=True)
    return [_matmul(b, z, adj_b=True) - _matmul(a, xz + _adj(xz)), _matmul(a, z)]


def _least_squares_wide(op, grad: Tensor, regularizer: Tensor) -> list[Tensor]:
    """X = A^H D^-1 B, D = A A^H + l2 I: grad_b = Y = D^-1 A G, grad_a = W (G - A^H Y)^H - Y W^H A, W = D^-1 B."""
    a, b, _ = op.inputs
    gram = _matmul(a, a, adj_b=True)
    gram = _regularized(gram, regularizer, _matrix_size(gram))
    y = _op("MatrixSolve", gram, _matmul(a, grad))
    w = _op("MatrixSolve", gram, b)
    return [_matmul(w, grad - _matmul(a, y, adj_a=True), adj_b=True) - _matmul(_matmul(y, w, adj_b=True), a), y]


def _regularized(gram: Tensor, regularizer: Tensor, n) -> Tensor:
    return gram + regularizer * _eye(n, gram)


# -- tridiagonal systems and the cross product ----------------------------------------------------------------------

def _shift_up(t: Tensor) -> Tensor:
    """Rows moved up one along the next-to-last dim, a zero row entering at the bottom."""
    return _op("ConcatV2", [t[..., 1:, :], _op("ZerosLike", t[..., :1, :])], rules.ints(-2))


def _shift_down(t: Tensor) -> Tensor:
    return _op("ConcatV2", [_op("ZerosLike", t[..., :1, :]), t[..., :-1, :]], rules.ints(-2))


@family.gradient("TridiagonalSolve")
@dense_gradients
def _tridiagonal_solve_grad(op, grad):
    """grad_rhs solves the adjoint system; grad_diagonals = -(the three diagonals of grad_rhs X^H)
    (0 where the compact form ignores an entry)."""
    diagonals = op.inputs[0]
    x = op.outputs[0]
    superdiag, maindiag, subdiag = (diagonals[..., i, :] for i in range(3))
    # the adjoint's superdiagonal is conj(subdiag) moved left, its subdiagonal conj(superdiag) moved right
    column = lambda t: _op("ExpandDims", t, rules.ints(-1))   # noqa: E731
    row = lambda t: _op("Squeeze", t, squeeze_dims=[-1])      # noqa: E731
    adjoint = _op("Pack", [conj(row(_shift_up(column(subdiag)))), conj(maindiag),
                           conj(row(_shift_down(column(superdiag))))], axis=-2)
    grad_rhs = _op("TridiagonalSolve", adjoint, grad, partial_pivoting=op.get_attr("partial_pivoting"),
                   perturb_singular=op.get_attr("perturb_singular"))
    x_conj = conj(x)
    last = rules.ints(-1)
    grad_super = -_op("Sum", grad_rhs * _shift_up(x_conj), last)
    grad_main = -_op("Sum", grad_rhs * x_conj, last)
    grad_sub = -_op("Sum", grad_rhs * _shift_down(x_conj), last)
    return _op("Pack", [grad_super, grad_main, grad_sub], axis=-2), grad_rhs


@family.gradient("TridiagonalMatMul")
@dense_gradients
def _tridiagonal_matmul_grad(op, grad):
    """y_i = sub_i b_(i-1) + main_i b_i + super_i b_(i+1)."""
    superdiag, maindiag, subdiag, rhs = op.inputs
    rhs_conj = conj(rhs)
    last = rules.ints(-1)

    def diagonal_grad(shifted):
        return _op("ExpandDims", _op("Sum", shifted * grad, last), rules.ints(-2))
    # A^H g: each diagonal conjugated and turned into a column [..., M, 1]
    grad_rhs = _shift_down(_adj(superdiag) * grad) + _adj(maindiag) * grad + _shift_up(_adj(subdiag) * grad)
    return (diagonal_grad(_shift_up(rhs_conj)), diagonal_grad(rhs_conj), diagonal_grad(_shift_down(rhs_conj)),
            grad_rhs)


@family.gradient("Cross")
@dense_gradients
def _cross_grad(op, grad):
    """a . (b x g) = g . (a x b) = b . (g x a)."""
    a, b = op.inputs
    return _op("Cross", b, grad), _op("Cross", grad, a)

