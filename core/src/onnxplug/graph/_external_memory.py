"""Initializers and external-data files the caller hands over in memory.

``SessionOptions.add_external_initializers(names, values)`` supplies tensors by name, and
``add_external_initializers_from_files_in_memory(file_names, buffers, lengths)`` the contents of
the files a model's external data lives in (a model shipped as bytes with its weights beside
it).  Both are written into the ModelProto right after parsing, as embedded data, so everything
later (validation, external-data checks, onnx-ir) sees an ordinary model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import Fail, InvalidArgument, InvalidGraph
from ._external import _parse_entry, iter_tensors, tensor_nbytes
from ._types import element_name

__all__ = ["InMemoryData", "inline_in_memory_data"]


@dataclasses.dataclass
class InMemoryData:
    """What a session was given in memory.

    :ivar initializers: initializer name → array (replaces the model's tensor of that name).
    :ivar files: external-data location → file contents.
    """

    initializers: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)
    files: Mapping[str, bytes | memoryview] = dataclasses.field(default_factory=dict)


def _embed(tensor: onnx.TensorProto, data: bytes) -> None:
    tensor.raw_data = data
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.DEFAULT


def inline_in_memory_data(model: onnx.ModelProto, data: InMemoryData | None) -> None:
    """Embed ``data`` into ``model``.

    :raises InvalidArgument: an initializer name the model does not have, or a value whose type
        or shape differs from the model's tensor.
    :raises Fail: an initializer supplied by name that the model embeds (onnxruntime's class).
    :raises InvalidGraph: an external reference that runs past the end of its in-memory file.
    """
    if data is None:
        return
    if data.initializers:
        by_name = {t.name: t for t in model.graph.initializer}
        for name, array in data.initializers.items():
            tensor = by_name.get(name)
            if tensor is None:
                raise InvalidArgument(f"add_external_initializers: the model has no initializer named '{name}'")
            if tensor.data_location != onnx.TensorProto.EXTERNAL:
                # onnxruntime's rule: only data kept outside the model is supplied this way
                # (SessionOptions.add_initializer overrides embedded initializers).
                raise Fail(
                    f"add_external_initializers: initializer '{name}' is embedded in the model, not external "
                    "data; Trying to replace non-external initializer with external data"
                )
            given = numpy_helper.from_array(np.ascontiguousarray(array), name)
            if given.data_type != tensor.data_type or list(given.dims) != list(tensor.dims):
                declared = f"{element_name(tensor.data_type)}{list(tensor.dims)}"
                raise InvalidArgument(
                    f"add_external_initializers: initializer '{name}' is {declared} in the model, "
                    f"the value given is {array.dtype}{list(array.shape)}"
                )
            tensor.CopyFrom(given)
    if not data.files:
        return
    for tensor in iter_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        ref = _parse_entry(tensor)
        buffer = data.files.get(ref.location)
        if buffer is None:
            continue
        view = memoryview(buffer).cast("B")
        length = ref.length if ref.length is not None else tensor_nbytes(tensor)
        if length is None:
            length = len(view) - ref.offset
        if ref.offset + length > len(view):
            raise InvalidGraph(
                f"initializer '{tensor.name}': external data [{ref.offset}, {ref.offset + length}) runs past the "
                f"end of the in-memory file {ref.location!r} ({len(view)} bytes)"
            )
        _embed(tensor, bytes(view[ref.offset : ref.offset + length]))
