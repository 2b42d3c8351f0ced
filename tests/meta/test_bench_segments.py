"""``scripts/bench_segments.py``: segments on and off against onnxruntime, on a small model."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnxplug.testing import make_model

pytest.importorskip("onnxruntime")

SCRIPT = "bench_segments"  # (loaded by conftest.script)


@pytest.fixture(scope="module")
def bench_segments(script):
    return script


def _two_convolutions() -> bytes:
    rng = np.random.default_rng(2)
    weights = {
        "w1": rng.standard_normal((8, 4, 3, 3)).astype(np.float32),
        "w2": rng.standard_normal((8, 8, 1, 1)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["h", "w2"], ["y"]),
    ]
    inputs, outputs = [("x", TensorProto.FLOAT, [1, 4, 10, 10])], [("y", TensorProto.FLOAT, None)]
    return make_model(nodes, inputs, outputs, weights).SerializeToString()


def test_a_model_is_measured_with_and_without_its_segments(bench_segments):
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 4, 10, 10)).astype(np.float32)}
    row = bench_segments.measure("two", _two_convolutions(), feeds, threads=1, rounds=1)
    assert row["segments"] == [2] and row["same bits"]
    assert row["on"] > 0 and row["off"] > 0 and row["onnxruntime"] > 0
    assert row["on/off"] == pytest.approx(row["on"] / row["off"])
