"""The AVX-512 VNNI integer convolution (``kernels._vnni``, ``kernels._int8_conv``).

QLinearConv and ConvInteger through the VNNI path must give the same bits as the float paths
they replace (``ONNXPLUG_CPU_VNNI=0``), which are exact themselves (``test_conv_paths``), and as
an int64 numpy convolution; over strides, dilations, pads, auto_pad, channel counts that are not
multiples of four, row counts that are not multiples of the tile, int8 and uint8 inputs and
weights, per-channel weight zero points, biases, batches, maps split by columns and by rows.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug
from onnxplug_cpu.kernels import _int8_conv, _vnni

needs_vnni = pytest.mark.skipif(
    not _vnni.available(),
    reason="the int8 path needs a CPU with AVX-512 VNNI and numba (absent, or ONNXPLUG_CPU_JIT/VNNI=0)",
)

# (M, C, kernel, strides, pads or auto_pad, dilations, H, W)
GEOMETRIES = [
    (7, 5, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 9, 12),
    (13, 8, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 20, 23),
    (16, 3, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 33, 36),
    (6, 12, (3, 3), (2, 2), (1, 0, 1, 2), (1, 1), 17, 20),
    (5, 4, (3, 2), (1, 3), (0, 1, 2, 0), (2, 1), 15, 18),
    (64, 64, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 40, 43),  # several column tiles, split by columns
    (600, 40, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 14, 17),  # one column tile, split by rows
    (9, 6, (3, 3), (1, 1), "SAME_UPPER", (2, 2), 11, 13),
    (9, 6, (2, 3), (2, 1), "SAME_LOWER", (1, 1), 10, 9),
    (4, 4, (3, 3), (1, 1), "VALID", (1, 1), 3, 3),  # a single output cell
]


def _qlinear_model(rng, x_type, w_type, geometry, bias, per_channel, op="QLinearConv", wide=False):
    m, c, kernel, strides, pads, dilations, _, _ = geometry
    shape = (m,) if per_channel else ()
    if w_type == np.int8:
        w = rng.integers(-128, 128, (m, c) + kernel).astype(w_type)
        w_zero = np.zeros(shape, w_type)
    else:  # uint8 weights within 99 of a zero point in [120, 136): w - w_zero fits int8 unless ``wide``
        w_zero = rng.integers(120, 136, shape).astype(w_type)
        if wide:
            w_zero.reshape(-1)[0] = 100
        w = rng.integers(-99, 100, (m, c) + kernel) + w_zero.reshape((-1,) + (1,) * 3)
        if wide:
            w[0, 0, 0, 0] = 255  # 155 from its zero point: beyond int8
        w = w.astype(w_type)
    x_zero = np.array(3 if x_type == np.uint8 else -5, x_type)
    tensor_type = TensorProto.UINT8 if x_type == np.uint8 else TensorProto.INT8
    attrs = dict(kernel_shape=list(kernel), strides=list(strides), dilations=list(dilations))
    attrs.update(auto_pad=pads) if isinstance(pads, str) else attrs.update(pads=list(pads))
    if op == "ConvInteger":
        inits = [
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(x_zero, "xz"),
            numpy_helper.from_array(w_zero, "wz"),
        ]
        node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)
        out_type = TensorProto.INT32
    else:
        inits = [
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(w_zero, "wz"),
            numpy_helper.from_array((rng.random(shape) * 0.01 + 0.001).astype(np.float32), "ws"),
            numpy_helper.from_array(np.array(0.02, np.float32), "xs"),
            numpy_helper.from_array(x_zero, "xz"),
            numpy_helper.from_array(np.array(0.05, np.float32), "ys"),
            numpy_helper.from_array(np.array(128 if x_type == np.uint8 else 1, x_type), "yz"),
        ]
        inputs = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
        if bias:
            inits.append(numpy_helper.from_array(rng.integers(-5000, 5000, m).astype(np.int32), "b"))
            inputs.append("b")
        node = helper.make_node("QLinearConv", inputs, ["y"], **attrs)
        out_type = tensor_type
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", tensor_type, None)],
        [helper.make_tensor_value_info("y", out_type, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _run(data, x, monkeypatch, vnni: bool):
    monkeypatch.setenv("ONNXPLUG_CPU_VNNI", "1" if vnni else "0")
    session = onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _input(rng, x_type, geometry, batch=2):
    _, c, _, _, _, _, h, w = geometry
    low, high = (-128, 128) if x_type == np.int8 else (0, 256)
    return rng.integers(low, high, (batch, c, h, w)).astype(x_type)


@pytest.fixture
def calls(count_calls):
    """Counts the calls that reach the VNNI path (``count_calls`` is in this folder's conftest)."""
    return count_calls(_int8_conv.Int8Conv, "qlinear", "integer")


@needs_vnni
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: f"{g[0]}x{g[1]}k{g[2]}s{g[3]}p{g[4]}d{g[5]}")
@pytest.mark.parametrize(("x_type", "w_type"), list(itertools.product([np.uint8, np.int8], [np.int8, np.uint8])))
def test_qlinear_conv_same_bits_as_float_paths(geometry, x_type, w_type, monkeypatch, calls):
    rng = np.random.default_rng(sum(geometry[:2]) + 3 * (x_type == np.int8) + (w_type == np.int8))
    for bias, per_channel in ((False, False), (True, True)):
        data = _qlinear_model(rng, x_type, w_type, geometry, bias, per_channel)
        x = _input(rng, x_type, geometry)
        before = calls["qlinear"]
        got = _run(data, x, monkeypatch, vnni=True)
        assert calls["qlinear"] == before + 1
        expected = _run(data, x, monkeypatch, vnni=False)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)


def _int64_conv(x, w, x_zero, w_zero, strides, pads, dilations):
    """ConvInteger's definition, directly: int64 sums of (x - x_zero) * (w - w_zero)."""
    xi = np.pad(x.astype(np.int64) - int(x_zero), [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    wi = w.astype(np.int64) - w_zero.astype(np.int64).reshape(-1, 1, 1, 1)
    m, _, kh, kw = wi.shape
    oh = (xi.shape[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (xi.shape[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    out = np.zeros((x.shape[0], m, oh, ow), np.int64)
    for ky, kx in itertools.product(range(kh), range(kw)):
        y0, x0 = ky * dilations[0], kx * dilations[1]
        window = xi[
            :, :, y0 : y0 + strides[0] * (oh - 1) + 1 : strides[0], x0 : x0 + strides[1] * (ow - 1) + 1 : strides[1]
        ]
        out += np.einsum("nchw,mc->nmhw", window, wi[:, :, ky, kx])
    return out


@needs_vnni
@pytest.mark.parametrize(
    "geometry", [g for g in GEOMETRIES if not isinstance(g[4], str)], ids=lambda g: f"{g[0]}x{g[1]}"
)
@pytest.mark.parametrize(("x_type", "w_type"), [(np.uint8, np.int8), (np.int8, np.uint8)])
def test_conv_integer_against_int64_definition(geometry, x_type, w_type, monkeypatch, calls):
    rng = np.random.default_rng(geometry[0])
    data = _qlinear_model(rng, x_type, w_type, geometry, False, True, op="ConvInteger")
    x = _input(rng, x_type, geometry)
    got = _run(data, x, monkeypatch, vnni=True)
    assert calls["integer"] == 1 and got.dtype == np.int32
    import onnx

    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load_from_string(data).graph.initializer}
    expected = _int64_conv(x, inits["w"], inits["xz"], inits["wz"], geometry[3], geometry[4], geometry[5])
    np.testing.assert_array_equal(got, expected)


@needs_vnni
def test_sums_past_int32_take_the_other_path(monkeypatch, calls):
    """A bias near int32's limit could overflow the int32 accumulator: the node is not prepared
    for VNNI (the float64 path computes it) and gives the same result as with VNNI off."""
    rng = np.random.default_rng(5)
    geometry = GEOMETRIES[0]
    data = _qlinear_model(rng, np.uint8, np.int8, geometry, True, False)
    import onnx

    model = onnx.load_from_string(data)
    bias = next(t for t in model.graph.initializer if t.name == "b")
    bias.CopyFrom(numpy_helper.from_array(np.full(geometry[0], 2**31 - 1000, np.int32), "b"))
    data = model.SerializeToString()
    x = _input(rng, np.uint8, geometry)
    got = _run(data, x, monkeypatch, vnni=True)
    assert calls["qlinear"] == 0
    np.testing.assert_array_equal(got, _run(data, x, monkeypatch, vnni=False))


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv("ONNXPLUG_CPU_VNNI", "0")
    assert not _vnni.available()
    assert not _int8_conv.Int8Conv.accepts(np.zeros((1, 1, 1, 1), np.int64), np.uint8, {"group": 1})


@needs_vnni
def test_weights_wider_than_int8_take_the_other_path(monkeypatch, calls):
    """uint8 weights whose distance to their zero point exceeds int8 (one weight 155 from it)
    are not prepared for VNNI, and the float path computes them."""
    rng = np.random.default_rng(6)
    geometry = GEOMETRIES[0]
    data = _qlinear_model(rng, np.uint8, np.uint8, geometry, True, True, wide=True)
    x = _input(rng, np.uint8, geometry)
    got = _run(data, x, monkeypatch, vnni=True)
    assert calls["qlinear"] == 0
    np.testing.assert_array_equal(got, _run(data, x, monkeypatch, vnni=False))
