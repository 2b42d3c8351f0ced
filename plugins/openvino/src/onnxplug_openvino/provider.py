"""The OpenVINO provider and its factory: claims what OpenVINO converts, compiles it, runs it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from onnxplug import CompileCache, default_compile_cache
from onnxplug.api import CompiledPartition, Device, FuseClaim, Provider, ProviderContext, ProviderFactory
from onnxplug.errors import InvalidArgument

from ._options import OPTION_NAMES, Settings, parse_options

INSTALL_HINT = "pip install onnxplug[openvino]"

#: Progress of the slow steps of session creation (OpenVINO's conversion and compilation).  A
#: step that took :data:`SLOW_S` or longer is logged at INFO, others at DEBUG; compiling a
#: partition of :data:`LARGE_PARTITION` nodes or more is announced at INFO before it starts.
logger = logging.getLogger("onnxplug.openvino")
SLOW_S = 0.5
LARGE_PARTITION = 100

_core_lock = threading.Lock()
_core: Any = None


def shared_core() -> Any:
    """One ``openvino.Core`` per process (it loads the device plugins once)."""
    global _core
    with _core_lock:
        if _core is None:
            import openvino

            _core = openvino.Core()
        return _core


def _device_kind(name: str) -> tuple[str, int]:
    """``"GPU.1"`` → ``("gpu", 1)``; ``"CPU"`` → ``("cpu", 0)``."""
    base, _, index = name.partition(".")
    return base.lower(), int(index) if index.isdigit() else 0


class OpenVINOProvider(Provider):
    """Claims connected convex runs of the nodes OpenVINO converts, and compiles each one."""

    def __init__(self, factory: ProviderFactory, device: Device, settings: Settings, cache: CompileCache):
        super().__init__(factory, device)
        self.settings = settings
        self.cache = cache

    def capability(self, graph, kernels):
        from ._support import analyze

        start = time.perf_counter()
        support = analyze(graph.model_bytes(), self.cache)
        elapsed = time.perf_counter() - start
        logger.log(
            logging.INFO if elapsed >= SLOW_S else logging.DEBUG,
            "capability of %d nodes: %d supported, %d declined (%.2f s)",
            len(support.supported) + len(support.declined),
            len(support.supported),
            len(support.declined),
            elapsed,
        )
        for name, reason in support.declined.items():
            if name in graph:
                graph.decline(name, reason)
        return [FuseClaim(group) for group in graph.fusion_groups(support.supported)]

    def compile(self, partition) -> CompiledPartition:
        from ._compile import compile_partition

        count = len(partition.nodes)
        if count >= LARGE_PARTITION:
            logger.info("compiling %s (%d nodes) for %s", partition.name, count, self.settings.device)
        start = time.perf_counter()
        compiled = compile_partition(partition, self.settings, shared_core(), self.cache)
        elapsed = time.perf_counter() - start
        logger.log(
            logging.INFO if elapsed >= SLOW_S else logging.DEBUG,
            "compiled %s (%d nodes) for %s in %.2f s",
            partition.name,
            count,
            self.settings.device,
            elapsed,
        )
        return compiled

    def transfer(self) -> None:
        return None  # OpenVINO's CPU plugin reads and writes host memory

    def close(self) -> None:
        # Compiled partitions belong to the session's plan (and to the shared cache); nothing else
        # is held per provider.
        return None


class OpenVINOProviderFactory(ProviderFactory):
    name = "openvino"
    ort_name = "OpenVINOExecutionProvider"
    priority = 100  # asked before the CPU provider (priority 0)
    option_names = OPTION_NAMES

    def __init__(self) -> None:
        self._reason = ""

    def _available(self) -> list[str]:
        try:
            return list(shared_core().available_devices)
        except ImportError as error:
            self._reason = f"the openvino package is not installed ({error}); {INSTALL_HINT}"
        except Exception as error:  # noqa: BLE001 - devices() must never raise
            self._reason = f"openvino failed to list devices: {type(error).__name__}: {error}"
        return []

    def devices(self) -> list[Device]:
        found = []
        core = None
        for name in self._available():
            kind, index = _device_kind(name)
            label = name
            try:
                core = core or shared_core()
                label = f"{name}: {core.get_property(name, 'FULL_DEVICE_NAME')}"
            except Exception:  # noqa: BLE001 - the name alone will do
                pass
            found.append(Device(kind, index, vendor="Intel OpenVINO", name=label))
        if not found and not self._reason:
            self._reason = "OpenVINO sees no device"
        # The CPU first: sessions create the provider on the first device.
        found.sort(key=lambda d: (d.kind != "cpu", d.kind, d.id))
        return found

    def unavailable_reason(self) -> str:
        if not self._reason:
            self.devices()
        return self._reason or "no device found"

    def create(
        self, device: Device, options: Mapping[str, str], context: ProviderContext | None = None
    ) -> OpenVINOProvider:
        self.check_options(options)
        available = self._available()
        if not available:
            raise InvalidArgument(f"{self.ort_name}: {self.unavailable_reason()}")
        default = next(
            (n for n in available if _device_kind(n) == (device.kind, device.id)),
            available[0],
        )
        if context is not None and context.intra_op_num_threads > 0 and "num_of_threads" not in options:
            options = {**options, "num_of_threads": str(context.intra_op_num_threads)}  # the session's threads
        settings = parse_options(options, default, available, self.ort_name)
        cache = context.cache if context is not None and context.cache is not None else default_compile_cache()
        return OpenVINOProvider(self, device, settings, cache)
