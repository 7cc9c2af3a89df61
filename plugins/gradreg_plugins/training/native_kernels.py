"""The training family's compiled loops as native kernels (gradreg.native): numba_kernels'
optimizer update loops written again for the tracer and compiled by LLVM, which takes tens of
milliseconds with the GIL released where numba holds the GIL for half a second a loop.

:func:`loop` returns the loop ``name`` of numba_kernels._LOOPS (``gradient_descent``,
``momentum``, ``adam``, ``adagrad``, ``rms_prop``, ``centered_rms_prop``) for arrays of one
dtype (float32 or float64), taking the same arguments in the same order: the 1-D C-contiguous
variables updated in place, scalars of that dtype, the 1-D gradient, and the flags
(``use_nesterov``, ``update_slots``) as bools or ints. The values are computed by the same
operations in the same order (square roots correctly rounded, as numba's), in the dtype: the
results are the numba loop's bits. A flag numba tests for each element is a select here.
Each loop is built, and compiled, on its first request only.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from gradreg.native import Array, Kernel, Unsupported, Value, available, compile_loop

__all__ = ["Unsupported", "available", "loop"]

Loop = Callable[..., None]


def _sqrt(x: Value) -> Value:
    return x.k.intrinsic("llvm.sqrt", x)


def _gradient_descent(k: Kernel, dtype: np.dtype) -> None:
    # gradient_descent(var, alpha, delta)
    var = k.array(dtype, 1)
    alpha = k.scalar(dtype)
    delta = k.array(dtype, 1)
    for i in k.range(var.shape[0]):
        var[i] = var[i] - delta[i] * alpha


def _momentum(k: Kernel, dtype: np.dtype) -> None:
    # momentum(var, accum, lr, grad, momentum, use_nesterov)
    var, accum = k.array(dtype, 1), k.array(dtype, 1)
    lr = k.scalar(dtype)
    grad = k.array(dtype, 1)
    momentum = k.scalar(dtype)
    nesterov = k.int_param() != 0
    for i in k.range(var.shape[0]):
        a = accum[i] * momentum + grad[i]
        accum[i] = a
        step = k.where(nesterov, (a * momentum) * lr + grad[i] * lr, a * lr)
        var[i] = var[i] - step


def _adam(k: Kernel, dtype: np.dtype) -> None:
    # adam(var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, use_nesterov)
    var, m, v = (k.array(dtype, 1) for _ in range(3))
    beta1_power, beta2_power, lr, beta1, beta2, epsilon = (k.scalar(dtype) for _ in range(6))
    grad = k.array(dtype, 1)
    nesterov = k.int_param() != 0
    alpha = lr * _sqrt(1.0 - beta2_power) / (1.0 - beta1_power)
    for i in k.range(var.shape[0]):
        g = grad[i]
        m_i = m[i] + (g - m[i]) * (1.0 - beta1)
        v_i = v[i] + (g * g - v[i]) * (1.0 - beta2)
        m[i] = m_i
        v[i] = v_i
        numerator = k.where(nesterov, (g * (1.0 - beta1) + m_i * beta1) * alpha, m_i * alpha)
        var[i] = var[i] - numerator / (_sqrt(v_i) + epsilon)


def _adagrad(k: Kernel, dtype: np.dtype) -> None:
    # adagrad(var, accum, lr, grad, update_slots)
    var, accum = k.array(dtype, 1), k.array(dtype, 1)
    lr = k.scalar(dtype)
    grad = k.array(dtype, 1)
    update_slots = k.int_param() != 0
    for i in k.range(var.shape[0]):
        g = grad[i]
        old = accum[i]
        a = k.where(update_slots, old + g * g, old)
        accum[i] = a
        var[i] = var[i] - (g / _sqrt(a)) * lr


def _momentum_step(var: Array, mom: Array, i: Value, lr: Value, momentum: Value, grad: Value,
                   denominator: Value) -> None:
    m = mom[i] * momentum + (grad / _sqrt(denominator)) * lr
    mom[i] = m
    var[i] = var[i] - m


def _rms_prop(k: Kernel, dtype: np.dtype) -> None:
    # rms_prop(var, ms, mom, lr, rho, momentum, epsilon, grad)
    var, ms, mom = (k.array(dtype, 1) for _ in range(3))
    lr, rho, momentum, epsilon = (k.scalar(dtype) for _ in range(4))
    grad = k.array(dtype, 1)
    for i in k.range(var.shape[0]):
        g = grad[i]
        s = ms[i] + (g * g - ms[i]) * (1.0 - rho)
        ms[i] = s
        _momentum_step(var, mom, i, lr, momentum, g, s + epsilon)


def _centered_rms_prop(k: Kernel, dtype: np.dtype) -> None:
    # centered_rms_prop(var, mg, ms, mom, lr, rho, momentum, epsilon, grad)
    var, mg, ms, mom = (k.array(dtype, 1) for _ in range(4))
    lr, rho, momentum, epsilon = (k.scalar(dtype) for _ in range(4))
    grad = k.array(dtype, 1)
    for i in k.range(var.shape[0]):
        g = grad[i]
        s = ms[i] + (g * g - ms[i]) * (1.0 - rho)
        ms[i] = s
        a = mg[i] + (g - mg[i]) * (1.0 - rho)
        mg[i] = a
        _momentum_step(var, mom, i, lr, momentum, g, (s - a * a) + epsilon)


_LOOPS: dict[str, Callable[[Kernel, np.dtype], None]] = {
    "gradient_descent": _gradient_descent,
    "momentum": _momentum,
    "adam": _adam,
    "adagrad": _adagrad,
    "rms_prop": _rms_prop,
    "centered_rms_prop": _centered_rms_prop,
}


def loop(dtype: Any, name: str) -> Loop:
    """numba_kernels' loop ``name`` of _LOOPS for arrays and scalars of ``dtype``, compiled now."""
    return _loop(np.dtype(dtype), name)


@functools.cache
def _loop(dtype: np.dtype, name: str) -> Loop:
    return compile_loop(name, dtype, _LOOPS[name])
