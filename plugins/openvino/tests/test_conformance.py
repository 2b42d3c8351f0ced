"""ONNX's node test cases with OpenVINO first and the CPU provider behind it.

Every case that passes on the CPU provider alone (those not listed as expected failures in
``plugins/cpu/tests/xfail.toml``) must still pass when OpenVINO runs what it claims: a claim on
a node OpenVINO computes differently is a bug in the plugin's capability, not in the case.
Partitions OpenVINO fails to compile fall back to the CPU provider (with a warning).

Case loading and comparison are the conformance suite's own (``tests/conformance/_harness.py``).
At the end the run prints how many nodes OpenVINO ran.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest

pytest.importorskip("openvino", reason="the 'openvino' package is not installed (pip install onnxplug[openvino])")

import onnxplug

OV = "OpenVINOExecutionProvider"

#: Cases whose reference rounds every float16 step while OpenVINO keeps float32 intermediates
#: inside a fused partition (more accurate, but past the case's tolerance).
TOLERANCES = {"test_attention_4d_causal_fp16_expanded": 2e-3}

pytestmark = pytest.mark.conformance  # about a minute for ~1880 cases: not marked slow


def _harness():
    """The conformance suite's harness, or ``None`` where the repository's tests are not here
    (an installed plugin tested on its own)."""
    try:
        import _harness  # on pytest's pythonpath (pyproject.toml)
    except ImportError:
        return None
    return _harness


def _cases() -> list:
    harness = _harness()
    if harness is None:
        return []
    expectations = harness.load_expectations(str(harness.XFAIL_FILE))
    params = []
    for case in harness.load_cases(("node",)):
        expectation = expectations.get((case.suite, case.name))
        if expectation is not None and expectation.reason is not None:
            continue  # fails on the CPU provider alone
        params.append(pytest.param(case, expectation, id=case.name))
    return params


@pytest.fixture(scope="module")
def tally(request):
    counts = {"cases": 0, "with_openvino": 0, "openvino_nodes": 0, "cpu_nodes": 0}
    yield counts
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and counts["cases"]:
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            reporter.write_line(
                f"\nOpenVINO conformance: {counts['cases']} node cases ran; OpenVINO ran "
                f"{counts['openvino_nodes']} nodes in {counts['with_openvino']} cases, the CPU provider "
                f"{counts['cpu_nodes']} nodes"
            )


def _ran_by(session) -> tuple[int, int]:
    """(nodes run inside OpenVINO partitions, nodes run by kernels) of the main graph, after any
    compile fallback."""
    nodes = session.get_partition_report().nodes
    openvino = sum(1 for node in nodes if node.provider == OV and node.partition is not None)
    return openvino, len(nodes) - openvino


@pytest.mark.parametrize("case, expectation", _cases())
def test_node_case_with_openvino_first(case, expectation, tally):
    harness = _harness()
    sessions = []

    def factory(source, providers=None, enable_fallback=1):
        session = onnxplug.InferenceSession(source, providers=[OV, "CPUExecutionProvider"])
        sessions.append(session)
        return session

    if case.name in TOLERANCES:
        expectation = harness.Expectation(rtol=TOLERANCES[case.name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # compile fallbacks warn; the results are what counts
        harness.run_case(case, expectation, session_factory=factory)
    tally["cases"] += 1
    for session in sessions:
        openvino, kernels = _ran_by(session)
        tally["openvino_nodes"] += openvino
        tally["cpu_nodes"] += kernels
        tally["with_openvino"] += bool(openvino)
