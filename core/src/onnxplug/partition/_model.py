"""The partition stage as one call: a model in, a partitioned model out.

Partitioning may replace function ops nobody claims by their bodies, which edits a graph, so the
stage works on its own copy of the optimized model (``ir.Model.clone`` shares tensor payloads) and
partitions every graph of it — the main graph and, recursively, each If/Loop/Scan body of a node
run by a kernel, with the opsets its node resolves with (a node inside a fused partition hands its
subgraphs to the provider compiling it).  The planner then reads the assignments; nothing earlier is edited.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import onnx_ir as ir

from ..graph import execution_order, subgraphs
from ._assign import PartitionResult, ProviderSlot, partition_graph
from ._inline import node_opsets

__all__ = ["PartitionedModel", "partition_model"]


@dataclasses.dataclass(frozen=True)
class PartitionedModel:
    """A model whose every graph has an assignment.

    :ivar model: the partition stage's own copy (function ops nobody claimed are inlined).
    :ivar opsets: the main graph's opset imports.
    :ivar results: graph → its PartitionResult (subgraphs included).
    :ivar graph_opsets: graph → the opsets its nodes resolve with.
    """

    model: ir.Model
    opsets: Mapping[str, int]
    results: Mapping[ir.Graph, PartitionResult]
    graph_opsets: Mapping[ir.Graph, Mapping[str, int]]

    @property
    def main(self) -> PartitionResult:
        return self.results[self.model.graph]

    def result(self, graph: ir.Graph) -> PartitionResult:
        """The assignment of ``graph`` (a graph of this model)."""
        return self.results[graph]

    def with_subgraphs(self, node: ir.Node, slots: Sequence[ProviderSlot]) -> PartitionedModel:
        """This model with ``node``'s subgraphs partitioned too: for a node that was fused but
        falls back to a kernel when its partition fails to compile."""
        results, graph_opsets = dict(self.results), dict(self.graph_opsets)
        own = node_opsets(node, self.graph_opsets[node.graph])
        _partition_graphs([(body, own) for _, body in subgraphs(node)], self.model, slots, results, graph_opsets)
        return PartitionedModel(self.model, self.opsets, results, graph_opsets)


def partition_model(model: ir.Model, opsets: Mapping[str, int], slots: Sequence[ProviderSlot]) -> PartitionedModel:
    """Partition a copy of ``model`` for ``slots`` (providers in priority order).

    :raises NotImplemented: a node no provider claims (with each provider's reason).
    :raises InvalidGraph: an op unknown in a standard domain; a recursive function.
    :raises Fail: an op of a custom domain no installed library provides.
    """
    copy = model.clone()
    results: dict[ir.Graph, PartitionResult] = {}
    graph_opsets: dict[ir.Graph, Mapping[str, int]] = {}
    _partition_graphs([(copy.graph, dict(opsets))], copy, slots, results, graph_opsets)
    return PartitionedModel(copy, dict(opsets), results, graph_opsets)


def _partition_graphs(
    pending: list[tuple[ir.Graph, Mapping[str, int]]],
    model: ir.Model,
    slots: Sequence[ProviderSlot],
    results: dict[ir.Graph, PartitionResult],
    graph_opsets: dict[ir.Graph, Mapping[str, int]],
) -> None:
    """Partition the pending graphs and, recursively, the subgraphs of their kernel-run nodes."""
    while pending:
        graph, own = pending.pop()
        results[graph] = partition_graph(graph, execution_order(graph), own, slots, functions=model.functions)
        graph_opsets[graph] = own
        assignments = results[graph].assignments
        for node in graph:  # after inlining: bodies' subgraphs are partitioned too
            if assignments[node.name].partition is not None:
                continue  # a fused node's subgraphs are its compiler's business
            for _, body in subgraphs(node):
                pending.append((body, node_opsets(node, own)))
