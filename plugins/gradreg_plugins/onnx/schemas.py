"""ONNX op schemas as gradreg op definitions.

Every op of the committed table (:mod:`schema_table`, generated from the onnx package) becomes
an op type ``onnx::<OpType>`` (``onnx.ml::``, ``onnx.preview.training::``, ``onnx.preview::``
for the other domains), so ONNX's ``Add`` never meets TensorFlow's. The mapping of an ONNX
signature onto gradreg's (TensorFlow's REGISTER_OP notation):

* a type parameter ``T`` becomes a type attr ``T`` allowing the tensor element types of its
  constraint; sequences, optionals and maps are held as ``variant`` values (a Python list,
  None or the value, a dict);
* an optional input or output ``x`` becomes ``x: N_x * T`` with a count attr ``N_x`` of 0 or 1,
  a homogeneous variadic one ``x: N_x * T``, a heterogeneous variadic one ``x: T_x`` with a
  ``list(type)`` attr ``T_x``; a type attr bound only to such arguments, or allowing one type
  only, defaults to its first allowed type;
* attributes keep their ONNX names: INT -> int, FLOAT -> float, STRING -> string, TENSOR and
  SPARSE_TENSOR -> tensor (dense), GRAPH -> func (a library function), TYPE_PROTO -> string
  (a serialized TypeProto), and lists of those. An optional attribute with no default has
  the default None, meaning "absent";
* an op with graph attributes (If, Loop, Scan, SequenceMap) has one more input,
  ``captured: T_captured``: the outer-scope values its subgraphs use, which a library
  function takes as explicit arguments after its ONNX inputs.

``ONNX_ATTRIBUTES`` of a schema are the attrs written back to ONNX; the type and count attrs
are gradreg's own bookkeeping.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gradreg.model import dtypes
from gradreg.model.dtypes import DType
from gradreg.model.opdefs import OpDefinition
from gradreg_plugins.onnx.schema_table import IR_VERSION, NAMESPACES, ONNX_VERSION, OPSET_VERSIONS, SCHEMAS

__all__ = ["IR_VERSION", "ONNX_VERSION", "OPSET_VERSIONS", "CAPTURED", "INSTALL_HINT", "OnnxSchema", "Param",
           "op_type_for", "schema_for", "all_schemas", "split_op_type", "is_onnx_op", "is_stateful"]

CAPTURED = "captured"
# What to install for the parts of the family that need the onnx package (reading and writing
# models, onnx.reference's kernels, ONNX's shape inference).
INSTALL_HINT = 'pip install "gradreg[onnx]"'
_ATTR_KINDS = {
    "INT": "int", "FLOAT": "float", "STRING": "string", "TENSOR": "tensor", "SPARSE_TENSOR": "tensor",
    "GRAPH": "func", "TYPE_PROTO": "string", "INTS": "list(int)", "FLOATS": "list(float)",
    "STRINGS": "list(string)", "TENSORS": "list(tensor)", "SPARSE_TENSORS": "list(tensor)",
    "GRAPHS": "list(func)", "TYPE_PROTOS": "list(string)",
}
_DOMAIN_OF_NAMESPACE = {ns: domain for domain, ns in NAMESPACES.items()}


@dataclass(frozen=True)
class Param:
    """One ONNX input or output of a schema and how it maps to a gradreg argument."""
    name: str
    type: str                 # a type parameter ("T") or a fixed ONNX type ("tensor(int64)")
    option: str               # "single", "optional" or "variadic"
    homogeneous: bool
    min_arity: int
    differentiable: str       # "yes", "no" or "unknown" (the schema's differentiation category)

    @property
    def count_attr(self) -> str:
        """The int attr holding how many values the argument has ("" for a single one)."""
        if self.option == "optional" or (self.option == "variadic" and self.homogeneous):
            return f"N_{self.name}"
        return ""

    @property
    def types_attr(self) -> str:
        """The list(type) attr of a heterogeneous variadic argument ("" otherwise)."""
        return f"T_{self.name}" if self.option == "variadic" and not self.homogeneous else ""

    @property
    def fixed_dtype(self) -> DType | None:
        if self.type.startswith("tensor("):
            return _dtype_of_element(self.type[7:-1])
        return None


class OnnxSchema:
    """One op's ONNX schema (at the family's opset) and the gradreg definition made from it."""

    def __init__(self, op_type: str, entry: dict[str, Any]):
        self.op_type = op_type
        self.domain: str = entry["domain"]
        self.name: str = entry["name"]
        self.since_version: int = entry["since_version"]
        self.inputs = tuple(Param(*p) for p in entry["inputs"])
        self.outputs = tuple(Param(*p) for p in entry["outputs"])
        self.type_params: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in entry["types"].items()}
        self.attributes: dict[str, tuple[str, Any]] = dict(entry["attributes"])
        self.has_function: bool = entry["has_function"]
        self.deprecated: bool = entry["deprecated"]

    @property
    def graph_attributes(self) -> list[str]:
        """Attributes holding subgraphs (GRAPH or GRAPHS)."""
        return [n for n, (kind, _) in self.attributes.items() if kind in ("GRAPH", "GRAPHS")]

    @property
    def has_subgraphs(self) -> bool:
        return bool(self.graph_attributes)

    def attr_kind(self, name: str) -> str:
        """gradreg attr kind of ONNX attribute ``name``."""
        return _ATTR_KINDS[self.attributes[name][0]]

    def definition(self, shape: Callable[..., Any] | None = None) -> OpDefinition:
        """The gradreg OpDefinition (see the module docstring for the mapping), with the shape
        function ``shape``."""
        params = self.inputs + self.outputs
        type_attrs = []
        for param_name, allowed in self.type_params.items():
            users = [p for p in params if p.type == param_name and not p.types_attr]
            if not users:
                continue
            spec = f"{param_name}: {{{', '.join(allowed)}}}" if allowed else f"{param_name}: type"
            if len(allowed) == 1 or (allowed and all(p.count_attr for p in users)):
                # one possible type (Greater's bool T1), or maybe bound to no value (an absent input)
                spec += f" = {allowed[0]}"
            type_attrs.append(spec)
        count_attrs = []
        for p in params:
            if p.count_attr:
                floor = p.min_arity if p.option == "variadic" else 0
                count_attrs.append(f"{p.count_attr}: int >= {floor}" + (" = 0" if p.option == "optional" else ""))
            elif p.types_attr:
                names = ", ".join(self.type_params.get(p.type, ())) or "variant"
                count_attrs.append(f"{p.types_attr}: list({{{names}}}) >= {p.min_arity}")
        inputs = [_arg_spec(p) for p in self.inputs]
        if self.has_subgraphs:
            inputs.append(f"{CAPTURED}: T_{CAPTURED}")
            count_attrs.append(f"T_{CAPTURED}: list(type) >= 0 = []")
        attr_specs = [f"{name}: {self.attr_kind(name)}" for name in self.attributes]
        definition = OpDefinition(self.op_type, inputs=inputs, outputs=[_arg_spec(p) for p in self.outputs],
                                  attrs=type_attrs + count_attrs + attr_specs, shape=shape,
                                  stateful=self.name in _STATEFUL,
                                  summary=f"ONNX {self.domain or 'ai.onnx'} {self.name}, opset version "
                                          f"{self.since_version}.")
        for name, (kind, default) in self.attributes.items():
            if default == "<required>":
                continue
            value = None if default == "<absent>" else _attr_default(kind, default)
            definition.attr_specs[name] = dataclasses.replace(definition.attr_specs[name], default=value)
        return definition

    @property
    def onnx_attributes(self) -> list[str]:
        return list(self.attributes)

    def __repr__(self) -> str:
        return f"<OnnxSchema {self.op_type} (since {self.since_version})>"


# Ops whose outputs are not a function of their inputs: never folded or deduplicated.
_STATEFUL = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
             "Bernoulli", "Dropout"}


def _arg_spec(p: Param) -> str:
    base = p.type if p.fixed_dtype is None else p.fixed_dtype.name
    if p.types_attr:
        return f"{p.name}: {p.types_attr}"
    if p.count_attr:
        return f"{p.name}: {p.count_attr} * {base}"
    return f"{p.name}: {base}"


def _attr_default(kind: str, value: Any) -> Any:
    """A table default in the Python form get_attr returns (bytes for strings)."""
    if kind == "STRING":
        return value.encode()
    if kind == "STRINGS":
        return [v.encode() for v in value]
    if kind == "FLOAT":
        return float(value)
    if kind == "FLOATS":
        return [float(v) for v in value]
    return value


_ELEMENT_DTYPES = {
    "float": "float32", "double": "float64", "float16": "float16", "bfloat16": "bfloat16", "int8": "int8",
    "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8", "uint16": "uint16",
    "uint32": "uint32", "uint64": "uint64", "bool": "bool", "string": "string", "complex64": "complex64",
    "complex128": "complex128",
}


def _dtype_of_element(name: str) -> DType:
    return dtypes.as_dtype(_ELEMENT_DTYPES[name])


# -- lookup -------------------------------------------------------------------------------------------

_SCHEMAS: dict[str, OnnxSchema] = {key: OnnxSchema(key, entry) for key, entry in SCHEMAS.items()}


def op_type_for(domain: str, name: str) -> str:
    """The gradreg op type of ONNX op ``name`` in ``domain`` ("" and "ai.onnx" are the same)."""
    namespace = NAMESPACES.get("" if domain == "ai.onnx" else domain, domain)
    return f"{namespace}::{name}"


def split_op_type(op_type: str) -> tuple[str, str]:
    """(ONNX domain, op name) of a gradreg op type ``"onnx::Add"`` -> ("", "Add")."""
    namespace, _, name = op_type.rpartition("::")
    return _DOMAIN_OF_NAMESPACE.get(namespace, namespace), name


def is_stateful(name: str) -> bool:
    """Whether ai.onnx op ``name``'s outputs are not a function of its inputs (random ops, Dropout)."""
    return name in _STATEFUL


def is_onnx_op(op_type: str) -> bool:
    return op_type in _SCHEMAS


def schema_for(op_type: str) -> OnnxSchema | None:
    """The schema of a gradreg op type (``"onnx::Conv"``), or None."""
    return _SCHEMAS.get(op_type)


def all_schemas() -> list[OnnxSchema]:
    return list(_SCHEMAS.values())
