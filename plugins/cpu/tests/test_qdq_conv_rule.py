"""The ``cpu.qdq_conv`` rule set (``onnxplug_cpu.rules_qdq``): a QDQ model's convolutions become
QLinearConv where the CPU computes them in int8 (AVX-512 VNNI), with results that agree with
the float QDQ computation and with onnxruntime (which makes the same rewrite) within one
quantization step; without VNNI, or with it turned off, the model keeps its float convolutions
and the weights' DequantizeLinear is folded as before (``RuleSet.keeps_unfolded``)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug
from onnxplug.quantization import QuantFormat, quantize_static
from onnxplug_cpu.kernels import _vnni

needs_vnni = pytest.mark.skipif(
    not _vnni.available(),
    reason="the rule only fires where the int8 path runs: a CPU with AVX-512 VNNI and numba",
)
SHAPE = (2, 3, 20, 20)


def _float_model(path):
    """Conv+Relu → Conv+Relu → 1×1 Conv + residual Add (the residual reads the same
    DequantizeLinear as the 1×1 Conv) → Relu → a strided Conv."""
    rng = np.random.default_rng(0)
    inits = {
        "w1": rng.normal(0, 0.3, (8, 3, 3, 3)),
        "b1": rng.normal(0, 0.1, (8,)),
        "w2": rng.normal(0, 0.15, (16, 8, 3, 3)),
        "b2": rng.normal(0, 0.1, (16,)),
        "w3": rng.normal(0, 0.2, (16, 16, 1, 1)),
        "b3": rng.normal(0, 0.1, (16,)),
        "w4": rng.normal(0, 0.1, (12, 16, 3, 3)),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"]),
        helper.make_node("Add", ["c3", "r2"], ["s"]),
        helper.make_node("Relu", ["s"], ["r3"]),
        helper.make_node("Conv", ["r3", "w4"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


class _Reader:
    def __init__(self, count):
        rng = np.random.default_rng(1)
        self.items = [{"x": rng.normal(0, 1, SHAPE).astype(np.float32)} for _ in range(count)]

    def get_next(self):
        return self.items.pop() if self.items else None


@pytest.fixture(scope="module", params=[False, True], ids=["per-tensor", "per-channel"])
def qdq_model(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("qdq")
    _float_model(folder / "float.onnx")
    out = folder / "qdq.onnx"
    quantize_static(
        str(folder / "float.onnx"), str(out), _Reader(8), quant_format=QuantFormat.QDQ, per_channel=request.param
    )
    return out


def _optimized(path, tmp_path, monkeypatch, vnni: bool):
    monkeypatch.setenv("ONNXPLUG_CPU_VNNI", "1" if vnni else "0")
    options = onnxplug.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / f"optimized_{vnni}.onnx")
    session = onnxplug.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    model = onnx.load(options.optimized_model_filepath)
    return session, model


def _ops(model):
    return [node.op_type for node in model.graph.node]


def _feeds():
    return {"x": np.random.default_rng(7).normal(0, 1, SHAPE).astype(np.float32)}


def _step(model):
    """The output DequantizeLinear's scale: one quantization step of the output."""
    node = next(n for n in model.graph.node if n.output[0] == "y")
    scales = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return float(scales[node.input[1]])


@needs_vnni
def test_convolutions_become_qlinear_conv(qdq_model, tmp_path, monkeypatch):
    session, model = _optimized(qdq_model, tmp_path, monkeypatch, vnni=True)
    ops = _ops(model)
    assert ops.count("QLinearConv") == 4 and "Conv" not in ops
    # The residual Add still reads DequantizeLinear outputs; the weights' ones are gone.
    producers = {out: node.op_type for node in model.graph.node for out in node.output}
    add = next(n for n in model.graph.node if n.op_type == "Add")
    assert [producers.get(name) for name in add.input] == ["DequantizeLinear", "DequantizeLinear"]
    constants = {t.name for t in model.graph.initializer}
    assert not [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in constants]

    got = session.run(None, _feeds())[0]
    float_path = _optimized(qdq_model, tmp_path, monkeypatch, vnni=False)[0].run(None, _feeds())[0]
    oracle = ort.InferenceSession(str(qdq_model), providers=["CPUExecutionProvider"]).run(None, _feeds())[0]
    step = _step(model)
    # Integer sums against float ones: at most one step apart, and on few elements.
    for other in (float_path, oracle):
        differ = np.abs(got - other) > step / 2
        assert np.abs(got - other).max() <= 1.01 * step
        assert differ.mean() < 0.02


def test_without_vnni_the_weights_are_folded_and_convolutions_stay(qdq_model, tmp_path, monkeypatch):
    session, model = _optimized(qdq_model, tmp_path, monkeypatch, vnni=False)
    ops = _ops(model)
    constants = {t.name for t in model.graph.initializer}
    assert ops.count("Conv") == 4 and "QLinearConv" not in ops
    assert not [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in constants]
    oracle = ort.InferenceSession(str(qdq_model), providers=["CPUExecutionProvider"]).run(None, _feeds())[0]
    assert np.abs(session.run(None, _feeds())[0] - oracle).max() <= 1.01 * _step(model)


@needs_vnni
def test_grouped_convolution_is_left_to_the_float_path(tmp_path, monkeypatch):
    """A grouped QDQ Conv would run QLinearConv off the int8 path (slower than float): not rewritten."""
    rng = np.random.default_rng(3)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], group=3, pads=[1, 1, 1, 1])],
        "grouped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(rng.normal(0, 0.3, (6, 1, 3, 3)).astype(np.float32), "w")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "g.onnx"))
    quantize_static(str(tmp_path / "g.onnx"), str(tmp_path / "gq.onnx"), _Reader(4), quant_format=QuantFormat.QDQ)
    _, model = _optimized(tmp_path / "gq.onnx", tmp_path, monkeypatch, vnni=True)
    assert "QLinearConv" not in _ops(model) and "Conv" in _ops(model)
