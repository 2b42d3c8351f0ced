"""External data: every reference checked before a byte is read.

A model's external-data entries are attacker-controlled strings.  A location is accepted only
when it is relative, stays inside the model's folder after symlinks are resolved, names a regular
file with a single link, and ``offset + length`` fits in that file with ``length`` equal to the
tensor's byte size.  Keys are read into a fixed record; unknown keys are refused.
"""

from __future__ import annotations

import dataclasses
import math
import os
import stat
from collections.abc import Iterator

import onnx

from ..errors import InvalidGraph, NoSuchFile
from ._types import element_name, np_dtype

__all__ = ["ExternalRef", "iter_tensors", "check_external_data"]

_KEYS = frozenset({"location", "offset", "length", "checksum"})
# Element types narrower than a byte: bits per element.
_SUB_BYTE_BITS = {onnx.TensorProto.INT4: 4, onnx.TensorProto.UINT4: 4, onnx.TensorProto.FLOAT4E2M1: 4}
for _name in ("INT2", "UINT2"):
    if hasattr(onnx.TensorProto, _name):
        _SUB_BYTE_BITS[getattr(onnx.TensorProto, _name)] = 2


@dataclasses.dataclass(frozen=True)
class ExternalRef:
    tensor: str
    location: str
    offset: int
    length: int | None


def tensor_nbytes(tensor: onnx.TensorProto) -> int | None:
    """Bytes of a tensor's raw data, ``None`` for strings or unknown element types."""
    count = math.prod(tensor.dims)
    bits = _SUB_BYTE_BITS.get(tensor.data_type)
    if bits is not None:
        return (count * bits + 7) // 8
    if tensor.data_type == onnx.TensorProto.STRING:
        return None
    try:
        return count * np_dtype(tensor.data_type).itemsize
    except ValueError:
        return None


def iter_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto in a model: initializers, sparse parts, attribute tensors, in every
    subgraph and function.  Iterative, so deep nesting cannot exhaust the Python stack."""
    graphs: list[onnx.GraphProto] = [model.graph]
    node_lists = [f.node for f in model.functions]
    while graphs or node_lists:
        if graphs:
            graph = graphs.pop()
            yield from graph.initializer
            for sparse in graph.sparse_initializer:
                yield sparse.values
                yield sparse.indices
            node_lists.append(graph.node)
            continue
        for node in node_lists.pop():
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors
                if attr.HasField("sparse_tensor"):
                    yield attr.sparse_tensor.values
                    yield attr.sparse_tensor.indices
                if attr.HasField("g"):
                    graphs.append(attr.g)
                graphs.extend(attr.graphs)


def _parse_entry(tensor: onnx.TensorProto) -> ExternalRef:
    fields: dict[str, str] = {}
    for entry in tensor.external_data:
        if entry.key not in _KEYS:
            raise InvalidGraph(
                f"initializer '{tensor.name}': unknown external-data key {entry.key!r} (expected {sorted(_KEYS)})"
            )
        fields[entry.key] = entry.value
    location = fields.get("location", "")
    if not location:
        raise InvalidGraph(f"initializer '{tensor.name}': external data without a location")
    try:
        offset = int(fields.get("offset", "0") or 0)
        length = int(fields["length"]) if fields.get("length") else None
    except ValueError:
        raise InvalidGraph(
            f"initializer '{tensor.name}': external-data offset/length are not integers "
            f"({fields.get('offset')!r}, {fields.get('length')!r})"
        ) from None
    if offset < 0 or (length is not None and length < 0):
        raise InvalidGraph(f"initializer '{tensor.name}': negative external-data offset or length")
    return ExternalRef(tensor.name, location, offset, length)


def resolve_location(base_dir: str, ref: ExternalRef) -> str:
    """The real path of a reference's file, refusing anything that leaves ``base_dir``."""
    where = f"initializer '{ref.tensor}': external data location {ref.location!r}"
    location = ref.location.replace("\\", "/")
    if os.path.isabs(location) or location.startswith("/") or (len(location) > 1 and location[1] == ":"):
        raise InvalidGraph(f"{where} is absolute; it must be relative to the model's folder")
    if ".." in location.split("/"):
        raise InvalidGraph(f"{where} contains '..'; it must stay inside the model's folder")
    base_real = os.path.realpath(base_dir)
    real = os.path.realpath(os.path.join(base_real, location))
    if os.path.commonpath([real, base_real]) != base_real:
        raise InvalidGraph(f"{where} resolves (through a symlink) outside the model's folder")
    try:
        info = os.stat(real)
    except FileNotFoundError:
        raise NoSuchFile(f"{where}: file {real} doesn't exist") from None
    if not stat.S_ISREG(info.st_mode):
        raise InvalidGraph(f"{where} is not a regular file")
    if info.st_nlink > 1:
        raise InvalidGraph(f"{where} is a hard-linked file; refusing it (it may alias a file elsewhere)")
    return real


def check_external_data(model: onnx.ModelProto, base_dir: str | None) -> list[ExternalRef]:
    """Validate every external-data reference of ``model`` against ``base_dir``.

    :param base_dir: the model's folder, or ``None`` when the model came from bytes without a
        declared folder (then any external reference is refused).
    :raises InvalidGraph: a reference that escapes, is malformed or does not fit its file.
    :raises NoSuchFile: a referenced file that does not exist.
    """
    refs: list[ExternalRef] = []
    sizes: dict[str, int] = {}
    for tensor in iter_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        ref = _parse_entry(tensor)
        if base_dir is None:
            raise InvalidGraph(
                f"initializer '{tensor.name}' keeps its data in external file {ref.location!r}, but "
                "the model was loaded from bytes: load it from its path, or name the folder with "
                "SessionOptions.add_session_config_entry('session.model_external_data_dir', DIR)"
            )
        path = resolve_location(base_dir, ref)
        size = sizes.setdefault(path, os.path.getsize(path))
        expected = tensor_nbytes(tensor)
        length = ref.length if ref.length is not None else size - ref.offset
        if expected is not None and length != expected:
            raise InvalidGraph(
                f"initializer '{tensor.name}': external data length {length} does not match its "
                f"shape {list(tensor.dims)} of {element_name(tensor.data_type)} ({expected} bytes)"
            )
        if ref.offset + length > size:
            raise InvalidGraph(
                f"initializer '{tensor.name}': external data [{ref.offset}, {ref.offset + length}) "
                f"runs past the end of {ref.location!r} ({size} bytes)"
            )
        refs.append(ref)
    return refs
