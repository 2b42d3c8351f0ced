"""Benchmark model families: each module defines ``MODELS``, a list of :class:`BenchModel`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np


@dataclasses.dataclass(frozen=True)
class BenchModel:
    name: str
    build: Callable[[], tuple[bytes, dict[str, np.ndarray]]]
