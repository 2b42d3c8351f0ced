"""The same kernels.wasm in Node and headless Chromium leaves the same bytes as under wasmtime.

Node needs only itself; the Chromium check needs Debian's ``chromium`` and the npm package
``playwright-core`` (``npm ci --prefix plugins/wasm/js``).  Both skip naming what is missing.
``nox -s portability`` runs this module.
"""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("wasmtime", reason="wasmtime is not installed (pip install onnxplug[wasm])")

from onnxplug_wasm import portability

pytestmark = pytest.mark.portability


@pytest.fixture(scope="module")
def cases():
    return portability.record_cases()


def test_the_recorded_calls_cover_every_kernel(cases):
    assert {case["args"][0] for case in cases} == set(range(10))
    assert all(case["status"] == 0 for case in cases)


def test_a_different_byte_is_reported(cases):
    report = {"results": [{"name": c["name"], "status": c["status"], "sha256": c["sha256"]} for c in cases]}
    assert portability.mismatches(cases, report) == []
    report["results"][3]["sha256"] = "0" * 64
    assert portability.mismatches(cases, report) == [cases[3]["name"]]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not on PATH (apt-get install nodejs)")
def test_node_replays_every_call_identically(cases):
    report = portability.run_engine("node", cases)
    assert report["engine"].startswith("node")
    assert portability.mismatches(cases, report) == []


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not on PATH (apt-get install nodejs)")
@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (apt-get install chromium)")
@pytest.mark.skipif(
    not (portability.JS / "node_modules" / "playwright-core").is_dir(),
    reason="npm package playwright-core is not installed (npm ci --prefix plugins/wasm/js)",
)
def test_headless_chromium_replays_every_call_identically(cases):
    report = portability.run_engine("chromium", cases)
    assert report["engine"].startswith("chromium")
    assert portability.mismatches(cases, report) == []
