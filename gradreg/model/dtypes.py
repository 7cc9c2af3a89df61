"""Element types: gradreg's :class:`DType`, keyed by TensorFlow's DataType enum.

Each DType knows its NumPy counterpart. Two types have no NumPy dtype of their own
and are held widened: bfloat16 values live in float32 arrays (exactly, bfloat16 is a
truncated float32); quantized types live in their underlying integer type.

    >>> from gradreg import dtypes
    >>> dtypes.as_dtype("float32") is dtypes.float32
    True
    >>> dtypes.as_dtype(np.int64).name
    'int64'
"""
from __future__ import annotations

from typing import Any

import numpy as np

from gradreg.errors import TypeMismatchError
from gradreg.proto import types_pb2

_REF_OFFSET = 100


class DType:
    """An element type. Instances are interned: compare with ``is`` or ``==``."""

    __slots__ = ("enum", "name", "np", "kind", "_storage")

    def __init__(self, enum: int, name: str, np_dtype: Any, kind: str, storage: Any = None):
        self.enum = enum
        self.name = name
        self.np: np.dtype[Any] | None = None if np_dtype is None else np.dtype(np_dtype)
        # kind: 'f' floating, 'c' complex, 'i' signed int, 'u' unsigned int, 'b' bool,
        # 'q' quantized, 's' string, 'r' resource, 'v' variant, 'x' float8/int4/... (stored as ml_dtypes
        # arrays when ml_dtypes is installed, for ONNX; no TensorFlow kernels compute on them)
        self.kind = kind
        self._storage: np.dtype[Any] | None = None if storage is None else np.dtype(storage)

    # -- classification ----------------------------------------------------------
    @property
    def is_floating(self) -> bool:
        return self.kind == "f"

    @property
    def is_complex(self) -> bool:
        return self.kind == "c"

    @property
    def is_integer(self) -> bool:
        return self.kind in "iu"

    @property
    def is_unsigned(self) -> bool:
        return self.kind == "u"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def is_quantized(self) -> bool:
        return self.kind == "q"

    @property
    def is_numeric(self) -> bool:
        return self.kind in "fciuq"

    @property
    def is_differentiable(self) -> bool:
        """Whether gradients flow through values of this type (float and complex)."""
        return self.kind in "fc"

    @property
    def is_ref(self) -> bool:
        return self.enum > _REF_OFFSET

    @property
    def base_dtype(self) -> DType:
        return _BY_ENUM[self.enum - _REF_OFFSET] if self.is_ref else self

    @property
    def as_ref(self) -> DType:
        return self if self.is_ref else _BY_ENUM[self.enum + _REF_OFFSET]

    @property
    def real_dtype(self) -> DType:
        """float32 for complex64, float64 for complex128, else the type itself."""
        return {complex64.enum: float32, complex128.enum: float64}.get(self.enum, self)

    @property
    def as_datatype_enum(self) -> int:
        return self.enum

    @property
    def storage(self) -> np.dtype[Any]:
        """The NumPy dtype arrays of this type are held in (float32 for bfloat16)."""
        if self._storage is not None:
            return self._storage
        if self.kind == "x" and _load_ml_dtypes():
            return self.storage
        if self.np is None:
            raise TypeMismatchError(f"dtype {self.name} has no NumPy representation in gradreg")
        return self.np

    @property
    def as_numpy_dtype(self) -> type[Any]:
        """The NumPy scalar type of this type's values (``np.float32`` for float32), to make
        arrays to feed: ``np.zeros(shape, x.dtype.as_numpy_dtype)``. Types NumPy lacks give the
        type gradreg holds them in: ``np.float32`` for bfloat16 (TensorFlow: ml_dtypes' bfloat16),
        the integer type for quantized ones, ``object`` for strings, resources and variants."""
        if self.kind in "srv":
            return object
        numpy_type: type[Any] = self.storage.type
        return numpy_type

    @property
    def size(self) -> int:
        """Bytes per element on the wire (tensor_content)."""
        return self.wire.itemsize

    @property
    def wire(self) -> np.dtype[Any]:
        """The little-endian NumPy dtype of this type's tensor_content bytes."""
        if self.base_dtype is bfloat16:
            return np.dtype("<u2")
        wire: np.dtype[Any] = self.base_dtype.storage.newbyteorder("<")
        return wire

    @property
    def min(self) -> float | int | bool:
        if self.is_floating:
            return float(np.finfo(self.storage).min)
        if self.is_integer or self.is_quantized:
            return int(np.iinfo(self.storage).min)
        if self.is_bool:
            return False
        raise TypeMismatchError(f"dtype {self.name} has no minimum")

    @property
    def max(self) -> float | int | bool:
        if self.is_floating:
            return float(np.finfo(self.storage).max)
        if self.is_integer or self.is_quantized:
            return int(np.iinfo(self.storage).max)
        if self.is_bool:
            return True
        raise TypeMismatchError(f"dtype {self.name} has no maximum")

    def is_compatible_with(self, other: Any) -> bool:
        return self.base_dtype is as_dtype(other).base_dtype

    def __repr__(self) -> str:
        return f"gradreg.{self.name}"

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        return (as_dtype, (self.enum,))

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, DType):
            return self is other
        if other is None:   # np.dtype(None) is float64: None must not compare equal to it
            return False
        try:
            return self is as_dtype(other)
        except (TypeError, TypeMismatchError):
            return False

    def __hash__(self) -> int:
        return self.enum


_BY_ENUM: dict[int, DType] = {}
_BY_NAME: dict[str, DType] = {}


def _define(enum_name: str, name: str, np_dtype: Any, kind: str, storage: Any = None) -> DType:
    enum = types_pb2.DataType.Value(enum_name)
    dtype = DType(enum, name, np_dtype, kind, storage)
    _BY_ENUM[enum] = dtype
    _BY_NAME[name] = dtype
    _BY_NAME[enum_name] = dtype
    return dtype


invalid = _define("DT_INVALID", "invalid", None, "x")
float16 = half = _define("DT_HALF", "float16", np.float16, "f")
bfloat16 = _define("DT_BFLOAT16", "bfloat16", None, "f", storage=np.float32)
float32 = _define("DT_FLOAT", "float32", np.float32, "f")
float64 = double = _define("DT_DOUBLE", "float64", np.float64, "f")
complex64 = _define("DT_COMPLEX64", "complex64", np.complex64, "c")
complex128 = _define("DT_COMPLEX128", "complex128", np.complex128, "c")
int8 = _define("DT_INT8", "int8", np.int8, "i")
int16 = _define("DT_INT16", "int16", np.int16, "i")
int32 = _define("DT_INT32", "int32", np.int32, "i")
int64 = _define("DT_INT64", "int64", np.int64, "i")
uint8 = _define("DT_UINT8", "uint8", np.uint8, "u")
uint16 = _define("DT_UINT16", "uint16", np.uint16, "u")
uint32 = _define("DT_UINT32", "uint32", np.uint32, "u")
uint64 = _define("DT_UINT64", "uint64", np.uint64, "u")
bool_ = _define("DT_BOOL", "bool", np.bool_, "b")
string = _define("DT_STRING", "string", object, "s")
qint8 = _define("DT_QINT8", "qint8", None, "q", storage=np.int8)
quint8 = _define("DT_QUINT8", "quint8", None, "q", storage=np.uint8)
qint16 = _define("DT_QINT16", "qint16", None, "q", storage=np.int16)
quint16 = _define("DT_QUINT16", "quint16", None, "q", storage=np.uint16)
qint32 = _define("DT_QINT32", "qint32", None, "q", storage=np.int32)
resource = _define("DT_RESOURCE", "resource", object, "r")
variant = _define("DT_VARIANT", "variant", object, "v")

# float8, int4, ...: held in ml_dtypes' NumPy extension types of the same names (as ONNX holds
# them), resolved by _load_ml_dtypes on first use; without ml_dtypes they have no storage and
# cannot be run.
for _enum_name in ("DT_FLOAT8_E5M2", "DT_FLOAT8_E4M3FN", "DT_FLOAT8_E4M3FNUZ", "DT_FLOAT8_E4M3B11FNUZ",
                   "DT_FLOAT8_E5M2FNUZ", "DT_INT4", "DT_UINT4", "DT_INT2", "DT_UINT2", "DT_FLOAT4_E2M1FN"):
    _define(_enum_name, _enum_name[3:].lower(), None, "x")
for _dtype in list(_BY_ENUM.values()):
    if _dtype.enum:
        _ref = DType(_dtype.enum + _REF_OFFSET, _dtype.name + "_ref", _dtype.np, _dtype.kind, _dtype._storage)
        _BY_ENUM[_ref.enum] = _ref
        _BY_NAME[_ref.name] = _ref
        _BY_NAME[types_pb2.DataType.Name(_ref.enum)] = _ref

_BY_NAME.update({"float": float32, "double": float64, "half": float16, "bool_": bool_})
_FROM_NUMPY: dict[np.dtype, DType] = {
    d.np: d for d in _BY_ENUM.values() if d.np is not None and d.kind in "fciub" and not d.is_ref
}
_ml_dtypes_loaded = False


def _load_ml_dtypes() -> bool:
    """Give the float8/int4/... types (kind "x") their ml_dtypes storage, once (importing
    ml_dtypes costs ~10 ms that a process without such a type should not pay). False if that
    was done before or ml_dtypes is not installed."""
    global _ml_dtypes_loaded
    if _ml_dtypes_loaded:
        return False
    _ml_dtypes_loaded = True
    try:
        import ml_dtypes
    except ImportError:
        return False
    for dtype in _BY_ENUM.values():
        found = getattr(ml_dtypes, dtype.name.removesuffix("_ref"), None) if dtype.kind == "x" else None
        if found is not None:
            dtype._storage = np.dtype(found)
            if not dtype.is_ref:   # arrays of these types are these types (held, cast, moved; not computed)
                _FROM_NUMPY[dtype._storage] = dtype
    return True


def as_dtype(value: Any) -> DType:
    """Convert a DType, DataType enum value, type name or NumPy dtype to a DType.

    >>> as_dtype("DT_FLOAT") is as_dtype(1) is as_dtype(np.float32) is float32
    True
    """
    if isinstance(value, DType):
        return value
    if value is None:
        # np.dtype(None) would say float64; an unknown type is not a type.
        raise TypeMismatchError("cannot interpret None as a dtype")
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        try:
            return _BY_ENUM[int(value)]
        except KeyError:
            raise TypeMismatchError(f"unknown DataType enum value {value}") from None
    if isinstance(value, str):
        try:
            return _BY_NAME[value]
        except KeyError:
            raise TypeMismatchError(f"unknown dtype name {value!r}") from None
    if value is bool:
        return bool_
    if value is str or value is bytes:
        return string
    try:
        np_dtype = np.dtype(value)
    except TypeError:
        raise TypeMismatchError(f"cannot interpret {value!r} as a dtype") from None
    return _from_numpy(np_dtype)


def _from_numpy(np_dtype: np.dtype[Any]) -> DType:
    if np_dtype.kind in "USO":
        return string
    key = np_dtype.newbyteorder("=")
    if key not in _FROM_NUMPY and np_dtype.type.__module__.startswith("ml_dtypes"):
        _load_ml_dtypes()   # an ml_dtypes array: its types join the table now
    try:
        return _FROM_NUMPY[key]
    except KeyError:
        raise TypeMismatchError(f"NumPy dtype {np_dtype} has no gradreg dtype") from None


def all_dtypes() -> list[DType]:
    """Every non-reference DType, in enum order."""
    return [d for e, d in sorted(_BY_ENUM.items()) if 0 < e < _REF_OFFSET]


# Named groups used in op signatures ("T: {floattypes}"), as in TensorFlow's op registry.
TYPE_GROUPS: dict[str, tuple[DType, ...]] = {
    "floattypes": (float16, bfloat16, float32, float64),
    "complextypes": (complex64, complex128),
    "inttypes": (int8, int16, int32, int64, uint8, uint16, uint32, uint64),
    "realnumbertypes": (float32, float64, int32, uint8, int16, int8, int64, bfloat16, uint16, float16,
                        uint32, uint64),
    "numbertypes": (float32, float64, int32, uint8, int16, int8, complex64, int64, qint8, quint8, qint32,
                    bfloat16, qint16, quint16, uint16, complex128, float16, uint32, uint64),
    "quantizedtypes": (qint8, quint8, qint32, qint16, quint16),
}
TYPE_GROUPS["floatcomplex"] = TYPE_GROUPS["floattypes"] + TYPE_GROUPS["complextypes"]
