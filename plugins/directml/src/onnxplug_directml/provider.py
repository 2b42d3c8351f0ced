"""``DmlExecutionProvider``: detection, and the table that plans for it.

DirectML is a Windows library (``DirectML.dll`` over Direct3D 12); WSL2 exposes the GPU through
``/dev/dxg`` and ships Linux builds of the libraries.  Detection never raises: on other systems it
says DirectML needs Windows or WSL2; where the platform fits it loads the libraries through
``ctypes`` to report whether they are present.  The execution path (DirectML operator graphs per
partition) is not part of this release, so even where DirectML is found the factory reports no
device, with that reason: plan with ``onnxplug partition MODEL --target directml``.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping

from onnxplug.api import Device, ProviderFactory
from onnxplug.errors import InvalidArgument
from onnxplug.partition.targets import CapabilityTable

__all__ = ["DmlProviderFactory", "detect"]


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
        if found:
            reason = (
                "DirectML's libraries load, but onnxplug-directml has no execution path yet; "
                "plan with `onnxplug partition MODEL --target directml`"
            )
        self._reason = reason
        return []

    def unavailable_reason(self) -> str:
        if not self._reason:
            self.devices()
        return self._reason or "no device found"

    def create(self, device: Device, options: Mapping[str, str]):
        self.check_options(options)
        raise InvalidArgument(f"{self.ort_name}: {self.unavailable_reason()}")
