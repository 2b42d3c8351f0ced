"""LoRA adapters: named parameters fed to a model per run, in onnxruntime's adapter file format.

An adapter is a set of named tensors (typically the low-rank ``A``/``B`` weights of a LoRA
fine-tune) that a model takes as inputs.  ``RunOptions.add_active_adapter(adapter)`` feeds them
to every run with those options; a feed the caller gives by the same name wins.  Several
adapters can be active; a later one wins over an earlier one.

Files use onnxruntime's ``.onnx_adapter`` format (a FlatBuffer, identifier ``TORT``; schema
``onnxruntime/lora/adapter_format/adapter_schema.fbs``), so adapters written by onnxruntime's
``AdapterFormat.export_adapter`` load here and the other way round.  Reading and writing them
needs the ``flatbuffers`` package (``pip install onnxplug-core[lora]``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import Fail, InvalidArgument
from ..graph import np_dtype, onnx_element_type
from .ortvalue import OrtValue

__all__ = ["AdapterFormat", "LoraAdapter", "with_adapters", "FORMAT_VERSION"]

#: The adapter format version onnxruntime writes and reads.
FORMAT_VERSION = 1
_IDENTIFIER = b"TORT"
# The schema's TensorDataType numbers are ONNX's TensorProto ones; strings are not allowed.
_STRING = 8


def _flatbuffers() -> Any:
    try:
        import flatbuffers
    except ImportError:
        raise Fail(
            "reading or writing LoRA adapter files needs the flatbuffers package: pip install onnxplug-core[lora]"
        ) from None
    return flatbuffers


def _encode(format_version: int, adapter_version: int, model_version: int, params: Mapping[str, np.ndarray]) -> bytes:
    fb = _flatbuffers()
    builder = fb.Builder(1024)
    offsets = []
    for name, array in params.items():
        array = np.ascontiguousarray(array)
        name_offset = builder.CreateString(name)
        builder.StartVector(8, array.ndim, 8)
        for dim in reversed(array.shape):
            builder.PrependInt64(int(dim))
        dims_offset = builder.EndVector()
        raw = array.tobytes()
        builder.StartVector(1, len(raw), 8)  # force_align: 8, as the schema asks
        builder.head -= len(raw)
        builder.Bytes[builder.head : builder.head + len(raw)] = raw
        raw_offset = builder.EndVector(len(raw))
        builder.StartObject(4)
        builder.PrependUOffsetTRelativeSlot(0, name_offset, 0)
        builder.PrependUOffsetTRelativeSlot(1, dims_offset, 0)
        builder.PrependInt32Slot(2, int(onnx_element_type(array.dtype)), 0)
        builder.PrependUOffsetTRelativeSlot(3, raw_offset, 0)
        offsets.append(builder.EndObject())
    builder.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    params_offset = builder.EndVector()
    builder.StartObject(4)
    builder.PrependInt32Slot(0, format_version, 0)
    builder.PrependInt32Slot(1, adapter_version, 0)
    builder.PrependInt32Slot(2, model_version, 0)
    builder.PrependUOffsetTRelativeSlot(3, params_offset, 0)
    builder.Finish(builder.EndObject(), file_identifier=_IDENTIFIER)
    return bytes(builder.Output())


def _decode(data: bytes, source: str) -> tuple[int, int, int, dict[str, np.ndarray]]:
    fb = _flatbuffers()
    from flatbuffers import number_types as types
    from flatbuffers.table import Table

    if len(data) < 8 or data[4:8] != _IDENTIFIER:
        raise InvalidArgument(f"{source} is not an onnxruntime adapter file (no 'TORT' identifier)")
    try:
        root = Table(data, fb.encode.Get(fb.packer.uoffset, data, 0))

        def field(table: Table, slot: int) -> int:
            return table.Offset(4 + 2 * slot)

        def int32(table: Table, slot: int) -> int:
            offset = field(table, slot)
            return table.Get(types.Int32Flags, offset + table.Pos) if offset else 0

        params: dict[str, np.ndarray] = {}
        vector = field(root, 3)
        for index in range(root.VectorLen(vector) if vector else 0):
            param = Table(data, root.Indirect(root.Vector(vector) + 4 * index))
            name = param.String(field(param, 0) + param.Pos).decode()
            dims_at = field(param, 1)
            dims = [int(d) for d in param.GetVectorAsNumpy(types.Int64Flags, dims_at)] if dims_at else []
            code = int32(param, 2)
            if code == _STRING:
                raise InvalidArgument(f"{source}: parameter '{name}' is a string tensor, which adapters cannot hold")
            raw_at = field(param, 3)
            raw = param.GetVectorAsNumpy(types.Uint8Flags, raw_at).tobytes() if raw_at else b""
            params[name] = np.frombuffer(raw, dtype=np_dtype(code)).reshape(dims).copy()
        return int32(root, 0), int32(root, 1), int32(root, 2), params
    except (IndexError, ValueError, TypeError) as error:
        raise InvalidArgument(f"{source} is not a readable onnxruntime adapter file: {error}") from None


class AdapterFormat:
    """Build or inspect an adapter file: ``set_parameters({name: OrtValue})``, then
    ``export_adapter(path)``; ``AdapterFormat.read_adapter(path)`` reads one back."""

    def __init__(self) -> None:
        self._format_version = FORMAT_VERSION
        self._adapter_version = 0
        self._model_version = 0
        self._params: dict[str, np.ndarray] = {}

    @staticmethod
    def read_adapter(file_path: str | os.PathLike) -> AdapterFormat:
        """:raises NoSuchFile-like Fail: a missing file; InvalidArgument: not an adapter file."""
        path = os.fspath(file_path)
        if not os.path.isfile(path):
            raise Fail(f"Failed to read adapter file {path}: no such file")
        with open(path, "rb") as handle:
            data = handle.read()
        adapter = AdapterFormat()
        format_version, adapter._adapter_version, adapter._model_version, adapter._params = _decode(data, path)
        if format_version != FORMAT_VERSION:
            raise InvalidArgument(
                f"{path}: adapter format version {format_version}; this onnxplug reads {FORMAT_VERSION}"
            )
        adapter._format_version = format_version
        return adapter

    def export_adapter(self, file_path: str | os.PathLike) -> None:
        data = _encode(self._format_version, self._adapter_version, self._model_version, self._params)
        with open(os.fspath(file_path), "wb") as handle:
            handle.write(data)

    def get_format_version(self) -> int:
        return self._format_version

    def set_adapter_version(self, adapter_version: int) -> None:
        self._adapter_version = int(adapter_version)

    def get_adapter_version(self) -> int:
        return self._adapter_version

    def set_model_version(self, model_version: int) -> None:
        self._model_version = int(model_version)

    def get_model_version(self) -> int:
        return self._model_version

    def set_parameters(self, params: Mapping[str, OrtValue]) -> None:
        """:raises InvalidArgument: a value that is not a numeric tensor."""
        converted = {}
        for name, value in params.items():
            array = value.numpy() if isinstance(value, OrtValue) and value.is_tensor() else None
            if array is None or array.dtype == object:
                raise InvalidArgument(f"adapter parameter '{name}' must be an OrtValue holding a numeric tensor")
            converted[str(name)] = array
        self._params = converted

    def get_parameters(self) -> dict[str, OrtValue]:
        return {name: OrtValue(array) for name, array in self._params.items()}


class LoraAdapter:
    """An adapter to activate with ``RunOptions.add_active_adapter``: ``adapter.Load(path)``."""

    def __init__(self) -> None:
        self._onnxplug_parameters: dict[str, np.ndarray] = {}

    def Load(self, adapter_file_path: str | os.PathLike) -> None:
        """Read an ``.onnx_adapter`` file; its parameters become read-only arrays."""
        params = AdapterFormat.read_adapter(adapter_file_path)._params
        for array in params.values():
            array.flags.writeable = False
        self._onnxplug_parameters = params


def with_adapters(feeds: Any, run_options: Any) -> Any:
    """``feeds`` plus the parameters of the run options' active adapters (the caller's feeds
    win); ``feeds`` itself when no adapter is active."""
    adapters = getattr(run_options, "__dict__", {}).get("_adapters") if run_options is not None else None
    if not adapters or not isinstance(feeds, Mapping):
        return feeds
    merged: dict[str, Any] = {}
    for adapter in adapters:
        merged.update(adapter._onnxplug_parameters)
    merged.update(feeds)
    return merged
