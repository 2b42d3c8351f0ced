"""MatMulBnb4 (FP4 / NF4 weights) against onnxruntime, and a BERT quantized by
matmul_bnb4_quantizer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnxplug

from .test_end_to_end import _bert_feeds, _bert_model


@pytest.mark.parametrize("quant_type", [0, 1])
@pytest.mark.parametrize("n,k,block", [(8, 32, 16), (5, 21, 32), (16, 64, 64)])  # (5, 21): a partial last block
@pytest.mark.parametrize("constant", [True, False])
def test_matmul_bnb4(run_both, close, rng, quant_type, n, k, block, constant):
    total = n * k
    b = rng.integers(0, 256, size=(total + 1) // 2).astype(np.uint8)
    absmax = (rng.random(-(-total // block)) + 0.5).astype(np.float32)
    a = rng.standard_normal((2, 3, k)).astype(np.float32)
    inputs = [("a", a), ("b", b), ("absmax", absmax)]
    inits = ("b", "absmax") if constant else ()
    attrs = dict(K=k, N=n, block_size=block, quant_type=quant_type)
    close(*run_both("MatMulBnb4", inputs, ["y"], initializers=inits, **attrs), rtol=1e-5, atol=1e-5)


def test_matmul_bnb4_trans_b_0_is_not_implemented(run_ours, rng):
    inputs = [
        ("a", rng.standard_normal((2, 8)).astype(np.float32)),
        ("b", np.zeros(64, np.uint8)),
        ("absmax", np.ones(8, np.float32)),
    ]
    with pytest.raises(onnxplug.NotImplemented, match="transB=0"):
        run_ours("MatMulBnb4", inputs, ["y"], K=16, N=8, block_size=16, quant_type=1, transB=0)


def test_matmul_bnb4_float16(run_both, close, rng):
    n, k, block = 8, 32, 16
    inputs = [
        ("a", rng.standard_normal((4, k)).astype(np.float16)),
        ("b", rng.integers(0, 256, size=n * k // 2).astype(np.uint8)),
        ("absmax", (rng.random(n * k // block) + 0.5).astype(np.float16)),
    ]
    attrs = dict(K=k, N=n, block_size=block, quant_type=1)
    close(*run_both("MatMulBnb4", inputs, ["y"], initializers=("b", "absmax"), **attrs), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("quant_type", ["FP4", "NF4"])
def test_bert_quantized_by_matmul_bnb4_quantizer(ort, rng, tmp_path, quant_type):
    bnb4 = pytest.importorskip("onnxruntime.quantization.matmul_bnb4_quantizer")
    batch, seq = 3, 11
    quantizer = bnb4.MatMulBnb4Quantizer(
        _bert_model(rng, batch=batch, seq=seq), getattr(bnb4.MatMulBnb4Quantizer, quant_type), 32
    )
    quantizer.process()
    path = tmp_path / "bert_bnb4.onnx"
    quantizer.model.save_model_to_file(str(path))
    assert any(n.op_type == "MatMulBnb4" for n in onnx.load(str(path)).graph.node)
    feeds = _bert_feeds(rng, batch, seq)
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    ours = onnxplug.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-4, atol=1e-4)
