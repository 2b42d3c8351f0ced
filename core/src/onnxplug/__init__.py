"""onnxplug: ONNX inference from Python, with every execution provider a plugin.

The public API is onnxruntime's, so ``import onnxplug as ort`` runs code written for
onnxruntime.  Plugins are discovered through the ``onnxplug`` entry-point group when first
needed (never at import).
"""

import logging

from ._plugins import Environment, PluginRecord, default_environment
from ._version import __version__
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
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    InferenceSession,
    IOBinding,
    ModelMetadata,
    NodeArg,
    OrtDevice,
    OrtValue,
    PartitionReport,
    RunOptions,
    SessionOptions,
)
from .runtime.session import _SEVERITY_LEVELS

__all__ = [
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
    "ModelLoadCanceled",
    "ModelLoaded",
    "ModelMetadata",
    "ModelRequiresCompilation",
    "NoModel",
    "NoSuchFile",
    "NodeArg",
    "NotFound",
    "NotImplemented",
    "OrtDevice",
    "OrtValue",
    "OnnxplugError",
    "PartitionReport",
    "PluginError",
    "PluginRecord",
    "RunOptions",
    "RuntimeException",
    "SessionOptions",
    "__version__",
    "default_environment",
    "get_all_providers",
    "get_available_providers",
    "get_device",
    "get_version_string",
    "hookimpl",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
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
    kinds = {d.kind for f in default_environment().available_factories() for d in f.devices()}
    return "GPU" if "gpu" in kinds else "CPU"


def get_version_string() -> str:
    return __version__


def set_default_logger_severity(severity: int) -> None:
    """Level of the ``onnxplug`` logger: 0 verbose, 1 info, 2 warning (default), 3 error, 4 fatal.

    :raises RuntimeError: another value (as onnxruntime).
    """
    if severity not in _SEVERITY_LEVELS:  # 0 verbose, 1 info, 2 warning, 3 error, 4 fatal
        raise RuntimeError(f"Invalid logging severity {severity!r}: expected 0 (verbose) to 4 (fatal)")
    logging.getLogger("onnxplug").setLevel(_SEVERITY_LEVELS[severity])


def set_default_logger_verbosity(verbosity: int) -> None:
    """Accepted for compatibility (onnxplug has no VLOG levels)."""


def set_seed(seed: int) -> None:
    """Seed the random ops that have no ``seed`` attribute, for reproducible runs."""
    set_global_seed(seed)
