"""The control-flow op family: v1 dataflow control flow (Switch, Merge, Enter, Exit,
NextIteration, LoopCond), the stacks TensorFlow's loop gradients use, TensorLists,
TensorArrays (tensor_arrays.py), Optionals, composite tensors as variants
(CompositeTensorVariantFrom/ToComponents), NoOp, ControlTrigger and Assert. The
interpreter compiles the v1 ops into Python loops and conditionals
(gradreg.runtime.control_flow); this family owns their definitions, shape functions, the
kernels of the others and the gradient rules."""
from gradreg.plugin import OpFamily

# Modules of kernels and of gradient rules only: imported when a kernel or rule table is first read.
family = OpFamily(
    "control_flow",
    kernel_modules=["gradreg_plugins.control_flow.kernels"],
    gradient_modules=["gradreg_plugins.control_flow.grads"],
)

from gradreg_plugins.control_flow import ops, tensor_arrays  # noqa: E402,F401  (they fill the family's tables)
