"""Gradient descent on a variable whose delta is a matrix product: the product accumulated
into the variable by BLAS (``var += (-alpha) * op(a) op(b)``, gradreg_plugins.math.blas),
instead of the product written out and then subtracted. A dense layer's weight update in a
TensorFlow training graph (``ResourceApplyGradientDescent(w, lr, MatMul(x, dy,
transpose_a=True))``) then makes one pass over its weights, no gradient array.

The factory answers an Absorbing kernel (gradreg.registry.kernels): the plan drops the
MatMul when the update is its only use. Inputs the BLAS call cannot take (another type, a
shape mismatch, an uninitialized variable, operands neither C- nor F-contiguous) go through
the MatMul's and the update's own kernels, which raise their errors.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from gradreg import kernel_support as ks
from gradreg.errors import ExecutionError, GradregError, describe_node
from gradreg.model import dtypes
from gradreg.registry import get_registry
from gradreg.registry.kernels import Absorbing
from gradreg_plugins.math import blas
from gradreg_plugins.math.linalg_kernels import FLOPS_PER_THREAD


def absorbing(op, ctx, fallback: Any, plain: Any) -> Any:
    """For an (Resource)ApplyGradientDescent whose delta a float32/float64 MatMul makes: an
    Absorbing kernel (``fallback`` where the plan keeps the MatMul, ``plain``, the update's
    callable kernel, for inputs BLAS cannot take); else ``fallback``."""
    dtype = op.get_attr("T")
    between: list[Any] = []      # TensorFlow's gradients pass the product through Identity nodes
    producer = op.inputs[2].op
    while producer.type == "Identity" and len(between) < 4:
        between.append(producer)
        producer = producer.inputs[0].op
    if (producer.type != "MatMul" or dtype not in (dtypes.float32, dtypes.float64)
            or producer.get_attr("T") is not dtype or not blas.available(dtype.storage)):
        return fallback
    ta, tb = bool(producer.get_attr("transpose_a")), bool(producer.get_attr("transpose_b"))
    factory = get_registry().kernel_factory("MatMul", "numpy")
    if factory is None:
        return fallback
    product = factory(producer, ctx)
    storage = dtype.storage
    returns_variable = bool(op.outputs)

    def update(var, alpha, a, b):
        if (type(a) is np.ndarray and type(b) is np.ndarray and a.ndim == 2 and b.ndim == 2
                and a.dtype == storage and b.dtype == storage and np.ndim(alpha) == 0
                and var.value is not None and var.dtype is dtype):
            m, k = (a.shape[1], a.shape[0]) if ta else a.shape
            kb, n = (b.shape[1], b.shape[0]) if tb else b.shape
            # No reference to the variable's value may outlive this check: writable() would copy it.
            if k == kb and var.value.shape == (m, n) and var.value.flags.c_contiguous:
                buffer = var.writable()
                with ks.blas_threads(ks.threads_for(2 * m * n * k, FLOPS_PER_THREAD)):
                    done = blas.gemm(buffer, a, b, -float(alpha), ta, tb)
                if done:
                    return var if returns_variable else None
        try:
            delta = product(a, b)
        except GradregError:
            raise
        except Exception as exc:     # the MatMul's error names the MatMul, as if it had run alone
            raise ExecutionError(f"{describe_node(producer.name, producer.type)}: {type(exc).__name__}: {exc}",
                                 producer.name, producer.type) from exc
        return plain(var, alpha, delta)

    return Absorbing(update, (op.inputs[0], op.inputs[1], *producer.inputs), (producer, *between[::-1]), fallback)
