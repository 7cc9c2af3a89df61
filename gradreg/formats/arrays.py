"""Reading feed files (.npy and .npz) that may be hostile: truncated, garbage, or promising more
elements than the element limit allows.

Every array's header is read and its element count checked against the limit *before* its data
is read, so an .npy header promising 2**40 floats or a small zip member inflating to gigabytes
is refused without allocating; a member's data is read through the zip reader, which stops at
the member's declared size. Objects (pickles) are never loaded. Every failure is a
:class:`~gradreg.errors.FeedError` naming the file (and the member).
"""
from __future__ import annotations

import zipfile
import zlib
from typing import IO

import numpy as np
from numpy.lib import format as npy_format

from gradreg import config
from gradreg.errors import ElementLimitError, FeedError


def read_npy(path: str, max_elements: int | None = None) -> np.ndarray:
    """The array in the .npy file ``path``, its size checked against ``max_elements``
    (default :data:`gradreg.config.max_elements`) before its data is read."""
    try:
        with open(path, "rb") as stream:
            return _read_array(stream, path, _limit(max_elements))
    except OSError as exc:
        raise FeedError(f"{path}: cannot read feed: {exc.strerror or exc}") from None


def read_npz(path: str, max_elements: int | None = None) -> dict[str, np.ndarray]:
    """The arrays of the .npz archive ``path`` keyed by member name without ``.npy``, each checked
    against ``max_elements`` before it is read."""
    limit = _limit(max_elements)
    try:
        with zipfile.ZipFile(path) as archive:
            arrays = {}
            for info in archive.infolist():
                if not info.filename:           # zipfile's is_dir() would raise IndexError
                    raise FeedError(f"{path}: a member without a name; not a readable .npz file")
                if info.is_dir():
                    continue
                where = f"{path}: member '{info.filename}'"
                if info.flag_bits & 0x1:      # zipfile would raise RuntimeError asking for a password
                    raise FeedError(f"{where} is encrypted; not a readable .npz file")
                key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                with archive.open(info) as member:
                    arrays[key] = _read_array(member, where, limit)
            return arrays
    except OSError as exc:
        raise FeedError(f"{path}: cannot read feeds: {exc.strerror or exc}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, ValueError, NotImplementedError) as exc:
        raise FeedError(f"{path}: not a readable .npz file: {_one_line(exc)}") from None


def _limit(max_elements: int | None) -> int:
    return config.max_elements if max_elements is None else int(max_elements)


def _read_array(stream: IO[bytes], where: str, limit: int) -> np.ndarray:
    try:
        version = npy_format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = npy_format.read_array_header_1_0(stream)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = npy_format.read_array_header_2_0(stream)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except zipfile.BadZipFile:
        raise
    except Exception as exc:   # numpy's header parser raises ValueError, SyntaxError, TokenError, EOFError...
        raise FeedError(f"{where}: not a readable .npy array: {_one_line(exc)}") from None
    if dtype.hasobject:
        raise FeedError(f"{where}: holds Python objects ({dtype}), which gradreg never loads")
    count = 1
    for dim in shape:
        count *= int(dim)
    if count > limit:
        raise ElementLimitError(f"{where}: an array of shape {tuple(shape)} ({count:,} elements) is over the "
                                f"element limit {limit:,} ({config.how_to_raise('max_elements')})")
    data = _read_exactly(stream, count * dtype.itemsize, where)
    flat: np.ndarray = np.frombuffer(data, dtype=dtype, count=count) if count else np.empty(0, dtype)
    shaped: np.ndarray = flat.reshape(shape[::-1]).transpose() if fortran else flat.reshape(shape)
    result: np.ndarray = shaped.copy()
    return result


def _read_exactly(stream: IO[bytes], size: int, where: str) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise FeedError(f"{where}: truncated: the header promises {size:,} bytes of data, the file has {len(data):,}")
    return data


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
