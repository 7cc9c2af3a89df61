"""Numba descriptions of the onnx family's elementwise ops (imported only when the numba
backend is first used): a scalar expression each, in gradreg.backends.numba's notation, so
chains of ONNX elementwise ops (a gradient's Mul-Sub-Mul, GELU's Erf-Add-Mul) fuse into one
compiled loop. Only float32/float64/bool nodes fuse; others run their NumPy kernels."""
from __future__ import annotations

from gradreg.kernel_support import elementwise
from gradreg_plugins.onnx import family


def describe(op_type: str, expr: str, cost: int = 1) -> None:
    family.kernel(f"onnx::{op_type}", backend="numba")(lambda op, ctx: elementwise(op, ctx, expr, cost=cost))


for _op_type, _expr in {
    "Neg": "-{0}", "Abs": "abs({0})", "Sqrt": "np.sqrt({0})", "Exp": "{exp}({0})", "Log": "{log}({0})",
    "Tanh": "{tanh}({0})", "Sin": "np.sin({0})", "Cos": "np.cos({0})", "Floor": "np.floor({0})",
    "Ceil": "np.ceil({0})", "Reciprocal": "{=1} / {0}", "Relu": "{maximum}({0}, {=0})",
    "Add": "{0} + {1}", "Sub": "{0} - {1}", "Mul": "{0} * {1}", "Div": "{0} / {1}",
    "Less": "{0} < {1}", "LessOrEqual": "{0} <= {1}", "Greater": "{0} > {1}", "GreaterOrEqual": "{0} >= {1}",
    "Equal": "{0} == {1}", "And": "{0} & {1}", "Or": "{0} | {1}", "Not": "not {0}",
    "Where": "{where}({0}, {1}, {2})",
}.items():
    describe(_op_type, _expr)

describe("Sigmoid", "{sigmoid}({0})", cost=8)
describe("Erf", "{erf}({0})", cost=3)
describe("Pow", "np.power({0}, {1})", cost=3)
