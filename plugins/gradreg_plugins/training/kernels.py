"""Kernels of the training family: variables live in the session (gradreg.runtime.state)."""
from __future__ import annotations

import functools

import numpy as np

from gradreg.errors import ExecutionError, describe_node
from gradreg.model import dtypes
from gradreg.registry.kernels import NOOP
from gradreg.runtime.state import variable_key, variable_state
from gradreg_plugins.array.kernels import gather
from gradreg_plugins.training import family, product_update

kernel = family.kernel


@kernel("VariableV2")
@kernel("VarHandleOp")
def _variable(op, ctx):
    state = variable_state(ctx, variable_key(op), op.get_attr("dtype"), op.get_attr("shape"))
    return lambda: state


@kernel("Assign")
def _assign(op, ctx):
    validate = op.get_attr("validate_shape")

    def assign(state, value):
        state.assign(value, validate)
        return state
    return assign


def _in_place(ufunc):
    def update(state, value):
        buffer = state.writable()
        ufunc(buffer, value, out=buffer, casting="unsafe")
        return state
    return update


kernel("AssignAdd")(lambda op, ctx: _in_place(np.add))
kernel("AssignSub")(lambda op, ctx: _in_place(np.subtract))
kernel("AssignAddVariableOp")(lambda op, ctx: _without_output(_in_place(np.add)))
kernel("AssignSubVariableOp")(lambda op, ctx: _without_output(_in_place(np.subtract)))


def _without_output(fn):
    def run(*args):
        fn(*args)
    return run


@kernel("AssignVariableOp")
def _assign_variable(op, ctx):
    validate = op.get_attr("validate_shape")
    return lambda state, value: state.assign(value, validate)


@kernel("IsVariableInitialized")
@kernel("VarIsInitializedOp")
def _is_initialized(op, ctx):
    return lambda state: np.bool_(state.initialized)


@kernel("ReadVariableOp")
def _read(op, ctx):
    return lambda state: state.read()


@kernel("VariableShape")
def _variable_shape(op, ctx):
    out_type = op.get_attr("out_type").storage
    return lambda state: np.array(state.read().shape, dtype=out_type)


@kernel("DestroyResourceOp")
def _destroy(op, ctx):
    return NOOP


@kernel("ResourceGather")
def _resource_gather(op, ctx):
    # GatherV2 of the variable's value along axis batch_dims (TensorFlow's definition).
    batch_dims = op.get_attr("batch_dims")
    return lambda state, indices: gather(state.read(), np.asarray(indices), batch_dims, batch_dims, op, ctx)


def _truncating_divide_at(buffer: np.ndarray, indices: np.ndarray, updates) -> None:
    """buffer[i] /= updates[j] row by row, integers rounding toward zero (C++ division, as
    TensorFlow's kernel divides); repeated rows divide in turn."""
    updates = np.broadcast_to(updates, indices.shape + buffer.shape[1:])
    for j, i in enumerate(indices.reshape(-1)):
        row, by = buffer[i], updates.reshape((-1,) + buffer.shape[1:])[j]
        quotient = np.abs(row) // np.abs(by)
        buffer[i] = np.where((row < 0) != (by < 0), -quotient, quotient)


_COMBINE = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(kind: str):
    def update(state, indices, updates):
        buffer = state.writable()
        indices = np.asarray(indices)
        if indices.size and (indices.min() < 0 or indices.max() >= buffer.shape[0]):
            raise IndexError(f"scatter index out of range [0, {buffer.shape[0]}) for variable {state.name}")
        if kind in _COMBINE:
            _COMBINE[kind].at(buffer, indices, updates)
        elif kind == "div" and buffer.dtype.kind in "iu":
            _truncating_divide_at(buffer, indices, updates)
        elif kind == "div":
            np.divide.at(buffer, indices, updates)
        else:
            buffer[indices] = updates
        return state
    return update


for _kind in ("add", "sub", "update", "mul", "div", "max", "min"):
    _ref = "Scatter" + _kind.capitalize()
    kernel(_ref)(lambda op, ctx, _k=_kind: _scatter(_k))
    kernel("Resource" + _ref)(lambda op, ctx, _k=_kind: _without_output(_scatter(_k)))


# -- optimizer apply ops --------------------------------------------------------------------------
#
# Each rule below updates its variable and slot arrays in place, in the order and form of
# TensorFlow's CPU kernels (training_ops.cc), with at most two scratch arrays of the
# variable's size. The sparse ops run the same rules on the gathered rows of the indices
# (the sparse kernels' own forms where TensorFlow writes them differently) and scatter the
# rows back. Hyperparameters arrive as 0-d arrays of the variable's type, so the scalar
# arithmetic stays in that type as TensorFlow's does.

def _gradient_descent(var, alpha, delta):
    step = np.multiply(delta, alpha)
    np.subtract(var, step, out=var)


def _momentum(var, accum, lr, grad, momentum, use_nesterov):
    np.multiply(accum, momentum, out=accum)
    np.add(accum, grad, out=accum)                 # accum = accum * momentum + grad
    if use_nesterov:                               # var -= grad * lr + accum * momentum * lr
        step = np.multiply(accum, momentum)
        step *= lr
        step += np.multiply(grad, lr)
    else:                                          # var -= accum * lr
        step = np.multiply(accum, lr)
    np.subtract(var, step, out=var)


def _adam(var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, use_nesterov):
    one = np.ones((), var.dtype)
    alpha = lr * np.sqrt(one - beta2_power) / (one - beta1_power)
    scratch = np.subtract(grad, m)
    scratch *= one - beta1
    m += scratch                                   # m += (g - m) * (1 - beta1)
    np.square(grad, out=scratch)
    scratch -= v
    scratch *= one - beta2
    v += scratch                                   # v += (g^2 - v) * (1 - beta2)
    if use_nesterov:                               # numerator: (g * (1 - beta1) + beta1 * m) * alpha
        np.multiply(grad, one - beta1, out=scratch)
        denominator = np.multiply(m, beta1)
        scratch += denominator
        scratch *= alpha
    else:                                          # numerator: m * alpha
        np.multiply(m, alpha, out=scratch)
        denominator = np.empty_like(var)
    np.sqrt(v, out=denominator)
    denominator += epsilon                         # epsilon outside the square root
    scratch /= denominator
    np.subtract(var, scratch, out=var)


def _adagrad(var, accum, lr, grad, update_slots):
    scratch = np.square(grad)
    if update_slots:
        accum += scratch
    np.sqrt(accum, out=scratch)
    np.divide(grad, scratch, out=scratch)
    scratch *= lr                                  # var -= grad * lr * rsqrt(accum)
    np.subtract(var, scratch, out=var)


def _rms_prop(var, ms, mom, lr, rho, momentum, epsilon, grad):
    scratch = np.square(grad)
    scratch -= ms
    scratch *= np.ones((), var.dtype) - rho
    ms += scratch                                  # ms += (g^2 - ms) * (1 - rho)
    _rms_prop_step(var, ms, mom, lr, momentum, epsilon, grad, scratch)


def _sparse_rms_prop(var, ms, mom, lr, rho, momentum, epsilon, grad):
    ms *= rho
    scratch = np.square(grad)
    scratch *= np.ones((), var.dtype) - rho
    ms += scratch                                  # ms = ms * rho + g^2 * (1 - rho)
    _rms_prop_step(var, ms, mom, lr, momentum, epsilon, grad, scratch)


def _rms_prop_step(var, ms, mom, lr, momentum, epsilon, grad, scratch):
    """mom = mom * momentum + grad * lr / sqrt(ms + epsilon); var -= mom."""
    np.add(ms, epsilon, out=scratch)
    _momentum_step(var, mom, lr, momentum, grad, scratch)


def _centered_rms_prop(var, mg, ms, mom, lr, rho, momentum, epsilon, grad):
    one_minus_rho = np.ones((), var.dtype) - rho
    scratch = np.square(grad)
    scratch -= ms
    scratch *= one_minus_rho
    ms += scratch                                  # ms += (g^2 - ms) * (1 - rho)
    np.subtract(grad, mg, out=scratch)
    scratch *= one_minus_rho
    mg += scratch                                  # mg += (g - mg) * (1 - rho)
    np.square(mg, out=scratch)
    np.subtract(ms, scratch, out=scratch)
    scratch += epsilon                             # denominator: (ms - mg^2) + epsilon
    _momentum_step(var, mom, lr, momentum, grad, scratch)


def _sparse_centered_rms_prop(var, mg, ms, mom, lr, rho, momentum, epsilon, grad):
    one_minus_rho = np.ones((), var.dtype) - rho
    ms *= rho
    scratch = np.square(grad)
    scratch *= one_minus_rho
    ms += scratch                                  # ms = ms * rho + g^2 * (1 - rho)
    mg *= rho
    np.multiply(grad, one_minus_rho, out=scratch)
    mg += scratch                                  # mg = mg * rho + g * (1 - rho)
    np.square(mg, out=scratch)
    np.subtract(ms, scratch, out=scratch)
    scratch += epsilon                             # denominator: ms + epsilon - mg^2
    _momentum_step(var, mom, lr, momentum, grad, scratch)


def _momentum_step(var, mom, lr, momentum, grad, denominator):
    """mom = mom * momentum + grad * lr / sqrt(denominator); var -= mom (``denominator`` is
    scratch space)."""
    np.sqrt(denominator, out=denominator)
    np.divide(grad, denominator, out=denominator)
    denominator *= lr
    mom *= momentum
    mom += denominator
    np.subtract(var, mom, out=var)


class _ApplyRule:
    """How one family of apply ops runs: the dense rule, the sparse one, the attrs passed on."""

    def __init__(self, dense, sparse=None, attrs: tuple[str, ...] = ()):
        self.dense = dense
        self.sparse = sparse or dense
        self.attrs = attrs


_RULES = {
    "ApplyGradientDescent": _ApplyRule(_gradient_descent),
    "ApplyMomentum": _ApplyRule(_momentum, attrs=("use_nesterov",)),
    "ApplyAdam": _ApplyRule(_adam, attrs=("use_nesterov",)),
    "ApplyAdagrad": _ApplyRule(_adagrad, attrs=("update_slots",)),
    "ApplyRMSProp": _ApplyRule(_rms_prop, _sparse_rms_prop),
    "ApplyCenteredRMSProp": _ApplyRule(_centered_rms_prop, _sparse_centered_rms_prop),
}


def _apply_factory(op, ctx):
    """The kernel of any (Resource)(Sparse)Apply* node: checks the inputs, updates in place."""
    sparse = "SparseApply" in op.type
    rule = _RULES[op.type.replace("Resource", "").replace("Sparse", "")]
    dtype = op.get_attr("T")
    if dtype.kind not in "fc":
        raise ExecutionError(f"{describe_node(op.name, op.type)}: no kernel for T={dtype.name} "
                             f"(TensorFlow's apply kernels take floating-point and complex types)",
                             op.name, op.type)
    update = functools.partial(rule.sparse if sparse else rule.dense, **{a: op.get_attr(a) for a in rule.attrs})
    names = [a.name for a in op.definition.input_args]
    num_variables = sum(1 for a in op.definition.input_args if a.is_ref or a.fixed_type is dtypes.resource)
    grad_at = names.index("grad") if "grad" in names else names.index("delta")
    indices_at = names.index("indices") if sparse else None
    rule_inputs = [i for i in range(num_variables, len(names)) if i != indices_at]   # after the variables
    grad_arg = rule_inputs.index(grad_at)
    scalars = [i for i in rule_inputs if i != grad_at]
    rounding = dtype is dtypes.bfloat16
    returns_variable = bool(op.outputs)

    def apply(*inputs):
        states = inputs[:num_variables]
        grad = np.asarray(inputs[grad_at])
        for i in scalars:
            if np.ndim(inputs[i]):
                raise ValueError(f"{names[i]} is not a scalar: {list(np.shape(inputs[i]))}")
        var_shape = _checked_variables(states, names, dtype)
        args = [inputs[i] for i in rule_inputs]
        # Read no values before this point: a reference held here would make writable() copy.
        buffers = [s.writable() for s in states]
        if sparse:
            _apply_rows(update, buffers, args, grad, inputs[indices_at], grad_arg, var_shape, rounding)
        else:
            if grad.shape != var_shape:
                raise ValueError(f"var and {names[grad_at]} do not have the same shape: "
                                 f"{list(var_shape)} vs {list(grad.shape)}")
            _update_in_chunks(update, buffers, args, grad, grad_arg)
            if rounding:
                for b in buffers:
                    _round_to_bfloat16(b)
        return states[0] if returns_variable else None
    return apply


# Dense updates of larger variables run over slices of this many elements, so the rules'
# temporaries (lr * grad, ...) stay small instead of matching the variable's size.
UPDATE_CHUNK = 1 << 16


def _update_in_chunks(update, buffers, args, grad, grad_arg) -> None:
    n = grad.size
    if n <= UPDATE_CHUNK or not grad.flags.c_contiguous or not all(b.flags.c_contiguous for b in buffers):
        update(*buffers, *args)
        return
    flat_buffers = [b.reshape(-1) for b in buffers]
    flat_grad = grad.reshape(-1)
    for start in range(0, n, UPDATE_CHUNK):
        part = slice(start, start + UPDATE_CHUNK)
        chunk_args = list(args)
        chunk_args[grad_arg] = flat_grad[part]
        update(*[b[part] for b in flat_buffers], *chunk_args)


def _checked_variables(states, names, dtype) -> tuple[int, ...]:
    """The variables' common shape (ValueError unless they share shape and type T)."""
    for name, state in zip(names, states):
        if state.dtype is not dtype.base_dtype:
            raise ValueError(f"{name} is variable {state.name} of type {state.dtype.name}, not {dtype.name}")
    shapes = [s.read().shape for s in states]
    for name, shape in zip(names[1:], shapes[1:]):
        if shape != shapes[0]:
            raise ValueError(f"var and {name} do not have the same shape: {list(shapes[0])} vs {list(shape)}")
    return shapes[0]


def _apply_rows(update, buffers, args, grad, indices, grad_arg, var_shape, rounding) -> None:
    """Apply ``update`` to the rows ``indices`` of ``buffers``, row i of ``grad`` to row
    indices[i]. A repeated index is updated once per occurrence, in order, as TensorFlow's
    sparse kernels loop over the indices."""
    indices = np.asarray(indices)
    if len(var_shape) < 1:
        raise ValueError("var must be at least 1 dimensional")
    if indices.ndim != 1:
        raise ValueError(f"indices must be one-dimensional, not of shape {list(indices.shape)}")
    if grad.ndim < 1 or grad.shape[0] != indices.shape[0]:
        raise ValueError(f"grad must be the same size as indices in the first dimension: "
                         f"{list(grad.shape)} vs {list(indices.shape)}")
    if grad.shape[1:] != var_shape[1:]:
        raise ValueError(f"var and grad do not match in the dimensions after the first: "
                         f"{list(var_shape)} vs {list(grad.shape)}")
    bad = (indices < 0) | (indices >= var_shape[0])
    if bad.any():
        at = int(np.argmax(bad))
        raise IndexError(f"Index {indices[at]} at offset {at} in indices is out of range [0, {var_shape[0]})")
    for rows in _occurrence_rounds(indices):
        where = indices[rows]
        gathered = [b[where] for b in buffers]
        row_args = list(args)
        row_args[grad_arg] = grad[rows]
        update(*gathered, *row_args)
        for b, g in zip(buffers, gathered):
            if rounding:
                _round_to_bfloat16(g)
            b[where] = g


def _occurrence_rounds(indices: np.ndarray):
    """Selections of ``indices`` without repeats: all of them when they are unique, else the
    first occurrence of each index, then the second, ..."""
    n = indices.shape[0]
    if np.unique(indices).shape[0] == n:
        yield slice(None)
        return
    order = np.argsort(indices, kind="stable")
    ordered = indices[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    occurrence = np.empty(n, dtype=np.int64)
    occurrence[order] = np.arange(n) - group_start
    for k in range(int(occurrence.max()) + 1):
        yield np.flatnonzero(occurrence == k)


def _round_to_bfloat16(values: np.ndarray) -> None:
    """Round float32 values to the nearest bfloat16 (ties to even) in place, NaNs kept."""
    nan = np.isnan(values)
    bits = values.view(np.uint32)
    bits += np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    bits &= np.uint32(0xFFFF0000)
    values[nan] = np.nan


def _gradient_descent_factory(op, ctx):
    """(Resource)ApplyGradientDescent: _apply_factory's kernel, or, for a MatMul's delta, one
    accumulating the product into the variable (gradreg_plugins.training.product_update)."""
    plain = _apply_factory(op, ctx)
    return product_update.absorbing(op, ctx, plain, plain)


for _rule in _RULES:
    for _op_type in (_rule, "Resource" + _rule):
        kernel(_op_type)(_gradient_descent_factory if _rule == "ApplyGradientDescent" else _apply_factory)
    if _rule in ("ApplyMomentum", "ApplyAdagrad", "ApplyRMSProp", "ApplyCenteredRMSProp"):
        for _op_type in ("Sparse" + _rule, "ResourceSparse" + _rule):
            kernel(_op_type)(_apply_factory)
