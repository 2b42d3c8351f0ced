"""Every model-workflow command on one of the onnx wheel's light models (SqueezeNet, weights made
by ConstantOfShape): inspect, optimize, quantize, validate and bench, with few runs each."""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import sys

import numpy as np
import onnx
import pytest

import onnxplug
from onnxplug.cli import _bench, _validate, main
from onnxplug.testing.fakes import wrong_kernel_plugin

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")
pytestmark = pytest.mark.skipif(not os.path.exists(LIGHT), reason="the onnx wheel ships no light_squeezenet.onnx")


@pytest.fixture(scope="module")
def light():
    return onnx.load(LIGHT)


@pytest.fixture(scope="module")
def feed():
    return {"data_0": np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)}


def _cpu(path):
    return onnxplug.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_inspect_light_model(light, capsys):
    assert main(["inspect", LIGHT, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["ops"] == dict(collections.Counter(node.op_type for node in light.graph.node))
    assert info["nodes"] == len(light.graph.node) and info["inputs"] == {"data_0": "float [1, 3, 224, 224]"}


def test_optimize_light_model(light, feed, tmp_path, capsys):
    out = tmp_path / "opt.onnx"
    assert main(["optimize", LIGHT, "-o", str(out), "--providers", "cpu"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    optimized = onnx.load(str(out))
    assert "ConstantOfShape" not in {node.op_type for node in optimized.graph.node}  # weights folded
    assert len(optimized.graph.node) < len(light.graph.node)
    np.testing.assert_allclose(_cpu(out).run(None, feed)[0], _cpu(LIGHT).run(None, feed)[0], rtol=1e-4, atol=1e-6)


def test_quantize_light_model_needs_and_takes_pre_processing(feed, tmp_path, capsys):
    calibration = tmp_path / "calib"
    calibration.mkdir()
    np.save(calibration / "data_0.npy", feed["data_0"])
    out = tmp_path / "q.onnx"
    # Computed weights: nothing to quantize, and the command says so.
    assert main(["quantize", LIGHT, "-o", str(out)]) == 0
    assert "nothing was quantized" in capsys.readouterr().err
    assert main(["quantize", LIGHT, "-o", str(out), "--calibration", str(calibration), "--pre-process"]) == 0
    captured = capsys.readouterr()
    assert "(QDQ, MinMax over 1 samples)" in captured.out and "nothing was quantized" not in captured.err
    ops = collections.Counter(node.op_type for node in onnx.load(str(out)).graph.node)
    assert ops["QuantizeLinear"] > 0 and ops["DequantizeLinear"] >= ops["Conv"] == 26
    got, want = _cpu(out).run(None, feed)[0], _cpu(LIGHT).run(None, feed)[0]
    assert np.abs(got - want).max() < 0.1 * np.abs(want).max()


def test_validate_light_model_finds_a_planted_wrong_relu():
    env = onnxplug.Environment()
    env.register(wrong_kernel_plugin("Relu", name="wrong"), name="wrong")
    args = argparse.Namespace(model=LIGHT, providers="wrong,cpu", samples=1, inputs=None, rtol=1e-3, atol=1e-4, seed=0)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert _validate.run(args, environment=env) == 3
    first_relu = next(node for node in onnx.load(LIGHT).graph.node if node.op_type == "Relu")
    assert f"first divergence at node '{first_relu.name}' (Relu)" in out.getvalue()


def test_bench_light_model_percentiles_throughput_and_by_op(capsys):
    assert main(["bench", LIGHT, "--providers", "cpu", "--repeat", "2", "--warmup", "0", "--by-op"]) == 0
    out = capsys.readouterr().out
    assert "over 2 runs" in out
    spread = next(line for line in out.splitlines() if line.startswith("latency ms:")).split()
    values = dict(zip(spread[2::2], map(float, spread[3::2])))
    assert values["min"] <= values["p50"] <= values["p90"] <= values["p99"] <= values["max"]
    assert "samples/s (batch 1)" in out
    table = out.split("op type")[1].splitlines()[1:]
    rows = {line.split()[0]: int(line.split()[3]) for line in table if line.strip() and line.split()[0] != "(outside"}
    # ms_ops fuses Conv + Relu into FusedConv where it is installed; all 26 convolutions run either way.
    assert rows.get("Conv", 0) + rows.get("FusedConv", 0) == 26


def test_bench_shows_progress_on_a_terminal_and_stops_on_ctrl_c(monkeypatch, capsys):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert main(["bench", LIGHT, "--providers", "cpu", "--repeat", "2", "--warmup", "0"]) == 0
    assert "benchmarking" in terminal.getvalue() and "run" in terminal.getvalue()

    calls = []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr("sys.stderr", io.StringIO())
    monkeypatch.setattr(_bench.InferenceSession, "run", interrupted)
    assert main(["bench", LIGHT, "--providers", "cpu", "--repeat", "50"]) == 130
    assert calls == [1]
    assert sys.stderr.getvalue() == "onnxplug bench: interrupted\n"
