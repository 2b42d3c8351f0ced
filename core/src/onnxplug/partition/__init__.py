"""Deciding which provider runs each node: claims collected, validated, assigned; function ops
nobody claims inlined."""

from ._assign import Assignment, PartitionResult, ProviderSlot, partition_graph
from ._fuse import build_partition, convex_parts, successor_map
from ._inline import FunctionInliner, node_opsets

__all__ = [
    "Assignment",
    "FunctionInliner",
    "build_partition",
    "convex_parts",
    "successor_map",
    "PartitionResult",
    "ProviderSlot",
    "node_opsets",
    "partition_graph",
]
