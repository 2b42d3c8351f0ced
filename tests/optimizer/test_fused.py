"""ms_ops.fused_conv, ms_ops.fused_gemm, ms_ops.fused_matmul."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as nh
import pytest

from onnxplug_ms_ops.rules import rule_sets as ms_rule_sets

SETS = {s.name: s for s in ms_rule_sets("extended")}
F = onnx.TensorProto.FLOAT
MS = "com.microsoft"


def model_of(nodes, inits, inputs, out, opset=17, dtype=F):
    graph = oh.make_graph(nodes, "g", inputs, [oh.make_tensor_value_info(out, dtype, None)], initializer=inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset), oh.make_opsetid(MS, 1)], ir_version=8)


CONV_ACTIVATIONS = [
    ("Relu", {}, ()),
    ("Tanh", {}, ()),
    ("Sigmoid", {}, ()),
    ("LeakyRelu", {"alpha": 0.2}, ()),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, ()),
    ("Clip", {}, (-0.5, 0.7)),
    ("Clip", {}, (None, 0.7)),
]


def conv_act(rng, activation, attrs, bounds, *, bounds_as_inputs=False, opset=17):
    inits = [
        nh.from_array(rng.standard_normal((6, 4, 3, 3)).astype(np.float32), "w"),
        nh.from_array(rng.standard_normal(6).astype(np.float32), "b"),
    ]
    inputs = [oh.make_tensor_value_info("x", F, [2, 4, 8, 8])]
    act_inputs = ["c"]
    for name, bound in zip(("lo", "hi"), bounds):
        if bound is None:
            act_inputs.append("")
        elif bounds_as_inputs:
            inputs.append(oh.make_tensor_value_info(name, F, []))
            act_inputs.append(name)
        else:
            inits.append(nh.from_array(np.array(bound, np.float32), name))
            act_inputs.append(name)
    nodes = [
        oh.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 2]),
        oh.make_node(activation, act_inputs, ["y"], **attrs),
    ]
    return model_of(nodes, inits, inputs, "y", opset=opset)


@pytest.mark.parametrize("activation,attrs,bounds", CONV_ACTIVATIONS)
def test_conv_activation(fusion, rng, activation, attrs, bounds):
    x = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    fused_model, _ = fusion.check(
        conv_act(rng, activation, attrs, bounds), [SETS["ms_ops.fused_conv"]], {"x": x}, {f"{MS}.FusedConv": 1}
    )
    node = next(iter(fused_model.graph))
    assert node.attributes.get_string("activation") == activation
    assert tuple(node.attributes.get_ints("strides")) == (1, 2)


def test_clip_with_attribute_bounds(fusion, rng):
    model = conv_act(rng, "Clip", {"min": -0.3, "max": 0.4}, (), opset=10)
    x = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    fusion.check(model, [SETS["ms_ops.fused_conv"]], {"x": x}, {f"{MS}.FusedConv": 1})


def test_clip_with_run_time_bounds_is_not_fused(fusion, rng):
    model = conv_act(rng, "Clip", {}, (-0.5, 0.5), bounds_as_inputs=True)
    fusion.assert_unchanged(model, [SETS["ms_ops.fused_conv"]], "parameters are not constants")


def test_unsupported_activation_is_not_fused(fusion, rng):
    fusion.assert_unchanged(conv_act(rng, "Softplus", {}, ()), [SETS["ms_ops.fused_conv"]])


def test_conv_used_elsewhere_is_not_fused(fusion, rng):
    model = conv_act(rng, "Relu", {}, ())
    model.graph.output.append(oh.make_tensor_value_info("c", F, None))
    fusion.assert_unchanged(model, [SETS["ms_ops.fused_conv"]])


def test_double_conv_is_not_fused(fusion, rng):
    inits = [nh.from_array(rng.standard_normal((6, 4, 3, 3)), "w")]
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"]), oh.make_node("Relu", ["c"], ["y"])]
    d = onnx.TensorProto.DOUBLE
    model = model_of(nodes, inits, [oh.make_tensor_value_info("x", d, [1, 4, 8, 8])], "y", dtype=d)
    fusion.assert_unchanged(model, [SETS["ms_ops.fused_conv"]], "float32 only")


def conv_residual(rng, add, *, conv_first=True, bias=True, z_shape=(2, 6, 8, 8), activation="Relu", conv_z=False):
    """``activation(add(Conv(x), z))``; with ``conv_z`` z is a second Conv's output (a projection
    shortcut), else a graph input of ``z_shape``."""
    inits = [nh.from_array(rng.standard_normal((6, 4, 3, 3)).astype(np.float32), "w")]
    conv_inputs = ["x", "w"]
    if bias:
        inits.append(nh.from_array(rng.standard_normal(6).astype(np.float32), "b"))
        conv_inputs.append("b")
    inputs = [oh.make_tensor_value_info("x", F, [2, 4, 8, 8])]
    nodes = [oh.make_node("Conv", conv_inputs, ["c"], pads=[1, 1, 1, 1])]
    if conv_z:
        inits.append(nh.from_array(rng.standard_normal((6, 4, 1, 1)).astype(np.float32), "w2"))
        nodes.append(oh.make_node("Conv", ["x", "w2"], ["z"]))
    else:
        inputs.append(oh.make_tensor_value_info("z", F, list(z_shape)))
    operands = ["c", "z"] if conv_first else ["z", "c"]
    nodes += [oh.make_node(add, operands, ["s"]), oh.make_node(activation, ["s"], ["y"])]
    return model_of(nodes, inits, inputs, "y")


@pytest.mark.parametrize("add", ["Add", "Sum"])
@pytest.mark.parametrize("conv_first", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_residual_activation(fusion, rng, add, conv_first, bias):
    feeds = {"x": rng.standard_normal((2, 4, 8, 8)).astype(np.float32)}
    feeds["z"] = rng.standard_normal((2, 6, 8, 8)).astype(np.float32)
    model = conv_residual(rng, add, conv_first=conv_first, bias=bias)
    fused, _ = fusion.check(model, [SETS["ms_ops.fused_conv"]], feeds, {f"{MS}.FusedConv": 1})
    node = next(iter(fused.graph))
    assert node.attributes.get_string("activation") == "Relu"
    assert len(node.inputs) == 4 and node.inputs[3].name == "z"
    assert (node.inputs[2] is not None) == bias


def test_projection_shortcut_fuses_one_conv_with_the_other_as_z(fusion, rng):
    """ResNet's downsampling block: both operands of the Sum are Convs; one becomes Z."""
    feeds = {"x": rng.standard_normal((2, 4, 8, 8)).astype(np.float32)}
    model = conv_residual(rng, "Sum", conv_z=True)
    fusion.check(model, [SETS["ms_ops.fused_conv"]], feeds, {f"{MS}.FusedConv": 1, "Conv": 1})


def test_broadcast_residual_is_not_fused(fusion, rng):
    model = conv_residual(rng, "Add", z_shape=(1, 6, 1, 1))
    fusion.assert_unchanged(model, [SETS["ms_ops.fused_conv"]], "shape is not known to equal")


def test_residual_before_an_unfusable_activation_fuses_without_one(fusion, rng):
    feeds = {"x": rng.standard_normal((2, 4, 8, 8)).astype(np.float32)}
    feeds["z"] = rng.standard_normal((2, 6, 8, 8)).astype(np.float32)
    model = conv_residual(rng, "Add", activation="Softplus")
    fused, _ = fusion.check(model, [SETS["ms_ops.fused_conv"]], feeds, {f"{MS}.FusedConv": 1, "Softplus": 1})
    node = next(n for n in fused.graph if n.op_type == "FusedConv")
    assert "activation" not in node.attributes and node.inputs[3].name == "z"


def conv_add(rng, add, *, conv_first=True, readers=1):
    """``add(Conv(x), z)`` read by an Identity (no activation: MobileNetV2's linear residual), and
    by a second node when ``readers`` is 2 (the next block's Conv and its residual add)."""
    model = conv_residual(rng, add, conv_first=conv_first, activation="Identity")
    graph = model.graph
    if readers > 1:
        graph.node.append(oh.make_node("Neg", ["s"], ["n"]))
        graph.output.append(oh.make_tensor_value_info("n", F, None))
    return model


@pytest.mark.parametrize("add", ["Add", "Sum"])
@pytest.mark.parametrize("conv_first", [True, False])
@pytest.mark.parametrize("readers", [1, 2])
def test_residual_without_activation_fuses_into_fused_conv_without_one(fusion, rng, add, conv_first, readers):
    feeds = {"x": rng.standard_normal((2, 4, 8, 8)).astype(np.float32)}
    feeds["z"] = rng.standard_normal((2, 6, 8, 8)).astype(np.float32)
    model = conv_add(rng, add, conv_first=conv_first, readers=readers)
    expected = {f"{MS}.FusedConv": 1, "Identity": 1} | ({"Neg": 1} if readers > 1 else {})
    fused, _ = fusion.check(model, [SETS["ms_ops.fused_conv"]], feeds, expected)
    node = next(n for n in fused.graph if n.op_type == "FusedConv")
    assert "activation" not in node.attributes and len(node.inputs) == 4 and node.inputs[3].name == "z"


def test_fused_conv_without_activation_loads_in_onnxruntime(rng):
    """onnxruntime reads FusedConv's missing activation as the identity: a model saved after the
    fusion still runs there, with the same values."""
    ort = pytest.importorskip("onnxruntime")
    x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    z = rng.standard_normal((1, 6, 8, 8)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    node = oh.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain=MS, pads=[1, 1, 1, 1])
    graph = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info("x", F, [1, 4, 8, 8]), oh.make_tensor_value_info("z", F, [1, 6, 8, 8])],
        [oh.make_tensor_value_info("y", F, [1, 6, 8, 8])],
        [nh.from_array(w, "w"), nh.from_array(b, "b")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(MS, 1)])
    import onnxplug

    feeds = {"x": x, "z": z}
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    ours = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


GEMM_ACTIVATIONS = [
    ("Relu", {}),
    ("Tanh", {}),
    ("Sigmoid", {}),
    ("LeakyRelu", {"alpha": 0.3}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.6}),
    ("Elu", {"alpha": 0.7}),
    ("Selu", {"alpha": 1.5, "gamma": 1.2}),
    ("Softplus", {}),
    ("Softsign", {}),
    ("ThresholdedRelu", {"alpha": 0.4}),
]


@pytest.mark.parametrize("activation,attrs", GEMM_ACTIVATIONS)
@pytest.mark.parametrize("gemm_attrs", [{}, {"alpha": 0.5, "beta": 2.0, "transB": 1}])
def test_gemm_activation(fusion, rng, activation, attrs, gemm_attrs):
    w_shape = (3, 5) if gemm_attrs.get("transB") else (5, 3)
    inits = [
        nh.from_array(rng.standard_normal(w_shape).astype(np.float32), "w"),
        nh.from_array(rng.standard_normal(3).astype(np.float32), "c"),
    ]
    nodes = [
        oh.make_node("Gemm", ["a", "w", "c"], ["g"], **gemm_attrs),
        oh.make_node(activation, ["g"], ["y"], **attrs),
    ]
    model = model_of(nodes, inits, [oh.make_tensor_value_info("a", F, [4, 5])], "y")
    a = rng.standard_normal((4, 5)).astype(np.float32)
    fusion.check(model, [SETS["ms_ops.fused_gemm"]], {"a": a}, {f"{MS}.FusedGemm": 1})


def test_gemm_without_c(fusion, rng):
    inits = [nh.from_array(rng.standard_normal((5, 3)).astype(np.float32), "w")]
    nodes = [oh.make_node("Gemm", ["a", "w"], ["g"]), oh.make_node("Relu", ["g"], ["y"])]
    model = model_of(nodes, inits, [oh.make_tensor_value_info("a", F, [4, 5])], "y")
    fusion.check(
        model,
        [SETS["ms_ops.fused_gemm"]],
        {"a": rng.standard_normal((4, 5)).astype(np.float32)},
        {f"{MS}.FusedGemm": 1},
    )


def test_gemm_with_unfusable_activation(fusion, rng):
    inits = [nh.from_array(rng.standard_normal((5, 3)).astype(np.float32), "w")]
    nodes = [oh.make_node("Gemm", ["a", "w"], ["g"]), oh.make_node("Abs", ["g"], ["y"])]
    model = model_of(nodes, inits, [oh.make_tensor_value_info("a", F, [4, 5])], "y")
    fusion.assert_unchanged(model, [SETS["ms_ops.fused_gemm"]])


def matmul_model(rng, *, a_shape=(2, 4, 5), b_shape=(2, 5, 3), transpose=None, perm=None, scale=None, scale_shape=()):
    inputs = [oh.make_tensor_value_info("a", F, list(a_shape)), oh.make_tensor_value_info("b", F, list(b_shape))]
    nodes, inits = [], []
    a, b = "a", "b"
    if transpose:
        nodes.append(oh.make_node("Transpose", [transpose], ["t"], perm=perm))
        a, b = ("t", b) if transpose == "a" else (a, "t")
    nodes.append(oh.make_node("MatMul", [a, b], ["mm"]))
    out = "mm"
    if scale:
        inits.append(nh.from_array(np.full(scale_shape, 0.125, np.float32), "s"))
        nodes.append(oh.make_node(scale, ["mm", "s"], ["y"]))
        out = "y"
    return model_of(nodes, inits, inputs, out)


def feeds_for(rng, a_shape, b_shape):
    return {"a": rng.standard_normal(a_shape).astype(np.float32), "b": rng.standard_normal(b_shape).astype(np.float32)}


@pytest.mark.parametrize("scale", ["Mul", "Div"])
@pytest.mark.parametrize("scale_shape", [(), (1,)])
def test_matmul_scale(fusion, rng, scale, scale_shape):
    model = matmul_model(rng, scale=scale, scale_shape=scale_shape)
    fused_model, _ = fusion.check(
        model, [SETS["ms_ops.fused_matmul"]], feeds_for(rng, (2, 4, 5), (2, 5, 3)), {f"{MS}.FusedMatMul": 1}
    )
    alpha = next(iter(fused_model.graph)).attributes.get_float("alpha")
    assert alpha == pytest.approx(0.125 if scale == "Mul" else 8.0)


@pytest.mark.parametrize("side", ["a", "b"])
def test_matmul_transpose_and_scale(fusion, rng, side):
    a_shape, b_shape = ((2, 5, 4), (2, 5, 3)) if side == "a" else ((2, 4, 5), (2, 3, 5))
    model = matmul_model(rng, a_shape=a_shape, b_shape=b_shape, transpose=side, perm=[0, 2, 1], scale="Div")
    fused_model, applied = fusion.check(
        model, [SETS["ms_ops.fused_matmul"]], feeds_for(rng, a_shape, b_shape), {f"{MS}.FusedMatMul": 1}
    )
    node = next(iter(fused_model.graph))
    assert node.attributes.get_int("transA" if side == "a" else "transB") == 1
    assert node.attributes.get_float("alpha") == pytest.approx(8.0)
    assert applied == {"ms_ops.fused_matmul": 2}


def test_transpose_of_batch_axes_is_not_fused(fusion, rng):
    model = matmul_model(rng, a_shape=(4, 2, 5), transpose="a", perm=[1, 0, 2])
    fusion.assert_unchanged(model, [SETS["ms_ops.fused_matmul"]], "does not swap just the last two axes")


def test_non_scalar_scale_is_not_fused(fusion, rng):
    model = matmul_model(rng, scale="Mul", scale_shape=(3,))
    fusion.assert_unchanged(model, [SETS["ms_ops.fused_matmul"]], "not a float32 scalar constant")


def test_transposed_vector_operand_is_not_fused(fusion, rng):
    model = matmul_model(rng, a_shape=(5,), b_shape=(4, 3, 5), transpose="b", perm=[0, 2, 1])
    fusion.assert_unchanged(model, [SETS["ms_ops.fused_matmul"]], "ranks are unknown or below 2")


def test_double_gemm_is_not_fused(fusion, rng):
    d = onnx.TensorProto.DOUBLE
    inits = [nh.from_array(rng.standard_normal((5, 3)), "w")]
    nodes = [oh.make_node("Gemm", ["a", "w"], ["g"]), oh.make_node("Relu", ["g"], ["y"])]
    model = model_of(nodes, inits, [oh.make_tensor_value_info("a", d, [4, 5])], "y", dtype=d)
    fusion.assert_unchanged(model, [SETS["ms_ops.fused_gemm"]], "float32 only")


@pytest.mark.parametrize(
    "conv_attrs, x_shape, w_shape",
    [
        ({"pads": [1, 1, 1, 1]}, [1, 4, 20, 20], (16, 4, 3, 3)),  # gathered: the cropping store
        ({}, [1, 8, 10, 10], (12, 8, 1, 1)),  # pointwise: the direct store
        ({"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 2}, [2, 6, 15, 13], (8, 3, 3, 3)),
        ({"pads": [2, 2]}, [1, 3, 40], (5, 3, 5)),  # 1-D: numpy's path, then the SiLU pass
    ],
)
def test_silu_after_a_conv_is_fused_conv_quick_gelu(fusion, rng, conv_attrs, x_shape, w_shape):
    """Conv then x * Sigmoid(x) (a YOLO layer) → QuickGelu → FusedConv(activation="QuickGelu"),
    onnxplug's own activation (onnxruntime's FusedConv has none, so onnxruntime cannot be the
    oracle here: the unoptimized graph on onnxplug is)."""
    inits = [
        nh.from_array(rng.standard_normal(w_shape).astype(np.float32), "w"),
        nh.from_array(rng.standard_normal(w_shape[0]).astype(np.float32), "b"),
    ]
    nodes = [
        oh.make_node("Conv", ["x", "w", "b"], ["c"], **conv_attrs),
        oh.make_node("Sigmoid", ["c"], ["s"]),
        oh.make_node("Mul", ["c", "s"], ["y"]),
    ]
    model = model_of(nodes, inits, [oh.make_tensor_value_info("x", F, x_shape)], "y")
    x = (rng.standard_normal(x_shape) * 3).astype(np.float32)
    want = fusion.run(model, {"x": x})[0]
    sets = [SETS["ms_ops.quick_gelu"], SETS["ms_ops.fused_conv"]]
    fused, applied = fusion.apply(model, sets)
    assert fusion.histogram(fused) == {f"{MS}.FusedConv": 1}, applied
    node = next(iter(fused.graph))
    assert node.attributes.get_string("activation") == "QuickGelu"
    assert list(node.attributes.get_floats("activation_params")) == [1.0]
    got = fusion.run(fused, {"x": x})[0]
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def bn_act(rng, activation, *, attrs=None, bounds=(), shape=(2, 5, 6, 7), opset=15, extra_output=False):
    channels = shape[1]
    inits = [
        nh.from_array((1 + 0.2 * rng.standard_normal(channels)).astype(np.float32), "scale"),
        nh.from_array(rng.standard_normal(channels).astype(np.float32), "bias"),
        nh.from_array(rng.standard_normal(channels).astype(np.float32), "mean"),
        nh.from_array((0.5 + rng.random(channels)).astype(np.float32), "var"),
    ]
    act_inputs = ["n"]
    for name, bound in zip(("lo", "hi"), bounds):
        inits.append(nh.from_array(np.array(bound, np.float32), name))
        act_inputs.append(name)
    nodes = [
        oh.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["n"], epsilon=1e-3, **(attrs or {})),
        oh.make_node(activation, act_inputs, ["y"]),
    ]
    model = model_of(nodes, inits, [oh.make_tensor_value_info("x", F, list(shape))], "y", opset=opset)
    if extra_output:
        model.graph.output.append(oh.make_tensor_value_info("n", F, None))
    return model


@pytest.mark.parametrize("activation,bounds", [("Relu", ()), ("Clip", (-0.5, 0.7))])
def test_batch_norm_then_relu_or_clip_is_a_depthwise_fused_conv(fusion, rng, activation, bounds):
    """DenseNet's normalization of the concatenated features: one depthwise 1×1 FusedConv whose
    weights are the normalization's factors, the same values (and onnxruntime's)."""
    x = rng.standard_normal((2, 5, 6, 7)).astype(np.float32)
    fused, _ = fusion.check(
        bn_act(rng, activation, bounds=bounds), [SETS["ms_ops.fused_batch_norm"]], {"x": x}, {f"{MS}.FusedConv": 1}
    )
    node = next(iter(fused.graph))
    assert node.attributes.get_int("group") == 5 and tuple(node.attributes.get_ints("kernel_shape")) == (1, 1)
    assert node.attributes.get_string("activation") == activation
    if bounds:
        assert tuple(node.attributes.get_floats("activation_params")) == pytest.approx(bounds)


def test_batch_norm_read_elsewhere_or_of_unknown_shape_is_not_fused(fusion, rng):
    fusion.assert_unchanged(bn_act(rng, "Relu", extra_output=True), [SETS["ms_ops.fused_batch_norm"]])
    model = bn_act(rng, "Relu")
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "C"
    fusion.assert_unchanged(model, [SETS["ms_ops.fused_batch_norm"]], "vectors of its channels")
    fusion.assert_unchanged(bn_act(rng, "Relu", shape=(2, 5, 6)), [SETS["ms_ops.fused_batch_norm"]], "4-D")
    fusion.assert_unchanged(bn_act(rng, "Tanh"), [SETS["ms_ops.fused_batch_norm"]])
