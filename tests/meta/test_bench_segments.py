"""``scripts/bench_segments.py``: segments on and off against onnxruntime, on a small model."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime")

SCRIPT = "bench_segments"  # (loaded by conftest.script)


@pytest.fixture(scope="module")
def bench_segments(script):
    return script


def _two_convolutions() -> bytes:
    rng = np.random.default_rng(2)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((8, 8, 1, 1)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["h", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_model_is_measured_with_and_without_its_segments(bench_segments):
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 4, 10, 10)).astype(np.float32)}
    row = bench_segments.measure("two", _two_convolutions(), feeds, threads=1, rounds=1)
    assert row["segments"] == [2] and row["same bits"]
    assert row["on"] > 0 and row["off"] > 0 and row["onnxruntime"] > 0
    assert row["on/off"] == pytest.approx(row["on"] / row["off"])
