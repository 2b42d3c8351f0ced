"""FusedConv's activations applied in place on the convolution's fresh output, or (Relu, Clip) as
the clamp of the convolution's epilogue."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model
from onnxplug_cpu.numerics import convolve, pack_conv_weights
from onnxplug_ms_ops.kernels.fused import _clamp, _in_place_activation


@pytest.mark.parametrize("activation, params", [("Relu", []), ("Clip", [-0.5, 0.75]), ("Sigmoid", []), ("Tanh", [])])
def test_fused_conv_in_place_activations(activation, params):
    """The common activations write into the array they are given or are the epilogue's clamp, and
    FusedConv with them equals Conv, the residual add and then the op."""
    y = np.linspace(-100, 100, 11, dtype=np.float32)
    if activation in ("Relu", "Clip"):
        assert _clamp(activation, params, np.float32) == {"Relu": (0.0, np.inf), "Clip": (-0.5, 0.75)}[activation]
        assert _in_place_activation(activation) is None
    else:
        assert _in_place_activation(activation)(y) is y
    rng = np.random.default_rng(5)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    x = rng.standard_normal((1, 16, 20, 20)).astype(np.float32)
    z = rng.standard_normal((1, 16, 20, 20)).astype(np.float32)
    z.flat[::97] = 200 * np.sign(z.flat[::97])  # saturates Sigmoid's exp both ways
    attrs = {"activation": activation, "pads": [1, 1, 1, 1]}
    if params:
        attrs["activation_params"] = params
    node = helper.make_node("FusedConv", ["x", "w", "", "z"], ["y"], domain="com.microsoft", **attrs)
    model = make_model(
        [node],
        [("x", TensorProto.FLOAT, [1, 16, 20, 20]), ("z", TensorProto.FLOAT, [1, 16, 20, 20])],
        [("y", TensorProto.FLOAT, None)],
        {"w": w},
        extra_opsets={"com.microsoft": 1},
    )
    got = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = got.run(None, {"x": x, "z": z})[0]
    w64 = w.astype(np.float64)
    pre = convolve(x.astype(np.float64), w64, packed=pack_conv_weights(w64, 1), pads=[1, 1, 1, 1]) + z
    want = {
        "Relu": lambda v: np.maximum(v, 0),
        "Clip": lambda v: np.clip(v, -0.5, 0.75),
        "Sigmoid": lambda v: 0.5 * (1 + np.tanh(v / 2)),
        "Tanh": np.tanh,
    }[activation](pre)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
