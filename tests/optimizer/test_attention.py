"""Attention fusion (ms_ops.attention) on torch's exports of BERT, GPT-2 and ViT, and near misses."""

from __future__ import annotations

import collections
import math
import pathlib

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.optimizer import apply_rule_sets
from onnxplug_ms_ops.rules import rule_sets

DATA = pathlib.Path(__file__).resolve().parent.parent / "data" / "transformers"
# (file stem, number of attention layers)
MODELS = [("bert", 2), ("gpt2", 2), ("gpt2_past", 2), ("vit", 2)]
EXPORTERS = ["torchscript", "dynamo"]


def _load(path: pathlib.Path) -> ir.Model:
    # The session loads with shape inference too; the rules read hidden sizes and mask ranks from it.
    return ir.from_proto(onnx.shape_inference.infer_shapes(onnx.load(path)))


def _fuse(model: ir.Model, names=("ms_ops.attention",)):
    """The attention rule set alone (the other ms_ops sets have their own tests)."""
    return apply_rule_sets(model, [rule_set for rule_set in rule_sets("extended") if rule_set.name in names])


def _run(model: ir.Model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    options = onnxplug.SessionOptions()
    options.graph_optimization_level = onnxplug.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxplug.InferenceSession(
        ir.to_proto(model).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds), strict=True))


def _ops(model: ir.Model) -> collections.Counter:
    return collections.Counter((n.domain, n.op_type) for n in model.graph)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize(("stem", "layers"), MODELS)
def test_export_fuses_one_attention_per_layer(stem, layers, exporter):
    path = DATA / f"{stem}.{exporter}.onnx"
    original = _load(path)
    fused = _fuse(original)
    ops = _ops(fused.model)
    assert fused.applied == {"ms_ops.attention": layers}
    assert ops[("com.microsoft", "MultiHeadAttention")] == layers
    assert ops[("", "Softmax")] == 0
    assert _ops(original)[("", "Softmax")] == layers  # the caller's model is left alone

    data = np.load(DATA / f"{stem}.npz")
    feeds = {k: data[k] for k in data.files if not k.startswith("out:")}
    before = _run(original, feeds)
    after = _run(fused.model, feeds)
    assert before.keys() == after.keys()
    for name, want in before.items():
        np.testing.assert_allclose(after[name], want, rtol=0, atol=1e-5, err_msg=name)
    for key in data.files:
        if key.startswith("out:"):
            np.testing.assert_allclose(after[key[4:]], data[key], rtol=0, atol=1e-4, err_msg=f"torch {key}")


def test_plugin_hook_returns_the_attention_set_for_extended_only():
    from onnxplug_ms_ops import plugin

    rule_set = plugin.onnxplug_rewrite_rules("extended")[0]  # first: FusedMatMul would hide the scores
    assert rule_set.name == "ms_ops.attention"
    assert [str(op) for op in rule_set.produces] == ["com.microsoft::MultiHeadAttention"]
    assert plugin.onnxplug_rewrite_rules("basic") == []
    assert plugin.onnxplug_rewrite_rules("layout") == []


# A hand-built layer in the exporter's form, to vary one thing at a time.
B, S = 2, 3


def _layer(hidden=8, head_size=2, scale=None, scale_op="Mul", mask_shape=(B, 1, S, S), heads_in_shape=-1, biases=False):
    rng = np.random.default_rng(0)
    scale = (1 / math.sqrt(head_size) if scale_op == "Mul" else math.sqrt(head_size)) if scale is None else scale
    inits = [
        onnx.numpy_helper.from_array(np.array([0, 0, heads_in_shape, head_size], np.int64), "shape"),
        onnx.numpy_helper.from_array(np.array(scale, np.float32), "scale"),
        onnx.numpy_helper.from_array(np.array([0, 0, hidden], np.int64), "merged"),
    ]
    nodes = []
    for name in "qkv":
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal((hidden, hidden)).astype(np.float32), f"w{name}"))
        projected = name
        if biases:  # MatMul then Add of a bias vector, K's with the bias first
            inits.append(onnx.numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), f"b{name}"))
            nodes.append(helper.make_node("MatMul", ["x", f"w{name}"], [f"{name}_mm"]))
            terms = [f"b{name}", f"{name}_mm"] if name == "k" else [f"{name}_mm", f"b{name}"]
            nodes.append(helper.make_node("Add", terms, [name]))
        else:
            nodes.append(helper.make_node("MatMul", ["x", f"w{name}"], [projected]))
        nodes.append(helper.make_node("Reshape", [name, "shape"], [f"{name}4"]))
    nodes += [
        helper.make_node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qh", "kt"], ["scores"]),
        helper.make_node(scale_op, ["scores", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "vh"], ["ctx"]),
        helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx_t", "merged"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "layer",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, hidden]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, list(mask_shape)),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, hidden])],
        inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ir.from_proto(onnx.shape_inference.infer_shapes(proto))


def _feeds(hidden=8, mask_shape=(B, 1, S, S)):
    rng = np.random.default_rng(1)
    mask = np.where(rng.random(mask_shape) < 0.3, np.float32(-1e4), np.float32(0)).astype(np.float32)
    return {"x": rng.standard_normal((B, S, hidden)).astype(np.float32), "mask": mask}


@pytest.mark.parametrize("scale_op", ["Mul", "Div"])
def test_hand_built_layer_fuses_and_matches(scale_op):
    model = _layer(scale_op=scale_op)
    fused = _fuse(model)
    assert fused.applied["ms_ops.attention"] == 1
    np.testing.assert_allclose(_run(fused.model, _feeds())["y"], _run(model, _feeds())["y"], rtol=0, atol=1e-5)


def test_projection_biases_go_into_the_attention():
    """ms_ops.attention_bias: the Q, K and V bias Adds become MultiHeadAttention's bias input; the
    results are the unfused layer's, in onnxplug and in onnxruntime."""
    model = _layer(biases=True)
    fused = _fuse(model, ("ms_ops.attention", "ms_ops.attention_bias"))
    assert fused.applied == {"ms_ops.attention": 1, "ms_ops.attention_bias": 1}
    ops = _ops(fused.model)
    assert ops[("", "Add")] == 0 and ops[("com.microsoft", "MultiHeadAttention")] == 1
    attention = next(n for n in fused.model.graph if n.op_type == "MultiHeadAttention")
    assert attention.inputs[3] is not None and attention.inputs[3].const_value.numpy().shape == (24,)
    want = _run(model, _feeds())["y"]
    np.testing.assert_allclose(_run(fused.model, _feeds())["y"], want, rtol=0, atol=1e-5)
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle for the fused op's contract")
    session = ort.InferenceSession(ir.to_proto(fused.model).SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, _feeds())[0], want, rtol=0, atol=1e-5)


def test_a_projection_sum_read_elsewhere_keeps_its_add():
    model = _layer(biases=True)
    model.graph.outputs.append(next(n for n in model.graph if n.outputs[0].name == "v").outputs[0])
    fused = _fuse(model, ("ms_ops.attention", "ms_ops.attention_bias"))
    assert fused.applied == {"ms_ops.attention": 1, "ms_ops.attention_bias": 0}


@pytest.mark.parametrize(
    "variant",
    [
        {"scale": 0.5 * (1 / math.sqrt(2))},  # a scale that is not 1/sqrt(head_size)
        {"scale": 1 / math.sqrt(2), "scale_op": "Div"},  # dividing by 1/sqrt(H) multiplies by sqrt(H)
        {"hidden": 9, "head_size": 2},  # head size does not divide the hidden size
        {"heads_in_shape": 3},  # an explicit head count that is not hidden / head_size
        {"mask_shape": (S, S)},  # a mask that broadcasts but is not (B, 1|N, S, T)
        {"mask_shape": (B, 2, S, S)},  # a head dimension that is neither 1 nor N=4
    ],
    ids=["wrong-scale", "div-by-inverse", "non-divisible", "head-count", "mask-2d", "mask-heads"],
)
def test_near_misses_do_not_fuse(variant):
    fused = _fuse(_layer(**variant))
    assert fused.applied["ms_ops.attention"] == 0
    assert _ops(fused.model)[("", "Softmax")] == 1


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize(("stem", "layers"), MODELS)
def test_fused_model_runs_on_onnxruntime(stem, layers, exporter):
    """The replacement is a valid com.microsoft MultiHeadAttention: onnxruntime runs it to torch's outputs."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle for the fused op's contract")
    fused = _fuse(_load(DATA / f"{stem}.{exporter}.onnx")).model
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(ir.to_proto(fused).SerializeToString(), options, providers=["CPUExecutionProvider"])
    data = np.load(DATA / f"{stem}.npz")
    feeds = {k: data[k] for k in data.files if not k.startswith("out:")}
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
    for key in data.files:
        if key.startswith("out:"):
            np.testing.assert_allclose(got[key[4:]], data[key], rtol=0, atol=1e-4, err_msg=key)
