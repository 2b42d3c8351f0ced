"""The compiled float32 layer normalisation over the last axis (``kernels._layernorm_jit``,
public as ``numerics.layer_norm_last_axis``): values and statistics against float64, which
inputs it takes, the ONNX ``LayerNormalization`` node on both paths, and the numpy path with
``ONNXPLUG_CPU_JIT=0``."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model
from onnxplug_cpu.kernels import _layernorm_jit
from onnxplug_cpu.numerics import layer_norm_last_axis


def _reference(x, scale, bias, epsilon, axis=-1):
    x = x.astype(np.float64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + epsilon)
    y = (x - mean) * inv * scale + (0 if bias is None else bias)
    return y, mean, inv


def _data(shape, seed, offset=1.0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3 + offset).astype(np.float32)
    return x, rng.standard_normal(shape[-1]).astype(np.float32), rng.standard_normal(shape[-1]).astype(np.float32)


@pytest.mark.numba
@pytest.mark.parametrize("shape", [(1, 128, 384), (2, 64, 768), (16384, 1), (40, 1000)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_matches_float64(shape, with_bias):
    x, scale, bias = _data(shape, sum(shape))
    bias = bias if with_bias else None
    got = layer_norm_last_axis(x, scale, bias, 1e-5)
    assert got is not None
    y, mean, inv = got
    want_y, want_mean, want_inv = _reference(x, scale, bias, 1e-5)
    assert y.dtype == mean.dtype == inv.dtype == np.float32
    assert y.shape == x.shape and mean.shape == inv.shape == x.shape[:-1] + (1,)
    np.testing.assert_allclose(y, want_y, rtol=0, atol=5e-6 * (np.abs(scale).max() + 1))
    np.testing.assert_allclose(mean, want_mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(inv, want_inv, rtol=1e-6)


@pytest.mark.numba
def test_large_offset_keeps_the_variance():
    # A mean far from 0: the two-pass variance does not cancel (E[x^2] - E[x]^2 would).
    x, scale, bias = _data((64, 512), 7, offset=1000.0)
    y, _, inv = layer_norm_last_axis(x, scale, bias, 1e-12)
    want_y, _, want_inv = _reference(x, scale, bias, 1e-12)
    np.testing.assert_allclose(inv, want_inv, rtol=1e-5)
    np.testing.assert_allclose(y, want_y, rtol=0, atol=1e-3)


@pytest.mark.numba
@pytest.mark.parametrize("skip_rows", ["same", "broadcast"])
@pytest.mark.parametrize("with_biases", [True, False])
@pytest.mark.parametrize("team", [False, True])
def test_skip_layer_norm_is_the_sum_then_the_norm_bit_for_bit(skip_rows, with_biases, team):
    """``skip_layer_norm_last_axis`` sums ``x + skip (+ skip_bias)`` with numpy's rounding and order
    (one skip for every batch row where it is broadcast) and normalises the sum as
    ``layer_norm_last_axis`` does: the same bits, on one thread or split over the run's team."""
    from onnxplug.kernels import RunState, enter_run, leave_run
    from onnxplug_cpu.kernels import _team
    from onnxplug_cpu.numerics import skip_layer_norm_last_axis

    threadpoolctl = pytest.importorskip("threadpoolctl")
    x, scale, bias = _data((2, 64, 768), 11)
    rng = np.random.default_rng(12)
    skip = rng.standard_normal((64, 768) if skip_rows == "broadcast" else x.shape).astype(np.float32)
    skip_bias = rng.standard_normal(768).astype(np.float32) if with_biases else None
    bias = bias if with_biases else None
    total = x + skip
    if skip_bias is not None:
        total = total + skip_bias
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        token = enter_run(RunState(threads=2))
        try:
            if team:
                _team.join_run()  # as a transformer's products do: the rows split over the team
                assert _team.team_parts(x.size, 128) == 2 or not _team.parallel_ready()
            y, mean, inv, got_total = skip_layer_norm_last_axis(x, skip, skip_bias, scale, bias, 1e-5)
        finally:
            leave_run(token)
    np.testing.assert_array_equal(got_total, total)
    for got, want in zip((y, mean, inv), layer_norm_last_axis(total, scale, bias, 1e-5)):
        np.testing.assert_array_equal(got, want)
    assert skip_layer_norm_last_axis(x, skip.astype(np.float64), skip_bias, scale, bias, 1e-5) is None


def test_what_it_declines():
    x, scale, bias = _data((8, 384), 1)
    assert layer_norm_last_axis(x, scale, bias, 1e-5) is None  # small: numpy
    x, scale, bias = _data((128, 384), 2)
    assert layer_norm_last_axis(x.astype(np.float64), scale, bias, 1e-5) is None
    assert layer_norm_last_axis(x, scale[:10], bias, 1e-5) is None
    assert layer_norm_last_axis(x, scale, bias.astype(np.float16), 1e-5) is None


def _run(x, scale, bias, axis):
    model = make_model(
        [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=axis, epsilon=1e-5)],
        [(name, TensorProto.FLOAT, a.shape) for name, a in (("x", x), ("s", scale), ("b", bias))],
        [("y", TensorProto.FLOAT, None), ("mean", TensorProto.FLOAT, None), ("inv", TensorProto.FLOAT, None)],
        opset=17,
    )
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x, "s": scale, "b": bias})


@pytest.mark.parametrize("axis", [-1, 2, 1])
def test_onnx_node(axis):
    x, scale, bias = _data((2, 96, 128), 3)
    if axis == 1:  # over the last two axes: numpy
        rng = np.random.default_rng(4)
        scale, bias = (rng.standard_normal((96, 128)).astype(np.float32) for _ in range(2))
    y, mean, inv = _run(x, scale, bias, axis)
    want_y, want_mean, want_inv = _reference(x, scale, bias, 1e-5, axis)
    np.testing.assert_allclose(y, want_y, rtol=0, atol=2e-5)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(inv, want_inv, rtol=1e-6)


def test_numpy_fallback(monkeypatch):
    monkeypatch.setenv("ONNXPLUG_CPU_JIT", "0")
    _layernorm_jit.compiled.cache_clear()
    try:
        x, scale, bias = _data((2, 96, 128), 5)
        assert layer_norm_last_axis(x, scale, bias, 1e-5) is None
        y, mean, inv = _run(x, scale, bias, -1)
        want_y, want_mean, want_inv = _reference(x, scale, bias, 1e-5)
        np.testing.assert_allclose(y, want_y, rtol=0, atol=2e-5)
        np.testing.assert_allclose(inv, want_inv, rtol=1e-6)
    finally:
        _layernorm_jit.compiled.cache_clear()
