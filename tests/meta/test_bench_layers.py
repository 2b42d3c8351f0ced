"""``scripts/bench_layers.py``: both runtimes' profiles of one model, compared by kind of node and
by convolution layer (onnxruntime is the comparison, as in ``scripts/bench.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnxplug.testing import make_model

pytest.importorskip("onnxruntime")

SCRIPT = "bench_layers"  # (loaded by conftest.script)


@pytest.fixture(scope="module")
def bench_layers(script):
    return script


def _event(op, x, w=None, out=None, name="n", dur=10.0):
    shapes = [{"float": x}] + ([{"float": w}] if w is not None else [])
    args = {"op_name": op, "input_type_shape": shapes, "output_type_shape": [{"float": out or x}]}
    return {"cat": "Node", "name": name, "dur": dur, "args": args}


def test_convolutions_are_compared_by_kind_and_stride(bench_layers):
    kind = bench_layers.node_kind
    assert kind(_event("FusedConv", [1, 32, 56, 56], [64, 32, 1, 1])) == "pointwise"
    assert kind(_event("Conv", [1, 32, 56, 56], [64, 32, 1, 1], [1, 64, 28, 28])) == "pointwise/s2"
    assert kind(_event("Conv", [1, 96, 56, 56], [96, 1, 3, 3])) == "depthwise"
    assert kind(_event("Conv", [1, 3, 224, 224], [32, 3, 3, 3], [1, 32, 112, 112])) == "stem/s2"
    assert kind(_event("FusedConv", [1, 64, 28, 28], [64, 64, 3, 3])) == "3x3"
    assert kind(_event("MaxPool", [1, 64, 28, 28])) == "MaxPool"


def test_medians_skip_each_nodes_first_runs_and_layers_pair_by_shapes(bench_layers):
    trace = [_event("Conv", [1, 8, 4, 4], [8, 8, 3, 3], name="a", dur=d) for d in (900, 900, 900, 10, 12, 14)]
    trace += [_event("Conv", [1, 8, 4, 4], [8, 8, 3, 3], name="b", dur=d) for d in (900, 900, 900, 30, 30, 30)]
    trace += [_event("Relu", [1, 8, 4, 4], name="r", dur=d) for d in (5, 5, 5, 1, 2, 3)]
    medians = bench_layers.node_medians(trace)
    assert medians["a"][0] == 12 and medians["b"][0] == 30 and medians["r"][0] == 2
    assert bench_layers.by_kind(medians) == {"3x3": (42.0, 2), "Relu": (2.0, 1)}
    # (output channels rounded up to 16, as onnxruntime's NCHWc layers report their weights)
    assert bench_layers.by_layer(medians) == {("3x3", "[1, 8, 4, 4] x [16, 8, 3, 3]"): (21.0, 2)}


def test_a_models_report_names_every_kind_and_the_layers_behind(bench_layers):
    rng = np.random.default_rng(0)
    weights = {f"w{i}": rng.standard_normal((8, 8, 3, 3)).astype(np.float32) for i in range(2)}
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["c1"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    ]
    inputs, outputs = [("x", TensorProto.FLOAT, [1, 8, 16, 16])], [("y", TensorProto.FLOAT, None)]
    data = make_model(nodes, inputs, outputs, weights).SerializeToString()
    feeds = {"x": rng.standard_normal((1, 8, 16, 16)).astype(np.float32)}
    traces = bench_layers.profile_both(data, feeds, runs=2, threads=1, settle=0.0)
    text = bench_layers.report("tiny", traces, layers=3)
    assert text.startswith("tiny: model_run median onnxplug")
    assert "\n3x3 " in text and "\nMaxPool " in text
    assert "convolutions furthest behind" in text and "[1, 8, 16, 16] x [16, 8, 3, 3]" in text
