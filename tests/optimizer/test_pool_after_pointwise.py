"""cpu.pool_after_pointwise: a narrowing 1×1 Conv after an AveragePool moved in front of it."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as nh
import pytest

from onnxplug_cpu.rule_sets import rule_sets

POOL_AFTER_POINTWISE = [s for s in rule_sets("basic") if s.name == "cpu.pool_after_pointwise"]


def _model(rng, *, pool=None, conv=None, maps=4, channels=10, bias=True, weights=(1, 1), tail="Relu", extra=False):
    """x (2, 10, 7, 6) → AveragePool → Conv → ``tail``; ``extra``: the pool's output is also an
    output of the graph."""
    pool = {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]} if pool is None else pool
    per_group = channels // (conv or {}).get("group", 1)
    inits = [nh.from_array(rng.standard_normal((maps, per_group, *weights)).astype(np.float32), "w")]
    inputs = ["p", "w"]
    if bias:
        inits.append(nh.from_array(rng.standard_normal(maps).astype(np.float32), "b"))
        inputs.append("b")
    nodes = [oh.make_node("AveragePool", ["x"], ["p"], **pool), oh.make_node("Conv", inputs, ["c"], **(conv or {}))]
    outputs = [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)]
    if tail == "BatchNormalization":
        for name, value in {"scale": 1.0, "beta": 0.0, "mean": 0.0, "var": 1.0}.items():
            inits.append(nh.from_array(np.full(maps, value, np.float32), name))
        nodes.append(oh.make_node("BatchNormalization", ["c", "scale", "beta", "mean", "var"], ["y"]))
    else:
        nodes.append(oh.make_node(tail, ["c"], ["y"]))
    if extra:
        outputs.append(oh.make_tensor_value_info("p", onnx.TensorProto.FLOAT, None))
    graph = oh.make_graph(
        nodes, "pool", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, channels, 7, 6])], outputs, inits
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


def _feeds(rng, channels=10):
    return {"x": rng.standard_normal((2, channels, 7, 6)).astype(np.float32)}


@pytest.mark.parametrize(
    "pool",
    [
        {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},  # Inception's pool branch
        {"kernel_shape": [2, 3], "pads": [0, 1, 1, 1]},  # asymmetric padding, the same size
        {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"},
        {"kernel_shape": [1, 1], "count_include_pad": 1},  # unpadded: counting the padding is no matter
    ],
)
@pytest.mark.parametrize("bias", [True, False])
def test_the_conv_moves_in_front_of_the_pool(fusion, rng, pool, bias):
    fused, applied = fusion.check(
        _model(rng, pool=pool, bias=bias), POOL_AFTER_POINTWISE, _feeds(rng), {"Conv": 1, "AveragePool": 1, "Relu": 1}
    )
    assert applied == {"cpu.pool_after_pointwise": 1}
    assert [node.op_type for node in fused.graph] == ["Conv", "AveragePool", "Relu"]
    # the new value between them keeps a type and shape (providers that need static shapes
    # still take both nodes)
    between = next(node for node in fused.graph if node.op_type == "Conv").outputs[0]
    assert between.dtype == onnx.TensorProto.FLOAT and tuple(between.shape) == (2, 4, 7, 6)


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"maps": 10}, "does not narrow"),
        ({"maps": 12}, "does not narrow"),
        ({"weights": (3, 3), "conv": {"pads": [1, 1, 1, 1]}}, "pointwise"),
        ({"conv": {"strides": [2, 2]}}, "strides"),
        ({"conv": {"group": 2}}, "group"),  # W (4, 5, 1, 1) on 10 channels
        ({"pool": {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}}, "counts padding"),
        ({"pool": {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}}, "keep the map's size"),
        ({"pool": {"kernel_shape": [7, 6]}}, "keep the map's size"),  # a global average
        ({"tail": "BatchNormalization"}, "fold after the Conv"),
        ({"extra": True}, None),  # (onnxscript's matcher declines a pattern whose inner value is read outside it)
    ],
)
def test_what_it_leaves(fusion, rng, change, reason):
    fusion.assert_unchanged(_model(rng, **change), POOL_AFTER_POINTWISE, reason)


def test_a_session_moves_the_pool_after_the_normalization_fold(rng, tmp_path):
    """Inside a session the rule runs in the basic stage after the BatchNormalization fold: a
    Conv + BatchNormalization + Relu pool branch ends as Conv → AveragePool → Relu (the optimized
    model as the session saves it), with the unoptimized model's outputs."""
    import onnxplug

    model = _model(rng, tail="BatchNormalization")
    model.graph.node.append(oh.make_node("Relu", ["y"], ["z"]))
    model.graph.output[0].CopyFrom(oh.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None))
    feeds = _feeds(rng)
    plain = onnxplug.SessionOptions()
    plain.graph_optimization_level = onnxplug.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = onnxplug.InferenceSession(model.SerializeToString(), plain, providers=["CPUExecutionProvider"])
    options = onnxplug.SessionOptions()
    options.graph_optimization_level = onnxplug.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    got = onnxplug.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got.run(None, feeds)[0], want.run(None, feeds)[0], rtol=1e-5, atol=1e-5)
    optimized = onnx.load(tmp_path / "optimized.onnx")
    assert [node.op_type for node in optimized.graph.node] == ["Conv", "AveragePool", "Relu"]
