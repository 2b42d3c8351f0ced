"""The CPU provider fuses QDQ activation chains — Conv → Q → DQ, and Sum → Q → DQ → Relu → Q → DQ
— into one partition each, with the same bits as the nodes run one by one (and as onnxruntime's
values), and leaves a chain alone where an intermediate value is needed outside it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug


def _qdq(value, out, scale, zero, prefix):
    """Q → DQ nodes of ``value`` into ``out`` with initializers ``{prefix}_s`` / ``{prefix}_z``."""
    return [
        helper.make_node("QuantizeLinear", [value, f"{prefix}_s", f"{prefix}_z"], [f"{prefix}_q"], name=f"{prefix}_Q"),
        helper.make_node("DequantizeLinear", [f"{prefix}_q", f"{prefix}_s", f"{prefix}_z"], [out], name=f"{prefix}_DQ"),
    ], {f"{prefix}_s": np.array(scale, np.float32), f"{prefix}_z": np.array(zero, np.int8)}


def _model(expose=None):
    """x → QDQ → Conv → QDQ ─┬─ Sum(·, skip) → QDQ → Relu → QDQ → y; ``expose``: also output
    that intermediate value (which must then stay outside any fused chain)."""
    rng = np.random.default_rng(3)
    inits = {
        "w": (rng.standard_normal((8, 4, 3, 3)) * 0.2).astype(np.float32),
        "b": rng.standard_normal(8).astype(np.float32),
    }
    nodes = []
    for value, out, scale, zero, prefix in [
        ("x", "xd", 0.03, -5, "in"),
        ("conv", "cd", 0.05, -128, "c"),
        ("sum", "sd", 0.08, 0, "s"),
        ("relu", "y", 0.04, -128, "r"),
    ]:
        made, params = _qdq(value, out, scale, zero, prefix)
        nodes += made
        inits |= params
        if prefix == "in":
            nodes.append(helper.make_node("Conv", ["xd", "w", "b"], ["conv"], name="conv", pads=[1, 1, 1, 1]))
        elif prefix == "c":
            nodes.append(helper.make_node("Sum", ["cd", "skip"], ["sum"], name="sum"))
        elif prefix == "s":
            nodes.append(helper.make_node("Relu", ["sd"], ["relu"], name="relu"))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if expose:
        outputs.append(helper.make_tensor_value_info(expose, TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes,
        "chains",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 10, 9]),
            helper.make_tensor_value_info("skip", TensorProto.FLOAT, [2, 8, 10, 9]),
        ],
        outputs,
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _feeds():
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((2, 4, 10, 9)) * 2).astype(np.float32)
    skip = (rng.standard_normal((2, 8, 10, 9)) * 3).astype(np.float32)
    x.reshape(-1)[:4] = [np.inf, -np.inf, -0.0, 0.015]  # saturation, signed zero, a tie
    return {"x": x, "skip": skip}


def _session(model):
    return onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _node_by_node(model, feeds):
    """Every node its own kernel: each intermediate value is made a graph output."""
    copy = model.__class__()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        for value in node.output:
            if value != "y":
                copy.graph.output.append(helper.make_tensor_value_info(value, 0, None))
    session = _session(copy)
    assert session.get_partition_report().partitions == {}
    return session.run(["y"], feeds)[0]


@pytest.mark.parametrize("jit", ["1", "0"])
def test_chains_are_fused_with_the_kernels_bits(jit, monkeypatch):
    monkeypatch.setenv("ONNXPLUG_CPU_JIT", jit)
    from onnxplug_cpu.kernels import _qdq

    _qdq._compiled.cache_clear()  # the environment is read once per process
    try:
        model = _model()
        session = _session(model)
        chains = sorted(session.get_partition_report().partitions.values())
        assert chains == [
            ("conv", "c_Q", "c_DQ"),
            ("in_Q", "in_DQ"),
            ("sum", "s_Q", "s_DQ", "relu", "r_Q", "r_DQ"),
        ]
        feeds = _feeds()
        got = session.run(None, feeds)[0]
        want = _node_by_node(model, feeds)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    finally:
        _qdq._compiled.cache_clear()


@pytest.mark.parametrize(
    "expose, chains",
    [
        # The Conv's output is read outside: the Conv runs alone, its Q → DQ pair still fuses.
        ("conv", [("c_Q", "c_DQ"), ("in_Q", "in_DQ"), ("sum", "s_Q", "s_DQ", "relu", "r_Q", "r_DQ")]),
        # The dequantized sum is read outside: the chain ends there; the Relu runs alone.
        ("sd", [("conv", "c_Q", "c_DQ"), ("in_Q", "in_DQ"), ("r_Q", "r_DQ"), ("sum", "s_Q", "s_DQ")]),
    ],
)
def test_a_chain_stops_where_a_value_is_needed_outside(expose, chains):
    model = _model(expose)
    session = _session(model)
    assert sorted(session.get_partition_report().partitions.values()) == chains
    feeds = _feeds()
    got = session.run(None, feeds)
    np.testing.assert_array_equal(got[0].view(np.uint32), _node_by_node(model, feeds).view(np.uint32))


def test_chains_match_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    model = _model()
    feeds = _feeds()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(
        None, feeds
    )[0]
    got = _session(model).run(None, feeds)[0]
    # The convolution's float32 sums may round differently (another summation order): compare
    # the dequantized outputs to within one quantization step.
    assert np.abs(got - want).max() <= 0.04 + 1e-6
    assert np.mean(got == want) > 0.95
