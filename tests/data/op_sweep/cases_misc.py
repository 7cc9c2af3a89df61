"""Sweep cases: resource variables, random ops differentiated through their samples, optionals,
ragged tensors and composite-tensor variants."""
from __future__ import annotations

import numpy as np
import tensorflow as tf
from sweep import R, case, f32, f64, family, inp, short, values

tf1 = tf.compat.v1
family("misc")


# -- resource variables: the gradient w.r.t. the variable's handle -------------------------------------------
def _variable(value, dtype):
    v = tf1.Variable(value.astype(dtype.as_numpy_dtype), use_resource=True, name="v")
    return v


def _read(x, dt):
    v = _variable(values("any", (3, 4), "var"), dt)
    return {"ys": [R.ReadVariableOp(resource=v.handle, dtype=dt) * x], "xs": [v.handle]}


for dt in (f32, f64):
    case("ReadVariableOp", short(dt), lambda x, dt=dt: _read(x, dt), x=inp(values("any", (3, 4)), dt))
    case("ResourceGather", short(dt), lambda x, dt=dt: (lambda v: {
        "ys": [R.ResourceGather(resource=v.handle, indices=[2, 0, 2], dtype=dt) * x], "xs": [v.handle]})(
        _variable(values("any", (3, 4), "var"), dt)), x=inp(values("any", (3, 4)), dt))
case("ResourceGather", "f64_batch_dims", lambda: (lambda v: {
    "ys": [R.ResourceGather(resource=v.handle, indices=[[0, 1], [2, 2]], batch_dims=1, dtype=f64)], "xs": [v.handle]})(
    _variable(values("any", (2, 3, 4), "var"), f64)))
case("ResourceGatherNd", "f64", lambda: (lambda v: {
    "ys": [R.ResourceGatherNd(resource=v.handle, indices=[[0, 1], [2, 3]], dtype=f64)], "xs": [v.handle]})(
    _variable(values("any", (3, 4), "var"), f64)))

# -- random ops: the sample is part of the reference data and fed back to gradreg --------------------------------
for dt in (f32, f64):
    case("RandomGamma", short(dt), lambda a: R.RandomGamma(shape=np.array([2], np.int32), alpha=a, seed=3, seed2=5),
         a=inp(values("pos", (3,)), dt), random=True)
    case("StatelessRandomGammaV2", short(dt), lambda a: R.StatelessRandomGammaV2(
        shape=np.array([2, 3], np.int32), seed=np.array([1, 2], np.int64), alpha=a), a=inp(values("pos", (3,)),
                                                                                           dt), random=True)
    case("StatelessRandomGammaV3", short(dt), lambda a: R.StatelessRandomGammaV3(
        shape=np.array([2, 3], np.int32), key=np.array([7], np.uint64), counter=np.array([0, 0],
                                                                                         np.uint64), alg=1, alpha=a),
         a=inp(values("pos", (3,)), dt), random=True)
    case("StatelessParameterizedTruncatedNormal", short(dt),
         lambda m, s, lo, hi: R.StatelessParameterizedTruncatedNormal(
        shape=np.array([2, 3], np.int32), seed=np.array([1, 2], np.int64), means=m, stddevs=s, minvals=lo, maxvals=hi),
         m=inp(values("any", (3,)), dt), s=inp(values("pos", (3,)), dt), lo=inp([-3.0, -2.5, -2.0], dt),
         hi=inp([3.0, 2.5, 2.0], dt), random=True)
case("RandomGamma", "f64_scalar_alpha_unknown",
     lambda a: R.RandomGamma(shape=np.array([4], np.int64), alpha=a, seed=1, seed2=2),
     a=inp(values("pos", (2,)), f64, [None]), random=True)

# -- optionals ---------------------------------------------------------------------------------------------------------
case("OptionalGetValue", "f64", lambda x, y: R.OptionalGetValue(optional=R.OptionalFromValue(components=[x, y]),
                                                                 output_types=[f64, f32], output_shapes=[[3, 4], [2]]),
     x=inp(values("any", (3, 4)), f64), y=inp(values("any", (2,)), f32), covers=("OptionalFromValue",))

# -- ragged tensors ----------------------------------------------------------------------------------------------------
SPLITS = np.array([0, 2, 2, 5], np.int64)
case("RaggedGather", "f64", lambda v: R.RaggedGather(params_nested_splits=[SPLITS], params_dense_values=v,
                                                     indices=np.array([2, 0, 2], np.int32), OUTPUT_RAGGED_RANK=1)[1],
     v=inp(values("any", (5, 2)), f64))
case("RaggedTensorToTensor", "f64_row_splits", lambda v, d: R.RaggedTensorToTensor(
    shape=np.array([3, 4], np.int64), values=v, default_value=d, row_partition_tensors=[SPLITS],
    row_partition_types=["ROW_SPLITS"]), v=inp(values("any", (5,)), f64), d=inp(0.5, f64))
case("RaggedTensorToTensor", "f32_value_rowids", lambda v, d: R.RaggedTensorToTensor(
    shape=np.array([3, 2, 2], np.int64), values=v, default_value=d,
    row_partition_tensors=[np.int64(3), np.array([0, 0, 2, 2, 2], np.int64)],
    row_partition_types=["FIRST_DIM_SIZE", "VALUE_ROWIDS"]), v=inp(values("any", (5, 2)), f32), d=inp(0.0, f32),
     note="rows longer than the shape are truncated")
case("RaggedTensorToSparse", "f64", lambda v: R.RaggedTensorToSparse(rt_nested_splits=[SPLITS], rt_dense_values=v)[1],
     v=inp(values("any", (5,)), f64))
case("RaggedTensorToVariant", "f64_roundtrip", lambda v: R.RaggedTensorFromVariant(
    encoded_ragged=R.RaggedTensorToVariant(rt_nested_splits=[SPLITS], rt_dense_values=v, batched_input=True),
    input_ragged_rank=0, output_ragged_rank=1, Tvalues=f64)[1], v=inp(values("any", (5, 2)), f64),
     covers=("RaggedTensorFromVariant",))
SPLITS2 = (np.array([0, 2, 3], np.int64), np.array([0, 1, 1, 4], np.int64))    # 2 rows of 2 and 1 lists, 4 values
case("RaggedTensorToVariant", "f64_unbatched_ragged_rank2", lambda v: R.RaggedTensorFromVariant(
    encoded_ragged=R.RaggedTensorToVariant(rt_nested_splits=list(SPLITS2), rt_dense_values=v, batched_input=False),
    input_ragged_rank=2, output_ragged_rank=2, Tvalues=f64)[1] * 3.0, v=inp(values("any", (4, 2)), f64),
     covers=("RaggedTensorFromVariant",))
case("RaggedTensorFromVariant", "f32_batched_ragged_rank2", lambda v: R.RaggedTensorFromVariant(
    encoded_ragged=R.RaggedTensorToVariant(rt_nested_splits=list(SPLITS2), rt_dense_values=v, batched_input=True),
    input_ragged_rank=1, output_ragged_rank=2, Tvalues=f32)[1], v=inp(values("any", (4,)), f32),
     covers=("RaggedTensorToVariant",), note="each row is encoded as a ragged tensor of ragged rank 1 and stacked back")
case("RaggedFillEmptyRows", "f64", lambda v, d: R.RaggedFillEmptyRows(
    value_rowids=np.array([0, 0, 2], np.int64), values=v, nrows=np.int64(4), default_value=d)[1],
     v=inp(values("any", (3,)), f64), d=inp(-1.0, f64))

# -- composite-tensor variants -----------------------------------------------------------------------------------------
from tensorflow.python.ops import composite_tensor_ops  # noqa: E402


def _composite_roundtrip(v):
    rt = tf.RaggedTensor.from_row_splits(v, SPLITS)
    encoded = composite_tensor_ops.composite_tensor_to_variants(rt)
    return composite_tensor_ops.composite_tensor_from_variant(encoded, rt._type_spec).flat_values * 2.0


case("CompositeTensorVariantFromComponents", "ragged_roundtrip", _composite_roundtrip, v=inp(values("any", (5,)), f64),
     covers=("CompositeTensorVariantToComponents",))

# -- reference-typed (TF1 VariableV2) tensors --------------------------------------------------------------------------


def _ref_variable(dt):
    v = tf1.Variable(values("any", (3, 4), "ref").astype(dt.as_numpy_dtype), use_resource=False, name="ref")
    return v._ref()     # the ref-typed output of VariableV2, as TF1 graphs consume it


case("RefIdentity", "f64",
     lambda x: (lambda ref: {"ys": [R.RefIdentity(input=ref) * x], "xs": [ref]})(_ref_variable(f64)),
     x=inp(values("any", (3, 4)), f64))
for label, pred in (("true", True), ("false", False)):
    case("RefSwitch", label,
         lambda x, p: (lambda ref: {"ys": [R.RefMerge(inputs=list(R.RefSwitch(data=ref, pred=p)))[0] * x],
                                                        "xs": [ref]})(_ref_variable(f64)),
         x=inp(values("any", (3, 4)), f64), p=inp(pred, tf.bool), covers=("RefMerge",))
