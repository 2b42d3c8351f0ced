"""The public conformance harness: a vendor's three lines, here on the virtual device."""

from __future__ import annotations

import pytest

from onnxplug.testing.conformance import load_cases, run_case, session_factory

CASES = [c for c in load_cases(("node",)) if c.name in ("test_relu", "test_add", "test_mul", "test_sigmoid")]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_node_case(case):
    run_case(case, session_factory=session_factory(["VirtualDeviceExecutionProvider"]))


def test_the_cases_were_found_and_a_wrong_result_fails():
    assert len(CASES) == 4
    relu = next(c for c in CASES if c.name == "test_relu")
    inputs, expected = relu.data_sets()[0]
    with pytest.raises(AssertionError):
        from onnxplug.testing.conformance import compare

        compare(expected[0] + 1, expected[0], 1e-6, 1e-6, where="output 0")
