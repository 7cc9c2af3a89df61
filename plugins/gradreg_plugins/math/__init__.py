"""The math op family: elementwise arithmetic and functions, comparisons, reductions,
matrix products, casts, sequences, segment reductions, linear algebra, FFTs, special
functions, and the random-number builders (random_uniform, ...; the random ops themselves
belong to the random family). Owns each op's definition, NumPy kernel, shape function,
builders and gradient rule.

The gradients are TensorFlow's values except where TensorFlow's are wrong or missing; every
departure, each explained in the docstring of the module named (and in docs/tensorflow.md):

* TensorFlow forgets a conjugate for complex inputs: Cumprod, MatrixDeterminant, MulNoNan,
  Xlogy, Xlog1py, Xdivy (grads); MatrixSquareRoot, TridiagonalSolve, MatrixSolveLs (linalg_grads).
* TensorFlow uses the whole complex cotangent of a real-valued output: SquaredDifference,
  EuclideanNorm (grads); LogMatrixDeterminant (also ignoring the sign's cotangent), the
  singular values of Svd (linalg_grads).
* TensorFlow divides by zero: Cumprod where x is 0 (grads); BesselI1 at 0 (special).
* TensorFlow has no gradient where the function has one: Mod, TruncateMod, Einsum of three or
  more operands (grads); MatrixSolveLs with fast=False, Svd with unknown matrix dims
  (linalg_grads); Betainc w.r.t. a and b, Zeta w.r.t. x (special); RFFT/IRFFT with a cropping
  fft_length, RFFT3D/IRFFT3D (fft); the SparseSegment*Grad ops (segments).
* A convention, not a bug: Cholesky and SelfAdjointEigV2 read the lower triangle of an input
  they take to be Hermitian. For a free input the default gives TensorFlow's gradients (the
  Hermitian 1/2 (G + G^H) for Cholesky and so logdet, which JAX and PyTorch give too; the
  lower-triangle fold for SelfAdjointEigV2, where JAX and PyTorch give 1/2 (G + G^H));
  ``gradients(symmetric_inputs="symmetric" | "folded")`` chooses otherwise (linalg_grads).
"""
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

# The modules other families may import (tests/test_architecture.py holds every other module private
# to this family): blas and linalg_kernels: the BLAS products and their thread sizing training's
# updates use; numba_kernels: the compiled scatter-add array's numba kernels share.
public_modules = ("blas", "linalg_kernels", "numba_kernels")

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
