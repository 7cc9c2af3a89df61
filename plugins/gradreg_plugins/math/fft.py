"""The FFT family: FFT, IFFT, FFT2D, IFFT2D, FFT3D, IFFT3D, RFFT, IRFFT, RFFT2D, IRFFT2D,
RFFT3D, IRFFT3D: definitions, kernels (numpy.fft) and gradient rules.

The complex transforms' rules are TensorFlow's: the adjoint of the unnormalized DFT is N times
the inverse DFT. The real transforms' rules are derived here rather than copied (TensorFlow's
RFFT rule is built for an fft_length equal to the input's size, and fails to build otherwise;
it has no rule for RFFT3D / IRFFT3D at all), for any fft_length and rank:

* RFFT crops the input to fft_length along the transformed dims (TensorFlow refuses an input
  shorter than fft_length: it never pads), takes the DFT, and keeps the last dim's
  frequencies 0..L//2. Its adjoint: the cotangent zero-extended to the full last dim, N times
  its inverse DFT (N = prod(fft_length)), real part (the input is real), then the adjoint of
  the crop (zeros padded back to the input's shape).
* IRFFT reads the input cropped to [L1, ..., L//2+1], completes the Hermitian spectrum and
  takes the inverse DFT, so each stored frequency but the first and the Nyquist one (even L)
  counts twice: the gradient is RFFT of the cotangent times w / N, w = 1, 2, ..., 2, 1
  (TensorFlow's mask), then padded back to the input's shape.

All numerically checked in tests/test_fft_grads.py, including the cropped cases TensorFlow
cannot differentiate.
"""
from __future__ import annotations

import numpy as np

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op, constant
from gradreg.model import dtypes
from gradreg.model.graph import Tensor
from gradreg.model.shape_inference import constant_value
from gradreg.model.shapes import TensorShape
from gradreg_plugins.math import family
from gradreg_plugins.math.kernels import kernel
from gradreg_plugins.rule_helpers import dense_gradients

_COMPLEX_ATTR = "Tcomplex: {complex64, complex128} = complex64"
_REAL_ATTR = "Treal: {float32, float64} = float32"

COMPLEX_TRANSFORMS = {"FFT": 1, "IFFT": 1, "FFT2D": 2, "IFFT2D": 2, "FFT3D": 3, "IFFT3D": 3}
REAL_TRANSFORMS = {"RFFT": 1, "RFFT2D": 2, "RFFT3D": 3}
INVERSE_REAL_TRANSFORMS = {"IRFFT": 1, "IRFFT2D": 2, "IRFFT3D": 3}
_INVERSE = {"FFT": "IFFT", "IFFT": "FFT", "FFT2D": "IFFT2D", "IFFT2D": "FFT2D", "FFT3D": "IFFT3D", "IFFT3D": "FFT3D"}
_COMPLEX_OF_RANK = {1: "FFT", 2: "FFT2D", 3: "FFT3D"}


# -- shapes -----------------------------------------------------------------------------------------

def _at_least(ctx, rank: int) -> TensorShape:
    shape = ctx.input_shape(0)
    if shape.rank is not None and shape.rank < rank:
        raise ctx.error(f"input must have rank at least {rank}, got shape {shape}")
    return shape


def _fft_lengths(ctx, rank: int) -> list[int | None]:
    lengths = ctx.input_shape(1)
    if lengths.rank not in (None, 1) or (lengths.rank == 1 and lengths.dims[0] not in (None, rank)):
        raise ctx.error(f"fft_length must be a vector of {rank} elements, got shape {lengths}")
    value = ctx.input_value(1)
    if value is None:
        return [None] * rank
    if np.any(np.asarray(value) < 0):
        raise ctx.error(f"fft_length must be non-negative, got {list(np.asarray(value))}")
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _real_transform_shape(ctx, rank: int, inverse: bool) -> TensorShape:
    shape = _at_least(ctx, rank)
    lengths = _fft_lengths(ctx, rank)
    if shape.rank is None:
        return TensorShape(None)
    last = lengths[-1]
    if not inverse:
        last = None if last is None else last // 2 + 1
    return shape[:-rank].concatenate(lengths[:-1] + [last])


for _name, _rank in COMPLEX_TRANSFORMS.items():
    family.op(_name, inputs=["input: Tcomplex"], outputs=["output: Tcomplex"], attrs=[_COMPLEX_ATTR],
              shape=lambda ctx, r=_rank: _at_least(ctx, r))
for _name, _rank in REAL_TRANSFORMS.items():
    family.op(_name, inputs=["input: Treal", "fft_length: int32"], outputs=["output: Tcomplex"],
              attrs=[_REAL_ATTR, _COMPLEX_ATTR], shape=lambda ctx, r=_rank: _real_transform_shape(ctx, r, False))
for _name, _rank in INVERSE_REAL_TRANSFORMS.items():
    family.op(_name, inputs=["input: Tcomplex", "fft_length: int32"], outputs=["output: Treal"],
              attrs=[_REAL_ATTR, _COMPLEX_ATTR], shape=lambda ctx, r=_rank: _real_transform_shape(ctx, r, True))


# -- kernels ----------------------------------------------------------------------------------------

def _check_rank(x: np.ndarray, rank: int) -> tuple[int, ...]:
    if x.ndim < rank:
        raise ValueError(f"input must have rank at least {rank}, got shape {list(x.shape)}")
    return tuple(range(-rank, 0))


def _lengths(fft_length, rank: int) -> list[int]:
    lengths = np.asarray(fft_length).reshape(-1)
    if lengths.size != rank:
        raise ValueError(f"fft_length must have {rank} elements, got {list(lengths)}")
    if np.any(lengths < 0):
        raise ValueError(f"fft_length must be non-negative, got {list(lengths)}")
    return [int(v) for v in lengths]


def _complex_kernel(op_type: str, rank: int) -> None:
    transform = np.fft.ifftn if op_type.startswith("I") else np.fft.fftn

    @kernel(op_type)
    def factory(op, ctx):
        def compute(x):
            axes = _check_rank(x, rank)
            if x.size == 0:
                return np.zeros_like(x)
            return transform(x, axes=axes).astype(x.dtype, copy=False)
        return compute


def _real_kernel(op_type: str, rank: int, inverse: bool) -> None:
    @kernel(op_type)
    def factory(op, ctx):
        out_type = op.outputs[0].dtype.storage

        def compute(x, fft_length):
            axes = _check_rank(x, rank)
            lengths = _lengths(fft_length, rank)
            stored = lengths[:-1] + [lengths[-1] if inverse else lengths[-1] // 2 + 1]
            _check_crop_only(x, lengths[:-1] + [lengths[-1] // 2 + 1 if inverse else lengths[-1]])
            shape = x.shape[:-rank] + tuple(stored)
            ctx.check_shape(shape, op)
            if 0 in lengths or 0 in x.shape:
                # (An empty input or length: zeros, which numpy.fft refuses to compute.)
                return np.zeros(shape, out_type)
            if inverse:
                return np.fft.irfftn(x, s=lengths, axes=axes).astype(out_type, copy=False)
            return np.fft.rfftn(x, s=lengths, axes=axes).astype(out_type, copy=False)
        return compute


def _check_crop_only(x: np.ndarray, needed: list[int]) -> None:
    """TensorFlow's real transforms crop their input to fft_length but never pad it."""
    for k, n in enumerate(needed):
        axis = x.ndim - len(needed) + k
        if x.shape[axis] < n:
            raise ValueError(f"Input dimension {axis} must have length of at least {n} but got: {x.shape[axis]}")


for _name, _rank in COMPLEX_TRANSFORMS.items():
    _complex_kernel(_name, _rank)
for _name, _rank in REAL_TRANSFORMS.items():
    _real_kernel(_name, _rank, inverse=False)
for _name, _rank in INVERSE_REAL_TRANSFORMS.items():
    _real_kernel(_name, _rank, inverse=True)


# -- gradients ----------------------------------------------------------------------------------------

def _last_dims(t: Tensor, rank: int) -> list:
    """The last ``rank`` dims of ``t``: ints where static, scalar int32 tensors where not."""
    dims = t.shape.as_list() if t.shape.rank is not None else [None] * rank
    shape = None
    out = []
    for k in range(rank, 0, -1):
        d = dims[-k]
        if d is None:
            shape = shape if shape is not None else apply_op("Shape", t)
            d = apply_op("StridedSlice", shape, rules.ints([-k]), rules.ints([-k + 1 if k > 1 else 0]),
                         rules.ints([1]), shrink_axis_mask=1, end_mask=0 if k > 1 else 1)
        out.append(d)
    return out


def _fft_lengths_of(op, rank: int) -> list:
    """fft_length as ints when it is a constant, else scalar int32 tensors."""
    value = constant_value(op.inputs[1])
    if value is not None:
        return [int(v) for v in np.asarray(value).reshape(-1)]
    return [apply_op("StridedSlice", op.inputs[1], rules.ints([k]), rules.ints([k + 1]), rules.ints([1]),
                     shrink_axis_mask=1) for k in range(rank)]


def _vector(values: list) -> Tensor:
    if not any(isinstance(v, Tensor) for v in values):
        return rules.ints(values)
    return apply_op("Pack", [v if isinstance(v, Tensor) else rules.ints(v) for v in values], axis=0)


def _product(values: list):
    out: int | Tensor = 1
    for v in values:
        out = out * v if isinstance(out, Tensor) or isinstance(v, Tensor) else int(out) * int(v)
    return out


def _as_scalar(value, dtype: dtypes.DType) -> Tensor:
    if isinstance(value, Tensor):
        if dtype.is_complex:
            real = apply_op("Cast", value, DstT=dtype.real_dtype)
            return apply_op("Complex", real, constant(0, dtype.real_dtype), Tout=dtype)
        return apply_op("Cast", value, DstT=dtype)
    return constant(value, dtype)


def _resize_last_dims(t: Tensor, current: list, target: list) -> Tensor:
    """``t`` (its last dims ``current``) cropped or zero-padded at the end to ``target``."""
    rank = len(target)
    if all(isinstance(c, int) and isinstance(w, int) for c, w in zip(current, target)):
        if current == target:
            return t
        if any(w < c for c, w in zip(current, target)):
            sizes = [min(c, w) for c, w in zip(current, target)]
            t = _slice_last_dims(t, rules.ints(sizes), rank)
        if any(w > c for c, w in zip(current, target)):
            t = _pad_last_dims(t, rules.ints([max(w - c, 0) for c, w in zip(current, target)]), rank)
        return t
    current_v, target_v = _vector(current), _vector(target)
    t = _slice_last_dims(t, apply_op("Minimum", current_v, target_v), rank)
    return _pad_last_dims(t, apply_op("Maximum", target_v - current_v, rules.ints(0)), rank)


def _leading(t: Tensor, rank: int, fill: int) -> Tensor:
    """A vector of ``fill`` for each of t's dims before the last ``rank``."""
    if t.shape.rank is not None:
        return rules.ints([fill] * (t.shape.rank - rank))
    count = apply_op("Rank", t) - rules.ints(rank)
    return apply_op("Fill", apply_op("Reshape", count, rules.ints([1])), rules.ints(fill))


def _slice_last_dims(t: Tensor, sizes: Tensor, rank: int) -> Tensor:
    begin = apply_op("ZerosLike", apply_op("Shape", t)) if t.shape.rank is None else rules.ints([0] * t.shape.rank)
    size = apply_op("ConcatV2", [_leading(t, rank, -1), sizes], rules.ints(0))
    return apply_op("Slice", t, begin, size)


def _pad_last_dims(t: Tensor, amounts: Tensor, rank: int) -> Tensor:
    after = apply_op("ConcatV2", [_leading(t, rank, 0), amounts], rules.ints(0))
    paddings = apply_op("Pack", [apply_op("ZerosLike", after), after], axis=1)
    return apply_op("Pad", t, paddings)


@family.gradient(*COMPLEX_TRANSFORMS)
@dense_gradients
def _complex_transform_grad(op, grad):
    """FFT: N IFFT(grad); IFFT: FFT(grad) / N (N: the transform's size)."""
    rank = COMPLEX_TRANSFORMS[op.type]
    size = _as_scalar(_product(_last_dims(grad, rank)), grad.dtype.base_dtype)
    inverse = apply_op(_INVERSE[op.type], grad)
    return inverse * size if op.type.startswith("F") else inverse / size


@family.gradient(*REAL_TRANSFORMS)
@dense_gradients
def _real_transform_grad(op, grad):
    """Re(N IFFT(grad zero-extended to the full last dim)), cropped/padded to the input."""
    rank = REAL_TRANSFORMS[op.type]
    x = op.inputs[0]
    lengths = _fft_lengths_of(op, rank)
    last = lengths[-1]
    kept = last // 2 + 1
    full = _resize_last_dims(grad, lengths[:-1] + [kept], lengths)
    inverse = apply_op("I" + _COMPLEX_OF_RANK[rank], full)
    real_type = x.dtype.base_dtype
    back = apply_op("Real", inverse, Tout=real_type) * _as_scalar(_product(lengths), real_type)
    return _resize_last_dims(back, lengths, _last_dims(x, rank)), None


@family.gradient(*INVERSE_REAL_TRANSFORMS)
@dense_gradients
def _inverse_real_transform_grad(op, grad):
    """RFFT(grad) w / N, w = 1, 2, ..., 2 (and 1 for the Nyquist frequency of an even length),
    cropped/padded to the input."""
    rank = INVERSE_REAL_TRANSFORMS[op.type]
    z = op.inputs[0]
    complex_type = z.dtype.base_dtype
    real_type = grad.dtype.base_dtype
    spectrum = apply_op("RFFT" + ("" if rank == 1 else f"{rank}D"), grad, op.inputs[1], Tcomplex=complex_type)
    lengths = _fft_lengths_of(op, rank)
    weights = _half_spectrum_weights(lengths[-1], real_type) / _as_scalar(_product(lengths), real_type)
    scaled = spectrum * apply_op("Complex", weights, apply_op("ZerosLike", weights), Tout=complex_type)
    last = lengths[-1]
    return _resize_last_dims(scaled, lengths[:-1] + [last // 2 + 1], _last_dims(z, rank)), None


def _half_spectrum_weights(length, dtype: dtypes.DType) -> Tensor:
    """[1, 2, ..., 2] over the length // 2 + 1 stored frequencies, the last one 1 when the
    length is even (the Nyquist frequency is its own mirror image)."""
    if isinstance(length, int):
        k = np.arange(length // 2 + 1)
        return constant(np.where((k == 0) | (2 * k == length), 1.0, 2.0).astype(dtype.storage), dtype)
    k = apply_op("Range", rules.ints(0), length // rules.ints(2) + rules.ints(1), rules.ints(1))
    single = apply_op("LogicalOr", apply_op("Equal", k, rules.ints(0)), apply_op("Equal", k * rules.ints(2), length))
    return apply_op("SelectV2", single, constant(1, dtype), constant(2, dtype))
