"""Simulated quantization: FakeQuantWithMinMaxArgs / Vars / VarsPerChannel with their gradient ops,
QuantizeAndDequantize (V1 to V4) and QuantizeAndDequantizeV4Grad — definitions, shape functions,
NumPy kernels and rules.

The forward ops round to a grid (TensorFlow's nudged grids and clamping, in float32 for
FakeQuant). Their gradients are TensorFlow's straight-through estimators, on purpose not the
derivative of the rounding (zero almost everywhere): the incoming gradient passes where the
input lies inside the quantization range; FakeQuant's min and max receive the gradients of the
inputs clamped below and above it; QuantizeAndDequantizeV2/V3 pass everything through. The
sweep's finite-difference check flags these cases, as expected of quantizers.

Beyond TensorFlow: QuantizeAndDequantizeV4Grad and the FakeQuant gradient ops have rules (masks
linear in the incoming gradient; TensorFlow's rule for the first has the wrong signature, it has
none for the others).
"""
from __future__ import annotations

import numpy as np

from gradreg.build.builders import apply_op
from gradreg.model.shapes import TensorShape
from gradreg_plugins.nn import family
from gradreg_plugins.nn.kernels import kernel, node_error
from gradreg_plugins.nn.windows import text

op = family.op
F32 = np.float32


# -- FakeQuant -----------------------------------------------------------------------------------------

def _quant_bounds(op) -> tuple[int, int]:
    bits, narrow = op.get_attr("num_bits"), op.get_attr("narrow_range")
    if not 2 <= bits <= 16:
        raise node_error(op, f"num_bits is out of range, expected between 2 and 16, was: {bits}")
    return (1 if narrow else 0), (1 << bits) - 1


def nudge(low, high, quant_min: int, quant_max: int):
    """TensorFlow's nudged (min, max, scale): the grid moved so that 0 falls on it. ``low`` and
    ``high`` are float32 scalars or vectors."""
    low, high = np.asarray(low, F32), np.asarray(high, F32)
    scale = (high - low) / F32(quant_max - quant_min)
    with np.errstate(divide="ignore", invalid="ignore"):
        zero_from_min = F32(quant_min) - low / scale
    zero = np.where(zero_from_min < quant_min, F32(quant_min),
                    np.where(zero_from_min > quant_max, F32(quant_max), np.floor(zero_from_min + F32(0.5))))
    return (F32(quant_min) - zero) * scale, (F32(quant_max) - zero) * scale, scale


def fake_quant(x, low, high, bounds, multiply_inverse: bool = False):
    nudged_min, nudged_max, scale = nudge(low, high, *bounds)
    shifted = np.minimum(np.maximum(x, nudged_min), nudged_max) - nudged_min
    steps = shifted * (F32(1) / scale) if multiply_inverse else shifted / scale
    return (np.floor(steps + F32(0.5)) * scale + nudged_min).astype(F32)


def _check_min_max(low, high) -> None:
    if np.any(np.asarray(low) > np.asarray(high)):
        raise ValueError(f"min has to be smaller than max, was: min={np.asarray(low).tolist()}, "
                         f"max={np.asarray(high).tolist()}")


@kernel("FakeQuantWithMinMaxArgs")
def _fake_quant_args(op, ctx):
    bounds = _quant_bounds(op)
    low, high = op.get_attr("min"), op.get_attr("max")
    if low >= high:
        raise node_error(op, f"min has to be smaller than max, was: min={low}, max={high}")
    return lambda x: fake_quant(x, low, high, bounds, multiply_inverse=True)


@kernel("FakeQuantWithMinMaxArgsGradient")
def _fake_quant_args_gradient(op, ctx):
    bounds = _quant_bounds(op)
    nudged_min, nudged_max, _ = nudge(op.get_attr("min"), op.get_attr("max"), *bounds)

    def compute(g, x):
        if g.shape != x.shape:
            raise ValueError(f"gradients and inputs must have the same shape, got {list(g.shape)} and {list(x.shape)}")
        return np.where((x >= nudged_min) & (x <= nudged_max), g, F32(0)).astype(F32)
    return compute


def _per_channel_args(x, low, high, per_channel: bool):
    if per_channel:
        if x.ndim < 1 or low.shape != (x.shape[-1],) or high.shape != (x.shape[-1],):
            raise ValueError(f"min and max must be vectors of the inputs' last dimension ({x.shape[-1:]}), got "
                             f"shapes {list(low.shape)} and {list(high.shape)}")
    elif np.ndim(low) != 0 or np.ndim(high) != 0:
        raise ValueError(f"min and max must be scalars, got shapes {list(np.shape(low))} and {list(np.shape(high))}")
    _check_min_max(low, high)


@kernel("FakeQuantWithMinMaxVars")
@kernel("FakeQuantWithMinMaxVarsPerChannel")
def _fake_quant_vars(op, ctx):
    bounds = _quant_bounds(op)
    per_channel = op.type.endswith("PerChannel")

    def compute(x, low, high):
        _per_channel_args(x, low, high, per_channel)
        return fake_quant(x, low, high, bounds)
    return compute


@kernel("FakeQuantWithMinMaxVarsGradient")
@kernel("FakeQuantWithMinMaxVarsPerChannelGradient")
def _fake_quant_vars_gradient(op, ctx):
    bounds = _quant_bounds(op)
    per_channel = op.type.endswith("PerChannelGradient")

    def compute(g, x, low, high):
        _per_channel_args(x, low, high, per_channel)
        if g.shape != x.shape:
            raise ValueError(f"gradients and inputs must have the same shape, got {list(g.shape)} and {list(x.shape)}")
        nudged_min, nudged_max, _ = nudge(low, high, *bounds)
        axes = tuple(range(x.ndim - 1)) if per_channel else None
        below, above = x < nudged_min, x > nudged_max
        d_x = np.where(below | above, F32(0), g).astype(F32)
        return (d_x, np.sum(np.where(below, g, F32(0)), axis=axes, dtype=F32),
                np.sum(np.where(above, g, F32(0)), axis=axes, dtype=F32))
    return compute


_QUANT_ATTRS = ["num_bits: int = 8", "narrow_range: bool = false"]
_ARGS_ATTRS = ["min: float = -6.0", "max: float = 6.0"] + _QUANT_ATTRS


def _vars_gradient_shape(ctx):
    per_channel = ctx.op.type.endswith("PerChannelGradient")
    x = ctx.input_shape(1)
    vector = TensorShape([x[-1] if x.rank else None]) if per_channel else TensorShape([])
    return [x, vector, vector]


op("FakeQuantWithMinMaxArgs", inputs=["inputs: float32"], outputs=["outputs: float32"], attrs=_ARGS_ATTRS,
   shape=lambda ctx: ctx.input_shape(0))
op("FakeQuantWithMinMaxArgsGradient", inputs=["gradients: float32", "inputs: float32"], outputs=["backprops: float32"],
   attrs=_ARGS_ATTRS, shape=lambda ctx: ctx.input_shape(0).merge_with(ctx.input_shape(1)), linear=True)
for _name in ("FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel"):
    op(_name, inputs=["inputs: float32", "min: float32", "max: float32"], outputs=["outputs: float32"],
       attrs=_QUANT_ATTRS, shape=lambda ctx: ctx.input_shape(0))
    op(_name + "Gradient", inputs=["gradients: float32", "inputs: float32", "min: float32", "max: float32"],
       outputs=["backprops_wrt_input: float32", "backprop_wrt_min: float32", "backprop_wrt_max: float32"],
       attrs=_QUANT_ATTRS, shape=_vars_gradient_shape)


@family.gradient("FakeQuantWithMinMaxArgs")
def _fake_quant_args_grad(op, grad):
    attrs = {name: op.get_attr(name) for name in ("min", "max", "num_bits", "narrow_range")}
    return apply_op("FakeQuantWithMinMaxArgsGradient", grad, op.inputs[0], **attrs)


@family.gradient("FakeQuantWithMinMaxArgsGradient")
def _fake_quant_args_gradient_grad(op, grad):
    # g * mask(x): linear in g with itself as adjoint; the mask is constant in x a.e.
    attrs = {name: op.get_attr(name) for name in ("min", "max", "num_bits", "narrow_range")}
    return apply_op("FakeQuantWithMinMaxArgsGradient", grad, op.inputs[1], **attrs), apply_op("ZerosLike", op.inputs[1])


def _fake_quant_vars_grad(op, grad):
    attrs = {name: op.get_attr(name) for name in ("num_bits", "narrow_range")}
    return tuple(apply_op(op.type + "Gradient", grad, *op.inputs, **attrs))


family.gradient("FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel")(_fake_quant_vars_grad)


# -- QuantizeAndDequantize -------------------------------------------------------------------------------

def quantization_range(low, high, signed: bool, bits: int, narrow: bool, dtype):
    """TensorFlow's ComputeQuantizationRange in ``dtype``: the (min, max, scale, inverse scale)
    that keep 0 on the grid and the range within [min_quantized, max_quantized] (per channel
    when vectors)."""
    low, high = np.asarray(low, dtype), np.asarray(high, dtype)
    if signed:
        q_min, q_max = -(1 << (bits - 1)) + (1 if narrow else 0), (1 << (bits - 1)) - 1
    else:
        q_min, q_max = 0, (1 << bits) - 1
    t_min, t_max = dtype(q_min), dtype(q_max)
    huge = np.finfo(dtype).max
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        from_min = np.where(t_min * low > 0, t_min / low, huge)
        from_max = np.where(t_max * high > 0, t_max / high, huge)
        use_min = from_min < from_max
        inverse = np.where(use_min, low / t_min, high / t_max)
        return (np.where(use_min, low, t_min * inverse), np.where(use_min, t_max * inverse, high),
                np.where(use_min, from_min, from_max), inverse)


def quantize_and_dequantize(x, low, high, *, signed, bits, range_given, narrow, half_up, axis):
    dtype = x.dtype.type
    if axis == -1:
        moved = x.reshape(1, -1, 1)
        if not range_given:
            low, high = np.min(x, initial=np.inf), np.max(x, initial=-np.inf)
    else:
        if not -x.ndim <= axis < x.ndim:
            raise ValueError(f"axis {axis} is out of range for input of rank {x.ndim}")
        axis %= x.ndim
        moved = x.reshape(int(np.prod(x.shape[:axis])), x.shape[axis], -1)
        if not range_given:
            low, high = moved.min(axis=(0, 2), initial=np.inf), moved.max(axis=(0, 2), initial=-np.inf)
    low, high = np.asarray(low).reshape(-1), np.asarray(high).reshape(-1)
    if range_given and np.any(low > high):
        raise ValueError(f"Invalid range: input_min {low.tolist()} > input_max {high.tolist()}")
    low, high, scale, inverse = (np.reshape(v, (1, -1, 1))
                                 for v in quantization_range(low, high, signed, bits, narrow, dtype))
    values = np.minimum(np.maximum(moved, low), high) if range_given else moved
    scaled = values * scale
    rounded = np.floor(scaled + dtype(0.5)) if half_up else np.rint(scaled)
    return (rounded * inverse).astype(x.dtype).reshape(x.shape)


def _q_and_dq_kernel(op, ctx):
    signed, range_given = bool(op.get_attr("signed_input")), bool(op.get_attr("range_given"))
    narrow = bool(op.get_attr("narrow_range")) if op.has_attr("narrow_range") else False
    half_up = op.has_attr("round_mode") and text(op.get_attr("round_mode")) == "HALF_UP"
    axis = op.get_attr("axis") if op.has_attr("axis") else -1
    fixed_bits = op.get_attr("num_bits") if op.has_attr("num_bits") else None

    def compute(x, low=None, high=None, num_bits=None):
        if op.type == "QuantizeAndDequantize":
            low, high = op.get_attr("input_min"), op.get_attr("input_max")
        bits = fixed_bits if num_bits is None else int(num_bits)
        limit = 63 if signed else 62
        if not 0 < bits <= limit or (signed and bits < 2):
            raise ValueError(f"num_bits is out of range: {bits}")
        return quantize_and_dequantize(x, low, high, signed=signed, bits=bits, range_given=range_given,
                                       narrow=narrow, half_up=half_up, axis=axis)
    return compute


for _name in ("QuantizeAndDequantize", "QuantizeAndDequantizeV2", "QuantizeAndDequantizeV3",
              "QuantizeAndDequantizeV4"):
    kernel(_name)(_q_and_dq_kernel)


@kernel("QuantizeAndDequantizeV4Grad")
def _q_and_dq_v4_grad(op, ctx):
    axis = op.get_attr("axis")

    def compute(g, x, low, high):
        if g.shape != x.shape:
            raise ValueError(f"gradients and input must have the same shape, got {list(g.shape)} and {list(x.shape)}")
        if axis == -1:
            inside = (x >= low) & (x <= high)
        else:
            shape = [1] * x.ndim
            shape[axis] = -1
            inside = (x >= np.reshape(low, shape)) & (x <= np.reshape(high, shape))
        return np.where(inside, g, x.dtype.type(0)), np.zeros_like(low), np.zeros_like(high)
    return compute


_QDQ_T = "T: {bfloat16, float16, float32, float64}"
_ROUND = "round_mode: {'HALF_TO_EVEN', 'HALF_UP'} = 'HALF_TO_EVEN'"
op("QuantizeAndDequantize", inputs=["input: T"], outputs=["output: T"],
   attrs=["signed_input: bool = true", "num_bits: int = 8", "range_given: bool = false", "input_min: float = 0.0",
          "input_max: float = 0.0", _QDQ_T], shape=lambda ctx: ctx.input_shape(0))
for _name in ("QuantizeAndDequantizeV2", "QuantizeAndDequantizeV4"):
    op(_name, inputs=["input: T", "input_min: T", "input_max: T"], outputs=["output: T"],
       attrs=["signed_input: bool = true", "num_bits: int = 8", "range_given: bool = false", _QDQ_T, _ROUND,
              "narrow_range: bool = false", "axis: int = -1"], shape=lambda ctx: ctx.input_shape(0))
op("QuantizeAndDequantizeV3", inputs=["input: T", "input_min: T", "input_max: T", "num_bits: int32"],
   outputs=["output: T"], attrs=["signed_input: bool = true", "range_given: bool = true", _QDQ_T,
                                 "narrow_range: bool = false", "axis: int = -1"], shape=lambda ctx: ctx.input_shape(0))
op("QuantizeAndDequantizeV4Grad", inputs=["gradients: T", "input: T", "input_min: T", "input_max: T"],
   outputs=["input_backprop: T", "input_min_backprop: T", "input_max_backprop: T"], attrs=[_QDQ_T, "axis: int = -1"],
   shape=lambda ctx: [ctx.input_shape(0), ctx.input_shape(2), ctx.input_shape(3)], linear=True)


@family.gradient("QuantizeAndDequantize")
def _q_and_dq_v1_grad(op, grad):
    return grad


@family.gradient("QuantizeAndDequantizeV2")
def _q_and_dq_v2_grad(op, grad):
    return grad, None, None


@family.gradient("QuantizeAndDequantizeV3")
def _q_and_dq_v3_grad(op, grad):
    return grad, None, None, None


@family.gradient("QuantizeAndDequantizeV4")
def _q_and_dq_v4_grad_rule(op, grad):
    return tuple(apply_op("QuantizeAndDequantizeV4Grad", grad, *op.inputs, axis=op.get_attr("axis")))


@family.gradient("QuantizeAndDequantizeV4Grad")
def _q_and_dq_v4_grad_grad(op, grad_input, _grad_min, _grad_max):
    # g * mask(input): linear in g, with itself as adjoint (TensorFlow's rule is broken).
    _, x, low, high = op.inputs
    masked = apply_op("QuantizeAndDequantizeV4Grad", grad_input, x, low, high, axis=op.get_attr("axis"))[0]
    return masked, apply_op("ZerosLike", x), None, None


def _fake_quant_vars_gradient_grad(op, grad_x, grad_min, grad_max):
    # The gradient op is linear in its incoming gradient g: dx = g inside the nudged range,
    # dmin / dmax = the sums of g below / above it. Its adjoint puts the upstream gradients of
    # dmin and dmax below and above the range and dx's inside. The nudged bounds are the forward
    # op's values at the extremes of float32. The masks are constant almost everywhere: the other
    # inputs get zeros. (TensorFlow has no rule.)
    g, x, low, high = op.inputs
    attrs = {name: op.get_attr(name) for name in ("num_bits", "narrow_range")}
    forward = op.type[:-len("Gradient")]
    extreme = np.finfo(np.float32).max

    def nudged(value):
        filled = apply_op("Fill", apply_op("Shape", low), np.float32(value))
        return apply_op(forward, filled, low, high, **attrs)
    below, above = x < nudged(-extreme), x > nudged(extreme)
    d_g = apply_op("SelectV2", below, grad_min, apply_op("SelectV2", above, grad_max, grad_x))
    return d_g, apply_op("ZerosLike", x), apply_op("ZerosLike", low), apply_op("ZerosLike", high)


family.gradient("FakeQuantWithMinMaxVarsGradient",
                "FakeQuantWithMinMaxVarsPerChannelGradient")(_fake_quant_vars_gradient_grad)
