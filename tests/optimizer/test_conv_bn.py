"""cpu.conv_bn: BatchNormalization folded into the Conv before it."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as nh
import pytest

from onnxplug_cpu.rule_sets import rule_sets

CONV_BN = [s for s in rule_sets("basic") if s.name == "cpu.conv_bn"]


def conv_bn(rng, *, conv_bias=True, bn_attrs=None, opset=17, bn_outputs=("y",), const_params=True, group=1):
    w = rng.standard_normal((6, 4 // group, 3, 3)).astype(np.float32)
    params = {
        "scale": rng.uniform(0.5, 1.5, 6),
        "beta": rng.standard_normal(6),
        "mean": rng.standard_normal(6),
        "var": rng.uniform(0.5, 2.0, 6),
    }
    inits = [nh.from_array(w, "w")]
    conv_inputs = ["x", "w"]
    if conv_bias:
        inits.append(nh.from_array(rng.standard_normal(6).astype(np.float32), "b"))
        conv_inputs.append("b")
    inputs = [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 4, 8, 8])]
    for name, array in params.items():
        if const_params or name != "scale":
            inits.append(nh.from_array(array.astype(np.float32), name))
        else:
            inputs.append(oh.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [6]))
    nodes = [
        oh.make_node("Conv", conv_inputs, ["c"], pads=[1, 1, 1, 1], group=group, name="conv"),
        oh.make_node("BatchNormalization", ["c", "scale", "beta", "mean", "var"], list(bn_outputs), **(bn_attrs or {})),
    ]
    outputs = [oh.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in bn_outputs]
    graph = oh.make_graph(nodes, "conv_bn", inputs, outputs, initializer=inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("conv_bias", [True, False])
@pytest.mark.parametrize("group", [1, 2])
def test_folds_into_conv(fusion, rng, conv_bias, group):
    x = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    fused, applied = fusion.check(
        conv_bn(rng, conv_bias=conv_bias, group=group, bn_attrs={"epsilon": 1e-3}), CONV_BN, {"x": x}, {"Conv": 1}
    )
    assert applied == {"cpu.conv_bn": 1}
    conv = next(iter(fused.graph))
    assert conv.attributes.get_int("group") == group and len(conv.inputs) == 3


def test_weights_shared_with_another_conv_stay(fusion, rng):
    model = conv_bn(rng)
    graph = model.graph
    graph.node.append(oh.make_node("Conv", ["x", "w", "b"], ["other"], pads=[1, 1, 1, 1]))
    graph.output.append(oh.make_tensor_value_info("other", onnx.TensorProto.FLOAT, None))
    x = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    fusion.check(model, CONV_BN, {"x": x}, {"Conv": 2})


def test_training_mode_is_not_folded(fusion, rng):
    model = conv_bn(rng, opset=15, bn_attrs={"training_mode": 1}, bn_outputs=("y", "rm", "rv"))
    fusion.assert_unchanged(model, CONV_BN)


def test_running_statistics_outputs_are_not_folded(fusion, rng):
    fusion.assert_unchanged(conv_bn(rng, opset=9, bn_outputs=("y", "rm", "rv")), CONV_BN)


def test_non_constant_parameter_is_not_folded(fusion, rng):
    fusion.assert_unchanged(conv_bn(rng, const_params=False), CONV_BN, "is not constant")


def test_conv_output_used_elsewhere_is_not_folded(fusion, rng):
    model = conv_bn(rng)
    model.graph.output.append(oh.make_tensor_value_info("c", onnx.TensorProto.FLOAT, None))
    fusion.assert_unchanged(model, CONV_BN)
