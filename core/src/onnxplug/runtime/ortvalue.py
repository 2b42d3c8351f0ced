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
from ._device import OrtDevice
from .sparse import SparseTensor

__all__ = ["OrtValue", "OrtDevice", "OrtValueVector"]


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

    def is_tensor(self) -> bool:
        return isinstance(self._value, np.ndarray)

    def is_tensor_sequence(self) -> bool:
        return isinstance(self._value, list)

    def is_sparse_tensor(self) -> bool:
        return isinstance(self._value, SparseTensor)

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
        if isinstance(value, SparseTensor):
            return value.data_type()
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
        return self._values[index]._tensor("dlpack_at()").__dlpack__()

    def to_dlpacks(self, *_: Any) -> list[Any]:
        return [v._tensor("to_dlpacks()").__dlpack__() for v in self._values]

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, index: int) -> OrtValue:
        return self._values[index]

    def __iter__(self) -> Any:
        return iter(self._values)
