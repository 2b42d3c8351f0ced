"""Deciding which provider runs each node: claims collected, validated, assigned."""

from ._assign import Assignment, PartitionResult, ProviderSlot, partition_graph

__all__ = ["Assignment", "PartitionResult", "ProviderSlot", "partition_graph"]
