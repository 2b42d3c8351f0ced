"""The partition stage as one call: a model in, a partitioned model out.

It partitions every graph of the model — the main graph and, recursively, each If/Loop/Scan body
of a node run by a kernel, with the opsets its node resolves with (a node inside a fused
partition hands its subgraphs to the provider compiling it).  The planner then reads the
assignments; nothing earlier is edited.

Partitioning may replace function ops nobody claims by their bodies, which edits a graph, so such
a model is partitioned on the stage's own copy (``ir.Model.clone`` shares tensor payloads).  Most
models have no such op, and the copy cost a share of every session's creation (a six-node
model's 1.1 ms: 0.08; ResNet-50's optimized graph of 58 nodes: 1.3 ms), so the stage first
partitions the model as it is, read-only, and copies it only where that pass finds a node to
inline.  The planner partitions a fused node's bodies later, if its partition fails to compile
(:meth:`PartitionedModel.with_subgraphs`), and the model shared must never need an edit then: so
a model whose fused nodes' bodies hold any node with a function body is copied as well.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import onnx_ir as ir

from ..errors import Fail
from ..graph import execution_order, graphs_of, subgraphs
from ._assign import InliningNeeded, PartitionResult, ProviderSlot, partition_graph
from ._inline import FunctionInliner, node_opsets

__all__ = ["PartitionedModel", "partition_model"]


@dataclasses.dataclass(frozen=True)
class PartitionedModel:
    """A model whose every graph has an assignment.

    :ivar model: the optimized model itself, read-only, or (``own_copy``) the partition stage's
        own copy, with the function ops nobody claimed inlined.
    :ivar opsets: the main graph's opset imports.
    :ivar results: graph → its PartitionResult (subgraphs included).
    :ivar graph_opsets: graph → the opsets its nodes resolve with.
    :ivar own_copy: whether ``model`` is the stage's copy (see the module's docstring).
    """

    model: ir.Model
    opsets: Mapping[str, int]
    results: Mapping[ir.Graph, PartitionResult]
    graph_opsets: Mapping[ir.Graph, Mapping[str, int]]
    own_copy: bool = True

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
        pending = [(body, own) for _, body in subgraphs(node)]
        try:
            _partition_graphs(pending, self.model, slots, results, graph_opsets, may_edit=self.own_copy)
        except InliningNeeded as needed:  # partition_model copies a model where this could happen
            raise Fail(
                f"node '{node.name}' falls back from its partition, but its subgraph's node "
                f"'{needed.node.name}' ({needed.node.op_type}) would have to be inlined into the "
                "optimized model, which the partition stage shares read-only (an onnxplug bug)"
            ) from None
        return PartitionedModel(self.model, self.opsets, results, graph_opsets, self.own_copy)


def partition_model(model: ir.Model, opsets: Mapping[str, int], slots: Sequence[ProviderSlot]) -> PartitionedModel:
    """Partition ``model`` for ``slots`` (providers in priority order): as it is, or, where a
    function op nobody claims is to be inlined, a copy of it (see the module's docstring).

    :raises NotImplemented: a node no provider claims (with each provider's reason).
    :raises InvalidGraph: an op unknown in a standard domain; a recursive function.
    :raises Fail: an op of a custom domain no installed library provides.
    """
    try:
        results, graph_opsets = _partition_all(model, opsets, slots, may_edit=False)
        for graph, result in results.items():
            for node in graph:
                if result.assignments[node.name].partition is not None:
                    _check_fallback_bodies(node, node_opsets(node, graph_opsets[graph]), model)
        return PartitionedModel(model, dict(opsets), results, graph_opsets, own_copy=False)
    except InliningNeeded:
        copy = model.clone()
        results, graph_opsets = _partition_all(copy, opsets, slots, may_edit=True)
        return PartitionedModel(copy, dict(opsets), results, graph_opsets, own_copy=True)


def _check_fallback_bodies(node: ir.Node, opsets: Mapping[str, int], model: ir.Model) -> None:
    """Raise :class:`InliningNeeded` where a subgraph of ``node`` (a fused node) holds a node
    with a function body: were its partition to fail to compile, partitioning its bodies might
    inline it.  Decided from the nodes alone; asking the providers about bodies their compiler
    handles would have them convert those bodies (OpenVINO: twice the conversions)."""
    for _, body in subgraphs(node):
        for graph in graphs_of(body):
            inliner = FunctionInliner(graph, opsets, model.functions)
            for inner in graph:
                if inliner.body(inner) is not None:
                    raise InliningNeeded(inner)


def _partition_all(model: ir.Model, opsets: Mapping[str, int], slots: Sequence[ProviderSlot], *, may_edit: bool):
    results: dict[ir.Graph, PartitionResult] = {}
    graph_opsets: dict[ir.Graph, Mapping[str, int]] = {}
    _partition_graphs([(model.graph, dict(opsets))], model, slots, results, graph_opsets, may_edit=may_edit)
    return results, graph_opsets


def _partition_graphs(
    pending: list[tuple[ir.Graph, Mapping[str, int]]],
    model: ir.Model,
    slots: Sequence[ProviderSlot],
    results: dict[ir.Graph, PartitionResult],
    graph_opsets: dict[ir.Graph, Mapping[str, int]],
    *,
    may_edit: bool = True,
) -> None:
    """Partition the pending graphs and, recursively, the subgraphs of their kernel-run nodes
    (``may_edit``: as :func:`partition_graph`'s)."""
    while pending:
        graph, own = pending.pop()
        order = execution_order(graph)
        results[graph] = partition_graph(graph, order, own, slots, functions=model.functions, may_edit=may_edit)
        graph_opsets[graph] = own
        assignments = results[graph].assignments
        for node in graph:  # after inlining: bodies' subgraphs are partitioned too
            if assignments[node.name].partition is not None:
                continue  # a fused node's subgraphs are its compiler's business
            for _, body in subgraphs(node):
                pending.append((body, node_opsets(node, own)))
