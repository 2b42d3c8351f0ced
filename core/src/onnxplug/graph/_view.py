"""GraphView: the read-only picture of a graph that providers see in ``capability()``.

Providers never touch the onnx-ir graph itself: they get names, op types, resolved schema
versions, attribute values and types, and answer with claims.  The view is closed after the
call; using it later raises, so a provider cannot keep a handle into a graph it does not own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import onnx
import onnx_ir as ir

from ..kernels import find_schema, normalize_domain
from ._convex import connected_parts, convex_parts, successor_map
from ._extract import extract_model
from ._scopes import attribute_table, node_reads
from ._types import ir_type_string

__all__ = ["GraphView", "NodeView"]


class _Lease:
    __slots__ = ("open",)

    def __init__(self) -> None:
        self.open = True

    def check(self) -> None:
        if not self.open:
            raise RuntimeError("a GraphView is valid only during the capability() call that received it")


def _shape_of(value: ir.Value) -> tuple[int | str | None, ...] | None:
    shape = value.shape
    if shape is None:
        return None
    dims: list[int | str | None] = []
    for dim in shape:
        if isinstance(dim, int):
            dims.append(dim)
        else:
            dims.append(dim.value if isinstance(dim.value, str) and dim.value else None)
    return tuple(dims)


class NodeView:
    """One node as a provider sees it."""

    __slots__ = (
        "_lease",
        "name",
        "op_type",
        "domain",
        "since_version",
        "inputs",
        "outputs",
        "_attributes",
        "_input_types",
        "_output_types",
        "_input_shapes",
        "_output_shapes",
        "_schema",
        "_node",
        "subgraphs",
    )

    def __init__(self, node: ir.Node, opsets: Mapping[str, int], lease: _Lease) -> None:
        self._lease = lease
        self.name: str = node.name or ""
        self.op_type: str = node.op_type
        self.domain: str = normalize_domain(node.domain)
        version = opsets.get(self.domain)
        schema = find_schema(self.op_type, version, self.domain) if version is not None else None
        self._schema = schema
        #: The schema version the model's opset selects, ``None`` when onnx knows no schema.
        self.since_version: int | None = None if schema is None else schema.since_version
        self.inputs: tuple[str, ...] = tuple("" if v is None else v.name or "" for v in node.inputs)
        self.outputs: tuple[str, ...] = tuple(v.name or "" for v in node.outputs)
        self._attributes = dict(attribute_table(node))
        # Types and shapes are worked out at the first read (a provider may ask for none of
        # them): from the node's values as they are during the capability call.
        self._node = node
        self._input_types: tuple[str | None, ...] | None = None
        self._output_types: tuple[str | None, ...] | None = None
        self._input_shapes: tuple[tuple[int | str | None, ...] | None, ...] | None = None
        self._output_shapes: tuple[tuple[int | str | None, ...] | None, ...] | None = None
        #: Names of the node's graph attributes (If branches, Loop/Scan bodies).
        self.subgraphs: tuple[str, ...] = tuple(
            name
            for name, attr in self._attributes.items()
            if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
        )

    def key_string(self) -> str:
        return f"{self.domain or 'ai.onnx'}::{self.op_type}-{self.since_version}"

    @property
    def attributes(self) -> dict[str, Any]:
        """Attribute values (ints, floats, strings, tuples; tensors as onnx-ir tensors)."""
        self._lease.check()
        return {name: attr.value for name, attr in self._attributes.items()}

    @property
    def input_types(self) -> tuple[str | None, ...]:
        """onnxruntime type strings of the inputs (``None`` when unknown or missing)."""
        if self._input_types is None:
            self._input_types = tuple(None if v is None else ir_type_string(v.type) for v in self._node.inputs)
        return self._input_types

    @property
    def output_types(self) -> tuple[str | None, ...]:
        if self._output_types is None:
            self._output_types = tuple(ir_type_string(v.type) for v in self._node.outputs)
        return self._output_types

    @property
    def input_shapes(self) -> tuple[tuple[int | str | None, ...] | None, ...]:
        """The inputs' shapes after shape inference: a static dim as an int, a symbolic one as its
        name, an unknown one as ``None``; ``None`` for an input of unknown rank (or missing).
        Providers decline by shape with these (a GPU kernel limited to rank 4, a compiler that
        needs static shapes).

        .. versionadded:: 0.2
        """
        if self._input_shapes is None:
            self._input_shapes = tuple(None if v is None else _shape_of(v) for v in self._node.inputs)
        return self._input_shapes

    @property
    def output_shapes(self) -> tuple[tuple[int | str | None, ...] | None, ...]:
        """The outputs' shapes, as :attr:`input_shapes` describes them."""
        if self._output_shapes is None:
            self._output_shapes = tuple(_shape_of(v) for v in self._node.outputs)
        return self._output_shapes

    def type_bindings(self) -> dict[str, str]:
        """Which type each of the schema's type parameters is bound to, from known input types."""
        bindings: dict[str, str] = {}
        if self._schema is None:
            return bindings
        formal = self._schema.inputs
        for index, type_name in enumerate(self.input_types):
            if type_name is None or not formal:
                continue
            param = formal[min(index, len(formal) - 1)]
            bindings.setdefault(param.type_str, type_name)
        return bindings

    def __repr__(self) -> str:
        return f"NodeView({self.name!r}, {self.key_string()})"


class GraphView:
    """A read-only graph: nodes in execution order, inputs, outputs, initializer names.

    :param graph: the onnx-ir graph (not exposed).
    :param opsets: the model's opset imports, used to resolve each node's schema version.
    """

    def __init__(self, graph: ir.Graph, opsets: Mapping[str, int], nodes: list[ir.Node] | None = None):
        self._lease = _Lease()
        self._graph = graph
        self._opsets = dict(opsets)
        #: The opsets the view's nodes resolve with (domain → version; ``""`` is ai.onnx): what a
        #: provider with a supported opset range compares against.
        self.opsets: Mapping[str, int] = MappingProxyType(self._opsets)
        self._ir_nodes = list(graph if nodes is None else nodes)
        self._model_bytes: bytes | None = None
        self._nodes = [NodeView(n, opsets, self._lease) for n in self._ir_nodes]
        self._by_name = {n.name: n for n in self._nodes}
        self.inputs: tuple[str, ...] = tuple(v.name or "" for v in graph.inputs)
        self.outputs: tuple[str, ...] = tuple(v.name or "" for v in graph.outputs)
        self.initializers: frozenset[str] = frozenset(graph.initializers)
        self.declined: dict[str, list[str]] = {}
        self._declining_provider = ""

    @property
    def nodes(self) -> list[NodeView]:
        self._lease.check()
        return list(self._nodes)

    def node(self, name: str) -> NodeView:
        self._lease.check()
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[NodeView]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def fusion_groups(self, names: Iterable[str]) -> list[tuple[str, ...]]:
        """``names`` grouped for FuseClaims: each group connected by edges among its own nodes
        and convex (no path leaves it and comes back), nodes in execution order.

        Edges include what nodes' subgraphs read from outside, so a group never splits a
        dependency the core would have to refuse.
        """
        self._lease.check()
        every = list(self._graph)
        successors = successor_map(every, {node.name: node_reads(node) for node in every})
        order = {node.name: index for index, node in enumerate(self._nodes)}
        groups = []
        for piece in connected_parts((n for n in names if n in order), successors):
            for part in convex_parts(piece, successors):
                for group in connected_parts(part, successors):
                    groups.append(tuple(sorted(group, key=order.__getitem__)))
        return sorted(groups, key=lambda group: order[group[0]])

    def model_bytes(self) -> bytes:
        """The view's nodes as a standalone serialized ONNX model, for providers whose vendor
        library decides support on a model (OpenVINO's ``convert_partially``, TensorRT's parser).

        Values the nodes read from outside (subgraphs' outer-scope reads included) are graph
        inputs with their inferred types and shapes, except initializers that cannot be
        overridden, which are embedded; values read outside the view or that are graph outputs
        are outputs; the other values the nodes produce are listed in ``value_info`` with the
        types the session knows (the types a fused partition's model will declare).  Node names
        are kept, so support answers map back to the view's nodes.
        The bytes are built once per view.
        """
        self._lease.check()
        if self._model_bytes is None:
            self._model_bytes = self._build_model().SerializeToString()
        return self._model_bytes

    def _build_model(self) -> onnx.ModelProto:
        graph = self._graph
        members = {id(node) for node in self._ir_nodes}
        fed = {id(v) for v in graph.inputs}
        constants = {id(v): v for v in graph.initializers.values() if id(v) not in fed and v.const_value is not None}
        read_outside = {id(v) for node in graph if id(node) not in members for v in node_reads(node)}
        graph_outputs = {id(v) for v in graph.outputs}
        model, _, outputs = extract_model(
            graph.name or "view",
            self._ir_nodes,
            read_outside,
            graph_outputs,
            constants,
            self._opsets,
            onnx.IR_VERSION,
        )
        exposed = {id(v) for v in outputs}
        model.graph.value_info.extend(
            ir.serde.serialize_value(v)
            for node in self._ir_nodes
            for v in node.outputs
            if v.name and v.type is not None and id(v) not in exposed
        )
        return model

    def decline(self, node: NodeView | str, reason: str) -> None:
        """Record why the provider being asked does not claim ``node``."""
        name = node if isinstance(node, str) else node.name
        self.declined.setdefault(name, []).append(reason)

    def begin_query(self, provider: str) -> None:
        """Open the view for one provider's ``capability()`` call (the core and the contract kit
        call it; providers never need to): the declines recorded from now on are that provider's."""
        self._lease.open = True
        self._declining_provider = provider
        self.declined = {}

    def end_query(self) -> dict[str, list[str]]:
        """Close the view (a provider that kept it gets an error on use) and return the reasons
        the provider gave, node name → reasons."""
        self._lease.open = False
        return self.declined
