"""onnxplug.transformers.optimizer.optimize_model: onnxruntime's signature, fusion statistics
from onnxplug's optimizer stage, and a saved model that computes the same outputs."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxplug
from onnxplug.tools.validate import random_feeds
from onnxplug.transformers.optimizer import optimize_model

FUSIONS = Path(__file__).parents[1] / "data" / "fusions"


def test_signature_matches_onnxruntime():
    ort_optimizer = pytest.importorskip("onnxruntime.transformers.optimizer", reason="the API oracle")
    ours = inspect.signature(optimize_model).parameters
    theirs = inspect.signature(ort_optimizer.optimize_model).parameters
    assert list(ours) == list(theirs)
    assert all(ours[n].default == theirs[n].default for n in ours if n != "input")


@pytest.mark.parametrize(
    ("name", "fused"),
    [("handwritten_layer_norm", "LayerNormalization"), ("new_gelu", "FastGelu"), ("bert_like_block", "BiasGelu")],
)
def test_fusions_counted_and_saved_model_equivalent(name, fused, tmp_path):
    path = FUSIONS / f"{name}.torchscript.onnx"
    before = {n.op_type for n in onnx.load(str(path)).graph.node}
    result = optimize_model(str(path), "bert", provider="CPUExecutionProvider")
    stats = result.get_fused_operator_statistics()
    assert fused not in before and stats[fused] >= 1
    assert stats["Attention"] == 0  # onnxruntime's list, zero when absent
    out = tmp_path / "sub" / "opt.onnx"
    result.save_model_to_file(str(out))
    feeds = random_feeds(onnx.load(str(path)), 1)[0]
    want = onnxplug.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = onnxplug.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    unfused = optimize_model(str(path), opt_level=0).get_fused_operator_statistics()
    assert unfused[fused] == 0 or fused in before


def test_bad_arguments():
    path = str(FUSIONS / "new_gelu.torchscript.onnx")
    with pytest.raises(onnxplug.InvalidArgument, match="model_type"):
        optimize_model(path, "resnet")
    with pytest.raises(onnxplug.InvalidArgument, match="multiple of num_heads"):
        optimize_model(path, num_heads=3, hidden_size=64)
    with pytest.raises(onnxplug.InvalidArgument, match="opt_level"):
        optimize_model(path, opt_level=5)
