"""The Open Inference Protocol (KServe v2) REST encodings, with no web framework attached.

An infer request is a JSON object (``inputs``: name, shape, datatype, and ``data`` or a
``binary_data_size`` parameter), optionally followed by raw tensor bytes: the *binary tensor data*
extension, where the ``Inference-Header-Content-Length`` header gives the JSON part's length and
the tensors follow in input order.  Responses use the same layout; an output is sent as binary
when it asks for it (``parameters.binary_data``) or the request sets ``binary_data_output``.
``tritonclient`` sends tensors as binary by default.

Everything here raises :class:`ProtocolError` (an :class:`~onnxplug.InvalidArgument` carrying an
HTTP status) for a request that does not follow the protocol or does not fit the model, naming
the input and what was expected; the HTTP front answers it as ``{"error": message}``.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidArgument
from ._signature import ModelSignature

__all__ = [
    "DATATYPES",
    "HEADER_LENGTH",
    "InferRequest",
    "ProtocolError",
    "datatype_of",
    "encode_infer_response",
    "model_metadata",
    "parse_infer_request",
]

HEADER_LENGTH = "Inference-Header-Content-Length"

# The protocol's tensor datatypes and the numpy dtypes that hold them (BYTES: object arrays).
DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(object),
}
_BY_DTYPE = {dtype: name for name, dtype in DATATYPES.items()}


class ProtocolError(InvalidArgument):
    """A request the server refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def datatype_of(dtype: np.dtype | None) -> str:
    """The protocol's datatype for a numpy dtype (``float32`` → ``FP32``; strings → ``BYTES``)."""
    if dtype is None:
        return "UNSUPPORTED"
    dtype = np.dtype(dtype)
    if dtype.kind in "USO":
        return "BYTES"
    return _BY_DTYPE.get(dtype, "UNSUPPORTED")


def model_metadata(name: str, signature: ModelSignature, versions: Sequence[str] = ("1",)) -> dict:
    """``GET /v2/models/{name}``: inputs and outputs with datatypes and shapes (-1 for symbolic)."""

    def tensors(specs):
        return [
            {
                "name": spec.name,
                "datatype": datatype_of(spec.dtype),
                "shape": [d if isinstance(d, int) and d >= 0 else -1 for d in (spec.shape or [])],
            }
            for spec in specs.values()
        ]

    return {
        "name": name,
        "versions": list(versions),
        "platform": "onnxplug",
        "inputs": tensors(signature.inputs),
        "outputs": tensors(signature.outputs),
    }


@dataclass
class InferRequest:
    """A parsed infer request: feeds as arrays, the outputs to return and how to send them."""

    id: str | None
    feeds: dict[str, np.ndarray]
    outputs: list[str] | None
    binary: dict[str, bool] = field(default_factory=dict)
    binary_default: bool = False
    timeout_s: float | None = None


def parse_infer_request(body: bytes, header_length: int | str | None, signature: ModelSignature) -> InferRequest:
    """Decode ``POST /v2/models/{name}/infer``'s body (JSON, or JSON then binary tensors)."""
    if header_length is None:
        header, binary = body, b""
    else:
        try:
            length = int(header_length)
        except ValueError:
            raise ProtocolError(f"{HEADER_LENGTH} must be an integer, got {header_length!r}") from None
        if not 0 <= length <= len(body):
            raise ProtocolError(f"{HEADER_LENGTH} is {length} but the body has {len(body)} bytes")
        header, binary = body[:length], body[length:]
    try:
        document = json.loads(header)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ProtocolError(f"the request is not valid JSON: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("inputs"), list):
        raise ProtocolError("the request must be a JSON object with an 'inputs' list")
    parameters = _parameters(document, "request")
    feeds: dict[str, np.ndarray] = {}
    offset = 0
    for entry in document["inputs"]:
        name, array, used = _input(entry, binary, offset, signature)
        if name in feeds:
            raise ProtocolError(f"input {name!r} is given twice")
        feeds[name] = array
        offset += used
    if offset != len(binary):
        raise ProtocolError(f"the body has {len(binary) - offset} bytes of binary data that no input claims")
    outputs = None
    binary_flags: dict[str, bool] = {}
    if document.get("outputs") is not None:
        if not isinstance(document["outputs"], list):
            raise ProtocolError("'outputs' must be a list")
        outputs = []
        for entry in document["outputs"]:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ProtocolError("each requested output must be an object with a 'name'")
            name = entry["name"]
            if name not in signature.outputs:
                raise ProtocolError(f"unknown output {name!r}; the model's outputs are {signature.output_names}")
            out_parameters = _parameters(entry, f"output {name!r}")
            if out_parameters.get("classification"):
                raise ProtocolError(f"output {name!r}: the classification extension is not supported")
            if "binary_data" in out_parameters:
                binary_flags[name] = bool(out_parameters["binary_data"])
            outputs.append(name)
    timeout_s = None
    if parameters.get("timeout") is not None:  # microseconds, as Triton and tritonclient use it
        try:
            timeout_s = float(parameters["timeout"]) / 1e6
        except (TypeError, ValueError):
            given = parameters["timeout"]
            raise ProtocolError(f"parameter 'timeout' must be a number of microseconds, got {given!r}") from None
    request_id = document.get("id")
    return InferRequest(
        id=None if request_id is None else str(request_id),
        feeds=feeds,
        outputs=outputs,
        binary=binary_flags,
        binary_default=bool(parameters.get("binary_data_output", False)),
        timeout_s=timeout_s,
    )


def _parameters(entry: Mapping, what: str) -> dict:
    parameters = entry.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise ProtocolError(f"{what}: 'parameters' must be an object")
    return parameters


def _input(entry: Any, binary: bytes, offset: int, signature: ModelSignature) -> tuple[str, np.ndarray, int]:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise ProtocolError("each input must be an object with a 'name'")
    name = entry["name"]
    spec = signature.inputs.get(name)
    if spec is None:
        raise ProtocolError(f"unknown input {name!r}; the model's inputs are {sorted(signature.inputs)}")
    datatype = entry.get("datatype")
    dtype = DATATYPES.get(datatype) if isinstance(datatype, str) else None
    if dtype is None:
        raise ProtocolError(f"input {name!r}: unknown datatype {datatype!r}; expected one of {sorted(DATATYPES)}")
    expected = datatype_of(spec.dtype)
    if datatype != expected:
        raise ProtocolError(f"input {name!r}: expected datatype {expected} ({spec.type}), got {datatype}")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ProtocolError(f"input {name!r}: 'shape' must be a list of non-negative integers, got {shape!r}")
    count = math.prod(shape)
    size = _parameters(entry, f"input {name!r}").get("binary_data_size")
    if size is not None:
        if not isinstance(size, int) or size < 0 or offset + size > len(binary):
            raise ProtocolError(f"input {name!r}: binary_data_size {size!r} overruns the body's binary data")
        raw = binary[offset : offset + size]
        if datatype == "BYTES":
            array = _decode_bytes(raw, count, name)
        else:
            if size != count * dtype.itemsize:
                raise ProtocolError(
                    f"input {name!r}: shape {shape} of {datatype} needs {count * dtype.itemsize} bytes, got {size}"
                )
            array = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype, copy=True)
        return name, array.reshape(shape), size
    if "data" not in entry:
        raise ProtocolError(f"input {name!r} has neither 'data' nor a binary_data_size parameter")
    flat = _flatten(entry["data"])
    if len(flat) != count:
        raise ProtocolError(f"input {name!r}: shape {shape} holds {count} elements, 'data' has {len(flat)}")
    try:
        if datatype == "BYTES":
            array = np.array([v if isinstance(v, str) else str(v) for v in flat], dtype=object)
        elif datatype == "BOOL":
            if not all(isinstance(v, bool) for v in flat):
                raise ValueError("BOOL data must be true/false")
            array = np.array(flat, dtype=dtype)
        else:
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in flat):
                raise ValueError("data must be numbers")
            array = np.array(flat, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as error:
        raise ProtocolError(f"input {name!r}: 'data' does not fit {datatype}: {error}") from None
    return name, array.reshape(shape), 0


def _flatten(data: Any) -> list:
    """The protocol sends data flattened in row-major order; nested lists are accepted too."""
    if not isinstance(data, list):
        return [data]
    if all(not isinstance(v, list) for v in data):
        return data
    flat: list = []
    stack = [iter(data)]
    while stack:
        for value in stack[-1]:
            if isinstance(value, list):
                stack.append(iter(value))
                break
            flat.append(value)
        else:
            stack.pop()
    return flat


def _decode_bytes(raw: bytes, count: int, name: str) -> np.ndarray:
    """BYTES elements in binary form: each a 4-byte little-endian length, then that many bytes."""
    items = []
    offset = 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise ProtocolError(f"input {name!r}: truncated BYTES element length")
        (length,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + length > len(raw):
            raise ProtocolError(f"input {name!r}: a BYTES element runs past the binary data")
        items.append(raw[offset : offset + length].decode("utf-8", errors="surrogateescape"))
        offset += length
    if len(items) != count:
        raise ProtocolError(f"input {name!r}: shape holds {count} elements, the binary data has {len(items)}")
    return np.array(items, dtype=object)


def _encode_bytes(array: np.ndarray) -> bytes:
    parts = []
    for value in array.reshape(-1):
        data = value if isinstance(value, bytes) else str(value).encode("utf-8", errors="surrogateescape")
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return b"".join(parts)


def encode_infer_response(
    model_name: str,
    model_version: str,
    request: InferRequest,
    names: Sequence[str],
    values: Sequence[np.ndarray],
) -> tuple[bytes, int | None]:
    """The infer response body and, when any output is binary, the JSON part's length (the
    ``Inference-Header-Content-Length`` header's value; ``None`` for a JSON-only body)."""
    outputs = []
    chunks = []
    for name, value in zip(names, values):
        value = np.asarray(value)
        datatype = datatype_of(value.dtype)
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(value.shape)}
        if request.binary.get(name, request.binary_default):
            raw = (
                _encode_bytes(value)
                if datatype == "BYTES"
                else np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes()
            )
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        elif datatype == "BYTES":
            flat = value.reshape(-1)
            entry["data"] = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in flat]
        else:
            entry["data"] = value.reshape(-1).tolist()
        outputs.append(entry)
    document: dict[str, Any] = {"model_name": model_name, "model_version": model_version, "outputs": outputs}
    if request.id is not None:
        document["id"] = request.id
    header = json.dumps(document, allow_nan=True).encode()
    if not chunks:
        return header, None
    return header + b"".join(chunks), len(header)
