"""onnxruntime's ``onnxruntime.capi.onnxruntime_inference_collection``: the Python classes
code imports from there (``Session`` is the base class name; onnxplug has one session class)."""

from ..runtime import (
    DEVICE_TYPE_CODES,
    AdapterFormat,
    InferenceSession,
    IOBinding,
    OrtDevice,
    OrtDeviceVendorId,
    OrtValue,
    SparseTensor,
)

__all__ = [
    "AdapterFormat",
    "IOBinding",
    "InferenceSession",
    "OrtDevice",
    "OrtDeviceVendorId",
    "OrtValue",
    "Session",
    "SparseTensor",
    "get_ort_device_type",
]

Session = InferenceSession


def get_ort_device_type(device_type: str) -> int:
    """onnxruntime's type code for a device name (``"cuda"`` → 1).

    :raises Exception: an unknown name (onnxruntime raises a plain ``Exception``).
    """
    code = DEVICE_TYPE_CODES.get(device_type)
    if code is None or device_type == "fpga":
        raise Exception("Unsupported device type: " + device_type)
    return code
