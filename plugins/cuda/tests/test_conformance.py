"""ONNX's node cases with the CUDA provider first (on the test backends) and the CPU behind it.

Every case that passes on the CPU provider alone and has at least one op the CUDA kernels claim
must still pass with the CUDA provider running what it claims; at the end the run prints how
many nodes the CUDA kernels ran.  Case loading and comparison are the conformance suite's
(``onnxplug.testing.conformance``).
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path

import pytest

import onnxplug
from onnxplug.testing import conformance
from onnxplug_cuda.kernels import registry
from onnxplug_cuda.testing import BACKENDS, environment_for

CUDA = "CUDAExecutionProvider"
OPS = {kernel.key.op_type for kernel in registry}


#: The CPU provider's expected failures, where this repository's checkout is.
XFAIL_FILE = Path(__file__).resolve().parents[2] / "cpu" / "tests" / "xfail.toml"


def _cases() -> list:
    expectations = conformance.load_expectations(str(XFAIL_FILE)) if XFAIL_FILE.exists() else {}
    params = []
    for case in conformance.load_cases(("node",)):
        expectation = expectations.get((case.suite, case.name))
        if expectation is not None and expectation.reason is not None:
            continue
        model = case.model
        if model is None or not {n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")} & OPS:
            continue
        for backend in BACKENDS:
            params.append(pytest.param(case, expectation, backend, id=f"{backend}-{case.name}"))
    return params


_ENVIRONMENTS: dict[str, onnxplug.Environment] = {}


@pytest.fixture(scope="module")
def tally(request):
    counts = {"cases": 0, "cuda_nodes": 0, "cpu_nodes": 0}
    yield counts
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and counts["cases"]:
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            reporter.write_line(
                f"\nCUDA-kernel conformance: {counts['cases']} node cases ran; the CUDA kernels ran "
                f"{counts['cuda_nodes']} nodes, the CPU provider {counts['cpu_nodes']}"
            )


@pytest.mark.conformance
@pytest.mark.parametrize("case, expectation, backend", _cases())
def test_node_case_with_cuda_kernels_first(case, expectation, backend, tally):
    environment = _ENVIRONMENTS.setdefault(backend, environment_for(backend))
    sessions = []

    def factory(source, providers=None, enable_fallback=1):
        session = onnxplug.InferenceSession(source, providers=[CUDA, "CPUExecutionProvider"], environment=environment)
        sessions.append(session)
        return session

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conformance.run_case(case, expectation, session_factory=factory)
    tally["cases"] += 1
    for session in sessions:
        nodes = session.get_partition_report().nodes
        cuda = sum(1 for node in nodes if node.provider == CUDA)
        tally["cuda_nodes"] += cuda
        tally["cpu_nodes"] += len(nodes) - cuda


def test_the_kernels_claim_the_ops_they_implement():
    assert {"MatMul", "Conv", "Softmax", "LayerNormalization", "Relu", "Add", "Reshape"} <= OPS
