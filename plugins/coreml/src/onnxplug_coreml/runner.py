"""The platform layer: a saved ``.mlpackage`` loaded and run through coremltools (macOS only).

Kept small: everything it needs to know (the ONNX names, element types and shapes of the
inputs and outputs, and the MIL names they have in the package) is in the package's metadata,
written by :mod:`onnxplug_coreml.package`.  Arrays cross the border in the dtypes an ML Program's
multi-arrays hold (fp32, fp16, int32) and come back in the ONNX types (int64, bool restored).
Not exercised in CI: ``MLModel.predict`` raises off macOS.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from onnxplug.errors import EPFail, InvalidArgument

from .package import io_specs


class Runner:
    """One loaded (compiled) ML Program; :meth:`run` maps ONNX arrays to a prediction and back."""

    def __init__(self, path: str, compute_units: str) -> None:
        import coremltools as ct

        self.model = ct.models.MLModel(path, compute_units=getattr(ct.ComputeUnit, compute_units))
        self.inputs, self.outputs = io_specs(self.model)
        self._lock = threading.Lock()  # one prediction at a time per model, as coremltools documents

    def run(self, *values: Any) -> list[np.ndarray]:
        feeds = {}
        for spec, value in zip(self.inputs, values):
            array = np.asarray(value)
            if tuple(array.shape) != spec.shape:
                raise InvalidArgument(
                    f"CoreML input '{spec.onnx_name}': the package was built for shape {list(spec.shape)}, "
                    f"got {list(array.shape)}"
                )
            feeds[spec.mil_name] = np.ascontiguousarray(array.astype(spec.io_numpy_dtype, copy=False))
        with self._lock:
            try:
                found = self.model.predict(feeds)
            except Exception as error:
                raise EPFail(f"CoreML prediction failed: {type(error).__name__}: {error}") from error
        return [np.asarray(found[spec.mil_name]).reshape(spec.shape).astype(spec.numpy_dtype) for spec in self.outputs]
