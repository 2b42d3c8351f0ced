"""The CPU provider runs QuantizeLinear → DequantizeLinear pairs as one fused pass with the same
bits as the two kernels (and as onnxruntime's), and leaves pairs it must not fuse alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug

_TYPES = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8, np.int16: TensorProto.INT16}


def _qdq_model(zero_dtype, q_params, dq_params, *, expose_quantized=False):
    (qs, qz), (ds, dz) = q_params, dq_params
    inits = {
        "qs": np.array(qs, np.float32),
        "qz": np.array(qz, zero_dtype),
        "ds": np.array(ds, np.float32),
        "dz": np.array(dz, zero_dtype),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "qs", "qz"], ["q"], name="quant"),
        helper.make_node("DequantizeLinear", ["q", "ds", "dz"], ["y"], name="dequant"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if expose_quantized:
        outputs.append(helper.make_tensor_value_info("q", _TYPES[zero_dtype], None))
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 40])],
        outputs,
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    opset = 21 if zero_dtype == np.int16 else 13  # 16-bit types from opset 21 on
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _input(scale):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 3, 40)) * 200 * scale).astype(np.float32)
    flat = x.reshape(-1)
    flat[:8] = [np.nan, -0.0, 1e30, -1e30, np.inf, -np.inf, 0.5 * scale, 2.5 * scale]  # ties round to even
    flat[8:12] = np.float32(scale) * np.array([-0.4, 0.4, -1.5, 126.5], np.float32)
    return x


def _unfused(model, x):
    """The two kernels one after the other (the pair split by exposing the quantized value)."""
    copy = model.__class__()
    copy.CopyFrom(model)
    copy.graph.output.append(helper.make_tensor_value_info("q", copy.graph.initializer[1].data_type, None))
    session = onnxplug.InferenceSession(copy.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["y"], {"x": x})[0]


CASES = [
    (np.int8, (0.05, 0), (0.05, 0)),
    (np.int8, (0.05, -128), (0.05, -128)),
    (np.uint8, (0.02, 128), (0.02, 128)),
    (np.uint8, (0.02, 3), (0.07, 250)),  # different parameters on each side
    (np.int16, (0.001, -7), (0.001, -7)),
]


@pytest.mark.parametrize("zero_dtype,q_params,dq_params", CASES)
def test_fused_pair_gives_the_kernels_bits(zero_dtype, q_params, dq_params):
    model = _qdq_model(zero_dtype, q_params, dq_params)
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert list(session.get_partition_report().partitions.values()) == [("quant", "dequant")]
    x = _input(q_params[0])
    got = session.run(None, {"x": x})[0]
    want = _unfused(model, x)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))  # bits: -0.0 and NaN too


@pytest.mark.parametrize("zero_dtype,q_params,dq_params", CASES)
def test_fused_pair_matches_onnxruntime(zero_dtype, q_params, dq_params):
    ort = pytest.importorskip("onnxruntime")
    model = _qdq_model(zero_dtype, q_params, dq_params)
    x = _input(q_params[0])
    x.reshape(-1)[0] = 0  # NaN: onnxruntime saturates it to the type's minimum, onnxplug to the zero point
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    got = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[
        0
    ]
    np.testing.assert_array_equal(got, want)


def _fused_nodes(model) -> list:
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [name for members in session.get_partition_report().partitions.values() for name in members]


def test_pairs_are_fused_only_when_the_quantized_value_stays_inside():
    assert sorted(_fused_nodes(_qdq_model(np.int8, (0.1, 0), (0.1, 0)))) == ["dequant", "quant"]
    # The integer tensor is a graph output: it must be produced, so the pair stays two kernels.
    assert _fused_nodes(_qdq_model(np.int8, (0.1, 0), (0.1, 0), expose_quantized=True)) == []
