"""``DmlExecutionProvider``: detection, the table that plans for it, and the execution path.

DirectML is a Windows library (``DirectML.dll`` over Direct3D 12); WSL2 exposes the GPU through
``/dev/dxg`` and ships Linux builds of the libraries.  Detection never raises: on other systems it
says DirectML needs Windows or WSL2; where the platform fits it loads the libraries through
``ctypes``.  Where they load, the provider claims what the table accepts *and* the translator's
operator subset covers (:func:`onnxplug_directml.translate.declines`), compiles each fused
partition as one DirectML operator graph and runs it (:mod:`onnxplug_directml.d3d12`, imported
only then).  Planning (``onnxplug partition MODEL --target directml``) uses the whole table.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from onnxplug.api import CompiledPartition, Device, FuseClaim, Provider, ProviderFactory
from onnxplug.errors import InvalidArgument

# The planning tables are imported where used: discovery imports this module in every session.
if TYPE_CHECKING:
    from onnxplug.partition.targets import CapabilityTable

__all__ = ["DmlProvider", "DmlProviderFactory", "detect"]


def _libraries() -> tuple[str, ...]:
    if sys.platform == "win32":
        return ("d3d12.dll", "DirectML.dll")
    return ("libd3d12.so", "libdirectml.so")


def detect() -> tuple[bool, str]:
    """``(found, reason)``: whether DirectML's libraries load here, or why not."""
    if sys.platform != "win32" and not os.path.exists("/dev/dxg"):
        return False, f"DirectML needs Windows or WSL2 (/dev/dxg); this is {sys.platform} without /dev/dxg"
    for name in _libraries():
        try:
            ctypes.CDLL(name)
        except OSError as error:
            return False, f"{name} could not be loaded: {error}"
    return True, ""


class DmlProvider(Provider):
    """Claims the table's nodes that the translator covers; one DirectML graph per partition.

    Values stay host arrays: each compiled partition uploads its inputs and reads its outputs
    back (device-resident values between partitions are not implemented), so the provider has no
    ``transfer()``, unlike the plan, which shows the copies a device-memory DirectML would need.
    """

    def __init__(self, factory: ProviderFactory, device: Device) -> None:
        super().__init__(factory, device)
        self._device = None
        self._graphs: list = []

    def capability(self, graph, kernels):
        from onnxplug.partition.targets import table_claims

        from .table import TABLE
        from .translate import declines

        claims = table_claims(TABLE, graph)
        claimed = [name for claim in claims for name in claim.nodes]
        refused = declines(graph.model_bytes(), claimed)
        for name, reason in refused.items():
            graph.decline(name, f"the DirectML execution path does not run it: {reason}")
        if not refused:
            return claims
        return [FuseClaim(group) for group in graph.fusion_groups(n for n in claimed if n not in refused)]

    def compile(self, partition) -> CompiledPartition:
        from .d3d12 import DmlCompiledGraph, DmlDevice  # the platform layer: only where DirectML loaded
        from .translate import translate_partition

        if self._device is None:
            self._device = DmlDevice()
        compiled = DmlCompiledGraph(self._device, translate_partition(partition))
        self._graphs.append(compiled)
        return CompiledPartition(partition.inputs, partition.outputs, compiled.run)

    def close(self) -> None:
        for compiled in self._graphs:
            compiled.close()
        self._graphs.clear()
        if self._device is not None:
            self._device.close()
            self._device = None


class DmlProviderFactory(ProviderFactory):
    name = "directml"
    ort_name = "DmlExecutionProvider"
    priority = 100
    option_names = frozenset({"device_id", "performance_preference", "device_filter"})

    def __init__(self) -> None:
        self._reason = ""

    def capability_table(self) -> CapabilityTable:
        from .table import TABLE

        return TABLE

    def devices(self) -> list[Device]:
        try:
            found, reason = detect()
        except Exception as error:  # noqa: BLE001 - devices() must never raise
            found, reason = False, f"DirectML detection failed: {type(error).__name__}: {error}"
        self._reason = reason
        if not found:
            return []
        return [Device("gpu", 0, vendor="DirectML", name="default D3D12 adapter")]

    def unavailable_reason(self) -> str:
        if not self._reason:
            self.devices()
        return self._reason or "no device found"

    def create(self, device: Device, options: Mapping[str, str]) -> DmlProvider:
        self.check_options(options)
        if not self.devices():
            raise InvalidArgument(f"{self.ort_name}: {self.unavailable_reason()}")
        if str(options.get("device_id", "0")) != "0":
            raise InvalidArgument(
                f"{self.ort_name}: device_id {options['device_id']!r}: the execution path uses the default D3D12 "
                "adapter only (adapter enumeration through DXGI is not implemented)"
            )
        chosen = sorted(key for key in ("performance_preference", "device_filter") if key in options)
        if chosen:
            raise InvalidArgument(
                f"{self.ort_name}: {', '.join(chosen)}: adapter selection is not implemented (the default adapter runs)"
            )
        return DmlProvider(self, device)
