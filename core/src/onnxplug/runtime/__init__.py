"""Sessions, options, execution plans."""

from ._io import ModelMetadata, NodeArg
from ._plan import GraphPlan, SubgraphRunner
from .iobinding import IOBinding
from .options import ExecutionMode, ExecutionOrder, GraphOptimizationLevel, RunOptions, SessionOptions
from .ortvalue import OrtDevice, OrtValue
from .report import PartitionReport, ReportCopy, ReportNode
from .session import InferenceSession

__all__ = [
    "ExecutionMode",
    "ExecutionOrder",
    "GraphOptimizationLevel",
    "GraphPlan",
    "IOBinding",
    "InferenceSession",
    "ModelMetadata",
    "NodeArg",
    "OrtDevice",
    "OrtValue",
    "PartitionReport",
    "ReportCopy",
    "ReportNode",
    "RunOptions",
    "SessionOptions",
    "SubgraphRunner",
]
