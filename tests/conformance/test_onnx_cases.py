"""ONNX's backend test cases on the CPU provider, through the public API only.

Each case builds one ``InferenceSession(..., providers=["CPUExecutionProvider"],
enable_fallback=0)``, feeds inputs by position and compares every output (see
``_harness.compare``).  Parametrization and expected failures come from ``conftest.py``.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.conformance


def test_node(node_case, expectation, conformance_harness):
    conformance_harness.run_case(node_case, expectation)


def test_model(model_case, expectation, conformance_harness):
    conformance_harness.run_case(model_case, expectation)


def test_light_model(light_case, expectation, conformance_harness):
    conformance_harness.run_case(light_case, expectation)


def test_xfail_entries_name_existing_cases(conformance_harness, xfail_file):
    """A stale entry (a renamed or removed case) would silently stop meaning anything."""
    known = {(case.suite, case.name) for case in conformance_harness.load_cases()}
    stale = sorted(key for key in conformance_harness.load_expectations(str(xfail_file)) if key not in known)
    assert not stale, f"xfail.toml names cases that do not exist: {stale}"
