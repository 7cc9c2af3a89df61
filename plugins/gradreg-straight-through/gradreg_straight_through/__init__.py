"""Straight-through gradients of Round and Floor, as a gradreg plugin.

Round and Floor are piecewise constant: their derivative is zero wherever it exists, and gradreg's
math family (as TensorFlow) declares them not differentiable. Quantization-aware training uses
the straight-through estimator instead: the gradient passes through the op unchanged. This
package provides that rule for both op types and nothing else. gradreg's guide docs/plugins.md
builds it step by step.
"""
from __future__ import annotations

from gradreg.plugin import OpFamily

__version__ = "0.1.0"

# overrides: the gradients of these op types belong to gradreg's math family (which declares them
# not differentiable); this plugin replaces them on purpose.
family = OpFamily("straight_through", overrides=["Round", "Floor"])


@family.gradient("Round")
@family.gradient("Floor")
def _straight_through(op, grad):
    """d round(x) / dx taken as 1: the gradient of the output is the gradient of the input."""
    return grad


def _pass_through(x, dy):
    """What the rules must give, in NumPy: the output's gradient, unchanged."""
    return dy


# Where the plugin checker tries the rules (values across several steps of each function), and
# what they must give there: they are not the derivative, on purpose, so finite differences
# cannot judge them.
family.case("Round", [2, 3], domain=(-3.0, 3.0), vjp=_pass_through)
family.case("Floor", [2, 3], domain=(-3.0, 3.0), vjp=_pass_through)
