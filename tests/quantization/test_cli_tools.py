"""The model-tool commands: inspect, quantize, validate (with a planted wrong kernel), the
``python -m`` entry points and Ctrl-C."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxplug
from onnxplug.cli import _validate, main
from onnxplug.testing.fakes import wrong_kernel_plugin
from onnxplug.tools import check_model_usability
from onnxplug.tools.validate import first_divergence, random_feeds

sys.path.insert(0, str(Path(__file__).parent))
import models


@pytest.fixture
def cnn_path(tmp_path):
    model, _ = models.cnn(np.random.default_rng(0))
    path = tmp_path / "cnn.onnx"
    onnx.save(model, str(path))
    return path


def _wrong_env():
    env = onnxplug.Environment()
    plugin = wrong_kernel_plugin("Relu", name="wrong")
    env.register(plugin, name="wrong")
    return env, plugin


def test_first_divergence_finds_the_planted_wrong_kernel(cnn_path):
    env, plugin = _wrong_env()
    feeds = random_feeds(onnx.load(str(cnn_path)), 2)
    found = first_divergence(str(cnn_path), ["wrong"], ["CPUExecutionProvider"], feeds, environment=env)
    assert plugin.factory.calls["Relu"] > 0  # the wrong provider really ran
    assert (found.node, found.op_type, found.output, found.sample) == ("relu1", "Relu", "r1", 0)
    assert found.value_a - found.value_b == pytest.approx(1.0, abs=1e-5)
    assert found.mismatched == found.size  # every element is off by the planted error
    assert first_divergence(str(cnn_path), ["cpu"], ["cpu"], feeds, environment=env) is None


def test_validate_command_reports_node_and_values(cnn_path, capsys):
    env, _ = _wrong_env()
    args = argparse.Namespace(
        model=str(cnn_path), providers="wrong,cpu", samples=1, inputs=None, rtol=1e-3, atol=1e-4, seed=0
    )
    assert _validate.run(args, environment=env) == 3
    out = capsys.readouterr().out
    assert "first divergence at node 'relu1' (Relu), output 'r1'" in out and "wrong" in out
    assert main(["validate", str(cnn_path), "--providers", "cpu,cpu", "--samples", "2"]) == 0
    assert "agree on every node output over 2 sample(s)" in capsys.readouterr().out
    assert main(["validate", str(cnn_path), "--providers", "cpu"]) == 1


def test_inspect(cnn_path, capsys):
    assert main(["inspect", str(cnn_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["inputs"] == {"x": "float [2, 3, 16, 16]"} and info["outputs"] == {"y": "float [2, 5]"}
    assert info["ops"]["Conv"] == 3 and info["ops"]["Relu"] == 3 and info["nodes"] == 11
    assert info["opsets"] == {"ai.onnx": models.OPSET} and info["external_data"] == {}
    assert main(["inspect", str(cnn_path)]) == 0
    assert "ops: " in capsys.readouterr().out
    assert main(["inspect", str(cnn_path.parent / "missing.onnx")]) == 1


def test_inspect_reports_external_data(tmp_path, capsys):
    model, _ = models.mlp(np.random.default_rng(0))
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    assert main(["inspect", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["external_data"]["w.bin"] > 0


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_quantize_command_static_from_npy_folder(cnn_path, tmp_path, fmt, capsys):
    folder = tmp_path / "calib"
    folder.mkdir()
    for i, sample in enumerate(models.SampleReader({"x": (2, 3, 16, 16)}, 3, 1).samples):
        np.save(folder / f"x_{i}.npy", sample["x"])
    out = tmp_path / "q.onnx"
    assert main(["quantize", str(cnn_path), "-o", str(out), "--calibration", str(folder), "--format", fmt]) == 0
    assert f"({fmt}, MinMax over 3 samples)" in capsys.readouterr().out
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert ("QLinearConv" if fmt == "QOperator" else "QuantizeLinear") in ops
    onnxplug.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.load(folder / "x_0.npy")}
    )


def test_quantize_command_dynamic_and_bad_folder(cnn_path, tmp_path):
    out = tmp_path / "d.onnx"
    assert main(["quantize", str(cnn_path), "-o", str(out)]) == 0
    assert "ConvInteger" in {n.op_type for n in onnx.load(str(out)).graph.node}
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["quantize", str(cnn_path), "-o", str(out), "--calibration", str(empty)]) == 1


def test_python_dash_m_onnxplug_runs_the_command(cnn_path):
    result = subprocess.run(
        [sys.executable, "-m", "onnxplug", "inspect", str(cnn_path), "--json"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["nodes"] == 11


def test_ctrl_c_is_a_clean_exit(monkeypatch, cnn_path, capsys):
    from onnxplug.cli import _inspect

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(_inspect, "run", interrupted)
    assert main(["inspect", str(cnn_path)]) == 130
    assert "onnxplug inspect: interrupted" in capsys.readouterr().err


def test_check_model_usability_without_and_with_a_planner(monkeypatch, cnn_path, capsys):
    monkeypatch.setattr(check_model_usability, "_PLANNER_MODULE", "onnxplug_missing_planner_for_test")
    assert check_model_usability.main([str(cnn_path), "--target", "nnapi"]) == 2
    assert "planning for target 'nnapi' is not installed" in capsys.readouterr().err
    seen = {}
    planner = types.ModuleType("fake_planner_for_test")
    planner.check_usability = lambda model, target, argv: seen.update(model=model, target=target) or 0
    monkeypatch.setitem(sys.modules, "fake_planner_for_test", planner)
    monkeypatch.setattr(check_model_usability, "_PLANNER_MODULE", "fake_planner_for_test")
    assert check_model_usability.main([str(cnn_path), "--target", "coreml"]) == 0
    assert seen == {"model": str(cnn_path), "target": "coreml"}
