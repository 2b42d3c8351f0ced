"""Benchmark model families: each module defines ``MODELS``, a list of :class:`BenchModel`.

``scripts/bench.py`` finds the families by listing this package, so adding a family is adding a
module.  ``build()`` makes the model locally (onnx.helper, a torch export of a model defined in the
module, skl2onnx, or the light models shipped in the onnx wheel; never a download) and returns
its serialized bytes and feeds; slow builds cache their bytes under ``~/.cache/onnxplug-bench/``.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable

import numpy as np

__all__ = ["BenchModel", "family_names", "load_family"]


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
