"""The ONNX backend protocol, so ``onnx.backend.test.BackendTest(onnxplug.backend, __name__)`` works.

``prepare(model, device)`` returns a rep whose ``run(inputs)`` returns the outputs in graph order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from .runtime import InferenceSession, SessionOptions

__all__ = ["OnnxplugBackend", "OnnxplugRep", "prepare", "run", "run_model", "supports_device", "is_compatible"]


class OnnxplugRep(BackendRep):
    """A prepared model."""

    def __init__(self, session: InferenceSession) -> None:
        self._session = session

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        names = [i.name for i in self._session.get_inputs()]
        if isinstance(inputs, Mapping):
            feeds = dict(inputs)
        elif isinstance(inputs, np.ndarray):
            feeds = {names[0]: inputs}
        else:
            feeds = dict(zip(names, inputs))
        return tuple(self._session.run(None, feeds))


class OnnxplugBackend(Backend):
    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU

    @classmethod
    def prepare(cls, model: onnx.ModelProto | bytes | str, device: str = "CPU", **kwargs: Any) -> OnnxplugRep:
        if not cls.supports_device(device):
            raise RuntimeError(f"onnxplug.backend runs on CPU, not {device}")
        options = SessionOptions()
        for key, value in kwargs.items():
            if hasattr(options, key):
                setattr(options, key, value)
        source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
        return OnnxplugRep(InferenceSession(source, options, providers=["CPUExecutionProvider"]))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls, node: onnx.NodeProto, inputs: Sequence[Any], device: str = "CPU", outputs_info: Any = None, **kwargs: Any
    ) -> tuple[Any, ...]:
        raise NotImplementedError("onnxplug.backend runs whole models; use run_model")


prepare = OnnxplugBackend.prepare
run = OnnxplugBackend.run_model
run_model = OnnxplugBackend.run_model
supports_device = OnnxplugBackend.supports_device
is_compatible = OnnxplugBackend.is_compatible
