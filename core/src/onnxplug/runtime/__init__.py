"""Sessions, options, execution plans."""

from ._io import ModelMetadata, NodeArg
from ._plan import GraphPlan, SubgraphRunner
from .options import ExecutionMode, ExecutionOrder, GraphOptimizationLevel, RunOptions, SessionOptions
from .session import InferenceSession

__all__ = [
    "ExecutionMode",
    "ExecutionOrder",
    "GraphOptimizationLevel",
    "GraphPlan",
    "InferenceSession",
    "ModelMetadata",
    "NodeArg",
    "RunOptions",
    "SessionOptions",
    "SubgraphRunner",
]
