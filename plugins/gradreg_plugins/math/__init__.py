"""The math op family: elementwise arithmetic and functions, comparisons, reductions,
matrix products, casts, sequences, segment reductions, and the random-number builders
(random_uniform, ...; the random ops themselves belong to the random family). Owns each
op's definition, NumPy kernel, shape function and builders."""
from gradreg.plugin import OpFamily

# Modules of kernels and of gradient rules only: imported when a kernel or rule table is first read.
family = OpFamily(
    "math", lazy_kernels={"numba": "gradreg_plugins.math.numba_kernels"},
    kernel_modules=[
        "gradreg_plugins.math.generate_kernels",
        "gradreg_plugins.math.kernels",
        "gradreg_plugins.math.linalg_kernels",
        "gradreg_plugins.math.reduce_kernels",
    ],
    gradient_modules=["gradreg_plugins.math.grads", "gradreg_plugins.math.linalg_grads"],
)

from gradreg_plugins.math import (  # noqa: E402,F401  (they fill the family's tables)
    api,
    fft,
    integer_ops,
    linalg,
    misc_ops,
    namespaces,
    ops,
    segments,
    special,
)
