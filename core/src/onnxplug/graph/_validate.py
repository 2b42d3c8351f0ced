"""Structural checks on a ModelProto before anything runs it.

Everything here is iterative (an explicit stack of graphs, Kahn's algorithm for order), so a
hostile model with deep nesting or a long chain cannot exhaust Python's recursion limit.
"""

from __future__ import annotations

import math

import onnx

from ..errors import Fail, InvalidArgument, InvalidGraph
from ._external import tensor_nbytes

__all__ = ["validate_model"]

# Dims multiplied together may not exceed this many elements for a declared initializer.
_MAX_ELEMENTS = 1 << 62
# Element types that int32_data may store packed, so its length is not one per element.
_PACKED_IN_INT32 = frozenset(
    getattr(onnx.TensorProto, name)
    for name in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
    if hasattr(onnx.TensorProto, name)
)


def _check_tensor(tensor: onnx.TensorProto, where: str) -> None:
    if any(d < 0 for d in tensor.dims):
        raise InvalidGraph(f"{where} '{tensor.name}' has a negative dimension {list(tensor.dims)}")
    count = math.prod(tensor.dims)
    if count > _MAX_ELEMENTS:
        raise InvalidGraph(f"{where} '{tensor.name}' has {count} elements, past any possible size")
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return
    if tensor.HasField("raw_data"):
        expected = tensor_nbytes(tensor)
        if expected is not None and len(tensor.raw_data) != expected:
            raise InvalidGraph(
                f"{where} '{tensor.name}' holds {len(tensor.raw_data)} bytes of raw data but its shape "
                f"{list(tensor.dims)} needs {expected}"
            )
        return
    for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
        stored = len(getattr(tensor, field))
        if stored:
            expected = count
            if tensor.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128):
                expected = 2 * count
            if stored != expected and tensor.data_type not in _PACKED_IN_INT32:
                raise InvalidGraph(
                    f"{where} '{tensor.name}' stores {stored} values in {field} but its shape "
                    f"{list(tensor.dims)} holds {count}"
                )
            return
    if count and tensor.data_type != onnx.TensorProto.UNDEFINED:
        raise InvalidGraph(f"{where} '{tensor.name}' has shape {list(tensor.dims)} but no data")


def _check_graph(graph: onnx.GraphProto, outer: frozenset[str], pending: list) -> None:
    """Check one graph; queue its subgraphs on ``pending`` with their visible scope."""
    label = f"graph '{graph.name}'" if graph.name else "the main graph"
    defined: set[str] = set()
    for value in graph.input:
        if value.name in defined:
            raise InvalidGraph(f"{label}: input '{value.name}' is declared twice")
        defined.add(value.name)
    for tensor in graph.initializer:
        _check_tensor(tensor, "initializer")
        defined.add(tensor.name)
    for sparse in graph.sparse_initializer:
        defined.add(sparse.values.name)
    produced: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        for name in node.output:
            if not name:
                continue
            if name in produced or name in defined:
                raise InvalidGraph(
                    f"{label}: value '{name}' is produced twice (node '{node.name or node.op_type}' "
                    "and an earlier node, input or initializer)"
                )
            produced[name] = index
    visible = outer | defined | produced.keys()
    # Kahn's algorithm over nodes; cycles are the nodes never released.
    waiting = [0] * len(graph.node)
    consumers: dict[int, list[int]] = {}
    for index, node in enumerate(graph.node):
        for name in node.input:
            if not name:
                continue
            if name not in visible:
                raise InvalidArgument(
                    f"Node ({node.name or node.op_type}) input '{name}' is not a graph input, "
                    "initializer, or output of a previous node."
                )
            producer = produced.get(name)
            if producer is not None and name not in defined:
                waiting[index] += 1
                consumers.setdefault(producer, []).append(index)
        for attr in node.attribute:
            subgraphs = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
            for sub in subgraphs:
                pending.append((sub, frozenset(visible)))
            if attr.HasField("t"):
                _check_tensor(attr.t, f"attribute '{attr.name}' of node '{node.name}':")
    ready = [i for i, count in enumerate(waiting) if count == 0]
    released = 0
    while ready:
        index = ready.pop()
        released += 1
        for consumer in consumers.get(index, ()):
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                ready.append(consumer)
    if released != len(graph.node):
        stuck = [graph.node[i].name or graph.node[i].op_type for i, c in enumerate(waiting) if c > 0]
        raise InvalidGraph(f"{label} has a cycle through nodes {stuck[:5]}")
    for value in graph.output:
        if value.name not in visible:
            raise Fail(f"Graph output ({value.name}) does not exist in the graph.")


def validate_model(model: onnx.ModelProto) -> None:
    """Raise an onnxplug exception for any structural fault in ``model``.

    Checked: IR and opset versions, unique value names, every node input defined (scoping
    into subgraphs), no cycles, graph outputs produced, initializer sizes consistent.
    """
    if model.ir_version > onnx.IR_VERSION:
        raise Fail(f"Unsupported model IR version: {model.ir_version}, max supported IR version: {onnx.IR_VERSION}")
    seen_domains: set[str] = set()
    for opset in model.opset_import:
        domain = "" if opset.domain in ("", "ai.onnx") else opset.domain
        if domain in seen_domains:
            raise InvalidGraph(f"opset for domain '{opset.domain}' is imported twice")
        seen_domains.add(domain)
        if domain == "" and opset.version > onnx.defs.onnx_opset_version():
            raise Fail(
                f"the model imports opset {opset.version} of the default domain; the newest this "
                f"installation knows is {onnx.defs.onnx_opset_version()} (upgrade onnx and onnxplug)"
            )
        if opset.version < 1:
            raise InvalidGraph(f"opset version {opset.version} for domain '{opset.domain}' is not valid")
    pending: list[tuple[onnx.GraphProto, frozenset[str]]] = [(model.graph, frozenset())]
    while pending:
        graph, outer = pending.pop()
        _check_graph(graph, outer, pending)
