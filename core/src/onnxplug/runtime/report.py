"""The partition report: what a session runs where, as plain data.

``InferenceSession.get_partition_report()`` returns one; the ``onnxplug partition`` command, its
HTML picture and tests read it instead of the session's internals.  Only the main graph is
described (subgraphs run inside their If/Loop/Scan node).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import onnx_ir as ir

__all__ = ["PartitionReport", "ReportCopy", "ReportNode"]


@dataclasses.dataclass(frozen=True)
class ReportNode:
    """One node of the main graph as it runs.

    :ivar provider: onnxruntime name of the provider running it.
    :ivar partition: the fused partition it belongs to, or ``None`` (run by a kernel).
    :ivar inputs: value names read (``""`` for a missing optional input).
    :ivar outputs: value names written.
    :ivar output_types: type strings of the outputs (``FLOAT[1,3,224,224]``; symbolic dims by
        name, unknown ones as ``?``).
    """

    name: str
    op_type: str
    domain: str
    provider: str
    partition: str | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    output_types: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class ReportCopy:
    """A copy the plan inserted: ``value`` moved from ``source`` to ``target`` memory, and how:
    ``"run"`` (a copy step on every run), ``"build"`` (a constant copied once, at session
    creation), ``"dlpack"`` (device to device through DLPack), ``"via host"``, or ``"if needed"``
    (a subgraph's outer-scope value, copied on each run only when it is not already in
    ``target``'s memory)."""

    value: str
    source: str
    target: str
    how: str = "run"

    def __str__(self) -> str:
        return f"{self.value}: {self.source} -> {self.target}"


@dataclasses.dataclass(frozen=True)
class PartitionReport:
    """How a session's main graph is split between providers.

    :ivar providers: the session's providers, highest priority first (onnxruntime names).
    :ivar nodes: the nodes that run, in execution order (folded constants are not nodes).
    :ivar edges: ``(producer, consumer, value)`` between nodes of ``nodes``.
    :ivar constants: names of values known when the session is built (initializers and folded
        results): inputs of nodes, never nodes themselves.
    :ivar graph_inputs: the graph's non-constant inputs; ``graph_outputs``: its outputs.
    :ivar partitions: fused partition name → member node names in execution order.
    :ivar copies: the copies between memories.
    :ivar declined: provider → node → the reasons it gave for not claiming the node.
    """

    providers: tuple[str, ...]
    nodes: tuple[ReportNode, ...]
    edges: tuple[tuple[str, str, str], ...]
    constants: frozenset[str]
    graph_inputs: tuple[str, ...]
    graph_outputs: tuple[str, ...]
    partitions: Mapping[str, tuple[str, ...]]
    copies: tuple[ReportCopy, ...]
    declined: Mapping[str, Mapping[str, tuple[str, ...]]]

    @property
    def counts(self) -> dict[str, int]:
        """Nodes per provider; the counts add up to ``len(nodes)``."""
        totals: dict[str, int] = {}
        for node in self.nodes:
            totals[node.provider] = totals.get(node.provider, 0) + 1
        return totals

    def node(self, name: str) -> ReportNode:
        """The node called ``name`` (KeyError naming it when there is none)."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"the report has no node named '{name}'")


def build_report(
    graph: ir.Graph,
    order: Sequence[tuple[ir.Node, str, str | None]],
    constants: Sequence[str],
    copies: Sequence[ReportCopy],
    declined: Mapping[str, Mapping[str, Sequence[str]]],
    providers: Sequence[str],
) -> PartitionReport:
    """A report from the graph that runs and, in execution order, each node that runs with its
    provider's onnxruntime name and fused partition (``None`` for kernels)."""
    nodes = []
    producer: dict[str, str] = {}
    partitions: dict[str, list[str]] = {}
    for node, provider, partition in order:
        outputs = tuple(v.name or "" for v in node.outputs)
        nodes.append(
            ReportNode(
                name=node.name or "",
                op_type=node.op_type,
                domain=node.domain,
                provider=provider,
                partition=partition,
                inputs=tuple("" if v is None else v.name or "" for v in node.inputs),
                outputs=outputs,
                output_types=tuple(_type_of(v) for v in node.outputs),
            )
        )
        for name in outputs:
            if name:
                producer[name] = node.name or ""
        if partition is not None:
            partitions.setdefault(partition, []).append(node.name or "")
    edges = tuple(
        (producer[value], node.name, value) for node in nodes for value in node.inputs if value and value in producer
    )
    constant_names = frozenset(constants)
    return PartitionReport(
        providers=tuple(providers),
        nodes=tuple(nodes),
        edges=edges,
        constants=constant_names,
        graph_inputs=tuple(v.name for v in graph.inputs if v.name not in constant_names),
        graph_outputs=tuple(v.name for v in graph.outputs),
        partitions={name: tuple(members) for name, members in partitions.items()},
        copies=tuple(copies),  # type: ignore[arg-type]
        declined={p: {n: tuple(r) for n, r in per.items()} for p, per in declined.items()},
    )


def _type_of(value: ir.Value) -> str:
    """``float[1,3,224,224]``-style text for a value (``?`` for what is not known)."""
    if value.type is None:
        return "?"
    text = str(value.type)
    if value.shape is not None:
        text += "[" + ",".join(str(d) if d is not None else "?" for d in value.shape) + "]"
    return text
