"""SparseTensor: onnxruntime's sparse values (COO and CSR), in host memory.

A SparseTensor holds its buffers as numpy arrays: the non-zero ``values`` and the indices of
its format.  It travels in an :class:`~onnxplug.OrtValue` (``OrtValue.ort_value_from_sparse_tensor``
and ``OrtValue.as_sparse_tensor``).  Unlike onnxruntime, indices are checked against the dense
shape when the tensor is built, so a bad index fails here rather than inside a kernel.
"""

from __future__ import annotations

import enum
import math
from typing import Any

import numpy as np

from ..graph import element_name, onnx_element_type
from ._device import OrtDevice

__all__ = ["OrtSparseFormat", "SparseTensor", "SparseCooView", "SparseCsrView"]


class OrtSparseFormat(enum.IntEnum):
    ORT_SPARSE_UNDEFINED = 0
    ORT_SPARSE_COO = 1
    ORT_SPARSE_CSRC = 2
    ORT_SPARSE_BLOCK_SPARSE = 4


class SparseCooView:
    """``as_coo_view()``: the COO indices (linear, or one ``(row, col)`` pair per value)."""

    def __init__(self, indices: np.ndarray) -> None:
        self._indices = indices

    def indices(self) -> np.ndarray:
        return self._indices


class SparseCsrView:
    """``as_csrc_view()``: CSR inner (column) and outer (row start) indices."""

    def __init__(self, inner: np.ndarray, outer: np.ndarray) -> None:
        self._inner, self._outer = inner, outer

    def inner(self) -> np.ndarray:
        return self._inner

    def outer(self) -> np.ndarray:
        return self._outer


def _int64_vector(value: Any, what: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "iu":
        raise RuntimeError(f"SparseTensor: {what} must be int64, got {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.int64)


def _values(values: Any) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise RuntimeError(f"SparseTensor: values must be a 1-D array, got shape {list(array.shape)}")
    if array.dtype.kind in "US":
        array = array.astype(object)
    elif onnx_element_type(array.dtype) is None:
        raise RuntimeError(f"SparseTensor: dtype {array.dtype} has no ONNX element type")
    return array


def _host_only(device: Any) -> None:
    if isinstance(device, OrtDevice) and device.device_type() != OrtDevice.cpu():
        raise RuntimeError(
            "Can't allocate memory on the device using this package: onnxplug's sparse tensors live in host memory"
        )


class SparseTensor:
    """Build with :meth:`sparse_coo_from_numpy` or :meth:`sparse_csr_from_numpy`."""

    def __init__(self, fmt: OrtSparseFormat, dense_shape: np.ndarray, values: np.ndarray, indices: tuple) -> None:
        self._format = fmt
        self._dense_shape = dense_shape
        self._values = values
        self._indices = indices

    @classmethod
    def sparse_coo_from_numpy(
        cls, dense_shape: Any, values: Any, coo_indices: Any, ort_device: OrtDevice | None = None
    ) -> SparseTensor:
        """COO: ``coo_indices`` holds one linear index per value, or a ``(row, col)`` pair per
        value (2-D tensors).

        :raises RuntimeError: indices of the wrong length or outside the dense shape.
        """
        _host_only(ort_device)
        shape = _int64_vector(dense_shape, "dense_shape")
        values = _values(values)
        indices = _int64_vector(coo_indices, "coo_indices")
        count = values.shape[0]
        if indices.size not in (count, 2 * count):
            raise RuntimeError(
                f"SparseTensor: {indices.size} COO indices for {count} values (expected {count} or {2 * count})"
            )
        if indices.size == count:
            bound = math.prod(int(d) for d in shape)
            if np.any((indices < 0) | (indices >= bound)):
                raise RuntimeError(f"SparseTensor: a linear COO index is outside the {bound} elements of {list(shape)}")
        else:
            if shape.size != 2:
                raise RuntimeError("SparseTensor: (row, col) COO indices need a 2-D dense shape")
            pairs = indices.reshape(count, 2)
            if np.any((pairs < 0) | (pairs >= shape)):
                raise RuntimeError(f"SparseTensor: a (row, col) COO index is outside the dense shape {list(shape)}")
        return cls(OrtSparseFormat.ORT_SPARSE_COO, shape, values, (indices,))

    @classmethod
    def sparse_csr_from_numpy(
        cls, dense_shape: Any, values: Any, inner_indices: Any, outer_indices: Any, ort_device: OrtDevice | None = None
    ) -> SparseTensor:
        """CSR of a 2-D tensor: ``inner_indices`` are the columns of the values, ``outer_indices``
        (rows + 1 entries) where each row starts.

        :raises RuntimeError: indices of the wrong length, or outside the dense shape.
        """
        _host_only(ort_device)
        shape = _int64_vector(dense_shape, "dense_shape")
        values = _values(values)
        inner = _int64_vector(inner_indices, "inner_indices")
        outer = _int64_vector(outer_indices, "outer_indices")
        if shape.size != 2:
            raise RuntimeError(f"SparseTensor: CSR needs a 2-D dense shape, got {list(shape)}")
        if inner.size != values.size or outer.size != shape[0] + 1:
            raise RuntimeError(
                f"SparseTensor: CSR needs {values.size} inner and {shape[0] + 1} outer indices, "
                f"got {inner.size} and {outer.size}"
            )
        if (
            np.any((inner < 0) | (inner >= shape[1]))
            or outer[0] != 0
            or outer[-1] != values.size
            or np.any(np.diff(outer) < 0)
        ):
            raise RuntimeError(f"SparseTensor: CSR indices do not describe a {list(shape)} tensor")
        return cls(OrtSparseFormat.ORT_SPARSE_CSRC, shape, values, (inner, outer))

    def values(self) -> np.ndarray:
        return self._values

    def as_coo_view(self) -> SparseCooView:
        if self._format != OrtSparseFormat.ORT_SPARSE_COO:
            raise RuntimeError("This sparse tensor does not contain COO format")
        return SparseCooView(self._indices[0])

    def as_csrc_view(self) -> SparseCsrView:
        if self._format != OrtSparseFormat.ORT_SPARSE_CSRC:
            raise RuntimeError("This sparse tensor does not contain CSR(C) format")
        return SparseCsrView(*self._indices)

    def as_blocksparse_view(self) -> Any:
        raise RuntimeError("This sparse tensor does not contain BlockSparse format")

    def to_cuda(self, ort_device: OrtDevice) -> SparseTensor:
        raise RuntimeError("to_cuda: no CUDA provider holds values for onnxplug (values live in host memory)")

    def format(self) -> OrtSparseFormat:
        return self._format

    def dense_shape(self) -> list[int]:
        """The dense shape (a list, as onnxruntime returns it)."""
        return [int(d) for d in self._dense_shape]

    def data_type(self) -> str:
        code = onnx_element_type(self._values.dtype)
        return f"sparse_tensor({element_name(code)})"

    def device_name(self) -> str:
        return "cpu"

    def to_dense(self) -> np.ndarray:
        """The dense array (onnxplug only; onnxruntime has no such method)."""
        shape = tuple(int(d) for d in self._dense_shape)
        dense = np.zeros(shape, dtype=self._values.dtype)
        if self._format == OrtSparseFormat.ORT_SPARSE_COO:
            indices = self._indices[0]
            if indices.size == self._values.size:
                dense.reshape(-1)[indices] = self._values
            else:
                pairs = indices.reshape(-1, 2)
                dense[pairs[:, 0], pairs[:, 1]] = self._values
        else:
            inner, outer = self._indices
            rows = np.repeat(np.arange(shape[0]), np.diff(outer))
            dense[rows, inner] = self._values
        return dense

    def __repr__(self) -> str:
        return f"<SparseTensor {self._format.name} {self.data_type()} {list(self._dense_shape)}>"
