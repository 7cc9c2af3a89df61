"""Control-flow op definitions and shape functions."""
from __future__ import annotations

from gradreg.model import shape_fns as sf
from gradreg.model.shapes import SCALAR, TensorShape
from gradreg_plugins.control_flow import family

op = family.op


def _relaxed(shapes) -> TensorShape:
    """The most specific shape every one of ``shapes`` is an instance of."""
    shapes = list(shapes)
    if not shapes or any(s.rank is None for s in shapes) or len({s.rank for s in shapes}) != 1:
        return TensorShape(None)
    dims = [d[0] if all(x == d[0] for x in d) else None for d in zip(*(s.dims for s in shapes))]
    return TensorShape(dims)


def _switch_shape(ctx):
    return [ctx.input_shape(0), ctx.input_shape(0)]


def _merge_shape(ctx):
    return [_relaxed(ctx.input_shapes), SCALAR]


for prefix, arg in (("", "T"), ("Ref", "Ref(T)")):
    op(f"{prefix}Switch", inputs=[f"data: {arg}", "pred: bool"],
       outputs=[f"output_false: {arg}", f"output_true: {arg}"], attrs=["T: type"], shape=_switch_shape)
    op(f"{prefix}Merge", inputs=[f"inputs: N * {arg}"], outputs=[f"output: {arg}", "value_index: int32"],
       attrs=["T: type", "N: int >= 1"], shape=_merge_shape)
    op(f"{prefix}Enter", inputs=[f"data: {arg}"], outputs=[f"output: {arg}"],
       attrs=["T: type", "frame_name: string", "is_constant: bool = false", "parallel_iterations: int = 10"],
       shape=sf.unchanged)
    op(f"{prefix}Exit", inputs=[f"data: {arg}"], outputs=[f"output: {arg}"], attrs=["T: type"], shape=sf.unchanged)
    op(f"{prefix}NextIteration", inputs=[f"data: {arg}"], outputs=[f"output: {arg}"], attrs=["T: type"],
       shape=sf.unchanged)

# A TF1 ref variable carried by a v1 loop passes its loop switch through RefIdentity (the ref itself).
op("RefIdentity", inputs=["input: Ref(T)"], outputs=["output: Ref(T)"], attrs=["T: type"], shape=sf.unchanged,
   allows_uninitialized_input=True)
op("LoopCond", inputs=["input: bool"], outputs=["output: bool"], shape=sf.unchanged)
op("ControlTrigger")
op("NoOp", api="no_op")
op("Assert", inputs=["condition: bool", "data: T"], attrs=["T: list(type) >= 1", "summarize: int = 3"],
   stateful=True)

# Stacks: how TensorFlow's v1 loop gradients keep forward values for the backward loop.
op("StackV2", inputs=["max_size: int32"], outputs=["handle: resource"],
   attrs=["elem_type: type", "stack_name: string = ''"], shape=sf.scalar, stateful=True)
op("StackPushV2", inputs=["handle: resource", "elem: T"], outputs=["output: T"],
   attrs=["T: type", "swap_memory: bool = false"], shape=lambda ctx: ctx.input_shape(1), stateful=True)
op("StackPopV2", inputs=["handle: resource"], outputs=["elem: elem_type"], attrs=["elem_type: type"],
   stateful=True)
op("StackCloseV2", inputs=["handle: resource"], stateful=True)


# -- functional control flow (TensorFlow 2's If/While/Case over library functions) -------------

def _concat_shape(element_shape: TensorShape) -> TensorShape:
    """Elements concatenated along their first axis: that axis' length is not known statically."""
    dims = element_shape.dims
    if dims is None or not dims:
        return TensorShape(None)
    return TensorShape([None, *dims[1:]])


def _declared_shapes(ctx):
    shapes = ctx.attr("output_shapes")
    if shapes and len(shapes) == ctx.num_outputs:
        return shapes if ctx.num_outputs != 1 else shapes[0]
    return sf.unknown(ctx)


_IF_ATTRS = ["Tcond: type", "Tin: list(type) >= 0", "Tout: list(type) >= 0", "then_branch: func",
             "else_branch: func", "output_shapes: list(shape) = []"]
op("If", inputs=["cond: Tcond", "input: Tin"], outputs=["output: Tout"], attrs=_IF_ATTRS,
   shape=_declared_shapes, stateful=True)
op("StatelessIf", inputs=["cond: Tcond", "input: Tin"], outputs=["output: Tout"], attrs=_IF_ATTRS,
   shape=_declared_shapes)
_WHILE_ATTRS = ["T: list(type) >= 0", "cond: func", "body: func", "output_shapes: list(shape) = []",
                "parallel_iterations: int = 10"]
op("While", inputs=["input: T"], outputs=["output: T"], attrs=_WHILE_ATTRS, shape=_declared_shapes,
   stateful=True)
op("StatelessWhile", inputs=["input: T"], outputs=["output: T"], attrs=_WHILE_ATTRS, shape=_declared_shapes)
_CASE_ATTRS = ["Tin: list(type) >= 0", "Tout: list(type) >= 0", "branches: list(func) >= 1",
               "output_shapes: list(shape) = []"]
op("Case", inputs=["branch_index: int32", "input: Tin"], outputs=["output: Tout"], attrs=_CASE_ATTRS,
   shape=_declared_shapes, stateful=True)
op("StatelessCase", inputs=["branch_index: int32", "input: Tin"], outputs=["output: Tout"], attrs=_CASE_ATTRS,
   shape=_declared_shapes)

# -- TensorLists: the accumulators of TensorFlow 2 loops and their gradients ---------------------

_SHAPE_TYPE = "shape_type: {int32, int64}"
op("EmptyTensorList", inputs=["element_shape: shape_type", "max_num_elements: int32"], outputs=["handle: variant"],
   attrs=["element_dtype: type", _SHAPE_TYPE], shape=sf.scalar)
op("TensorListReserve", inputs=["element_shape: shape_type", "num_elements: int32"], outputs=["handle: variant"],
   attrs=["element_dtype: type", _SHAPE_TYPE], shape=sf.scalar)
op("TensorListFromTensor", inputs=["tensor: element_dtype", "element_shape: shape_type"],
   outputs=["output_handle: variant"], attrs=["element_dtype: type", _SHAPE_TYPE], shape=sf.scalar)
op("TensorListPushBack", inputs=["input_handle: variant", "tensor: element_dtype"], outputs=["output_handle: variant"],
   attrs=["element_dtype: type"], shape=sf.scalar)
op("TensorListPopBack", inputs=["input_handle: variant", "element_shape: int32"],
   outputs=["output_handle: variant", "tensor: element_dtype"], attrs=["element_dtype: type"],
   shape=lambda ctx: [TensorShape(()), ctx.input_as_shape(1)])
op("TensorListStack", inputs=["input_handle: variant", "element_shape: int32"], outputs=["tensor: element_dtype"],
   attrs=["element_dtype: type", "num_elements: int = -1"],
   shape=lambda ctx: TensorShape([ctx.attr("num_elements") if ctx.attr("num_elements") >= 0 else None])
   .concatenate(ctx.input_as_shape(1)))
op("TensorListGetItem", inputs=["input_handle: variant", "index: int32", "element_shape: Tshape"],
   outputs=["item: element_dtype"], attrs=["element_dtype: type", "Tshape: {int32, int64} = int32"],
   shape=lambda ctx: ctx.input_as_shape(2))
op("TensorListSetItem", inputs=["input_handle: variant", "index: int32", "item: element_dtype"],
   outputs=["output_handle: variant"], attrs=["element_dtype: type", "resize_if_index_out_of_bounds: bool = false"],
   shape=sf.scalar)
op("TensorListLength", inputs=["input_handle: variant"], outputs=["length: int32"], shape=sf.scalar)
op("TensorListElementShape", inputs=["input_handle: variant"], outputs=["element_shape: shape_type"],
   attrs=[_SHAPE_TYPE], shape=lambda ctx: TensorShape([None]))
# What tf.TensorArray (TensorFlow 2) and vectorized maps build from lists.
op("TensorListGather", inputs=["input_handle: variant", "indices: int32", "element_shape: int32"],
   outputs=["values: element_dtype"], attrs=["element_dtype: type"],
   shape=lambda ctx: ctx.input_shape(1).concatenate(ctx.input_as_shape(2)))
op("TensorListScatter", inputs=["tensor: element_dtype", "indices: int32", "element_shape: shape_type"],
   outputs=["output_handle: variant"], attrs=["element_dtype: type", _SHAPE_TYPE], shape=sf.scalar)
op("TensorListScatterV2", inputs=["tensor: element_dtype", "indices: int32", "element_shape: shape_type",
                                  "num_elements: int32"],
   outputs=["output_handle: variant"], attrs=["element_dtype: type", _SHAPE_TYPE], shape=sf.scalar)
op("TensorListScatterIntoExistingList", inputs=["input_handle: variant", "tensor: element_dtype", "indices: int32"],
   outputs=["output_handle: variant"], attrs=["element_dtype: type"], shape=sf.scalar)
op("TensorListSplit", inputs=["tensor: element_dtype", "element_shape: shape_type", "lengths: int64"],
   outputs=["output_handle: variant"], attrs=["element_dtype: type", _SHAPE_TYPE], shape=sf.scalar)
op("TensorListConcat", inputs=["input_handle: variant"], outputs=["tensor: element_dtype", "lengths: int64"],
   attrs=["element_dtype: type", "element_shape: shape = ?"],
   shape=lambda ctx: [_concat_shape(ctx.attr("element_shape")), TensorShape([None])])
op("TensorListConcatV2", inputs=["input_handle: variant", "element_shape: shape_type", "leading_dims: int64"],
   outputs=["tensor: element_dtype", "lengths: int64"], attrs=["element_dtype: type", _SHAPE_TYPE],
   shape=lambda ctx: [_concat_shape(ctx.input_as_shape(1)), TensorShape([None])])
op("TensorListResize", inputs=["input_handle: variant", "size: int32"], outputs=["output_handle: variant"],
   shape=sf.scalar)
op("TensorListConcatLists", inputs=["input_a: variant", "input_b: variant"], outputs=["output: variant"],
   attrs=["element_dtype: type"], shape=lambda ctx: ctx.input_shape(0))
op("TensorListPushBackBatch", inputs=["input_handles: variant", "tensor: element_dtype"],
   outputs=["output_handles: variant"], attrs=["element_dtype: type"], shape=lambda ctx: ctx.input_shape(0))

# -- Optionals: how TensorFlow 2's cond/case gradients get a branch's intermediate values ------------
# (a branch that did not compute a value gives OptionalNone; the gradient branch unwraps it).

op("OptionalFromValue", inputs=["components: Toutput_types"], outputs=["optional: variant"],
   attrs=["Toutput_types: list(type) >= 1"], shape=sf.scalar)
op("OptionalNone", outputs=["optional: variant"], shape=sf.scalar)
op("OptionalHasValue", inputs=["optional: variant"], outputs=["has_value: bool"], shape=sf.scalar)
op("OptionalGetValue", inputs=["optional: variant"], outputs=["components: output_types"],
   attrs=["output_types: list(type) >= 1", "output_shapes: list(shape) >= 1"], shape=_declared_shapes)

# -- composite tensors as variants: a composite tensor's components (a RaggedTensor's values and
# splits, ...) in one DT_VARIANT scalar, its type spec in ``metadata`` --------------------------------

op("CompositeTensorVariantFromComponents", inputs=["components: Tcomponents"], outputs=["encoded: variant"],
   attrs=["metadata: string", "Tcomponents: list(type) >= 0"], shape=sf.scalar)
op("CompositeTensorVariantToComponents", inputs=["encoded: variant"], outputs=["components: Tcomponents"],
   attrs=["metadata: string", "Tcomponents: list(type) >= 0"], shape=sf.unknown)
