"""``NnapiExecutionProvider``: detection, and the table that plans for it.

NNAPI is Android's C API (``libneuralnetworks.so``, Android 8.1+; device enumeration from API 29).
Detection never raises: off Android it says so; on Android it loads the library through
``ctypes`` and counts NNAPI devices.  The execution path (building an ``ANeuralNetworksModel``
per partition) is not part of this release, so even where the library is found the factory
reports no device, with that reason, instead of offering a provider that cannot run: plan with
``onnxplug partition MODEL --target nnapi``.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping

from onnxplug.api import Device, ProviderFactory
from onnxplug.errors import InvalidArgument
from onnxplug.partition.targets import CapabilityTable

__all__ = ["NnapiProviderFactory", "detect"]

LIBRARY = "libneuralnetworks.so"


def _on_android() -> bool:
    # CPython 3.13+ reports "android"; older Android builds report "linux" with Android's system tree.
    return sys.platform == "android" or hasattr(sys, "getandroidapilevel") or os.path.exists("/system/build.prop")


def detect() -> tuple[int, str]:
    """``(NNAPI device count, reason)``: the count is 0 and the reason says why when there is none."""
    if not _on_android():
        return 0, f"NNAPI is Android only (this is {sys.platform})"
    try:
        library = ctypes.CDLL(LIBRARY)
    except OSError as error:
        return 0, f"{LIBRARY} could not be loaded: {error}"
    count = ctypes.c_uint32(0)
    getter = getattr(library, "ANeuralNetworks_getDeviceCount", None)
    if getter is None:
        return 0, "this Android's NNAPI has no device enumeration (ANeuralNetworks_getDeviceCount needs API 29)"
    if getter(ctypes.byref(count)) != 0:
        return 0, "ANeuralNetworks_getDeviceCount failed"
    return int(count.value), ""


class NnapiProviderFactory(ProviderFactory):
    name = "nnapi"
    ort_name = "NnapiExecutionProvider"
    priority = 100
    # onnxruntime's NNAPI flags (NNAPI_FLAG_USE_FP16, NNAPI_FLAG_USE_NCHW, NNAPI_FLAG_CPU_DISABLED, ...)
    option_names = frozenset({"nnapi_flags"})

    def __init__(self) -> None:
        self._reason = ""

    def capability_table(self) -> CapabilityTable:
        from .table import TABLE

        return TABLE

    def devices(self) -> list[Device]:
        try:
            count, reason = detect()
        except Exception as error:  # noqa: BLE001 - devices() must never raise
            count, reason = 0, f"NNAPI detection failed: {type(error).__name__}: {error}"
        if count:
            reason = (
                f"NNAPI reports {count} device(s), but onnxplug-nnapi has no execution path yet; "
                "plan with `onnxplug partition MODEL --target nnapi`"
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
