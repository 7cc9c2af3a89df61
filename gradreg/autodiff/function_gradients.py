"""Gradients of library functions: SymbolicGradient's body, built by differentiating the
function's body with :func:`gradreg.autodiff.gradients.gradients`.

A resource argument (a variable the function reads) gets a gradient of the variable's type,
shaped like its value: the sum of the gradients of its reads, zeros where it is not read.
The body knows that type only if the caller says (``resource_dtypes``): it is written on the
argument's placeholder as ``_handle_dtypes``, where rules inside the body find it too."""
from __future__ import annotations

import hashlib
import warnings
from collections.abc import Sequence
from typing import Any

from gradreg.autodiff.gradients import (
    as_dense_gradients,
    custom_gradient_mode,
    gradients,
    symmetric_inputs_mode,
)
from gradreg.autodiff.rules import gradient_dtype, zeros_like_value
from gradreg.build.builders import apply_op, constant
from gradreg.build.functions import (
    HANDLE_DTYPES_ATTR,
    FunctionGraph,
    call_attrs_key,
    function_graph,
    graph_to_function_def,
)
from gradreg.model import dtypes
from gradreg.model.graph import FunctionLibrary, Operation, Tensor
from gradreg.model.indexed_slices import SparseDensifyWarning
from gradreg.model.shapes import TensorShape

CUSTOM_GRADIENT_ATTR = "_custom_gradient"
SYMMETRIC_INPUTS_ATTR = "_symmetric_inputs"


def symbolic_gradient_graph(library: FunctionLibrary, name: str, call_attrs: dict[str, Any],
                            caller: str = "", resource_dtypes: dict[int, dtypes.DType] | None = None,
                            custom_gradient: str | None = None, symmetric_inputs: str | None = None) -> FunctionGraph:
    """The gradient of function ``name`` as a FunctionGraph, with SymbolicGradient's calling
    convention: inputs are the function's inputs then one gradient per output; outputs are
    the gradients of the inputs (zeros where an input does not affect the outputs).
    ``resource_dtypes`` gives, by input index, the dtype of the variables resource inputs
    refer to (their gradients have that type); ``custom_gradient`` and ``symmetric_inputs`` are
    gradients()'s."""
    body = function_graph(library, name, call_attrs, caller)
    for index, dtype in (resource_dtypes or {}).items():
        if index < len(body.inputs) and body.inputs[index].known_dtype.base_dtype is dtypes.resource:
            body.inputs[index].op.set_attr(HANDLE_DTYPES_ATTR, [dtype], "list(type)")
    with body.as_default():
        grad_ys = [apply_op("Placeholder", dtype=_grad_type(t), shape=_grad_shape(t), name=f"grad_y_{i}")
                   for i, t in enumerate(body.outputs)]
        with warnings.catch_warnings():
            # SymbolicGradient's outputs are dense by its convention, each the size of an input
            # (a variable read by ResourceGather): no surprise worth a warning.
            warnings.simplefilter("ignore", SparseDensifyWarning)
            grads = as_dense_gradients(gradients(body.outputs, body.inputs, grad_ys=grad_ys,
                                                 custom_gradient=custom_gradient,
                                                 symmetric_inputs=symmetric_inputs))
        grads = [g if g is not None else _zeros(x) for x, g in zip(body.inputs, grads)]
    body.name = f"{name}_symbolic_gradient"
    body.inputs = body.inputs + grad_ys
    body.outputs = grads
    body.control_outputs = []
    return body


def _grad_type(t: Tensor) -> dtypes.DType:
    return gradient_dtype(t) or dtypes.float32


def _grad_shape(t: Tensor) -> TensorShape:
    return TensorShape(None) if t.known_dtype.base_dtype is dtypes.resource else t.shape


def _zeros(x: Tensor) -> Tensor:
    """The gradient of an input the outputs do not depend on."""
    if x.known_dtype.base_dtype is dtypes.resource and gradient_dtype(x) is None:
        # Nothing says what the variable holds and nothing reads it: a placeholder zero the
        # callers drop (they find no dtype either).
        return constant(0.0, dtypes.float32)
    return zeros_like_value(x)


def _function_suffix(call_attrs: dict[str, Any], resource_dtypes: dict[int, dtypes.DType] | None = None) -> str:
    if not call_attrs and not resource_dtypes:
        return ""
    key = repr((call_attrs_key(call_attrs), sorted((i, d.name) for i, d in (resource_dtypes or {}).items())))
    return "_" + hashlib.sha1(key.encode()).hexdigest()[:8]


def ensure_symbolic_gradient_function(library: FunctionLibrary, name: str, call_attrs: dict[str, Any],
                                      caller: str = "", resource_dtypes: dict[int, dtypes.DType] | None = None) -> str:
    """Add to ``library`` (once) a function computing SymbolicGradient of ``name``: inputs are
    ``name``'s inputs then one gradient per output; outputs the gradients of the inputs.
    Returns its name. (The gradient functions of If/While branches and of SymbolicGradient
    itself, for second derivatives.)"""
    # built differently: a function of its own
    modes = "".join(f"_{mode}" for mode, default in ((custom_gradient_mode(), "error"),
                                                     (symmetric_inputs_mode(), "tensorflow")) if mode != default)
    grad_name = f"{name}{_function_suffix(call_attrs, resource_dtypes)}{modes}_grad"
    if grad_name not in library:
        graph = symbolic_gradient_graph(library, name, call_attrs, caller, resource_dtypes)
        library.add(graph_to_function_def(graph, grad_name, graph.inputs, graph.outputs))
    return grad_name


def resource_dtypes_of(inputs: Sequence[Tensor]) -> dict[int, dtypes.DType]:
    """{index: variable dtype} for the resource tensors among ``inputs`` whose variable is known."""
    found: dict[int, dtypes.DType] = {}
    for i, t in enumerate(inputs):
        if t.dtype is not None and t.dtype.base_dtype is dtypes.resource:
            dtype = gradient_dtype(t)
            if dtype is not None:
                found[i] = dtype
    return found


def mark_custom_gradient(op: Operation) -> None:
    """Record on a SymbolicGradient node built during a ``custom_gradient="forward"`` (or a
    ``symmetric_inputs`` other than the default) call that its kernel must differentiate the
    function the same way (it does so when the graph runs)."""
    if custom_gradient_mode() != "error":
        op.set_attr(CUSTOM_GRADIENT_ATTR, custom_gradient_mode().encode(), "string")
    if symmetric_inputs_mode() != "tensorflow":
        op.set_attr(SYMMETRIC_INPUTS_ATTR, symmetric_inputs_mode().encode(), "string")


def custom_gradient_of(op: Operation) -> str | None:
    """The custom_gradient choice recorded on a SymbolicGradient node (None: the default)."""
    return _string_attr(op, CUSTOM_GRADIENT_ATTR)


def symmetric_inputs_of(op: Operation) -> str | None:
    """The symmetric_inputs choice recorded on a SymbolicGradient node (None: the default)."""
    return _string_attr(op, SYMMETRIC_INPUTS_ATTR)


def _string_attr(op: Operation, name: str) -> str | None:
    if not op.has_attr(name):
        return None
    value = op.get_attr(name)
    return value.decode() if isinstance(value, bytes) else str(value)
