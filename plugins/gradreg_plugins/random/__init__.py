"""The random op family: TensorFlow's stateless random ops (StatelessRandomUniform, ...V2,
StatelessRandomGetKeyCounter, ...) and its seeded stateful ones (RandomUniform,
RandomStandardNormal, TruncatedNormal, RandomUniformInt), producing TensorFlow's CPU values
bit for bit from a vectorized NumPy Philox4x32-10 (philox.py) and TensorFlow's conversions
(distributions.py, libm.py); gamma samples (gamma.py) and StatelessParameterizedTruncatedNormal
(truncated.py), differentiable in their parameters. Owns each op's definition, kernel, shape function and gradient
rule."""
from gradreg.plugin import OpFamily

# Modules of kernels and of gradient rules only: imported when a kernel or rule table is first read.
family = OpFamily(
    "random",
    kernel_modules=["gradreg_plugins.random.kernels"],
    gradient_modules=["gradreg_plugins.random.grads"],
)

# The modules other families may import (tests/test_architecture.py holds every other module private
# to this family): philox: the counter-based generator nn's fractional pooling draws from.
public_modules = ("philox",)

from gradreg_plugins.random import ops  # noqa: E402,F401  (they fill the family's tables)
