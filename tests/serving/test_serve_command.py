"""``onnxplug serve`` as users start it: light_resnet50 answering tritonclient, then Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import numpy as np
import onnx
import pytest

import onnxplug
from onnxplug.cli import main

httpclient = pytest.importorskip("tritonclient.http", reason="the serve command test needs tritonclient[http]")
pytest.importorskip("uvicorn", reason="onnxplug serve needs uvicorn (the serve extra)")

LIGHT_RESNET50 = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_resnet50.onnx")


def _start(*arguments: str) -> tuple[subprocess.Popen, str, list[str]]:
    command = [sys.executable, "-m", "onnxplug", "serve", *arguments, "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    while not lines or not lines[-1].startswith("batching:"):
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"onnxplug serve exited: {process.wait()} {process.stderr.read()}")
        lines.append(line)
    return process, re.search(r"http://(\S+)", lines[0]).group(1), lines


@pytest.mark.skipif(not os.path.exists(LIGHT_RESNET50), reason="the onnx wheel has no light_resnet50.onnx")
@pytest.mark.parametrize("stop", [signal.SIGINT])  # Ctrl-C
def test_serve_light_resnet50_answers_tritonclient_and_stops_on_ctrl_c(stop):
    process, url, lines = _start(LIGHT_RESNET50, "--providers", "CPUExecutionProvider")
    try:
        assert "serving light_resnet50 (CPUExecutionProvider)" in lines[0]
        # Exported with a fixed batch of 1: served, one request at a time, and the reason is said.
        assert "first dimension is not symbolic" in lines[1]
        client = httpclient.InferenceServerClient(url)
        assert client.is_server_ready() and client.is_model_ready("light_resnet50")
        metadata = client.get_model_metadata("light_resnet50")
        assert metadata["inputs"] == [{"name": "gpu_0/data_0", "datatype": "FP32", "shape": [1, 3, 224, 224]}]
        image = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
        tensor = httpclient.InferInput("gpu_0/data_0", [1, 3, 224, 224], "FP32")
        tensor.set_data_from_numpy(image)
        result = client.infer("light_resnet50", [tensor]).as_numpy("gpu_0/softmax_1")
        session = onnxplug.InferenceSession(LIGHT_RESNET50, providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(result, session.run(None, {"gpu_0/data_0": image})[0], rtol=1e-5, atol=1e-7)
    finally:
        process.send_signal(stop)
        status = process.wait(60)
        stderr = process.stderr.read()
    assert status == 0, stderr
    assert "Traceback" not in stderr
    assert process.stdout.read().strip() == "stopped serving light_resnet50"


def test_sigterm_stops_the_server_cleanly(tmp_path, serving_helpers, batch_model):
    path = tmp_path / "scaler.onnx"
    path.write_bytes(batch_model)
    process, url, lines = _start(str(path))
    assert lines[1].startswith("batching: on (max batch 8")
    assert httpclient.InferenceServerClient(url).is_server_live()
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0, process.stderr.read()


def test_serve_without_the_extra_names_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if uvicorn were not installed
    assert main(["serve", LIGHT_RESNET50]) == 1
    assert "needs the serve extra (pip install 'onnxplug[serve]'): uvicorn is missing" in capsys.readouterr().err
