"""Fixtures for the tests of ``scripts/``: a script loaded as a module, with ``scripts/`` on
``sys.path`` while its tests run (the benchmarks import ``bench_families`` from there)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest

SCRIPTS = pathlib.Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture(scope="module")
def script(request) -> Iterator[ModuleType]:
    """``scripts/<SCRIPT>.py`` as a module, ``SCRIPT`` being the test module's constant."""
    name = request.module.SCRIPT
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(SCRIPTS))
