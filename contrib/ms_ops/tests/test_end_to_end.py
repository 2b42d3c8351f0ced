"""Models that onnxruntime's optimizer rewrote into com.microsoft ops run on onnxplug.

Each model is built here with onnx.helper, optimized by onnxruntime at ORT_ENABLE_EXTENDED with
``SessionOptions.optimized_model_filepath``, checked to contain contrib ops, and the saved model
is run on onnxplug and compared with onnxruntime's results.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest

import onnxplug

F = onnx.TensorProto.FLOAT
I64 = onnx.TensorProto.INT64


class _Builder:
    def __init__(self, rng):
        self.rng = rng
        self.nodes, self.inits = [], []
        self.count = 0

    def name(self, base):
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, value, base="c"):
        name = self.name(base)
        self.inits.append(onh.from_array(np.asarray(value), name))
        return name

    def weight(self, *shape, scale=None):
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), "w")

    def op(self, op_type, *inputs, **attrs):
        out = self.name(op_type.lower())
        self.nodes.append(oh.make_node(op_type, list(inputs), [out], name=out, **attrs))
        return out

    def linear(self, x, d_in, d_out):
        return self.op("Add", self.op("MatMul", x, self.weight(d_in, d_out)), self.weight(d_out, scale=0.1))

    def layer_norm(self, x, d):
        gamma = self.const((1 + 0.1 * self.rng.standard_normal(d)).astype(np.float32), "gamma")
        beta = self.const((0.1 * self.rng.standard_normal(d)).astype(np.float32), "beta")
        return self.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=1e-12)


def _bert_model(rng, *, batch, seq, vocab=60, max_pos=32, hidden=32, heads=4, layers=2, ffn=64):
    b = _Builder(rng)
    head = hidden // heads
    word = b.const((rng.standard_normal((vocab, hidden)) * 0.5).astype(np.float32), "word_emb")
    pos = b.const((rng.standard_normal((max_pos, hidden)) * 0.5).astype(np.float32), "pos_emb")
    seg = b.const((rng.standard_normal((2, hidden)) * 0.5).astype(np.float32), "seg_emb")
    # Static shapes: onnxruntime fuses (SkipLayerNormalization, Attention) only where it can
    # prove the operands' shapes equal.
    positions = b.const(np.arange(seq, dtype=np.int64)[None, :], "position_ids")
    x = b.op(
        "Add",
        b.op("Add", b.op("Gather", word, "input_ids"), b.op("Gather", pos, positions)),
        b.op("Gather", seg, "token_type_ids"),
    )
    x = b.layer_norm(x, hidden)
    # additive mask: (1 - mask) * -10000, shape (B, 1, 1, S)
    mask = b.op("Unsqueeze", "attention_mask", b.const(np.array([1], np.int64)))
    mask = b.op("Unsqueeze", mask, b.const(np.array([2], np.int64)))
    mask = b.op("Cast", mask, to=F)
    mask = b.op("Mul", b.op("Sub", b.const(np.array(1.0, np.float32)), mask), b.const(np.array(-10000.0, np.float32)))
    split_shape = b.const(np.array([0, 0, heads, head], np.int64))
    merge_shape = b.const(np.array([0, 0, hidden], np.int64))
    for _ in range(layers):
        q = b.op("Transpose", b.op("Reshape", b.linear(x, hidden, hidden), split_shape), perm=[0, 2, 1, 3])
        k = b.op("Transpose", b.op("Reshape", b.linear(x, hidden, hidden), split_shape), perm=[0, 2, 3, 1])
        v = b.op("Transpose", b.op("Reshape", b.linear(x, hidden, hidden), split_shape), perm=[0, 2, 1, 3])
        scores = b.op("Div", b.op("MatMul", q, k), b.const(np.array(np.sqrt(head), np.float32)))
        probs = b.op("Softmax", b.op("Add", scores, mask), axis=-1)
        context = b.op("Reshape", b.op("Transpose", b.op("MatMul", probs, v), perm=[0, 2, 1, 3]), merge_shape)
        x = b.layer_norm(b.op("Add", b.linear(context, hidden, hidden), x), hidden)
        h = b.linear(x, hidden, ffn)
        erf = b.op("Erf", b.op("Div", h, b.const(np.array(1.4142135381698608, np.float32))))
        h = b.op(
            "Mul",
            b.op("Mul", h, b.op("Add", erf, b.const(np.array(1.0, np.float32)))),
            b.const(np.array(0.5, np.float32)),
        )
        x = b.layer_norm(b.op("Add", b.linear(h, ffn, hidden), x), hidden)
    b.nodes.append(oh.make_node("Identity", [x], ["last_hidden_state"]))
    graph = oh.make_graph(
        b.nodes,
        "bert",
        [
            oh.make_tensor_value_info("input_ids", I64, [batch, seq]),
            oh.make_tensor_value_info("token_type_ids", I64, [batch, seq]),
            oh.make_tensor_value_info("attention_mask", I64, [batch, seq]),
        ],
        [oh.make_tensor_value_info("last_hidden_state", F, [batch, seq, hidden])],
        initializer=b.inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=9)


def _conv_model(rng):
    b = _Builder(rng)
    x = "image"
    channels = 3
    for out_channels in (8, 16):
        w = b.const((rng.standard_normal((out_channels, channels, 3, 3)) * 0.3).astype(np.float32), "conv_w")
        conv = b.op("Conv", x, w, b.weight(out_channels, scale=0.1), pads=[1, 1, 1, 1], kernel_shape=[3, 3])
        bn = b.op(
            "BatchNormalization",
            conv,
            b.const((1 + 0.1 * rng.standard_normal(out_channels)).astype(np.float32)),
            b.const((0.1 * rng.standard_normal(out_channels)).astype(np.float32)),
            b.const((0.1 * rng.standard_normal(out_channels)).astype(np.float32)),
            b.const((1 + rng.random(out_channels)).astype(np.float32)),
            epsilon=1e-5,
        )
        x = b.op("Relu", bn)
        channels = out_channels
    x = b.op("MaxPool", x, kernel_shape=[2, 2], strides=[2, 2])
    x = b.op("Flatten", b.op("GlobalAveragePool", x), axis=1)
    x = b.op("Relu", b.op("Gemm", x, b.weight(channels, 32), b.weight(32, scale=0.1)))
    x = b.op("Gemm", x, b.weight(10, 32), b.weight(10, scale=0.1), transB=1)
    b.nodes.append(oh.make_node("Identity", [x], ["logits"]))
    graph = oh.make_graph(
        b.nodes,
        "convnet",
        [oh.make_tensor_value_info("image", F, ["batch", 3, 16, 16])],
        [oh.make_tensor_value_info("logits", F, ["batch", 10])],
        initializer=b.inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=9)


def _optimize(ort, model, path):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(path)
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return onnx.load(str(path))


def _op_counts(model):
    return collections.Counter((n.domain or "ai.onnx", n.op_type) for n in model.graph.node)


def _compare(ort, path, feeds):
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    session = onnxplug.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ours = session.run(None, feeds)
    assert session.get_providers() == ["CPUExecutionProvider"]
    for got, want in zip(ours, theirs):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_bert_encoder_optimized_by_onnxruntime(ort, rng, tmp_path):
    path = tmp_path / "bert_optimized.onnx"
    batch, seq = 3, 11
    optimized = _optimize(ort, _bert_model(rng, batch=batch, seq=seq), path)
    counts = _op_counts(optimized)
    contrib = {op for (domain, op) in counts if domain == "com.microsoft"}
    assert {"SkipLayerNormalization", "Gelu"} <= contrib, counts
    mask = np.ones((batch, seq), dtype=np.int64)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    feeds = {
        "input_ids": rng.integers(0, 60, size=(batch, seq)).astype(np.int64),
        "token_type_ids": (np.arange(seq)[None, :] >= 5).astype(np.int64).repeat(batch, axis=0),
        "attention_mask": mask,
    }
    _compare(ort, path, feeds)


def test_bert_encoder_fused_by_onnxruntime_transformers(ort, rng, tmp_path):
    # onnxruntime's offline transformer optimizer fuses what its session optimizer leaves:
    # Attention (with the mask as mask_index) and EmbedLayerNormalization.
    optimizer = pytest.importorskip("onnxruntime.transformers.optimizer")
    batch, seq = 3, 11
    result = optimizer.optimize_model(
        _bert_model(rng, batch=batch, seq=seq), model_type="bert", num_heads=4, hidden_size=32, opt_level=0
    )
    path = tmp_path / "bert_fused.onnx"
    result.save_model_to_file(str(path))  # adds the com.microsoft opset import
    fused = onnx.load(str(path))
    contrib = {op for (domain, op) in _op_counts(fused) if domain == "com.microsoft"}
    assert {"Attention", "EmbedLayerNormalization", "SkipLayerNormalization", "BiasGelu"} <= contrib, contrib
    mask = np.ones((batch, seq), dtype=np.int64)
    mask[0, 9:] = 0
    mask[2, 3:] = 0
    feeds = {
        "input_ids": rng.integers(0, 60, size=(batch, seq)).astype(np.int64),
        "token_type_ids": (np.arange(seq)[None, :] >= 4).astype(np.int64).repeat(batch, axis=0),
        "attention_mask": mask,
    }
    _compare(ort, path, feeds)


def test_conv_net_optimized_by_onnxruntime(ort, rng, tmp_path):
    path = tmp_path / "convnet_optimized.onnx"
    optimized = _optimize(ort, _conv_model(rng), path)
    counts = _op_counts(optimized)
    assert ("com.microsoft", "FusedConv") in counts, counts
    assert ("ai.onnx", "BatchNormalization") not in counts, counts
    _compare(ort, path, {"image": rng.standard_normal((4, 3, 16, 16)).astype(np.float32)})


def _rms_norm_model(rng, hidden=32):
    b = _Builder(rng)
    two, axes = b.const(np.array(2.0, np.float32)), b.const(np.array([-1], np.int64))
    eps = b.const(np.array(1e-6, np.float32))
    x = "x"
    for _ in range(2):  # LLaMA-style RMSNorm, then a residual branch, then RMSNorm again
        scale = b.const((1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32), "scale")
        rms = b.op("Sqrt", b.op("Add", b.op("ReduceMean", b.op("Pow", x, two), axes, keepdims=1), eps))
        normed = b.op("Mul", scale, b.op("Div", x, rms))
        x = b.op("Add", b.linear(normed, hidden, hidden), x)
    b.nodes.append(oh.make_node("Identity", [x], ["y"]))
    graph = oh.make_graph(
        b.nodes,
        "rms",
        [oh.make_tensor_value_info("x", F, [2, 7, hidden])],
        [oh.make_tensor_value_info("y", F, [2, 7, hidden])],
        initializer=b.inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=9)


def test_rms_norm_optimized_by_onnxruntime(ort, rng, tmp_path):
    # onnxruntime's optimizer emits SimplifiedLayerNormalization in the default ONNX domain.
    path = tmp_path / "rms_optimized.onnx"
    counts = _op_counts(_optimize(ort, _rms_norm_model(rng), path))
    assert counts[("ai.onnx", "SimplifiedLayerNormalization")] == 2, counts
    _compare(ort, path, {"x": rng.standard_normal((2, 7, 32)).astype(np.float32)})


def _bert_feeds(rng, batch, seq):
    mask = np.ones((batch, seq), dtype=np.int64)
    mask[1, 6:] = 0
    return {
        "input_ids": rng.integers(0, 60, size=(batch, seq)).astype(np.int64),
        "token_type_ids": (np.arange(seq)[None, :] >= 5).astype(np.int64).repeat(batch, axis=0),
        "attention_mask": mask,
    }


def test_dynamically_quantized_bert(ort, rng, tmp_path):
    # quantize_dynamic writes MatMulInteger + DynamicQuantizeLinear; the optimizer fuses them into
    # DynamicQuantizeMatMul and MatMulIntegerToFloat.
    quantization = pytest.importorskip("onnxruntime.quantization")
    batch, seq = 3, 11
    source, quantized = tmp_path / "bert.onnx", tmp_path / "bert_int8.onnx"
    onnx.save(_bert_model(rng, batch=batch, seq=seq), str(source))
    quantization.quantize_dynamic(str(source), str(quantized), weight_type=quantization.QuantType.QInt8)
    path = tmp_path / "bert_int8_optimized.onnx"
    counts = _op_counts(_optimize(ort, onnx.load(str(quantized)), path))
    assert {("com.microsoft", "DynamicQuantizeMatMul"), ("com.microsoft", "MatMulIntegerToFloat")} <= set(counts)
    _compare(ort, path, _bert_feeds(rng, batch, seq))


def test_4bit_weight_only_quantized_bert(ort, rng, tmp_path):
    nbits = pytest.importorskip("onnxruntime.quantization.matmul_nbits_quantizer")
    batch, seq = 3, 11
    quantizer = nbits.MatMulNBitsQuantizer(_bert_model(rng, batch=batch, seq=seq), block_size=16, is_symmetric=False)
    quantizer.process()
    path = tmp_path / "bert_q4.onnx"
    quantizer.model.save_model_to_file(str(path))
    assert ("com.microsoft", "MatMulNBits") in _op_counts(onnx.load(str(path)))
    _compare(ort, path, _bert_feeds(rng, batch, seq))


def test_model_saved_at_enable_all_is_refused_as_not_portable(ort, rng, tmp_path):
    # At ORT_ENABLE_ALL onnxruntime rewrites convolutions into its machine-specific NCHWc layout
    # (com.microsoft.nchwc ops); onnxplug refuses such a model, saying what it is and what to do.
    path = tmp_path / "convnet_all.onnx"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(path)
    ort.InferenceSession(_conv_model(rng).SerializeToString(), options, providers=["CPUExecutionProvider"])
    domains = {domain for domain, _ in _op_counts(onnx.load(str(path)))}
    if "com.microsoft.nchwc" not in domains:
        pytest.skip(f"onnxruntime wrote no NCHWc ops on this machine (no AVX2/NEON blocking): {sorted(domains)}")
    with pytest.raises(onnxplug.NotImplemented) as info:
        onnxplug.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    message = str(info.value)
    assert "com.microsoft.nchwc:" in message and "NCHWc" in message and "machine" in message
    assert "ORT_ENABLE_EXTENDED" in message
