"""SinCos (sine and cosine of x, two outputs) and Heaviside (the unit step, NotDifferentiable):
a third-party plugin that tests/test_third_party_plugin.py pip-installs and checks with
``pytest --gradreg-check gradreg-sincos``; it must pass."""
from __future__ import annotations

import numpy as np

from gradreg.plugin import OpFamily, apply_op, shape_fns

family = OpFamily("sincos")

family.op("SinCos", inputs=["x: T"], outputs=["sin: T", "cos: T"], attrs=["T: {float16, float32, float64}"],
          shape=lambda ctx: [ctx.input_shape(0), ctx.input_shape(0)], api="sincos")
family.simple_kernel("SinCos", lambda x: (np.sin(x), np.cos(x)))


@family.gradient("SinCos")
def _sincos_grad(op, grad_sin, grad_cos):
    x = op.inputs[0]
    return grad_sin * apply_op("Cos", x) - grad_cos * apply_op("Sin", x)


family.case("SinCos", [2, 3], domain=(-3.0, 3.0))

family.op("Heaviside", inputs=["x: T"], outputs=["y: T"], attrs=["T: {float32, float64}"],
          shape=shape_fns.unchanged, api="heaviside")
family.simple_kernel("Heaviside", lambda x: (x > 0).astype(x.dtype))
family.not_differentiable("Heaviside")
