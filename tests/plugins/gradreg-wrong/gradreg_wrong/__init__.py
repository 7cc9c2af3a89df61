"""Cube (x ** 3) with a deliberately wrong gradient rule (2 x**2 instead of 3 x**2): a
third-party plugin that tests/test_third_party_plugin.py pip-installs; ``pytest --gradreg-check
gradreg-wrong`` must fail it, naming Cube, float64 and the largest error (max x**2)."""
from __future__ import annotations

from gradreg.plugin import OpFamily, shape_fns

family = OpFamily("wrong")

family.op("Cube", inputs=["x: T"], outputs=["y: T"], attrs=["T: {float32, float64}"], shape=shape_fns.unchanged,
          api="cube")
family.simple_kernel("Cube", lambda x: x * x * x)


@family.gradient("Cube")
def _cube_grad(op, grad):
    x = op.inputs[0]
    return grad * 2.0 * x * x      # wrong on purpose: d x**3 / dx is 3 x**2
