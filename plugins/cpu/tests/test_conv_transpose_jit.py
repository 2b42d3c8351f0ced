"""The compiled non-overlapping ConvTranspose (``kernels._conv_transpose_jit``): onnx's reference
evaluator on kernels equal to their strides, with and without bias, constant and fed weights,
batches, float16; and the layers that keep the numpy path (pads, groups, overlapping windows)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxplug
from onnxplug.testing import make_model
from onnxplug_cpu.kernels import nn

CASES = [
    # x shape, w shape, attributes, bias, whether the compiled path applies
    ((1, 16, 10, 12), (16, 8, 2, 2), dict(strides=[2, 2]), True, True),
    ((1, 6, 5, 7), (6, 4, 2, 2), dict(strides=[2, 2]), False, True),  # two columns, no bias
    ((2, 5, 7, 6), (5, 3, 3, 3), dict(strides=[3, 3]), False, True),
    ((1, 4, 5, 9), (4, 6, 2, 3), dict(strides=[2, 3]), True, True),
    ((1, 8, 6, 6), (8, 1, 2, 2), dict(strides=[2, 2]), True, True),
    ((1, 4, 6, 6), (4, 4, 2, 2), dict(strides=[2, 2], pads=[1, 0, 1, 0]), True, False),
    ((1, 4, 6, 6), (4, 2, 2, 2), dict(strides=[2, 2], group=2), True, False),
    ((1, 4, 6, 6), (4, 3, 3, 3), dict(strides=[2, 2]), True, False),
    ((1, 4, 6, 6), (4, 3, 2, 2), dict(strides=[2, 2], output_padding=[1, 1]), True, False),
]


def _model(x_shape, w_shape, attrs, bias, constant, dtype=TensorProto.FLOAT):
    inputs = ["x", "w"] + (["b"] if bias else [])
    node = helper.make_node("ConvTranspose", inputs, ["y"], kernel_shape=list(w_shape[2:]), **attrs)
    declared = [("x", dtype, x_shape)]
    if not constant:
        declared.append(("w", dtype, w_shape))
    return make_model([node], declared, [("y", dtype, None)], opset=17), inputs


def _reference(x, w, b, attrs):
    """onnx's reference ConvTranspose, one group at a time (its grouped path fails to broadcast)."""
    groups = attrs.get("group", 1)
    single = {k: v for k, v in attrs.items() if k != "group"}
    parts = []
    for xg, wg, bg in zip(
        np.split(x, groups, axis=1), np.split(w, groups), np.split(b, groups) if b is not None else [None] * groups
    ):
        model, _ = _model(xg.shape, wg.shape, single, bg is not None, False)
        feeds = {"x": xg, "w": wg} | ({"b": bg} if bg is not None else {})
        if bg is not None:
            model.graph.input.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, bg.shape))
        parts.append(ReferenceEvaluator(model).run(None, feeds)[0])
    return np.concatenate(parts, axis=1)


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("constant", [True, False])
def test_matches_the_reference(case, constant, monkeypatch):
    x_shape, w_shape, attrs, bias, compiled = CASES[case]
    rng = np.random.default_rng(case)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[1] * attrs.get("group", 1)).astype(np.float32)
    calls = []
    real = nn._compiled_interleave
    monkeypatch.setattr(nn, "_compiled_interleave", lambda: calls.append(1) or real())
    model, inputs = _model(x_shape, w_shape, attrs, bias, constant)
    initializers = {"w": w, "b": b} if constant else {"b": b}
    for name, value in initializers.items():
        if name in inputs:
            model.graph.initializer.append(numpy_helper.from_array(value, name))
    feeds = {"x": x} if constant else {"x": x, "w": w}
    want = _reference(x, w, b if bias else None, attrs)
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for _ in range(2):  # the second call reuses the transposed constant weights
        got = session.run(None, feeds)[0]
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert bool(calls) == compiled


@pytest.mark.numba
def test_float16():
    """float16 runs in float32 and comes back, with and without a bias."""
    run = nn.conv_transpose.__wrapped__ if hasattr(nn.conv_transpose, "__wrapped__") else nn.conv_transpose

    class Ctx:
        def constant(self, index):
            return None

    kernel = run(Ctx(), auto_pad="NOTSET", group=1, kernel_shape=[2, 2], strides=[2, 2])
    x = np.full((1, 2, 3, 3), -1.0, np.float16)
    w = np.zeros((2, 2, 2, 2), np.float16)
    w[0] = 1.0
    y = kernel(x, w)
    assert y.dtype == np.float16 and y.shape == (1, 2, 6, 6)
    np.testing.assert_array_equal(y, np.full((1, 2, 6, 6), -1.0, np.float16))
    np.testing.assert_array_equal(kernel(x, w, np.array([0.5, -2], np.float16))[0, 1], -3.0)  # -1·1 - 1·0 - 2
