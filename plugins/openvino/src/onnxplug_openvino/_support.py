"""Which ONNX nodes OpenVINO takes: its ONNX frontend's ``convert_partially`` plus the limits of
the CPU plugin that conversion does not report (element types, dynamic rank).

The answer for one model is computed once (kept in the compile cache by content): ``analyze`` returns
the supported node names and a reason for each declined one.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterable

import onnx
from onnx import TensorProto, helper

from onnxplug import CompileCache

from ._prechecks import has_rank, precheck

__all__ = ["Support", "analyze"]


@dataclasses.dataclass(frozen=True)
class Support:
    """The answer for one model.

    :ivar supported: names of the nodes OpenVINO takes, in model order.
    :ivar declined: node name → why OpenVINO does not take it.
    """

    supported: tuple[str, ...]
    declined: dict[str, str]


def analyze(model_bytes: bytes, cache: CompileCache) -> Support:
    """Per-node support for a serialized ONNX model (kept in the session's compile cache by content)."""
    key = CompileCache.key(provider="openvino", content=model_bytes, extra="support")
    return cache.get_or_create(key, lambda: _analyze(onnx.ModelProto.FromString(model_bytes)))


# -- the analysis ------------------------------------------------------------------------------


def _analyze(model: onnx.ModelProto) -> Support:
    # The declared types only (no inference of our own): they are what a fused partition's model
    # will declare for its inputs, so a rank unknown here is a dynamic-rank Parameter there.
    types = _value_types(model)
    constants = {t.name: t for t in model.graph.initializer}
    declined: dict[str, str] = {}
    candidates: list[onnx.NodeProto] = []
    for node in model.graph.node:
        reason = precheck(node, types, constants)
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
        if old is None or (has_rank(info.type) and not has_rank(old)):
            types[info.name] = info.type
    for tensor in graph.initializer:
        types[tensor.name] = helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
    return types


def _frontend():
    import openvino as ov

    return ov.frontend.FrontEndManager().load_by_framework("onnx")


def _convert_all(
    model: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    types: dict[str, onnx.TypeProto],
    constants: dict[str, TensorProto],
) -> dict[str, str]:
    """Node name → reason for the ``nodes`` OpenVINO does not take: those its frontend does not
    convert, then, on the model of the others, those the CPU plugin would refuse.

    One ``convert_partially`` for the lot.  Only when that raises (a conversion error names no
    node) are the nodes halved and each half converted, so a few bad nodes cost a few
    conversions per halving level, not one per node."""
    frontend = _frontend()
    try:
        return _check(frontend, model, nodes, types, constants)
    except Exception as error:  # noqa: BLE001 - a conversion error on the whole set: bisect it
        if len(nodes) == 1:
            return {nodes[0].name: f"OpenVINO's ONNX frontend failed to convert it: {_first_line(error)}"}
    half = len(nodes) // 2
    found = _convert_all(model, nodes[:half], types, constants)
    found.update(_convert_all(model, nodes[half:], types, constants))
    return found


#: How many times the remaining nodes are converted again when cutting the declined ones out of
#: the converted model is not possible (an output without a declared type).
_ROUNDS = 6


def _check(frontend, model, nodes, types, constants) -> dict[str, str]:
    """Convert once and decline; then cut the declined nodes out of the converted model (their
    outputs read by the rest become Parameters of the declared types, as in the partitions' own
    models) and infer its shapes again, until nothing more is declined.  Only where a cut is not
    possible are the remaining nodes converted again."""
    found: dict[str, str] = {}
    converted = None
    for _ in range(_ROUNDS):
        by_name = _names(nodes)
        if converted is None:
            converted = _convert(frontend, _submodel(model, nodes, types, constants))
        declined = _not_converted(converted, by_name) or _refused_by_cpu_plugin(converted, by_name)
        if not declined:
            break
        found.update(declined)
        nodes = [n for n in nodes if n.name not in declined]
        if not nodes:
            break
        if not _cut(converted, set(found), by_name, types):
            converted = None
    return found


def _cut(converted, declined: set[str], by_name: dict[str, str], types: dict[str, onnx.TypeProto]) -> bool:
    """Feed the readers of ``declined`` nodes' outputs from new Parameters of the outputs'
    declared types and infer the model's shapes again.  ``False`` (nothing usable) when an
    output has no declared tensor type."""
    import openvino as ov
    import openvino.opset16 as ops

    parameters = []
    for op in converted.get_ordered_ops():
        if op.get_type_name() in _BORDER_OPS or _node_of(op, by_name) not in declined:
            continue
        for output in op.outputs():
            readers = [
                target
                for target in output.get_target_inputs()
                if target.get_node().get_type_name() != "Result"
                and _node_of(target.get_node(), by_name) not in declined
            ]
            if not readers:
                continue
            name = next((n for n in sorted(output.get_names()) if n in types), None)
            type_proto = types.get(name) if name else None
            if type_proto is None or not has_rank(type_proto):
                return False
            tensor = type_proto.tensor_type
            try:
                element = ov.Type(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
            except (KeyError, TypeError, RuntimeError):
                return False
            shape = ov.PartialShape(
                [ov.Dimension(d.dim_value) if d.HasField("dim_value") else ov.Dimension() for d in tensor.shape.dim]
            )
            parameter = ops.parameter(shape, element, name=name)
            parameters.append(parameter)
            for target in readers:
                target.replace_source_output(parameter.output(0))
    try:
        converted.add_parameters(parameters)  # a model must declare every Parameter it reads
        converted.validate_nodes_and_infer_types()
    except Exception:  # noqa: BLE001 - the cut model does not validate: convert the rest again
        return False
    return True


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


def _convert(frontend, model: onnx.ModelProto):
    return frontend.convert_partially(frontend.load(io.BytesIO(model.SerializeToString())))


def _names(nodes: Iterable[onnx.NodeProto]) -> dict[str, str]:
    """OpenVINO friendly name → ONNX node name (the op feeding a result is renamed after the
    output; decomposed pieces are ``<node>/<piece>``)."""
    by_name: dict[str, str] = {}
    for node in nodes:
        by_name[node.name] = node.name
        for output in node.output:
            by_name.setdefault(output, node.name)
    return by_name


def _node_of(op, by_name: dict[str, str]) -> str | None:
    friendly = op.get_friendly_name()
    return by_name.get(friendly) or by_name.get(friendly.split("/")[0])


def _not_converted(converted, by_name: dict[str, str]) -> dict[str, str]:
    """The nodes that came out as ``NotSupportedONNXNode`` (or hold one in a subgraph)."""
    found: dict[str, str] = {}
    for op in converted.get_ordered_ops():
        bad = op if op.get_type_name() == "NotSupportedONNXNode" else _unsupported_inside(op)
        if bad is None:
            continue
        name = _node_of(op, by_name)
        if name is None:
            continue
        attributes = bad.get_attributes()
        op_type = attributes.get("ONNX_META_type", "this op")
        domain = attributes.get("ONNX_META_domain", "")
        label = f"{domain}::{op_type}" if domain else op_type
        where = "" if bad is op else " (inside its subgraph)"
        found[name] = f"OpenVINO's ONNX frontend has no conversion for {label}{where}"
    return found


_BORDER_OPS = frozenset({"Parameter", "Result", "Constant"})


def _refused_by_cpu_plugin(converted, by_name: dict[str, str]) -> dict[str, str]:
    """Nodes converted to ops the CPU plugin refuses to compile: ops with a dynamic-rank output
    and convolutions whose weights have no static shape."""
    found: dict[str, str] = {}
    for op in converted.get_ordered_ops():
        kind = op.get_type_name()
        if kind in _BORDER_OPS:
            continue
        reason = None
        if kind in _STATIC_WEIGHTS and not op.get_input_partial_shape(1).is_static:
            reason = (
                "OpenVINO's CPU plugin needs convolution weights of a static shape; these are computed "
                "from graph inputs (IR 3 models list initializers as inputs, which makes them overridable)"
            )
        elif any(op.get_output_partial_shape(i).rank.is_dynamic for i in range(op.get_output_size())):
            reason = f"OpenVINO infers a dynamic rank for its {kind} op, which the CPU plugin does not support"
        if reason is not None:
            name = _node_of(op, by_name)
            if name is not None:
                found.setdefault(name, reason)
    return found


_STATIC_WEIGHTS = frozenset(
    {"Convolution", "GroupConvolution", "ConvolutionBackpropData", "GroupConvolutionBackpropData"}
)


_BODY_OPS = frozenset({"If", "Loop", "TensorIterator"})


def _bodies(op) -> list:
    """The subgraph bodies of an If/Loop/TensorIterator op (none for other ops).

    ``get_function(index)`` does not check its index (a bad one crashes the process), so each
    op kind is asked only for the bodies it has."""
    kind = op.get_type_name()
    if kind not in _BODY_OPS:
        return []  # asking pybind for attributes of every op costs more than the conversion
    if hasattr(op, "get_then_body"):
        return [op.get_then_body(), op.get_else_body()]
    getter = getattr(op, "get_function", None)
    if getter is None:
        return []
    try:
        return [getter()]
    except TypeError:  # a multi-body op of another kind: skip rather than guess its size
        return []


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
