"""ms_ops.rms_norm, ms_ops.skip_layer_norm, ms_ops.skip_rms_norm."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as nh
import pytest

from onnxplug_cpu.rule_sets import rule_sets as cpu_rule_sets
from onnxplug_ms_ops.rules import rule_sets as ms_rule_sets

SETS = {s.name: s for s in ms_rule_sets("extended")}
LAYER_NORM = next(s for s in cpu_rule_sets("extended") if s.name == "cpu.layer_norm")
F, H = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
MS = "com.microsoft"
SHAPE = (2, 5, 8)


def model_of(nodes, inits, inputs, outputs, opset=18):
    graph = oh.make_graph(
        nodes, "g", inputs, [oh.make_tensor_value_info(o, t, None) for o, t in outputs], initializer=inits
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset), oh.make_opsetid(MS, 1)], ir_version=8)


def rms_nodes(x, out, rng, *, dtype=np.float32, cast=False, reciprocal=True, weight_first=True, eps=1e-6, axes=(-1,)):
    """LLaMA's ``weight * (x.float() * rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(dtype)``."""
    inits = [
        nh.from_array(np.array(eps, np.float32), "eps"),
        nh.from_array(np.array(2.0, np.float32), "two"),
        nh.from_array(np.array(1.0, np.float32), "one"),
        nh.from_array(np.array(axes, np.int64), "axes"),
        nh.from_array(rng.uniform(0.5, 1.5, SHAPE[-1]).astype(dtype), "weight"),
    ]
    nodes = []
    wide = x
    if cast:
        nodes.append(oh.make_node("Cast", [x], ["xf"], to=F))
        wide = "xf"
    nodes += [
        oh.make_node("Pow", [wide, "two"], ["sq"]),
        oh.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
        oh.make_node("Add", ["ms", "eps"], ["ms_eps"]),
        oh.make_node("Sqrt", ["ms_eps"], ["rms"]),
        oh.make_node("Reciprocal", ["rms"], ["inv"]) if reciprocal else oh.make_node("Div", ["one", "rms"], ["inv"]),
        oh.make_node("Mul", [wide, "inv"], ["normed"]),
    ]
    normed = "normed"
    if cast:
        nodes.append(
            oh.make_node("Cast", ["normed"], ["normed_back"], to=onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
        )
        normed = "normed_back"
    nodes.append(oh.make_node("Mul", ["weight", normed] if weight_first else [normed, "weight"], [out]))
    return nodes, inits


@pytest.mark.parametrize("reciprocal", [True, False])
@pytest.mark.parametrize("weight_first", [True, False])
def test_rms_norm(fusion, rng, reciprocal, weight_first):
    nodes, inits = rms_nodes("x", "y", rng, reciprocal=reciprocal, weight_first=weight_first)
    model = model_of(nodes, inits, [oh.make_tensor_value_info("x", F, SHAPE)], [("y", F)])
    x = rng.standard_normal(SHAPE).astype(np.float32)
    fused, applied = fusion.check(model, [SETS["ms_ops.rms_norm"]], {"x": x}, {"SimplifiedLayerNormalization": 1})
    node = next(iter(fused.graph))
    assert node.attributes.get_float("epsilon") == pytest.approx(1e-6) and node.attributes.get_int("axis") == -1


def test_rms_norm_float16_with_casts(fusion, rng):
    nodes, inits = rms_nodes("x", "y", rng, dtype=np.float16, cast=True)
    model = model_of(nodes, inits, [oh.make_tensor_value_info("x", H, SHAPE)], [("y", H)])
    x = rng.standard_normal(SHAPE).astype(np.float16)
    fused, _ = fusion.check(
        model, [SETS["ms_ops.rms_norm"]], {"x": x}, {"SimplifiedLayerNormalization": 1}, rtol=1e-3, atol=1e-3
    )
    assert next(iter(fused.graph)).attributes.get_int("stash_type") == 1


@pytest.mark.parametrize(
    "change,reason",
    [
        ({"axes": (1,)}, "not taken over trailing axes"),  # a middle axis
        ({"eps": None}, "epsilon is not a scalar constant"),  # fed at run time
        ({"weight": None}, "the weight is not a float constant"),  # fed at run time
    ],
)
def test_rms_lookalikes(fusion, rng, change, reason):
    nodes, inits = rms_nodes("x", "y", rng, axes=change.get("axes", (-1,)))
    inputs = [oh.make_tensor_value_info("x", F, SHAPE)]
    for name in ("eps", "weight"):
        if name in change:
            init = next(i for i in inits if i.name == name)
            inits.remove(init)
            inputs.append(oh.make_tensor_value_info(name, F, list(init.dims)))
    fusion.assert_unchanged(model_of(nodes, inits, inputs, [("y", F)]), [SETS["ms_ops.rms_norm"]], reason)


def skip_graph(rng, *, bias=None, norm="layer", skip_shape=SHAPE, residual_out=False, x_shape=SHAPE):
    """``LayerNormalization(x + skip [+ bias])`` as a decomposition-free graph (opset 17+)."""
    inits = [
        nh.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "gamma"),
        nh.from_array(rng.standard_normal(8).astype(np.float32), "beta"),
        nh.from_array(rng.standard_normal(8).astype(np.float32), "bias"),
    ]
    nodes = []
    x = "x"
    if bias == "pre":
        nodes.append(oh.make_node("Add", ["x", "bias"], ["xb"]))
        x = "xb"
    nodes.append(oh.make_node("Add", [x, "skip"], ["sum"]))
    total = "sum"
    if bias == "post":
        nodes.append(oh.make_node("Add", ["sum", "bias"], ["sum_b"]))
        total = "sum_b"
    if norm == "layer":
        nodes.append(oh.make_node("LayerNormalization", [total, "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5))
    else:
        nodes.append(oh.make_node("SimplifiedLayerNormalization", [total, "gamma"], ["y"], axis=-1, epsilon=1e-5))
    inputs = [oh.make_tensor_value_info("x", F, x_shape), oh.make_tensor_value_info("skip", F, skip_shape)]
    outputs = [("y", F)] + ([(total, F)] if residual_out else [])
    return model_of(nodes, inits, inputs, outputs, opset=17)


@pytest.mark.parametrize("bias", [None, "pre", "post"])
@pytest.mark.parametrize("norm", ["layer", "rms"])
@pytest.mark.parametrize("residual_out", [False, True])
def test_skip_norms(fusion, rng, bias, norm, residual_out):
    model = skip_graph(rng, bias=bias, norm=norm, residual_out=residual_out)
    feeds = {"x": rng.standard_normal(SHAPE).astype(np.float32), "skip": rng.standard_normal(SHAPE).astype(np.float32)}
    name = "ms_ops.skip_layer_norm" if norm == "layer" else "ms_ops.skip_rms_norm"
    op = "SkipLayerNormalization" if norm == "layer" else "SkipSimplifiedLayerNormalization"
    _, applied = fusion.check(model, [SETS[name]], feeds, {f"{MS}.{op}": 1})
    assert applied == {name: 1}


def test_skip_layer_norm_after_layer_norm_fusion(fusion, rng):
    """The decomposition fused by cpu.layer_norm, then the residual Add by ms_ops.skip_layer_norm."""
    eps = nh.from_array(np.array(1e-5, np.float32), "eps")
    two = nh.from_array(np.array(2.0, np.float32), "two")
    axes = nh.from_array(np.array([-1], np.int64), "axes")
    gamma = nh.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "gamma")
    beta = nh.from_array(rng.standard_normal(8).astype(np.float32), "beta")
    nodes = [
        oh.make_node("Add", ["x", "skip"], ["s"]),
        oh.make_node("ReduceMean", ["s", "axes"], ["m"]),
        oh.make_node("Sub", ["s", "m"], ["d"]),
        oh.make_node("Pow", ["d", "two"], ["d2"]),
        oh.make_node("ReduceMean", ["d2", "axes"], ["v"]),
        oh.make_node("Add", ["v", "eps"], ["ve"]),
        oh.make_node("Sqrt", ["ve"], ["sd"]),
        oh.make_node("Div", ["d", "sd"], ["n"]),
        oh.make_node("Mul", ["n", "gamma"], ["ng"]),
        oh.make_node("Add", ["ng", "beta"], ["y"]),
    ]
    inputs = [oh.make_tensor_value_info("x", F, SHAPE), oh.make_tensor_value_info("skip", F, SHAPE)]
    model = model_of(nodes, [eps, two, axes, gamma, beta], inputs, [("y", F)])
    feeds = {"x": rng.standard_normal(SHAPE).astype(np.float32), "skip": rng.standard_normal(SHAPE).astype(np.float32)}
    _, applied = fusion.check(
        model, [LAYER_NORM, SETS["ms_ops.skip_layer_norm"]], feeds, {f"{MS}.SkipLayerNormalization": 1}
    )
    assert applied["ms_ops.skip_layer_norm"] == 1


@pytest.mark.parametrize("skip_shape", [(1, 5, 8), (5, 8)])
def test_a_skip_that_broadcasts_over_the_batch_is_fused(fusion, rng, skip_shape):
    """SkipLayerNormalization takes a skip of (1, S, D) or (S, D) (the kernel and onnxruntime's)."""
    model = skip_graph(rng, bias="pre", skip_shape=skip_shape)
    feeds = {
        "x": rng.standard_normal(SHAPE).astype(np.float32),
        "skip": rng.standard_normal(skip_shape).astype(np.float32),
    }
    _, applied = fusion.check(model, [SETS["ms_ops.skip_layer_norm"]], feeds, {f"{MS}.SkipLayerNormalization": 1})
    assert applied == {"ms_ops.skip_layer_norm": 1}


def test_a_product_of_one_batch_added_to_a_batch_is_the_skip(fusion, rng):
    """A BERT's feed-forward sum: a (1, S, D) product plus its bias added to a (batch, S, D)
    residual; the residual becomes the input and the product the skip (the sum is the same)."""
    model = skip_graph(rng, bias="pre", x_shape=(1, 5, 8), skip_shape=("b", 5, 8))
    feeds = {
        "x": rng.standard_normal((1, 5, 8)).astype(np.float32),
        "skip": rng.standard_normal((3, 5, 8)).astype(np.float32),
    }
    fused, applied = fusion.check(model, [SETS["ms_ops.skip_layer_norm"]], feeds, {f"{MS}.SkipLayerNormalization": 1})
    assert applied == {"ms_ops.skip_layer_norm": 1}
    node = next(n for n in fused.graph if n.op_type == "SkipLayerNormalization")
    assert [v.name for v in node.inputs[:2]] == ["skip", "x"]


def test_a_bias_added_first_is_taken_in(fusion, rng):
    """``Add(bias, product)``, the bias the Add's first input, as some exporters write it."""
    model = skip_graph(rng, bias="pre")
    for node in model.graph.node:
        if node.output[0] == "xb":
            node.input[:] = ["bias", "x"]
    feeds = {"x": rng.standard_normal(SHAPE).astype(np.float32), "skip": rng.standard_normal(SHAPE).astype(np.float32)}
    fusion.check(model, [SETS["ms_ops.skip_layer_norm"]], feeds, {f"{MS}.SkipLayerNormalization": 1})


@pytest.mark.parametrize(
    "norm, skip_shape", [("layer", ("b", 5, 8)), ("rms", (1, 5, 8)), ("rms", (5, 8)), ("rms", ("b", 5, 8))]
)
def test_skip_that_broadcasts_is_not_fused(fusion, rng, norm, skip_shape):
    """A skip of another batch (a named dimension against 2), and any broadcast into the RMS form."""
    model = skip_graph(rng, norm=norm, skip_shape=skip_shape)
    name = "ms_ops.skip_layer_norm" if norm == "layer" else "ms_ops.skip_rms_norm"
    fusion.assert_unchanged(model, [SETS[name]])


@pytest.mark.parametrize(
    "norm, reason", [("layer", "not known to have shapes"), ("rms", "not known to have the same shape")]
)
def test_unnamed_batch_dimensions_are_not_taken_as_equal(fusion, rng, norm, reason):
    """x (?, 5, 8) + skip (?, 5, 8) may broadcast at run time (one batch of 1): not fused."""
    model = skip_graph(rng, norm=norm, x_shape=(None, 5, 8), skip_shape=(None, 5, 8))
    name = "ms_ops.skip_layer_norm" if norm == "layer" else "ms_ops.skip_rms_norm"
    fusion.assert_unchanged(model, [SETS[name]], reason)
