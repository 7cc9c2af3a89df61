"""TensorFlow's tensor bundle: the checkpoint format of ``tf.train.Checkpoint``, of
``tf.compat.v1.train.Saver`` (format V2) and of a SavedModel's ``variables/`` directory.

A bundle with prefix ``P`` is the files ``P.index`` and ``P.data-00000-of-0000N`` ...:

* ``P.index`` is a sorted string table (:mod:`gradreg.formats.sstable`). Under the empty key
  it holds a ``BundleHeaderProto`` (number of shards, byte order, format version); under each
  tensor's name a ``BundleEntryProto``: dtype, shape, shard, offset and size of the bytes,
  and their masked CRC-32C.
* ``P.data-SSSSS-of-NNNNN`` hold the tensors' bytes back to back. Numbers are raw
  little-endian elements (bool one byte, complex as (real, imag) pairs, bfloat16 as its 16
  bits). A string tensor is the varint64 length of every element, then the masked CRC-32C
  (fixed32) of those lengths, then the elements' bytes; its entry's CRC covers the lengths
  (each as a little-endian uint32), that checksum and the bytes.
* A partitioned variable (``tf.compat.v1`` partitioner) has an entry with ``slices``: its
  pieces are stored under keys that encode the name and the slice's extents
  (:func:`slice_key`); :class:`BundleReader` assembles them into the whole tensor.

:class:`BundleReader` reads one tensor at a time (only that tensor's bytes, checked against
its CRC); :func:`write_bundle` writes files TensorFlow reads (``tf.train.load_checkpoint``,
``RestoreV2``), byte-identical to what TensorFlow's ``SaveV2`` writes for the same tensors
in the same order. Every failure is a :class:`~gradreg.errors.CheckpointError` naming the
file and the tensor.

    >>> files = write_bundle("/tmp/ckpt", {"w": np.ones((2, 3), np.float32)})
    >>> BundleReader("/tmp/ckpt").read("w").shape
    (2, 3)
"""
from __future__ import annotations

import contextlib
import os
import re
import struct
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any, cast

import numpy as np

from gradreg.errors import CheckpointError, FileWriteError, GradregError
from gradreg.file_access import check_file, resolve_inside
from gradreg.formats import crc32c, sstable
from gradreg.formats.atomic import Writer, atomic_write_all
from gradreg.model import dtypes
from gradreg.model.dtypes import DType
from gradreg.model.tensor_util import check_element_count
from gradreg.proto import tensor_bundle_pb2, tensor_shape_pb2, tensor_slice_pb2, types_pb2

HEADER_KEY = b""
BUNDLE_VERSION = 1                 # the tensor bundle format version TensorFlow writes
_Entry = tensor_bundle_pb2.BundleEntryProto
_SHARD_PATTERN = re.compile(r"\.data-(\d{5})-of-(\d{5})$")


def index_path(prefix: str) -> str:
    return f"{prefix}.index"


def data_path(prefix: str, shard: int, num_shards: int) -> str:
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


# -- dtypes on disk -------------------------------------------------------------------------
def _wire_dtype(dtype: DType) -> np.dtype:
    """The little-endian NumPy dtype of one element in a data file."""
    if dtype is dtypes.bool_:
        return np.dtype(np.bool_)
    return dtype.wire


def _check_supported(dtype: DType, where: str) -> None:
    if dtype.kind in "xrv" or dtype is dtypes.invalid:
        raise CheckpointError(f"{where}: dtype {dtype.name} is not supported in checkpoints by gradreg")


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) widened exactly to float32, gradreg's bfloat16 storage."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 values narrowed to bfloat16 bit patterns, rounding to nearest even as TF does
    (NaN stays NaN)."""
    as_int = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((as_int + (((as_int >> 16) & 1) + np.uint32(0x7FFF))) >> 16).astype(np.uint16)
    quiet_nan = ((as_int >> 16) & 0x8000 | 0x7FC0).astype(np.uint16)
    return np.where(np.isnan(as_int.view(np.float32)), quiet_nan, rounded)


# -- slice keys (OrderedCode, as TensorFlow's checkpoint::EncodeTensorNameSlice) -------------
def _ordered_uint(value: int) -> bytes:
    """Unsigned number: a length byte, then the big-endian bytes without leading zeros."""
    body = value.to_bytes((value.bit_length() + 7) // 8, "big") if value else b""
    return bytes([len(body)]) + body


def _ordered_string(value: bytes) -> bytes:
    """Bytes with 0x00 and 0xff escaped, then the separator 0x00 0x01."""
    out = bytearray()
    for byte in value:
        if byte == 0x00:
            out += b"\x00\xff"
        elif byte == 0xFF:
            out += b"\xff\x00"
        else:
            out.append(byte)
    return bytes(out) + b"\x00\x01"


def _ordered_signed(value: int) -> bytes:
    """Signed number in n bytes: two's complement with its n leading bits inverted, where n is
    the fewest bytes whose 7n-1 bits hold the magnitude (so that byte order is number order)."""
    magnitude = ~value if value < 0 else value
    n = min(10, (magnitude.bit_length() + 1 + 6) // 7)
    header = ((1 << n) - 1) << (7 * n)
    encoded = (value % (1 << (8 * n))) ^ header
    return encoded.to_bytes(n, "big")


def slice_key(name: str, extents: list[tuple[int, int]]) -> bytes:
    """The key of one stored slice of partitioned tensor ``name``; ``extents`` holds one
    (start, length) per dimension, length -1 for a whole dimension."""
    out = _ordered_uint(0) + _ordered_string(name.encode()) + _ordered_uint(len(extents))
    for start, length in extents:
        out += _ordered_signed(start) + _ordered_signed(length)
    return out


def slice_region(spec: str, shape: tuple[int, ...], key: str = "tensor") -> tuple[slice, ...]:
    """The region of a whole tensor of ``shape`` that TensorFlow's slice spec selects: the full
    shape's dims, then one ``start,length`` (or ``-``: all) per dim joined by ``:``, as in
    RestoreV2's ``shape_and_slices`` (``"10 3 0,4:-"``). CheckpointError if it does not fit."""
    parts = spec.split(" ")
    dims, extents = parts[:-1], parts[-1].split(":")
    try:
        fits = len(dims) == len(shape) == len(extents) and all(int(d) == s for d, s in zip(dims, shape))
        region = [slice(0, size) if extent == "-" else
                  slice(int(extent.split(",")[0]), int(extent.split(",")[0]) + int(extent.split(",")[1]))
                  for extent, size in zip(extents, shape)]
    except (ValueError, IndexError):
        fits = False
    if not fits or any(r.start < 0 or r.stop > size for r, size in zip(region, shape)):
        raise CheckpointError(f"slice '{spec}' of '{key}' does not fit its shape {list(shape)}")
    return tuple(region)


def _extents(slice_proto: tensor_slice_pb2.TensorSliceProto) -> list[tuple[int, int]]:
    return [(e.start, e.length if e.HasField("length") else -1) for e in slice_proto.extent]


# -- reading --------------------------------------------------------------------------------
class BundleReader:
    """Read the tensors of the bundle at ``prefix`` (``prefix.index`` must exist).

    Opening reads and checks the index only; :meth:`read` reads one tensor's bytes from its
    shard and checks their CRC-32C. bfloat16 tensors come back widened to float32 (exactly,
    as gradreg holds bfloat16), strings as object arrays of ``bytes``.
    """

    def __init__(self, prefix: str, check: Callable[[str], str] | None = None):
        self.prefix = os.fspath(prefix)
        # ``check`` maps each file's path to the path to open, or raises: a graph's RestoreV2
        # reads only where its FileAccess allows (gradreg.file_access).
        self._check = check
        self._shard_files: dict[int, str] = {}
        self._index = self._checked(index_path(self.prefix))
        if not os.path.exists(self._index):
            hint = " (a directory: pass a checkpoint prefix such as dir/model.ckpt-100)" \
                if os.path.isdir(self.prefix) else ""
            raise CheckpointError(f"{self._index}: no such checkpoint index file{hint}")
        table = sstable.Table(self._index)
        self.num_shards = self._read_header(table.get(HEADER_KEY))
        self._entries: dict[str, tensor_bundle_pb2.BundleEntryProto] = {}
        self._slices: dict[bytes, tensor_bundle_pb2.BundleEntryProto] = {}
        for key, value in table.items():
            if key != HEADER_KEY:
                self._add_entry(key, value)

    def _read_header(self, value: bytes | None) -> int:
        if value is None:
            raise CheckpointError(f"{self._index}: no bundle header (not a TensorFlow V2 checkpoint index)")
        header = tensor_bundle_pb2.BundleHeaderProto()
        try:
            header.ParseFromString(value)
        except Exception:
            raise CheckpointError(f"{self._index}: unreadable bundle header") from None
        if header.endianness != tensor_bundle_pb2.BundleHeaderProto.LITTLE:
            raise CheckpointError(f"{self._index}: big-endian checkpoints are not supported by gradreg")
        if header.version.min_consumer > BUNDLE_VERSION or BUNDLE_VERSION in header.version.bad_consumers:
            raise CheckpointError(f"{self._index}: written in tensor bundle format {header.version.producer} "
                                  f"(needs a reader of version {header.version.min_consumer}); gradreg reads "
                                  f"version {BUNDLE_VERSION}")
        if header.num_shards < 1:
            raise CheckpointError(f"{self._index}: header gives {header.num_shards} data shards")
        return header.num_shards

    def _add_entry(self, key: bytes, value: bytes) -> None:
        entry = tensor_bundle_pb2.BundleEntryProto()
        try:
            entry.ParseFromString(value)
        except Exception:
            raise CheckpointError(f"{self._index}: the entry of tensor {key!r} is unreadable") from None
        try:
            self._entries[key.decode()] = entry
        except UnicodeDecodeError:     # the binary key of one stored slice of a partitioned tensor
            self._slices[key] = entry
        else:
            if key.startswith(b"\x00"):
                self._slices[key] = self._entries.pop(key.decode())

    # -- what the bundle holds --------------------------------------------------------------
    def keys(self) -> list[str]:
        """The tensors' names, in key order (pieces of partitioned tensors not listed)."""
        return list(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, key: str) -> tensor_bundle_pb2.BundleEntryProto:
        """The index record of tensor ``key`` (CheckpointError if there is none)."""
        try:
            return self._entries[key]
        except KeyError:
            raise CheckpointError(f"{self._index}: checkpoint has no tensor '{key}'") from None

    def dtype(self, key: str) -> DType:
        entry = self.entry(key)
        try:
            return dtypes.as_dtype(entry.dtype)
        except GradregError:
            raise CheckpointError(f"{self._index}: tensor '{key}' has unknown dtype enum {entry.dtype}") from None

    def shape(self, key: str) -> tuple[int, ...]:
        return self._shape(key, self.entry(key))

    def _shape(self, key: str, entry: _Entry) -> tuple[int, ...]:
        dims = tuple(d.size for d in entry.shape.dim)
        if entry.shape.unknown_rank or any(d < 0 for d in dims):
            raise CheckpointError(f"{self._index}: tensor '{key}' has an invalid shape {list(dims)}")
        return dims

    def is_partitioned(self, key: str) -> bool:
        return len(self.entry(key).slices) > 0

    # -- values -----------------------------------------------------------------------------
    def read(self, key: str) -> np.ndarray:
        """The value of tensor ``key``, reading only its bytes."""
        entry = self.entry(key)
        dtype = self.dtype(key)
        _check_supported(dtype, f"{self._index}: tensor '{key}'")
        shape = self._shape(key, entry)
        if entry.slices:
            return self._read_partitioned(key, entry, dtype, shape)
        return self._read_entry(key, entry, dtype, shape)

    def read_all(self) -> dict[str, np.ndarray]:
        """Every tensor, keyed by name."""
        return {key: self.read(key) for key in self._entries}

    def _read_entry(self, key: str, entry: _Entry, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
        count = 1
        for d in shape:
            count *= d
        check_element_count(count, f"{self._index}: tensor '{key}'")
        if dtype is dtypes.string:
            path = self._data_file(key, entry)
            values, crc = _decode_strings(self._read_bytes(key, entry, raw_crc=False), count,
                                          f"{path}: tensor '{key}'")
            if crc != crc32c.unmask(entry.crc32c):
                raise CheckpointError(f"{path}: checksum mismatch for tensor '{key}' (corrupt data)")
            return values.reshape(shape)
        wire = _wire_dtype(dtype)
        if entry.size != count * wire.itemsize:
            raise CheckpointError(f"{self._index}: tensor '{key}' ({dtype.name} {list(shape)}) needs "
                                  f"{count * wire.itemsize} bytes but its entry gives {entry.size}")
        array = np.frombuffer(self._read_bytes(key, entry), dtype=wire).reshape(shape)
        if dtype is dtypes.bfloat16:
            return bfloat16_to_float32(array)
        return array.astype(dtype.storage, copy=False)

    def _data_file(self, key: str, entry: _Entry) -> str:
        if not 0 <= entry.shard_id < self.num_shards:
            raise CheckpointError(f"{self._index}: tensor '{key}' names data shard {entry.shard_id} of "
                                  f"{self.num_shards}")
        path = self._shard_files.get(entry.shard_id)
        if path is None:
            path = self._shard_files[entry.shard_id] = self._checked(data_path(self.prefix, entry.shard_id,
                                                                               self.num_shards))
        return path

    def _checked(self, path: str) -> str:
        if self._check is not None:
            return self._check(path)
        check_file(path, f"checkpoint '{self.prefix}'", single_link=False)    # a FIFO would block the read
        return path

    def _read_bytes(self, key: str, entry: _Entry, raw_crc: bool = True) -> bytearray:
        """The tensor's bytes; with ``raw_crc`` checked against the entry's CRC (strings are
        checked while decoding: their CRC covers the lengths as uint32, not as varints)."""
        path = self._data_file(key, entry)
        buffer = bytearray(entry.size)
        try:
            with open(path, "rb") as f:
                f.seek(entry.offset)
                got = f.readinto(buffer)
        except OSError as exc:
            raise CheckpointError(f"{path}: cannot read tensor '{key}': {exc.strerror or exc}") from None
        if got != entry.size:
            raise CheckpointError(f"{path}: truncated: tensor '{key}' needs bytes [{entry.offset}, "
                                  f"{entry.offset + entry.size}) but the file ends first")
        if raw_crc and crc32c.value(buffer) != crc32c.unmask(entry.crc32c):
            raise CheckpointError(f"{path}: checksum mismatch for tensor '{key}' (corrupt data)")
        return buffer

    def _read_partitioned(self, key: str, entry: _Entry, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
        full = np.empty(shape, dtype=object if dtype is dtypes.string else dtype.storage)
        covered = np.zeros(shape, dtype=bool)
        for piece in entry.slices:
            extents = _extents(piece)
            if len(extents) != len(shape):
                raise CheckpointError(f"{self._index}: tensor '{key}' has a slice of rank {len(extents)} "
                                      f"but rank {len(shape)}")
            region = tuple(slice(0, dim) if length < 0 else slice(start, start + length)
                           for (start, length), dim in zip(extents, shape))
            stored = self._slices.get(slice_key(key, extents))
            if stored is None:
                raise CheckpointError(f"{self._index}: partitioned tensor '{key}': its slice {extents} "
                                      "is not in the checkpoint")
            value = self._read_entry(key, stored, dtype, self._shape(key, stored))
            if value.shape != full[region].shape:
                raise CheckpointError(f"{self._index}: partitioned tensor '{key}': slice {extents} holds "
                                      f"shape {list(value.shape)}")
            full[region] = value
            covered[region] = True
        if not covered.all():
            raise CheckpointError(f"{self._index}: partitioned tensor '{key}': its slices do not cover "
                                  f"the whole shape {list(shape)}")
        return full


def _decode_strings(raw: bytearray, count: int, where: str) -> tuple[np.ndarray, int]:
    """The elements of a string tensor's bytes (varint lengths, checksum, contents) and the
    CRC-32C TensorFlow computes over them."""
    lengths = []
    pos = 0
    crc = 0
    if count == 0 and not raw:       # TensorFlow accepts an empty string tensor with no bytes at all
        return np.empty(0, dtype=object), crc
    try:
        for _ in range(count):
            length, pos = sstable.decode_varint(raw, pos)
            lengths.append(length)
    except ValueError:
        raise CheckpointError(f"{where}: string lengths run past the tensor's bytes") from None
    crc = crc32c.extend(crc, _lengths_as_checksummed(lengths))
    if pos + 4 > len(raw):
        raise CheckpointError(f"{where}: string tensor truncated before its length checksum")
    (stored,) = struct.unpack_from("<I", raw, pos)
    if crc32c.unmask(stored) != crc:
        raise CheckpointError(f"{where}: checksum mismatch in the string lengths (corrupt data)")
    crc = crc32c.extend(crc, raw[pos:pos + 4])
    pos += 4
    if pos + sum(lengths) != len(raw):
        raise CheckpointError(f"{where}: string lengths add up to {sum(lengths)} bytes but the tensor "
                              f"holds {len(raw) - pos}")
    out = np.empty(count, dtype=object)
    crc = crc32c.extend(crc, raw[pos:])
    for i, length in enumerate(lengths):
        out[i] = bytes(raw[pos:pos + length])
        pos += length
    return out, crc


def _lengths_as_checksummed(lengths: list[int]) -> bytes:
    """String lengths as TensorFlow checksums them: each a little-endian uint32 (uint64 when
    it does not fit, as TensorFlow does for elements over 4 GiB)."""
    if all(n <= 0xFFFFFFFF for n in lengths):
        return np.asarray(lengths, dtype="<u4").tobytes()
    return b"".join(struct.pack("<I" if n <= 0xFFFFFFFF else "<Q", n) for n in lengths)


# -- writing --------------------------------------------------------------------------------
def _as_tensor(where: str, value: Any, dtype: Any) -> tuple[np.ndarray, DType]:
    """The array to store for ``value`` and its dtype (``dtype`` overrides the array's own)."""
    try:
        want = None if dtype is None else dtypes.as_dtype(dtype)
        if want is dtypes.string or (want is None and _is_stringlike(value)):
            array = np.asarray(value, dtype=object)
            flat = [v.encode() if isinstance(v, str) else v for v in array.reshape(-1)]
            if not all(isinstance(v, (bytes, bytearray, np.bytes_)) for v in flat):
                raise CheckpointError(f"{where}: a string tensor must hold bytes or str elements")
            out = np.empty(array.shape, dtype=object)
            out.reshape(-1)[:] = [bytes(v) for v in flat] if flat else []
            return out, dtypes.string
        array = np.asarray(value)
        have = want or dtypes.as_dtype(array.dtype)
    except GradregError as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"{where}: {exc}") from None
    _check_supported(have, where)
    array = array.astype(have.storage, copy=False)
    return (array if array.flags.c_contiguous else array.copy(order="C")), have


def _is_stringlike(value: Any) -> bool:
    if isinstance(value, (str, bytes)):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "SUO"
    return isinstance(value, (list, tuple)) and np.asarray(value).dtype.kind in "SUO"


def _tensor_bytes(array: np.ndarray, dtype: DType) -> tuple[list[bytes | memoryview], int]:
    """The pieces written for one tensor and the CRC-32C TensorFlow stores for them."""
    if dtype is dtypes.string:
        flat = array.reshape(-1)
        sizes = [len(v) for v in flat]
        lengths = b"".join(sstable.encode_varint(n) for n in sizes)
        crc = crc32c.value(_lengths_as_checksummed(sizes))
        length_crc = struct.pack("<I", crc32c.mask(crc))
        body = b"".join(flat)
        crc = crc32c.extend(crc32c.extend(crc, length_crc), body)
        return [lengths, length_crc, body], crc
    if dtype is dtypes.bfloat16:
        data = float32_to_bfloat16(array)
    else:
        data = np.ascontiguousarray(array, dtype=_wire_dtype(dtype))
    raw = data.reshape(-1).view(np.uint8)
    return [raw.data], crc32c.value(raw)


def _shape_proto(shape: tuple[int, ...]) -> tensor_shape_pb2.TensorShapeProto:
    proto = tensor_shape_pb2.TensorShapeProto()
    for d in shape:
        proto.dim.add().size = d
    return proto


def write_bundle(prefix: str, tensors: Mapping[str, Any], dtypes_by_key: Mapping[str, Any] | None = None,
                 num_shards: int = 1) -> list[str]:
    """Write ``tensors`` (name -> array) as the bundle ``prefix``; returns the files written.

    ``dtypes_by_key`` gives a dtype where the array's own does not say it (``"bfloat16"``
    for float32 arrays holding bfloat16 values; strings are recognised by themselves).
    Tensors are laid out in the mapping's order, spread over ``num_shards`` data files by
    size. Every file is written to a temporary file beside it, flushed and then renamed into
    place, the index last (formats.atomic.atomic_write_all); on error nothing is renamed and the
    temporary files are removed.
    Data shards of an earlier bundle at the same prefix with another shard count are removed.
    """
    prefix = os.fspath(prefix)
    dtypes_by_key = dict(dtypes_by_key or {})
    if num_shards < 1:
        raise CheckpointError(f"{prefix}: num_shards must be at least 1, not {num_shards}")
    for key in tensors:
        if not isinstance(key, str) or not key:
            raise CheckpointError(f"{prefix}: tensor names must be non-empty strings, not {key!r}")
    prepared = {key: _as_tensor(f"{prefix}: tensor '{key}'", value, dtypes_by_key.get(key))
                for key, value in tensors.items()}
    directory = os.path.dirname(os.path.abspath(prefix))
    staged: list[tuple[str, bytes | Writer]] = []       # (final path, contents)
    entries = _stage_shards(prefix, prepared, num_shards, staged)
    header = tensor_bundle_pb2.BundleHeaderProto(num_shards=num_shards)
    header.version.producer = BUNDLE_VERSION
    records = [(HEADER_KEY, header.SerializeToString())]
    records += sorted((k.encode(), e.SerializeToString()) for k, e in entries.items())
    staged.append((index_path(prefix), lambda f: f.write(sstable.write_table(records))))
    for path, _ in staged:      # never through a link out of the directory (docs/security.md)
        resolve_inside(directory, os.path.basename(path), f"checkpoint '{prefix}'")
    try:
        os.makedirs(directory, exist_ok=True)
        atomic_write_all(staged)    # data shards first: the index is what readers open
    except (OSError, FileWriteError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise CheckpointError(f"{prefix}: cannot write checkpoint: {detail}") from None
    _remove_stale_shards(prefix, num_shards)
    return [final for final, _ in staged]


_Prepared = dict[str, tuple[np.ndarray, DType]]


def _stage_shards(prefix: str, prepared: _Prepared, num_shards: int,
                  staged: list[tuple[str, bytes | Writer]]) -> dict[str, tensor_bundle_pb2.BundleEntryProto]:
    shard_of = _assign_shards(prepared, num_shards)
    entries = {}
    for shard in range(num_shards):
        pieces: list[bytes | memoryview] = []
        offset = 0
        for key, (array, dtype) in prepared.items():
            if shard_of[key] != shard:
                continue
            parts, crc = _tensor_bytes(array, dtype)
            size = sum(len(p) for p in parts)
            entries[key] = tensor_bundle_pb2.BundleEntryProto(
                dtype=cast("types_pb2.DataType", dtype.enum), shape=_shape_proto(array.shape),
                shard_id=shard, offset=offset, size=size,
                crc32c=crc32c.mask(crc))
            pieces += parts
            offset += size
        staged.append((data_path(prefix, shard, num_shards), _pieces_writer(pieces)))
    return entries


def _assign_shards(prepared: _Prepared, num_shards: int) -> dict[str, int]:
    """Each tensor to the shard with the fewest bytes so far (largest tensors first)."""
    loads = [0] * num_shards
    shard_of = {}
    for key in sorted(prepared, key=lambda k: -prepared[k][0].nbytes):
        shard = loads.index(min(loads))
        shard_of[key] = shard
        loads[shard] += max(prepared[key][0].nbytes, 1)
    return shard_of


def _pieces_writer(pieces: list[bytes | memoryview]) -> Writer:
    """A writer of the pieces one after the other (no joined copy of a large shard)."""
    def write(f: IO[bytes]) -> None:
        for piece in pieces:
            f.write(piece)
    return write


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _remove_stale_shards(prefix: str, num_shards: int) -> None:
    directory = os.path.dirname(os.path.abspath(prefix))
    base = os.path.basename(prefix)
    for name in os.listdir(directory):
        if name.startswith(base):
            match = _SHARD_PATTERN.fullmatch(name[len(base):])
            if match and int(match.group(2)) != num_shards:
                _remove(os.path.join(directory, name))
