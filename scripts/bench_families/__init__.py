"""Benchmark model families: each module defines ``MODELS``, a list of :class:`BenchModel`.

``scripts/bench.py`` finds the families by listing this package, so adding a family is adding a
module.  ``build()`` makes the model locally (onnx.helper, a torch export of a model defined in the
module, skl2onnx, or the light models shipped in the onnx wheel; never a download) and returns
its serialized bytes and feeds; slow builds cache their bytes under ``~/.cache/onnxplug-bench/``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import io
import os
import pathlib
import pkgutil
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["BenchModel", "CACHE", "cached_torch_model", "export_torch", "family_names", "load_family", "random_feeds"]

#: Where slow builds keep their bytes (``ONNXPLUG_BENCH_CACHE`` to move it).
CACHE = pathlib.Path(os.environ.get("ONNXPLUG_BENCH_CACHE", pathlib.Path.home() / ".cache" / "onnxplug-bench"))


@dataclasses.dataclass(frozen=True)
class BenchModel:
    name: str
    build: Callable[[], tuple[bytes, dict[str, np.ndarray]]]


def family_names() -> list[str]:
    """The families present, in alphabetical order."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_"))


def load_family(name: str) -> list[BenchModel]:
    """A family's models."""
    return list(importlib.import_module(f"{__name__}.{name}").MODELS)


def random_feeds(model: Any) -> dict[str, np.ndarray]:
    """Standard-normal float32 feeds (seed 0) for an ``onnx.ModelProto``'s graph inputs that are
    not initializers (a dimension without a value is 1)."""
    initializers = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for info in model.graph.input:
        if info.name in initializers:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in info.type.tensor_type.shape.dim)
        feeds[info.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def export_torch(module: Any, shape: tuple[int, ...]) -> bytes:
    """``module`` (in eval mode) exported by torch.onnx's TorchScript exporter at opset 17 for one
    zero input of ``shape`` named ``input``."""
    import torch

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            torch.onnx.export(
                module, (torch.zeros(shape),), buffer, dynamo=False, opset_version=17, input_names=["input"]
            )
    return buffer.getvalue()


def cached_torch_model(prefix: str, name: str, source: str, export: Callable[[], bytes]):
    """A ``BenchModel.build`` for a torch-defined model: ``export()``'s bytes, kept under
    :data:`CACHE` with a key from the defining module's ``source`` file (editing a model rebuilds
    it), and :func:`random_feeds` for them."""

    def build() -> tuple[bytes, dict[str, np.ndarray]]:
        import onnx

        key = hashlib.sha256(pathlib.Path(source).read_bytes()).hexdigest()[:12]
        path = CACHE / f"{prefix}-{name}-{key}.onnx"
        if path.exists():
            data = path.read_bytes()
        else:
            data = export()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return data, random_feeds(onnx.load_from_string(data))

    return build
