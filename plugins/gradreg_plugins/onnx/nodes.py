"""An onnx-family Operation seen as the ONNX node it stands for.

:func:`onnx_inputs` and :func:`onnx_outputs` give the node's ONNX arguments by position (None
for an absent optional one), :func:`attribute_values` its ONNX attributes (the NodeProto itself,
which needs the onnx package, is :mod:`protos`'). Element types map between gradreg DTypes and
ONNX's TensorProto.DataType codes here, and :func:`to_onnx_array` / :func:`from_onnx_value`
convert values between gradreg's storage and onnx.reference's (bfloat16 is held in float32
by gradreg, as ml_dtypes.bfloat16 by onnx).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gradreg.build.functions import function_graph
from gradreg.errors import GraphError, describe_node
from gradreg.model import dtypes
from gradreg.model.dtypes import DType
from gradreg_plugins.onnx.schemas import OnnxSchema, Param, schema_for

# gradreg dtype name <-> ONNX TensorProto.DataType (stable numbers of onnx.proto).
ONNX_ELEMENT_TYPES: dict[str, int] = {
    "float32": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7, "string": 8,
    "bool": 9, "float16": 10, "float64": 11, "uint32": 12, "uint64": 13, "complex64": 14, "complex128": 15,
    "bfloat16": 16, "float8_e4m3fn": 17, "float8_e4m3fnuz": 18, "float8_e5m2": 19, "float8_e5m2fnuz": 20,
    "uint4": 21, "int4": 22, "float4_e2m1fn": 23, "uint2": 25, "int2": 26,
}
_DTYPE_OF_ELEMENT = {code: name for name, code in ONNX_ELEMENT_TYPES.items()}


def onnx_element_type(dtype: DType) -> int:
    """ONNX's element type code of a gradreg dtype; GraphError if ONNX has none."""
    code = ONNX_ELEMENT_TYPES.get(dtype.base_dtype.name)
    if code is None:
        raise GraphError(f"dtype {dtype.name} has no ONNX element type")
    return code


def tensor_dtype(t: Any) -> DType:
    """A tensor's dtype (every tensor an op outputs has one; GraphError otherwise)."""
    if t.dtype is None:
        raise GraphError(f"{t.name} has no dtype")
    return t.dtype


def dtype_of_element_type(code: int, where: str = "") -> DType:
    """The gradreg dtype of an ONNX element type code; GraphError naming ``where`` if none."""
    name = _DTYPE_OF_ELEMENT.get(code)
    if name is None:
        raise GraphError(f"{where + ': ' if where else ''}ONNX element type {code} has no gradreg dtype")
    return dtypes.as_dtype(name)


# -- arguments ------------------------------------------------------------------------------------

def schema_of(op) -> OnnxSchema:
    schema = schema_for(op.type)
    if schema is None:
        raise GraphError(f"{describe_node(op.name, op.type)} is not an ONNX op")
    return schema


def param_counts(op, params: Sequence[Param]) -> list[int]:
    """How many values each ONNX parameter of ``op`` has (0 for an absent optional one)."""
    counts = []
    for p in params:
        if p.count_attr:
            counts.append(int(op.get_attr(p.count_attr)))
        elif p.types_attr:
            counts.append(len(op.get_attr(p.types_attr)))
        else:
            counts.append(1)
    return counts


def _positional(values: Sequence[Any], params: Sequence[Param], counts: Sequence[int]) -> list:
    out: list[Any] = []
    i = 0
    for p, n in zip(params, counts):
        if p.option == "variadic":
            out.extend(values[i:i + n])
        else:
            out.append(values[i] if n else None)
        i += n
    return out


def input_layout(op) -> list[int | None]:
    """For each ONNX input position of ``op``: the index of its value among op.inputs, or None."""
    schema = schema_of(op)
    counts = param_counts(op, schema.inputs)
    return _positional(list(range(sum(counts))), schema.inputs, counts)


def output_layout(op) -> list[int | None]:
    """For each ONNX output position of ``op``: the index among op.outputs, or None if absent.
    Positions after the last present output are left out."""
    schema = schema_of(op)
    counts = param_counts(op, schema.outputs)
    layout = _positional(list(range(sum(counts))), schema.outputs, counts)
    while layout and layout[-1] is None:
        layout.pop()
    return layout


def onnx_inputs(op) -> list:
    """op's ONNX inputs by position: Tensors, None for absent optional inputs."""
    return [None if i is None else op.inputs[i] for i in input_layout(op)]


def onnx_outputs(op) -> list:
    """op's ONNX outputs by position: Tensors, None for absent optional outputs."""
    return [None if i is None else op.outputs[i] for i in output_layout(op)]


def captured_inputs(op) -> list:
    """The outer values an op with subgraphs passes to them (after its ONNX inputs)."""
    schema = schema_of(op)
    if not schema.has_subgraphs:
        return []
    n = sum(param_counts(op, schema.inputs))
    return list(op.inputs[n:])


def argument_attrs(schema: OnnxSchema, inputs: Sequence[Any], outputs: Sequence[Any],
                   dtype_of: Any) -> dict[str, Any]:
    """The count and type attrs for ONNX arguments given by position (None = absent), with
    ``dtype_of(value)`` giving a present value's DType (None if unknown)."""
    attrs: dict[str, Any] = {}
    for params, values in ((schema.inputs, inputs), (schema.outputs, outputs)):
        values = list(values)
        for index, p in enumerate(params):
            if p.option == "variadic":
                mine = [v for v in values[index:] if v is not None]
            else:
                mine = [values[index]] if index < len(values) and values[index] is not None else []
            if p.count_attr:
                attrs[p.count_attr] = len(mine)
            if p.types_attr:
                attrs[p.types_attr] = [dtype_of(v) for v in mine]
            elif p.fixed_dtype is None and p.type not in attrs:
                for v in mine:
                    dt = dtype_of(v)
                    if dt is not None:
                        attrs[p.type] = dt.base_dtype
                        break
    return attrs


def attribute_values(op) -> dict[str, Any]:
    """The ONNX attributes present on ``op`` (Python values as get_attr returns them)."""
    schema = schema_of(op)
    names = set(op.attr_names())
    return {name: op.get_attr(name) for name in schema.attributes if name in names}


# -- values -----------------------------------------------------------------------------------------

def to_onnx_array(value: Any, dtype: DType | None = None) -> Any:
    """A gradreg value as onnx holds it: bfloat16 (a float32 array in gradreg) becomes an
    ml_dtypes.bfloat16 array, strings (bytes in gradreg) str; everything else is unchanged."""
    if not isinstance(value, np.ndarray):
        return value
    if dtype is not None and dtype.base_dtype is dtypes.bfloat16 and value.dtype == np.float32:
        import ml_dtypes  # start-up: only bfloat16 values handed to onnx need it
        return value.astype(ml_dtypes.bfloat16)
    if value.dtype == object:
        return _map_strings(value, lambda s: s.decode("utf-8", "surrogateescape") if isinstance(s, bytes) else s)
    return value


def _map_strings(array: np.ndarray, fn) -> np.ndarray:
    out = np.empty(array.shape, dtype=object)
    flat, source = out.reshape(-1), array.reshape(-1)
    for i, s in enumerate(source):
        flat[i] = fn(s)
    return out


def from_onnx_value(value: Any, dtype: DType | None) -> Any:
    """An onnx.reference result as gradreg stores a value of ``dtype``: arrays of the dtype's
    storage type (bfloat16 as float32); sequences (lists), optionals (None) and maps pass."""
    if dtype is None or dtype.kind in "vr" or isinstance(value, (list, dict)) or value is None:
        return value
    array = np.asarray(value)
    if dtype.base_dtype is dtypes.string:
        return _map_strings(array.astype(object), lambda s: s.encode("utf-8", "surrogateescape")
                            if isinstance(s, str) else s)
    storage = dtype.base_dtype.storage
    if array.dtype != storage:
        array = array.astype(storage)
    return array


# -- types ---------------------------------------------------------------------------------------------

def dtype_of_type(type_proto, where: str) -> DType:
    """The gradreg dtype of an ONNX TypeProto: the element type of a tensor, variant otherwise."""
    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        return dtype_of_element_type(getattr(type_proto, kind).elem_type, where)
    if kind is None:
        raise GraphError(f"{where}: the value has no type")
    return dtypes.variant


def upsample_as_resize(mode: str) -> dict[str, str]:
    """The Resize attributes equivalent to a (deprecated) Upsample of ``mode``: Upsample is Resize
    with asymmetric coordinates (and floor for "nearest")."""
    return {"mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}


# -- sequences ------------------------------------------------------------------------------------------

def element_dtype(t: Any, seen: int = 0) -> DType | None:
    """The element type of a sequence (or optional) value, found from what made it (gradreg's type
    of such values is just ``variant``): the tensors a SequenceConstruct, SplitToSequence or
    SequenceInsert took, a SequenceEmpty's dtype, a SequenceMap body's output; None if unknown."""
    if seen > 64 or t is None:
        return None
    op = t.op
    name = op.type.rpartition("::")[2] if op.type.startswith("onnx::") else op.type
    if name in ("SequenceConstruct", "SplitToSequence", "Optional") and op.inputs:
        return op.inputs[0].dtype
    if name == "SequenceInsert":
        return op.inputs[1].dtype
    if name in ("SequenceErase", "Identity", "OptionalGetElement", "AddN"):
        return element_dtype(op.inputs[0], seen + 1)
    if name == "SequenceEmpty":
        code = op.get_attr("dtype")
        return dtype_of_element_type(int(code)) if code is not None else dtypes.float32
    if name == "SequenceMap":
        body = function_graph(op.graph.library, op.get_attr("body").name, {}, op.name)
        return body.outputs[t.value_index].dtype
    return None
