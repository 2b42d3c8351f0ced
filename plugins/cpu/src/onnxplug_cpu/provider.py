"""The CPU provider: host memory, numpy kernels, always available."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping

from onnxplug.api import Device, KernelProvider, ProviderFactory


class CPUProvider(KernelProvider):
    """Runs every node it has a kernel for, one at a time, on numpy arrays."""


class CPUProviderFactory(ProviderFactory):
    name = "cpu"
    ort_name = "CPUExecutionProvider"
    priority = 0  # the last resort: every other provider is asked first
    # onnxruntime's CPU options; accepted for compatibility (see the plugin README).
    option_names = frozenset({"arena_extend_strategy", "use_arena"})

    def devices(self) -> list[Device]:
        return [Device("cpu", 0, vendor=platform.machine(), name=f"{os.cpu_count() or 1} cores")]

    def create(self, device: Device, options: Mapping[str, str]) -> CPUProvider:
        self.check_options(options)
        return CPUProvider(self, device)
