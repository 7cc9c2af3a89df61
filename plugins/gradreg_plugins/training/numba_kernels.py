"""Numba kernels of the training family (imported only when the numba backend is first used).

The dense optimizer apply ops (Apply*/ResourceApply* for gradient descent, momentum, Adam,
Adagrad, RMSProp and centered RMSProp) over float32/float64 update their variables in
place in one compiled loop, where the NumPy rules make up to a dozen passes. The
arithmetic is the NumPy rules', operation for operation, in the variable's type. Anything
unusual (a shape or type mismatch, a non-scalar hyperparameter, a non-contiguous buffer)
goes to the NumPy kernel, which raises its errors; the sparse forms stay NumPy.
Every loop is built as a native kernel (training/native_kernels: the same loop, compiled by
LLVM in tens of milliseconds with the GIL released) where native kernels are available, and
by numba otherwise.
"""
from __future__ import annotations

import functools

import numpy as np

from gradreg.kernel_support import compile_module, native_loop, numba_available, writable
from gradreg.model import dtypes
from gradreg.registry import get_registry
from gradreg.registry.kernels import Absorbing, Tiered
from gradreg_plugins.training import family
from gradreg_plugins.training.product_update import absorbing

try:    # the native loops import llvmlite, which may be missing where numba is
    from gradreg_plugins.training import native_kernels
except ImportError:
    native_kernels = None  # type: ignore[assignment]

_LOOPS = """
@njit(cache=True, nogil=True, error_model="numpy")
def gradient_descent(var, alpha, delta):
    for i in range(var.shape[0]):
        var[i] = var[i] - delta[i] * alpha


@njit(cache=True, nogil=True, error_model="numpy")
def momentum(var, accum, lr, grad, momentum, use_nesterov):
    for i in range(var.shape[0]):
        a = accum[i] * momentum + grad[i]
        accum[i] = a
        if use_nesterov:
            var[i] = var[i] - ((a * momentum) * lr + grad[i] * lr)
        else:
            var[i] = var[i] - a * lr


@njit(cache=True, nogil=True, error_model="numpy")
def adam(var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, use_nesterov):
    alpha = lr * np.sqrt({=1} - beta2_power) / ({=1} - beta1_power)
    for i in range(var.shape[0]):
        g = grad[i]
        m_i = m[i] + (g - m[i]) * ({=1} - beta1)
        v_i = v[i] + (g * g - v[i]) * ({=1} - beta2)
        m[i] = m_i
        v[i] = v_i
        if use_nesterov:
            numerator = (g * ({=1} - beta1) + m_i * beta1) * alpha
        else:
            numerator = m_i * alpha
        var[i] = var[i] - numerator / (np.sqrt(v_i) + epsilon)


@njit(cache=True, nogil=True, error_model="numpy")
def adagrad(var, accum, lr, grad, update_slots):
    for i in range(var.shape[0]):
        g = grad[i]
        a = accum[i] + g * g if update_slots else accum[i]
        accum[i] = a
        var[i] = var[i] - (g / np.sqrt(a)) * lr


@njit(inline="always", error_model="numpy")
def _momentum_step(var, mom, i, lr, momentum, grad, denominator):
    m = mom[i] * momentum + (grad / np.sqrt(denominator)) * lr
    mom[i] = m
    var[i] = var[i] - m


@njit(cache=True, nogil=True, error_model="numpy")
def rms_prop(var, ms, mom, lr, rho, momentum, epsilon, grad):
    for i in range(var.shape[0]):
        g = grad[i]
        s = ms[i] + (g * g - ms[i]) * ({=1} - rho)
        ms[i] = s
        _momentum_step(var, mom, i, lr, momentum, g, s + epsilon)


@njit(cache=True, nogil=True, error_model="numpy")
def centered_rms_prop(var, mg, ms, mom, lr, rho, momentum, epsilon, grad):
    for i in range(var.shape[0]):
        g = grad[i]
        s = ms[i] + (g * g - ms[i]) * ({=1} - rho)
        ms[i] = s
        a = mg[i] + (g - mg[i]) * ({=1} - rho)
        mg[i] = a
        _momentum_step(var, mom, i, lr, momentum, g, (s - a * a) + epsilon)
"""

# Op type (without "Resource") -> (loop name, attrs passed after the inputs).
_RULES = {
    "ApplyGradientDescent": ("gradient_descent", ()),
    "ApplyMomentum": ("momentum", ("use_nesterov",)),
    "ApplyAdam": ("adam", ("use_nesterov",)),
    "ApplyAdagrad": ("adagrad", ("update_slots",)),
    "ApplyRMSProp": ("rms_prop", ()),
    "ApplyCenteredRMSProp": ("centered_rms_prop", ()),
}


@functools.cache
def _loops(dtype: np.dtype):
    return compile_module(_LOOPS, dtype)


def _native(builder: str, *args):
    """The loop native_kernels' ``builder`` builds for ``args``, compiled now; None where it
    cannot (numba's runs then: kernel_support.native_loop)."""
    return native_loop(getattr(native_kernels, builder, None), *args)


def _loop(dtype: np.dtype, name: str):
    """The loop ``name`` of _LOOPS for arrays of ``dtype``: native, else numba's (compiled on
    its first call)."""
    loop = _native("loop", dtype, name)
    return loop if loop is not None else getattr(_loops(dtype), name)


def _numpy_kernel(op, ctx):
    kernel = get_registry().kernel_factory(op.type, "numpy")(op, ctx)
    return kernel.fallback if isinstance(kernel, Absorbing) else kernel


def _apply_factory(op, ctx):
    dtype = op.get_attr("T")
    if dtype not in (dtypes.float32, dtypes.float64) or not numba_available():
        return None
    loop_name, attr_names = _RULES[op.type.replace("Resource", "")]
    attrs = [op.get_attr(a) for a in attr_names]
    storage = dtype.storage
    args = op.definition.input_args
    num_variables = sum(1 for a in args if a.is_ref or a.fixed_type is dtypes.resource)
    names = [a.name for a in args]
    grad_at = names.index("grad") if "grad" in names else names.index("delta")
    numpy_kernel = _numpy_kernel(op, ctx)
    returns_variable = bool(op.outputs)

    def well_formed(inputs) -> bool:
        grad = inputs[grad_at]
        if type(grad) is not np.ndarray or grad.dtype != storage:
            return False
        for i in range(num_variables, len(inputs)):
            if i != grad_at and (np.ndim(inputs[i]) or np.asarray(inputs[i]).dtype != storage):
                return False
        # No reference to a variable's value may outlive this check: writable() would copy it.
        return all(s.value is not None and s.value.dtype == storage and s.value.shape == grad.shape
                   and s.value.flags.c_contiguous and s.dtype is dtype for s in inputs[:num_variables])

    def build():
        loop = _loop(storage, loop_name)
        # compiled now (numba's), for arrays and scalars of the variable's type (on scratch values)
        loop(*[np.zeros(1, storage) for _ in range(num_variables)],
             *[np.zeros(1, storage) if i == grad_at else storage.type(0) for i in range(num_variables, len(args))],
             *attrs)

        def apply(*inputs):
            if not well_formed(inputs):
                return numpy_kernel(*inputs)
            states = inputs[:num_variables]
            buffers = [s.writable().reshape(-1) for s in states]
            rest = [writable(np.ravel(inputs[i])) if i == grad_at else np.asarray(inputs[i])[()]
                    for i in range(num_variables, len(inputs))]
            loop(*buffers, *rest, *attrs)
            return states[0] if returns_variable else None
        return apply
    tiered = Tiered(numpy_kernel, build, f"{op.type} {op.name}")
    if loop_name == "gradient_descent":    # a MatMul's delta: accumulated into the variable by BLAS
        return absorbing(op, ctx, tiered, numpy_kernel)
    return tiered


for _rule in _RULES:
    for _op_type in (_rule, "Resource" + _rule):
        family.kernel(_op_type, backend="numba")(_apply_factory)
