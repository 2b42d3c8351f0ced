"""Sessions, options, execution plans."""

from ._device import (
    DEVICE_TYPE_CODES,
    OrtAllocatorType,
    OrtArenaCfg,
    OrtDevice,
    OrtDeviceVendorId,
    OrtMemoryInfo,
    OrtMemType,
)
from ._io import ModelMetadata, NodeArg
from ._plan import GraphPlan, SubgraphRunner
from ._session_info import OrtEpAssignedNode, OrtEpAssignedSubgraph
from .iobinding import IOBinding, SessionIOBinding
from .lora import AdapterFormat, LoraAdapter
from .options import ExecutionMode, ExecutionOrder, GraphOptimizationLevel, RunOptions, SessionOptions
from .ortvalue import OrtValue, OrtValueVector
from .report import PartitionReport, ReportCopy, ReportNode
from .session import InferenceSession
from .sparse import OrtSparseFormat, SparseTensor

__all__ = [
    "DEVICE_TYPE_CODES",
    "AdapterFormat",
    "ExecutionMode",
    "ExecutionOrder",
    "GraphOptimizationLevel",
    "GraphPlan",
    "IOBinding",
    "InferenceSession",
    "LoraAdapter",
    "ModelMetadata",
    "NodeArg",
    "OrtAllocatorType",
    "OrtArenaCfg",
    "OrtDevice",
    "OrtDeviceVendorId",
    "OrtEpAssignedNode",
    "OrtEpAssignedSubgraph",
    "OrtMemType",
    "OrtMemoryInfo",
    "OrtSparseFormat",
    "OrtValue",
    "OrtValueVector",
    "PartitionReport",
    "ReportCopy",
    "ReportNode",
    "RunOptions",
    "SessionIOBinding",
    "SessionOptions",
    "SparseTensor",
    "SubgraphRunner",
]
