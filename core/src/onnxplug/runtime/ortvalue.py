"""OrtValue and OrtDevice: values held for the runtime, with onnxruntime's methods.

On the CPU an OrtValue made from a numpy array wraps it without a copy, as onnxruntime does.
Unlike onnxruntime, string arrays are accepted too (``run`` accepts them, so refusing them here
only forces users to special-case).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..graph import element_name, np_dtype, onnx_element_type
from ..kernels import check_allocation

__all__ = ["OrtValue", "OrtDevice"]


class OrtDevice:
    """A device descriptor: ``OrtDevice.make("cpu", 0)``."""

    _TYPES = {"cpu": 0, "cuda": 1, "gpu": 1, "dml": 4, "npu": 2}

    def __init__(self, device_type: int = 0, memory_type: int = 0, device_id: int = 0, vendor_id: int = 0) -> None:
        self._type = device_type
        self._memory = memory_type
        self._id = device_id
        self._vendor = vendor_id

    @classmethod
    def make(cls, device_type: str, device_id: int = 0) -> OrtDevice:
        kind = cls._TYPES.get(str(device_type).lower())
        if kind is None:
            raise Exception(f"Unsupported device type: {device_type}")
        return cls(kind, 0, device_id)

    @staticmethod
    def cpu() -> int:
        return 0

    @staticmethod
    def cuda() -> int:
        return 1

    @staticmethod
    def npu() -> int:
        return 2

    @staticmethod
    def default_memory() -> int:
        return 0

    def device_type(self) -> int:
        return self._type

    def device_id(self) -> int:
        return self._id

    def device_vendor(self) -> int:
        return self._vendor

    def device_mem_type(self) -> int:
        return self._memory


def _check_device(device_type: str) -> None:
    name = str(device_type).lower()
    if name == "cpu":
        return
    if name in OrtDevice._TYPES:
        raise RuntimeError(
            f"Can't allocate memory on the device '{device_type}': no installed provider owns such a device "
            "through OrtValue (values live in host memory)"
        )
    raise Exception(f"Unsupported device type: {device_type}")


class OrtValue:
    """A tensor, a sequence of tensors, a map or an empty optional, in host memory."""

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        self._value = value

    # -- construction ------------------------------------------------------------------------

    @staticmethod
    def ortvalue_from_numpy(
        array: np.ndarray, device_type: str = "cpu", device_id: int = 0, vendor_id: int = -1
    ) -> OrtValue:
        """Wrap ``array`` (no copy for contiguous numeric arrays)."""
        _check_device(device_type)
        if not isinstance(array, np.ndarray):
            raise RuntimeError(f"ortvalue_from_numpy needs a numpy array, not {type(array).__name__}")
        if array.dtype.kind in "US":
            array = array.astype(object)
        elif onnx_element_type(array.dtype) is None:
            raise RuntimeError(f"ortvalue_from_numpy: dtype {array.dtype} has no ONNX element type")
        return OrtValue(array)

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(array: np.ndarray, onnx_element_type: int) -> OrtValue:
        """Wrap ``array`` reinterpreted as ``onnx_element_type`` (same item size required)."""
        dtype = np_dtype(onnx_element_type)
        if dtype.itemsize != array.dtype.itemsize:
            raise RuntimeError(
                f"ortvalue_from_numpy_with_onnx_type: {array.dtype} items are {array.dtype.itemsize} bytes, "
                f"{element_name(onnx_element_type)} needs {dtype.itemsize}"
            )
        return OrtValue(np.ascontiguousarray(array).view(dtype))

    @staticmethod
    def ortvalue_from_shape_and_type(
        shape: Sequence[int],
        element_type: Any,
        device_type: str = "cpu",
        device_id: int = 0,
        vendor_id: int = -1,
        memory_info: Any = None,
    ) -> OrtValue:
        """A new zero-filled tensor; ``element_type`` is a numpy type or a TensorProto code."""
        _check_device(device_type)
        dtype = np_dtype(element_type) if isinstance(element_type, int) else np.dtype(element_type)
        return OrtValue(np.zeros(check_allocation(shape, dtype, "OrtValue"), dtype=dtype))

    @staticmethod
    def ort_value_from_sequence(values: Sequence[Any]) -> OrtValue:
        return OrtValue([v._value if isinstance(v, OrtValue) else v for v in values])

    # -- inspection --------------------------------------------------------------------------

    def _onnxplug_value(self) -> Any:
        return self._value

    def is_tensor(self) -> bool:
        return isinstance(self._value, np.ndarray)

    def is_tensor_sequence(self) -> bool:
        return isinstance(self._value, list)

    def is_sparse_tensor(self) -> bool:
        return False

    def has_value(self) -> bool:
        return self._value is not None

    def _tensor(self, what: str) -> np.ndarray:
        if not isinstance(self._value, np.ndarray):
            raise RuntimeError(f"{what}: only OrtValues that are Tensors are supported (this holds {self.data_type()})")
        return self._value

    def numpy(self) -> np.ndarray:
        """A copy of the tensor as a numpy array."""
        array = self._tensor("numpy()")
        return array.copy()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = self._tensor("__array__")
        return array.astype(dtype) if dtype is not None else array

    def shape(self) -> list[int]:
        return list(self._tensor("shape()").shape)

    def element_type(self) -> int:
        code = onnx_element_type(self._tensor("element_type()").dtype)
        return -1 if code is None else code

    def data_type(self) -> str:
        value = self._value
        if isinstance(value, np.ndarray):
            return f"tensor({element_name(self.element_type())})"
        if isinstance(value, list):
            inner = OrtValue(value[0]).data_type() if value else "tensor(float)"
            return f"seq({inner})"
        if isinstance(value, dict):
            return "map"
        return "optional"

    def device_name(self) -> str:
        return "cpu"

    def tensor_size_in_bytes(self) -> int:
        return int(self._tensor("tensor_size_in_bytes()").nbytes)

    def data_ptr(self) -> int:
        return int(self._tensor("data_ptr()").__array_interface__["data"][0])

    def update_inplace(self, value: Any) -> None:
        """Copy ``value`` (array or OrtValue) into this tensor; sizes must match."""
        target = self._tensor("update_inplace()")
        source = value._value if isinstance(value, OrtValue) else np.asarray(value)
        if source.size != target.size or source.dtype != target.dtype:
            raise RuntimeError(
                f"update_inplace: got {source.dtype}{list(source.shape)}, "
                f"the value holds {target.dtype}{list(target.shape)}"
            )
        if not target.flags.writeable:
            self._value = target = target.copy()
        np.copyto(target, source.reshape(target.shape))

    def __repr__(self) -> str:
        return f"<OrtValue {self.data_type()}>"
