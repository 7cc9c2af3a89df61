"""Gradient rules of the sparse family: ``rule(op, *grads) -> one gradient per input``.

A sparse tensor's gradient is its values' gradient (indices and shapes get None). The rules
follow tensorflow/python/ops/sparse_grad.py, emitting TensorFlow's op types, except:

* SparseToDense: TensorFlow's rule fails for a scalar ``sparse_values`` (broadcast to every
  index: its gradient is the sum over them) and for scalar or vector ``sparse_indices`` (a 1-D
  output); gradreg's handles both. With ``validate_indices=False`` an index may repeat and only
  the last value written to it lands: the others get no gradient (TensorFlow gives each the
  position's gradient, and counts it twice against the default value).
* SparseDenseCwiseAdd, SparseSparseMaximum and SparseSparseMinimum: TensorFlow's rules raise
  (not implemented); gradreg's are derived here and checked against finite differences. The
  sum's values get the gradient and the dense operand its scatter-add; of a maximum (minimum),
  the operand holding the result gets the gradient, ``a`` on ties (as Maximum's rule does), and
  an entry that lost to the other side's implicit zero gets none.
* SparseConcat: TensorFlow declares it not differentiable; its values' gradient is the output's
  gradient permuted back (as for SparseReorder) and split per input, so gradreg gives it.
"""
from __future__ import annotations

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op, as_dense
from gradreg.model import dtypes
from gradreg.model.graph import Tensor
from gradreg_plugins.rule_helpers import conj, landed_indices
from gradreg_plugins.sparse import family

family.not_differentiable("SparseAddGrad")


def _count(t: Tensor) -> Tensor:
    """The number of rows of ``t`` (a scalar int64)."""
    return apply_op("StridedSlice", apply_op("Shape", t, out_type=dtypes.int64), [0], [1], [1], shrink_axis_mask=1)


def _ordinals(t: Tensor) -> Tensor:
    """0, 1, ... one per row of ``t`` (int64)."""
    return apply_op("Range", rules.ints(0, dtypes.int64), _count(t), rules.ints(1, dtypes.int64))


def _permuted_back(grad: Tensor, indices: Tensor, reorder) -> Tensor:
    """The gradient of values an op permuted: each entry's ordinal goes through the same
    permutation (``reorder(ordinals)``), whose inverse gathers the gradient back."""
    moved = reorder(_ordinals(indices))
    return apply_op("GatherV2", grad, apply_op("InvertPermutation", moved), rules.ints(0))


# -- arithmetic --------------------------------------------------------------------------------------------

@family.gradient("SparseAdd")
def _sparse_add_grad(op, *grads):
    """The sum's gradient at each operand's entries (an entry dropped by thresh gets none)."""
    a_indices, b_indices, sum_indices = op.inputs[0], op.inputs[3], op.outputs[0]
    da, db = apply_op("SparseAddGrad", as_dense(grads[1]), a_indices, b_indices, sum_indices)
    da.set_shape(op.inputs[1].shape)
    db.set_shape(op.inputs[4].shape)
    return None, da, None, None, db, None, None


@family.gradient("SparseSparseMaximum", "SparseSparseMinimum")
def _sparse_sparse_extreme_grad(op, *grads):
    """Each output entry's gradient to the operand whose value it is: ``a`` where a's value is
    the result (ties included), else ``b`` where b's is; neither where an implicit zero won."""
    a_indices, a_values, a_shape, b_indices, b_values, b_shape = op.inputs
    out_indices, out_values = op.outputs
    grad = as_dense(grads[1])
    result_at_a, result_at_b = apply_op("SparseAddGrad", out_values, a_indices, b_indices, out_indices)
    grad_at_a, grad_at_b = apply_op("SparseAddGrad", grad, a_indices, b_indices, out_indices)
    a_won = apply_op("Equal", a_values, result_at_a)
    a_won_values = apply_op("Cast", a_won, DstT=grad.dtype.base_dtype)
    # Where a won, as seen from b's entries: a's win flags added into the union's layout
    # (thresh 0 drops nothing), then read at b's entries.
    a_won_in_union = apply_op("SparseAdd", a_indices, a_won_values, a_shape, b_indices,
                              apply_op("ZerosLike", b_values), b_shape, rules.ints(0, dtypes.int32))
    _, a_won_at_b = apply_op("SparseAddGrad", a_won_in_union[1], a_indices, b_indices, a_won_in_union[0])
    b_won = apply_op("LogicalAnd", apply_op("Equal", b_values, result_at_b),
                     apply_op("Equal", a_won_at_b, apply_op("ZerosLike", a_won_at_b)))
    zeros_a, zeros_b = apply_op("ZerosLike", grad_at_a), apply_op("ZerosLike", grad_at_b)
    return (None, apply_op("SelectV2", a_won, grad_at_a, zeros_a), None, None,
            apply_op("SelectV2", b_won, grad_at_b, zeros_b), None)


def _dense_picks(indices: Tensor, shape: Tensor, dense: Tensor) -> Tensor:
    """Per sparse entry, the index of the dense operand's element it meets (the dense operand
    broadcasts: leading dims it lacks are dropped, its dims of size 1 read index 0)."""
    dense_shape = apply_op("Shape", dense, out_type=dtypes.int64)
    lead = apply_op("Size", shape) - apply_op("Size", dense_shape)
    begin = apply_op("Pack", [rules.ints(0), lead], axis=0)
    trailing = apply_op("Slice", indices, apply_op("Cast", begin, DstT=dtypes.int64),
                        rules.ints([-1, -1], dtypes.int64))
    not_one = apply_op("Cast", apply_op("NotEqual", dense_shape, rules.ints(1, dtypes.int64)), DstT=dtypes.int64)
    return trailing * not_one


def _dense_gradient(picks: Tensor, per_entry: Tensor, dense: Tensor) -> Tensor:
    """Entries' contributions summed into the dense operand's shape (picks may repeat)."""
    return apply_op("ScatterNd", picks, per_entry, apply_op("Shape", dense, out_type=dtypes.int64))


@family.gradient("SparseDenseCwiseMul")
def _sparse_dense_mul_grad(op, grad):
    indices, values, shape, dense = op.inputs
    grad = as_dense(grad)
    picks = _dense_picks(indices, shape, dense)
    met = apply_op("GatherNd", dense, picks)
    return None, grad * conj(met), None, _dense_gradient(picks, grad * conj(values), dense)


@family.gradient("SparseDenseCwiseDiv")
def _sparse_dense_div_grad(op, grad):
    indices, values, shape, dense = op.inputs
    grad = as_dense(grad)
    picks = _dense_picks(indices, shape, dense)
    met = conj(apply_op("GatherNd", dense, picks))
    ddense = -grad * conj(values) / apply_op("Square", met)
    return None, grad / met, None, _dense_gradient(picks, ddense, dense)


@family.gradient("SparseDenseCwiseAdd")
def _sparse_dense_add_grad(op, grad):
    indices, _, shape, dense = op.inputs
    grad = as_dense(grad)
    return None, grad, None, _dense_gradient(_dense_picks(indices, shape, dense), grad, dense)


# -- products and sums with dense tensors -------------------------------------------------------------------

@family.gradient("SparseTensorDenseMatMul")
def _sparse_dense_matmul_grad(op, grad):
    """With G the product's gradient: dB from the sparse product with A adjointed the other way;
    dA at each entry (r, c): the inner product over j of G[r, j] and conj(B[c, j]) — rows and
    columns exchanged, and conjugated, where the flags take adjoints."""
    a_indices, a_values, a_shape, b = op.inputs
    adjoint_a, adjoint_b = op.get_attr("adjoint_a"), op.get_attr("adjoint_b")
    grad = as_dense(grad)
    db = apply_op("SparseTensorDenseMatMul", a_indices, a_values, a_shape, grad, adjoint_a=not adjoint_a)
    if adjoint_b:
        db = apply_op("ConjugateTranspose", db, rules.ints([1, 0])) if b.dtype.base_dtype.is_complex \
            else apply_op("Transpose", db, rules.ints([1, 0]))
    rows = apply_op("StridedSlice", a_indices, [0, 0], [0, 1], [1, 1], begin_mask=1, end_mask=1, shrink_axis_mask=2)
    cols = apply_op("StridedSlice", a_indices, [0, 1], [0, 2], [1, 1], begin_mask=1, end_mask=1, shrink_axis_mask=2)
    g_rows, b_rows = (cols, rows) if adjoint_a else (rows, cols)
    right = apply_op("Transpose", b, rules.ints([1, 0])) if adjoint_b else conj(b)
    parts = apply_op("GatherV2", grad, g_rows, rules.ints(0)) * apply_op("GatherV2", right, b_rows, rules.ints(0))
    da = apply_op("Sum", parts, rules.ints([1]))
    return None, conj(da) if adjoint_a else da, None, db


@family.gradient("SparseTensorDenseAdd")
def _sparse_dense_add_grad_values(op, grad):
    grad = as_dense(grad)
    return None, apply_op("GatherNd", grad, op.inputs[0]), None, grad


@family.gradient("SparseToDense")
def _sparse_to_dense_grad(op, grad):
    """The values' gradient: the output's at their indices (summed for a scalar value, which
    every index takes); the default value's: the rest of it."""
    indices, output_shape, values, default = op.inputs
    grad = as_dense(grad)
    rank = indices.shape.rank
    if rank is None:
        indices = apply_op("Reshape", indices, _index_matrix_shape(indices))
    elif rank < 2:
        indices = apply_op("Reshape", indices, rules.ints([-1, 1]))
    picks = None
    if not op.get_attr("validate_indices"):
        picks = landed_indices(indices, output_shape)
    if picks is None:
        gathered = apply_op("GatherNd", grad, indices)
    else:
        gathered = apply_op("GatherNd", grad, picks, bad_indices_policy=b"IGNORE")
    total = apply_op("Sum", gathered, rules.ints([0]))
    if values.shape.rank == 0:
        dvalues = total
    elif values.shape.rank == 1:
        dvalues = gathered
    else:
        dvalues = _values_shaped(gathered, total, values)
    axes = rules.ints(list(range(grad.shape.rank))) if grad.shape.rank is not None else _all_axes(grad)
    return None, None, dvalues, apply_op("Sum", grad, axes) - total


def _values_shaped(gathered: Tensor, total: Tensor, values: Tensor) -> Tensor:
    """The values' gradient when their rank is only known at run time: the total for a scalar."""
    is_scalar = apply_op("Equal", apply_op("Rank", values), rules.ints(0))
    return apply_op("Reshape", apply_op("SelectV2", is_scalar, apply_op("Reshape", total, rules.ints([1])),
                                        gathered), apply_op("Shape", values))


def _index_matrix_shape(indices: Tensor) -> Tensor:
    """[-1, k] for indices [n, k] of a rank known only at run time; [-1, 1] for a vector or a
    scalar (one index per element)."""
    padded = apply_op("ConcatV2", [rules.ints([1, 1]), apply_op("Shape", indices)], rules.ints(0))
    last = apply_op("StridedSlice", padded, rules.ints([-1]), rules.ints([0]), rules.ints([1]), shrink_axis_mask=1)
    matrix = apply_op("GreaterEqual", apply_op("Rank", indices), rules.ints(2))
    return apply_op("Pack", [rules.ints(-1), apply_op("SelectV2", matrix, last, rules.ints(1))], axis=0)


def _all_axes(t: Tensor) -> Tensor:
    return apply_op("Range", rules.ints(0), apply_op("Rank", t), rules.ints(1))


# -- reductions and softmax --------------------------------------------------------------------------------------

@family.gradient("SparseReduceSum")
def _sparse_reduce_sum_grad(op, grad):
    """Each entry gets the gradient of the sum it went into: the gradient, with the reduced
    dims kept as 1, read at the entry's index with the reduced coordinates set to 0."""
    indices, _, shape, axes = op.inputs
    rank = apply_op("Size", shape)
    axes = apply_op("FloorMod", axes, rank)
    reduced = apply_op("UnsortedSegmentSum", apply_op("OnesLike", axes), axes, rank)
    kept = apply_op("Cast", apply_op("Equal", reduced, rules.ints(0)), DstT=dtypes.int64)
    kept_dims = shape * kept + (rules.ints(1, dtypes.int64) - kept)
    reshaped = apply_op("Reshape", as_dense(grad), kept_dims)
    return None, apply_op("GatherNd", reshaped, indices * kept), None, None


@family.gradient("SparseSoftmax")
def _sparse_softmax_grad(op, grad):
    """Softmax's rule on the entries: (g - sum over the row of g * y) * y."""
    indices, _, shape = op.inputs
    y = op.outputs[0]
    grad = as_dense(grad)
    row_sums = apply_op("SparseReduceSum", indices, grad * y, shape, rules.ints([-1]), keep_dims=True)
    shifted = apply_op("SparseDenseCwiseAdd", indices, grad, shape, -row_sums)
    return None, shifted * y, None


# -- reordering, filling, slicing, concatenating -----------------------------------------------------------------

@family.gradient("SparseReorder")
def _sparse_reorder_grad(op, _, grad):
    indices, _, shape = op.inputs
    dvalues = _permuted_back(as_dense(grad), indices,
                             lambda ordinals: apply_op("SparseReorder", indices, ordinals, shape)[1])
    return None, dvalues, None


@family.gradient("SparseFillEmptyRows", "RaggedFillEmptyRows")
def _sparse_fill_empty_rows_grad(op, _, grad, *unused):
    """Each value's gradient back from where it landed, the added entries' summed to the
    default (SparseFillEmptyRowsGrad / RaggedFillEmptyRowsGrad)."""
    if grad is None:
        return None, None, None, None
    dvalues, ddefault = apply_op(op.type + "Grad", op.outputs[3], as_dense(grad))
    return None, dvalues, None, ddefault


@family.gradient("SparseSlice")
def _sparse_slice_grad(op, _, grad, *unused):
    dvalues = apply_op("SparseSliceGrad", as_dense(grad), op.inputs[0], op.inputs[3], op.outputs[0])
    dvalues.set_shape(op.inputs[1].shape)
    return None, dvalues, None, None, None


@family.gradient("SparseConcat")
def _sparse_concat_grad(op, _, grad, *unused):
    """The output's gradient permuted back to the order of the concatenated inputs (their
    entries' ordinals go through the same concatenation) and split per input."""
    n = op.get_attr("N")
    indices, values, shapes = op.inputs[:n], op.inputs[n:2 * n], op.inputs[2 * n:]
    counts = [_count(i) for i in indices]
    ordinals, start = [], rules.ints(0, dtypes.int64)
    for c in counts:
        ordinals.append(apply_op("Range", start, start + c, rules.ints(1, dtypes.int64)))
        start = start + c
    moved = apply_op("SparseConcat", list(indices), ordinals, list(shapes), concat_dim=op.get_attr("concat_dim"))[1]
    back = apply_op("GatherV2", as_dense(grad), apply_op("InvertPermutation", moved), rules.ints(0))
    parts = apply_op("SplitV", back, apply_op("Pack", counts, axis=0), rules.ints(0), num_split=n)
    parts = list(parts) if isinstance(parts, (list, tuple)) else [parts]
    for part, v in zip(parts, values):
        part.set_shape(v.shape)
    return [None] * n + parts + [None] * n
