"""``CoreMLExecutionProvider``: detection, the table that plans for it, and the execution path.

Core ML runs on Apple platforms only.  Detection never raises: off macOS it says so (coremltools
installs on Linux, but ``predict`` and compiling raise there); on macOS it needs coremltools.
Where it runs, the provider claims what the table accepts *and* the translator can express
(:func:`onnxplug_coreml.translate.declines`), builds one ``.mlpackage`` per fused partition
(:mod:`onnxplug_coreml.package`, kept in the core's compile cache) and predicts through
coremltools' ``MLModel`` (:mod:`onnxplug_coreml.runner`, imported only then).  Elsewhere, plan
with ``onnxplug partition MODEL --target coreml`` and convert with ``onnxplug convert``.
"""

from __future__ import annotations

import importlib.util
import platform
import sys
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING

from onnxplug import CompileCache, default_compile_cache
from onnxplug.api import CompiledPartition, Device, FuseClaim, Provider, ProviderFactory
from onnxplug.errors import InvalidArgument

# The planning tables and the package builder (onnx, the translator) are imported where they are
# used: discovery imports this module in every session, and off macOS nothing else needs them.
if TYPE_CHECKING:
    from onnxplug.partition.targets import CapabilityTable

    from .package import Settings

__all__ = ["CoremlProvider", "CoremlProviderFactory", "detect"]


def detect() -> str:
    """``""`` when Core ML can predict here, else the reason it cannot."""
    if sys.platform != "darwin":
        return (
            f"CoreML prediction needs macOS (this is {sys.platform}); "
            "plan with --target coreml, convert with onnxplug convert"
        )
    if importlib.util.find_spec("coremltools") is None:
        return "coremltools is not installed (pip install onnxplug[coreml])"
    release = platform.mac_ver()[0]
    if release and tuple(int(p) for p in release.split(".")[:2]) < (12, 0):
        return f"ML Programs need macOS 12 or later (this is {release})"
    return ""


class CoremlProvider(Provider):
    """Claims what the table accepts and the translator expresses; one ML Program per partition."""

    def __init__(self, factory: ProviderFactory, device: Device, settings: Settings, cache: CompileCache) -> None:
        super().__init__(factory, device)
        self.settings = settings
        self.cache = cache
        self._folder = tempfile.TemporaryDirectory(prefix="onnxplug-coreml-")

    def capability(self, graph, kernels):
        from onnxplug.partition.targets import table_claims

        from .table import TABLE
        from .translate import declines

        claims = table_claims(TABLE, graph)
        claimed = [name for claim in claims for name in claim.nodes]
        refused = declines(graph.model_bytes(), claimed, target=self.settings.target)
        for name, reason in refused.items():
            graph.decline(name, f"the CoreML translator cannot express it: {reason}")
        if not refused:
            return claims
        return [FuseClaim(group) for group in graph.fusion_groups(n for n in claimed if n not in refused)]

    def compile(self, partition) -> CompiledPartition:
        from .package import build_package
        from .runner import Runner  # the platform layer: only ever imported where Core ML predicts

        path = build_package(partition, self.settings, self.cache, self._folder.name)
        runner = Runner(path, self.settings.compute_units)
        return CompiledPartition(partition.inputs, partition.outputs, runner.run)

    def close(self) -> None:
        self._folder.cleanup()


class CoremlProviderFactory(ProviderFactory):
    name = "coreml"
    ort_name = "CoreMLExecutionProvider"
    priority = 100
    option_names = frozenset(
        {
            "ModelFormat",
            "MLComputeUnits",
            "RequireStaticInputShapes",
            "AllowLowPrecisionAccumulationOnGPU",
            "ModelCacheDirectory",
            "compute_units",
            "precision",
            "minimum_deployment_target",
        }
    )

    def __init__(self) -> None:
        self._reason: str | None = None

    def capability_table(self) -> CapabilityTable:
        from .table import TABLE

        return TABLE

    def convert_model(self, model, out: str, options: Mapping[str, str] | None = None) -> str:
        """The whole model as one ``.mlpackage`` at ``out`` (``onnxplug convert --to coreml``); any machine."""
        from .package import convert_model, parse_settings

        options = dict(options or {})
        self.check_options(options)
        return convert_model(model, out, parse_settings(options, self.ort_name))

    def devices(self) -> list[Device]:
        try:
            reason = detect()
        except Exception as error:  # noqa: BLE001 - devices() must never raise
            reason = f"CoreML detection failed: {type(error).__name__}: {error}"
        self._reason = reason
        if reason:
            return []
        return [Device("npu", 0, vendor="Apple", name=f"Core ML (macOS {platform.mac_ver()[0]})")]

    def unavailable_reason(self) -> str:
        if self._reason is None:
            self.devices()
        return self._reason or "no device found"

    def create(self, device: Device, options: Mapping[str, str], context=None) -> CoremlProvider:
        from .package import parse_settings

        self.check_options(options)
        settings = parse_settings(options, self.ort_name)
        if not self.devices():
            raise InvalidArgument(f"{self.ort_name}: {self.unavailable_reason()}")
        cache = context.cache if context is not None and context.cache is not None else default_compile_cache()
        return CoremlProvider(self, device, settings, cache)
