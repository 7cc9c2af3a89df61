"""TensorFlow's outputs of array / segment / sparse / scatter ops where the op sweep has no case
for the behaviour (forward only: ops TensorFlow cannot differentiate, the gradient ops its
rules emit, unsorted or repeated indices, empty segments, integer types, attrs the sweep
leaves at their defaults). tests/test_array_area_reference.py builds the same raw op in
gradreg and compares.

    python tests/data/array_area/make_reference.py      # needs the tf extra; rewrites forward.npz/cases.json

Each case: an op type, its keyword arguments (arrays, stored in forward.npz under
``<case>/<name>``, or attr values, kept in cases.json), and TensorFlow's outputs
(``<case>/out<i>``).
"""
from __future__ import annotations

import io
import json
import pathlib
import zipfile

import numpy as np
import tensorflow as tf

HERE = pathlib.Path(__file__).resolve().parent
R = tf.raw_ops

IDX = np.array([[0, 1], [1, 0], [1, 3], [3, 2]], np.int64)
SHAPE = np.array([4, 4], np.int64)
REVERSED = IDX[::-1].copy()
V4 = np.array([1.5, -2.0, 3.25, -0.5])
RNG = np.random.default_rng(20261124)

# name -> (op type, {argument: array}, {attr: value})
CASES: dict[str, tuple[str, dict, dict]] = {}


def case(name: str, op: str, attrs: dict | None = None, **arrays) -> None:
    assert name not in CASES, name
    CASES[name] = (op, {k: [np.asarray(x) for x in v] if isinstance(v, list) else np.asarray(v)
                        for k, v in arrays.items()}, attrs or {})


# -- sparse ---------------------------------------------------------------------------------------------
case("SparseAdd.unsorted", "SparseAdd", a_indices=REVERSED, a_values=V4, a_shape=SHAPE, b_indices=IDX,
     b_values=np.ones(4), b_shape=SHAPE, thresh=np.float64(0))
case("SparseAdd.thresh_overlap_only", "SparseAdd", a_indices=IDX, a_values=np.array([0.1, 2, 3, 4]), a_shape=SHAPE,
     b_indices=IDX[1:3], b_values=np.array([-2.2, 1.0]), b_shape=SHAPE, thresh=np.float64(0.5))
case("SparseAdd.int32", "SparseAdd", a_indices=IDX, a_values=np.array([1, 2, 3, 4], np.int32), a_shape=SHAPE,
     b_indices=IDX[::2], b_values=np.array([-1, 5], np.int32), b_shape=SHAPE, thresh=np.int32(1))
case("SparseAddGrad.f64", "SparseAddGrad", backprop_val_grad=np.array([1.0, 2, 3, 4, 5]),
     a_indices=np.array([[0, 1], [1, 0], [3, 2]], np.int64), b_indices=np.array([[1, 0], [1, 3], [2, 2]], np.int64),
     sum_indices=np.array([[0, 1], [1, 0], [1, 3], [2, 2], [3, 2]], np.int64))
for op in ("SparseSparseMaximum", "SparseSparseMinimum"):
    case(f"{op}.f64", op, a_indices=IDX, a_values=np.array([-1.0, 2, 3, 4]), a_shape=SHAPE,
         b_indices=np.array([[1, 3], [2, 0], [3, 2]], np.int64), b_values=np.array([-1.0, -5, 5]), b_shape=SHAPE)
case("SparseSparseMaximum.int64", "SparseSparseMaximum", a_indices=IDX, a_values=np.array([-1, 2, 3, 4]),
     a_shape=SHAPE, b_indices=IDX[1:], b_values=np.array([7, -3, 4]), b_shape=SHAPE)
for op in ("SparseDenseCwiseAdd", "SparseDenseCwiseMul", "SparseDenseCwiseDiv"):
    case(f"{op}.f64_row", op, sp_indices=IDX, sp_values=V4, sp_shape=SHAPE, dense=np.array([1.0, 2, 4, 8]))
    case(f"{op}.f64_column", op, sp_indices=IDX, sp_values=V4, sp_shape=SHAPE, dense=np.array([[1.0], [2], [4], [8]]))
case("SparseDenseCwiseDiv.int32", "SparseDenseCwiseDiv", sp_indices=IDX, sp_values=np.array([7, -7, 9, 3], np.int32),
     sp_shape=SHAPE, dense=np.array([2, 2, 4, 4], np.int32))
case("SparseDenseCwiseAdd.scalar_dense", "SparseDenseCwiseAdd", sp_indices=IDX, sp_values=V4, sp_shape=SHAPE,
     dense=np.float64(10))
for keep in (False, True):
    for op in ("SparseReduceSum", "SparseReduceMax", "SparseReduceSumSparse", "SparseReduceMaxSparse"):
        case(f"{op}.axis1_keep{int(keep)}", op, {"keep_dims": keep}, input_indices=IDX, input_values=V4,
             input_shape=SHAPE, reduction_axes=np.array([1], np.int32))
        case(f"{op}.axis0_rank3_keep{int(keep)}", op, {"keep_dims": keep},
             input_indices=np.array([[0, 0, 1], [0, 2, 1], [1, 0, 1], [1, 2, 0]], np.int64),
             input_values=np.array([1.0, -2, 3, -4]), input_shape=np.array([2, 3, 2], np.int64),
             reduction_axes=np.array([0, -1], np.int32))
case("SparseReduceSum.no_axes", "SparseReduceSum", input_indices=IDX, input_values=V4, input_shape=SHAPE,
     reduction_axes=np.zeros(0, np.int32))
case("SparseReduceMax.int32_negative", "SparseReduceMax", input_indices=IDX, input_values=np.array([-3, -1, -2, -5],
                                                                                                  np.int32),
     input_shape=SHAPE, reduction_axes=np.array([1], np.int32))
case("SparseSoftmax.unsorted", "SparseSoftmax", sp_indices=REVERSED, sp_values=V4, sp_shape=SHAPE)
case("SparseReorder.rank3", "SparseReorder", input_indices=np.array([[1, 0, 1], [0, 2, 0], [0, 0, 1], [1, 0, 0]],
                                                                     np.int64),
     input_values=np.array([1.0, 2, 3, 4]), input_shape=np.array([2, 3, 2], np.int64))
case("SparseReshape.inferred", "SparseReshape", input_indices=IDX, input_shape=SHAPE,
     new_shape=np.array([2, -1], np.int64))
case("SparseReshape.rank3", "SparseReshape", input_indices=IDX, input_shape=SHAPE,
     new_shape=np.array([2, 2, 4], np.int64))
case("SparseFillEmptyRows.unsorted", "SparseFillEmptyRows", indices=np.array([[2, 3], [0, 1], [2, 0]], np.int64),
     values=np.array([1.0, 2, 3]), dense_shape=np.array([5, 4], np.int64), default_value=np.float64(9))
case("SparseFillEmptyRowsGrad.f64", "SparseFillEmptyRowsGrad", reverse_index_map=np.array([3, 0, 2], np.int64),
     grad_values=np.array([1.0, 2, 4, 8, 16]))
case("SparseSlice.past_the_end", "SparseSlice", indices=IDX, values=V4, shape=SHAPE,
     start=np.array([1, 0], np.int64), size=np.array([9, 9], np.int64))
case("SparseSlice.empty", "SparseSlice", indices=IDX, values=V4, shape=SHAPE, start=np.array([2, 0], np.int64),
     size=np.array([1, 4], np.int64))
case("SparseSliceGrad.f64", "SparseSliceGrad", backprop_val_grad=np.array([10.0, 20]), input_indices=IDX,
     input_start=np.array([1, 0], np.int64), output_indices=np.array([[0, 0], [2, 2]], np.int64))
for dim in (0, 1, -1):
    case(f"SparseConcat.dim{dim}", "SparseConcat", {"concat_dim": dim},
         indices=[IDX, np.array([[0, 0], [2, 1]], np.int64)], values=[V4, np.array([7.0, 8])],
         shapes=[SHAPE, np.array([4, 4], np.int64)])
case("SparseToDense.unvalidated_repeats", "SparseToDense", {"validate_indices": False},
     sparse_indices=np.array([[0, 1], [2, 2], [0, 1]], np.int64), output_shape=np.array([3, 3], np.int64),
     sparse_values=np.array([1.0, 2, 3]), default_value=np.float64(-1))
case("SparseToDense.scalar_index", "SparseToDense", sparse_indices=np.int32(2), output_shape=np.array([5], np.int32),
     sparse_values=np.float64(4), default_value=np.float64(0.5))
case("SparseToDense.vector_indices_scalar_value", "SparseToDense", sparse_indices=np.array([0, 3, 4], np.int32),
     output_shape=np.array([6], np.int32), sparse_values=np.float64(2), default_value=np.float64(-1))
case("SparseTensorDenseMatMul.repeated_entries", "SparseTensorDenseMatMul",
     a_indices=np.array([[0, 1], [0, 1], [1, 0]], np.int64), a_values=np.array([1.0, 2, 3]),
     a_shape=np.array([2, 3], np.int64), b=RNG.normal(size=(3, 2)))
case("SparseTensorDenseMatMul.c128_adjoints", "SparseTensorDenseMatMul", {"adjoint_a": True, "adjoint_b": True},
     a_indices=IDX[:3], a_values=np.array([1 + 2j, -1j, 0.5]), a_shape=np.array([2, 4], np.int64),
     b=RNG.normal(size=(3, 2)) + 1j * RNG.normal(size=(3, 2)))
case("SparseMatMul.transposes", "SparseMatMul", {"transpose_a": True, "transpose_b": True, "a_is_sparse": True},
     a=RNG.normal(size=(3, 2)).astype(np.float32), b=RNG.normal(size=(4, 3)).astype(np.float32))

# -- segments -------------------------------------------------------------------------------------------------
DATA = RNG.normal(size=(5, 2))
for op in ("SegmentMax", "SegmentMin", "SegmentProd"):
    case(f"{op}.gaps", op, data=DATA, segment_ids=np.array([0, 0, 2, 2, 4], np.int32))
    case(f"{op}.int32_gaps", op, data=np.array([[3, -1], [2, 5], [-4, 0], [1, 1], [6, -6]], np.int32),
         segment_ids=np.array([1, 1, 1, 3, 3], np.int64))
for op in ("SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN"):
    case(f"{op}.repeated_rows_gaps", op, data=DATA, indices=np.array([4, 0, 4, 2], np.int32),
         segment_ids=np.array([0, 0, 2, 2], np.int32))
    case(f"{op}WithNumSegments.trailing_empty", op + "WithNumSegments", data=DATA,
         indices=np.array([1, 3, 3], np.int64), segment_ids=np.array([0, 1, 1], np.int64), num_segments=np.int32(4))
    for version in ("Grad", "GradV2"):
        rows = {"output_dim0": np.int32(6)} if version == "Grad" else {"dense_output_dim0": np.int32(6)}
        case(f"{op}{version}.unsorted_ids", op + version, grad=RNG.normal(size=(3, 2)),
             indices=np.array([5, 0, 5, 2], np.int64), segment_ids=np.array([2, 0, 2, 1], np.int32), **rows)
case("SparseSegmentSum.int32", "SparseSegmentSum", data=np.arange(10, dtype=np.int32).reshape(5, 2),
     indices=np.array([1, 1, 4], np.int32), segment_ids=np.array([0, 1, 1], np.int32))

# -- array / scatter --------------------------------------------------------------------------------------------
case("DynamicStitch.repeated", "DynamicStitch", indices=[np.array([0, 2, 1], np.int32), np.array([[2], [4]], np.int32)],
     data=[RNG.normal(size=(3, 2)), RNG.normal(size=(2, 1, 2))])
case("ParallelDynamicStitch.scalar_indices", "ParallelDynamicStitch", indices=[np.int32(1), np.array([0], np.int32)],
     data=[np.array([5.0, 6]), np.array([[7.0, 8]])])
case("DynamicPartition.matrix_partitions", "DynamicPartition", {"num_partitions": 3},
     data=RNG.normal(size=(2, 3, 2)), partitions=np.array([[2, 0, 2], [1, 2, 0]], np.int32))
case("DynamicPartition.int32_one_partition", "DynamicPartition", {"num_partitions": 1},
     data=np.array([4, 5, 6], np.int32), partitions=np.zeros(3, np.int32))
case("ReverseSequence.batch_after_seq", "ReverseSequence", {"seq_dim": 0, "batch_dim": 2},
     input=RNG.normal(size=(4, 2, 3)), seq_lengths=np.array([4, 0, 2], np.int32))
case("Roll.large_shifts", "Roll", input=np.arange(24.0).reshape(2, 3, 4), shift=np.array([7, -9, 3], np.int64),
     axis=np.array([2, 1, 2], np.int64))
case("Reverse.int32_all", "Reverse", tensor=np.arange(6, dtype=np.int32).reshape(2, 3), dims=np.array([True, True]))
case("TensorScatterUpdate.repeated_last_wins", "TensorScatterUpdate", tensor=np.zeros((4, 2)),
     indices=np.array([[1], [3], [1]], np.int32), updates=np.array([[1.0, 2], [3, 4], [5, 6]]))
case("TensorScatterMax.int32_repeated", "TensorScatterMax", tensor=np.array([[1, 9], [4, -4]], np.int32),
     indices=np.array([[0], [0], [1]], np.int64), updates=np.array([[5, 2], [3, 10], [-7, -1]], np.int32))
case("TensorScatterMin.elements", "TensorScatterMin", tensor=np.arange(6.0).reshape(2, 3),
     indices=np.array([[0, 2], [1, 0], [0, 2]], np.int32), updates=np.array([1.0, -3, 0.5]))
case("TensorScatterSub.repeated", "TensorScatterSub", tensor=np.ones((3, 2)), indices=np.array([[2], [2]], np.int32),
     updates=np.array([[1.0, 2], [3, 4]]))
case("ScatterNdNonAliasingAdd.bool", "ScatterNdNonAliasingAdd", input=np.array([True, False, False]),
     indices=np.array([[1], [1]], np.int32), updates=np.array([True, False]))
case("TensorStridedSliceUpdate.broadcast_value", "TensorStridedSliceUpdate", {"end_mask": 1},
     input=np.zeros((4, 3)), begin=np.array([1, 0], np.int32), end=np.array([0, 3], np.int32),
     strides=np.array([2, 1], np.int32), value=np.array([1.0, 2, 3]))
case("CheckNumericsV2.finite", "CheckNumericsV2", {"message": "fine"}, tensor=np.array([1.0, -2.0]))

# -- counting, sets, bits ------------------------------------------------------------------------------------------
VALUES = np.array([1, 4, 1, 0, 7, 4, 4], np.int32)
case("Bincount.weights", "Bincount", arr=VALUES, size=np.int32(5), weights=np.linspace(0.5, 3.5, 7))
case("Bincount.counts", "Bincount", arr=VALUES, size=np.int32(3), weights=np.zeros(0, np.int64))
case("DenseBincount.matrix_binary", "DenseBincount", {"binary_output": True}, input=VALUES[:6].reshape(2, 3),
     size=np.int32(6), weights=np.zeros(0, np.float32))
case("DenseBincount.weights_int64", "DenseBincount", input=VALUES.astype(np.int64), size=np.int64(8),
     weights=np.arange(7.0))
case("SparseBincount.rank2", "SparseBincount", indices=np.array([[0, 0], [0, 3], [2, 1]], np.int64),
     values=np.array([2, 2, 0], np.int32), dense_shape=np.array([3, 4], np.int64), size=np.int32(3),
     weights=np.array([1.5, 2.0, -1.0]))
case("RaggedBincount.rows", "RaggedBincount", splits=np.array([0, 2, 2, 5], np.int64),
     values=np.array([1, 1, 3, 0, 3], np.int64), size=np.int64(4), weights=np.zeros(0, np.int32))
case("Bucketize.f32", "Bucketize", {"boundaries": [-1.0, 0.0, 0.1, 2.5]},
     input=np.array([[-3.0, 0.0, 0.1], [0.099, 2.5, 9.0]], np.float32))
case("Bucketize.int64", "Bucketize", {"boundaries": [0.0, 3.0]}, input=np.array([-1, 0, 2, 3, 4], np.int64))
case("HistogramFixedWidth.outside", "HistogramFixedWidth", values=np.array([-1.0, 0.0, 1.5, 2.0, 4.99, 5.0, 12.0]),
     value_range=np.array([0.0, 5.0]), nbins=np.int32(5))
case("UniqueWithCounts.int64", "UniqueWithCounts", {"out_idx": tf.int64}, x=np.array([4, 2, 4, 4, 9, 2]))
case("UniqueV2.axis1", "UniqueV2", x=np.array([[1, 2, 1, 3], [5, 6, 5, 7]], np.int32),
     axis=np.array([1], np.int64))
case("UniqueWithCountsV2.axis0", "UniqueWithCountsV2", x=np.array([[1.0, 2], [3, 4], [1, 2], [1, 2]]),
     axis=np.array([-2], np.int32))
# tf.searchsorted: the positions of each row of values in the same row of sorted_inputs (ties: either side).
case("LowerBound.f64_ties", "LowerBound", sorted_inputs=np.array([[1.0, 2.0, 2.0, 5.0], [-3.0, -1.0, 0.0, 0.0]]),
     values=np.array([[2.0, 0.5, 6.0], [0.0, -5.0, -1.0]]))
case("UpperBound.int64_out", "UpperBound", {"out_type": tf.int64},
     sorted_inputs=np.array([[1, 2, 2, 5], [-3, -1, 0, 0]], np.int32), values=np.array([[2, 0, 6], [0, -5, -1]],
                                                                                        np.int32))
case("Bitcast.f32_to_u8", "Bitcast", {"type": tf.uint8}, input=np.array([1.0, -2.5], np.float32))
case("Bitcast.u16_to_f32", "Bitcast", {"type": tf.float32}, input=np.arange(8, dtype=np.uint16).reshape(4, 2))
case("Empty.init", "Empty", {"dtype": tf.float64, "init": True}, shape=np.array([2, 3], np.int32))

# -- top k ---------------------------------------------------------------------------------------------------------
case("TopKV2.ties_int32", "TopKV2", input=np.array([[3, 1, 3, 2, 3, 1], [0, 0, 0, 0, 0, 0]], np.int32),
     k=np.int32(4))
case("TopKV2.unsorted_k2", "TopKV2", {"sorted": False}, input=RNG.normal(size=(3, 7)), k=np.int32(2))
case("TopKV2.int64_index_type", "TopKV2", {"index_type": tf.int64}, input=RNG.normal(size=(2, 5)),
     k=np.int64(3))
case("ApproxTopK.f32", "ApproxTopK", {"k": 3}, input=RNG.normal(size=(2, 9)).astype(np.float32))


# -- ragged to sparse ----------------------------------------------------------------------------------------------
case("RaggedTensorToSparse.rank2_inner_dims", "RaggedTensorToSparse",
     rt_nested_splits=[np.array([0, 1, 1, 3], np.int64), np.array([0, 2, 2, 5], np.int64)],
     rt_dense_values=np.arange(10.0).reshape(5, 2))
case("RaggedTensorToSparse.int32_values_empty_rows", "RaggedTensorToSparse",
     rt_nested_splits=[np.array([0, 0, 3, 3, 4], np.int64)], rt_dense_values=np.array([4, -1, 7, 2], np.int32))
case("RaggedTensorToTensor.rank2_unknown_shape_vector_default", "RaggedTensorToTensor",
     {"row_partition_types": ["ROW_SPLITS", "ROW_SPLITS"]}, shape=np.int64(-1),
     values=np.arange(10.0).reshape(5, 2), default_value=np.array([7.0, 8.0]),
     row_partition_tensors=[np.array([0, 1, 1, 3], np.int64), np.array([0, 2, 2, 5], np.int64)])
case("RaggedTensorToTensor.int32_partial_shape_truncated", "RaggedTensorToTensor",
     {"row_partition_types": ["ROW_SPLITS"]}, shape=np.array([2, -1], np.int32),
     values=np.array([4, -1, 7, 2, 9], np.int32), default_value=np.int32(-5),
     row_partition_tensors=[np.array([0, 1, 1, 5], np.int32)])
case("RaggedTensorToTensor.value_rowids_rank2", "RaggedTensorToTensor",
     {"row_partition_types": ["FIRST_DIM_SIZE", "VALUE_ROWIDS", "VALUE_ROWIDS"]},
     shape=np.array([4, 2, 3], np.int64), values=np.arange(1.0, 7.0), default_value=np.float64(0),
     row_partition_tensors=[np.int64(4), np.array([0, 2, 2], np.int64), np.array([0, 0, 1, 1, 1, 2], np.int64)])

# -- ragged fill empty rows ---------------------------------------------------------------------------------------
case("RaggedFillEmptyRows.empty_first_and_last", "RaggedFillEmptyRows", value_rowids=np.array([1, 1, 3], np.int64),
     values=np.array([1.5, -2.0, 4.0]), nrows=np.int64(5), default_value=np.float64(9))
case("RaggedFillEmptyRows.int32_no_values", "RaggedFillEmptyRows", value_rowids=np.zeros(0, np.int64),
     values=np.zeros(0, np.int32), nrows=np.int64(2), default_value=np.int32(-3))
case("RaggedFillEmptyRowsGrad.f64", "RaggedFillEmptyRowsGrad", reverse_index_map=np.array([1, 2, 4], np.int64),
     grad_values=np.array([1.0, 2, 3, 4, 5, 6]))

# -- ragged range and gather ---------------------------------------------------------------------------------------
case("RaggedRange.vectors_broadcast_negative_delta", "RaggedRange", starts=np.array([0, 5, 3, 2], np.int64),
     limits=np.int64(4), deltas=np.array([1, -2, 1, 3], np.int64))
case("RaggedRange.float_int32_splits", "RaggedRange", {"Tsplits": tf.int32}, starts=np.array([0.5, -1.0]),
     limits=np.array([2.0, 1.0]), deltas=np.float64(0.75))
case("RaggedGather.rank2_matrix_indices", "RaggedGather", {"OUTPUT_RAGGED_RANK": 3},
     params_nested_splits=[np.array([0, 1, 1, 3], np.int64), np.array([0, 2, 2, 5], np.int64)],
     params_dense_values=np.arange(10.0).reshape(5, 2), indices=np.array([[2, 0], [1, 2]], np.int32))
case("RaggedGather.int32_values_empty_row", "RaggedGather", {"OUTPUT_RAGGED_RANK": 1},
     params_nested_splits=[np.array([0, 3, 3, 4], np.int64)], params_dense_values=np.array([4, -1, 7, 2], np.int32),
     indices=np.array([1, 1, 0], np.int64))


def main() -> None:
    arrays: dict[str, np.ndarray] = {}
    records = []
    for name, (op, args, attrs) in CASES.items():
        flat = _run(op, {**args, **attrs})
        lists = {}
        for k, v in args.items():
            if isinstance(v, list):     # a list argument: one array per element
                lists[k] = len(v)
                for i, item in enumerate(v):
                    arrays[f"{name}/{k}/{i}"] = np.asarray(item)
            else:
                arrays[f"{name}/{k}"] = v
        for i, out in enumerate(flat):
            arrays[f"{name}/out{i}"] = out
        records.append({"case": name, "op": op, "arrays": sorted(args), "lists": lists, "outputs": len(flat),
                        "attrs": {k: (v.name if isinstance(v, tf.dtypes.DType) else v) for k, v in attrs.items()}})
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    _write_stable(HERE / "forward.npz", buffer.getvalue())
    (HERE / "cases.json").write_text(json.dumps({"tensorflow": tf.__version__, "cases": records}, indent=1) + "\n")
    print(f"{len(records)} cases")


def _run(op: str, kwargs: dict) -> list[np.ndarray]:
    """The op's outputs, built in a graph of its own and run in a v1 Session (graph mode, as
    gradreg runs it)."""
    graph = tf.Graph()
    with graph.as_default():
        outputs = getattr(R, op)(**kwargs)
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        flat = []
        for out in outputs:
            flat.extend(out if isinstance(out, list) else [out])
        with tf.compat.v1.Session(graph=graph) as session:
            return session.run(flat)


def _write_stable(path: pathlib.Path, data: bytes) -> None:
    """The npz with fixed timestamps, so regenerating it changes nothing when the values do not."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in sorted(source.infolist(), key=lambda i: i.filename):
            stable = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            stable.compress_type = zipfile.ZIP_DEFLATED
            target.writestr(stable, source.read(info.filename))
    path.write_bytes(out.getvalue())


if __name__ == "__main__":
    main()
