"""cpu.conv_mul_add and cpu.bn_mul_add: constant per-channel Mul/Add after Conv or BatchNormalization."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as nh
import pytest

from onnxplug_cpu.rule_sets import rule_sets

CONV_MUL_ADD = [s for s in rule_sets("basic") if s.name == "cpu.conv_mul_add"]
BN_MUL_ADD = [s for s in rule_sets("basic") if s.name == "cpu.bn_mul_add"]


def _model(rng, head, tail, *, mul_shape=(6, 1, 1), add_shape=(1, 6, 1, 1), swap=False):
    """``head`` (Conv or BatchNormalization) on ``x`` (2, 6, 5, 7) followed by ``tail`` ops."""
    inits = []
    if head == "Conv":
        inits += [nh.from_array(rng.standard_normal((6, 3, 3, 3)).astype(np.float32), "w")]
        inits += [nh.from_array(rng.standard_normal(6).astype(np.float32), "b")]
        nodes = [oh.make_node("Conv", ["x", "w", "b"], ["h"], pads=[1, 0, 2, 1], group=2)]
    else:
        for name, values in {
            "scale": rng.uniform(0.5, 1.5, 6),
            "beta": rng.standard_normal(6),
            "mean": rng.standard_normal(6),
            "var": rng.uniform(0.5, 2.0, 6),
        }.items():
            inits.append(nh.from_array(values.astype(np.float32), name))
        nodes = [oh.make_node("BatchNormalization", ["x", "scale", "beta", "mean", "var"], ["h"])]
    current = "h"
    for i, op in enumerate(tail):
        shape = mul_shape if op == "Mul" else add_shape
        inits.append(nh.from_array(rng.uniform(0.5, 2.0, shape).astype(np.float32), f"c{i}"))
        inputs = [f"c{i}", current] if swap else [current, f"c{i}"]
        nodes.append(oh.make_node(op, inputs, [f"t{i}"]))
        current = f"t{i}"
    nodes.append(oh.make_node("Relu", [current], ["y"]))
    graph = oh.make_graph(
        nodes,
        "fold",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 6, 5, 7])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        initializer=inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("tail", [["Mul"], ["Add"], ["Mul", "Add"], ["Add", "Mul"]])
def test_folds_into_conv(fusion, rng, tail, swap):
    x = rng.standard_normal((2, 6, 5, 7)).astype(np.float32)
    _, applied = fusion.check(_model(rng, "Conv", tail, swap=swap), CONV_MUL_ADD, {"x": x}, {"Conv": 1, "Relu": 1})
    assert applied == {"cpu.conv_mul_add": len(tail)}


@pytest.mark.parametrize("tail", [["Mul"], ["Mul", "Add"], ["Add", "Mul"]])
def test_folds_into_batch_norm(fusion, rng, tail):
    x = rng.standard_normal((2, 6, 5, 7)).astype(np.float32)
    _, applied = fusion.check(
        _model(rng, "BatchNormalization", tail), BN_MUL_ADD, {"x": x}, {"BatchNormalization": 1, "Relu": 1}
    )
    assert applied == {"cpu.bn_mul_add": len(tail)}


def test_scalar_folds(fusion, rng):
    x = rng.standard_normal((2, 6, 5, 7)).astype(np.float32)
    fusion.check(_model(rng, "Conv", ["Mul"], mul_shape=()), CONV_MUL_ADD, {"x": x}, {"Conv": 1, "Relu": 1})


# The Conv's output is (2, 6, 6, 6), the normalization's (2, 6, 5, 7): constants that vary along
# a spatial or the batch axis, or that add an axis.
@pytest.mark.parametrize(
    "conv_shape, bn_shape",
    [((6, 6, 1), (6, 5, 1)), ((1, 1, 1, 6), (1, 1, 1, 7)), ((2, 6, 1, 1), (2, 6, 1, 1)), ((1, 1, 6, 1, 1),) * 2],
)
def test_not_per_channel_is_not_folded(fusion, rng, conv_shape, bn_shape):
    fusion.assert_unchanged(_model(rng, "Conv", ["Mul"], mul_shape=conv_shape), CONV_MUL_ADD, "per-output-channel")
    fusion.assert_unchanged(_model(rng, "BatchNormalization", ["Add"], add_shape=bn_shape), BN_MUL_ADD, "per-channel")


def test_conv_output_used_elsewhere_is_not_folded(fusion, rng):
    model = _model(rng, "Conv", ["Mul"])
    model.graph.output.append(oh.make_tensor_value_info("h", onnx.TensorProto.FLOAT, None))
    fusion.assert_unchanged(model, CONV_MUL_ADD)
