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
from .ortvalue import OrtValue, OrtValueVector, _check_device

if TYPE_CHECKING:
    from .session import InferenceSession

__all__ = ["IOBinding", "SessionIOBinding"]


def _array_at(buffer_ptr: int, element_type: Any, shape: Sequence[int]) -> np.ndarray:
    """A numpy view of host memory at a raw address (the caller keeps the memory alive)."""
    dtype = np_dtype(element_type) if isinstance(element_type, int) else np.dtype(element_type)
    count = math.prod(shape)
    buffer = (ctypes.c_byte * (count * dtype.itemsize)).from_address(int(buffer_ptr))
    return np.frombuffer(buffer, dtype=dtype, count=count).reshape(tuple(shape))


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
        """Bind host memory at ``buffer_ptr`` (optimum's pattern with torch tensors)."""
        self._check_input(name)
        _check_device(device_type)
        self._inputs[name] = _array_at(buffer_ptr, element_type, shape)

    def bind_ortvalue_input(self, name: str, value: OrtValue) -> None:
        self._check_input(name)
        self._inputs[name] = value._onnxplug_value()

    def bind_output(
        self,
        name: str,
        device_type: str = "cpu",
        device_id: int = 0,
        element_type: Any = None,
        shape: Sequence[int] | None = None,
        buffer_ptr: int | None = None,
    ) -> None:
        """Bind an output by name (allocated per run) or to host memory at ``buffer_ptr``."""
        self._check_output(name)
        _check_device(device_type)
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
        """Host memory needs no synchronisation."""

    def synchronize_outputs(self) -> None:
        """Host memory needs no synchronisation."""

    def get_outputs(self) -> list[OrtValue]:
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[Any]:
        return [v.numpy() if v.is_tensor() else v._onnxplug_value() for v in self._results]

    def _run(self, run_options: Any) -> None:
        if not self._outputs:
            raise RuntimeError("Error in execution: At least one output should be requested.")
        names = list(self._outputs)
        try:
            values = self._session.run(names, dict(self._inputs), run_options)
        except Exception as error:
            raise RuntimeError(f"Error in execution: {error}") from error
        results = []
        for name, value in zip(names, values):
            bound = self._outputs[name]
            if bound is None:
                results.append(OrtValue(value))
                continue
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
