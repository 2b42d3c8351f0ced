"""Fused partitions: the Partition handed to ``compile`` (convexity is the graph package's)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx_ir as ir

from ..api import Partition
from ..graph import execution_order, extract_model, node_reads

__all__ = ["build_partition", "partition_of"]


def build_partition(
    name: str,
    members: Sequence[ir.Node],
    outside_readers: set[int],
    graph_outputs: set[int],
    constants: Mapping[int, ir.Value],
    opsets: Mapping[str, int],
    ir_version: int,
) -> tuple[Partition, list[ir.Value], list[ir.Value]]:
    """The Partition for ``members`` (in execution order), with its input and output values.

    :param outside_readers: ids of values read by a node outside the partition.
    :param graph_outputs: ids of the graph's output values.
    :param constants: id → initializer value for initializers that cannot be overridden.
    """
    model, inputs, outputs = extract_model(name, members, outside_readers, graph_outputs, constants, opsets, ir_version)
    partition = Partition(
        name, tuple(n.name for n in members), tuple(v.name for v in inputs), tuple(v.name for v in outputs), model
    )
    return partition, inputs, outputs


def partition_of(model: ir.Model, nodes: Sequence[str], name: str = "partition_0") -> Partition:
    """The Partition the core would hand to :meth:`~onnxplug.api.Provider.compile` for the
    top-level ``nodes`` (by name) of ``model``, as if they were fused alone.

    For a provider's tests (the contract kit compiles its FuseClaims this way) and for
    compiling a set of nodes outside a session.  Initializers stay constants; the nodes must
    form a convex set (no path leaves it and comes back); initializers that are also graph
    inputs (a feed may replace them) become partition inputs.

    :raises KeyError: a name that is not a node of the graph.

    .. versionadded:: 0.2
    """
    wanted = set(nodes)
    order = execution_order(model.graph)
    members = [node for node in order if node.name in wanted]
    missing = wanted - {node.name for node in members}
    if missing:
        raise KeyError(f"no node named {sorted(missing)} in the graph")
    readers = {id(value) for node in order if node.name not in wanted for value in node_reads(node)}
    inputs = {id(value) for value in model.graph.inputs}  # initializers a feed may replace are inputs
    constants = {id(value): value for value in model.graph.initializers.values() if id(value) not in inputs}
    opsets = dict(model.opset_imports)
    built, _, _ = build_partition(
        name, members, readers, {id(v) for v in model.graph.outputs}, constants, opsets, model.ir_version
    )
    return built
