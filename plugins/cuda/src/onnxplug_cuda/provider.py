"""The CUDA provider and its factory: detection that never raises, onnxruntime's option names.

The factory computes with CuPy; tests build it with ``backend="array_api_strict"`` (the same
kernels and memory contract, arrays of the array API standard on the host) and register it
in-process, since CI has no GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from onnxplug.api import Device, KernelProvider, ProviderContext, ProviderFactory
from onnxplug.errors import InvalidArgument

from .memory import ArrayMemory, backend_named

__all__ = ["CUDAProvider", "CUDAProviderFactory"]

_INSTALL = "pip install onnxplug[cuda12] or onnxplug[cuda13], matching the driver's CUDA major version"
_STRATEGIES = ("kNextPowerOfTwo", "kSameAsRequested")


class CUDAProvider(KernelProvider):
    """Runs the nodes its array-API kernels claim on device arrays (CuPy's, or the test backend's)."""

    def __init__(self, factory: ProviderFactory, device: Device, memory: ArrayMemory, cuda_graph: bool = False) -> None:
        super().__init__(factory, device)
        self.memory = memory
        self.cuda_graph = cuda_graph

    def capability(self, graph, kernels):
        # Imported here: the kernels package registers every kernel (~15 ms), which discovery
        # (the factory's import) must not pay in a session that never asks this provider.
        from .kernels import decline_reason

        has_half = hasattr(self.memory.backend.namespace(), "float16")
        kept = []
        for claim in super().capability(graph, kernels):
            node = graph.node(claim.node)
            reason = decline_reason(node, has_half)
            if reason is None:
                kept.append(claim)
            else:
                graph.decline(node, reason)
        return kept

    def transfer(self) -> ArrayMemory | None:
        # The numpy test backend computes on host arrays: host memory, no copies.
        return None if self.memory.backend.name == "numpy" else self.memory

    def synchronize(self) -> None:
        self.memory.synchronize()

    def run_capture(self):
        """``enable_cuda_graph=1``: runs bound with IOBinding are recorded as CUDA graphs
        (:mod:`onnxplug.capture`).  Only CuPy records; the test backends have no streams."""
        if not self.cuda_graph:
            return None
        from .capture import CupyRunCapture

        return CupyRunCapture(self.device.id)


class CUDAProviderFactory(ProviderFactory):
    """``CUDAExecutionProvider``.

    :param backend: ``"cupy"`` (the installed plugin), or ``"array_api_strict"`` / ``"numpy"``
        (tests: the same kernels on arrays of the standard, or on host numpy arrays).
    """

    name = "cuda"
    ort_name = "CUDAExecutionProvider"
    priority = 100  # a GPU goes before OpenVINO and the CPU, as in onnxruntime
    option_names = frozenset(
        {"device_id", "gpu_mem_limit", "arena_extend_strategy", "do_copy_in_default_stream", "enable_cuda_graph"}
    )

    def __init__(self, backend: str = "cupy") -> None:
        self.backend = backend
        self._reason = ""
        self._memories: dict[int, ArrayMemory] = {}

    def _cupy_devices(self) -> list[Device]:
        try:
            import cupy
        except ImportError:
            self._reason = f"cupy is not installed ({_INSTALL})"
            return []
        except Exception as error:  # noqa: BLE001 - a broken CUDA install must not break discovery
            self._reason = f"cupy failed to import: {type(error).__name__}: {error}"
            return []
        try:
            if not cupy.cuda.is_available():
                self._reason = "no CUDA device (cupy.cuda.is_available() is False: no driver or no GPU)"
                return []
            count = cupy.cuda.runtime.getDeviceCount()
            names = []
            for index in range(count):
                properties = cupy.cuda.runtime.getDeviceProperties(index)
                name = properties.get("name", b"")
                names.append(name.decode() if isinstance(name, bytes) else str(name))
        except Exception as error:  # noqa: BLE001
            self._reason = f"CUDA query failed: {type(error).__name__}: {error}"
            return []
        return [Device("gpu", i, vendor="NVIDIA", name=n) for i, n in enumerate(names)]

    def devices(self) -> list[Device]:
        if self.backend == "cupy":
            return self._cupy_devices()
        return [Device("gpu", 0, vendor="simulated", name=f"{self.backend} arrays (no GPU)")]

    def unavailable_reason(self) -> str:
        if not self._reason:
            self.devices()
        return self._reason or "no device found"

    def memory(self, device: Device) -> ArrayMemory:
        found = self._memories.get(device.id)
        if found is None:
            found = self._memories[device.id] = ArrayMemory(backend_named(self.backend, device.id))
        return found

    def create(
        self, device: Device, options: Mapping[str, str], context: ProviderContext | None = None
    ) -> CUDAProvider:
        self.check_options(options)
        device_id = _int_option(options, "device_id", 0)
        devices = {d.id: d for d in self.devices()}
        if device_id not in devices:
            raise InvalidArgument(f"{self.ort_name}: device_id {device_id} does not exist (devices: {sorted(devices)})")
        limit = _int_option(options, "gpu_mem_limit", 0)
        strategy = options.get("arena_extend_strategy", _STRATEGIES[0])
        if strategy not in _STRATEGIES:
            raise InvalidArgument(
                f"{self.ort_name}: arena_extend_strategy must be one of {_STRATEGIES}, got {strategy!r}"
            )
        _flag(options, "do_copy_in_default_stream")  # every copy is on the default stream already
        cuda_graph = _flag(options, "enable_cuda_graph")
        if cuda_graph and self.backend != "cupy":
            raise InvalidArgument(
                f"{self.ort_name}: enable_cuda_graph needs CUDA streams; the {self.backend} test backend has none"
            )
        if self.backend == "cupy" and limit:
            import cupy

            with cupy.cuda.Device(device_id):
                cupy.get_default_memory_pool().set_limit(size=limit)
        return CUDAProvider(self, devices[device_id], self.memory(devices[device_id]), cuda_graph)


def _int_option(options: Mapping[str, str], key: str, default: int) -> int:
    text = options.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgument(f"CUDAExecutionProvider: {key} must be an integer, got {text!r}") from None
    if value < 0:
        raise InvalidArgument(f"CUDAExecutionProvider: {key} must be >= 0, got {value}")
    return value


def _flag(options: Mapping[str, Any], key: str) -> bool:
    text = str(options.get(key, "0"))
    if text not in ("0", "1"):
        raise InvalidArgument(f"CUDAExecutionProvider: {key} must be 0 or 1, got {text!r}")
    return text == "1"
