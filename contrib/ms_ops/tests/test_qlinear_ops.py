"""QGemm, QLinearSoftmax, QLinearAveragePool, QLinearReduceMean, QLinearWhere and the
com.microsoft QuantizeLinear/DequantizeLinear against onnxruntime.

Requantized 8-bit results may differ by one step where onnxruntime's integer or lookup-table
arithmetic rounds differently from float32, so those are compared with atol=1.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest


def _q(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


def _zero(dtype, offset=0):
    return np.array((128 if dtype == np.uint8 else 0) + offset, dtype)


@pytest.mark.parametrize("a_type,b_type", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("output", ["float", "quantized"])
@pytest.mark.parametrize("trans", [(0, 0), (1, 1)])
def test_qgemm(run_both, close, rng, a_type, b_type, per_column, output, trans):
    m, k, n = 5, 12, 7
    a = _q(rng, a_type, (k, m) if trans[0] else (m, k))
    b = _q(rng, b_type, (n, k) if trans[1] else (k, n))
    shape = (n,) if per_column else ()
    inputs = [
        ("a", a),
        ("a_scale", np.array(0.02, np.float32)),
        ("a_zero", _zero(a_type, 3)),
        ("b", b),
        ("b_scale", np.asarray(rng.random(shape) * 0.05 + 0.01, np.float32)),
        ("b_zero", np.asarray(rng.integers(-5, 5, size=shape) + (128 if b_type == np.uint8 else 0), b_type)),
        ("c", rng.integers(-2000, 2000, size=(n,)).astype(np.int32)),
    ]
    if output == "quantized":
        inputs += [("y_scale", np.array(0.3, np.float32)), ("y_zero", _zero(a_type, -2))]
    ours, theirs = run_both(
        "QGemm", inputs, ["y"], initializers=("b", "b_scale", "b_zero"), transA=trans[0], transB=trans[1], alpha=0.5
    )
    close(ours, theirs, rtol=1e-5, atol=1 if output == "quantized" else 1e-4)


def test_qgemm_y_scale_without_zero_point_is_float(run_both, close, rng):
    inputs = [
        ("a", _q(rng, np.uint8, (3, 8))),
        ("a_scale", np.array(0.02, np.float32)),
        ("a_zero", np.array(120, np.uint8)),
        ("b", _q(rng, np.int8, (8, 4))),
        ("b_scale", np.array(0.04, np.float32)),
        ("b_zero", np.array(0, np.int8)),
        ("", None),
        ("y_scale", np.array(0.1, np.float32)),
    ]
    close(*run_both("QGemm", inputs, ["y"]), rtol=1e-5, atol=1e-4)


def test_qgemm_without_c(run_both, close, rng):
    inputs = [
        ("a", _q(rng, np.uint8, (3, 8))),
        ("a_scale", np.array(0.02, np.float32)),
        ("a_zero", np.array(120, np.uint8)),
        ("b", _q(rng, np.int8, (8, 4))),
        ("b_scale", np.array(0.04, np.float32)),
        ("b_zero", np.array(0, np.int8)),
    ]
    close(*run_both("QGemm", inputs, ["y"]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("opset,axis", [(13, -1), (13, 1), (12, 1), (11, -1)])
@pytest.mark.parametrize("y_scale", [1 / 256, 1 / 255, 0.0123])
def test_qlinear_softmax(run_both, close, rng, dtype, opset, axis, y_scale):
    info = np.iinfo(dtype)
    inputs = [
        ("x", _q(rng, dtype, (2, 3, 10))),
        ("x_scale", np.array(0.07, np.float32)),
        ("x_zero", _zero(dtype, 5)),
        ("y_scale", np.array(y_scale, np.float32)),
        ("y_zero", np.array(info.min, dtype)),
    ]
    ours, theirs = run_both("QLinearSoftmax", inputs, ["y"], axis=axis, node_attrs={"opset": opset})
    close(ours, theirs, atol=1)


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [2, 2], "strides": [2, 2]},
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
        {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1},
        {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
        {"kernel_shape": [3, 3], "strides": [2, 1], "auto_pad": "SAME_LOWER", "count_include_pad": 1},
    ],
)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_average_pool(run_both, close, rng, attrs, dtype, channels_last):
    x = _q(rng, dtype, (2, 7, 9, 3) if channels_last else (2, 3, 7, 9))
    inputs = [
        ("x", x),
        ("x_scale", np.array(0.05, np.float32)),
        ("x_zero", _zero(dtype, 4)),
        ("y_scale", np.array(0.04, np.float32)),
        ("y_zero", _zero(dtype, -3)),
    ]
    close(*run_both("QLinearAveragePool", inputs, ["y"], channels_last=channels_last, **attrs))


def test_qlinear_average_pool_1d(run_both, close, rng):
    inputs = [
        ("x", _q(rng, np.uint8, (2, 4, 11))),
        ("x_scale", np.array(0.05, np.float32)),
        ("x_zero", np.array(100, np.uint8)),
        ("y_scale", np.array(0.05, np.float32)),
        ("y_zero", np.array(100, np.uint8)),
    ]
    close(*run_both("QLinearAveragePool", inputs, ["y"], kernel_shape=[4], strides=[3]))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([2, 3], 1), ([-1], 0), ([0, 2], 0)])
def test_qlinear_reduce_mean(run_ours, rng, dtype, axes, keepdims):
    # onnxruntime registers the schema but has no CPU kernel ("Could not find an
    # implementation"), so the reference is the op's definition: dequantize, mean, quantize.
    x = _q(rng, dtype, (2, 3, 5, 4))
    zx, zy = _zero(dtype, 6), _zero(dtype, -1)
    inputs = [
        ("x", x),
        ("x_scale", np.array(0.05, np.float32)),
        ("x_zero", zx),
        ("y_scale", np.array(0.0213, np.float32)),  # no exact ties
        ("y_zero", zy),
    ]
    (got,) = run_ours("QLinearReduceMean", inputs, ["y"], axes=axes, keepdims=keepdims)
    mean = ((x.astype(np.float64) - int(zx)) * 0.05).mean(axis=tuple(axes), keepdims=bool(keepdims))
    info = np.iinfo(dtype)
    want = np.clip(np.rint(mean / np.float64(np.float32(0.0213))) + int(zy), info.min, info.max).astype(dtype)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.abs(got.astype(int) - want).max() <= 1 and (got != want).mean() < 0.05


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("same_scale", [False, True])
def test_qlinear_where(run_both, close, rng, dtype, same_scale):
    z_scale, z_zero = (0.05, _zero(dtype, 2)) if same_scale else (0.09, _zero(dtype, -7))
    inputs = [
        ("cond", rng.random((3, 1, 6)) > 0.5),
        ("x", _q(rng, dtype, (3, 4, 6))),
        ("x_scale", np.array(0.05, np.float32)),
        ("x_zero", _zero(dtype, 2)),
        ("y", _q(rng, dtype, (6,))),  # broadcast
        ("y_scale", np.array(0.03, np.float32)),
        ("y_zero", _zero(dtype, 9)),
        ("z_scale", np.array(z_scale, np.float32)),
        ("z_zero", z_zero),
    ]
    ours, theirs = run_both("QLinearWhere", inputs, ["z"])
    close(ours, theirs, atol=1)


_QUANT_TYPES = [np.uint8, np.int8, np.uint16, np.int16]


@pytest.mark.parametrize("dtype", _QUANT_TYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_dequantize_linear(run_both, close, rng, dtype, per_axis):
    x, scale, zero = _qdq_params(rng, dtype, per_axis)
    q_ours, q_theirs = run_both("QuantizeLinear", [("x", x), ("s", scale), ("z", zero)], ["y"], initializers=("s", "z"))
    close(q_ours, q_theirs)
    inputs = [("q", q_theirs[0]), ("s", scale), ("z", zero)]
    close(*run_both("DequantizeLinear", inputs, ["y"], initializers=("s", "z"), axis=1), rtol=1e-6, atol=1e-6)


def _qdq_params(rng, dtype, per_axis):
    x = (rng.standard_normal((2, 4, 5)) * 3).astype(np.float32)
    x[0, 0, :3] = [0.125, -0.375, 1e6]  # ties to even, saturation
    shape = (4,) if per_axis else ()
    info = ml_dtypes.iinfo(dtype)
    scale = np.asarray(rng.random(shape) * 0.1 + 0.05, np.float32)
    scale.reshape(-1)[0] = 0.25
    zero = np.asarray(rng.integers(info.min // 2, info.max // 2 + 1, size=shape), dtype)
    return x, scale, zero


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_dequantize_linear_4bit(ort, rng, dtype, per_axis):
    # onnxruntime's Python API cannot hand out 4-bit tensors, so the 4-bit value stays inside
    # the model: x -> QuantizeLinear -> DequantizeLinear -> float y.
    import onnx.helper as oh

    import onnxplug

    x, scale, zero = _qdq_params(rng, dtype, per_axis)
    inits = [onnx.numpy_helper.from_array(scale, "s"), onnx.numpy_helper.from_array(zero, "z")]
    nodes = [
        oh.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], domain="com.microsoft"),
        oh.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], domain="com.microsoft"),
    ]
    graph = oh.make_graph(
        nodes,
        "qdq4",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, x.shape)],
        initializer=inits,
    )
    opsets = [oh.make_opsetid("", 21), oh.make_opsetid("com.microsoft", 1)]
    model = oh.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()
    ours = onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6, atol=1e-6)


def test_quantize_linear_default_uint8_and_axis(run_both, close, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    close(*run_both("QuantizeLinear", [("x", x), ("s", np.array(0.02, np.float32))], ["y"]))
    scale = np.array([0.1, 0.2, 0.3], np.float32)
    zero = np.array([1, -2, 3], np.int8)
    inputs = [("x", x), ("s", scale), ("z", zero)]
    close(*run_both("QuantizeLinear", inputs, ["y"], initializers=("s", "z"), axis=0))


def test_dequantize_linear_float16(run_both, close, rng):
    inputs = [("q", _q(rng, np.int8, (3, 4))), ("s", np.array(0.05, np.float16)), ("z", np.array(3, np.int8))]
    close(*run_both("DequantizeLinear", inputs, ["y"]), rtol=1e-3, atol=1e-3)


def test_quantize_linear_bad_scale_shape(run_ours, rng):
    from onnxplug.errors import InvalidArgument

    x = rng.standard_normal((3, 4)).astype(np.float32)
    with pytest.raises(InvalidArgument, match="y_scale has 3 values"):
        run_ours("QuantizeLinear", [("x", x), ("s", np.ones(3, np.float32))], ["y"], axis=1)


def test_schemas_infer_types(rng):
    import onnxplug

    from .conftest import one_node_model

    model = one_node_model(
        "QGemm",
        [
            ("a", _q(rng, np.uint8, (3, 8))),
            ("a_scale", np.array(0.02, np.float32)),
            ("a_zero", np.array(1, np.uint8)),
            ("b", _q(rng, np.int8, (8, 4))),
            ("b_scale", np.array(0.04, np.float32)),
            ("b_zero", np.array(0, np.int8)),
            ("", None),
            ("y_scale", np.array(0.1, np.float32)),
            ("y_zero", np.array(1, np.int8)),
        ],
        ["y"],
    )
    out = onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"]).get_outputs()[0]
    # the element type of y_zero_point decides the output type
    assert out.type == "tensor(int8)" and out.shape == [3, 4], (out.type, out.shape)


@pytest.mark.parametrize("x_type,w_type", [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)])
@pytest.mark.parametrize("channels_last", [1, 0])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [3, 3], "strides": [2, 2], "group": 2},
        {"kernel_shape": [1, 1]},
        {"kernel_shape": [3, 2], "strides": [2, 1], "auto_pad": "SAME_UPPER"},
        {"kernel_shape": [3, 2], "dilations": [2, 1], "pads": [1, 0, 2, 1]},
    ],
)
def test_com_microsoft_qlinear_conv(run_both, close, rng, x_type, w_type, channels_last, per_channel, attrs):
    group = attrs.get("group", 1)
    n, c, h, w_, m = 2, 4, 7, 6, 6
    x = _q(rng, x_type, (n, h, w_, c) if channels_last else (n, c, h, w_))
    weights = _q(rng, w_type, (m, c // group, *attrs["kernel_shape"]))
    shape = (m,) if per_channel else ()
    w_zero = np.zeros(shape, w_type) + (128 if w_type == np.uint8 else 0)
    inputs = [
        ("x", x),
        ("x_scale", np.array(0.05, np.float32)),
        ("x_zero", _zero(x_type, 3)),
        ("w", weights),
        ("w_scale", np.asarray(rng.random(shape) * 0.01 + 0.005, np.float32)),
        ("w_zero", np.asarray(w_zero, w_type)),
        ("y_scale", np.array(0.2, np.float32)),
        ("y_zero", _zero(x_type, -4)),
        ("bias", rng.integers(-500, 500, size=m).astype(np.int32)),
    ]
    constants = ("w", "w_scale", "w_zero", "bias")
    close(*run_both("QLinearConv", inputs, ["y"], initializers=constants, channels_last=channels_last, **attrs))
