"""Device memory: values that numpy refuses to touch until they are copied back."""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np

from onnxplug.api import DataTransfer

# DLPack's device type for devices outside its list (kDLExtDev): numpy refuses to import it.
DLPACK_EXT_DEV = 12


class CopyCounter:
    """Every copy between host and device memory, counted (the tests read these)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.to_device = 0
        self.to_host = 0
        self.synchronized = 0
        self.compiles = 0  # Provider.compile calls (a specialising compiler compiles per shape)

    @property
    def host_copies(self) -> int:
        return self.to_device + self.to_host


#: The counter all virtual-device memories share.
copies = CopyCounter()


class DeviceArray:
    """An array living in the virtual device's memory.

    It is deliberately not array-like: numpy functions and ufuncs given one raise, so a host
    kernel that receives a device value (a missing copy) fails instead of computing garbage.
    """

    __slots__ = ("_data",)
    __array_ufunc__ = None  # ufuncs refuse DeviceArray operands

    def __init__(self, data: np.ndarray) -> None:
        self._data = data

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError("a DeviceArray is in virtual-device memory: copy it to the host first")

    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    def __dlpack__(self, **kwargs: Any) -> Any:
        # The capsule shares the memory; __dlpack_device__ names a device numpy cannot import.
        return self._data.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DLPACK_EXT_DEV, 0)

    def __repr__(self) -> str:
        return f"DeviceArray({self._data.dtype}{list(self._data.shape)})"


def device_data(value: Any, what: str) -> np.ndarray:
    """The array inside a device value; anything else is a missing copy."""
    if not isinstance(value, DeviceArray):
        raise TypeError(
            f"{what}: expected a value in virtual-device memory, got {type(value).__name__} (a copy is missing)"
        )
    return value._data


class VirtualTransfer(DataTransfer):
    """Copies between host numpy arrays and DeviceArrays (always real copies, like a bus)."""

    device_name = "virtual"

    def to_device(self, value: Any) -> DeviceArray:
        if isinstance(value, DeviceArray):
            raise TypeError("to_device: the value is already in virtual-device memory")
        copies.to_device += 1
        return DeviceArray(np.array(value, copy=True))

    def to_host(self, value: Any) -> np.ndarray:
        data = device_data(value, "to_host")
        copies.to_host += 1
        return np.array(data, copy=True)

    def from_dlpack(self, value: Any) -> DeviceArray:
        if isinstance(value, DeviceArray):
            return value
        copies.to_device += 1  # another memory's value: it crosses the (simulated) bus
        return DeviceArray(np.array(np.from_dlpack(value), copy=True))

    def empty(self, shape: Any, dtype: Any) -> DeviceArray:
        return DeviceArray(np.empty(tuple(int(d) for d in shape), dtype=np.dtype(dtype)))

    def owns(self, value: Any) -> bool:
        return isinstance(value, DeviceArray)

    def data_ptr(self, value: Any) -> int:
        return int(device_data(value, "data_ptr").__array_interface__["data"][0])

    def to_dlpack(self, value: Any) -> DeviceArray:
        device_data(value, "to_dlpack")  # the device value is its own DLPack export
        return value

    def from_pointer(self, pointer: int, shape: Any, dtype: Any) -> DeviceArray:
        dtype = np.dtype(dtype)
        count = math.prod(int(d) for d in shape)
        buffer = (ctypes.c_byte * (count * dtype.itemsize)).from_address(int(pointer))
        return DeviceArray(np.frombuffer(buffer, dtype=dtype, count=count).reshape(tuple(shape)))

    def copy_into(self, target: Any, value: Any) -> None:
        np.copyto(device_data(target, "copy_into"), device_data(value, "copy_into").reshape(target.shape))

    def synchronize(self) -> None:
        copies.synchronized += 1
