"""Gradients of the matrix ops: MatMul, Gemm, Einsum and Det."""
from __future__ import annotations

import string

import numpy as np

from gradreg.model.shape_inference import constant_value
from gradreg_plugins.onnx import family
from gradreg_plugins.onnx.grads.common import (
    const_like,
    fail,
    ints,
    onnx_op,
    per_input,
    reduce_to,
    shape_of,
    static_rank,
    swap_last,
)
from gradreg_plugins.onnx.nodes import onnx_inputs


@family.gradient("onnx::MatMul")
def _matmul_grad(op, g):
    a, b = op.inputs
    if a.shape.rank is None or b.shape.rank is None:
        # ranks unknown (taken as 2 or more): batched products over any leading axes
        da = onnx_op("Einsum", g, b, equation="...ik,...jk->...ij")
        db = onnx_op("Einsum", a, g, equation="...ij,...ik->...jk")
        return per_input(op, (reduce_to(da, a), reduce_to(db, b)))
    ra, rb = static_rank(op, a, "the first input"), static_rank(op, b, "the second input")
    if ra == rb == 2:   # matrices: Gemm's trans flags do the transposes
        return per_input(op, (onnx_op("Gemm", g, b, None, transB=1), onnx_op("Gemm", a, g, None, transA=1)))
    a2 = onnx_op("Unsqueeze", a, ints([0], g, "axes")) if ra == 1 else a
    b2 = onnx_op("Unsqueeze", b, ints([-1], g, "axes")) if rb == 1 else b
    g2 = onnx_op("Unsqueeze", g, ints([-2], g, "axes")) if ra == 1 else g
    g2 = onnx_op("Unsqueeze", g2, ints([-1], g, "axes")) if rb == 1 else g2
    da = onnx_op("MatMul", g2, swap_last(op, b2))
    db = onnx_op("MatMul", swap_last(op, a2), g2)
    if ra == 1:
        da = onnx_op("Squeeze", da, ints([-2], g, "axes"))
    if rb == 1:
        db = onnx_op("Squeeze", db, ints([-1], g, "axes"))
    return per_input(op, (reduce_to(da, a), reduce_to(db, b)))


@family.gradient("onnx::Gemm")
def _gemm_grad(op, g):
    """Y = alpha A' B' + beta C (A' = A or A^T, B' likewise): dA' = alpha g B'^T and dB' = alpha A'^T g,
    each one Gemm whose trans flags absorb every transpose."""
    a, b, c = (onnx_inputs(op) + [None])[:3]
    alpha, beta = op.get_attr("alpha"), op.get_attr("beta")
    trans_a, trans_b = int(op.get_attr("transA")), int(op.get_attr("transB"))
    if trans_a:     # dA = dA'^T = alpha B' g^T
        da = onnx_op("Gemm", b, g, None, alpha=alpha, transA=trans_b, transB=1)
    else:
        da = onnx_op("Gemm", g, b, None, alpha=alpha, transB=1 - trans_b)
    if trans_b:     # dB = dB'^T = alpha g^T A'
        db = onnx_op("Gemm", g, a, None, alpha=alpha, transA=1, transB=trans_a)
    else:
        db = onnx_op("Gemm", a, g, None, alpha=alpha, transA=1 - trans_a)
    out = [da, db]
    if c is not None:
        gc = onnx_op("Mul", g, const_like(beta, g)) if beta != 1 else g
        out.append(reduce_to(gc, c))
    return per_input(op, tuple(out))


# -- Einsum ---------------------------------------------------------------------------------------------

def _parse_einsum(op, equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """(letters of each operand, letters of the output) with "..." spelled out in fresh letters
    (right-aligned, as NumPy broadcasts them) and an implicit output made explicit."""
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise fail(op, f"the equation '{equation}' names {len(terms)} operands for {len(ranks)} inputs")
    spare = [c for c in string.ascii_letters if c not in text]
    widths = [rank - len(term.replace("...", "")) if "..." in term else 0 for term, rank in zip(terms, ranks)]
    width = max(widths, default=0)
    ellipsis = "".join(spare[:width])
    operands = [term.replace("...", ellipsis[width - w:]) for term, w in zip(terms, widths)]
    if arrow:
        output = rhs.replace("...", ellipsis)
    else:
        counts: dict[str, int] = {}
        for letter in "".join(operands):
            counts[letter] = counts.get(letter, 0) + 1
        output = ellipsis + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ellipsis))
    return operands, output


@family.gradient("onnx::Einsum")
def _einsum_grad(op, g):
    """d operand k = einsum(output, the other operands -> operand k's letters). Letters only operand
    k has are broadcast back; a letter repeated in it (a diagonal) is put back on the diagonal
    with an identity matrix; broadcast "..." axes are summed back."""
    inputs = list(op.inputs)
    equation = op.get_attr("equation").decode()
    # ranks matter only to spell out "..."
    ranks = [static_rank(op, t, f"operand {i}") if "..." in equation else len(term.strip())
             for i, (t, term) in enumerate(zip(inputs, equation.partition("->")[0].split(",")))]
    operands, output = _parse_einsum(op, equation, ranks)
    grads = []
    for k, (x, letters) in enumerate(zip(inputs, operands)):
        others = [(t, s) for j, (t, s) in enumerate(zip(inputs, operands)) if j != k]
        available = set(output) | {c for _, s in others for c in s}
        unique = "".join(dict.fromkeys(c for c in letters if c in available))
        terms = ",".join([output] + [s for _, s in others])
        dx = onnx_op("Einsum", g, *[t for t, _ in others], equation=f"{terms}->{unique}")
        grads.append(reduce_to(_undiagonal(op, dx, unique, letters, x), x))
    return per_input(op, tuple(grads))


def _undiagonal(op, dx, unique: str, letters: str, x):
    """dx over ``unique`` letters laid out as ``letters`` (x's): repeated letters on the diagonal,
    letters dx lacks broadcast along x's axes."""
    current = unique
    renamed = list(letters)
    spare = iter(c for c in string.ascii_letters if c not in letters and c not in unique)
    seen: set[str] = set()
    for i, c in enumerate(letters):
        if c in seen:               # a repeated letter: dx times identity(c, c')
            fresh = next(spare)
            renamed[i] = fresh
            size = onnx_op("Gather", shape_of(x), ints([letters.index(c)], x, "axis"), axis=0)
            square = onnx_op("ConstantOfShape", onnx_op("Concat", size, size, axis=0),
                             value=np.zeros(1, dx.known_dtype.base_dtype.storage))
            eye = onnx_op("EyeLike", square)
            current_out = current + fresh if c in current else current + c + fresh
            dx = onnx_op("Einsum", dx, eye, equation=f"{current},{c}{fresh}->{current_out}")
            current = current_out
        seen.add(c)
    missing = [c for c in renamed if c not in current]
    if missing:   # letters only x has: summed over in the forward pass, broadcast back here
        dx = onnx_op("Unsqueeze", dx, ints(list(range(len(current), len(current) + len(missing))), x, "axes"))
        current += "".join(missing)
        dx = onnx_op("Expand", dx, _shape_in_order(x, renamed, current))
    target = "".join(renamed)
    if current != target:
        dx = onnx_op("Transpose", dx, perm=[current.index(c) for c in target])
    return dx


def _shape_in_order(x, renamed: list[str], order: str):
    """x's dims rearranged to the letters of ``order`` (x's axes named by ``renamed``)."""
    return onnx_op("Gather", shape_of(x), ints([renamed.index(c) for c in order], x, "order"), axis=0)


# -- Det ------------------------------------------------------------------------------------------------

@family.gradient("onnx::Det")
def _det_grad(op, g):
    """d det(X) / dX = the cofactor matrix: C[i, j] = (-1)^(i + j) det(X without row i and column j),
    built from Gathers of the minors (no inverse: exact for singular matrices too)."""
    x = op.inputs[0]
    dims = x.shape.dims
    if dims is None or dims[-1] is None:
        raise fail(op, f"the matrix size must be known (shape {x.shape})")
    n = int(dims[-1])
    expand = onnx_op("Unsqueeze", g, ints([-2, -1], g, "axes"))
    if n == 1:
        return per_input(op, onnx_op("Expand", expand, shape_of(x)))
    others = np.array([[k for k in range(n) if k != i] for i in range(n)], dtype=np.int64)   # (n, n - 1)
    rows = onnx_op("Gather", x, ints(others.reshape(-1).tolist(), x, "rows"), axis=-2)           # (*, n(n-1), n)
    rank = static_rank(op, x)
    batch = [0] * (rank - 2)
    rows = onnx_op("Reshape", rows, ints(batch + [n, n - 1, n], x, "minor_rows"))                # (*, i, r, n)
    minors = onnx_op("Gather", rows, ints(others.reshape(-1).tolist(), x, "cols"), axis=-1)      # (*, i, r, n(n-1))
    minors = onnx_op("Reshape", minors, ints(batch + [n, n - 1, n, n - 1], x, "minor"))          # (*, i, r, j, c)
    lead = list(range(rank - 2))
    minors = onnx_op("Transpose", minors, perm=lead + [rank - 2, rank, rank - 1, rank + 1])    # (*, i, j, r, c)
    signs = np.array([[(-1.0) ** (i + j) for j in range(n)] for i in range(n)])
    cofactors = onnx_op("Mul", onnx_op("Det", minors), const_like(signs, g, "signs"))
    return per_input(op, onnx_op("Mul", expand, cofactors))



# -- DFT ------------------------------------------------------------------------------------------------

@family.gradient("onnx::DFT")
def _dft_grad(op, g):
    """The DFT is (real-)linear in its input: the gradient is its adjoint, the conjugate transform.
    For the forward transform that is n times the inverse DFT of g, for the inverse one the forward
    DFT of g over n; a one-sided output is padded back to n bins first; the input's length (cut or
    zero-padded to dft_length) is restored; a real input keeps the real part."""
    x, length, axis_input = (onnx_inputs(op) + [None, None])[:3]
    rank = static_rank(op, x)
    axis = -2 if axis_input is None else _constant_int(op, axis_input, "axis")
    axis = axis % rank
    dims = x.shape.dims
    size = dims[axis] if dims is not None else None
    n = _constant_int(op, length, "dft_length") if length is not None else size
    if n is None or size is None:
        raise fail(op, f"the transform's length must be known (shape {x.shape})")
    inverse = bool(op.get_attr("inverse"))
    if op.get_attr("onesided"):
        kept = n // 2 + 1
        if kept != n:
            g = onnx_op("Pad", g, ints([0] * rank + [n - kept if d == axis else 0 for d in range(rank)], g, "pads"))
    h = onnx_op("DFT", g, None, np.array(axis, np.int64), inverse=int(not inverse), onesided=0)
    h = onnx_op("Mul", h, const_like(float(n) if not inverse else 1.0 / n, h))
    if n > size:
        h = onnx_op("Slice", h, ints([0], g, "start"), ints([size], g, "end"), ints([axis], g, "axis"))
    elif n < size:
        h = onnx_op("Pad", h, ints([size - n if d == axis and i == 1 else 0 for i in range(2) for d in range(rank)],
                                   g, "pads"))
    if dims[-1] == 1:
        h = onnx_op("Slice", h, ints([0], g, "start"), ints([1], g, "end"), ints([-1], g, "axis"))
    return per_input(op, (h, None, None))


def _constant_int(op, t, what: str) -> int:
    value = constant_value(t)
    if value is None:
        raise fail(op, f"the {what} must be constant")
    return int(np.asarray(value).reshape(-1)[0])
