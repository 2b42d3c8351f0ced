"""Sessions fuse torch exports on their own: at the default level the CPU provider runs one
attention op per layer with the norm and Gelu fusions, results equal the unfused graph, and the
model written at ORT_ENABLE_EXTENDED loads and runs in onnxruntime."""

from __future__ import annotations

import collections
import pathlib

import numpy as np
import pytest

import onnxplug

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "transformers"
LEVEL = onnxplug.GraphOptimizationLevel
# (model, exporter, fused ops expected per model: 2 layers each)
CASES = [
    ("bert", "torchscript", {"MultiHeadAttention": 2, "SkipLayerNormalization": 4, "BiasGelu": 2}),
    ("gpt2_past", "torchscript", {"MultiHeadAttention": 2, "FastGelu": 2}),
    ("vit", "torchscript", {"MultiHeadAttention": 2, "BiasGelu": 2}),
    # dynamo's embeddings add the position embedding as a (1, S, D) constant: a fifth skip norm
    ("bert", "dynamo", {"MultiHeadAttention": 2, "SkipLayerNormalization": 5}),
]


def _session(path, level, optimized=None):
    options = onnxplug.SessionOptions()
    options.graph_optimization_level = level
    if optimized is not None:
        options.optimized_model_filepath = str(optimized)
    return onnxplug.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _feeds(name):
    data = np.load(DATA / f"{name}.npz")
    return {k: data[k] for k in data.files if not k.startswith("out:")}, data


@pytest.mark.parametrize("name, exporter, expected", CASES, ids=[f"{n}-{e}" for n, e, _ in CASES])
def test_the_default_level_fuses_and_keeps_the_results(name, exporter, expected, tmp_path):
    path = DATA / f"{name}.{exporter}.onnx"
    feeds, data = _feeds(name)
    plain = _session(path, LEVEL.ORT_DISABLE_ALL)
    fused = _session(path, LEVEL.ORT_ENABLE_ALL)
    ops = collections.Counter(n.op_type for n in fused.get_partition_report().nodes)
    for op, count in expected.items():
        assert ops[op] == count, (op, dict(ops))
    assert ops["Softmax"] == 0
    names = [o.name for o in plain.get_outputs()]
    for want, got in zip(plain.run(None, feeds), fused.run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    first = dict(zip(names, fused.run(None, feeds)))
    for key in data.files:
        if key.startswith("out:"):
            np.testing.assert_allclose(first[key[4:]], data[key], atol=1e-4)


@pytest.mark.parametrize("name", ["bert", "gpt2_past"])
def test_the_model_written_at_extended_runs_in_onnxruntime(name, tmp_path):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle that loads the written model")
    path, written = DATA / f"{name}.torchscript.onnx", tmp_path / "optimized.onnx"
    feeds, _ = _feeds(name)
    ours = _session(path, LEVEL.ORT_ENABLE_EXTENDED, written)
    assert ours.get_optimization_report().fusions()["ms_ops.attention"] == 2
    theirs = ort.InferenceSession(str(written), providers=["CPUExecutionProvider"])
    for want, got in zip(ours.run(None, feeds), theirs.run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
