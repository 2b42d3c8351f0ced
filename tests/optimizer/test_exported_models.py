"""Every rule set of this family on models torch exported (``scripts/make_fusion_models.py``):
the patterns as real exporters write them, fused in the order the stages run."""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import pytest

from onnxplug.optimizer import apply_rule_sets
from onnxplug_cpu.rule_sets import rule_sets as cpu_rule_sets
from onnxplug_ms_ops.rules import rule_sets as ms_rule_sets

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "fusions"
MS = "com.microsoft"

#: The op histogram each model ends with (Constant nodes left unused by a fusion are not counted).
EXPECTED = {
    "rms_norm": {"SimplifiedLayerNormalization": 1},
    "residual_rms_norm": {f"{MS}.SkipSimplifiedLayerNormalization": 1},
    "new_gelu": {f"{MS}.FastGelu": 1},
    "gpt2_mlp": {"MatMul": 2, f"{MS}.FastGelu": 1, "Add": 1},
    "handwritten_layer_norm": {"LayerNormalization": 1},
    "bert_like_block": {f"{MS}.SkipLayerNormalization": 1, "MatMul": 1, f"{MS}.BiasGelu": 1},
    "conv_bn_relu": {f"{MS}.FusedConv": 1},
    "linear_relu": {f"{MS}.FusedGemm": 1},
    "scaled_scores": {f"{MS}.FusedMatMul": 1},
}


def stage_sets():
    """Basic, then extended; within extended the CPU provider's sets before ms_ops' (skip norms
    and FusedGemm match what the CPU sets produce)."""
    return [*cpu_rule_sets("basic"), *cpu_rule_sets("extended"), *ms_rule_sets("extended")]


def feeds_for(model: onnx.ModelProto, rng) -> dict:
    return {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
        for i in model.graph.input
    }


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_exported_model_fuses(fusion, rng, name, exporter):
    model = onnx.load(DATA / f"{name}.{exporter}.onnx")
    feeds = feeds_for(model, rng)
    want = fusion.run(model, feeds)
    result = apply_rule_sets(fusion.to_ir(model), stage_sets())
    ops = {op: n for op, n in fusion.histogram(result.model).items() if op != "Constant"}
    assert ops == EXPECTED[name], result.applied
    got = fusion.run(result.model, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    for theirs, w in zip(fusion.run_onnxruntime(result.model, feeds) or (), want):
        np.testing.assert_allclose(theirs, w, rtol=1e-4, atol=1e-4)
