"""The partition stage: which provider runs each node — claims collected, validated, assigned;
function ops nobody claims inlined.  ``partition_model`` is the stage as one call."""

from ._assign import Assignment, PartitionResult, ProviderSlot, partition_graph
from ._fuse import build_partition, partition_of
from ._inline import FunctionInliner, node_opsets
from ._model import PartitionedModel, partition_model

__all__ = [
    "Assignment",
    "FunctionInliner",
    "PartitionResult",
    "PartitionedModel",
    "ProviderSlot",
    "build_partition",
    "node_opsets",
    "partition_graph",
    "partition_model",
    "partition_of",
]
