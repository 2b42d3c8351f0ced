"""cpu.layer_norm: torch's layer norm decomposition → LayerNormalization (opset ≥ 17)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as nh
import pytest

from onnxplug_cpu.rule_sets import rule_sets

LAYER_NORM = [s for s in rule_sets("extended") if s.name == "cpu.layer_norm"]
F = onnx.TensorProto.FLOAT


def decomposed(
    rng,
    *,
    opset=18,
    axes=(-1,),
    shape=(2, 5, 8),
    square="Pow",
    divide="Div",
    scale_first=False,
    bias=True,
    eps=None,
    scale_input=False,
    variance_axes=None,
):
    """The graph torch writes for ``(x - mean) / sqrt(var + eps) * weight + bias``."""
    norm_shape = tuple(shape[min(a % len(shape) for a in axes) :])
    weight = rng.uniform(0.5, 1.5, norm_shape).astype(np.float32)
    eps = np.array(1e-5, np.float32) if eps is None else eps
    inits = [nh.from_array(eps, "eps"), nh.from_array(np.array(2.0, np.float32), "two")]
    inputs = [oh.make_tensor_value_info("x", F, list(shape))]
    if scale_input:
        inputs.append(oh.make_tensor_value_info("weight", F, list(norm_shape)))
    else:
        inits.append(nh.from_array(weight, "weight"))
    inits.append(nh.from_array(rng.standard_normal(norm_shape).astype(np.float32), "bias"))
    nodes = []

    def reduce_mean(src, dst, node_axes):
        if opset >= 18:
            name = f"{dst}_axes"
            inits.append(nh.from_array(np.array(node_axes, np.int64), name))
            nodes.append(oh.make_node("ReduceMean", [src, name], [dst], keepdims=1))
        else:
            nodes.append(oh.make_node("ReduceMean", [src], [dst], axes=list(node_axes), keepdims=1))

    reduce_mean("x", "mean", axes)
    nodes.append(oh.make_node("Sub", ["x", "mean"], ["d"]))
    nodes.append(oh.make_node(square, ["d", "two" if square == "Pow" else "d"], ["sq"]))
    reduce_mean("sq", "var", variance_axes or axes)
    nodes.append(oh.make_node("Add", ["var", "eps"], ["var_eps"]))
    nodes.append(oh.make_node("Sqrt", ["var_eps"], ["std"]))
    if divide == "Div":
        nodes.append(oh.make_node("Div", ["d", "std"], ["normalized"]))
    else:
        nodes.append(oh.make_node("Reciprocal", ["std"], ["inv"]))
        nodes.append(oh.make_node("Mul", ["d", "inv"], ["normalized"]))
    scaled_inputs = ["weight", "normalized"] if scale_first else ["normalized", "weight"]
    nodes.append(oh.make_node("Mul", scaled_inputs, ["scaled"]))
    out = "scaled"
    if bias:
        nodes.append(oh.make_node("Add", ["scaled", "bias"], ["y"]))
        out = "y"
    graph = oh.make_graph(nodes, "ln", inputs, [oh.make_tensor_value_info(out, F, None)], initializer=inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=8), weight


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("square,divide", [("Pow", "Div"), ("Mul", "Reciprocal")])
@pytest.mark.parametrize("scale_first", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_decomposition_becomes_layer_norm(fusion, rng, opset, square, divide, scale_first, bias):
    model, _ = decomposed(rng, opset=opset, square=square, divide=divide, scale_first=scale_first, bias=bias)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32) * 3 + 1
    fused, applied = fusion.check(model, LAYER_NORM, {"x": x}, {"LayerNormalization": 1})
    assert applied == {"cpu.layer_norm": 2 if bias else 1}  # the bias Add is a second rewrite
    node = next(iter(fused.graph))
    assert len(node.inputs) == (3 if bias else 2)
    assert node.attributes.get_int("axis") == -1
    assert node.attributes.get_float("epsilon") == pytest.approx(1e-5)


def test_two_trailing_axes(fusion, rng):
    model, _ = decomposed(rng, axes=(-2, -1))
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    fused, _ = fusion.check(model, LAYER_NORM, {"x": x}, {"LayerNormalization": 1})
    assert next(iter(fused.graph)).attributes.get_int("axis") == -2


@pytest.mark.parametrize(
    "kwargs,reason",
    [
        ({"opset": 16}, "needs opset 17"),
        ({"axes": (1,)}, "not taken over trailing axes"),  # a middle axis
        ({"axes": (-1,), "variance_axes": (-2, -1)}, "not taken over the mean's axes"),
        ({"eps": np.linspace(1e-5, 1e-1, 5, dtype=np.float32).reshape(5, 1)}, "epsilon is not a scalar"),
        ({"scale_input": True}, "scale is not a constant"),
    ],
)
def test_lookalikes_are_not_fused(fusion, rng, kwargs, reason):
    model, _ = decomposed(rng, **kwargs)
    fusion.assert_unchanged(model, LAYER_NORM, reason)


def test_non_constant_epsilon_is_not_fused(fusion, rng):
    model, _ = decomposed(rng)
    graph = model.graph
    eps = next(i for i in graph.initializer if i.name == "eps")
    graph.initializer.remove(eps)
    graph.input.append(oh.make_tensor_value_info("eps", F, []))
    fusion.assert_unchanged(model, LAYER_NORM, "epsilon is not a scalar constant")


def test_sub_of_another_tensor_is_not_fused(fusion, rng):
    model, _ = decomposed(rng)
    graph = model.graph
    graph.input.append(oh.make_tensor_value_info("z", F, [2, 5, 8]))
    sub = next(n for n in graph.node if n.op_type == "Sub")
    sub.input[0] = "z"
    fusion.assert_unchanged(model, LAYER_NORM)


@pytest.mark.parametrize("bias_kind", ["input", "wider"])
def test_bias_lookalikes_stay_an_add(fusion, rng, bias_kind):
    model, _ = decomposed(rng)
    graph = model.graph
    bias = next(i for i in graph.initializer if i.name == "bias")
    graph.initializer.remove(bias)
    if bias_kind == "input":  # not a constant
        graph.input.append(oh.make_tensor_value_info("bias", F, [8]))
        feeds = {"bias": rng.standard_normal(8).astype(np.float32)}
    else:  # one bias per position: LayerNormalization's B must have the scale's shape
        graph.initializer.append(nh.from_array(rng.standard_normal((5, 8)).astype(np.float32), "bias"))
        feeds = {}
    feeds["x"] = rng.standard_normal((2, 5, 8)).astype(np.float32)
    fusion.check(model, LAYER_NORM, feeds, {"LayerNormalization": 1, "Add": 1})
