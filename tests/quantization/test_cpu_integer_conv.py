"""The CPU provider's integer convolutions are exact on their blocked float32 path (constant
weights, reductions far beyond 2**24 / (255 * 128) terms), checked against int64 arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug


def _exact_conv(x, w):
    """int64 valid convolution (stride 1, no padding) by explicit windows."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    out = np.zeros((n, m, h - kh + 1, wd - kw + 1), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i : i + out.shape[2], j : j + out.shape[3]]
            out += np.einsum("nchw,mc->nmhw", patch, w[:, :, i, j])
    return out


def _session(node, inits, x_type, out_type, x_shape):
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", x_type, x_shape)],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("extreme", [False, True])
def test_conv_integer_blocked_path_is_exact(extreme):
    rng = np.random.default_rng(0)
    c, m = 160, 8  # 160 * 9 = 1440 terms of up to 255 * 128: sums near 2**25, beyond float32's 2**24
    if extreme:  # every product at its largest magnitude, all of one sign
        x = np.full((1, c, 5, 5), 255, np.uint8)
        w = np.full((m, c, 3, 3), -128, np.int8)
    else:
        x = rng.integers(0, 256, (1, c, 5, 5), dtype=np.uint8)
        w = rng.integers(-128, 128, (m, c, 3, 3), dtype=np.int8)
    x_zero = np.uint8(0)
    node = helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"])
    session = _session(node, {"w": w, "xz": np.array(x_zero)}, TensorProto.UINT8, TensorProto.INT32, x.shape)
    got = session.run(None, {"x": x})[0]
    want = _exact_conv(x.astype(np.int64), w.astype(np.int64))
    if extreme:
        assert np.abs(want).max() > 2**24  # float32 accumulation over all terms would round
    np.testing.assert_array_equal(got, want.astype(np.int32))


def test_qlinear_conv_blocked_path_matches_int64_requantization():
    rng = np.random.default_rng(1)
    c, m = 96, 6
    x = rng.integers(0, 256, (2, c, 6, 6), dtype=np.uint8)
    w = rng.integers(-127, 128, (m, c, 3, 3), dtype=np.int8)
    bias = rng.integers(-(2**20), 2**20, (m,), dtype=np.int32)
    xs, ws, ys = np.float32(0.02), np.full(m, 0.003, np.float32), np.float32(0.5)
    xz, yz = np.uint8(128), np.uint8(100)
    inits = {"xs": np.array(xs), "xz": np.array(xz), "w": w, "ws": ws, "wz": np.zeros(m, np.int8)}
    inits |= {"ys": np.array(ys), "yz": np.array(yz), "b": bias}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"])
    session = _session(node, inits, TensorProto.UINT8, TensorProto.UINT8, x.shape)
    got = session.run(None, {"x": x})[0]
    acc = _exact_conv(x.astype(np.int64) - 128, w.astype(np.int64)) + bias.reshape(1, -1, 1, 1)
    scaled = np.rint(acc.astype(np.float32) * (xs * ws / ys).reshape(1, -1, 1, 1))
    want = np.clip(scaled + 100, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(got, want)


@pytest.fixture(params=["1", "0"], ids=["numba", "numpy"])
def jit(request, monkeypatch):
    """The compiled requantization, then numpy's (``ONNXPLUG_CPU_JIT=0``)."""
    from onnxplug_cpu.kernels import _requant_jit

    monkeypatch.setenv("ONNXPLUG_CPU_JIT", request.param)
    _requant_jit.compiled.cache_clear()  # the environment is read once per process
    yield request.param
    _requant_jit.compiled.cache_clear()


def _padded_reference(x, x_zero, w, pads, strides):
    """int64 convolution of ``x - x_zero`` with zero padding (``x_zero`` padding before the
    subtraction, as the spec pads quantized inputs) at the given strides."""
    top, left, bottom, right = pads
    centred = x.astype(np.int64) - int(x_zero)
    padded = np.pad(centred, ((0, 0), (0, 0), (top, bottom), (left, right)))
    full = _exact_conv(padded, w.astype(np.int64))
    return full[:, :, :: strides[0], :: strides[1]]


@pytest.mark.parametrize(
    "x_dtype, x_zero, pads, strides, channels, kernel",
    [
        (np.int8, -128, [1, 1, 1, 1], [1, 1], 64, 3),  # onnxruntime's default activations: centre != zero point
        (np.int8, 17, [2, 0, 1, 2], [2, 1], 130, 3),  # asymmetric pads, strided (im2col), several blocks
        (np.uint8, 0, [1, 2, 1, 0], [1, 2], 200, 3),
        (np.uint8, 128, [0, 0, 0, 0], [1, 1], 160, 3),  # centre == zero point: only the bias is added
        (np.int8, -128, [0, 0, 0, 0], [2, 2], 1100, 1),  # strided pointwise: subsampled, two blocks
        (np.uint8, 7, [1, 1, 1, 1], [1, 1], 1100, 3),  # shifted layout, per-tap bound needs two blocks
    ],
)
@pytest.mark.parametrize("extreme", [False, True])
def test_qlinear_conv_centred_path_is_exact_with_padding(
    x_dtype, x_zero, pads, strides, channels, kernel, extreme, jit
):
    rng = np.random.default_rng(channels)
    m = 12
    low, high = np.iinfo(x_dtype).min, np.iinfo(x_dtype).max
    if extreme:  # every product at its largest magnitude, one sign: the sums reach past 2**24
        x = np.full((2, channels, 9, 8), low if x_zero > (low + high) / 2 else high, x_dtype)
        w = np.full((m, channels, kernel, kernel), -127, np.int8)
    else:
        x = rng.integers(low, high + 1, (2, channels, 9, 8)).astype(x_dtype)
        w = rng.integers(-127, 128, (m, channels, kernel, kernel)).astype(np.int8)
    bias = rng.integers(-(2**22), 2**22, (m,)).astype(np.int32)
    xs, ws, ys = np.float32(0.02), rng.uniform(0.001, 0.004, m).astype(np.float32), np.float32(3.0)
    yz = np.array(-3, np.int8)
    inits = {"xs": np.array(xs), "xz": np.array(x_zero, x_dtype), "w": w, "ws": ws, "wz": np.zeros(m, np.int8)}
    inits |= {"ys": np.array(ys), "yz": yz, "b": bias}
    node = helper.make_node(
        "QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], pads=pads, strides=strides
    )
    x_type = TensorProto.INT8 if x_dtype == np.int8 else TensorProto.UINT8
    session = _session(node, inits, x_type, TensorProto.INT8, x.shape)
    got = session.run(None, {"x": x})[0]
    acc = _padded_reference(x, x_zero, w, pads, strides) + bias.reshape(1, -1, 1, 1)
    if extreme:
        assert np.abs(acc).max() > 2**24
    scaled = np.rint(acc.astype(np.float32) * (xs * ws / ys).reshape(1, -1, 1, 1))
    want = np.clip(scaled - 3, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(got, want)
    integer = helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=pads, strides=strides)
    session = _session(integer, {"w": w, "xz": np.array(x_zero, x_dtype)}, x_type, TensorProto.INT32, x.shape)
    want_int = _padded_reference(x, x_zero, w, pads, strides)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], want_int.astype(np.int32))


@pytest.mark.parametrize(
    "pads, kernel, plus_ndim",
    [
        ([0, 0, 0, 0], 1, 1),  # unpadded: the correction is one value per channel
        ([0, 0, 0, 0], 3, 1),
        ([1, 1, 1, 1], 3, 2),  # padded: a map over the output positions
        ([2, 0, 1, 1], 3, 2),
    ],
)
def test_qlinear_conv_correction_added_in_the_requantization_pass(pads, kernel, plus_ndim, jit):
    """One-block layers leave the correction (offset * conv(ones) + bias) to the requantization
    pass (``ExactConv.rounded_parts``); the outputs stay the int64 reference's, with numba's
    fused pass and with numpy's."""
    from onnxplug_cpu.kernels._exact_conv import ExactConv

    rng = np.random.default_rng(kernel + sum(pads))
    channels, m, x_zero = 40, 10, 9
    x = rng.integers(0, 256, (2, channels, 7, 6)).astype(np.uint8)
    w = rng.integers(-127, 128, (m, channels, kernel, kernel)).astype(np.int8)
    bias = rng.integers(-(2**20), 2**20, (m,)).astype(np.int32)
    geometry = dict(auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=pads, strides=None)
    prepared = ExactConv(w.astype(np.int64), np.uint8, x_zero, geometry, bias)
    assert len(prepared.blocks) == 1
    acc, plus = prepared.rounded_parts(x)
    assert acc.dtype == np.float32 and plus is not None and plus.ndim == plus_ndim
    xs, ws, ys = np.float32(0.05), rng.uniform(0.001, 0.004, m).astype(np.float32), np.float32(2.0)
    inits = {"xs": np.array(xs), "xz": np.array(x_zero, np.uint8), "w": w, "ws": ws, "wz": np.zeros(m, np.int8)}
    inits |= {"ys": np.array(ys), "yz": np.array(120, np.uint8), "b": bias}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], pads=pads)
    got = _session(node, inits, TensorProto.UINT8, TensorProto.UINT8, x.shape).run(None, {"x": x})[0]
    reference = _padded_reference(x, x_zero, w, pads, (1, 1)) + bias.reshape(1, -1, 1, 1)
    scaled = np.rint(reference.astype(np.float32) * (xs * ws / ys).reshape(1, -1, 1, 1))
    np.testing.assert_array_equal(got, np.clip(scaled + 120, 0, 255).astype(np.uint8))


@pytest.mark.parametrize("extreme", [False, True])
@pytest.mark.parametrize("pads, dilation", [([1, 1, 1, 1], 1), ([2, 1, 0, 2], 2)])
def test_shifted_per_offset_bound_replaces_the_channel_blocks(pads, dilation, extreme):
    """A stride-1 3×3 layer whose whole reduction breaks the float32 bound (two channel blocks)
    but each kernel offset's does not: one float32 matmul, the offsets added in float64."""
    from onnxplug_cpu.kernels._exact_conv import ExactConv

    rng = np.random.default_rng(dilation)
    c, m = 161, 8  # 161 * 9 * 127 * 127 ≈ 2**24.5: two blocks; per offset 161 * 127 * 127 ≈ 2**21.3
    if extreme:  # odd products of one sign, an odd count per offset: odd sums beyond 2**24
        x = np.full((1, c, 16, 15), 255, np.uint8)
        w = np.full((m, c, 3, 3), -127, np.int8)
    else:
        x = rng.integers(0, 256, (1, c, 16, 15)).astype(np.uint8)
        w = (rng.choice([-1, 1], (m, c, 3, 3)) * rng.integers(120, 128, (m, c, 3, 3))).astype(np.int8)
    x_zero = np.uint8(128)
    geometry = dict(auto_pad="NOTSET", dilations=[dilation] * 2, group=1, kernel_shape=None, pads=pads, strides=None)
    prepared = ExactConv(w.astype(np.int64), np.uint8, 128, geometry)
    assert len(prepared.blocks) == 2 and prepared.tap_stacked is not None
    attrs = dict(pads=pads, dilations=[dilation] * 2)
    node = helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], **attrs)
    got = _session(node, {"w": w, "xz": np.array(x_zero)}, TensorProto.UINT8, TensorProto.INT32, x.shape)
    got = got.run(None, {"x": x})[0]
    top, left, bottom, right = pads
    padded = np.pad(x.astype(np.int64) - 128, ((0, 0), (0, 0), (top, bottom), (left, right)))
    dilated = np.zeros((m, c, 2 * dilation + 1, 2 * dilation + 1), np.int64)
    dilated[:, :, ::dilation, ::dilation] = w
    want = _exact_conv(padded, dilated)
    if extreme:
        assert np.abs(want).max() > 2**24
    np.testing.assert_array_equal(got, want.astype(np.int32))
