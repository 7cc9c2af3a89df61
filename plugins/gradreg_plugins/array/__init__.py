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

# The modules other families may import (tests/test_architecture.py holds every other module private
# to this family): kernels: gather, gather_nd, scatter_nd_into for training's updates; slicing: which
# rows a StridedSlice reads.
public_modules = ("kernels", "slicing")

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
