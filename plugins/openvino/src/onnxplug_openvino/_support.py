"""Which ONNX nodes OpenVINO takes: its ONNX frontend's ``convert_partially`` plus the limits of
the CPU plugin that conversion does not report (element types, dynamic rank).

The answer for one model is computed once (cached by the model's content): ``analyze`` returns
the supported node names and a reason for each declined one.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import io
import threading
from collections.abc import Iterable

import onnx
from onnx import TensorProto, helper

__all__ = ["Support", "analyze", "clear_cache"]

#: Element types OpenVINO's ONNX frontend and CPU plugin both handle.
SUPPORTED_ELEMENTS = frozenset(
    {
        TensorProto.FLOAT,
        TensorProto.DOUBLE,
        TensorProto.FLOAT16,
        TensorProto.BFLOAT16,
        TensorProto.INT8,
        TensorProto.INT16,
        TensorProto.INT32,
        TensorProto.INT64,
        TensorProto.UINT8,
        TensorProto.UINT16,
        TensorProto.UINT32,
        TensorProto.UINT64,
        TensorProto.BOOL,
    }
)

#: Domains OpenVINO has no conversion for (they stay with other providers).
_FOREIGN_DOMAINS = {
    "ai.onnx.ml": "ai.onnx.ml ops have no OpenVINO conversion",
    "ai.onnx.preview.training": "training ops have no OpenVINO conversion",
}

#: Ops OpenVINO converts but computes differently from the ONNX spec on some inputs (found with
#: the ONNX node conformance cases); they are declined so that results never change.
KNOWN_MISMATCHES: dict[str, str] = {}

_CACHE_SIZE = 64


@dataclasses.dataclass(frozen=True)
class Support:
    """The answer for one model.

    :ivar supported: names of the nodes OpenVINO takes, in model order.
    :ivar declined: node name → why OpenVINO does not take it.
    """

    supported: tuple[str, ...]
    declined: dict[str, str]


_cache: collections.OrderedDict[str, Support] = collections.OrderedDict()
_lock = threading.Lock()


def clear_cache() -> None:
    with _lock:
        _cache.clear()


def analyze(model_bytes: bytes) -> Support:
    """Per-node support for a serialized ONNX model (cached by content)."""
    key = hashlib.sha256(model_bytes).hexdigest()
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    support = _analyze(onnx.ModelProto.FromString(model_bytes))
    with _lock:
        _cache[key] = support
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return support


# -- the analysis ------------------------------------------------------------------------------


def _analyze(model: onnx.ModelProto) -> Support:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is best effort; declared types still hold
        inferred = model
    types = _value_types(inferred)
    constants = {t.name: t for t in model.graph.initializer}
    declined: dict[str, str] = {}
    candidates: list[onnx.NodeProto] = []
    for node in model.graph.node:
        reason = _precheck(node, types)
        if reason is None:
            candidates.append(node)
        elif node.name:
            declined[node.name] = reason
    if candidates:
        unsupported = _convert_all(model, candidates, types, constants)
        for name, reason in unsupported.items():
            declined[name] = reason
    supported = tuple(n.name for n in candidates if n.name not in declined)
    return Support(supported, declined)


def _value_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Name → TypeProto for every value with a known type (entries with a shape win)."""
    types: dict[str, onnx.TypeProto] = {}
    graph = model.graph
    for info in (*graph.output, *graph.value_info, *graph.input):
        if not info.name or not info.type.WhichOneof("value"):
            continue
        old = types.get(info.name)
        if old is None or (_has_rank(info.type) and not _has_rank(old)):
            types[info.name] = info.type
    for tensor in graph.initializer:
        types[tensor.name] = helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
    return types


def _has_rank(type_proto: onnx.TypeProto) -> bool:
    return type_proto.WhichOneof("value") == "tensor_type" and type_proto.tensor_type.HasField("shape")


def _precheck(node: onnx.NodeProto, types: dict[str, onnx.TypeProto]) -> str | None:
    """Why OpenVINO cannot take ``node`` whatever its frontend says, or ``None``."""
    if not node.name:
        return "the node has no name"
    domain = "" if node.domain == "ai.onnx" else node.domain
    if domain in _FOREIGN_DOMAINS:
        return _FOREIGN_DOMAINS[domain]
    mismatch = KNOWN_MISMATCHES.get(node.op_type if not domain else f"{domain}::{node.op_type}")
    if mismatch is not None:
        return mismatch
    if _outer_reads(node):
        return (
            "its subgraphs read values of the enclosing graph, which a fused partition's model does not carry"
        )
    for role, names in (("input", node.input), ("output", node.output)):
        for name in names:
            if not name:
                continue
            type_proto = types.get(name)
            if type_proto is None:
                if role == "input":
                    return f"the type of input '{name}' is unknown"
                continue
            kind = type_proto.WhichOneof("value")
            if kind != "tensor_type":
                return f"{role} '{name}' is a {kind.replace('_type', '')}: OpenVINO takes tensors only"
            element = type_proto.tensor_type.elem_type
            if element not in SUPPORTED_ELEMENTS:
                label = TensorProto.DataType.Name(element).lower() if element else "undefined"
                return f"{role} '{name}' has element type {label}, which OpenVINO does not support"
            if role == "input" and not type_proto.tensor_type.HasField("shape"):
                return f"input '{name}' has a dynamic rank, which OpenVINO's CPU plugin does not support"
    return None


def _outer_reads(node: onnx.NodeProto) -> bool:
    """Whether ``node``'s subgraphs read a value they do not define."""
    graphs = [a.g for a in node.attribute if a.HasField("g")] + [g for a in node.attribute for g in a.graphs]
    if not graphs:
        return False

    def reads_outside(graph: onnx.GraphProto, outer_defined: set[str]) -> bool:
        defined = set(outer_defined)
        defined.update(i.name for i in graph.input)
        defined.update(t.name for t in graph.initializer)
        for inner in graph.node:
            if any(name and name not in defined for name in inner.input):
                return True
            for attr in inner.attribute:
                subs = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
                if any(reads_outside(sub, defined) for sub in subs):
                    return True
            defined.update(inner.output)
        return any(o.name not in defined for o in graph.output)

    return any(reads_outside(g, set()) for g in graphs)


def _frontend():
    import openvino as ov

    return ov.frontend.FrontEndManager().load_by_framework("onnx")


def _convert_all(
    model: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    types: dict[str, onnx.TypeProto],
    constants: dict[str, TensorProto],
) -> dict[str, str]:
    """Node name → reason for the ``nodes`` OpenVINO's frontend does not convert."""
    frontend = _frontend()
    try:
        return _unsupported(frontend, _submodel(model, nodes, types, constants), nodes)
    except Exception:  # noqa: BLE001 - a conversion error on the whole model: ask node by node
        pass
    found: dict[str, str] = {}
    for node in nodes:
        try:
            found.update(_unsupported(frontend, _submodel(model, [node], types, constants), [node]))
        except Exception as error:  # noqa: BLE001 - any conversion failure declines the node
            found[node.name] = f"OpenVINO's ONNX frontend failed to convert it: {_first_line(error)}"
    return found


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    # OpenVINO's messages start with a "Check ... failed at src/..." line; the cause is at the end.
    useful = [line for line in lines if not line.startswith(("Check ", "Exception from"))]
    text = (useful or lines or [type(error).__name__])[-1]
    return text if len(text) <= 240 else text[:237] + "..."


def _submodel(
    model: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    types: dict[str, onnx.TypeProto],
    constants: dict[str, TensorProto],
) -> onnx.ModelProto:
    """``nodes`` as a model whose outputs are every value they produce (so that every node is
    reachable from a result and appears in the converted model)."""
    produced = {name for node in nodes for name in node.output if name}
    inputs: list[onnx.ValueInfoProto] = []
    initializers: list[TensorProto] = []
    seen: set[str] = set()
    for node in nodes:
        for name in node.input:
            if not name or name in produced or name in seen:
                continue
            seen.add(name)
            if name in constants:
                initializers.append(constants[name])
            else:
                info = onnx.ValueInfoProto(name=name)
                info.type.CopyFrom(types[name])
                inputs.append(info)
    outputs = [onnx.ValueInfoProto(name=name) for node in nodes for name in node.output if name]
    graph = helper.make_graph(list(nodes), model.graph.name or "capability", inputs, outputs, initializers)
    sub = helper.make_model(graph, opset_imports=list(model.opset_import))
    sub.ir_version = model.ir_version
    return sub


def _unsupported(frontend, model: onnx.ModelProto, nodes: Iterable[onnx.NodeProto]) -> dict[str, str]:
    """Convert ``model`` partially; the nodes that came out as ``NotSupportedONNXNode``."""
    converted = frontend.convert_partially(frontend.load(io.BytesIO(model.SerializeToString())))
    by_name: dict[str, str] = {}
    for node in nodes:
        by_name[node.name] = node.name
        for output in node.output:  # the op feeding a result is renamed after the output
            by_name.setdefault(output, node.name)
    found: dict[str, str] = {}
    for op in converted.get_ordered_ops():
        bad = op if op.get_type_name() == "NotSupportedONNXNode" else _unsupported_inside(op)
        if bad is None:
            continue
        name = by_name.get(op.get_friendly_name())
        if name is None:
            continue
        attributes = bad.get_attributes()
        op_type = attributes.get("ONNX_META_type", "this op")
        domain = attributes.get("ONNX_META_domain", "")
        label = f"{domain}::{op_type}" if domain else op_type
        where = "" if bad is op else " (inside its subgraph)"
        found[name] = f"OpenVINO's ONNX frontend has no conversion for {label}{where}"
    return found


def _bodies(op) -> list:
    """The subgraph bodies of an If/Loop op (none for other ops)."""
    getter = getattr(op, "get_function", None)
    if getter is None:
        return []
    bodies = []
    for index in range(8):
        try:
            bodies.append(getter(index))
        except Exception:  # noqa: BLE001 - past the last body
            break
    return bodies


def _unsupported_inside(op):
    """The first NotSupportedONNXNode inside ``op``'s bodies (at any depth), or ``None``."""
    pending = _bodies(op)
    while pending:
        body = pending.pop()
        for inner in body.get_ordered_ops():
            if inner.get_type_name() == "NotSupportedONNXNode":
                return inner
            pending.extend(_bodies(inner))
    return None
