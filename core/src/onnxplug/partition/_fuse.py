"""Fused partitions: the Partition handed to ``compile`` (convexity is the graph package's)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx_ir as ir

from ..api import Partition
from ..graph import extract_model

__all__ = ["build_partition"]


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
