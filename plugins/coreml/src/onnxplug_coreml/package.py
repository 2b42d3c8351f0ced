"""ML Program packages: settings, converting a MIL program into an ``.mlpackage``, and keeping
packages in the core's compile cache.

Works on any machine (coremltools converts and saves on Linux).  A package is keyed by the
partition's bytes and the settings that change its content (precision, deployment target), so
two sessions over one partition share one package; with ``session.compile_cache_dir`` the
package is also kept on disk (zipped, as the cache's blobs are files), and with
``ModelCacheDirectory`` (onnxruntime's option) it is written there as ``<key>.mlpackage``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from onnxplug import CompileCache
from onnxplug.errors import InvalidArgument

from .translate import IOSpec, Translation, Untranslatable, declines, translate

__all__ = [
    "COMPUTE_UNITS",
    "Settings",
    "Untranslatable",
    "build_package",
    "convert_model",
    "io_specs",
    "package_key",
    "parse_settings",
    "save",
]

#: onnxruntime's ``MLComputeUnits`` names and the issue's ``compute_units`` names → coremltools' ComputeUnit.
COMPUTE_UNITS = {
    "ALL": "ALL",
    "CPUOnly": "CPU_ONLY",
    "CPU_ONLY": "CPU_ONLY",
    "CPUAndGPU": "CPU_AND_GPU",
    "CPU_AND_GPU": "CPU_AND_GPU",
    "CPUAndNeuralEngine": "CPU_AND_NE",
    "CPU_AND_NE": "CPU_AND_NE",
}
PRECISIONS = ("FP32", "FP16")
#: Deployment targets whose MIL opset the translator's ops exist in.
TARGETS = ("iOS15", "iOS16", "iOS17", "iOS18", "macOS12", "macOS13", "macOS14", "macOS15")
#: The metadata key holding the ONNX names and types of the package's inputs and outputs.
IO_METADATA = "onnxplug.io"


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the provider options ask for."""

    compute_units: str = "ALL"
    precision: str = "FP32"
    target: str = "iOS15"
    require_static_shapes: bool = True
    model_cache_dir: str | None = None

    def package_options(self) -> dict[str, str]:
        """The settings that change a package's bytes (the cache key's options)."""
        return {"precision": self.precision, "minimum_deployment_target": self.target, "format": "MLProgram"}


def parse_settings(options: Mapping[str, str], where: str = "CoreMLExecutionProvider") -> Settings:
    """:class:`Settings` from onnxruntime's CoreML options (``ModelFormat``, ``MLComputeUnits``,
    ``RequireStaticInputShapes``, ``AllowLowPrecisionAccumulationOnGPU``, ``ModelCacheDirectory``)
    and the names ``compute_units``, ``precision``, ``minimum_deployment_target``.

    :raises InvalidArgument: an unknown value, naming the option and what it takes.
    """
    model_format = options.get("ModelFormat", "MLProgram")
    if model_format != "MLProgram":
        raise InvalidArgument(
            f"{where}: ModelFormat={model_format!r}: onnxplug builds ML Programs only ('MLProgram'); "
            "the NeuralNetwork format is deprecated by Apple"
        )
    units = options.get("compute_units", options.get("MLComputeUnits", "ALL"))
    if units not in COMPUTE_UNITS:
        raise InvalidArgument(f"{where}: compute units {units!r} is not one of {', '.join(COMPUTE_UNITS)}")
    precision = options.get("precision", "")
    if not precision:
        low = str(options.get("AllowLowPrecisionAccumulationOnGPU", "0")).lower() in ("1", "true")
        precision = "FP16" if low else "FP32"
    if precision not in PRECISIONS:
        raise InvalidArgument(f"{where}: precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    target = options.get("minimum_deployment_target", "iOS15")
    if target not in TARGETS:
        raise InvalidArgument(f"{where}: minimum_deployment_target {target!r} is not one of {', '.join(TARGETS)}")
    static = str(options.get("RequireStaticInputShapes", "1")).lower() in ("1", "true")
    if not static:
        raise InvalidArgument(
            f"{where}: RequireStaticInputShapes=0: onnxplug's translator builds fixed-shape programs only"
        )
    return Settings(COMPUTE_UNITS[units], precision, target, static, options.get("ModelCacheDirectory") or None)


def convert(translation: Translation, settings: Settings) -> Any:
    """The coremltools ``MLModel`` of a translated program (an ML Program; converting runs
    coremltools' MIL passes and works on Linux), with the ONNX I/O description as metadata."""
    import coremltools as ct

    precision = ct.precision.FLOAT32 if settings.precision == "FP32" else ct.precision.FLOAT16
    model = ct.convert(
        translation.program,
        convert_to="mlprogram",
        compute_precision=precision,
        minimum_deployment_target=getattr(ct.target, settings.target),
        compute_units=getattr(ct.ComputeUnit, settings.compute_units),
        skip_model_load=True,  # loading compiles: macOS only; the provider loads it there
    )
    described = {
        "inputs": [dataclasses.asdict(spec) for spec in translation.inputs],
        "outputs": [dataclasses.asdict(spec) for spec in translation.outputs],
    }
    model.user_defined_metadata[IO_METADATA] = json.dumps(described)
    return model


def io_specs(model: Any) -> tuple[tuple[IOSpec, ...], tuple[IOSpec, ...]]:
    """The ONNX inputs and outputs a package was built for (from its metadata)."""
    described = json.loads(model.user_defined_metadata[IO_METADATA])

    def specs(entries):
        return tuple(IOSpec(**{**e, "shape": tuple(e["shape"])}) for e in entries)

    return specs(described["inputs"]), specs(described["outputs"])


def save(model: Any, path: str) -> str:
    """Write ``model`` as an ``.mlpackage`` folder at ``path`` (replaced when it exists)."""
    if not path.endswith(".mlpackage"):
        raise InvalidArgument(f"an ML Program is saved as a .mlpackage folder, not {path!r}")
    if os.path.isdir(path):
        shutil.rmtree(path)
    model.save(path)
    return path


def _zip(folder: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for root, _, files in os.walk(folder):
            if root != folder:  # empty folders too: the manifest names them (weights/ of a small model)
                archive.writestr(os.path.relpath(root, folder) + "/", b"")
            for name in sorted(files):
                full = os.path.join(root, name)
                archive.write(full, os.path.relpath(full, folder))
    return buffer.getvalue()


def _unzip(data: bytes, folder: str) -> None:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for member in archive.namelist():  # the cache wrote these names: still, no path leaves the folder
            target = os.path.realpath(os.path.join(folder, member))
            if not target.startswith(os.path.realpath(folder) + os.sep):
                raise InvalidArgument(f"cached package entry {member!r} leaves its folder")
        archive.extractall(folder)


def package_key(model_bytes: bytes, inputs: Sequence[str], outputs: Sequence[str], settings: Settings) -> str:
    return CompileCache.key(
        provider="coreml",
        content=model_bytes,
        options=settings.package_options(),
        extra=(tuple(inputs), tuple(outputs)),
    )


def build_package(partition: Any, settings: Settings, cache: CompileCache, folder: str) -> str:
    """The ``.mlpackage`` of a partition, as a folder under ``folder``: taken from the cache
    (memory, then ``session.compile_cache_dir``, then ``ModelCacheDirectory``) or translated,
    converted and stored in all of them.  Returns the package's path."""
    data = partition.model_bytes()
    key = package_key(data, partition.inputs, partition.outputs, settings)

    def make() -> bytes:
        blob = cache.load_bytes(key)
        if blob is None and settings.model_cache_dir:
            cached = os.path.join(settings.model_cache_dir, key + ".mlpackage")
            if os.path.isdir(cached):
                blob = _zip(cached)
        if blob is None:
            translation = translate(partition.model, partition.inputs, partition.outputs, target=settings.target)
            with tempfile.TemporaryDirectory() as scratch:
                written = save(convert(translation, settings), os.path.join(scratch, "model.mlpackage"))
                blob = _zip(written)
                if settings.model_cache_dir:
                    os.makedirs(settings.model_cache_dir, exist_ok=True)
                    shutil.copytree(
                        written, os.path.join(settings.model_cache_dir, key + ".mlpackage"), dirs_exist_ok=True
                    )
            cache.store_bytes(key, blob)
        return blob

    blob = cache.get_or_create(key, make)
    cache.put(key, blob, len(blob))  # its real size, for the cache's byte budget
    path = os.path.join(folder, key + ".mlpackage")
    if not os.path.isdir(path):
        os.makedirs(path)
        _unzip(blob, path)
    return path


def convert_model(model: str | bytes | onnx.ModelProto, out: str, settings: Settings | None = None) -> str:
    """``onnxplug convert MODEL --to coreml -o OUT.mlpackage``: the whole model as one ML Program.

    :raises Untranslatable: some nodes have no MIL form; the message names every one with its reason.
    """
    settings = settings or Settings()
    if isinstance(model, (str, os.PathLike)):
        model = onnx.load_model(os.fspath(model))
    elif isinstance(model, bytes):
        model = onnx.load_model_from_string(model)
    refused = declines(model, target=settings.target)
    if refused:
        listed = "; ".join(f"{name}: {why}" for name, why in refused.items())
        raise Untranslatable(
            f"{len(refused)} node{'s' if len(refused) != 1 else ''}", f"the model cannot be converted whole ({listed})"
        )
    return save(convert(translate(model, target=settings.target), settings), out)
