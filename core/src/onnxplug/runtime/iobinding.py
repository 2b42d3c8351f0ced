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
from ._memories import move
from .ortvalue import OrtValue, OrtValueVector, device_memory

if TYPE_CHECKING:
    from .session import InferenceSession

__all__ = ["IOBinding", "SessionIOBinding"]


def _dtype_of(element_type: Any) -> np.dtype:
    """A numpy dtype from a TensorProto code or anything numpy reads as a dtype."""
    return np_dtype(element_type) if isinstance(element_type, int) else np.dtype(element_type)


def _at_pointer(memory: Any, buffer_ptr: int, element_type: Any, shape: Sequence[int]) -> Any:
    """The value at a raw address: a host array view, or the device memory's wrapper of it."""
    if memory is None:
        return _array_at(buffer_ptr, element_type, shape)
    return OrtValue(memory.from_pointer(int(buffer_ptr), tuple(shape), _dtype_of(element_type)), memory)


def _mismatch(name: str, want: Any, got: Any) -> RuntimeError:
    return RuntimeError(
        f"Error in execution: the OrtValue bound for output '{name}' holds {want} but the run computed {got}"
    )


def _array_at(buffer_ptr: int, element_type: Any, shape: Sequence[int]) -> np.ndarray:
    """A numpy view of host memory at a raw address (the caller keeps the memory alive)."""
    dtype = _dtype_of(element_type)
    count = math.prod(shape)
    buffer = (ctypes.c_byte * (count * dtype.itemsize)).from_address(int(buffer_ptr))
    return np.frombuffer(buffer, dtype=dtype, count=count).reshape(tuple(shape))


def _contiguous(value: Any, memory: Any) -> Any:
    """A host value as ``to_device`` takes it (device values are the memory's business)."""
    return np.ascontiguousarray(value) if memory is None else value


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
        self._inputs[name] = _at_pointer(memory, buffer_ptr, element_type, shape)

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
        if buffer_ptr is None:
            self._outputs[name] = memory  # None: host memory, allocated per run
            return
        if element_type is None or shape is None:
            raise RuntimeError(f"bind_output '{name}': a buffer_ptr needs element_type and shape")
        value = _at_pointer(memory, buffer_ptr, element_type, shape)
        self._outputs[name] = value if isinstance(value, OrtValue) else OrtValue(value)

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

        def once(recording: bool) -> list[OrtValue]:
            try:
                values = self._session._run_on_devices(
                    names, dict(self._inputs), keep, run_options, synchronize=not recording
                )
            except Exception as error:
                raise RuntimeError(f"Error in execution: {error}") from error
            return [self._fill(name, value, memory) for name, (value, memory) in zip(names, values)]

        capture = self._session._run_capture
        key = None if capture is None else capture.binding_key(self._inputs, self._outputs, run_options)
        if key is None:
            self._results = once(False)
        else:  # enable_cuda_graph: warm up, record, then replay this binding (onnxplug.capture)
            self._results = capture.run(key, once, [self._outputs[n] for n in names])

    def _fill(self, name: str, value: Any, memory: Any) -> OrtValue:
        """The OrtValue for one output: a new one (host, or the memory it was computed in), or the
        bound one filled in place."""
        bound = self._outputs[name]
        if not isinstance(bound, OrtValue):
            if bound is not None and memory is not bound:  # bound to a device, computed elsewhere
                value, memory = move(_contiguous(value, memory), memory, bound), bound
            return OrtValue(value, memory) if memory is not None else OrtValue(value)
        target, target_memory = bound._onnxplug_value(), bound._onnxplug_memory()
        if target_memory is not None:
            if memory is not target_memory:
                value = move(_contiguous(value, memory), memory, target_memory)
            got, want = target_memory.shape_and_type(value), target_memory.shape_and_type(target)
            if got != want:
                raise _mismatch(name, f"{want[1]}{list(want[0])}", f"{got[1]}{list(got[0])}")
            target_memory.copy_into(target, value)
            return bound
        if memory is not None:
            value = memory.to_host(value)
        if not isinstance(value, np.ndarray) or value.shape != target.shape or value.dtype != target.dtype:
            got = f"{getattr(value, 'dtype', type(value).__name__)}{list(getattr(value, 'shape', []))}"
            raise _mismatch(name, f"{target.dtype}{list(target.shape)}", got)
        np.copyto(target, value)
        return bound

    def get_outputs_as_ortvaluevector(self) -> OrtValueVector:
        """The outputs of the last run as an :class:`OrtValueVector`."""
        return OrtValueVector(self._results)


class SessionIOBinding(IOBinding):
    """onnxruntime's name for the binding object under ``IOBinding``: ``SessionIOBinding(session)``
    is an IOBinding of ``session``, usable with its ``run_with_iobinding``."""
