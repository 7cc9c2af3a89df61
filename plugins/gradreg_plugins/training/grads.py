"""Gradient rules of the training family: gradients reach variables through their reads."""
from __future__ import annotations

from gradreg.build.builders import apply_op
from gradreg.errors import GradientError
from gradreg.model.indexed_slices import IndexedSlices
from gradreg_plugins.training import family


@family.gradient("ReadVariableOp")
def _read_grad(op, grad):
    return grad


@family.gradient("ResourceGather")
def _resource_gather_grad(op, grad):
    """Sparse, as for Gather: the gathered rows' gradients at their indices."""
    handle, indices = op.inputs
    if op.get_attr("batch_dims"):
        raise GradientError(f"gradient of ResourceGather '{op.name}' with batch_dims > 0 is not supported")
    params_shape = apply_op("VariableShape", handle, out_type=indices.dtype.base_dtype)
    size = apply_op("ExpandDims", apply_op("Size", indices, out_type=indices.dtype.base_dtype), 0)
    values_shape = apply_op("ConcatV2", [size, apply_op("StridedSlice", params_shape, [1], [0], [1], end_mask=1)], 0)
    values = apply_op("Reshape", grad, values_shape)
    flat_indices = apply_op("Reshape", indices, size)
    return [IndexedSlices(values, flat_indices, params_shape), None]


family.not_differentiable(
    "VariableV2", "VarHandleOp", "Assign", "AssignAdd", "AssignSub", "IsVariableInitialized", "ScatterAdd",
    "ScatterSub", "ScatterUpdate", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
    "VarIsInitializedOp", "VariableShape", "DestroyResourceOp", "ResourceScatterAdd", "ResourceScatterSub",
    "ResourceScatterUpdate", "ScatterMul", "ScatterDiv", "ScatterMax", "ScatterMin", "ResourceScatterMul",
    "ResourceScatterDiv", "ResourceScatterMax", "ResourceScatterMin")

# The optimizer apply ops update variables; nothing differentiates through a training step.
family.not_differentiable(*(prefix + op_type
                            for op_type in ("ApplyGradientDescent", "ApplyMomentum", "ApplyAdam", "ApplyAdagrad",
                                            "ApplyRMSProp", "ApplyCenteredRMSProp", "SparseApplyMomentum",
                                            "SparseApplyAdagrad", "SparseApplyRMSProp", "SparseApplyCenteredRMSProp")
                            for prefix in ("", "Resource")))
