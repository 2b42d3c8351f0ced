"""Exceptions raised by onnxplug, named after onnxruntime's.

Code written for onnxruntime catches ``onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument``
and friends; the same names live here (and in :mod:`onnxplug.capi.onnxruntime_pybind11_state`), so
porting is a change of import.  Unlike onnxruntime's, each class also derives from the closest
builtin (``ValueError`` for bad input, ``RuntimeError`` for failures), so generic handlers such as
``except ValueError`` keep working.

Every message names the culprit: the input or output, the node and its op type, and what was
expected against what was found.
"""

from __future__ import annotations

__all__ = [
    "OnnxplugError",
    "Fail",
    "InvalidArgument",
    "NoSuchFile",
    "NoModel",
    "EngineError",
    "RuntimeException",
    "InvalidProtobuf",
    "ModelLoaded",
    "NotImplemented",
    "InvalidGraph",
    "EPFail",
    "ModelLoadCanceled",
    "ModelRequiresCompilation",
    "NotFound",
    "DeviceReset",
    "PluginError",
    "RunTerminated",
]


class OnnxplugError(Exception):
    """Base of every onnxplug status error.

    ``code`` and ``code_name`` follow onnxruntime's status codes, and ``str(error)`` reads
    ``"[ONNXPlugError] : <code> : <CODE_NAME> : <message>"`` like onnxruntime's.
    """

    code = 1
    code_name = "FAIL"

    def __init__(self, message: str = "") -> None:
        self.message = message
        super().__init__(f"[ONNXPlugError] : {self.code} : {self.code_name} : {message}")


class Fail(OnnxplugError, RuntimeError):
    """A failure while building or running a session (kernel errors, terminate, bad graphs)."""

    code, code_name = 1, "FAIL"


class RunTerminated(Fail):
    """The caller set ``RunOptions.terminate``: the run stopped between steps or iterations.

    A :class:`Fail` with onnxruntime's message, so code catching ``Fail`` keeps working; its own
    class lets the executor pass it on without naming a node.
    """

    def __init__(self, message: str = "Exiting due to terminate flag being set to true.") -> None:
        super().__init__(message)


class InvalidArgument(OnnxplugError, ValueError):
    """A value given by the caller does not fit: feed name, dtype, rank, shape, option."""

    code, code_name = 2, "INVALID_ARGUMENT"


class NoSuchFile(OnnxplugError, FileNotFoundError):
    """A model (or a file it refers to) does not exist."""

    code, code_name = 3, "NO_SUCHFILE"


class NoModel(OnnxplugError, RuntimeError):
    """The session holds no model (for example after a failed ``set_providers``)."""

    code, code_name = 4, "NO_MODEL"


class EngineError(OnnxplugError, RuntimeError):
    code, code_name = 5, "ENGINE_ERROR"


class RuntimeException(OnnxplugError, RuntimeError):
    code, code_name = 6, "RUNTIME_EXCEPTION"


class InvalidProtobuf(OnnxplugError, ValueError):
    """The bytes are not a readable ONNX ModelProto."""

    code, code_name = 7, "INVALID_PROTOBUF"


class ModelLoaded(OnnxplugError, RuntimeError):
    code, code_name = 8, "MODEL_LOADED"


class NotImplemented(OnnxplugError, NotImplementedError):  # noqa: A001 - onnxruntime's name
    """No installed provider can run a node (op, domain or version unsupported)."""

    code, code_name = 9, "NOT_IMPLEMENTED"


class InvalidGraph(OnnxplugError, ValueError):
    """The model's graph breaks the ONNX rules (unknown op, duplicate names, cycles...)."""

    code, code_name = 10, "INVALID_GRAPH"


class EPFail(OnnxplugError, RuntimeError):
    """An execution provider failed to compile or run its part of the graph."""

    code, code_name = 11, "EP_FAIL"


class ModelLoadCanceled(OnnxplugError, RuntimeError):
    code, code_name = 12, "MODEL_LOAD_CANCELED"


class ModelRequiresCompilation(OnnxplugError, RuntimeError):
    code, code_name = 13, "MODEL_REQUIRES_COMPILATION"


class NotFound(OnnxplugError, LookupError):
    code, code_name = 14, "NOT_FOUND"


class DeviceReset(OnnxplugError, RuntimeError):
    code, code_name = 15, "DEVICE_RESET"


class PluginError(Exception):
    """A plugin broke the provider contract (bad registration, conflicting kernels, bad hook).

    Raised while an :class:`~onnxplug.Environment` is being built or a kernel registered; the
    message names the plugin's distribution.
    """
