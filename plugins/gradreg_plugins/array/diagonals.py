"""Diagonals and bands beyond MatrixDiag / MatrixDiagPart / MatrixBandPart (ops.py): Diag,
DiagPart, MatrixSetDiag and the banded V2 / V3 forms MatrixDiagV2/V3, MatrixDiagPartV2/V3,
MatrixSetDiagV2/V3 — definitions, shape functions, NumPy kernels and gradient rules.

A band is the diagonals k0..k1 (k = j - i: superdiagonals above 0, subdiagonals below), stored
as rows from k1 down to k0, each as long as the longest (``max_diag_len``); a shorter diagonal
is padded, on the left or the right as ``align`` says for superdiagonals and subdiagonals (V3;
V2 always LEFT_LEFT). Single diagonals (k scalar or k0 == k1) have no diagonal axis.

The rules differentiate each op through its own version and alignment: the gradient of a V2 op
is built from V2 ops. TensorFlow's V2 rules emit V3 ops with V3's default alignment (RIGHT_LEFT)
instead, wrong for bands with diagonals shorter than the longest (the op sweep's
MatrixDiagV2 / MatrixDiagPartV2 / MatrixSetDiagV2 ``k_band`` cases; TENSORFLOW_WRONG). Also
beyond TensorFlow: the padding_value of MatrixDiagV2/V3 and MatrixDiagPartV2/V3 has a gradient
(the sum of the cotangent over the padded entries; TensorFlow gives none).
"""
from __future__ import annotations

import numpy as np

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op, constant
from gradreg.model.shapes import TensorShape
from gradreg_plugins.array import family

op = family.op
_ALIGN = "align: {'LEFT_RIGHT', 'RIGHT_LEFT', 'LEFT_LEFT', 'RIGHT_RIGHT'} = 'RIGHT_LEFT'"
_DIAG_TYPES = "T: {bfloat16, float16, float32, float64, int32, int64, complex64, complex128}"


# -- the band geometry (shared by shapes, kernels and rules) --------------------------------------------

def band_range(k) -> tuple[int, int]:
    """(k0, k1) from a scalar or a 1- or 2-element k."""
    values = [int(v) for v in np.asarray(k).reshape(-1)]
    if len(values) not in (1, 2):
        raise ValueError(f"k must be a scalar or a vector of at most 2 elements, got {values}")
    low, high = values[0], values[-1]
    if low > high:
        raise ValueError(f"lower_diag_index must not be larger than upper_diag_index: {low} > {high}")
    return low, high


def diagonal_length(d: int, rows: int, cols: int) -> int:
    return max(0, min(rows + min(d, 0), cols - max(d, 0)))


def max_diagonal_length(low: int, high: int, rows: int, cols: int) -> int:
    return max(0, min(rows + min(high, 0), cols - max(low, 0)))


def _offset(d: int, length: int, longest: int, align: str) -> int:
    """Where diagonal d starts in its row: right-aligned diagonals are padded on the left."""
    superdiagonal, subdiagonal = align.split("_")
    right = (d >= 0 and superdiagonal == "RIGHT") or (d <= 0 and subdiagonal == "RIGHT")
    return longest - length if right else 0


def _positions(d: int, rows: int, cols: int, longest: int, align: str):
    """(i, j, n): the matrix positions of diagonal d and their index in its stored row."""
    length = diagonal_length(d, rows, cols)
    n = np.arange(length) + _offset(d, length, longest, align)
    t = np.arange(length)
    return t + max(-d, 0), t + max(d, 0), n


def _check_band(low: int, high: int, rows: int, cols: int) -> None:
    for k in (low, high):
        if not (-rows < k < cols or k == 0):
            raise ValueError(f"diagonal index {k} is out of bounds for a {rows}x{cols} matrix")


def diag_part(x: np.ndarray, low: int, high: int, padding, align: str) -> np.ndarray:
    rows, cols = x.shape[-2:]
    _check_band(low, high, rows, cols)
    longest = max_diagonal_length(low, high, rows, cols)
    out = np.full(x.shape[:-2] + (high - low + 1, longest), padding, dtype=x.dtype)
    for row, d in enumerate(range(high, low - 1, -1)):
        i, j, n = _positions(d, rows, cols, longest, align)
        out[..., row, n] = x[..., i, j]
    return out[..., 0, :] if low == high else out


def set_diag(x: np.ndarray, diagonal: np.ndarray, low: int, high: int, align: str) -> np.ndarray:
    rows, cols = x.shape[-2:]
    _check_band(low, high, rows, cols)
    longest = max_diagonal_length(low, high, rows, cols)
    band = diagonal[..., None, :] if low == high else diagonal
    expected = x.shape[:-2] + (high - low + 1, longest)
    if band.shape != expected:
        raise ValueError(f"diagonal must have shape {list(expected if low != high else expected[:-2] + (longest,))}, "
                         f"got {list(diagonal.shape)}")
    out = x.copy()
    for row, d in enumerate(range(high, low - 1, -1)):
        i, j, n = _positions(d, rows, cols, longest, align)
        out[..., i, j] = band[..., row, n]
    return out


def matrix_size(longest: int, low: int, high: int, num_rows: int, num_cols: int) -> tuple[int, int]:
    """The output size of MatrixDiagV2/V3 (TensorFlow's inference for num_rows/num_cols = -1)."""
    min_rows, min_cols = longest - min(high, 0), longest + max(low, 0)
    if num_rows == -1 and num_cols == -1:
        num_rows = num_cols = max(min_rows, min_cols)
    elif num_rows == -1:
        num_rows = min_rows
    elif num_cols == -1:
        num_cols = min_cols
    if num_rows < min_rows or num_cols < min_cols or (num_rows != min_rows and num_cols != min_cols):
        raise ValueError(f"The number of rows or columns is not consistent with the specified d_lower, d_upper, and "
                         f"diagonal. (num_rows={num_rows}, at least {min_rows}; num_cols={num_cols}, at least "
                         f"{min_cols}; one of them exact)")
    return num_rows, num_cols


def matrix_diag(diagonal: np.ndarray, low: int, high: int, num_rows: int, num_cols: int, padding,
                align: str) -> np.ndarray:
    band = diagonal[..., None, :] if low == high else diagonal
    if band.ndim < 2 or band.shape[-2] != high - low + 1:
        raise ValueError(f"diagonal must have {high - low + 1} diagonals in its second innermost dimension, "
                         f"got shape {list(diagonal.shape)}")
    rows, cols = matrix_size(band.shape[-1], low, high, num_rows, num_cols)
    out = np.full(band.shape[:-2] + (rows, cols), padding, dtype=diagonal.dtype)
    return set_diag(out, diagonal, low, high, align)


# -- definitions and shapes ------------------------------------------------------------------------------------

def _static_k(ctx, index: int):
    value = ctx.input_value(index)
    if value is None:
        return None
    try:
        return band_range(value)
    except ValueError as exc:
        raise ctx.error(str(exc)) from None


def _diag_part_shape(ctx, k_index: int = 1) -> TensorShape:
    x = ctx.input_shape(0)
    if x.rank is not None and x.rank < 2:
        raise ctx.error(f"input must be at least 2-dim, received shape {x}")
    k = _static_k(ctx, k_index)
    if x.rank is None or k is None:
        return TensorShape(None)
    rows, cols = x.dims[-2:]
    low, high = k
    longest = None if rows is None or cols is None else max_diagonal_length(low, high, rows, cols)
    return x[:-2].concatenate(([] if low == high else [high - low + 1]) + [longest])


def _set_diag_shape(ctx) -> TensorShape:
    x = ctx.input_shape(0)
    if x.rank is not None and x.rank < 2:
        raise ctx.error(f"input must be at least 2-dim, received shape {x}")
    return x


def _matrix_diag_shape(ctx) -> TensorShape:
    diagonal = ctx.input_shape(0)
    k = _static_k(ctx, 1)
    if diagonal.rank is None or k is None:
        return TensorShape(None)
    low, high = k
    batch = diagonal[:-1] if low == high else diagonal[:-2]
    if low != high and diagonal.rank < 2:
        raise ctx.error(f"diagonal must be at least 2-dim for a band of diagonals, received shape {diagonal}")
    longest = diagonal.dims[-1]
    # An unknown num_rows / num_cols counts as -1 (inferred), as TensorFlow's shape function has it.
    num_rows, num_cols = (ctx.input_value(i) for i in (2, 3))
    num_rows = -1 if num_rows is None else num_rows
    num_cols = -1 if num_cols is None else num_cols
    if longest is None:
        return batch.concatenate([None, None])
    try:
        return batch.concatenate(list(matrix_size(longest, low, high, int(num_rows), int(num_cols))))
    except ValueError as exc:
        raise ctx.error(str(exc)) from None


def _diag_shape(ctx) -> TensorShape:
    d = ctx.input_shape(0)
    if d.rank == 0:
        raise ctx.error("input must be at least rank 1")
    return TensorShape(None) if d.rank is None else d.concatenate(d)


def _diag_part_v1_shape(ctx) -> TensorShape:
    x = ctx.input_shape(0)
    if x.rank is None:
        return TensorShape(None)
    if x.rank == 0 or x.rank % 2:
        raise ctx.error(f"input must have an even, non-zero rank, got shape {x}")
    half = x.rank // 2
    try:
        return x[:half].merge_with(x[half:])
    except ValueError as exc:
        raise ctx.error(f"input's first and second halves must match: {exc}") from None


op("Diag", inputs=["diagonal: T"], outputs=["output: T"], attrs=[_DIAG_TYPES], shape=_diag_shape)
op("DiagPart", inputs=["input: T"], outputs=["diagonal: T"], attrs=[_DIAG_TYPES], shape=_diag_part_v1_shape)
op("MatrixSetDiag", inputs=["input: T", "diagonal: T"], outputs=["output: T"], attrs=["T: type"],
   shape=_set_diag_shape)
op("MatrixDiagV2", inputs=["diagonal: T", "k: int32", "num_rows: int32", "num_cols: int32", "padding_value: T"],
   outputs=["output: T"], attrs=["T: type"], shape=_matrix_diag_shape)
op("MatrixDiagV3", inputs=["diagonal: T", "k: int32", "num_rows: int32", "num_cols: int32", "padding_value: T"],
   outputs=["output: T"], attrs=["T: type", _ALIGN], shape=_matrix_diag_shape)
op("MatrixDiagPartV2", inputs=["input: T", "k: int32", "padding_value: T"], outputs=["diagonal: T"], attrs=["T: type"],
   shape=_diag_part_shape)
op("MatrixDiagPartV3", inputs=["input: T", "k: int32", "padding_value: T"], outputs=["diagonal: T"],
   attrs=["T: type", _ALIGN], shape=_diag_part_shape)
op("MatrixSetDiagV2", inputs=["input: T", "diagonal: T", "k: int32"], outputs=["output: T"], attrs=["T: type"],
   shape=_set_diag_shape)
op("MatrixSetDiagV3", inputs=["input: T", "diagonal: T", "k: int32"], outputs=["output: T"],
   attrs=["T: type", _ALIGN], shape=_set_diag_shape)


# -- kernels ------------------------------------------------------------------------------------------------------

def _align(op) -> str:
    """V3's align attr; V2 aligns every diagonal to the left."""
    return op.get_attr("align").decode() if op.type.endswith("V3") else "LEFT_LEFT"


def _scalar(value, name: str):
    if np.ndim(value) != 0:
        raise ValueError(f"{name} must be a scalar, got shape {list(np.shape(value))}")
    return np.asarray(value)[()]


@family.kernel("Diag")
def _diag_kernel(op, ctx):
    def compute(d):
        if d.ndim == 0:
            raise ValueError("input must be at least rank 1")
        ctx.check_elements(d.size * d.size, op)
        return np.diag(d.reshape(-1)).reshape(d.shape + d.shape)
    return compute


@family.kernel("DiagPart")
def _diag_part_kernel(op, ctx):
    def compute(x):
        half = x.ndim // 2
        if x.ndim == 0 or x.ndim % 2:
            raise ValueError(f"The rank of the tensor should be even and positive, got shape "
                             f"[{','.join(map(str, x.shape))}]")
        for i in range(half):
            if x.shape[i] != x.shape[i + half]:
                raise ValueError(f"Invalid shape [{','.join(map(str, x.shape))}]: dimensions {i} and {i + half} "
                                 f"do not match.")
        n = int(np.prod(x.shape[:half], dtype=np.int64))
        return np.diagonal(x.reshape(n, n)).reshape(x.shape[:half]).copy()
    return compute


@family.kernel("MatrixSetDiag")
def _matrix_set_diag_v1(op, ctx):
    def compute(x, diagonal):
        if x.ndim < 2:
            raise ValueError(f"input must be at least 2-dim, received shape {list(x.shape)}")
        return set_diag(x, diagonal, 0, 0, "LEFT_LEFT")
    return compute


def _diag_v3_kernel(op_type: str) -> None:
    @family.kernel(op_type)
    def factory(op, ctx):
        align = _align(op)

        def compute(diagonal, k, num_rows, num_cols, padding_value):
            low, high = band_range(k)
            rows, cols = int(_scalar(num_rows, "num_rows")), int(_scalar(num_cols, "num_cols"))
            return matrix_diag(diagonal, low, high, rows, cols, _scalar(padding_value, "padding_value"), align)
        return compute


def _diag_part_v3_kernel(op_type: str) -> None:
    @family.kernel(op_type)
    def factory(op, ctx):
        align = _align(op)

        def compute(x, k, padding_value):
            if x.ndim < 2:
                raise ValueError(f"input must be at least 2-dim, received shape {list(x.shape)}")
            low, high = band_range(k)
            return diag_part(x, low, high, _scalar(padding_value, "padding_value"), align)
        return compute


def _set_diag_v3_kernel(op_type: str) -> None:
    @family.kernel(op_type)
    def factory(op, ctx):
        align = _align(op)

        def compute(x, diagonal, k):
            if x.ndim < 2:
                raise ValueError(f"input must be at least 2-dim, received shape {list(x.shape)}")
            low, high = band_range(k)
            return set_diag(x, diagonal, low, high, align)
        return compute


for _version in ("V2", "V3"):
    _diag_v3_kernel("MatrixDiag" + _version)
    _diag_part_v3_kernel("MatrixDiagPart" + _version)
    _set_diag_v3_kernel("MatrixSetDiag" + _version)


# -- gradients --------------------------------------------------------------------------------------------------

def _dense(grad):
    return rules.dense(grad)


def _align_attrs(op) -> dict:
    return {"align": op.get_attr("align")} if op.type.endswith("V3") else {}


def _sum_all(t):
    rank = t.shape.rank
    axes = rules.ints(list(range(rank))) if rank is not None else apply_op(
        "Range", rules.ints(0), apply_op("Rank", t), rules.ints(1))
    return apply_op("Sum", t, axes)


def _zero(like):
    return constant(0, like.known_dtype.base_dtype)


@family.gradient("Diag")
def _diag_grad(op, grad):
    return apply_op("DiagPart", _dense(grad))


@family.gradient("DiagPart")
def _diag_part_grad(op, grad):
    return apply_op("Diag", _dense(grad))


@family.gradient("MatrixSetDiag")
def _matrix_set_diag_grad(op, grad):
    grad = _dense(grad)
    diagonal = op.inputs[1]
    return (apply_op("MatrixSetDiag", grad, apply_op("ZerosLike", diagonal)),
            apply_op("MatrixDiagPart", grad))


def _versioned(op, base: str) -> str:
    return base + op.type[-2:]


@family.gradient("MatrixDiagV2", "MatrixDiagV3")
def _matrix_diag_v3_grad(op, grad):
    """The band read back (zero where the diagonal was padding); padding_value: the rest."""
    grad = _dense(grad)
    k = op.inputs[1]
    grad_diagonal = apply_op(_versioned(op, "MatrixDiagPart"), grad, k, _zero(grad), **_align_attrs(op))
    grad_padding = _sum_all(grad) - _sum_all(grad_diagonal)
    return grad_diagonal, None, None, None, grad_padding


@family.gradient("MatrixDiagPartV2", "MatrixDiagPartV3")
def _matrix_diag_part_v3_grad(op, grad):
    """The band set into zeros (the padded entries dropped); padding_value: the padded entries."""
    grad = _dense(grad)
    x, k = op.inputs[0], op.inputs[1]
    grad_x = apply_op(_versioned(op, "MatrixSetDiag"), apply_op("ZerosLike", x), grad, k, **_align_attrs(op))
    grad_padding = _sum_all(grad) - _sum_all(grad_x)
    return grad_x, None, grad_padding


@family.gradient("MatrixSetDiagV2", "MatrixSetDiagV3")
def _matrix_set_diag_v3_grad(op, grad):
    grad = _dense(grad)
    diagonal, k = op.inputs[1], op.inputs[2]
    attrs = _align_attrs(op)
    grad_x = apply_op(_versioned(op, "MatrixSetDiag"), grad, apply_op("ZerosLike", diagonal), k, **attrs)
    grad_diagonal = apply_op(_versioned(op, "MatrixDiagPart"), grad, k, _zero(grad), **attrs)
    return grad_x, grad_diagonal, None
