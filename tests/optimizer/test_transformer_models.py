"""This family's rule sets on the torch-exported BERT, GPT-2 and ViT models of the attention work
(``tests/data/transformers/``, written by ``scripts/make_transformer_models.py``): the fused model
still gives torch's outputs, and the norms and Gelus these architectures use are fused."""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import pytest

from onnxplug.optimizer import apply_rule_sets
from onnxplug_cpu.rule_sets import rule_sets as cpu_rule_sets
from onnxplug_ms_ops.rules import rule_sets as ms_rule_sets

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "transformers"
MS = "com.microsoft"

#: At least this many of each op after fusing.  GPT-2's residual Adds are not turned into skip
#: norms: onnx's shape inference leaves the two summands with unrelated unknown dimensions, so
#: their shapes cannot be shown equal (a broadcast would make the contrib op wrong).
AT_LEAST = {
    "bert": {f"{MS}.SkipLayerNormalization": 2, f"{MS}.BiasGelu": 2},
    "bert_sdpa": {f"{MS}.SkipLayerNormalization": 2, f"{MS}.BiasGelu": 2},
    "vit": {f"{MS}.SkipLayerNormalization": 2, f"{MS}.BiasGelu": 2},
    "gpt2": {f"{MS}.FastGelu": 2},
    "gpt2_past": {f"{MS}.FastGelu": 2},
}


def this_family():
    """Every set but attention's, in stage order (CPU sets before ms_ops')."""
    return [
        *cpu_rule_sets("basic"),
        *cpu_rule_sets("extended"),
        *(s for s in ms_rule_sets("extended") if s.name != "ms_ops.attention"),
    ]


@pytest.mark.parametrize("name", sorted(AT_LEAST))
def test_transformer_model(fusion, name):
    path = DATA / f"{name}.torchscript.onnx"
    if not path.exists():
        pytest.skip(f"{path.name} is missing: write it with scripts/make_transformer_models.py")
    model = onnx.load(path)
    sample = np.load(DATA / f"{name}.npz")
    feeds = {i.name: sample[i.name] for i in model.graph.input if i.name in sample.files}
    result = apply_rule_sets(fusion.to_ir(model), this_family())
    ops = fusion.histogram(result.model)
    for op, count in AT_LEAST[name].items():
        assert ops.get(op, 0) >= count, (op, result.applied)
    got = fusion.run(result.model, feeds)
    outputs = [o.name for o in model.graph.output]
    for out, value in zip(outputs, got):
        np.testing.assert_allclose(value, sample[f"out:{out}"], rtol=1e-4, atol=1e-4)
    for want, value in zip(fusion.run(model, feeds), got):
        np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-5)
