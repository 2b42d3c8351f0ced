"""``NnapiExecutionProvider``: detection, the table that plans for it, and the execution path.

NNAPI is Android's C API (``libneuralnetworks.so``, Android 8.1+; device enumeration from API 29).
Detection never raises: off Android it says so; on Android it loads the library through
``ctypes`` and counts NNAPI devices.  Where there are devices, the provider claims what the
table accepts *and* the translator can express (:func:`onnxplug_nnapi.translate.declines`),
translates each fused partition into an NNAPI program (:mod:`onnxplug_nnapi.translate`) and
replays it into the library (:mod:`onnxplug_nnapi.ndk`, imported only then).  Off Android,
plan with ``onnxplug partition MODEL --target nnapi``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from onnxplug.api import CompiledPartition, Device, FuseClaim, Provider, ProviderFactory
from onnxplug.errors import InvalidArgument

# The planning tables are imported where used: discovery imports this module in every session.
if TYPE_CHECKING:
    from onnxplug.partition.targets import CapabilityTable

__all__ = ["FLAGS", "NnapiProvider", "NnapiProviderFactory", "Settings", "detect", "parse_flags"]

#: onnxruntime's NNAPI flags (``nnapi_provider_factory.h``), which ``nnapi_flags`` takes as a
#: number or as names joined by ``|``.
FLAGS = {
    "NNAPI_FLAG_USE_NONE": 0x000,
    "NNAPI_FLAG_USE_FP16": 0x001,
    "NNAPI_FLAG_USE_NCHW": 0x002,
    "NNAPI_FLAG_CPU_DISABLED": 0x004,
    "NNAPI_FLAG_CPU_ONLY": 0x008,
}

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


@dataclasses.dataclass(frozen=True)
class Settings:
    """What ``nnapi_flags`` asks for: float16 relaxation, the layout, the devices."""

    fp16: bool = False
    layout: str = "nhwc"
    device_filter: str | None = None  # "cpu_only" / "cpu_disabled"


def parse_flags(text: str, where: str = "NnapiExecutionProvider") -> Settings:
    """:class:`Settings` from ``nnapi_flags`` (``"3"``, ``"0x3"`` or ``"NNAPI_FLAG_USE_FP16|NNAPI_FLAG_USE_NCHW"``).

    :raises InvalidArgument: an unknown flag name, or CPU_ONLY together with CPU_DISABLED.
    """
    text = str(text).strip()
    try:
        bits = int(text, 0) if text else 0
    except ValueError:
        bits = 0
        for name in filter(None, (part.strip() for part in text.split("|"))):
            if name not in FLAGS:
                raise InvalidArgument(
                    f"{where}: unknown nnapi_flags entry {name!r} (known: {', '.join(FLAGS)})"
                ) from None
            bits |= FLAGS[name]
    unknown = bits & ~sum(FLAGS.values())
    if unknown:
        raise InvalidArgument(f"{where}: nnapi_flags has unknown bits {unknown:#x}")
    only, disabled = bool(bits & FLAGS["NNAPI_FLAG_CPU_ONLY"]), bool(bits & FLAGS["NNAPI_FLAG_CPU_DISABLED"])
    if only and disabled:
        raise InvalidArgument(f"{where}: NNAPI_FLAG_CPU_ONLY and NNAPI_FLAG_CPU_DISABLED exclude each other")
    return Settings(
        fp16=bool(bits & FLAGS["NNAPI_FLAG_USE_FP16"]),
        layout="nchw" if bits & FLAGS["NNAPI_FLAG_USE_NCHW"] else "nhwc",
        device_filter="cpu_only" if only else "cpu_disabled" if disabled else None,
    )


class NnapiProvider(Provider):
    """Claims what the table accepts and the translator expresses; one NNAPI model per partition."""

    def __init__(self, factory: ProviderFactory, device: Device, settings: Settings) -> None:
        super().__init__(factory, device)
        self.settings = settings
        self._models: list = []

    def capability(self, graph, kernels):
        from onnxplug.partition.targets import table_claims

        from .table import TABLE
        from .translate import declines

        claims = table_claims(TABLE, graph)
        claimed = [name for claim in claims for name in claim.nodes]
        refused = declines(graph.model_bytes(), claimed, layout=self.settings.layout)
        for name, reason in refused.items():
            graph.decline(name, f"the NNAPI translator cannot express it: {reason}")
        if not refused:
            return claims
        return [FuseClaim(group) for group in graph.fusion_groups(n for n in claimed if n not in refused)]

    def compile(self, partition) -> CompiledPartition:
        from .ndk import NnapiModel  # the platform layer: only ever imported where NNAPI loaded
        from .translate import translate_partition

        program = translate_partition(partition, layout=self.settings.layout)
        model = NnapiModel(program, fp16=self.settings.fp16, device_filter=self.settings.device_filter)
        self._models.append(model)
        return CompiledPartition(partition.inputs, partition.outputs, model.run)

    def close(self) -> None:
        for model in self._models:
            model.close()
        self._models.clear()


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
        self._reason = reason
        if not count:
            return []
        return [Device("npu", 0, vendor="Android", name=f"NNAPI ({count} device{'s' if count != 1 else ''})")]

    def unavailable_reason(self) -> str:
        if not self._reason:
            self.devices()
        return self._reason or "no device found"

    def create(self, device: Device, options: Mapping[str, str]) -> NnapiProvider:
        self.check_options(options)
        settings = parse_flags(options.get("nnapi_flags", ""), self.ort_name)
        if not self.devices():
            raise InvalidArgument(f"{self.ort_name}: {self.unavailable_reason()}")
        return NnapiProvider(self, device, settings)
