"""Quantized ops against onnxruntime: MatMulNBits, DynamicQuantizeMatMul, MatMulIntegerToFloat,
the QLinear family and NhwcMaxPool.

Requantized 8-bit results may differ by one step where onnxruntime's float rounding order
differs from numpy's, so those are compared with atol=1.
"""

from __future__ import annotations

import numpy as np
import pytest


def _nbits_inputs(rng, k, n, bits, block, zero_points):
    blocks = -(-k // block)
    blob = block * bits // 8
    a = rng.standard_normal((2, 3, k)).astype(np.float32)
    b = rng.integers(0, 256, size=(n, blocks, blob)).astype(np.uint8)
    scales = (rng.random((n, blocks)) * 0.1 + 0.01).astype(np.float32)
    inputs = [("a", a), ("b", b), ("scales", scales)]
    if zero_points == "packed":
        inputs.append(("zp", rng.integers(0, 256, size=(n, -(-blocks * bits // 8))).astype(np.uint8)))
    elif zero_points == "float":
        inputs.append(("zp", (rng.random((n, blocks)) * 2**bits).astype(np.float32)))
    return inputs


# onnxruntime takes float (unpacked) zero points with 4 bits only.
@pytest.mark.parametrize(
    "bits,zero_points", [(2, None), (2, "packed"), (4, None), (4, "packed"), (4, "float"), (8, None), (8, "packed")]
)
@pytest.mark.parametrize("constant", [True, False])
def test_matmul_nbits(run_both, close, rng, bits, zero_points, constant):
    k, n, block = 80, 24, 32
    inputs = _nbits_inputs(rng, k, n, bits, block, zero_points)
    inits = ("b", "scales", "zp") if constant else ()
    close(
        *run_both("MatMulNBits", inputs, ["y"], initializers=inits, K=k, N=n, bits=bits, block_size=block),
        rtol=1e-4,
        atol=1e-4,
    )


def test_matmul_nbits_bias_and_float16(run_both, close, rng):
    k, n, block = 64, 16, 16
    inputs = _nbits_inputs(rng, k, n, 4, block, "packed")
    inputs = [(name, a.astype(np.float16) if a.dtype == np.float32 else a) for name, a in inputs]
    inputs += [("", None), ("bias", rng.standard_normal(n).astype(np.float16))]
    close(
        *run_both("MatMulNBits", inputs, ["y"], initializers=("b", "scales"), K=k, N=n, bits=4, block_size=block),
        rtol=5e-3,
        atol=5e-2,
    )


@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("with_zero,with_bias", [(False, False), (True, True)])
def test_dynamic_quantize_matmul(run_both, close, rng, b_type, per_column, with_zero, with_bias):
    k, n = 32, 12
    a = rng.standard_normal((2, 5, k)).astype(np.float32)
    info = np.iinfo(b_type)
    b = rng.integers(info.min, info.max, size=(k, n)).astype(b_type)
    scale = np.asarray(rng.random(n if per_column else ()) * 0.05 + 0.01, dtype=np.float32)
    inputs = [("a", a), ("b", b), ("b_scale", np.atleast_1d(scale) if per_column else np.array(scale))]
    zero = rng.integers(
        info.min // 4 + 64 * (info.min == 0), info.max // 4 + 64 * (info.min == 0), size=n if per_column else ()
    )
    zero = np.asarray(zero, dtype=b_type)
    inputs.append(("b_zero", zero) if with_zero else ("", None))
    if with_bias:
        inputs.append(("bias", rng.standard_normal(n).astype(np.float32)))
    while inputs[-1][0] == "":
        inputs.pop()
    close(
        *run_both("DynamicQuantizeMatMul", inputs, ["y"], initializers=("b", "b_scale", "b_zero")), rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize("a_type,b_type", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)])
@pytest.mark.parametrize("per_column", [False, True])
def test_matmul_integer_to_float(run_both, close, rng, a_type, b_type, per_column):
    k, n = 24, 10
    ia, ib = np.iinfo(a_type), np.iinfo(b_type)
    a = rng.integers(ia.min, ia.max, size=(3, 4, k)).astype(a_type)
    b = rng.integers(ib.min, ib.max, size=(k, n)).astype(b_type)
    shape = (n,) if per_column else ()
    inputs = [
        ("a", a),
        ("b", b),
        ("a_scale", np.array(0.02, np.float32)),
        ("b_scale", np.asarray(rng.random(shape) * 0.05 + 0.01, dtype=np.float32)),
        ("a_zero", np.array(ia.min // 2 + 100 * (ia.min == 0), a_type)),
        ("b_zero", np.asarray(rng.integers(ib.min // 2, ib.max // 2, size=shape), dtype=b_type)),
        ("bias", rng.standard_normal(n).astype(np.float32)),
    ]
    close(*run_both("MatMulIntegerToFloat", inputs, ["y"]), rtol=1e-4, atol=1e-4)


def _q(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("b_shape", [(2, 3, 8), (8,), ()])
def test_qlinear_binary(run_both, close, rng, op, dtype, b_shape):
    zero = 128 if dtype == np.uint8 else 0
    inputs = [
        ("a", _q(rng, dtype, (2, 3, 8))),
        ("a_scale", np.array(0.05, np.float32)),
        ("a_zero", np.array(zero + 3, dtype)),
        ("b", _q(rng, dtype, b_shape)),
        ("b_scale", np.array(0.03, np.float32)),
        ("b_zero", np.array(zero - 5, dtype)),
        ("c_scale", np.array(0.08 if op == "QLinearAdd" else 0.2, np.float32)),
        ("c_zero", np.array(zero, dtype)),
    ]
    ours, theirs = run_both(op, inputs, ["c"])
    close(ours, theirs, atol=1)


@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.15})])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_unary(run_both, close, rng, op, attrs, dtype):
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype).reshape(16, 16)
    zero = 128 if dtype == np.uint8 else 0
    inputs = [
        ("x", x),
        ("x_scale", np.array(0.05, np.float32)),
        ("x_zero", np.array(zero + 10, dtype)),
        ("y_scale", np.array(1 / 256 if op == "QLinearSigmoid" else 0.04, np.float32)),
        ("y_zero", np.array(info.min if op == "QLinearSigmoid" else zero, dtype)),
    ]
    ours, theirs = run_both(op, inputs, ["y"], **attrs)
    close(ours, theirs, atol=1)


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_global_average_pool(run_both, close, rng, channels_last, dtype):
    zero = 128 if dtype == np.uint8 else 0
    x = _q(rng, dtype, (2, 5, 7, 3) if channels_last else (2, 3, 5, 7))
    inputs = [
        ("x", x),
        ("x_scale", np.array(0.05, np.float32)),
        ("x_zero", np.array(zero + 2, dtype)),
        ("y_scale", np.array(0.03, np.float32)),
        ("y_zero", np.array(zero - 1, dtype)),
    ]
    ours, theirs = run_both("QLinearGlobalAveragePool", inputs, ["y"], channels_last=channels_last)
    close(ours, theirs, atol=1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_concat(run_both, close, rng, dtype):
    zero = 128 if dtype == np.uint8 else 0
    inputs = [("y_scale", np.array(0.05, np.float32)), ("y_zero", np.array(zero, dtype))]
    for i, (scale, z) in enumerate([(0.05, zero), (0.02, zero + 7), (0.11, zero - 3)]):
        inputs += [
            (f"x{i}", _q(rng, dtype, (2, 3 + i, 4))),
            (f"s{i}", np.array(scale, np.float32)),
            (f"z{i}", np.array(z, dtype)),
        ]
    ours, theirs = run_both("QLinearConcat", inputs, ["y"], axis=1)
    close(ours, theirs, atol=1)


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3]},
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1},
        {"kernel_shape": [3, 3], "dilations": [2, 1], "auto_pad": "SAME_UPPER"},
    ],
)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_nhwc_max_pool(run_both, close, rng, attrs, dtype):
    x = _q(rng, dtype, (2, 9, 10, 5))
    close(*run_both("NhwcMaxPool", [("x", x)], ["y"], **attrs))


@pytest.mark.parametrize("variant", ["g_idx", "flat_scales", "accuracy_level_4"])
def test_matmul_nbits_variants(run_both, close, rng, variant):
    k, n, block = 64, 8, 16
    inputs = _nbits_inputs(rng, k, n, 4, block, "float" if variant == "g_idx" else None)
    attrs = {}
    if variant == "g_idx":
        # a permuted assignment of K rows to blocks (act-order / GPTQ exports)
        inputs.append(("g_idx", rng.permutation(np.arange(k) // block).astype(np.int32)))
    elif variant == "flat_scales":
        inputs[2] = ("scales", inputs[2][1].reshape(-1))
    else:
        attrs["accuracy_level"] = 4  # weights fed at run time: float32 on both (no prepacking)
    close(*run_both("MatMulNBits", inputs, ["y"], K=k, N=n, bits=4, block_size=block, **attrs), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("bits,block,k", [(4, 32, 64), (8, 32, 40), (2, 16, 48), (2, 32, 64), (4, 16, 40)])
@pytest.mark.parametrize("zero_points", [None, "packed"])
def test_matmul_nbits_accuracy_level_4_with_constant_weights(run_both, close, rng, bits, block, k, zero_points):
    # With constant (prepackable) weights onnxruntime's accuracy_level=4 kernel quantizes A to
    # int8 per block; in float32 the results would differ by ~1e-2.
    n = 8
    inputs = _nbits_inputs(rng, k, n, bits, block, zero_points)
    inits = ("b", "scales", "zp")
    close(
        *run_both(
            "MatMulNBits", inputs, ["y"], initializers=inits, K=k, N=n, bits=bits, block_size=block, accuracy_level=4
        ),
        rtol=1e-4,
        atol=1e-4,
    )
