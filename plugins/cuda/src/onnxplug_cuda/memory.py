"""Device memory for an array namespace: CuPy on a GPU, array-api-strict in tests.

The core never looks inside a device value; it asks this object (onnxplug's ``DataTransfer``
contract) to copy, allocate, describe and export one.  Everything CuPy-specific is the
``CupyBackend`` below: kept thin, and not exercised in CI (no GPU there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxplug.api import DataTransfer

__all__ = ["ArrayMemory", "Backend", "CupyBackend", "NumpyBackend", "StrictBackend", "backend_named"]


class Backend:
    """An array library the provider computes with: its namespace and its device array type."""

    name = ""
    #: What ``OrtValue.device_name()`` reports for values in this memory.
    device_name = "cuda"

    def namespace(self) -> Any:
        raise NotImplementedError

    def array_type(self) -> type:
        raise NotImplementedError

    def to_device(self, value: np.ndarray) -> Any:
        return self.namespace().asarray(np.asarray(value, order="C"))  # (ascontiguousarray makes 0-d 1-d)

    def to_host(self, value: Any) -> np.ndarray:
        return np.array(np.from_dlpack(value), copy=True)

    def data_ptr(self, value: Any) -> int:
        raise NotImplementedError(f"{self.name} arrays have no device address")

    def from_pointer(self, pointer: int, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        raise NotImplementedError(f"{self.name} arrays cannot wrap a raw device address")

    def synchronize(self) -> None:
        """Wait for queued work (nothing is asynchronous off a GPU)."""


class StrictBackend(Backend):
    """array-api-strict: the array API standard and nothing more, on host memory.  Its arrays
    stand in for device arrays in tests, so kernels can only use what every array library has."""

    name = "array_api_strict"

    def namespace(self) -> Any:
        import array_api_strict

        return array_api_strict

    def array_type(self) -> type:
        return type(self.namespace().asarray(0))


class CupyBackend(Backend):
    """CuPy on one CUDA device (not exercised in CI: no GPU there)."""

    name = "cupy"

    def __init__(self, device_id: int = 0, stream: Any = None) -> None:
        self.device_id = device_id
        self.stream = stream

    def namespace(self) -> Any:
        import cupy

        return cupy

    def array_type(self) -> type:
        import cupy

        return cupy.ndarray

    def to_device(self, value: np.ndarray) -> Any:
        import cupy

        with cupy.cuda.Device(self.device_id):
            return cupy.asarray(value)

    def to_host(self, value: Any) -> np.ndarray:
        import cupy

        return cupy.asnumpy(value, stream=self.stream)

    def data_ptr(self, value: Any) -> int:
        return int(value.data.ptr)

    def from_pointer(self, pointer: int, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        import cupy

        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        memory = cupy.cuda.UnownedMemory(int(pointer), size, owner=None, device_id=self.device_id)
        return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0))

    def synchronize(self) -> None:
        import cupy

        with cupy.cuda.Device(self.device_id):
            (self.stream or cupy.cuda.get_current_stream()).synchronize()


class NumpyBackend(Backend):
    """numpy through array-api-compat: the kernels on host memory (no copies at all), for tests."""

    name = "numpy"
    device_name = "cpu"

    def namespace(self) -> Any:
        import array_api_compat.numpy

        return array_api_compat.numpy

    def array_type(self) -> type:
        return np.ndarray


def backend_named(name: str, device_id: int = 0) -> Backend:
    if name == "cupy":
        return CupyBackend(device_id)
    if name == "array_api_strict":
        return StrictBackend()
    if name == "numpy":
        return NumpyBackend()
    raise ValueError(f"unknown array backend {name!r} (cupy, array_api_strict, numpy)")


class ArrayMemory(DataTransfer):
    """onnxplug's DataTransfer over a :class:`Backend`: the device memory of a CUDA provider."""

    accepts_dlpack = True

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.device_name = backend.device_name

    def owns(self, value: Any) -> bool:
        return isinstance(value, self.backend.array_type())

    def to_device(self, value: Any) -> Any:
        return self.backend.to_device(np.asarray(value))

    def to_host(self, value: Any) -> np.ndarray:
        return self.backend.to_host(value)

    def from_dlpack(self, value: Any) -> Any:
        return self.backend.namespace().from_dlpack(value)

    def empty(self, shape: Sequence[int], dtype: Any) -> Any:
        xp = self.backend.namespace()
        return xp.empty(tuple(int(d) for d in shape), dtype=getattr(xp, np.dtype(dtype).name))

    def shape_and_type(self, value: Any) -> tuple[tuple[int, ...], np.dtype]:
        return tuple(int(d) for d in value.shape), np.dtype(str(value.dtype).rsplit(".", 1)[-1])

    def data_ptr(self, value: Any) -> int:
        return self.backend.data_ptr(value)

    def to_dlpack(self, value: Any) -> Any:
        return value  # CuPy and array-api-strict arrays implement __dlpack__ themselves

    def copy_into(self, target: Any, value: Any) -> None:
        # a device-side copy on the current stream (recordable into a CUDA graph)
        target[...] = self.backend.namespace().reshape(value, tuple(target.shape))

    def from_pointer(self, pointer: int, shape: Sequence[int], dtype: Any) -> Any:
        return self.backend.from_pointer(pointer, tuple(int(d) for d in shape), np.dtype(dtype))

    def synchronize(self) -> None:
        self.backend.synchronize()
