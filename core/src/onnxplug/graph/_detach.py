"""Reading a model file with its large weights read straight into numpy arrays.

Parsing a file with protobuf needs all of its bytes in memory and then holds a second copy in
the parsed message, so a model with embedded weights peaked at twice their size while loading
(BERT-base: ~880 MB for 440 MB of weights).  This reader walks the protobuf wire format of the
file instead: the ``raw_data`` of each top-level initializer of :data:`MIN_BYTES` or more is read
directly into an aligned numpy buffer, and the rest of the model — small — is re-encoded without
it and parsed as usual.  The loader then gives onnx-ir those arrays as the initializers' values.

Only what the wire format makes certain is detached: length-delimited ``raw_data`` (field 9) of
a ``TensorProto`` in ``GraphProto.initializer`` (field 5) of ``ModelProto.graph`` (field 7), of a
fixed-width numpy type, on a little-endian machine (``raw_data`` is little-endian).  A file whose
structure is anything else (groups, a truncated field) is read the ordinary way.
"""

from __future__ import annotations

import dataclasses
import io
import math
import sys
from typing import BinaryIO

import numpy as np
import onnx

from ..errors import Fail

__all__ = ["MIN_BYTES", "Detached", "read_detached"]

#: Initializers with at least this many bytes of raw data are read into their own arrays.
MIN_BYTES = 1 << 16

_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9
_LENGTH_DELIMITED = 2
#: Element types whose raw data is a plain little-endian array of one numpy dtype.
_DTYPES = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.INT16: np.int16,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.UINT16: np.uint16,
    onnx.TensorProto.UINT32: np.uint32,
    onnx.TensorProto.UINT64: np.uint64,
    onnx.TensorProto.BOOL: np.bool_,
}


@dataclasses.dataclass(frozen=True)
class Detached:
    """An initializer's data, read out of the file: ``array`` has the tensor's dtype and dims."""

    name: str
    array: np.ndarray


class _NotStreamable(Exception):
    """The file is not laid out as this reader expects: read it the ordinary way."""


def read_detached(path: str) -> tuple[bytes, dict[str, Detached]] | None:
    """The model file's bytes without the large initializers' raw data, and those initializers'
    arrays by name; ``None`` where the file should be read the ordinary way."""
    if sys.byteorder != "little":
        return None
    try:
        with open(path, "rb", buffering=1 << 20) as handle:
            detached: dict[str, Detached] = {}
            size = _file_size(handle)
            model = _message(
                handle, size, lambda field, length: _graph(handle, length, detached) if field == _MODEL_GRAPH else None
            )
            return model, detached
    except _NotStreamable:
        return None


def _file_size(handle: BinaryIO) -> int:
    handle.seek(0, io.SEEK_END)
    size = handle.tell()
    handle.seek(0)
    return size


def _varint(handle: BinaryIO) -> tuple[int, bytes]:
    """A varint and its encoding, read from ``handle``."""
    value, shift, raw = 0, 0, bytearray()
    while True:
        byte = handle.read(1)
        if not byte:
            raise _NotStreamable("truncated varint")
        raw += byte
        value |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return value, bytes(raw)
        shift += 7
        if shift > 63:
            raise _NotStreamable("varint too long")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read(handle: BinaryIO, count: int) -> bytes:
    data = handle.read(count)
    if len(data) != count:
        raise _NotStreamable("truncated field")
    return data


def _message(handle: BinaryIO, length: int, descend) -> bytes:
    """Re-encode the next ``length`` bytes of ``handle`` as a message, field by field;
    ``descend(field, length)`` returns the new content of a length-delimited field it rewrites
    (``None`` to copy the field as it is)."""
    out = io.BytesIO()
    end = handle.tell() + length
    while handle.tell() < end:
        tag, tag_bytes = _varint(handle)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            out.write(tag_bytes + _varint(handle)[1])
        elif wire == 1:
            out.write(tag_bytes + _read(handle, 8))
        elif wire == 5:
            out.write(tag_bytes + _read(handle, 4))
        elif wire == _LENGTH_DELIMITED:
            size, size_bytes = _varint(handle)
            if handle.tell() + size > end:
                raise _NotStreamable("a field runs past its message")
            start = handle.tell()
            content = descend(field, size)
            if content is None:
                handle.seek(start)
                out.write(tag_bytes + size_bytes + _read(handle, size))
            elif content is not _DROP:
                out.write(tag_bytes + _encode_varint(len(content)) + content)
        else:
            raise _NotStreamable(f"wire type {wire}")
    if handle.tell() != end:
        raise _NotStreamable("a message's fields overrun it")
    return out.getvalue()


_DROP = object()  # what ``descend`` returns for a field it removed


def _graph(handle: BinaryIO, length: int, detached: dict[str, Detached]) -> bytes:
    return _message(
        handle, length, lambda field, size: _tensor(handle, size, detached) if field == _GRAPH_INITIALIZER else None
    )


def _tensor(handle: BinaryIO, length: int, detached: dict[str, Detached]) -> bytes:
    """An initializer, with its raw data moved into ``detached`` when it is large and plain."""
    raw: list[np.ndarray] = []

    def take_raw(field: int, size: int):
        if field != _TENSOR_RAW_DATA or size < MIN_BYTES:
            return None
        buffer = np.empty(size, np.uint8)
        if handle.readinto(memoryview(buffer)) != size:
            raise _NotStreamable("truncated raw data")
        raw.append(buffer)
        return _DROP

    kept = _message(handle, length, take_raw)
    if not raw:
        return kept
    header = onnx.TensorProto()
    header.ParseFromString(kept)
    buffer = raw[-1]
    dtype = _DTYPES.get(header.data_type)
    if dtype is None or len(raw) > 1 or header.HasField("raw_data"):
        # not a plain array (or an odd file): the raw data goes back where it was
        tag = _encode_varint(_TENSOR_RAW_DATA << 3 | _LENGTH_DELIMITED)
        return kept + tag + _encode_varint(buffer.size) + buffer.tobytes()
    dims = tuple(int(d) for d in header.dims)
    expected = math.prod(dims) * np.dtype(dtype).itemsize
    if buffer.size != expected:
        raise Fail(
            f"initializer '{header.name}' holds {buffer.size} bytes of raw data but its shape {list(dims)} "
            f"needs {expected}"
        )
    detached[header.name] = Detached(header.name, buffer.view(dtype).reshape(dims))
    return kept
