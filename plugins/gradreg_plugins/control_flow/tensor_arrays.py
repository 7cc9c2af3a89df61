"""TensorFlow 1's TensorArrays (TensorArrayV3 and its Read/Write/Gather/Scatter/Concat/Split/
Size/Close/Grad ops): what ``tf.compat.v1.nn.dynamic_rnn`` and v1 ``tf.TensorArray`` build; and
the same ops of the first two versions (``TensorArray``, ``TensorArrayRead``, ...: a ref-typed
string handle; ``TensorArrayV2``, ``TensorArrayReadV2``, ...: a string handle, and neither
version has a flow output on the array itself), which GraphDefs written before versions 16
and 26 hold. All three versions share the array and the kernels.

A TensorArray is a mutable array behind a resource handle; each op that changes it returns a
``flow`` scalar that the next op takes, which orders them (the interpreter runs by data
dependencies, so the flows are what it needs). Gradients follow TensorFlow's scheme: every
gradient call (named by its name scope, "gradients", "gradients_1", ...) gets one gradient
array per forward array (TensorArrayGradV3), whose writes add up; the gradient of a read is
a write into it, carried by the flow's gradient, and so on.
"""
from __future__ import annotations

import numpy as np

from gradreg.build.builders import apply_op, as_dense
from gradreg.errors import ExecutionError, describe_node
from gradreg.model import shape_fns as sf
from gradreg.model.shapes import SCALAR, TensorShape
from gradreg_plugins.control_flow import family

op = family.op
kernel = family.kernel
# -- definitions ---------------------------------------------------------------------------------

_STATEFUL = {"stateful": True}
# version suffix -> the type of its array handle: version 1's is a ref to a string vector (in
# TensorFlow [container, name]), version 2's a string vector, version 3's a resource. gradreg's
# handle of every version is the array itself, a scalar (TensorFlow gives each shape [2]).
VERSIONS = {"": "Ref(string)", "V2": "string", "V3": "resource"}
# Each version's attrs in TensorFlow's order (the order of the builders' keyword arguments).
_SHAPE, _DYNAMIC, _CLEAR, _NAME = ("element_shape: shape = ?", "dynamic_size: bool = false",
                                   "clear_after_read: bool = true", "tensor_array_name: string = ''")
_CREATE_ATTRS = {"": ["dtype: type", _DYNAMIC, _CLEAR, _NAME, _SHAPE],
                 "V2": ["dtype: type", _SHAPE, _DYNAMIC, _CLEAR, _NAME],
                 "V3": ["dtype: type", _SHAPE, _DYNAMIC, _CLEAR, "identical_element_shapes: bool = false", _NAME]}


def _version(op) -> str:
    """The version suffix of a TensorArray op ("", "V2" or "V3")."""
    return op.type[-2:] if op.type[-2:] in ("V2", "V3") else ""


op("TensorArrayV3", inputs=["size: int32"], outputs=["handle: resource", "flow: float"],
   attrs=_CREATE_ATTRS["V3"],
   shape=lambda ctx: [SCALAR, SCALAR], **_STATEFUL)
op("TensorArrayGradV3", inputs=["handle: resource", "flow_in: float"], outputs=["grad_handle: resource",
                                                                               "flow_out: float"],
   attrs=["source: string"], shape=lambda ctx: [SCALAR, SCALAR], **_STATEFUL)
for _v in ("", "V2"):
    op(f"TensorArray{_v}", inputs=["size: int32"], outputs=[f"handle: {VERSIONS[_v]}"], attrs=_CREATE_ATTRS[_v],
       shape=sf.scalar, **_STATEFUL)
    # The gradient array of version 1 takes the forward handle by value.
    op(f"TensorArrayGrad{_v}", inputs=["handle: string", "flow_in: float"], outputs=[f"grad_handle: {VERSIONS[_v]}"],
       attrs=["source: string"], shape=sf.scalar, **_STATEFUL)

for _v, _handle in VERSIONS.items():
    _h = f"handle: {_handle}"
    op(f"TensorArrayWrite{_v}", inputs=[_h, "index: int32", "value: T", "flow_in: float"],
       outputs=["flow_out: float"], attrs=["T: type"], shape=sf.scalar, **_STATEFUL)
    op(f"TensorArrayRead{_v}", inputs=[_h, "index: int32", "flow_in: float"], outputs=["value: dtype"],
       attrs=["dtype: type"], shape=sf.unknown, **_STATEFUL)
    op(f"TensorArrayGather{_v}", inputs=[_h, "indices: int32", "flow_in: float"], outputs=["value: dtype"],
       attrs=["dtype: type", "element_shape: shape = ?"],
       shape=lambda ctx: ctx.input_shape(1).concatenate(ctx.attr("element_shape")), **_STATEFUL)
    op(f"TensorArrayScatter{_v}", inputs=[_h, "indices: int32", "value: T", "flow_in: float"],
       outputs=["flow_out: float"], attrs=["T: type"], shape=sf.scalar, **_STATEFUL)
    op(f"TensorArrayConcat{_v}", inputs=[_h, "flow_in: float"], outputs=["value: dtype", "lengths: int64"],
       attrs=["dtype: type", "element_shape_except0: shape = ?"],
       shape=lambda ctx: [TensorShape([None]).concatenate(ctx.attr("element_shape_except0")), TensorShape([None])],
       **_STATEFUL)
    op(f"TensorArraySplit{_v}", inputs=[_h, "value: T", "lengths: int64", "flow_in: float"],
       outputs=["flow_out: float"], attrs=["T: type"], shape=sf.scalar, **_STATEFUL)
    op(f"TensorArraySize{_v}", inputs=[_h, "flow_in: float"], outputs=["size: int32"], shape=sf.scalar, **_STATEFUL)
    op(f"TensorArrayClose{_v}", inputs=[_h], **_STATEFUL)

# -- the array -------------------------------------------------------------------------------------

_FLOW = np.float32(0.0)


class TensorArray:
    """A TensorArrayV3 resource. ``values[i]`` is None until written; a read of an array with
    ``clear_after_read`` clears the element. ``shapes[i]`` is the shape last written at i (kept
    when a read clears the element). A gradient array adds up repeated writes and reads an
    unwritten element as zeros of the forward element's shape (TensorFlow copies the shapes
    into the gradient array), else of the element shape when it is known."""

    __slots__ = ("name", "dtype", "element_shape", "dynamic_size", "clear_after_read", "values", "cleared",
                 "shapes", "is_grad", "grads")

    def __init__(self, name: str, dtype, size: int, element_shape, dynamic_size: bool, clear_after_read: bool,
                 is_grad: bool = False):
        self.name = name
        self.dtype = dtype
        self.element_shape = element_shape          # list of int|None, or None (unknown rank)
        self.dynamic_size = dynamic_size
        self.clear_after_read = clear_after_read
        self.values: list = [None] * size
        self.cleared = [False] * size
        self.shapes: list[tuple[int, ...] | None] = [None] * size
        self.is_grad = is_grad
        self.grads: dict[str, TensorArray] = {}     # gradient source -> gradient array

    def write(self, i: int, value) -> None:
        if i < 0 or (i >= len(self.values) and not self.dynamic_size):
            raise ValueError(f"TensorArray {self.name}: index {i} out of range for size {len(self.values)}")
        if i >= len(self.values):
            grow = i + 1 - len(self.values)
            self.values.extend([None] * grow)
            self.cleared.extend([False] * grow)
            self.shapes.extend([None] * grow)
        value = np.asarray(value, dtype=self.dtype.storage)
        if self.values[i] is not None or self.cleared[i]:
            if not self.is_grad:
                raise ValueError(f"TensorArray {self.name}: could not write to index {i}: it has already been "
                                 f"written to")
            if self.values[i] is not None:
                if self.values[i].shape != value.shape:
                    raise ValueError(f"TensorArray {self.name}: adding a value of shape {list(value.shape)} to "
                                     f"one of shape {list(self.values[i].shape)} at index {i}")
                value = self.values[i] + value
        self.values[i] = value
        self.cleared[i] = False
        self.shapes[i] = value.shape

    def read(self, i: int):
        if not 0 <= i < len(self.values):
            raise ValueError(f"TensorArray {self.name}: index {i} out of range for size {len(self.values)}")
        value = self.values[i]
        if value is None:
            if self.cleared[i]:
                raise ValueError(f"TensorArray {self.name}: could not read index {i} twice because it was "
                                 f"cleared after a previous read (perhaps try setting clear_after_read = false?)")
            if self.is_grad and self.shapes[i] is not None:
                return np.zeros(self.shapes[i], dtype=self.dtype.storage)
            if self.is_grad and self.element_shape is not None and None not in self.element_shape:
                return np.zeros(self.element_shape, dtype=self.dtype.storage)
            raise ValueError(f"TensorArray {self.name}: could not read from index {i}: it has not yet been "
                             f"written to")
        if self.clear_after_read:
            self.values[i] = None
            self.cleared[i] = True
        return value

    def gradient(self, source: str) -> TensorArray:
        found = self.grads.get(source)
        if found is None:
            shape = self.element_shape
            known = next((np.shape(v) for v in self.values if v is not None), None)
            if (shape is None or None in shape) and known is not None:
                shape = list(known)
            found = self.grads[source] = TensorArray(f"{self.name}@{source}", self.dtype, len(self.values), shape,
                                                     False, True, is_grad=True)
            found.shapes = list(self.shapes)
        return found

    def __repr__(self) -> str:
        return f"<TensorArray {self.name} ({len(self.values)} {self.dtype.name})>"


class TensorArrayRef:
    """Version 1's handle, a reference: where a non-reference input takes it (TensorArrayGrad's
    handle) the interpreter reads it (``read()``), as it reads a TF1 variable; the version 1
    kernels take the array out of it."""

    __slots__ = ("array",)

    def __init__(self, array: TensorArray):
        self.array = array

    def read(self) -> TensorArray:
        return self.array

    def __repr__(self) -> str:
        return f"<ref to {self.array!r}>"


def _failing(op, fn):
    """``fn`` with a ValueError turned into an ExecutionError naming the node."""
    def run(*args):
        try:
            return fn(*args)
        except ValueError as exc:
            raise ExecutionError(f"{describe_node(op.name, op.type)}: {exc}", op.name, op.type) from None
    return run


def _shape_attr(op, name):
    shape = op.get_attr(name)
    return None if shape.rank is None else list(shape.dims)


# -- kernels --------------------------------------------------------------------------------------

def _dereferenced(factory):
    """A version 1 kernel: ``factory``'s with the array taken out of the reference handle."""
    def factory_v1(op, ctx):
        compute = factory(op, ctx)
        return lambda handle, *rest: compute(handle.array, *rest)
    return factory_v1


def _every_version(name: str):
    """Register a kernel for the op ``name`` of every version (TensorArrayRead, ...V2, ...V3)."""
    def register(factory):
        for version in VERSIONS:
            kernel(f"TensorArray{name}{version}")(_dereferenced(factory) if version == "" else factory)
        return factory
    return register


@kernel("TensorArray")
@kernel("TensorArrayV2")
@kernel("TensorArrayV3")
def _tensor_array(op, ctx):
    dtype = op.get_attr("dtype")
    element_shape = _shape_attr(op, "element_shape")
    name = op.get_attr("tensor_array_name").decode() or op.name
    dynamic, clear = op.get_attr("dynamic_size"), op.get_attr("clear_after_read")
    version = _version(op)

    def create(size):
        n = int(size)
        ctx.check_elements(n, op)
        array = TensorArray(name, dtype, n, element_shape, dynamic, clear)
        if version == "V3":
            return array, _FLOW
        return array if version == "V2" else TensorArrayRef(array)    # no flow before version 3
    return _failing(op, create)


@_every_version("Write")
def _write(op, ctx):
    def write(array, index, value, flow):
        array.write(int(index), value)
        return _FLOW
    return _failing(op, write)


@_every_version("Read")
def _read(op, ctx):
    return _failing(op, lambda array, index, flow: array.read(int(index)))


def _stack_values(array: TensorArray, values: list, element_shape):
    if values:
        return np.stack(values)
    shape = element_shape if element_shape is not None else array.element_shape
    if shape is None or None in shape:
        raise ValueError(f"TensorArray {array.name}: gathering no elements needs a known element shape")
    return np.zeros([0, *shape], dtype=array.dtype.storage)


@_every_version("Gather")
def _gather(op, ctx):
    element_shape = _shape_attr(op, "element_shape")

    def gather(array, indices, flow):
        index = np.asarray(indices)
        values = [array.read(i) for i in index.reshape(-1).tolist()]
        stacked = _stack_values(array, values, element_shape)
        return stacked.reshape(index.shape + stacked.shape[1:])
    return _failing(op, gather)


@_every_version("Scatter")
def _scatter(op, ctx):
    def scatter(array, indices, value, flow):
        rows = np.asarray(value)
        index = np.asarray(indices).reshape(-1)
        if rows.ndim == 0 or rows.shape[0] != len(index):
            raise ValueError(f"scatter needs one row per index: {len(index)} indices, a value of shape "
                             f"{list(rows.shape)}")
        for k, i in enumerate(index.tolist()):
            array.write(i, rows[k])
        return _FLOW
    return _failing(op, scatter)


@_every_version("Concat")
def _concat(op, ctx):
    except0 = _shape_attr(op, "element_shape_except0")

    def concat(array, flow):
        values = [array.read(i) for i in range(len(array.values))]
        lengths = np.array([np.shape(v)[0] for v in values], np.int64)
        if not values:
            if except0 is None or None in except0:
                raise ValueError(f"TensorArray {array.name}: concatenating no elements needs a known element shape")
            return np.zeros([0, *except0], dtype=array.dtype.storage), lengths
        return np.concatenate(values), lengths
    return _failing(op, concat)


@_every_version("Split")
def _split(op, ctx):
    def split(array, value, lengths, flow):
        rows = np.asarray(value)
        start = 0
        for i, length in enumerate(np.asarray(lengths).reshape(-1).tolist()):
            if length < 0 or start + length > rows.shape[0]:
                raise ValueError(f"the lengths do not fit a value of {rows.shape[0]} rows")
            array.write(i, rows[start:start + length])
            start += length
        return _FLOW
    return _failing(op, split)


_every_version("Size")(lambda op, ctx: lambda array, flow: np.int32(len(array.values)))
_every_version("Close")(lambda op, ctx: lambda array: None)


@kernel("TensorArrayGrad")
@kernel("TensorArrayGradV2")
@kernel("TensorArrayGradV3")
def _grad(op, ctx):
    source = op.get_attr("source").decode()
    version = _version(op)
    if version == "V3":
        return lambda array, flow: (array.gradient(source), flow)
    if version == "V2":
        return lambda array, flow: array.gradient(source)
    return lambda array, flow: TensorArrayRef(array.gradient(source))   # its input is read already


# -- gradients --------------------------------------------------------------------------------------
# The gradient array of the call in progress: its name scope ("gradients", "gradients_1", ...)
# is the first component of the incoming gradient's name, as TensorFlow's _GetGradSource finds it.

# Each version's rules build that version's ops: a V2 array's gradient array is a V2 one.

for _suffix in VERSIONS:
    family.not_differentiable(f"TensorArray{_suffix}", f"TensorArrayGrad{_suffix}", f"TensorArraySize{_suffix}",
                              f"TensorArrayClose{_suffix}")


def _source(grad) -> str:
    parts = grad.op.name.split("/")
    return next((p for p in parts if p.startswith("gradients")), "gradients")


def _gradient_array(op, flow, grad):
    """(gradient array handle, its flow) of the forward array ``op`` works on, for the gradient
    call ``grad`` (an incoming gradient) belongs to. Versions 1 and 2 give the gradient array
    no flow of its own: the forward flow orders its ops."""
    version = _version(op)
    if version == "V3":
        return apply_op("TensorArrayGradV3", op.inputs[0], flow, source=_source(grad))
    return apply_op(f"TensorArrayGrad{version}", op.inputs[0], flow, source=_source(grad)), flow


def _read_grad(op, grad):
    handle, flow = _gradient_array(op, op.inputs[2], grad)
    written = apply_op(f"TensorArrayWrite{_version(op)}", handle, op.inputs[1], as_dense(grad), flow)
    return [None, None, written]


def _write_grad(op, flow):
    handle, flow = _gradient_array(op, flow, flow)
    value = apply_op(f"TensorArrayRead{_version(op)}", handle, op.inputs[1], flow, dtype=op.get_attr("T"))
    return [None, None, value, flow]


def _gather_grad(op, grad):
    handle, flow = _gradient_array(op, op.inputs[2], grad)
    return [None, None, apply_op(f"TensorArrayScatter{_version(op)}", handle, op.inputs[1], as_dense(grad), flow)]


def _scatter_grad(op, flow):
    handle, flow = _gradient_array(op, flow, flow)
    value = apply_op(f"TensorArrayGather{_version(op)}", handle, op.inputs[1], flow, dtype=op.get_attr("T"))
    return [None, None, value, flow]


def _concat_grad(op, grad, _dlengths=None):
    handle, flow = _gradient_array(op, op.inputs[1], grad)
    return [None, apply_op(f"TensorArraySplit{_version(op)}", handle, as_dense(grad), op.outputs[1], flow)]


def _split_grad(op, flow):
    handle, flow = _gradient_array(op, flow, flow)
    value, _ = apply_op(f"TensorArrayConcat{_version(op)}", handle, flow, dtype=op.get_attr("T"))
    return [None, value, None, flow]


for _suffix in VERSIONS:
    for _name, _rule in (("Read", _read_grad), ("Write", _write_grad), ("Gather", _gather_grad),
                         ("Scatter", _scatter_grad), ("Concat", _concat_grad), ("Split", _split_grad)):
        family.gradient(f"TensorArray{_name}{_suffix}")(_rule)
