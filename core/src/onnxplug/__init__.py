"""onnxplug: ONNX inference from Python, with every execution provider a plugin.

The public API is onnxruntime's, so ``import onnxplug as ort`` runs code written for
onnxruntime.  Plugins are discovered through the ``onnxplug`` entry-point group when first
needed (never at import).
"""

import logging

from . import _deferred  # noqa: F401 - first: imports onnx-ir with its sympy deferred
from ._plugins import Environment, PluginRecord, default_environment
from ._version import __version__
from .compile_cache import CompileCache, default_compile_cache
from .errors import (
    DeviceReset,
    EngineError,
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoadCanceled,
    ModelLoaded,
    ModelRequiresCompilation,
    NoModel,
    NoSuchFile,
    NotFound,
    NotImplemented,  # noqa: A004 - onnxruntime's name
    OnnxplugError,
    PluginError,
    RuntimeException,
)
from .hookspecs import hookimpl
from .kernels._runstate import set_global_seed
from .runtime import (
    AdapterFormat,
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    InferenceSession,
    IOBinding,
    LoraAdapter,
    ModelMetadata,
    NodeArg,
    OrtAllocatorType,
    OrtArenaCfg,
    OrtDevice,
    OrtDeviceVendorId,
    OrtEpAssignedNode,
    OrtEpAssignedSubgraph,
    OrtMemoryInfo,
    OrtMemType,
    OrtSparseFormat,
    OrtValue,
    OrtValueVector,
    PartitionReport,
    RunOptions,
    SessionIOBinding,
    SessionOptions,
    SparseTensor,
)
from .runtime._global_threads import set_global_thread_pool_sizes
from .runtime._session_log import SEVERITY_LEVELS

__all__ = [
    "CompileCache",
    "default_compile_cache",
    "AdapterFormat",
    "DeviceReset",
    "EPFail",
    "EngineError",
    "Environment",
    "ExecutionMode",
    "ExecutionOrder",
    "Fail",
    "GraphOptimizationLevel",
    "IOBinding",
    "InferenceSession",
    "InvalidArgument",
    "InvalidGraph",
    "InvalidProtobuf",
    "LoraAdapter",
    "ModelLoadCanceled",
    "ModelLoaded",
    "ModelMetadata",
    "ModelRequiresCompilation",
    "NoModel",
    "NoSuchFile",
    "NodeArg",
    "NotFound",
    "NotImplemented",
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
    "OnnxplugError",
    "PartitionReport",
    "PluginError",
    "PluginRecord",
    "RunOptions",
    "RuntimeException",
    "SessionIOBinding",
    "SessionOptions",
    "SparseTensor",
    "__version__",
    "default_environment",
    "disable_telemetry_events",
    "enable_telemetry_events",
    "get_all_providers",
    "get_available_providers",
    "get_build_info",
    "get_device",
    "get_version_string",
    "hookimpl",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "set_global_thread_pool_sizes",
    "set_seed",
]


def get_available_providers() -> list[str]:
    """onnxruntime names of the providers that found a device, highest priority first, CPU last."""
    return [f.ort_name for f in default_environment().available_factories()]


def get_all_providers() -> list[str]:
    """onnxruntime names of every installed provider plugin, available or not, CPU last."""
    return [f.ort_name for f in default_environment().factories()]


def get_device() -> str:
    """``"CPU"``, or ``"GPU"`` when an installed provider found a GPU."""
    environment = default_environment()
    kinds = {d.kind for f in environment.available_factories() for d in environment.devices(f)}
    return "GPU" if "gpu" in kinds else "CPU"


def get_version_string() -> str:
    return __version__


def get_build_info() -> str:
    """A one-line description of this build, in onnxruntime's ``ORT Build Info: ...`` form."""
    import onnx
    import onnx_ir

    return f"ORT Build Info: onnxplug={__version__}, onnx={onnx.__version__}, onnx-ir={onnx_ir.__version__}"


def enable_telemetry_events() -> None:
    """Accepted: onnxplug sends no telemetry (onnxruntime's is a no-op off Windows too)."""


def disable_telemetry_events() -> None:
    """Accepted: onnxplug sends no telemetry."""


def set_default_logger_severity(severity: int) -> None:
    """Level of the ``onnxplug`` logger: 0 verbose, 1 info, 2 warning (default), 3 error, 4 fatal.

    :raises RuntimeError: another value (as onnxruntime).
    """
    if severity not in SEVERITY_LEVELS:  # 0 verbose, 1 info, 2 warning, 3 error, 4 fatal
        raise RuntimeError(f"Invalid logging severity {severity!r}: expected 0 (verbose) to 4 (fatal)")
    logging.getLogger("onnxplug").setLevel(SEVERITY_LEVELS[severity])


def set_default_logger_verbosity(verbosity: int) -> None:
    """Accepted for compatibility (onnxplug has no VLOG levels)."""


def set_seed(seed: int) -> None:
    """Seed the random ops that have no ``seed`` attribute, for reproducible runs."""
    set_global_seed(seed)
