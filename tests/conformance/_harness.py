"""The conformance harness as this repository's suites and scripts import it (``_harness``): the
public :mod:`onnxplug.testing.conformance`, plus where this checkout keeps the CPU provider's
expected failures."""

from __future__ import annotations

from pathlib import Path

from onnxplug.testing.conformance import *  # noqa: F403 - the harness, re-exported

REPO = Path(__file__).resolve().parents[2]
#: The CPU provider's expected failures (``scripts/gen_xfail.py`` writes it).
XFAIL_FILE = REPO / "plugins" / "cpu" / "tests" / "xfail.toml"
