"""Device memory: values that numpy refuses to touch until they are copied back."""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxplug.api import DataTransfer


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

    def to_device(self, value: Any) -> DeviceArray:
        if isinstance(value, DeviceArray):
            raise TypeError("to_device: the value is already in virtual-device memory")
        return DeviceArray(np.array(value, copy=True))

    def to_host(self, value: Any) -> np.ndarray:
        return np.array(device_data(value, "to_host"), copy=True)
