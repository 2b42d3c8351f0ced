"""OrtValue and OrtDevice: values held for the runtime, with onnxruntime's methods.

On the CPU an OrtValue made from a numpy array wraps it without a copy, as onnxruntime does.
Unlike onnxruntime, string arrays are accepted too (``run`` accepts them, so refusing them here
only forces users to special-case).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InvalidArgument
from ..graph import element_name, np_dtype, onnx_element_type
from ..kernels import check_allocation
from ._device import OrtDevice
from ._memories import owner_of
from .sparse import SparseTensor

__all__ = ["OrtValue", "OrtDevice", "OrtValueVector"]


def device_memory(device_type: str, device_id: int = 0, environment: Any = None) -> Any:
    """The DataTransfer of device ``device_type``/``device_id`` (``None`` for ``"cpu"``).

    :raises RuntimeError: no installed provider offers that memory (onnxruntime's class; the
        message names the memories available).
    :raises Exception: an unknown device name (onnxruntime raises a plain ``Exception``).
    """
    if str(device_type).lower() == "cpu":
        return None
    from .._plugins import default_environment

    try:
        return (environment or default_environment()).find_memory(device_type, device_id)
    except InvalidArgument as error:
        raise RuntimeError(error.message) from None


def _host_dlpack(value: Any) -> bool:
    device = getattr(value, "__dlpack_device__", None)
    # DLPack device types 1 (kDLCPU) and 3 (kDLCUDAHost, pinned host memory) are host memory.
    return device is None or int(device()[0]) in (1, 3)


class OrtValue:
    """A tensor, a sequence of tensors, a map or an empty optional, in host or device memory.

    A device tensor holds the device's own array type (a CuPy array, say) and the
    :class:`~onnxplug.api.DataTransfer` of its memory, which answers every question about it.
    """

    __slots__ = ("_value", "_memory")

    def __init__(self, value: Any, memory: Any = None) -> None:
        self._value = value
        self._memory = memory

    # -- construction ------------------------------------------------------------------------

    @staticmethod
    def ortvalue_from_numpy(
        array: np.ndarray, device_type: str = "cpu", device_id: int = 0, vendor_id: int = -1
    ) -> OrtValue:
        """Wrap ``array`` (no copy for contiguous numeric arrays), or copy it to a device
        (``"cuda"``, ``"virtual"``...) whose memory an installed provider offers."""
        memory = device_memory(device_type, device_id)
        if not isinstance(array, np.ndarray):
            raise RuntimeError(f"ortvalue_from_numpy needs a numpy array, not {type(array).__name__}")
        if array.dtype.kind in "US":
            if memory is not None:
                raise RuntimeError(f"ortvalue_from_numpy: string tensors cannot live on the device '{device_type}'")
            array = array.astype(object)
        elif onnx_element_type(array.dtype) is None:
            raise RuntimeError(f"ortvalue_from_numpy: dtype {array.dtype} has no ONNX element type")
        if memory is not None:
            return OrtValue(memory.to_device(np.ascontiguousarray(array)), memory)
        return OrtValue(array)

    @staticmethod
    def from_dlpack(data: Any, is_bool_tensor: bool = False) -> OrtValue:
        """A value sharing the memory of a DLPack tensor (CuPy, torch, array-api arrays...).

        A tensor that an installed device memory owns (or can import, ``accepts_dlpack``) stays
        on its device without a copy; a host tensor becomes a host value.
        """
        from .._plugins import default_environment

        memories = [m.transfer for m in default_environment().memories()]
        memory = owner_of(memories, data)
        if memory is not None:
            return OrtValue(data, memory)
        if not hasattr(data, "__dlpack__"):
            raise RuntimeError(f"from_dlpack needs an object implementing __dlpack__, not {type(data).__name__}")
        if _host_dlpack(data):
            array = np.from_dlpack(data)
            return OrtValue(array.astype(np.bool_) if is_bool_tensor and array.dtype == np.uint8 else array)
        for memory in memories:
            if memory.accepts_dlpack:
                try:
                    return OrtValue(memory.from_dlpack(data), memory)
                except Exception:  # noqa: BLE001 - this memory cannot import it; try the next
                    continue
        names = ", ".join(m.device_name for m in memories) or "none"
        raise RuntimeError(
            f"from_dlpack: no installed device memory owns or imports a tensor on DLPack device "
            f"{data.__dlpack_device__()} (device memories: {names})"
        )

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
        """A new tensor, zero-filled on the host and uninitialised on a device (as onnxruntime);
        ``element_type`` is a numpy type or a TensorProto code."""
        memory = device_memory(device_type, device_id)
        dtype = np_dtype(element_type) if isinstance(element_type, int) else np.dtype(element_type)
        shape = check_allocation(shape, dtype, "OrtValue")
        if memory is not None:
            return OrtValue(memory.empty(shape, dtype), memory)
        return OrtValue(np.zeros(shape, dtype=dtype))

    @staticmethod
    def ort_value_from_sequence(values: Sequence[Any]) -> OrtValue:
        return OrtValue([v._value if isinstance(v, OrtValue) else v for v in values])

    @staticmethod
    def ort_value_from_sparse_tensor(sparse_tensor: SparseTensor) -> OrtValue:
        """Wrap a :class:`~onnxplug.SparseTensor` (no copy)."""
        if not isinstance(sparse_tensor, SparseTensor):
            raise TypeError(f"ort_value_from_sparse_tensor needs a SparseTensor, not {type(sparse_tensor).__name__}")
        return OrtValue(sparse_tensor)

    def as_sparse_tensor(self) -> SparseTensor:
        """The SparseTensor this value holds.

        :raises RuntimeError: the value is not sparse (onnxruntime's message).
        """
        if not isinstance(self._value, SparseTensor):
            raise RuntimeError("This OrtValue does not contain SparseTensor. Check data_type() value.")
        return self._value

    # -- inspection --------------------------------------------------------------------------

    def _onnxplug_value(self) -> Any:
        return self._value

    def _onnxplug_memory(self) -> Any:
        """The DataTransfer of the memory holding the value (``None``: host memory)."""
        return self._memory

    def is_tensor(self) -> bool:
        return self._memory is not None or isinstance(self._value, np.ndarray)

    def is_tensor_sequence(self) -> bool:
        return isinstance(self._value, list)

    def is_sparse_tensor(self) -> bool:
        return isinstance(self._value, SparseTensor)

    def has_value(self) -> bool:
        return self._value is not None

    def _tensor(self, what: str) -> np.ndarray:
        if self._memory is not None:
            raise RuntimeError(f"{what}: the tensor is in '{self.device_name()}' memory; call numpy() to copy it")
        if not isinstance(self._value, np.ndarray):
            raise RuntimeError(f"{what}: only OrtValues that are Tensors are supported (this holds {self.data_type()})")
        return self._value

    def _shape_and_dtype(self, what: str) -> tuple[tuple[int, ...], np.dtype]:
        if self._memory is not None:
            return self._memory.shape_and_type(self._value)
        array = self._tensor(what)
        return array.shape, array.dtype

    def numpy(self) -> np.ndarray:
        """A copy of the tensor as a numpy array (from a device: waits for it, then copies)."""
        if self._memory is not None:
            self._memory.synchronize()
            return self._memory.to_host(self._value)
        array = self._tensor("numpy()")
        return array.copy()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = self.numpy() if self._memory is not None else self._tensor("__array__")
        return array.astype(dtype) if dtype is not None else array

    def shape(self) -> list[int]:
        return list(self._shape_and_dtype("shape()")[0])

    def element_type(self) -> int:
        code = onnx_element_type(self._shape_and_dtype("element_type()")[1])
        return -1 if code is None else code

    def data_type(self) -> str:
        value = self._value
        if self._memory is not None or isinstance(value, np.ndarray):
            return f"tensor({element_name(self.element_type())})"
        if isinstance(value, list):
            inner = OrtValue(value[0]).data_type() if value else "tensor(float)"
            return f"seq({inner})"
        if isinstance(value, SparseTensor):
            return value.data_type()
        if isinstance(value, dict):
            return "map"
        return "optional"

    def device_name(self) -> str:
        return "cpu" if self._memory is None else self._memory.device_name

    def tensor_size_in_bytes(self) -> int:
        shape, dtype = self._shape_and_dtype("tensor_size_in_bytes()")
        return int(math.prod(shape)) * dtype.itemsize

    def data_ptr(self) -> int:
        if self._memory is not None:
            return int(self._memory.data_ptr(self._value))
        return int(self._tensor("data_ptr()").__array_interface__["data"][0])

    def to_dlpack(self) -> Any:
        """An object implementing ``__dlpack__`` sharing the tensor's memory (no copy; a device
        tensor stays on its device)."""
        if self._memory is not None:
            return self._memory.to_dlpack(self._value)
        return self._tensor("to_dlpack()")

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.to_dlpack().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.to_dlpack().__dlpack_device__()

    def update_inplace(self, value: Any) -> None:
        """Copy ``value`` (array or OrtValue) into this tensor; sizes must match.  A device
        tensor is filled in place from a host array or from a value in its own memory."""
        if self._memory is not None:
            self._update_device(value)
            return
        target = self._tensor("update_inplace()")
        source = value.numpy() if isinstance(value, OrtValue) and value._memory is not None else value
        source = source._value if isinstance(source, OrtValue) else np.asarray(source)
        if source.size != target.size or source.dtype != target.dtype:
            raise RuntimeError(
                f"update_inplace: got {source.dtype}{list(source.shape)}, "
                f"the value holds {target.dtype}{list(target.shape)}"
            )
        if not target.flags.writeable:
            self._value = target = target.copy()
        np.copyto(target, source.reshape(target.shape))

    def _update_device(self, value: Any) -> None:
        memory = self._memory
        source = value._value if isinstance(value, OrtValue) else value
        if not memory.owns(source):
            source = memory.to_device(np.ascontiguousarray(np.asarray(source)))
        shape, dtype = memory.shape_and_type(source)
        target_shape, target_dtype = memory.shape_and_type(self._value)
        if math.prod(shape) != math.prod(target_shape) or dtype != target_dtype:
            raise RuntimeError(
                f"update_inplace: got {dtype}{list(shape)}, the value holds {target_dtype}{list(target_shape)}"
            )
        memory.copy_into(self._value, source)

    def __repr__(self) -> str:
        where = "" if self._memory is None else f" on {self.device_name()}"
        return f"<OrtValue {self.data_type()}{where}>"


class OrtValueVector:
    """A list of OrtValues, as onnxruntime's ``run_with_ortvaluevector`` and
    ``IOBinding.get_outputs_as_ortvaluevector`` use it."""

    def __init__(self, values: Sequence[OrtValue] = ()) -> None:
        self._values: list[OrtValue] = []
        for value in values:
            self.push_back(value)

    def push_back(self, value: OrtValue) -> None:
        if not isinstance(value, OrtValue):
            raise TypeError(f"OrtValueVector holds OrtValues, not {type(value).__name__}")
        self._values.append(value)

    def push_back_batch(self, values: Sequence[Any], *_: Any) -> None:
        """Append numpy arrays or OrtValues (the extra arguments onnxruntime takes, data
        pointers, shapes and types, describe the same arrays and are not needed)."""
        for value in values:
            self.push_back(value if isinstance(value, OrtValue) else OrtValue.ortvalue_from_numpy(np.asarray(value)))

    def reserve(self, size: int) -> None:
        """Accepted: a Python list grows as needed."""

    def shrink_to_fit(self) -> None:
        """Accepted: a Python list needs no shrinking."""

    def element_type_at(self, index: int) -> int:
        return self._values[index].element_type()

    def dlpack_at(self, index: int) -> Any:
        return self._values[index].to_dlpack().__dlpack__()

    def to_dlpacks(self, *_: Any) -> list[Any]:
        return [v.to_dlpack().__dlpack__() for v in self._values]

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, index: int) -> OrtValue:
        return self._values[index]

    def __iter__(self) -> Any:
        return iter(self._values)
