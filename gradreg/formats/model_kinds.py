"""Recognising model files by their content: Keras archives (``.keras``) and HDF5 files
(``.h5``), ONNX models, TFLite flatbuffers, TensorFlow checkpoint files and a bare
``saved_model.pb``, so that an error can say what a file is and what to do instead
(:func:`check_model_file`), and so that the graph formats can sniff a file's first bytes
(:func:`identify_model_bytes`). Light on purpose: every command's format sniffing imports it,
and reading SavedModels (gradreg.formats.saved_model) is imported only when one is read.
"""
from __future__ import annotations

import io
import os
import struct

from gradreg.errors import UnsupportedModelFormatError
from gradreg.formats import sstable

SAVED_MODEL_PB = "saved_model.pb"
SAVED_MODEL_PBTXT = "saved_model.pbtxt"

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
ONNX_ADVICE = ("gradreg reads ONNX models with its ONNX support, which is not installed here (the 'onnx' "
               "extra: pip install 'gradreg[onnx]'); or export the model to a TensorFlow SavedModel")
ADVICE = {
    "keras": ("a Keras model archive (.keras)",
              "load it in Keras and export a SavedModel: model.export('DIR') (Keras 3) or "
              "tf.saved_model.save(model, 'DIR'), then use DIR"),
    "hdf5": ("an HDF5 file (a Keras .h5 model or weights)",
             "load it in Keras (keras.models.load_model) and export a SavedModel with model.export('DIR'), "
             "then use DIR"),
    "onnx": ("an ONNX model", ONNX_ADVICE),
    "tflite": ("a TensorFlow Lite flatbuffer",
               "gradreg needs the SavedModel or GraphDef it was converted from"),
    "checkpoint": ("a TensorFlow checkpoint file (variable values, no graph)",
                   "pass the SavedModel directory, or read the values with gradreg.formats.tensor_bundle"),
    "saved_model_pb": ("the saved_model.pb of a SavedModel", "pass the SavedModel's directory instead"),
}


def model_file_advice(kind: str) -> tuple[str, str]:
    """(what a file of ``kind`` is, what to do instead) for a kind :func:`identify_model_file`
    names."""
    return ADVICE[kind]


def is_saved_model_dir(path: str) -> bool:
    """Whether ``path`` is a directory holding a saved_model.pb or saved_model.pbtxt file."""
    return os.path.isdir(path) and any(os.path.isfile(os.path.join(path, name))
                                       for name in (SAVED_MODEL_PB, SAVED_MODEL_PBTXT))


def identify_model_file(path: str) -> str | None:
    """What kind of model file ``path`` is, judged by its bytes: ``"saved_model_dir"``,
    ``"keras"``, ``"hdf5"``, ``"onnx"``, ``"tflite"``, ``"checkpoint"``, ``"saved_model_pb"``,
    or None (possibly a GraphDef, or unknown)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return "saved_model_dir" if is_saved_model_dir(path) else None
    if not os.path.isfile(path):
        return None      # a FIFO would block (or be consumed), a device never ends: no kind to tell
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
            f.seek(max(0, os.path.getsize(path) - 8))
            tail = f.read(8)
    except OSError:
        return None
    if head[:4] == b"PK\x03\x04":
        return "keras" if _is_keras_archive(path) else None
    kind = identify_model_bytes(head, complete=False)
    if kind in ("hdf5", "tflite"):
        return kind
    if len(tail) == 8 and struct.unpack("<Q", tail)[0] == sstable.MAGIC or ".data-" in os.path.basename(path):
        return "checkpoint"
    return _identify_protobuf(path, head)


def identify_model_bytes(data: bytes, complete: bool = True) -> str | None:
    """What kind of model file starts with ``data`` (the whole content when ``complete``, else
    its first bytes, as a format sniffer sees them): ``"hdf5"``, ``"keras"``, ``"tflite"``,
    ``"onnx"``, ``"saved_model_pb"``, or None."""
    if any(data[offset:offset + 8] == _HDF5_SIGNATURE for offset in (0, 512, 1024, 2048)):
        return "hdf5"
    if data[:4] == b"PK\x03\x04":
        return "keras" if _is_keras_zip(data, complete) else None
    if data[4:8] == b"TFL3":
        return "tflite"
    if not data.startswith(b"\x08"):
        return None
    return _protobuf_kind(_top_level_fields(data, allow_truncated=not complete), complete)


def _is_keras_zip(data: bytes, complete: bool) -> bool:
    if complete:
        import zipfile  # start-up: imported for a zip archive only
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                return _keras_names(set(archive.namelist()))
        except zipfile.BadZipFile:
            return False
    # The first local file header names the archive's first member (offset 26: name length).
    if len(data) < 30:
        return False
    name_length = struct.unpack("<H", data[26:28])[0]
    return data[30:30 + name_length] in (b"metadata.json", b"config.json", b"model.weights.h5")


def _keras_names(names: set[str]) -> bool:
    return "config.json" in names and ("metadata.json" in names or "model.weights.h5" in names)


def _is_keras_archive(path: str) -> bool:
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return False
    return _keras_names(names)


# Top-level field numbers and wire types of the protos that begin with a varint field 1.
_ONNX_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}
_SAVED_MODEL_FIELDS = {1: 0, 2: 2}


def _identify_protobuf(path: str, head: bytes) -> str | None:
    """ONNX ModelProto and SavedModel both start with a varint field 1 (a GraphDef never does)."""
    if not head.startswith(b"\x08"):
        return None
    with open(path, "rb") as f:
        return _protobuf_kind(_top_level_fields(f.read()))


def _protobuf_kind(fields: set[tuple[int, int]] | None, complete: bool = True) -> str | None:
    if fields is None:
        return None
    saved_model = set(_SAVED_MODEL_FIELDS.items())
    if fields <= saved_model and (2, 2) in fields:
        return "saved_model_pb"
    # A whole ONNX model has a graph (7); its first bytes at least a field a SavedModel lacks.
    if fields <= set(_ONNX_FIELDS.items()) and ((7, 2) in fields if complete else bool(fields - saved_model)):
        return "onnx"
    return None


def _top_level_fields(data: bytes, allow_truncated: bool = False) -> set[tuple[int, int]] | None:
    """The (field number, wire type) pairs of a serialized message's top level, or None if the
    bytes are not a well-formed message (``allow_truncated``: the last field may be cut off)."""
    pos, found = 0, set()
    try:
        while pos < len(data):
            tag, pos = sstable.decode_varint(data, pos)
            number, wire = tag >> 3, tag & 7
            if wire == 0:
                _, pos = sstable.decode_varint(data, pos)
            elif wire == 2:
                length, pos = sstable.decode_varint(data, pos)
                pos += length
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            else:
                return None
            if number == 0 or (pos > len(data) and not allow_truncated):
                return None
            found.add((number, wire))
    except ValueError:
        return found if allow_truncated and found else None
    return found


def check_model_file(path: str) -> None:
    """Raise UnsupportedModelFormatError if ``path`` is a model file gradreg does not load
    (Keras, HDF5, ONNX, TFLite, a checkpoint, a bare saved_model.pb), saying what to do."""
    kind = identify_model_file(path)
    if kind in ADVICE:
        what, todo = ADVICE[kind]
        raise UnsupportedModelFormatError(f"{path}: this is {what}, not a TensorFlow graph; {todo}", kind)
