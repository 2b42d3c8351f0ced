"""Gelu family, BiasAdd and Trilu against onnxruntime."""

from __future__ import annotations

import math

import numpy as np
import pytest

SHAPE = (2, 7, 64)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_gelu(run_both, close, rng, dtype):
    x = (rng.standard_normal(SHAPE) * 3).astype(dtype)
    close(*run_both("Gelu", [("x", x)], ["y"]), rtol=1e-3 if dtype == np.float16 else 1e-5)


def test_gelu_double_exact(run_ours, rng):
    # onnxruntime's CPU Gelu has no double kernel: compare with math.erf.
    x = np.concatenate([rng.standard_normal(200) * 4, [0.0, -0.0, 8.0, -8.0, 30.0, -30.0]])
    (got,) = run_ours("Gelu", [("x", x)], ["y"])
    want = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-300)


def test_bias_gelu(run_both, close, rng):
    a = rng.standard_normal(SHAPE).astype(np.float32)
    b = rng.standard_normal(SHAPE[-1]).astype(np.float32)
    close(*run_both("BiasGelu", [("a", a), ("b", b)], ["c"]))


@pytest.mark.parametrize("with_bias", [False, True])
def test_fast_gelu(run_both, close, rng, with_bias):
    x = (rng.standard_normal(SHAPE) * 3).astype(np.float32)
    inputs = [("x", x)]
    if with_bias:
        inputs.append(("bias", rng.standard_normal(SHAPE[-1]).astype(np.float32)))
    close(*run_both("FastGelu", inputs, ["y"]))


@pytest.mark.parametrize("alpha", [None, 1.0, -0.5])
def test_quick_gelu(run_both, close, rng, alpha):
    x = (rng.standard_normal(SHAPE) * 4).astype(np.float32)
    attrs = {} if alpha is None else {"alpha": alpha}
    close(*run_both("QuickGelu", [("x", x)], ["y"], **attrs))


def test_bias_add(run_ours, rng):
    # onnxruntime runs BiasAdd on CUDA only.
    x = rng.standard_normal((2, 16, 32)).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    skip = rng.standard_normal((2, 16, 32)).astype(np.float32)
    (got,) = run_ours("BiasAdd", [("x", x), ("bias", bias), ("skip", skip)], ["y"])
    np.testing.assert_array_equal(got, x + bias + skip)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -2, 0, 3])
def test_trilu(run_both, close, rng, upper, k):
    x = rng.integers(-50, 50, size=(3, 5, 6)).astype(np.int64)
    inputs = [("x", x)]
    if k is not None:
        inputs.append(("k", np.array(k, dtype=np.int64)))
    close(*run_both("Trilu", inputs, ["y"], upper=upper))
