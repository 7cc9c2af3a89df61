"""Gradient rules of the function-call family.

A call of a library function differentiates, in order of preference, by:
1. a gradient registered for the function's name (gradreg.RegisterGradient("fname")),
2. the GradientDef the library pairs with the function (a call of that gradient function),
3. a SymbolicGradient node, whose kernel differentiates the function body once and caches it.
SymbolicGradient itself differentiates by a SymbolicGradient of the gradient function, which is
added to the library: second derivatives through function calls work the same way.

A resource input (a variable the function reads: a SavedModel's signatures capture their
variables so) gets the variable's gradient, typed like its value, when the variable's dtype is
known (from the VarHandleOp, or the ``handle_data`` TensorFlow writes on function arguments)."""
from __future__ import annotations

from gradreg.autodiff import rules
from gradreg.autodiff.function_gradients import (
    ensure_symbolic_gradient_function,
    mark_custom_gradient,
    resource_dtypes_of,
)
from gradreg.build.builders import apply_op, as_dense
from gradreg.build.functions import call_attrs_of
from gradreg.model import dtypes
from gradreg.proto import attr_value_pb2
from gradreg.registry import get_registry
from gradreg_plugins.function_call import family


def _output_grads(op, grads):
    """Every output gets a gradient tensor (zeros where none arrived), as function gradients expect."""
    out = []
    for t, g in zip(op.outputs, grads):
        out.append(as_dense(g) if g is not None else apply_op("ZerosLike", t))
    return out


def _grad_types(op):
    """The gradient's dtype per input: a resource's is its variable's (float32 when unknown: that
    gradient is dropped)."""
    return [rules.gradient_dtype(t) or dtypes.float32 for t in op.inputs]


def _only_differentiable(op, grads):
    """The gradients of float and complex inputs and of resource inputs whose variable's dtype
    is known; None for the others."""
    return [g if t.dtype is not None and (t.dtype.base_dtype.is_differentiable or _known_resource(t)) else None
            for t, g in zip(op.inputs, grads)]


def _known_resource(t) -> bool:
    return t.dtype.base_dtype is dtypes.resource and rules.variable_dtype(t) is not None


def _function_call_grad(op, name: str, call_attrs: dict, grads):
    registered = get_registry().gradients.lookup(name)
    if registered is not None and registered.value is not None and op.type != name:
        return registered.value(op, *grads)
    library = op.graph.library
    inputs = list(op.inputs) + _output_grads(op, grads)
    gradient_function = library.gradient_function(name)
    if gradient_function is not None:
        out = apply_op("PartitionedCall", inputs, Tout=_grad_types(op),
                       f=attr_value_pb2.NameAttrList(name=gradient_function))
    else:
        func = attr_value_pb2.NameAttrList(name=name)
        for key, value in call_attrs.items():
            entry = func.attr.add()
            entry.key = key
            entry.value.CopyFrom(value)
        out = apply_op("SymbolicGradient", inputs, Tout=_grad_types(op), f=func)
        mark_custom_gradient(_op_of(out))
    return _only_differentiable(op, list(out))


def _op_of(out):
    return out.op if hasattr(out, "op") else out[0].op


@family.gradient("PartitionedCall", "StatefulPartitionedCall")
def _partitioned_call_grad(op, *grads):
    return _function_call_grad(op, op.get_attr("f").name, call_attrs_of(op, "f"), grads)


@family.function_call_gradient
def _call_by_name_grad(op, *grads):
    return _function_call_grad(op, op.type, call_attrs_of(op), grads)


@family.gradient("SymbolicGradient")
def _symbolic_gradient_grad(op, *grads):
    func = op.get_attr("f")
    grad_name = ensure_symbolic_gradient_function(op.graph.library, func.name, call_attrs_of(op, "f"),
                                                  f"node '{op.name}'", resource_dtypes_of(op.inputs))
    out = apply_op("SymbolicGradient", list(op.inputs) + _output_grads(op, grads), Tout=_grad_types(op),
                   f=attr_value_pb2.NameAttrList(name=grad_name))
    mark_custom_gradient(_op_of(out))
    return _only_differentiable(op, list(out))
