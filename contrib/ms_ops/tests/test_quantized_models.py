"""Models quantized by onnxruntime's tools run on onnxplug as on onnxruntime.

Each float model is built with onnx.helper, quantized with ``quantize_static`` (QOperator
format, and QDQ format that onnxruntime's optimizer then fuses into QLinear ops) or
``quantize_dynamic``, checked to contain the com.microsoft ops it is meant to exercise, and
run on both.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import onnxplug

from .test_end_to_end import _bert_feeds, _bert_model, _Builder

F = onnx.TensorProto.FLOAT


@pytest.fixture
def quantization():
    return pytest.importorskip("onnxruntime.quantization")


def _conv_net(rng):
    b = _Builder(rng)
    w1 = b.const((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    y = b.op("Relu", b.op("Conv", "image", w1, b.weight(8, scale=0.1), pads=[1, 1, 1, 1]))
    w2 = b.const((rng.standard_normal((8, 4, 3, 3)) * 0.3).astype(np.float32), "w")
    z = b.op("Add", b.op("Sigmoid", b.op("Conv", y, w2, b.weight(8, scale=0.1), pads=[1, 1, 1, 1], group=2)), y)
    z = b.op("Mul", b.op("LeakyRelu", z, alpha=0.1), y)
    z = b.op("AveragePool", z, kernel_shape=[2, 2], strides=[2, 2])
    z = b.op("Concat", z, b.op("MaxPool", z, kernel_shape=[3, 3], pads=[1, 1, 1, 1]), axis=1)
    z = b.op("Flatten", b.op("GlobalAveragePool", z), axis=1)
    logits = b.op("Gemm", z, b.weight(16, 10), b.weight(10, scale=0.1))
    probs = b.op("Softmax", logits, axis=-1)
    floor = b.const(np.full((1, 10), 0.05, np.float32))
    out = b.op("Where", b.op("Greater", probs, b.const(np.array(0.1, np.float32))), probs, floor)
    b.nodes.append(oh.make_node("Identity", [out], ["probs"]))
    graph = oh.make_graph(
        b.nodes,
        "convnet",
        [oh.make_tensor_value_info("image", F, [2, 3, 16, 16])],
        [oh.make_tensor_value_info("probs", F, [2, 10])],
        initializer=b.inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=9)


class _Reader:
    def __init__(self, feeds):
        self._feeds = iter(feeds)

    def get_next(self):
        return next(self._feeds, None)


def _contrib(path):
    return collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node if n.domain == "com.microsoft")


def _optimize(ort, source, path, level="ORT_ENABLE_EXTENDED"):
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    options.optimized_model_filepath = str(path)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    return path


def _compare(ort, path, feeds, *, atol=1e-5):
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    ours = onnxplug.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, want in zip(ours, theirs):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol)


# What onnxruntime writes (QOperator) or fuses from QDQ (uint8 activations; it fuses less for int8).
_CONV_QOPS = {
    ("QOperator", "QUInt8"): {
        "QGemm",
        "QLinearAdd",
        "QLinearMul",
        "QLinearSigmoid",
        "QLinearLeakyRelu",
        "QLinearAveragePool",
        "QLinearConcat",
        "QLinearGlobalAveragePool",
        "QLinearSoftmax",
    },
    ("QDQ", "QUInt8"): {
        "QGemm",
        "QLinearAdd",
        "QLinearMul",
        "QLinearSigmoid",
        "QLinearLeakyRelu",
        "QLinearAveragePool",
        "QLinearConcat",
        "QLinearGlobalAveragePool",
        "QLinearSoftmax",
    },
    ("QOperator", "QInt8"): {
        "QGemm",
        "QLinearAdd",
        "QLinearMul",
        "QLinearSigmoid",
        "QLinearLeakyRelu",
        "QLinearAveragePool",
        "QLinearConcat",
        "QLinearGlobalAveragePool",
        "QLinearSoftmax",
    },
    ("QDQ", "QInt8"): {"QGemm", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearGlobalAveragePool"},
}
# quantize_static's QOperator Where handling loses track of a Where fed by an unquantized
# tensor ("unknown initializers/tensors"), so Where stays float there.
_QOPERATOR_TYPES = [
    "Conv",
    "Relu",
    "Add",
    "Sigmoid",
    "Mul",
    "LeakyRelu",
    "AveragePool",
    "Concat",
    "MaxPool",
    "GlobalAveragePool",
    "Flatten",
    "Gemm",
    "Softmax",
]


@pytest.mark.parametrize("fmt", ["QOperator", "QDQ"])
@pytest.mark.parametrize("activation", ["QUInt8", "QInt8"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_statically_quantized_conv_net(ort, quantization, rng, tmp_path, fmt, activation, per_channel):
    source, quantized = tmp_path / "conv.onnx", tmp_path / "conv_q.onnx"
    onnx.save(_conv_net(rng), str(source))
    feeds = [{"image": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    quantization.quantize_static(
        str(source),
        str(quantized),
        _Reader(feeds),
        quant_format=getattr(quantization.QuantFormat, fmt),
        activation_type=getattr(quantization.QuantType, activation),
        weight_type=quantization.QuantType.QInt8,
        per_channel=per_channel,
        op_types_to_quantize=_QOPERATOR_TYPES if fmt == "QOperator" else None,
    )
    path = _optimize(ort, quantized, tmp_path / "conv_q_opt.onnx")
    ops = _contrib(path)
    assert _CONV_QOPS[fmt, activation] <= set(ops), ops
    _compare(ort, path, {"image": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)})


@pytest.mark.parametrize("fmt", ["QOperator", "QDQ"])
def test_quantized_conv_net_saved_at_enable_all(ort, quantization, rng, tmp_path, fmt):
    # At ORT_ENABLE_ALL onnxruntime's NHWC transformer rewrites the quantized convolutions into
    # channels-last com.microsoft QLinearConv (and pools into their NHWC forms) between
    # Transposes: a layout change, not a machine-specific one, so the saved model runs here.
    source, quantized = tmp_path / "conv.onnx", tmp_path / "conv_q.onnx"
    onnx.save(_conv_net(rng), str(source))
    feeds = [{"image": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    quantization.quantize_static(
        str(source),
        str(quantized),
        _Reader(feeds),
        quant_format=getattr(quantization.QuantFormat, fmt),
        activation_type=quantization.QuantType.QUInt8,
        weight_type=quantization.QuantType.QInt8,
        op_types_to_quantize=_QOPERATOR_TYPES,
    )
    path = _optimize(ort, quantized, tmp_path / "conv_q_all.onnx", level="ORT_ENABLE_ALL")
    model = onnx.load(str(path))
    assert not any(n.domain == "com.microsoft.nchwc" for n in model.graph.node)
    channels_last = [n for n in model.graph.node if n.domain == "com.microsoft" and n.op_type == "QLinearConv"]
    assert channels_last and all(
        onnx.helper.get_attribute_value(a) == 1 for n in channels_last for a in n.attribute if a.name == "channels_last"
    )
    _compare(ort, path, {"image": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)})


def test_qdq_contrib_ops_16_bit(ort, quantization, rng, tmp_path):
    # UseQDQContribOps writes com.microsoft QuantizeLinear/DequantizeLinear (16-bit activations).
    source, quantized = tmp_path / "conv.onnx", tmp_path / "conv_q16.onnx"
    onnx.save(_conv_net(rng), str(source))
    feeds = [{"image": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)} for _ in range(3)]
    quantization.quantize_static(
        str(source),
        str(quantized),
        _Reader(feeds),
        quant_format=quantization.QuantFormat.QDQ,
        activation_type=quantization.QuantType.QUInt16,
        weight_type=quantization.QuantType.QInt8,
        extra_options={"UseQDQContribOps": True},
    )
    assert {"QuantizeLinear", "DequantizeLinear"} <= set(_contrib(quantized))
    # Both run the model onnxruntime optimized: at run time it would otherwise fuse the weights'
    # DequantizeLinear + Gemm into an int8-activation MatMulNBits that the saved model lacks.
    path = _optimize(ort, quantized, tmp_path / "conv_q16_opt.onnx")
    assert {"QuantizeLinear", "DequantizeLinear", "MatMulNBits"} <= set(_contrib(path))
    _compare(ort, path, {"image": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)}, atol=1e-4)


def _mlp(rng):
    b = _Builder(rng)
    h = b.op("Relu", b.op("Gemm", "x", b.weight(16, 32), b.weight(32, scale=0.1)))
    h = b.op("Add", b.op("Gemm", h, b.weight(32, 8), b.weight(8, scale=0.1)), b.op("Gemm", "x", b.weight(16, 8)))
    b.nodes.append(oh.make_node("Softmax", [h], ["y"], axis=1))
    graph = oh.make_graph(
        b.nodes,
        "mlp",
        [oh.make_tensor_value_info("x", F, [5, 16])],
        [oh.make_tensor_value_info("y", F, [5, 8])],
        initializer=b.inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("activation", ["QUInt8", "QInt8"])
def test_statically_quantized_mlp(ort, quantization, rng, tmp_path, activation):
    source, quantized = tmp_path / "mlp.onnx", tmp_path / "mlp_q.onnx"
    onnx.save(_mlp(rng), str(source))
    feeds = [{"x": rng.standard_normal((5, 16)).astype(np.float32)} for _ in range(4)]
    quantization.quantize_static(
        str(source),
        str(quantized),
        _Reader(feeds),
        quant_format=quantization.QuantFormat.QOperator,
        activation_type=getattr(quantization.QuantType, activation),
        weight_type=quantization.QuantType.QInt8,
    )
    assert {"QGemm", "QLinearSoftmax"} <= set(_contrib(quantized))
    _compare(ort, quantized, {"x": rng.standard_normal((5, 16)).astype(np.float32)})


@pytest.mark.parametrize("weight_type", ["QInt8", "QUInt8"])
def test_dynamically_quantized_fused_bert(ort, quantization, rng, tmp_path, weight_type):
    # The transformer optimizer fuses Attention and EmbedLayerNormalization; quantize_dynamic
    # turns them into QAttention and QEmbedLayerNormalization.
    optimizer = pytest.importorskip("onnxruntime.transformers.optimizer")
    batch, seq = 3, 11
    fused = optimizer.optimize_model(
        _bert_model(rng, batch=batch, seq=seq), model_type="bert", num_heads=4, hidden_size=32, opt_level=0
    )
    source, quantized = tmp_path / "bert_fused.onnx", tmp_path / "bert_fused_int8.onnx"
    fused.save_model_to_file(str(source))
    quantization.quantize_dynamic(
        str(source),
        str(quantized),
        weight_type=getattr(quantization.QuantType, weight_type),
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )
    assert {"QAttention", "QEmbedLayerNormalization"} <= set(_contrib(quantized))
    _compare(ort, quantized, _bert_feeds(rng, batch, seq), atol=1e-4)
