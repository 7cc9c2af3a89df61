"""Swish, as a third-party gradreg plugin: y = x * sigmoid(x).

The entry point ``swish = "gradreg_swish:family"`` (group ``gradreg.plugins``) makes gradreg
load this module; the OpFamily below implements gradreg's plugin hooks. gradreg's guide
docs/plugins.md builds this package step by step.
"""
from __future__ import annotations

import numpy as np

from gradreg.plugin import OpFamily, apply_op, shape_fns

__version__ = "0.1.0"

# The numba kernels live in their own module: gradreg imports it only when the numba backend runs.
family = OpFamily("swish", lazy_kernels={"numba": "gradreg_swish.numba_kernels"})


family.op(
    "Swish",
    inputs=["features: T"],
    outputs=["activations: T"],
    attrs=["T: {floattypes}"],
    shape=shape_fns.unchanged,
    api=("swish", "nn.swish"),
    summary="features * sigmoid(features), elementwise.",
)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Stable for large |x|: exp(-|x|) never overflows.
    z = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + z), z / (1 + z)).astype(x.dtype, copy=False)


@family.kernel("Swish")
def _swish_kernel(op, ctx):
    """Called once per node when a plan is compiled; returns what runs on every call."""
    return lambda x: x * _sigmoid(x)


@family.gradient("Swish")
def _swish_grad(op, grad):
    """d/dx x*s(x) = s + x*s*(1-s), from standard op types so TensorFlow can run the gradient."""
    x = op.inputs[0]
    s = apply_op("Sigmoid", x)
    return grad * (s + x * s * (1.0 - s))


# Where the plugin checker tries Swish: values on both sides of its minimum (near x = -1.28).
family.case("Swish", [2, 3], domain=(-4.0, 4.0))
