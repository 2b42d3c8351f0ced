"""The embedded demo through `onnxplug run`'s real code path."""

from __future__ import annotations

import re

import numpy as np

from onnxplug.cli import main


def test_demo_accuracy(capsys):
    assert main(["run"]) == 0
    out = capsys.readouterr().out
    correct, total = map(int, re.search(r"accuracy: (\d+)/(\d+)", out).groups())
    assert total >= 10
    assert correct / total >= 0.9
    assert re.search(r"median latency: [\d.]+ ms", out)
    assert "CPUExecutionProvider: 5 nodes" in out
    assert len(re.findall(r"sample +\d+: predicted \d \(p=[\d.]+\), true \d", out)) == total


def test_run_any_model_with_random_and_given_inputs(tmp_path, capsys):
    import importlib.resources

    model = importlib.resources.files("onnxplug") / "demo" / "digits.onnx"
    pixels = tmp_path / "pixels.npy"
    np.save(pixels, np.zeros((2, 64), np.float32))
    with importlib.resources.as_file(model) as path:
        assert main(["run", str(path), "--dim", "batch=5", "--repeat", "3"]) == 0
        out = capsys.readouterr().out
        assert "probabilities: float32 [5, 10]" in out
        assert "label: int64 [5]" in out
        assert "over 3 run(s)" in out
        assert main(["run", str(path), "--input", f"pixels={pixels}"]) == 0
        assert "probabilities: float32 [2, 10]" in capsys.readouterr().out
        assert main(["run", str(path), "--input", f"nope={pixels}"]) == 1
        assert "no input named 'nope'" in capsys.readouterr().err


def test_plugins_command(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "cpu  [onnxplug-cpu" in out
    assert "CPUExecutionProvider" in out
