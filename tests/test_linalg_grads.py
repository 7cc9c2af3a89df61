"""The linear-algebra rules (gradreg_plugins/math/linalg_grads.py) and the diagonal ops
(gradreg_plugins/array/diagonals.py) against central differences (gradreg.testing.
compute_gradient_error, float64), complex inputs through their real and imaginary parts
(TensorFlow's convention dL/dRe + i dL/dIm), including what the op sweep cannot show:
complex cases TensorFlow gets wrong, MatrixSolveLs with fast=False and complex matrices, wide
and tall QR and SVD with singular vectors (through functions that do not depend on their signs
or phases), unknown dims; and kernels whose values the sweep does not store (CholeskyGrad, Lu,
diagonal bands with every alignment) against TensorFlow's, stored by
tests/data/linalg_extra/make_reference.py."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

import gradreg as gr
from gradreg.testing import compute_gradient_error

R = gr.raw_ops
DATA = pathlib.Path(__file__).parent / "data" / "linalg_extra"


def _rng(key=0):
    return np.random.default_rng(key)


def _well_conditioned(n, batch=(), key=0, complex_=False):
    a = _rng(key).normal(size=tuple(batch) + (n, n)) * 0.3
    if complex_:
        a = a + 1j * _rng(key + 100).normal(size=a.shape) * 0.3
    return a + 2.0 * np.eye(n)


def _spd(n, batch=(), key=0, complex_=False):
    a = _rng(key).normal(size=tuple(batch) + (n, n))
    if complex_:
        a = a + 1j * _rng(key + 100).normal(size=a.shape)
    return a @ np.conj(np.swapaxes(a, -1, -2)) / n + np.eye(n)


def _as_real(y):
    if y.dtype.is_complex:
        return R.Pack(values=[R.Real(input=y, Tout=gr.float64), R.Imag(input=y, Tout=gr.float64)], axis=0)
    return y


def _error(build, values: list[np.ndarray], static: bool = True, delta: float = 1e-6) -> float:
    """compute_gradient_error of build(*inputs) (complex outputs as [Re, Im]) w.r.t. float64
    placeholders; a complex value is fed as two placeholders (real, imaginary) joined by Complex."""
    graph = gr.Graph()
    with graph.as_default():
        placeholders, inputs, feeds = [], [], []
        for v in values:
            shape = list(v.shape) if static else [None] * (v.ndim - 2) + list(v.shape[-2:])
            if np.iscomplexobj(v):
                re, im = gr.placeholder(gr.float64, shape), gr.placeholder(gr.float64, shape)
                placeholders += [re, im]
                feeds += [v.real, v.imag]
                inputs.append(R.Complex(real=re, imag=im, Tout=gr.complex128))
            else:
                p = gr.placeholder(gr.float64, shape)
                placeholders.append(p)
                feeds.append(v)
                inputs.append(p)
        y = _as_real(build(*inputs))
        y_shape = gr.Session(graph).run(y, dict(zip(placeholders, feeds))).shape
        return compute_gradient_error(placeholders, [list(f.shape) for f in feeds], y, list(y_shape),
                                      x_init_value=feeds, delta=delta)


def _adj(t):
    return R.ConjugateTranspose(x=t, perm=list(range(t.shape.rank - 2)) + [t.shape.rank - 1, t.shape.rank - 2])


def _gram(u):
    """u u^H: unchanged by the signs and phases of u's columns."""
    return R.BatchMatMulV2(x=u, y=u, adj_y=True)


# -- solves, inverses, determinants --------------------------------------------------------------------

@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("adjoint", [False, True])
def test_matrix_solve(complex_, adjoint):
    a = _well_conditioned(3, (2,), complex_=complex_)
    b = _rng(1).normal(size=(2, 3, 2)) + (1j * _rng(2).normal(size=(2, 3, 2)) if complex_ else 0)
    assert _error(lambda m, r: R.MatrixSolve(matrix=m, rhs=r, adjoint=adjoint), [a, b]) < 1e-8


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("complex_", [False, True])
def test_matrix_triangular_solve_with_broadcast_batch(lower, adjoint, complex_):
    a = _well_conditioned(3, complex_=complex_)
    b = _rng(1).normal(size=(2, 3, 2)) + (1j * _rng(2).normal(size=(2, 3, 2)) if complex_ else 0)
    error = _error(lambda m, r: R.MatrixTriangularSolve(matrix=m, rhs=r, lower=lower, adjoint=adjoint), [a, b])
    assert error < 1e-8


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("adjoint", [False, True])
def test_banded_triangular_solve(lower, adjoint):
    bands = _rng(3).normal(size=(3, 5)) * 0.3
    bands[0 if lower else -1] += 2.0
    b = _rng(1).normal(size=(5, 2))
    error = _error(lambda m, r: R.BandedTriangularSolve(matrix=m, rhs=r, lower=lower, adjoint=adjoint), [bands, b])
    assert error < 1e-8


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("complex_", [False, True])
def test_matrix_solve_ls(shape, fast, complex_):
    a = _rng(4).normal(size=shape) + (1j * _rng(5).normal(size=shape) if complex_ else 0)
    b = _rng(6).normal(size=shape[:-1] + (2,)) + (1j * _rng(7).normal(size=shape[:-1] + (2,)) if complex_ else 0)
    l2 = np.float64(0.3 if fast else 0.0)
    assert _error(lambda m, r: R.MatrixSolveLs(matrix=m, rhs=r, l2_regularizer=l2, fast=fast), [a, b]) < 1e-7


@pytest.mark.parametrize("complex_", [False, True])
def test_log_matrix_determinant_both_outputs(complex_):
    """The sign of a complex determinant moves with the matrix: both outputs differentiated."""
    a = _well_conditioned(3, (2,), complex_=complex_) * np.array([[-1.0], [1.0], [1.0]])

    def build(m):
        sign, log_abs = R.LogMatrixDeterminant(input=m)
        return R.Pack(values=[sign, log_abs], axis=0)
    assert _error(build, [a]) < 1e-8


def test_matrix_inverse_and_determinant_complex():
    a = _well_conditioned(3, complex_=True)
    assert _error(lambda m: R.MatrixInverse(input=m), [a]) < 1e-8
    assert _error(lambda m: R.MatrixDeterminant(input=m), [a]) < 1e-8


@pytest.mark.parametrize("value", ["spd", "nonsymmetric", "complex"])
@pytest.mark.parametrize("static", [True, False])
def test_matrix_square_root(value, static):
    a = {"spd": _spd(3, (2,)), "nonsymmetric": _well_conditioned(3, (2,)) + np.eye(3),
         "complex": _spd(3, (2,), complex_=True)}[value]
    assert _error(lambda m: R.MatrixSquareRoot(input=m), [a], static=static) < 1e-7


# -- decompositions -------------------------------------------------------------------------------------------

def _hermitian(m):
    return (m + _adj(m)) * (0.5 if not m.dtype.is_complex else R.Complex(real=0.5, imag=0.0, Tout=m.dtype))


# (A free input, without symmetrizing, and the symmetric_inputs choices: tests/test_symmetric_inputs.py.)
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("static", [True, False])
def test_cholesky(complex_, static):
    a = _spd(3, (2,), complex_=complex_)
    assert _error(lambda m: R.Cholesky(input=_hermitian(m)), [a], static=static) < 1e-8


@pytest.mark.parametrize("shape", [(4, 3), (3, 3), (3, 5), (2, 4, 2)])
@pytest.mark.parametrize("complex_", [False, True])
def test_qr(shape, complex_):
    """Q and R of LAPACK's gauge (R with a real diagonal) are smooth: both differentiated."""
    a = _rng(7).normal(size=shape) + (1j * _rng(8).normal(size=shape) if complex_ else 0)

    def build(m):
        q, r = R.Qr(input=m)
        return R.ConcatV2(values=[R.Reshape(tensor=q, shape=[-1]), R.Reshape(tensor=r, shape=[-1])], axis=0)
    assert _error(build, [a]) < 1e-7


def test_qr_full_matrices_wide():
    a = _rng(9).normal(size=(3, 5))

    def build(m):
        q, r = R.Qr(input=m, full_matrices=True)
        return R.ConcatV2(values=[R.Reshape(tensor=q, shape=[-1]), R.Reshape(tensor=r, shape=[-1])], axis=0)
    assert _error(build, [a]) < 1e-7


@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (3, 3), (2, 3, 3)])
@pytest.mark.parametrize("complex_", [False, True])
def test_svd_values_and_vectors(shape, complex_):
    """s, u diag(s^2) u^H and v diag(s) v^H: invariant under the vectors' phases."""
    a = _rng(10).normal(size=shape) + (1j * _rng(11).normal(size=shape) if complex_ else 0)

    def build(m):
        s, u, v = R.Svd(input=m, compute_uv=True, full_matrices=False)
        s_row = R.ExpandDims(input=s, dim=-2)
        us = R.BatchMatMulV2(x=u * s_row * s_row, y=u, adj_y=True)
        vs = R.BatchMatMulV2(x=v * s_row, y=v, adj_y=True)
        flat = [R.Reshape(tensor=t, shape=[-1]) for t in (s, us, vs)]
        return R.ConcatV2(values=flat, axis=0)
    assert _error(build, [a]) < 1e-7


@pytest.mark.parametrize("complex_", [False, True])
def test_svd_values_only_and_unknown_dims(complex_):
    a = _rng(12).normal(size=(2, 4, 3)) + (1j * _rng(13).normal(size=(2, 4, 3)) if complex_ else 0)
    assert _error(lambda m: R.Svd(input=m, compute_uv=False)[0], [a]) < 1e-8
    assert _error(lambda m: R.Svd(input=m, compute_uv=True)[0], [a], static=False) < 1e-8


@pytest.mark.parametrize("shape", [(3, 4), (4, 3)])
def test_svd_full_matrices_extra_column(shape):
    """|m - n| = 1: the extra singular vector is the null vector, determined up to sign."""
    a = _rng(14).normal(size=shape)

    def build(m):
        _, u, v = R.Svd(input=m, compute_uv=True, full_matrices=True)
        return R.ConcatV2(values=[R.Reshape(tensor=_gram(u[..., -1:]), shape=[-1]),
                                  R.Reshape(tensor=_gram(v[..., -1:]), shape=[-1])], axis=0)
    assert _error(build, [a]) < 1e-7


@pytest.mark.parametrize("complex_", [False, True])
def test_self_adjoint_eig(complex_):
    a = _spd(3, (2,), complex_=complex_)

    def build(m):
        e, v = R.SelfAdjointEigV2(input=_hermitian(m))
        weighted = v * R.Cast(x=R.ExpandDims(input=R.Exp(x=e), dim=-2), DstT=v.dtype) if complex_ else \
            v * R.ExpandDims(input=R.Exp(x=e), dim=-2)
        return R.ConcatV2(values=[R.Reshape(tensor=R.Cast(x=e, DstT=v.dtype) if complex_ else e, shape=[-1]),
                                  R.Reshape(tensor=R.BatchMatMulV2(x=weighted, y=v, adj_y=True), shape=[-1])], axis=0)
    # (complex: LAPACK's Hermitian eigenvectors leave differences of ~3e-7 at any step)
    assert _error(build, [a], delta=1e-5) < 1e-6


@pytest.mark.parametrize("complex_", [False, True])
def test_eig_values_and_vectors(complex_):
    """e and V diag(e^2) V^-1 (= A^2): invariant under the eigenvectors' scaling."""
    a = _well_conditioned(3, complex_=complex_) + np.diag([0.0, 1.0, 2.5])

    def build(m):
        e, v = R.Eig(input=m, Tout=gr.complex128)
        scaled = v * R.ExpandDims(input=e * e, dim=-2)
        return R.ConcatV2(values=[e, R.Reshape(tensor=R.BatchMatMulV2(x=scaled, y=R.MatrixInverse(input=v)),
                                                shape=[-1])], axis=0)
    assert _error(build, [a]) < 1e-7


def test_eig_normalization_term():
    """A function of V's columns normalized to unit length (as the kernel returns them) but not
    of their phase: |v_ij|^2 exercises the V^H V diag(Re diag(V^H g_V)) term."""
    a = _well_conditioned(3) + np.diag([0.0, 1.0, 2.5])

    def build(m):
        _, v = R.Eig(input=m, Tout=gr.complex128)
        return R.Square(x=R.ComplexAbs(x=v, Tout=gr.float64))
    assert _error(build, [a]) < 1e-7


# -- tridiagonal systems, cross products ------------------------------------------------------------------------

@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("pivoting", [False, True])
def test_tridiagonal_solve(complex_, pivoting):
    d = _rng(15).normal(size=(2, 3, 4)) * 0.3
    d[:, 1] += 2.0
    if complex_:
        d = d + 0.3j * _rng(16).normal(size=d.shape)
    b = _rng(17).normal(size=(2, 4, 2)) + (1j * _rng(18).normal(size=(2, 4, 2)) if complex_ else 0)
    error = _error(lambda dd, rr: R.TridiagonalSolve(diagonals=dd, rhs=rr, partial_pivoting=pivoting), [d, b])
    assert error < 1e-8


@pytest.mark.parametrize("complex_", [False, True])
def test_tridiagonal_matmul(complex_):
    parts = [_rng(k).normal(size=(2, 1, 4)) + (1j * _rng(k + 50).normal(size=(2, 1, 4)) if complex_ else 0)
             for k in range(3)]
    b = _rng(19).normal(size=(2, 4, 3)) + (1j * _rng(20).normal(size=(2, 4, 3)) if complex_ else 0)
    error = _error(lambda p, q, r, s: R.TridiagonalMatMul(superdiag=p, maindiag=q, subdiag=r, rhs=s), parts + [b])
    assert error < 1e-8


def test_cross():
    a, b = _rng(20).normal(size=(4, 3)), _rng(21).normal(size=(4, 3))
    assert _error(lambda u, v: R.Cross(a=u, b=v), [a, b]) < 1e-8


def test_gradient_rules_refuse_what_they_cannot_differentiate():
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float64, [4, 3])
        q, _ = R.Qr(input=x, full_matrices=True)
        with pytest.raises(gr.errors.GradientError, match="full_matrices"):
            gr.gradients(q, [x])
        y = gr.placeholder(gr.float64, [None, None])
        with pytest.raises(gr.errors.GradientError, match="statically"):
            gr.gradients(R.Qr(input=y)[1], [y])


# -- diagonal bands ----------------------------------------------------------------------------------------------

BANDS = [(0, 0), (1, 1), (-2, -2), (-1, 1), (0, 2), (-2, 0), (-1, 2)]
ALIGNS = ["LEFT_RIGHT", "RIGHT_LEFT", "LEFT_LEFT", "RIGHT_RIGHT"]


def _diag_part(x, k, version, align, padding=0.5):
    extra = {"align": align} if version == "V3" else {}
    return getattr(R, "MatrixDiagPart" + version)(input=x, k=np.array(k, np.int32), padding_value=padding, **extra)


@pytest.mark.parametrize("k", BANDS)
@pytest.mark.parametrize("version, align", [("V2", "LEFT_LEFT")] + [("V3", a) for a in ALIGNS])
def test_diagonal_band_rules(k, version, align):
    """MatrixDiagPart, MatrixDiag and MatrixSetDiag of a band; padding_value differentiated too."""
    x = _rng(22).normal(size=(2, 4, 5))
    extra = {"align": align} if version == "V3" else {}
    kk = np.array(k, np.int32)
    with gr.Graph().as_default():
        band_shape = gr.Session().run(_diag_part(gr.constant(x), k, version, align)).shape
    d = _rng(23).normal(size=band_shape)
    assert _error(lambda t, p: getattr(R, "MatrixDiagPart" + version)(input=t, k=kk, padding_value=p, **extra),
                  [x, np.array(0.5)]) < 1e-8
    assert _error(lambda t, p: getattr(R, "MatrixDiag" + version)(diagonal=t, k=kk, num_rows=4, num_cols=5,
                                                                  padding_value=p, **extra),
                  [d, np.array(0.25)]) < 1e-8
    assert _error(lambda t, u: getattr(R, "MatrixSetDiag" + version)(input=t, diagonal=u, k=kk, **extra),
                  [x, d]) < 1e-8


def test_diag_diag_part_and_matrix_set_diag():
    d = _rng(24).normal(size=(2, 3))
    assert _error(lambda t: R.Diag(diagonal=t), [d]) < 1e-8
    assert _error(lambda t: R.DiagPart(input=R.Diag(diagonal=t)), [d]) < 1e-8
    x = _rng(25).normal(size=(2, 3, 4))
    assert _error(lambda t, u: R.MatrixSetDiag(input=t, diagonal=u), [x, d]) < 1e-8


# -- kernels against TensorFlow's values ---------------------------------------------------------------------------

def _extra():
    return np.load(DATA / "reference.npz")


def test_diagonal_band_kernels_match_tensorflow():
    data = _extra()
    x = data["band_input"]
    with gr.Graph().as_default():
        for k in BANDS:
            for align in ALIGNS:
                key = f"part_{k[0]}_{k[1]}_{align}"
                got = gr.Session().run(_diag_part(gr.constant(x), k, "V3", align))
                np.testing.assert_array_equal(got, data[key], err_msg=key)
                diag = gr.Session().run(R.MatrixDiagV3(diagonal=gr.constant(data[key]), k=np.array(k, np.int32),
                                                       num_rows=4, num_cols=5, padding_value=-1.0, align=align))
                np.testing.assert_array_equal(diag, data[f"diag_{k[0]}_{k[1]}_{align}"], err_msg=key)
                set_ = gr.Session().run(R.MatrixSetDiagV3(input=gr.constant(x), diagonal=gr.constant(data[key] * 2),
                                                          k=np.array(k, np.int32), align=align))
                np.testing.assert_array_equal(set_, data[f"set_{k[0]}_{k[1]}_{align}"], err_msg=key)


def test_cholesky_grad_and_lu_kernels_match_tensorflow():
    data = _extra()
    with gr.Graph().as_default():
        got = gr.Session().run(R.CholeskyGrad(l=gr.constant(data["chol_l"]), grad=gr.constant(data["chol_grad"])))
        np.testing.assert_allclose(got, data["chol_out"], rtol=1e-10, atol=1e-12)
        lu, p = gr.Session().run(R.Lu(input=gr.constant(data["lu_input"])))
        np.testing.assert_allclose(lu, data["lu_lu"], rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(p, data["lu_p"])


def test_triangular_solve_with_a_zero_on_the_diagonal_gives_inf_or_nan_as_tensorflow():
    data = _extra()
    with gr.Graph().as_default():
        got = gr.Session().run(R.MatrixTriangularSolve(matrix=gr.constant(data["singular_matrix"]),
                                                       rhs=gr.constant(np.ones((2, 1)))))
    np.testing.assert_array_equal(got, data["singular_solution"])


def test_cholesky_of_an_indefinite_matrix_is_nan_as_tensorflow():
    with gr.Graph().as_default():
        got = gr.Session().run(R.Cholesky(input=gr.constant(np.array([[1.0, 2.0], [2.0, 1.0]]))))
    assert np.isnan(got[np.tril_indices(2)]).all()
