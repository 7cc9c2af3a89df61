"""The array op family: constants, placeholders, identities, shapes, reshaping, slicing,
joining, gathering and padding; the TPU collectives CrossReplicaSum and AllToAll on the one
replica an interpreter is (``replicas``). Owns each op's definition, NumPy kernel, shape function
and gradient rule."""
from gradreg.plugin import OpFamily

# Modules of kernels and of gradient rules only: imported when a kernel or rule table is first read.
family = OpFamily(
    "array", lazy_kernels={"numba": "gradreg_plugins.array.numba_kernels"},
    kernel_modules=["gradreg_plugins.array.kernels"],
    gradient_modules=["gradreg_plugins.array.grads"],
)

from gradreg_plugins.array import (  # noqa: E402,F401  (they fill the family's tables)
    api,
    counting,
    diagonals,
    image,
    namespaces,
    ops,
    reorder,
    replicas,
    stitch,
)
