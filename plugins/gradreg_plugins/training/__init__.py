"""The training op family: variables (ref-style VariableV2/Assign*, resource-style
VarHandleOp/ReadVariableOp/AssignVariableOp/...), scatter updates, and the optimizer
apply ops (ApplyGradientDescent, ResourceApplyAdam, ResourceSparseApplyAdagrad, ...).
Variable values live in the Session (gradreg.runtime.state)."""
from gradreg.plugin import OpFamily

# Modules of kernels and of gradient rules only: imported when a kernel or rule table is first read.
family = OpFamily(
    "training", lazy_kernels={"numba": "gradreg_plugins.training.numba_kernels"},
    kernel_modules=["gradreg_plugins.training.kernels"],
    gradient_modules=["gradreg_plugins.training.grads"],
)

from gradreg_plugins.training import checkpoint_ops, nd_updates, ops  # noqa: E402,F401  (they fill the family's tables)
