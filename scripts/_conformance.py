"""The conformance harness (tests/conformance/_harness.py) for the scripts beside this one.

The tests folder is not a package: its folder goes on ``sys.path`` and the harness is imported
as ``_harness``, the name pytest imports it under (``pythonpath`` in pyproject.toml).
"""

from __future__ import annotations

import sys
from pathlib import Path

_FOLDER = str(Path(__file__).resolve().parent.parent / "tests" / "conformance")
if _FOLDER not in sys.path:
    sys.path.insert(0, _FOLDER)

import _harness  # noqa: E402 - needs the path above

REPO = _harness.REPO
XFAIL_FILE = _harness.XFAIL_FILE


def load_harness():
    return _harness
