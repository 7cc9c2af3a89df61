"""The custom gradients a TF2 SavedModel stores: what its object graph says about them, written
onto the gradient functions so the graph differentiates as TensorFlow's loaded model does.

TensorFlow's ``tf.saved_model.save`` (with ``SaveOptions(experimental_custom_gradients=True)``,
the default) traces the gradient function of each ``tf.custom_gradient`` node of the functions
it saves into a library function, and lists it in the library's ``registered_gradients`` under
the node's ``_gradient_op_type``. What that function closes over is kept in the object graph:
its ``bound_inputs`` name ``captured_tensor`` objects (a tensor of the forward function, by
name) or the variables and constants the forward function captures too; its
``output_signature`` says which of its results are None (the traced function does not return
them). :func:`annotate_registered_gradients` writes both onto the gradient FunctionDef (the
attrs of :mod:`gradreg.autodiff.stored_gradients`, which calls it), so a GraphDef written from
the graph keeps them.
"""
from __future__ import annotations

from gradreg.autodiff.stored_gradients import (
    CAPTURED_TENSORS_ATTR,
    FORWARD_FUNCTION_ATTR,
    FORWARD_NODE_ATTR,
    GRADIENT_OUTPUTS_ATTR,
)
from gradreg.model import attrs as attr_util
from gradreg.model.graph import FunctionLibrary
from gradreg.proto import attr_value_pb2, function_pb2, saved_object_graph_pb2, struct_pb2

_CALLS = ("StatefulPartitionedCall", "PartitionedCall")


def annotate_registered_gradients(library: FunctionLibrary, objects: saved_object_graph_pb2.SavedObjectGraph) -> int:
    """Record on each registered gradient function of ``library`` what it captures and which
    results it leaves out (see the module docstring); returns how many were annotated. A
    function whose captures cannot be named (a tensor of another function than its node's) is
    left as it is: differentiating its node then fails as for a gradient not saved."""
    registered = list(library.proto.registered_gradients)
    if not registered:
        return 0
    concrete = {entry.key: entry.value for entry in objects.concrete_functions}
    nodes = _gradient_nodes(library, {g.registered_op_type for g in registered})
    annotated = 0
    for entry in registered:
        fdef, saved = library.get(entry.gradient_func), concrete.get(entry.gradient_func)
        found = nodes.get(entry.registered_op_type)
        if fdef is None or saved is None or found is None:
            continue
        function, node, n_inputs = found
        captures = [_capture_name(objects, concrete, library, function, node_id) for node_id in saved.bound_inputs]
        positions = _output_positions(saved.output_signature)
        if None in captures or positions is None or len(positions) != n_inputs:
            continue
        _set(fdef, FORWARD_FUNCTION_ATTR, attr_value_pb2.AttrValue(s=function.encode()))
        _set(fdef, FORWARD_NODE_ATTR, attr_value_pb2.AttrValue(s=node.encode()))
        _set(fdef, CAPTURED_TENSORS_ATTR, attr_value_pb2.AttrValue(
            list=attr_value_pb2.AttrValue.ListValue(s=[c.encode() for c in captures if c is not None])))
        _set(fdef, GRADIENT_OUTPUTS_ATTR,
             attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(i=positions)))
        annotated += 1
    return annotated


def _gradient_nodes(library: FunctionLibrary, op_types: set[str]) -> dict[str, tuple[str, str, int]]:
    """{gradient op type: (function, node name, number of data inputs)} for the nodes of the
    library's functions whose ``_gradient_op_type`` is one of ``op_types`` (a function call
    with that attr is not one: TensorFlow's attr there names the call's own gradient)."""
    found: dict[str, tuple[str, str, int]] = {}
    for fdef in library.proto.function:
        for node in fdef.node_def:
            if node.op in _CALLS:
                continue
            value = attr_util.entries_to_dict(node.attr).get("_gradient_op_type")
            key = value.s.decode() if value is not None else ""
            if key in op_types:
                found.setdefault(key, (fdef.signature.name, node.name,
                                       sum(1 for i in node.input if not i.startswith("^"))))
    return found


def _capture_name(objects: saved_object_graph_pb2.SavedObjectGraph,
                  concrete: dict[str, saved_object_graph_pb2.SavedConcreteFunction], library: FunctionLibrary,
                  function: str, node_id: int) -> str | None:
    """The tensor of ``function``'s body that bound input ``node_id`` of a gradient function is."""
    if not 0 <= node_id < len(objects.nodes):
        return None
    obj = objects.nodes[node_id]
    if obj.WhichOneof("kind") == "captured_tensor":
        tensor = obj.captured_tensor
        return tensor.name if tensor.concrete_function == function else None
    # a variable, constant or resource: the forward function captures it too, as an argument
    bound = list(concrete[function].bound_inputs) if function in concrete else []
    fdef = library.get(function)
    if node_id not in bound or fdef is None:
        return None
    index = len(fdef.signature.input_arg) - len(bound) + bound.index(node_id)
    return f"{fdef.signature.input_arg[index].name}:0" if index >= 0 else None


def _output_positions(signature: struct_pb2.StructuredValue) -> list[int] | None:
    """Per leaf of the structured outputs, the index among the function's outputs, -1 for None."""
    leaves: list[bool] = []
    if not _leaves(signature, leaves):
        return None
    positions, index = [], 0
    for present in leaves:
        positions.append(index if present else -1)
        index += present
    return positions


def _leaves(value: struct_pb2.StructuredValue, out: list[bool]) -> bool:
    """Append whether each leaf of ``value`` is a tensor (True) or None (False), in TensorFlow's
    flattening order; False if it holds anything else."""
    kind = value.WhichOneof("kind")
    if kind == "none_value":
        out.append(False)
    elif kind in ("tensor_spec_value", "bounded_tensor_spec_value"):
        out.append(True)
    elif kind in ("list_value", "tuple_value"):
        return all(_leaves(v, out) for v in getattr(value, kind).values)
    else:
        return False
    return True


def _set(fdef: function_pb2.FunctionDef, key: str, value: attr_value_pb2.AttrValue) -> None:
    attr_util.set_entry(fdef.attr, key, value)
