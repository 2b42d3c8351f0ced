"""IOBinding: inputs and outputs bound ahead of ``run_with_iobinding``.

Differences from onnxruntime, on purpose: an output bound by name only is allocated afresh on
every run, so a binding is reusable across input shapes without ``clear_binding_outputs()``;
an unknown output name fails when it is bound, not later.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..graph import np_dtype
from .ortvalue import OrtValue, OrtValueVector, device_memory

if TYPE_CHECKING:
    from .session import InferenceSession

__all__ = ["IOBinding", "SessionIOBinding"]


def _array_at(buffer_ptr: int, element_type: Any, shape: Sequence[int]) -> np.ndarray:
    """A numpy view of host memory at a raw address (the caller keeps the memory alive)."""
    dtype = np_dtype(element_type) if isinstance(element_type, int) else np.dtype(element_type)
    count = math.prod(shape)
    buffer = (ctypes.c_byte * (count * dtype.itemsize)).from_address(int(buffer_ptr))
    return np.frombuffer(buffer, dtype=dtype, count=count).reshape(tuple(shape))


def _on_device(bound: Any) -> bool:
    """Whether an output binding asks for the value to stay in device memory: bound by name to a
    device (a DataTransfer is stored) or to a device OrtValue."""
    if isinstance(bound, OrtValue):
        return bound._onnxplug_memory() is not None
    return bound is not None


class IOBinding:
    """Created by :meth:`InferenceSession.io_binding`."""

    def __init__(self, session: InferenceSession) -> None:
        self._session = session
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, OrtValue | None] = {}
        self._results: list[OrtValue] = []

    def _check_input(self, name: str) -> None:
        if name not in self._session._input_names():
            raise RuntimeError(f"Failed to find NodeArg with name: {name} in the def list")

    def _check_output(self, name: str) -> None:
        if name not in self._session._output_index:
            raise RuntimeError(f"Failed to find NodeArg with name: {name} in the def list of outputs")

    def bind_cpu_input(self, name: str, array: np.ndarray) -> None:
        self._check_input(name)
        self._inputs[name] = array

    def bind_input(
        self, name: str, device_type: str, device_id: int, element_type: Any, shape: Sequence[int], buffer_ptr: int
    ) -> None:
        """Bind memory at ``buffer_ptr``: host memory (optimum's pattern with torch tensors) or a
        device's, wrapped without a copy by that device's memory (``DataTransfer.from_pointer``)."""
        self._check_input(name)
        memory = device_memory(device_type, device_id, self._session._environment)
        if memory is None:
            self._inputs[name] = _array_at(buffer_ptr, element_type, shape)
            return
        dtype = np_dtype(element_type) if isinstance(element_type, int) else np.dtype(element_type)
        self._inputs[name] = OrtValue(memory.from_pointer(int(buffer_ptr), tuple(shape), dtype), memory)

    def bind_ortvalue_input(self, name: str, value: OrtValue) -> None:
        """Bind a value; a device OrtValue stays in its memory (no copy when its readers are there)."""
        self._check_input(name)
        self._inputs[name] = value if value._onnxplug_memory() is not None else value._onnxplug_value()

    def bind_output(
        self,
        name: str,
        device_type: str = "cpu",
        device_id: int = 0,
        element_type: Any = None,
        shape: Sequence[int] | None = None,
        buffer_ptr: int | None = None,
    ) -> None:
        """Bind an output by name (allocated per run: on the host, or left in device memory for
        ``device_type`` ``"cuda"``, ``"virtual"``...) or to host memory at ``buffer_ptr``."""
        self._check_output(name)
        memory = device_memory(device_type, device_id, self._session._environment)
        if memory is not None:
            if buffer_ptr is not None:
                if element_type is None or shape is None:
                    raise RuntimeError(f"bind_output '{name}': a buffer_ptr needs element_type and shape")
                dtype = np_dtype(element_type) if isinstance(element_type, int) else np.dtype(element_type)
                self._outputs[name] = OrtValue(memory.from_pointer(int(buffer_ptr), tuple(shape), dtype), memory)
            else:
                self._outputs[name] = memory
            return
        if buffer_ptr is not None:
            if element_type is None or shape is None:
                raise RuntimeError(f"bind_output '{name}': a buffer_ptr needs element_type and shape")
            self._outputs[name] = OrtValue(_array_at(buffer_ptr, element_type, shape))
        else:
            self._outputs[name] = None

    def bind_ortvalue_output(self, name: str, value: OrtValue) -> None:
        """Bind an output to a pre-allocated value; the result is written into it."""
        self._check_output(name)
        self._outputs[name] = value

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results = []

    def synchronize_inputs(self) -> None:
        """Wait until the device memories of bound inputs have finished pending work."""
        for value in self._inputs.values():
            if isinstance(value, OrtValue) and value._onnxplug_memory() is not None:
                value._onnxplug_memory().synchronize()

    def synchronize_outputs(self) -> None:
        """Wait until the device memories holding the last run's outputs have finished."""
        for value in self._results:
            if value._onnxplug_memory() is not None:
                value._onnxplug_memory().synchronize()

    def get_outputs(self) -> list[OrtValue]:
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[Any]:
        return [v.numpy() if v.is_tensor() else v._onnxplug_value() for v in self._results]

    def _run(self, run_options: Any) -> None:
        if not self._outputs:
            raise RuntimeError("Error in execution: At least one output should be requested.")
        names = list(self._outputs)
        keep = [_on_device(self._outputs[n]) for n in names]
        try:
            values = self._session._run_on_devices(names, dict(self._inputs), keep, run_options)
        except Exception as error:
            raise RuntimeError(f"Error in execution: {error}") from error
        results = []
        for name, (value, memory) in zip(names, values):
            bound = self._outputs[name]
            if not isinstance(bound, OrtValue):
                # per-run allocation: on the host, or in the memory the output was computed in
                results.append(OrtValue(value, memory) if memory is not None else OrtValue(value))
                continue
            bound_memory = bound._onnxplug_memory()
            if bound_memory is not None:
                if memory is not bound_memory:
                    value = bound_memory.to_device(np.asarray(value if memory is None else memory.to_host(value)))
                got_shape, got_dtype = bound_memory.shape_and_type(value)
                want_shape, want_dtype = bound_memory.shape_and_type(bound._onnxplug_value())
                if got_shape != want_shape or got_dtype != want_dtype:
                    raise RuntimeError(
                        f"Error in execution: the OrtValue bound for output '{name}' holds "
                        f"{want_dtype}{list(want_shape)} but the run computed {got_dtype}{list(got_shape)}"
                    )
                bound_memory.copy_into(bound._onnxplug_value(), value)
                results.append(bound)
                continue
            if memory is not None:
                value = memory.to_host(value)
            target = bound._onnxplug_value()
            if not isinstance(value, np.ndarray) or value.shape != target.shape or value.dtype != target.dtype:
                got = f"{getattr(value, 'dtype', type(value).__name__)}{list(getattr(value, 'shape', []))}"
                raise RuntimeError(
                    f"Error in execution: the OrtValue bound for output '{name}' holds "
                    f"{target.dtype}{list(target.shape)} but the run computed {got}"
                )
            np.copyto(target, value)
            results.append(bound)
        self._results = results

    def get_outputs_as_ortvaluevector(self) -> OrtValueVector:
        """The outputs of the last run as an :class:`OrtValueVector`."""
        return OrtValueVector(self._results)


class SessionIOBinding(IOBinding):
    """onnxruntime's name for the binding object under ``IOBinding``: ``SessionIOBinding(session)``
    is an IOBinding of ``session``, usable with its ``run_with_iobinding``."""
