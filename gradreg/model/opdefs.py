"""Op definitions: one table entry per op type drives builders, validation and shapes.

An entry is written in TensorFlow's REGISTER_OP notation::

    OpDefinition(
        "AddV2",
        inputs=["x: T", "y: T"],
        outputs=["z: T"],
        attrs=["T: {numbertypes}"],
        shape=shape_fns.broadcast_binary,
        api="add",
    )

Inputs and outputs are ``name: type`` where type is a fixed type (``int32``), a type
attr (``T``), ``N * T`` for a homogeneous list, or a ``list(type)`` attr for a
heterogeneous one. Attrs are ``name: kind [>= minimum] [= default]`` where kind is
``type``, ``{float, double, numbertypes}`` (allowed types or named groups), ``int``,
``float``, ``bool``, ``string``, ``{'SAME', 'VALID'}``, ``shape``, ``tensor``, ``func``,
``list(...)`` of those. From an entry gradreg derives the OpDef proto, attr inference
and defaults for builders, NodeDef validation, output dtypes, and the builder
``gradreg.raw_ops.<OpType>`` (plus ``gradreg.<api>`` when ``api`` is given).
"""
from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from gradreg.errors import GraphError, OpDefinitionError, TypeMismatchError
from gradreg.file_access import VERBS
from gradreg.model import dtypes
from gradreg.model.attrs import from_attr_value, to_attr_value
from gradreg.model.dtypes import DType
from gradreg.model.shapes import TensorShape
from gradreg.proto import op_def_pb2, types_pb2

_NO_DEFAULT = object()
# The ``plugin`` of the definitions of library functions called by name as op types.
LIBRARY_FUNCTION = "function library"


@dataclass(frozen=True)
class ArgSpec:
    """One input or output argument of an op."""
    name: str
    fixed_type: DType | None = None
    type_attr: str = ""
    number_attr: str = ""
    type_list_attr: str = ""
    is_ref: bool = False

    @property
    def is_list(self) -> bool:
        return bool(self.number_attr or self.type_list_attr)


@dataclass(frozen=True)
class AttrSpec:
    """One attr of an op: its kind, default, allowed values and minimum."""
    name: str
    kind: str                       # "type", "int", "list(type)", "string", ...
    default: Any = _NO_DEFAULT      # None: optional and absent unless given (ONNX attributes)
    allowed_types: tuple[DType, ...] | None = None
    allowed_strings: tuple[bytes, ...] | None = None
    minimum: int | None = None

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT

    @property
    def constrained(self) -> bool:
        """Whether values must be checked (allowed types or strings, a minimum)."""
        return self.allowed_types is not None or self.allowed_strings is not None or self.minimum is not None

    def check(self, value: Any, where: str) -> None:
        """The one validation of an attr value against its spec, for builders and imported
        NodeDefs alike: TypeMismatchError for a type not allowed, GraphError for a string not
        allowed or a value under the minimum; ``where`` (the node, or the op type) starts the
        message."""
        if self.allowed_types is not None:
            for v in value if isinstance(value, list) else [value]:
                if v is not None and v.base_dtype not in self.allowed_types:
                    allowed = ", ".join(t.name for t in self.allowed_types)
                    raise TypeMismatchError(f"{where}: attr '{self.name}' is {v.name}, allowed: {allowed}")
        if self.allowed_strings is not None:
            for v in value if isinstance(value, list) else [value]:
                if v not in self.allowed_strings:
                    allowed = ", ".join(s.decode() for s in self.allowed_strings)
                    raise GraphError(f"{where}: attr '{self.name}' is {v!r}, allowed: {allowed}")
        if self.minimum is not None:
            n = len(value) if isinstance(value, list) else value
            if n < self.minimum:
                raise GraphError(f"{where}: attr '{self.name}' is {n}, must be at least {self.minimum}")


ShapeFn = Callable[[Any], Any]


@dataclass(eq=False)   # compared and hashed by identity: one definition per op type (or library function)
class OpDefinition:
    """An op type's signature, shape function and builder names. See the module docstring."""
    name: str
    inputs: Sequence[str] = ()
    outputs: Sequence[str] = ()
    attrs: Sequence[str] = ()
    shape: ShapeFn | None = None
    api: str | Sequence[str] | None = None
    stateful: bool = False
    commutative: bool = False
    aggregate: bool = False
    allows_uninitialized_input: bool = False
    # Pure and cheap: shape inference may evaluate it on constant inputs (Shape, Pack, Range, ...).
    foldable: bool = False
    # Linear in its first input while its other inputs are constant, f(a) + f(b) = f(a + b)
    # (Sum, Reshape, Neg, ...): loop gradients sum such an op's per-iteration results by
    # applying it once, after the loop, to the sum of its inputs (gradreg.autodiff.loop_gradients).
    linear: bool = False
    # Inputs whose producing node this node's kernel may compute itself (it returns an
    # Absorbing kernel: an SGD update accumulating its delta's product into the variable).
    absorbs: Sequence[str] = ()
    control_outputs: Sequence[str] = ()
    summary: str = ""
    # What its kernel does to files named by its inputs ("read", "write", "delete"): a kernel
    # may touch a file only through its context's file_path(op, path, verb), which refuses a
    # verb the op does not declare here (gradreg.file_access, docs/security.md).
    files: Sequence[str] = ()
    # Parsed from the strings above when first read (__getattr__): a registry holds ~800
    # definitions, and a command that loads a small graph reads a few dozen.
    input_args: tuple[ArgSpec, ...] = field(init=False, repr=False)
    output_args: tuple[ArgSpec, ...] = field(init=False, repr=False)
    attr_specs: dict[str, AttrSpec] = field(init=False, repr=False)
    plugin: str = field(init=False, default="")

    def __post_init__(self) -> None:
        if isinstance(self.api, str):
            self.api = (self.api,)
        unknown = [verb for verb in self.files if verb not in VERBS]
        if unknown:
            raise OpDefinitionError(f"op {self.name}: files={list(self.files)}: the verbs are {', '.join(VERBS)}")
        self._op_def: op_def_pb2.OpDef | None = None

    def __getattr__(self, name: str) -> Any:
        # Called only for attributes not yet set: the parsed fields, before the first read.
        if name not in ("input_args", "output_args", "attr_specs"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._parse()
        return self.__dict__[name]

    def _parse(self) -> None:
        """Parse the argument and attr strings (OpDefinitionError naming the op type)."""
        try:
            attr_specs = {a.name: a for a in (parse_attr(s) for s in self.attrs)}
            input_args = tuple(parse_arg(s, attr_specs) for s in self.inputs)
            output_args = tuple(parse_arg(s, attr_specs) for s in self.outputs)
        except OpDefinitionError as exc:
            raise OpDefinitionError(f"op {self.name}: {exc}") from None
        for arg in input_args + output_args:
            for ref in (arg.type_attr, arg.number_attr, arg.type_list_attr):
                if ref and ref not in attr_specs:
                    raise OpDefinitionError(f"op {self.name}: argument {arg.name} names undeclared attr {ref}")
        self.attr_specs, self.input_args, self.output_args = attr_specs, input_args, output_args

    # -- derived facts ------------------------------------------------------------
    @property
    def api_names(self) -> tuple[str, ...]:
        return tuple(self.api or ())

    @property
    def is_library_function(self) -> bool:
        """Whether this defines a graph library's function as an op type (no plugin does)."""
        return self.plugin == LIBRARY_FUNCTION

    def output_dtypes(self, attr: Callable[[str], Any]) -> list[DType]:
        """Output dtypes given an attr getter (name -> Python value, defaults applied)."""
        out: list[DType] = []
        for arg in self.output_args:
            out.extend(_arg_dtypes(arg, attr))
        return out

    def input_dtypes(self, attr: Callable[[str], Any]) -> list[DType]:
        """Expected dtype of each (flattened) data input."""
        out: list[DType] = []
        for arg in self.input_args:
            out.extend(_arg_dtypes(arg, attr))
        return out

    def num_inputs(self, attr: Callable[[str], Any]) -> int:
        return sum(_arg_count(arg, attr) for arg in self.input_args)

    def num_outputs(self, attr: Callable[[str], Any]) -> int:
        return sum(_arg_count(arg, attr) for arg in self.output_args)

    def output_arg_ranges(self, attr: Callable[[str], Any]) -> dict[str, tuple[int, int]]:
        """Flat output index range [start, stop) of each output argument (FunctionDef naming)."""
        return _ranges(self.output_args, attr)

    @property
    def op_def(self) -> op_def_pb2.OpDef:
        """The equivalent OpDef proto (as TensorFlow's registry would report it)."""
        if self._op_def is None:
            self._op_def = self._build_op_def()
        return self._op_def

    def _build_op_def(self) -> op_def_pb2.OpDef:
        od = op_def_pb2.OpDef(name=self.name, summary=self.summary, is_stateful=self.stateful,
                              is_commutative=self.commutative, is_aggregate=self.aggregate,
                              allows_uninitialized_input=self.allows_uninitialized_input)
        od.control_output.extend(self.control_outputs)
        for args, target in ((self.input_args, od.input_arg), (self.output_args, od.output_arg)):
            for arg in args:
                target.add(name=arg.name, type=arg.fixed_type.enum if arg.fixed_type else 0,
                           type_attr=arg.type_attr, number_attr=arg.number_attr,
                           type_list_attr=arg.type_list_attr, is_ref=arg.is_ref)
        for spec in self.attr_specs.values():
            ad = od.attr.add(name=spec.name, type=spec.kind)
            if spec.has_default and spec.default is not None:   # None: optional, absent unless given
                ad.default_value.CopyFrom(to_attr_value(spec.default, spec.kind))
            if spec.minimum is not None:
                ad.has_minimum = True
                ad.minimum = spec.minimum
            if spec.allowed_types is not None:
                ad.allowed_values.list.type.extend(cast("types_pb2.DataType", t.enum) for t in spec.allowed_types)
            if spec.allowed_strings is not None:
                ad.allowed_values.list.s.extend(spec.allowed_strings)
        return od


def _arg_count(arg: ArgSpec, attr: Callable[[str], Any]) -> int:
    if arg.number_attr:
        return int(attr(arg.number_attr))
    if arg.type_list_attr:
        return len(attr(arg.type_list_attr))
    return 1


def _arg_dtypes(arg: ArgSpec, attr: Callable[[str], Any]) -> list[DType]:
    if arg.type_list_attr:
        return list(attr(arg.type_list_attr))
    if arg.fixed_type is not None:
        base = arg.fixed_type
    else:
        base = attr(arg.type_attr)
    if arg.is_ref:
        base = base.as_ref
    if arg.number_attr:
        return [base] * int(attr(arg.number_attr))
    return [base]


def _ranges(args: Iterable[ArgSpec], attr: Callable[[str], Any]) -> dict[str, tuple[int, int]]:
    out, start = {}, 0
    for arg in args:
        n = _arg_count(arg, attr)
        out[arg.name] = (start, start + n)
        start += n
    return out


# -- parsing -------------------------------------------------------------------------

_ARG_RE = re.compile(r"^\s*(\w+)\s*:\s*(?:(\w+)\s*\*\s*)?(Ref\(\s*(\w+)\s*\)|\w+)\s*$")
_ATTR_RE = re.compile(r"^\s*(\w+)\s*:\s*(.+?)\s*(?:>=\s*(-?\d+)\s*)?(?:=\s*(.+?))?\s*$")


def parse_arg(spec: str, attr_specs: dict[str, AttrSpec]) -> ArgSpec:
    """The ArgSpec an argument string declares (``"x: T"``, ``"values: N * T"``, ...), given the
    op's attrs. Families repeat the same strings across hundreds of ops: the result depends only
    on the string and the kind of the attr it names, and is cached on both (ArgSpecs are frozen)."""
    m = _ARG_RE.match(spec)
    if not m:
        raise OpDefinitionError(f"cannot parse argument {spec!r}")
    type_name = m.group(4) or m.group(3)
    declared = attr_specs.get(type_name)
    return _parse_arg(spec, None if declared is None else declared.kind)


@functools.cache
def _parse_arg(spec: str, kind: str | None) -> ArgSpec:
    m = _ARG_RE.match(spec)
    assert m is not None   # parse_arg matched it
    name, number_attr, type_tok, ref_inner = m.groups()
    is_ref = ref_inner is not None
    type_name = ref_inner if is_ref else type_tok
    if kind is not None:
        if kind == "list(type)":
            if number_attr:
                raise OpDefinitionError(f"argument {spec!r}: N * list(type) is not allowed")
            return ArgSpec(name, type_list_attr=type_name, is_ref=is_ref)
        if kind != "type":
            raise OpDefinitionError(f"argument {spec!r}: attr {type_name} is {kind}, not a type")
        return ArgSpec(name, type_attr=type_name, number_attr=number_attr or "", is_ref=is_ref)
    try:
        fixed = dtypes.as_dtype(type_name)
    except Exception:
        raise OpDefinitionError(f"argument {spec!r}: {type_name} is neither a dtype nor a declared attr") from None
    return ArgSpec(name, fixed_type=fixed, number_attr=number_attr or "", is_ref=is_ref)


def _split_set(body: str) -> list[str]:
    return [t.strip() for t in body.split(",") if t.strip()]


def _expand_types(names: Iterable[str]) -> tuple[DType, ...]:
    out: dict[int, DType] = {}    # by identity (DTypes are singletons), in first-seen order
    for name in names:
        group = dtypes.TYPE_GROUPS.get(name)
        for t in group if group is not None else (dtypes.as_dtype(name),):
            out.setdefault(id(t), t)
    return tuple(out.values())


def parse_attr(spec: str) -> AttrSpec:
    """The AttrSpec a spec string declares (``"T: {float32, float64} = DT_FLOAT"``). Families
    repeat the same specs across hundreds of ops: each distinct string is parsed once (a list
    default is copied, so that no two definitions share it)."""
    parsed = _parse_attr(spec)
    return replace(parsed, default=list(parsed.default)) if type(parsed.default) is list else parsed


@functools.cache
def _parse_attr(spec: str) -> AttrSpec:
    m = _ATTR_RE.match(spec)
    if not m:
        raise OpDefinitionError(f"cannot parse attr {spec!r}")
    name, kind_tok, minimum, default_tok = m.groups()
    kind_tok = kind_tok.strip()
    allowed_types = allowed_strings = None
    list_wrapped = kind_tok.startswith("list(") and kind_tok.endswith(")")
    inner = kind_tok[5:-1].strip() if list_wrapped else kind_tok
    if inner.startswith("{") and inner.endswith("}"):
        items = _split_set(inner[1:-1])
        if items and items[0][0] in "'\"":
            allowed_strings = tuple(i.strip("'\"").encode() for i in items)
            inner = "string"
        else:
            try:
                allowed_types = _expand_types(items)
            except Exception as exc:
                raise OpDefinitionError(f"attr {spec!r}: {exc}") from None
            inner = "type"
    if inner not in ("type", "int", "float", "bool", "string", "shape", "tensor", "func"):
        raise OpDefinitionError(f"attr {spec!r}: unknown attr kind {inner!r}")
    kind = f"list({inner})" if list_wrapped else inner
    default = _NO_DEFAULT if default_tok is None else _parse_default(default_tok, kind, spec)
    return AttrSpec(name, kind, default, allowed_types, allowed_strings,
                    None if minimum is None else int(minimum))


def _parse_default(tok: str, kind: str, spec: str) -> Any:
    tok = tok.strip()
    if kind.startswith("list("):
        if not (tok.startswith("[") and tok.endswith("]")):
            raise OpDefinitionError(f"attr {spec!r}: list default must be [..]")
        inner = kind[5:-1]
        return [_parse_scalar_default(t, inner, spec) for t in _split_set(tok[1:-1])]
    return _parse_scalar_default(tok, kind, spec)


def _parse_scalar_default(tok: str, kind: str, spec: str) -> Any:
    try:
        if kind == "bool":
            if tok not in ("true", "false"):
                raise ValueError(tok)
            return tok == "true"
        if kind == "int":
            return int(tok)
        if kind == "float":
            return float(tok)
        if kind == "string":
            return tok.strip("'\"").encode()
        if kind == "type":
            return dtypes.as_dtype(tok)
        if kind == "shape":
            if tok == "?":
                return TensorShape(None)
            return TensorShape([None if d.strip() == "?" else int(d) for d in _split_set(tok.strip("[]"))])
    except (ValueError, Exception) as exc:
        raise OpDefinitionError(f"attr {spec!r}: bad default {tok!r} ({exc})") from None
    raise OpDefinitionError(f"attr {spec!r}: defaults are not supported for {kind}")


def definition_from_op_def(op_def: op_def_pb2.OpDef, plugin: str = "") -> OpDefinition:
    """An OpDefinition for an OpDef proto (a FunctionDef signature, or an op another tool defined)."""
    definition = OpDefinition(op_def.name, stateful=op_def.is_stateful, commutative=op_def.is_commutative,
                              aggregate=op_def.is_aggregate, summary=op_def.summary)
    specs: dict[str, AttrSpec] = {}
    for ad in op_def.attr:
        default = from_attr_value(ad.default_value) if ad.HasField("default_value") else _NO_DEFAULT
        allowed_types = allowed_strings = None
        if ad.HasField("allowed_values"):
            if len(ad.allowed_values.list.type):
                allowed_types = tuple(dtypes.as_dtype(t) for t in ad.allowed_values.list.type)
            elif len(ad.allowed_values.list.s):
                allowed_strings = tuple(ad.allowed_values.list.s)
        specs[ad.name] = AttrSpec(ad.name, ad.type, default, allowed_types, allowed_strings,
                                  ad.minimum if ad.has_minimum else None)

    def arg(a: op_def_pb2.OpDef.ArgDef) -> ArgSpec:
        return ArgSpec(a.name, dtypes.as_dtype(a.type) if a.type else None, a.type_attr, a.number_attr,
                       a.type_list_attr, a.is_ref)

    definition.attr_specs = specs
    definition.input_args = tuple(arg(a) for a in op_def.input_arg)
    definition.output_args = tuple(arg(a) for a in op_def.output_arg)
    definition.plugin = plugin
    definition._op_def = op_def
    return definition
