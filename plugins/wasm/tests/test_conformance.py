"""ONNX's node cases with the WASM provider first and the CPU provider behind it.

Every case that passes on the CPU provider alone and has an op the wasm kernels implement must
still pass when the wasm kernels run what they claim (kernel claims never fall back: a wrong
kernel fails its case).  ``test_every_op_ran_in_wasm`` then checks that each op of the registry
ran inside wasm in at least one case, so a capability that declines everything cannot pass.
Case loading and comparison are the conformance kit's (``onnxplug.testing.conformance``).
"""

from __future__ import annotations

import contextlib
import warnings
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("wasmtime", reason="wasmtime is not installed (pip install onnxplug[wasm])")

import onnxplug
from onnxplug.testing import conformance
from onnxplug_wasm.kernels import OPS
from onnxplug_wasm.testing import environment

WASM = "WasmExecutionProvider"
#: The CPU provider's expected failures, where this repository's checkout is.
XFAIL_FILE = Path(__file__).resolve().parents[2] / "cpu" / "tests" / "xfail.toml"
#: Cases the wasm kernels compute differently, with the reason.
EXPECTED_FAILURES: dict[str, str] = {}

pytestmark = pytest.mark.conformance
_RAN: Counter = Counter()
_ENVIRONMENT: list = []


def _cases() -> list:
    expectations = conformance.load_expectations(str(XFAIL_FILE)) if XFAIL_FILE.exists() else {}
    params = []
    for case in conformance.load_cases(("node",)):
        expectation = expectations.get((case.suite, case.name))
        if expectation is not None and expectation.reason is not None:
            continue  # fails on the CPU provider alone
        model = case.model
        if model is None or not {n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")} & OPS:
            continue
        marks = (
            [pytest.mark.xfail(reason=EXPECTED_FAILURES[case.name], strict=True)]
            if (case.name in EXPECTED_FAILURES)
            else []
        )
        params.append(pytest.param(case, expectation, id=case.name, marks=marks))
    return params


@pytest.fixture(scope="module")
def tally(request):
    counts = {"cases": 0, "wasm_nodes": 0, "cpu_nodes": 0}
    yield counts
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and counts["cases"]:
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            reporter.write_line(
                f"\nWASM conformance: {counts['cases']} node cases ran; the wasm kernels ran "
                f"{counts['wasm_nodes']} nodes ({len(_RAN)} op types), the CPU provider {counts['cpu_nodes']}"
            )


@pytest.mark.parametrize("case, expectation", _cases())
def test_node_case_with_wasm_first(case, expectation, tally):
    if not _ENVIRONMENT:
        _ENVIRONMENT.append(environment())
    sessions = []

    def factory(source, providers=None, enable_fallback=1):
        session = onnxplug.InferenceSession(
            source, providers=[WASM, "CPUExecutionProvider"], environment=_ENVIRONMENT[0]
        )
        sessions.append(session)
        return session

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conformance.run_case(case, expectation, session_factory=factory)
    tally["cases"] += 1
    for session in sessions:
        for node in session.get_partition_report().nodes:
            if node.provider == WASM:
                tally["wasm_nodes"] += 1
                _RAN[node.op_type] += 1
            else:
                tally["cpu_nodes"] += 1


def test_every_op_ran_in_wasm():
    """Runs after the cases (same module, defined later): each registered op ran in wasm."""
    if not _RAN:
        pytest.skip("the node cases did not run in this session (select the module as a whole)")
    missing = sorted(OPS - set(_RAN))
    assert not missing, f"ops the wasm kernels claim but never ran in a node case: {missing}"
