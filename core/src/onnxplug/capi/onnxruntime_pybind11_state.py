"""onnxruntime's exception module path: ``from onnxplug.capi.onnxruntime_pybind11_state import Fail``."""

from ..errors import (  # noqa: F401 - re-exported names
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
    NotImplemented,  # noqa: A004
    RuntimeException,
)
