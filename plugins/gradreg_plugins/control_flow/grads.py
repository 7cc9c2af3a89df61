"""Gradient rules of the control-flow family.

TensorLists follow TensorFlow's list_ops rules, except TensorListGather's: TensorFlow scatters
the rows' gradients into a list, keeping one row of an index gathered twice; here they are
summed per index (the derivative).

Conditionals: a Merge routes its gradient back to the input that was live (the Merge's
value_index says which), a Switch merges the gradients of its two outputs (the untaken
one is dead, so the Merge yields the live one). These rules need no cond context, so
they work on imported graphs. Loops are not differentiated op by op: the gradient engine
treats a whole v1 loop frame as one unit (gradreg.autodiff.loop_gradients)."""
from __future__ import annotations

from gradreg.autodiff import rules
from gradreg.autodiff.function_gradients import ensure_symbolic_gradient_function, resource_dtypes_of
from gradreg.build.builders import apply_op, as_dense, convert_to_tensor
from gradreg.build.functions import call_attrs_of, make_function
from gradreg.errors import GradientError, describe_node
from gradreg.model import attrs as attr_util
from gradreg.model import dtypes
from gradreg.model.frames import ENTER, EXIT, NEXT_ITERATION
from gradreg.model.graph import Tensor
from gradreg.proto import attr_value_pb2
from gradreg_plugins.control_flow import family


@family.gradient("Merge", "RefMerge")
def _merge_grad(op, grad, _value_index_grad=None):
    if grad is None:
        return [None] * len(op.inputs)
    taken = op.outputs[1]
    if len(op.inputs) == 2:
        false_grad, true_grad = apply_op("Switch", grad, apply_op("Equal", taken, 1))
        return [false_grad, true_grad]
    return [apply_op("Switch", grad, apply_op("Equal", taken, i))[1] for i in range(len(op.inputs))]


@family.gradient("Switch", "RefSwitch")
def _switch_grad(op, false_grad, true_grad):
    grads = [g for g in (false_grad, true_grad) if g is not None]
    if not grads:
        return [None, None]
    if len(grads) == 1:
        # Only a resource output goes without a gradient here (the engine gives zeros to the
        # others): the untaken branch's gradient is zeros like the variable's value, read on
        # that branch so that it is live exactly when that branch is taken.
        missing = 0 if false_grad is None else 1
        if op.inputs[0].dtype.base_dtype is not dtypes.resource:
            raise GradientError(f"{describe_node(op.name, op.type)}: only one branch of the switch has a gradient")
        present = as_dense(grads[0])
        zeros = rules.zeros_like_value(op.outputs[missing], present.dtype.base_dtype)
        false_grad, true_grad = (zeros, present) if missing == 0 else (present, zeros)
    return [apply_op("Merge", [as_dense(false_grad), as_dense(true_grad)], name="cond_grad")[0], None]


@family.gradient("RefIdentity")
def _ref_identity_grad(op, grad):
    return grad


def _loop_op(op, *grads):
    raise GradientError(f"{describe_node(op.name, op.type)} is part of a v1 loop; loops are differentiated "
                        f"as a whole by the gradient engine, not op by op")


for _op_type in sorted(ENTER | EXIT | NEXT_ITERATION):
    family.gradient(_op_type)(_loop_op)

family.not_differentiable("LoopCond", "ControlTrigger", "NoOp", "Assert", "StackV2", "StackPushV2",
                          "StackPopV2", "StackCloseV2", "EmptyTensorList", "TensorListReserve",
                          "TensorListLength", "TensorListElementShape")


# -- functional control flow ---------------------------------------------------------------
# If/Case: the same op over the branches' gradient functions (added to the library).
# While: the loop is run again with its inputs accumulated in TensorLists, then a second
# While pops them in reverse and applies the body's gradient function, once per iteration.
# Every gradient function is SymbolicGradient's convention: (inputs..., output grads...) ->
# input grads, so gradients of gradients work the same way.

def _dense_output_grads(op, grads):
    """A gradient for every output: zeros where none arrived (for a resource output, zeros
    like the variable's value)."""
    return [as_dense(g) if g is not None else rules.zeros_like_value(t) if _known_resource(t) else
            apply_op("ZerosLike", t) for t, g in zip(op.outputs, grads)]


def _known_resource(t) -> bool:
    return t.dtype.base_dtype is dtypes.resource and rules.variable_dtype(t) is not None


def _grad_types(tensors):
    """The dtypes of the gradients of ``tensors``: a resource's is its variable's (float32 when
    unknown: that gradient is dropped)."""
    return [rules.gradient_dtype(t) or dtypes.float32 for t in tensors]


def _func(name: str):
    return attr_value_pb2.NameAttrList(name=name)


def _branch_gradient(op, attr_name: str, inputs) -> str:
    func = op.get_attr(attr_name)
    return ensure_symbolic_gradient_function(op.graph.library, func.name, call_attrs_of(op, attr_name),
                                             f"node '{op.name}'", resource_dtypes_of(inputs))


def _differentiable_only(tensors, grads):
    """The gradients of float, complex and variant (TensorList) inputs, and of resource inputs
    whose variable's type is known (the variable's gradient, as TensorFlow gives it); None for
    the others."""
    return [g if t.dtype.base_dtype.is_differentiable or t.dtype.base_dtype is dtypes.variant
            or _known_resource(t) else None for t, g in zip(tensors, grads)]


@family.gradient("If", "StatelessIf")
def _if_grad(op, *grads):
    inputs = list(op.inputs[1:])
    out = apply_op(op.type, op.inputs[0], inputs + _dense_output_grads(op, grads), Tout=_grad_types(inputs),
                   then_branch=_func(_branch_gradient(op, "then_branch", inputs)),
                   else_branch=_func(_branch_gradient(op, "else_branch", inputs)))
    out = [out] if isinstance(out, Tensor) else list(out)
    return [None] + _differentiable_only(inputs, out)


@family.gradient("Case", "StatelessCase")
def _case_grad(op, *grads):
    inputs = list(op.inputs[1:])
    library = op.graph.library
    resources = resource_dtypes_of(inputs)
    branches = [_func(ensure_symbolic_gradient_function(library, f.name, attr_util.entries_to_dict(f.attr),
                                                        f"node '{op.name}'", resources))
                for f in op.get_attr("branches")]
    out = apply_op(op.type, op.inputs[0], inputs + _dense_output_grads(op, grads), Tout=_grad_types(inputs),
                   branches=branches)
    out = [out] if isinstance(out, Tensor) else list(out)
    return [None] + _differentiable_only(inputs, out)


@family.gradient("While", "StatelessWhile")
def _while_grad(op, *grads):
    graph = op.graph
    library = graph.library
    cond, body = op.get_attr("cond"), op.get_attr("body")
    types = [t.dtype.base_dtype for t in op.inputs]
    grad_types = _grad_types(op.inputs)
    n = len(types)
    body_grad = ensure_symbolic_gradient_function(library, body.name, call_attrs_of(op, "body"), f"node '{op.name}'",
                                                  resource_dtypes_of(op.inputs))
    count_type = dtypes.int32
    # A resource (a variable's handle) is the same in every iteration, as in TensorFlow's while_v2:
    # its slot carries the handle itself, not a list of it (TensorFlow has no list kernels for handles).
    invariant = [t is dtypes.resource for t in types]
    slot_types = [dtypes.resource if same else dtypes.variant for same in invariant]
    acc_cond = make_function(library, f"{cond.name}_accumulating", [count_type] + types + slot_types,
                             lambda count, *rest: [_call(cond.name, rest[:n], [dtypes.bool_])[0]])

    def accumulating_body(count, *rest):
        values, lists = rest[:n], rest[n:]
        pushed = [lst if same else apply_op("TensorListPushBack", lst, v)
                  for lst, v, same in zip(lists, values, invariant)]
        return [count + 1] + _call(body.name, values, types) + pushed
    acc_body = make_function(library, f"{body.name}_accumulating", [count_type] + types + slot_types,
                             accumulating_body)
    empty = [x if same else apply_op("EmptyTensorList", convert_to_tensor(-1, dtypes.int32),
                                     convert_to_tensor(-1, dtypes.int32), element_dtype=t)
             for x, t, same in zip(op.inputs, types, invariant)]
    forward = apply_op("StatelessWhile", [convert_to_tensor(0, count_type)] + list(op.inputs) + empty,
                       cond=_func(acc_cond), body=_func(acc_body), name="accumulate")
    trip_count, lists = forward[0], forward[1 + n:]

    back_cond = make_function(library, f"{body.name}_backward_cond", [count_type] + grad_types + slot_types,
                              lambda count, *rest: [apply_op("Greater", count, 0)])

    def backward_body(count, *rest):
        output_grads, lists = rest[:n], rest[n:]
        popped = [(lst, lst) if same else apply_op("TensorListPopBack", lst, convert_to_tensor(-1, dtypes.int32),
                                                   element_dtype=t)
                  for lst, t, same in zip(lists, types, invariant)]
        values = [p[1] for p in popped]
        input_grads = _call(body_grad, list(values) + list(output_grads), grad_types)
        return [count - 1] + input_grads + [p[0] for p in popped]
    back_body = make_function(library, f"{body.name}_backward_body", [count_type] + grad_types + slot_types,
                              backward_body)
    backward = apply_op("StatelessWhile", [trip_count] + _dense_output_grads(op, grads) + list(lists),
                        cond=_func(back_cond), body=_func(back_body), name="backward")
    return _differentiable_only(op.inputs, list(backward[1:1 + n]))


def _call(name: str, args, out_types) -> list:
    out = apply_op("PartitionedCall", list(args), Tout=list(out_types), f=_func(name))
    return [out] if isinstance(out, Tensor) else list(out)


# -- TensorLists (TensorFlow's list_ops gradients) ---------------------------------------------

def _minus_one():
    return convert_to_tensor(-1, dtypes.int32)


def _row_shape(t):
    """The shape of ``t`` without its first axis (the element shape of a list of its rows)."""
    static = t.shape
    if static.rank is not None and all(d is not None for d in static.dims[1:]):
        return rules.ints(static.dims[1:])
    return apply_op("Slice", apply_op("Shape", t), rules.ints([1]), rules.ints([-1]))


@family.gradient("TensorListPushBack")
def _push_back_grad(op, dlist):
    if dlist is None:
        return [None, None]
    rest, element = apply_op("TensorListPopBack", dlist, rules.shape_vector(op.inputs[1]),
                             element_dtype=op.get_attr("element_dtype"))
    return [rest, element]


@family.gradient("TensorListPopBack")
def _pop_back_grad(op, dlist, delement):
    dtype = op.get_attr("element_dtype")
    if dlist is None:
        dlist = apply_op("EmptyTensorList", apply_op("TensorListElementShape", op.outputs[0], shape_type=dtypes.int32),
                         _minus_one(), element_dtype=dtype)
    if delement is None:
        delement = apply_op("ZerosLike", op.outputs[1])
    return [apply_op("TensorListPushBack", dlist, as_dense(delement)), None]


@family.gradient("TensorListStack")
def _stack_grad(op, dtensor):
    dtensor = as_dense(dtensor)
    return [apply_op("TensorListFromTensor", dtensor, _row_shape(dtensor)), None]


@family.gradient("TensorListFromTensor")
def _from_tensor_grad(op, dlist):
    if dlist is None:
        return [None, None]
    t = op.inputs[0]
    rows = t.shape.dims[0] if t.shape.rank else None
    return [apply_op("TensorListStack", dlist, _row_shape(t), element_dtype=op.get_attr("element_dtype"),
                     num_elements=-1 if rows is None else rows), None]


@family.gradient("TensorListGetItem")
def _get_item_grad(op, ditem):
    dtype = op.get_attr("element_dtype")
    length = apply_op("TensorListLength", op.inputs[0])
    reserved = apply_op("TensorListReserve", op.inputs[2], length, element_dtype=dtype)
    return [apply_op("TensorListSetItem", reserved, op.inputs[1], as_dense(ditem)), None, None]


@family.gradient("TensorListSetItem")
def _set_item_grad(op, dlist):
    if dlist is None:
        return [None, None, None]
    dtype = op.get_attr("element_dtype")
    input_list, index, item = op.inputs
    without_item = apply_op("TensorListSetItem", dlist, index, apply_op("ZerosLike", item))
    ditem = apply_op("TensorListGetItem", dlist, index, rules.shape_vector(item), element_dtype=dtype)
    if op.get_attr("resize_if_index_out_of_bounds"):   # the list grew to reach the index: shrink back
        without_item = apply_op("TensorListResize", without_item, apply_op("TensorListLength", input_list))
    return [without_item, None, ditem]


@family.gradient("TensorListResize")
def _resize_grad(op, dlist):
    if dlist is None:
        return [None, None]
    return [apply_op("TensorListResize", dlist, apply_op("TensorListLength", op.inputs[0])), None]


@family.gradient("TensorListGather")
def _gather_grad(op, dvalues):
    # TensorFlow scatters the rows' gradients into a reserved list, so of an index gathered twice
    # only one row's gradient survives; summing the rows per index is the derivative.
    input_list, indices, _ = op.inputs
    summed = apply_op("UnsortedSegmentSum", as_dense(dvalues), indices, apply_op("TensorListLength", input_list))
    return [apply_op("TensorListFromTensor", summed, _row_shape(summed)), None, None]


def _scatter_grad(op, dlist):
    """The rows of the scattered tensor, gathered back from the list's gradient."""
    tensor, indices = op.inputs[0], op.inputs[1]
    return apply_op("TensorListGather", dlist, indices, _row_shape(tensor), element_dtype=op.get_attr("element_dtype"))


@family.gradient("TensorListScatter")
def _scatter_v1_grad(op, dlist):
    return [None, None, None] if dlist is None else [_scatter_grad(op, dlist), None, None]


@family.gradient("TensorListScatterV2")
def _scatter_v2_grad(op, dlist):
    return [None] * 4 if dlist is None else [_scatter_grad(op, dlist), None, None, None]


@family.gradient("TensorListScatterIntoExistingList")
def _scatter_into_grad(op, dlist):
    if dlist is None:
        return [None, None, None]
    _, tensor, indices = op.inputs
    dtensor = apply_op("TensorListGather", dlist, indices, _row_shape(tensor),
                       element_dtype=op.get_attr("element_dtype"))
    # The scattered rows replaced what the input list held there: no gradient flows back to it.
    without = apply_op("TensorListScatterIntoExistingList", dlist, apply_op("ZerosLike", tensor), indices)
    return [without, dtensor, None]


@family.gradient("TensorListSplit")
def _split_grad(op, dlist):
    if dlist is None:
        return [None, None, None]
    tensor, _, lengths = op.inputs
    element_shape = apply_op("ConcatV2", [rules.ints([-1]), _row_shape(tensor)], rules.ints(0))
    dtensor = apply_op("TensorListConcatV2", dlist, element_shape, lengths, element_dtype=op.get_attr("element_dtype"))
    return [dtensor[0], None, None]


@family.gradient("TensorListConcat", "TensorListConcatV2")
def _concat_grad(op, dtensor, _dlengths=None):
    if dtensor is None:
        return [None] * len(op.inputs)
    element_shape = apply_op("TensorListElementShape", op.inputs[0], shape_type=dtypes.int32)
    dlist = apply_op("TensorListSplit", as_dense(dtensor), element_shape, op.outputs[1],
                     element_dtype=op.get_attr("element_dtype"))
    return [dlist] + [None] * (len(op.inputs) - 1)


family.not_differentiable("TensorListConcatLists", "TensorListPushBackBatch")


# -- Optionals ---------------------------------------------------------------------------------

family.not_differentiable("OptionalNone", "OptionalHasValue")


@family.gradient("OptionalFromValue")
def _optional_from_value_grad(op, grad):
    out = apply_op("OptionalGetValue", grad, output_types=[t.dtype.base_dtype for t in op.inputs],
                   output_shapes=[t.shape for t in op.inputs])
    return [out] if isinstance(out, Tensor) else list(out)


@family.gradient("OptionalGetValue")
def _optional_get_value_grad(op, *grads):
    return [apply_op("OptionalFromValue", [as_dense(g) if g is not None else apply_op("ZerosLike", t)
                                           for t, g in zip(op.outputs, grads)])]


# -- composite tensors as variants (TensorFlow's composite_tensor_ops.py) ---------------------------

@family.gradient("CompositeTensorVariantFromComponents")
def _composite_from_components_grad(op, grad):
    if grad is None:
        return [None] * len(op.inputs)
    out = apply_op("CompositeTensorVariantToComponents", grad, metadata=op.get_attr("metadata"),
                   Tcomponents=op.get_attr("Tcomponents"))
    return [out] if isinstance(out, Tensor) else list(out)


@family.gradient("CompositeTensorVariantToComponents")
def _composite_to_components_grad(op, *grads):
    """The encoding of the components' gradients; a component without one (a ragged tensor's row
    splits) keeps its value, as TensorFlow's rule does."""
    components = [t if g is None else as_dense(g) for t, g in zip(op.outputs, grads)]
    return [apply_op("CompositeTensorVariantFromComponents", components, metadata=op.get_attr("metadata"))]
