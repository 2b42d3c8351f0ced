"""Load the conformance harness (tests/conformance/_harness.py) for the scripts beside this one.

The tests folder is not a package, so the harness is loaded by file path, under the same module
name the suite's conftest uses.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
XFAIL_FILE = REPO / "plugins" / "cpu" / "tests" / "xfail.toml"


def load_harness():
    name = "onnxplug_conformance_harness"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "conformance" / "_harness.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
