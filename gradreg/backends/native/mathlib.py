"""Scalar math of native kernels, traced inline into the loops that use it.

The float32 functions are gradreg.backends.numba.mathlib's, written again for the tracer:
the same Cephes polynomials, the same branch-free selects (so LLVM vectorizes the loops
around them), the same operations in the same order, so both give the same bits. float64
goes to the C math library, as numba's float64 functions do.

Every function takes and returns a :class:`~gradreg.backends.native.dsl.Value` of F32 or F64.
"""
from __future__ import annotations

from gradreg.backends.native.dsl import F32, F64, I32, Unsupported, Value


def _f32(v: Value) -> bool:
    if v.type is F32:
        return True
    if v.type is F64:
        return False
    raise Unsupported(f"math on {v.type}")


def _bits_float(i: Value) -> Value:
    return i.bitcast(F32)


def exp(x: Value) -> Value:
    if not _f32(x):
        return x.k.intrinsic("llvm.exp", x)
    k = x.k
    xc = minimum_plain(maximum_plain(x, -103.97208), 88.72284)
    kf = k.intrinsic("llvm.floor", xc * 1.4426950408889634 + 0.5)
    r = xc - kf * 0.693359375
    r = r - kf * -2.12194440e-4
    p = ((((k.const(1.9875691500e-4, F32) * r + 1.3981999507e-3) * r + 8.3334519073e-3) * r
          + 4.1665795894e-2) * r + 1.6666665459e-1) * r + 5.0000001201e-1
    p = p * (r * r) + r + 1.0
    ki = kf.cast(I32)
    half = ki >> 1    # 2**k in two factors, so results in the subnormal range stay right
    y = p * _bits_float((half + 127) << 23)
    y = y * _bits_float((ki - half + 127) << 23)
    y = k.where(x > 88.72284, float("inf"), y)
    return k.where(x != x, x, y)


def log(x: Value) -> Value:
    if not _f32(x):
        return x.k.intrinsic("llvm.log", x)
    k = x.k
    tiny = x < 1.1754944e-38
    bits = k.where(tiny, x * 8388608.0, x).bitcast(I32)
    e = ((bits >> 23) & 255) - 126
    e = k.where(tiny, e - 23, e)
    m = _bits_float((bits & 8388607) | 1056964608)
    low = m < 0.70710677
    e = k.where(low, e - 1, e)
    m = k.where(low, m + m - 1.0, m - 1.0)
    z = m * m
    y = (((((((k.const(7.0376836292e-2, F32) * m - 1.1514610310e-1) * m + 1.1676998740e-1) * m
            - 1.2420140846e-1) * m + 1.4249322787e-1) * m - 1.6668057665e-1) * m
          + 2.0000714765e-1) * m - 2.4999993993e-1) * m + 3.3333331174e-1
    fe = e.cast(F32)
    y = y * m * z + fe * -2.12194440e-4 - z * 0.5
    y = m + y + fe * 0.693359375
    y = k.where(x == float("inf"), float("inf"), y)
    y = k.where(x == 0.0, float("-inf"), y)
    return k.where((x < 0.0) | (x != x), float("nan"), y)


def maximum_plain(x: Value, y: float) -> Value:
    """numba's ``max(x, y)`` of a float and a constant (``x`` when the comparison fails)."""
    return x.k.where(x < y, y, x)


def minimum_plain(x: Value, y: float) -> Value:
    """numba's ``min(x, y)`` of a float and a constant."""
    return x.k.where(x > y, y, x)
