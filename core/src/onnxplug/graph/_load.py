"""Loading a model: bytes or path → checked ModelProto → onnx-ir Model.

The order matters for safety: size is checked before parsing, structure and external-data
references are checked before onnx-ir touches anything, and only then is the proto handed to
onnx-ir.  Shape inference fills value types so providers can see the types they claim.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from ..errors import InvalidArgument, InvalidGraph, InvalidProtobuf, NoSuchFile
from ._detach import Detached, read_detached
from ._external import check_external_data
from ._external_memory import InMemoryData, inline_in_memory_data
from ._infer import infer_types, weightless_copy
from ._normalize import prepare_for_ir
from ._own_data import own_tensor_data
from ._scopes import graphs_of, node_reads
from ._validate import merged_opsets, validate_model

__all__ = ["LoadedModel", "load_model", "MAX_PROTO_BYTES"]

#: protobuf cannot parse messages of 2 GiB or more; bigger models keep weights as external data.
MAX_PROTO_BYTES = (1 << 31) - 1


@dataclasses.dataclass
class LoadedModel:
    """A checked model.

    :ivar proto: the ModelProto (external data not loaded) with inferred value types; the
        source of truth for I/O type strings (onnx-ir has no map type).  Its top-level
        initializers of ``WEIGHT_BYTES`` or more keep names, types and dims but not their data,
        which lives in ``model`` alone.
    :ivar model: the onnx-ir model that partitioning and planning work on.
    :ivar base_dir: the folder external data is resolved against, if any.
    :ivar from_path: whether it came from a file (for profiling and messages).
    """

    proto: onnx.ModelProto
    model: ir.Model
    base_dir: str | None
    from_path: bool

    @property
    def opsets(self) -> dict[str, int]:
        return {("" if d == "ai.onnx" else d): v for d, v in self.model.opset_imports.items()}


#: Files from this size on are read with their large weights detached (see ``_detach``).
DETACH_FROM_BYTES = 16 << 20


def _read_model_bytes(path_or_bytes: Any, in_memory: InMemoryData | None) -> tuple[bytes, str | None, dict]:
    """The bytes to parse, the path they came from, and the initializers read out of them."""
    data, path = _read_bytes(path_or_bytes, read=False)
    if path is not None and data is None:
        detached = None
        if os.path.getsize(path) >= DETACH_FROM_BYTES and not (in_memory and in_memory.initializers):
            detached = read_detached(path)
        if detached is not None:
            return detached[0], path, detached[1]
        with open(path, "rb") as handle:
            data = handle.read()
    return data, path, {}


def _read_bytes(path_or_bytes: Any, read: bool = True) -> tuple[bytes | None, str | None]:
    if isinstance(path_or_bytes, bytes):
        return path_or_bytes, None
    if isinstance(path_or_bytes, (str, os.PathLike)):
        path = os.fspath(path_or_bytes)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not os.path.exists(path):
            raise NoSuchFile(f"Load model from {path} failed: File doesn't exist")
        if not os.path.isfile(path):
            raise InvalidProtobuf(f"Load model {path} failed: it is not a regular file")
        size = os.path.getsize(path)
        if size > MAX_PROTO_BYTES:
            raise InvalidProtobuf(
                f"Load model {path} failed: the file has {size} bytes; an ONNX protobuf must be under "
                "2 GiB (save large weights as external data)"
            )
        if not read:
            return None, path
        with open(path, "rb") as handle:
            return handle.read(), path
    raise TypeError(f"Unable to load from type '{type(path_or_bytes)}'")


def _infer_types(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return infer_types(model)  # parks the nodes whose onnx inference would crash the process
    except Exception:  # noqa: BLE001 - inference is best effort; the declared types still hold
        return model


def load_model(
    path_or_bytes: Any, *, external_data_dir: str | None = None, in_memory: InMemoryData | None = None
) -> LoadedModel:
    """Load and check a model.

    :param path_or_bytes: a path (``str`` or ``os.PathLike``) or the serialized model (``bytes``).
    :param external_data_dir: the folder external data of a model given as bytes lives in.
    :param in_memory: initializers and external-data files the caller supplies in memory.
    :raises TypeError: for other argument types (as onnxruntime does).
    :raises NoSuchFile: missing file.
    :raises InvalidProtobuf: unreadable or oversized file.
    :raises InvalidArgument: empty bytes.
    :raises InvalidGraph, Fail: structural faults (see :func:`validate_model`).
    """
    data, path, detached = _read_model_bytes(path_or_bytes, in_memory)
    if not data:
        raise InvalidArgument("No graph was found in the protobuf.")
    if len(data) > MAX_PROTO_BYTES:
        raise InvalidProtobuf("the serialized model is 2 GiB or more; save weights as external data")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as error:
        source = path or "bytes"
        raise InvalidProtobuf(f"Load model from {source} failed: protobuf parsing failed ({error})") from None
    del data  # a file's bytes: the parsed proto holds their content now
    if not proto.HasField("graph"):
        raise InvalidArgument("No graph was found in the protobuf.")
    inline_in_memory_data(proto, in_memory)
    validate_model(proto, detached=frozenset(detached))
    _dedupe_opsets(proto)
    if path is not None:
        base_dir: str | None = os.path.dirname(os.path.abspath(path))
    else:
        base_dir = os.path.abspath(external_data_dir) if external_data_dir else None
    check_external_data(proto, base_dir)
    proto = _infer_types(proto)
    # The session describes inputs and outputs from the proto as given; onnx-ir's model takes
    # the weights.  Keeping the proto without its weights' data avoids holding them twice.
    described = weightless_copy(proto)
    try:
        model = _deserialize(prepare_for_ir(proto, in_place=True))
    except Exception as error:
        raise InvalidGraph(f"the model cannot be represented: {_root_cause(error)}") from error
    _attach(model, detached)
    own_tensor_data(model)  # the IR owns the weights' arrays: the parsed protobuf is freed
    proto = described
    _sort(model)
    if base_dir is not None:
        ir.external_data.set_base_dir(model.graph, base_dir)
    return LoadedModel(proto=proto, model=model, base_dir=base_dir, from_path=path is not None)


def _attach(model: ir.Model, detached: dict[str, Detached]) -> None:
    """The initializers read out of the file become their values' tensors."""
    for name, item in detached.items():
        value = model.graph.initializers.get(name)
        if value is not None:
            value.const_value = ir.Tensor(item.array, name=name)


def _dedupe_opsets(proto: onnx.ModelProto) -> None:
    """Keep one opset_import entry per domain (validation accepted only agreeing duplicates);
    onnx-ir keys imports by domain and refuses a second entry."""
    for owner in [proto, *proto.functions]:
        merged = merged_opsets(owner.opset_import)
        if len(merged) == len(owner.opset_import):
            continue
        domains = {"" if o.domain == "ai.onnx" else o.domain: o.domain for o in owner.opset_import}
        del owner.opset_import[:]
        for domain, version in merged.items():
            owner.opset_import.add(domain=domains[domain], version=version)


def _sort(model: ir.Model) -> None:
    """Nodes in topological order, in every graph: ONNX requires it, some exporters do not keep
    to it, and the later stages copy graphs with onnx-ir's cloner, which needs it.  Checking the
    order costs a tenth of sorting (six nodes: ~3 µs against ~30), so a model in order, which
    nearly every model is, is left as it is."""
    from onnx_ir.passes.common import TopologicalSortPass

    graphs = [*graphs_of(model.graph), *(g for f in model.functions.values() for g in graphs_of(f))]
    if all(_in_order(list(graph)) for graph in graphs):
        return
    try:
        TopologicalSortPass()(model)
    except Exception as error:
        raise InvalidGraph(f"the graph's nodes cannot be put in an order: {_root_cause(error)}") from error


def _in_order(nodes: list[ir.Node]) -> bool:
    """Whether each node comes after the nodes of ``nodes`` producing what it (or a subgraph of
    it) reads."""
    members = {id(node) for node in nodes}
    seen: set[int] = set()
    for node in nodes:
        for value in node_reads(node):
            producer = value.producer()
            if producer is not None and id(producer) in members and id(producer) not in seen:
                return False
        seen.add(id(node))
    return True


def _deserialize(proto: onnx.ModelProto) -> ir.Model:
    # onnx-ir logs (rather than raises) on some faults that validate_model already reported.
    logger = logging.getLogger("onnx_ir")
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return ir.serde.deserialize_model(proto)
    finally:
        logger.setLevel(previous)


def _root_cause(error: BaseException) -> str:
    while error.__cause__ is not None:
        error = error.__cause__
    return f"{type(error).__name__}: {error}"
