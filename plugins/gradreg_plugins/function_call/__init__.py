"""The function-call op family: PartitionedCall, StatefulPartitionedCall, SymbolicGradient,
and nodes whose op type is the name of a library function. Owns their definitions,
kernels (which run the function bodies as compiled plans) and gradient rules."""
from gradreg.plugin import OpFamily

# Modules of kernels and of gradient rules only: imported when a kernel or rule table is first read.
family = OpFamily(
    "function_call",
    kernel_modules=["gradreg_plugins.function_call.kernels"],
    gradient_modules=["gradreg_plugins.function_call.grads"],
)

from gradreg_plugins.function_call import ops  # noqa: E402,F401  (they fill the family's tables)
