"""``TensorrtExecutionProvider``: detection that never crashes, the table, and the provider.

Detection checks CUDA *before* touching TensorRT: a ``tensorrt.Runtime`` created without a usable
GPU logs a CUDA initialization error, returns an object anyway, and using that object kills the
process.  So ``devices()`` asks CuPy first (``cupy.cuda.is_available()``), then imports
``tensorrt`` and checks that it is the full SDK (the lean and dispatch runtimes on PyPI have no
``Builder`` or ``OnnxParser``); it creates no TensorRT object.  Device memory is the CUDA
provider's (``onnxplug-cuda``): TensorRT engines read and write its CuPy arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from onnxplug import CompileCache, default_compile_cache, default_environment
from onnxplug.api import CompiledPartition, Device, FuseClaim, Provider, ProviderContext, ProviderFactory
from onnxplug.errors import InvalidArgument

# The planning tables are imported where used: discovery imports this module in every session.
if TYPE_CHECKING:
    from onnxplug.partition.targets import CapabilityTable

__all__ = ["TensorrtProvider", "TensorrtProviderFactory", "detect"]

_INSTALL = (
    "the TensorRT SDK with its ONNX parser (pip install tensorrt from NVIDIA's index) and onnxplug[cuda12|cuda13]"
)


def detect() -> tuple[list[Device], str]:
    """``(devices, reason)``: the CUDA devices TensorRT could build for, or why there are none."""
    try:
        import cupy
    except ImportError:
        return [], f"cupy is not installed, so there is no CUDA device memory for TensorRT ({_INSTALL})"
    except Exception as error:  # noqa: BLE001 - a broken CUDA install must not break discovery
        return [], f"cupy failed to import: {type(error).__name__}: {error}"
    try:
        if not cupy.cuda.is_available():
            return [], "no CUDA device (cupy.cuda.is_available() is False: no driver or no GPU)"
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # noqa: BLE001
        return [], f"CUDA query failed: {type(error).__name__}: {error}"
    # Only now, with a working CUDA, is importing TensorRT safe to follow with object creation.
    try:
        import tensorrt
    except ImportError as error:
        return [], f"tensorrt is not installed ({error}); {_INSTALL}"
    except Exception as error:  # noqa: BLE001
        return [], f"tensorrt failed to import: {type(error).__name__}: {error}"
    missing = [name for name in ("Builder", "OnnxParser") if not hasattr(tensorrt, name)]
    if missing:
        return [], (
            f"the installed tensorrt {getattr(tensorrt, '__version__', '?')} has no {' or '.join(missing)} "
            f"(a lean/dispatch runtime runs prebuilt engines only); {_INSTALL}"
        )
    devices = []
    for index in range(count):
        name = cupy.cuda.runtime.getDeviceProperties(index).get("name", b"")
        name = name.decode() if isinstance(name, bytes) else str(name)
        devices.append(Device("gpu", index, vendor="NVIDIA", name=f"{name} (TensorRT {tensorrt.__version__})"))
    return devices, ""


class TensorrtProvider(Provider):
    """Claims what the table (refined by TensorRT's parser) accepts; builds one engine per partition."""

    def __init__(self, factory: ProviderFactory, device: Device, settings: Any, cache: CompileCache, memory: Any):
        super().__init__(factory, device)
        self.settings = settings
        self.cache = cache
        self.memory = memory

    def capability(self, graph, kernels):
        from onnxplug.partition.targets import table_claims

        from ._engine import parser_declines
        from .table import TABLE

        refused = parser_declines(graph.model_bytes())
        for name, reason in refused.items():
            if name in graph:
                graph.decline(name, reason)
        claims = table_claims(TABLE, graph)
        if not refused:
            return claims
        kept = [name for claim in claims for name in claim.nodes if name not in refused]
        return [FuseClaim(group) for group in graph.fusion_groups(kept)]

    def compile(self, partition) -> CompiledPartition:
        from ._engine import compile_partition

        return compile_partition(partition, self.settings, self.cache, self.memory, self.device.id)

    def transfer(self):
        return self.memory

    def synchronize(self) -> None:
        self.memory.synchronize()


class TensorrtProviderFactory(ProviderFactory):
    name = "tensorrt"
    ort_name = "TensorrtExecutionProvider"
    priority = 110  # asked before the CUDA provider, as onnxruntime orders TensorRT before CUDA
    # onnxruntime's TensorRT option names that this provider reads.
    option_names = frozenset(
        {
            "device_id",
            "trt_fp16_enable",
            "trt_int8_enable",
            "trt_max_workspace_size",
            "trt_timing_cache_enable",
            "trt_engine_cache_enable",
            "trt_profile_min_shapes",
            "trt_profile_opt_shapes",
            "trt_profile_max_shapes",
        }
    )

    def __init__(self) -> None:
        self._reason = ""

    def capability_table(self) -> CapabilityTable:
        from .table import TABLE

        return TABLE

    def devices(self) -> list[Device]:
        try:
            devices, self._reason = detect()
        except Exception as error:  # noqa: BLE001 - devices() must never raise
            devices, self._reason = [], f"TensorRT detection failed: {type(error).__name__}: {error}"
        return devices

    def unavailable_reason(self) -> str:
        if not self._reason:
            self.devices()
        return self._reason or "no device found"

    def create(
        self, device: Device, options: Mapping[str, str], context: ProviderContext | None = None
    ) -> TensorrtProvider:
        from ._engine import parse_settings

        self.check_options(options)
        devices = {d.id: d for d in self.devices()}
        settings = parse_settings(options, self.ort_name)
        if settings.device_id not in devices:
            raise InvalidArgument(
                f"{self.ort_name}: {self.unavailable_reason() or 'no device ' + str(settings.device_id)}"
            )
        memory = default_environment().find_memory("cuda", settings.device_id)
        cache = context.cache if context is not None and context.cache is not None else default_compile_cache()
        return TensorrtProvider(self, devices[settings.device_id], settings, cache, memory)
