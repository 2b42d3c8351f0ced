"""Structural checks on a ModelProto before anything runs it.

Everything here is iterative (an explicit stack of graphs, Kahn's algorithm for order), so a
hostile model with deep nesting or a long chain cannot exhaust Python's recursion limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import onnx

from ..errors import Fail, InvalidArgument, InvalidGraph
from ._external import tensor_nbytes
from ._schema_check import SchemaChecker

__all__ = ["validate_model", "merged_opsets"]

# Dims multiplied together may not exceed this many elements for a declared initializer.
_MAX_ELEMENTS = 1 << 62
# Element types that int32_data may store packed, so its length is not one per element.
_PACKED_IN_INT32 = frozenset(
    getattr(onnx.TensorProto, name)
    for name in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
    if hasattr(onnx.TensorProto, name)
)
_KNOWN_ELEMENT_TYPES = frozenset(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}


def _check_payload_type(tensor: onnx.TensorProto, where: str) -> None:
    """Faults that make a tensor's payload undecodable (onnxruntime raises ``Fail`` for each)."""
    if tensor.data_type not in _KNOWN_ELEMENT_TYPES:
        kind = "UNDEFINED" if tensor.data_type == onnx.TensorProto.UNDEFINED else f"unknown ({tensor.data_type})"
        raise Fail(f"{where} '{tensor.name}' has data type {kind}; its payload cannot be decoded")
    if tensor.data_type == onnx.TensorProto.STRING and tensor.HasField("raw_data"):
        raise Fail(f"{where} '{tensor.name}': string tensor can not have raw data (strings go in string_data)")


def _check_tensor(tensor: onnx.TensorProto, where: str, detached: bool = False) -> None:
    """``detached``: the loader read the tensor's data out of the file (its size was checked
    there), so the message has none."""
    if any(d < 0 for d in tensor.dims):
        raise InvalidGraph(f"{where} '{tensor.name}' has a negative dimension {list(tensor.dims)}")
    count = math.prod(tensor.dims)
    if count > _MAX_ELEMENTS:
        raise InvalidGraph(f"{where} '{tensor.name}' has {count} elements, past any possible size")
    _check_payload_type(tensor, where)
    if tensor.data_location == onnx.TensorProto.EXTERNAL or detached:
        return
    if tensor.HasField("raw_data"):
        expected = tensor_nbytes(tensor)
        if expected is not None and len(tensor.raw_data) != expected:
            raise Fail(
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
    if count:
        raise InvalidGraph(f"{where} '{tensor.name}' has shape {list(tensor.dims)} but no data")


def _check_graph(
    graph: onnx.GraphProto,
    outer: frozenset[str],
    pending: list,
    schemas: SchemaChecker,
    main: bool,
    detached: frozenset[str] = frozenset(),
) -> None:
    """Check one graph; queue its subgraphs on ``pending`` with their visible scope."""
    label = f"graph '{graph.name}'" if graph.name else "the main graph"
    defined: set[str] = set()
    for value in graph.input:
        if value.name in defined:
            raise InvalidGraph(f"{label}: input '{value.name}' is declared twice")
        if main and not value.type.WhichOneof("value"):
            raise Fail(f"This is an invalid model. Model input ({value.name}) does not have type information.")
        defined.add(value.name)
    initializers: set[str] = set()
    for tensor in graph.initializer:
        _check_tensor(tensor, "initializer", main and tensor.name in detached)
        if tensor.name in initializers:
            raise InvalidGraph(
                f"{label}: initializer '{tensor.name}' is defined twice (onnxruntime would silently use "
                "the last one); give each initializer a unique name"
            )
        initializers.add(tensor.name)
        defined.add(tensor.name)
    for sparse in graph.sparse_initializer:
        _check_tensor(sparse.values, "sparse initializer")
        if sparse.values.name in initializers:
            raise InvalidGraph(f"{label}: initializer '{sparse.values.name}' is defined twice (dense and sparse)")
        initializers.add(sparse.values.name)
        defined.add(sparse.values.name)
    produced: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        schemas.check(node)
        for name in node.output:
            if not name:
                continue
            if name in produced or name in defined:
                raise Fail(
                    f"This is an invalid model. Error: Duplicate definition of name ({name}): "
                    f"{label}: node '{node.name or node.op_type}' writes a value that an earlier node, "
                    "a graph input or an initializer already defines"
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
            where = f"attribute '{attr.name}' of node '{node.name or node.op_type}': tensor"
            for tensor in ([attr.t] if attr.HasField("t") else []) + list(attr.tensors):
                _check_tensor(tensor, where)
            for sparse in ([attr.sparse_tensor] if attr.HasField("sparse_tensor") else []) + list(attr.sparse_tensors):
                _check_tensor(sparse.values, where)
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


def merged_opsets(opset_imports: Sequence[onnx.OperatorSetIdProto], where: str = "the model") -> dict[str, int]:
    """The opset imports as ``{domain: version}`` (``"ai.onnx"`` read as ``""``).

    A domain imported twice at one version is accepted, as onnxruntime does (skl2onnx writes
    ``('', 22)`` twice); at two versions the model is ambiguous.

    :raises InvalidGraph: a domain imported at two versions, or a version below 1.
    """
    versions: dict[str, int] = {}
    for opset in opset_imports:
        domain = "" if opset.domain in ("", "ai.onnx") else opset.domain
        if opset.version < 1:
            raise InvalidGraph(f"opset version {opset.version} for domain '{opset.domain}' is not valid")
        previous = versions.setdefault(domain, opset.version)
        if previous != opset.version:
            raise InvalidGraph(
                f"{where} imports domain '{domain or 'ai.onnx'}' twice, at versions {previous} and "
                f"{opset.version}; keep one opset_import entry per domain"
            )
    return versions


def validate_model(model: onnx.ModelProto, detached: frozenset[str] = frozenset()) -> None:
    """Raise an onnxplug exception for any structural fault in ``model``.

    ``detached`` names top-level initializers whose data the loader read out of the file.

    Checked: IR and opset versions (at least one import, one version per domain), unique value
    and initializer names, typed graph inputs, every node input defined (scoping into
    subgraphs), no cycles, graph outputs produced, tensor payloads decodable and of the right
    size, node attributes against the op schemas (see :mod:`._schema_check`).
    """
    if model.ir_version > onnx.IR_VERSION:
        raise Fail(f"Unsupported model IR version: {model.ir_version}, max supported IR version: {onnx.IR_VERSION}")
    if not model.opset_import:
        raise Fail(
            "Missing opset in the model. All ModelProtos MUST have at least one entry that specifies which "
            "version of the ONNX OperatorSet is being imported."
        )
    opsets = merged_opsets(model.opset_import)
    for function in model.functions:
        merged_opsets(function.opset_import, f"function '{function.domain}::{function.name}'")
    newest = onnx.defs.onnx_opset_version()
    if opsets.get("", 0) > newest:
        raise Fail(
            f"the model imports opset {opsets['']} of the default domain; the newest this "
            f"installation knows is {newest} (upgrade onnx and onnxplug)"
        )
    schemas = SchemaChecker(opsets, {(f.domain, f.name) for f in model.functions})
    pending: list[tuple[onnx.GraphProto, frozenset[str]]] = [(model.graph, frozenset())]
    main = True
    while pending:
        graph, outer = pending.pop()
        _check_graph(graph, outer, pending, schemas, main, detached)
        main = False
