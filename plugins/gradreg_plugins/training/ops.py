"""Variable and optimizer op definitions and shape functions."""
from __future__ import annotations

from gradreg.errors import ShapeError
from gradreg.model import shape_fns as sf
from gradreg.model.shapes import TensorShape
from gradreg_plugins.training import family

op = family.op

_NUMBER = ("{float32, float64, int32, uint8, int16, int8, complex64, int64, qint8, quint8, qint32, bfloat16, "
           "qint16, quint16, uint16, complex128, float16, uint32, uint64}")
_INDICES = "Tindices: {int32, int64}"
_REAL = "{float16, bfloat16, float32, float64, int32, int64}"   # ScatterMax / ScatterMin


def variable_shape_of(t) -> TensorShape:
    """The declared shape of the variable behind a resource handle or ref (through Enter/Identity)."""
    op_ = t.op
    while op_.type in ("Identity", "Enter", "RefEnter", "RefIdentity") and op_.inputs:
        op_ = op_.inputs[0].op
    if op_.type in ("VarHandleOp", "VariableV2"):
        return op_.get_attr("shape")
    return t.shape if t.dtype is not None and t.dtype.is_ref else TensorShape(None)


# -- ref-style variables -------------------------------------------------------------------

op("VariableV2", outputs=["ref: Ref(dtype)"],
   attrs=["shape: shape", "dtype: type", "container: string = ''", "shared_name: string = ''"],
   shape=lambda ctx: ctx.attr("shape"), stateful=True)
op("Assign", inputs=["ref: Ref(T)", "value: T"], outputs=["output_ref: Ref(T)"],
   attrs=["T: type", "validate_shape: bool = true", "use_locking: bool = true"],
   shape=lambda ctx: ctx.input_shape(1) if not ctx.attr("validate_shape") else ctx.input_shape(0),
   allows_uninitialized_input=True)
for _name in ("AssignAdd", "AssignSub"):
    op(_name, inputs=["ref: Ref(T)", "value: T"], outputs=["output_ref: Ref(T)"],
       attrs=[f"T: {_NUMBER}", "use_locking: bool = false"], shape=sf.unchanged)
op("IsVariableInitialized", inputs=["ref: Ref(dtype)"], outputs=["is_initialized: bool"], attrs=["dtype: type"],
   shape=sf.scalar, allows_uninitialized_input=True)
for _name, _attrs in (("ScatterAdd", [f"T: {_NUMBER}", _INDICES, "use_locking: bool = false"]),
                      ("ScatterSub", [f"T: {_NUMBER}", _INDICES, "use_locking: bool = false"]),
                      ("ScatterUpdate", ["T: type", _INDICES, "use_locking: bool = true"]),
                      ("ScatterMul", [f"T: {_NUMBER}", _INDICES, "use_locking: bool = false"]),
                      ("ScatterDiv", [f"T: {_NUMBER}", _INDICES, "use_locking: bool = false"]),
                      ("ScatterMax", [f"T: {_REAL}", _INDICES, "use_locking: bool = false"]),
                      ("ScatterMin", [f"T: {_REAL}", _INDICES, "use_locking: bool = false"])):
    op(_name, inputs=["ref: Ref(T)", "indices: Tindices", "updates: T"], outputs=["output_ref: Ref(T)"],
       attrs=_attrs, shape=sf.unchanged)

# -- resource variables ---------------------------------------------------------------------

op("VarHandleOp", outputs=["resource: resource"],
   attrs=["container: string = ''", "shared_name: string = ''", "debug_name: string = ''", "dtype: type",
          "shape: shape", "allowed_devices: list(string) = []"], shape=sf.scalar, stateful=True)
op("ReadVariableOp", inputs=["resource: resource"], outputs=["value: dtype"], attrs=["dtype: type"],
   shape=lambda ctx: variable_shape_of(ctx.op.inputs[0]), stateful=True)
op("AssignVariableOp", inputs=["resource: resource", "value: dtype"],
   attrs=["dtype: type", "validate_shape: bool = false"], stateful=True)
op("AssignAddVariableOp", inputs=["resource: resource", "value: dtype"], attrs=["dtype: type"], stateful=True)
op("AssignSubVariableOp", inputs=["resource: resource", "value: dtype"], attrs=["dtype: type"], stateful=True)
op("VarIsInitializedOp", inputs=["resource: resource"], outputs=["is_initialized: bool"], shape=sf.scalar,
   stateful=True)
op("VariableShape", inputs=["input: resource"], outputs=["output: out_type"],
   attrs=["out_type: {int32, int64} = int32"],
   shape=lambda ctx: TensorShape([variable_shape_of(ctx.op.inputs[0]).rank]), stateful=True)
op("DestroyResourceOp", inputs=["resource: resource"], attrs=["ignore_lookup_error: bool = true"], stateful=True)


def _resource_gather_shape(ctx):
    params = variable_shape_of(ctx.op.inputs[0])
    batch_dims = ctx.attr("batch_dims")
    if params.rank is None:
        return TensorShape(None)
    return ctx.input_shape(1).concatenate(params[batch_dims + 1:])


op("ResourceGather", inputs=["resource: resource", "indices: Tindices"], outputs=["output: dtype"],
   attrs=["batch_dims: int = 0", "validate_indices: bool = true", "dtype: type", _INDICES],
   shape=_resource_gather_shape, stateful=True)
for _name, _attrs in (("ResourceScatterAdd", [f"dtype: {_NUMBER}", _INDICES]),
                      ("ResourceScatterSub", [f"dtype: {_NUMBER}", _INDICES]),
                      ("ResourceScatterUpdate", ["dtype: type", _INDICES]),
                      ("ResourceScatterMul", [f"dtype: {_NUMBER}", _INDICES]),
                      ("ResourceScatterDiv", [f"dtype: {_NUMBER}", _INDICES]),
                      ("ResourceScatterMax", [f"dtype: {_NUMBER}", _INDICES]),
                      ("ResourceScatterMin", [f"dtype: {_NUMBER}", _INDICES])):
    op(_name, inputs=["resource: resource", "indices: Tindices", "updates: dtype"], attrs=_attrs, stateful=True)

# -- optimizer apply ops -----------------------------------------------------------------------
#
# Each update rule exists as a ref op (Apply*, variables as Ref(T), returning the variable) and a
# resource op (ResourceApply*, variables as handles, no output); the sparse forms take rows of a
# gradient and the indices of the rows they update. Inputs other than the variables, the
# gradient and the indices are scalars of type T.

_GRADIENTS = ("grad", "delta")


def _apply_shape(num_variables: int, sparse: bool):
    """A ref apply op's shape function: the variables (and a dense gradient) share one shape,
    the hyperparameters are scalars, a sparse gradient has one row per index."""
    def shape(ctx):
        names = [a.name for a in ctx.op.definition.input_args]
        var = ctx.input_shape(0)
        for i in range(1, num_variables):
            var = _merge(ctx, var, ctx.input_shape(i), f"var and {names[i]} do not have the same shape")
        for i, name in enumerate(names[num_variables:], num_variables):
            if name not in _GRADIENTS and name != "indices" and ctx.input_shape(i).rank not in (None, 0):
                raise ctx.error(f"{name} is not a scalar: {ctx.input_shape(i)}")
        grad_name = "grad" if "grad" in names else "delta"
        grad = ctx.input_shape(names.index(grad_name))
        if not sparse:
            return _merge(ctx, var, grad, f"var and {grad_name} do not have the same shape")
        indices = ctx.input_shape(names.index("indices"))
        if indices.rank not in (None, 1):
            raise ctx.error(f"indices must be one-dimensional, not {indices}")
        if grad.rank == 0 or var.rank == 0:
            raise ctx.error("var and grad must be at least 1-dimensional")
        _merge(ctx, grad[:1], indices, "grad must be the same size as indices in the first dimension")
        _merge(ctx, grad[1:], var[1:], "var and grad do not match in the dimensions after the first")
        return var
    return shape


def _merge(ctx, a: TensorShape, b: TensorShape, message: str) -> TensorShape:
    try:
        return a.merge_with(b)
    except ShapeError:
        raise ctx.error(f"{message}: {a} vs {b}") from None


def _apply_ops(name: str, variables: list[str], others: list[str], attrs: tuple[str, ...] = (),
               absorbs: tuple[str, ...] = ()) -> None:
    """Define ``name`` (ref variables) and ``Resource<name>`` (resource handles); ``absorbs``:
    the inputs whose product the kernel may accumulate into the variable itself
    (gradreg.registry.kernels.Absorbing)."""
    sparse = "indices" in others
    all_attrs = [f"T: {_NUMBER}"] + ([_INDICES] if sparse else []) + ["use_locking: bool = false", *attrs]
    data = ["indices: Tindices" if n == "indices" else f"{n}: T" for n in others]
    op(name, inputs=[f"{v}: Ref(T)" for v in variables] + data, outputs=["out: Ref(T)"], attrs=all_attrs,
       shape=_apply_shape(len(variables), sparse), absorbs=absorbs)
    op("Resource" + name, inputs=[f"{v}: resource" for v in variables] + data, attrs=all_attrs, stateful=True,
       absorbs=absorbs)


_NESTEROV = ("use_nesterov: bool = false",)
_UPDATE_SLOTS = ("update_slots: bool = true",)

_apply_ops("ApplyGradientDescent", ["var"], ["alpha", "delta"], absorbs=("delta",))
_apply_ops("ApplyMomentum", ["var", "accum"], ["lr", "grad", "momentum"], _NESTEROV)
_apply_ops("ApplyAdam", ["var", "m", "v"],
           ["beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "grad"], _NESTEROV)
_apply_ops("ApplyAdagrad", ["var", "accum"], ["lr", "grad"], _UPDATE_SLOTS)
_apply_ops("ApplyRMSProp", ["var", "ms", "mom"], ["lr", "rho", "momentum", "epsilon", "grad"])
_apply_ops("ApplyCenteredRMSProp", ["var", "mg", "ms", "mom"], ["lr", "rho", "momentum", "epsilon", "grad"])
_apply_ops("SparseApplyMomentum", ["var", "accum"], ["lr", "grad", "indices", "momentum"], _NESTEROV)
_apply_ops("SparseApplyAdagrad", ["var", "accum"], ["lr", "grad", "indices"], _UPDATE_SLOTS)
_apply_ops("SparseApplyRMSProp", ["var", "ms", "mom"], ["lr", "rho", "momentum", "epsilon", "grad", "indices"])
_apply_ops("SparseApplyCenteredRMSProp", ["var", "mg", "ms", "mom"],
           ["lr", "rho", "momentum", "epsilon", "grad", "indices"])
