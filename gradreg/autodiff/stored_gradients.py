"""Custom gradients stored in a graph's function library: the gradient functions TensorFlow
saves with a SavedModel (``tf.saved_model.SaveOptions(experimental_custom_gradients=True)``,
the default), as for Keras' swish.

A node whose ``_gradient_op_type`` is K (an IdentityN that ``tf.custom_gradient`` wrote) is
differentiated by the library function the library's ``registered_gradients`` names for K,
called as TensorFlow's loader calls it: with one gradient per output of the node (zeros for
those that have none), then the tensors of the forward function it captured when it was
traced. What TensorFlow keeps of those captures in the SavedModel's object graph, the SavedModel
loader writes onto the gradient FunctionDef (:mod:`gradreg.formats.saved_gradients`):

* ``_forward_function``, ``_forward_node``: the function and node the gradient was traced for;
* ``_captured_tensors``: per extra argument, the tensor of that function it takes;
* ``_gradient_outputs``: per input of the node, the function output holding its gradient, or
  -1 (None: TensorFlow's traced function does not return Nones).

A gradient function that takes nothing beyond the gradients needs none of these. The tensors
are found by name in the graph the node is in: the forward function's body, or a graph the
function was inlined into under a name scope (the node's name then ends with the recorded one).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gradreg.build.builders import apply_op, as_dense
from gradreg.errors import GradientError, GradregError, describe_node
from gradreg.model import attrs as attr_util
from gradreg.model import dtypes
from gradreg.model.graph import FunctionLibrary, Operation, Tensor
from gradreg.proto import attr_value_pb2, function_pb2

FORWARD_FUNCTION_ATTR = "_forward_function"
FORWARD_NODE_ATTR = "_forward_node"
CAPTURED_TENSORS_ATTR = "_captured_tensors"
GRADIENT_OUTPUTS_ATTR = "_gradient_outputs"


def stored_gradient(op: Operation, key: str) -> tuple[Callable[..., Any], str] | None:
    """(rule, the gradient function's name) for ``op``, whose ``_gradient_op_type`` is ``key``,
    when the graph's library stores a gradient function for ``key`` that gradreg can call;
    None otherwise."""
    library = op.graph.library
    name = library.registered_gradient(key)
    fdef = library.get(name) if name is not None else None
    if fdef is None:
        return None
    attrs = attr_util.entries_to_dict(fdef.attr)
    captures = _strings(attrs.get(CAPTURED_TENSORS_ATTR))
    if len(fdef.signature.input_arg) != len(op.outputs) + len(captures):
        return None      # captures the SavedModel loader could not name (or none recorded)
    positions = _ints(attrs.get(GRADIENT_OUTPUTS_ATTR))
    if not positions and len(fdef.signature.output_arg) == len(op.inputs):
        positions = list(range(len(op.inputs)))
    if len(positions) != len(op.inputs) or max(positions, default=-1) >= len(fdef.signature.output_arg):
        return None
    forward = (_string(attrs.get(FORWARD_FUNCTION_ATTR)), _string(attrs.get(FORWARD_NODE_ATTR)))

    def rule(op: Operation, *grads: Any) -> list[Tensor | None]:
        inputs = [as_dense(g) if g is not None else apply_op("ZerosLike", t) for g, t in zip(grads, op.outputs)]
        inputs += [_captured(op, name, forward) for name in captures]
        results = _call(fdef, inputs)
        return [results[k] if k >= 0 else None for k in positions]
    return rule, fdef.signature.name


def captured_tensors(library: FunctionLibrary, function: str) -> list[str]:
    """The tensors of library function ``function`` that the stored gradient functions of its
    nodes capture (a graph rewriting the function must keep them, needed or not)."""
    found: list[str] = []
    for name in library.registered_gradient_functions():
        fdef = library.get(name)
        attrs = attr_util.entries_to_dict(fdef.attr) if fdef is not None else {}
        if _string(attrs.get(FORWARD_FUNCTION_ATTR)) == function:
            found += _strings(attrs.get(CAPTURED_TENSORS_ATTR))
    return found


def _call(fdef: function_pb2.FunctionDef, inputs: Sequence[Tensor]) -> list[Tensor]:
    out_types = [dtypes.as_dtype(arg.type) for arg in fdef.signature.output_arg]
    result = apply_op("PartitionedCall", list(inputs), Tout=out_types,
                      f=attr_value_pb2.NameAttrList(name=fdef.signature.name))
    return [result] if isinstance(result, Tensor) else list(result)


def _captured(op: Operation, name: str, forward: tuple[str, str]) -> Tensor:
    """Tensor ``name`` of the forward function, in the graph ``op`` (the forward node) is in."""
    function, node = forward
    prefix = ""
    if node and op.name != node:
        if not op.name.endswith("/" + node):
            raise GradientError(f"{describe_node(op.name, op.type)}: its stored gradient function was traced for node "
                                f"'{node}' of function '{function}' and needs tensor '{name}' of it, which this "
                                f"graph does not have; pass custom_gradient='forward' to differentiate through "
                                f"the node's forward ops instead")
        prefix = op.name[:-len(node)]
    try:
        return op.graph.get_tensor(prefix + name)
    except GradregError:
        raise GradientError(f"{describe_node(op.name, op.type)}: its stored gradient function needs tensor "
                            f"'{prefix + name}', which is not in the graph") from None


def _string(value: attr_value_pb2.AttrValue | None) -> str:
    return value.s.decode() if value is not None else ""


def _strings(value: attr_value_pb2.AttrValue | None) -> list[str]:
    return [s.decode() for s in value.list.s] if value is not None else []


def _ints(value: attr_value_pb2.AttrValue | None) -> list[int]:
    return list(value.list.i) if value is not None else []
