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


def _gelu_erfc(x):
    """Gelu in float64 as ``x/2 erfc(-x/sqrt 2)`` (no cancellation in the negative tail)."""
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in np.asarray(x, np.float64).ravel()]).reshape(
        x.shape
    )


@pytest.mark.parametrize("shape", [(1, 128, 1536), (3, 5), (2, 7, 64)])
def test_bias_gelu_accuracy_over_a_wide_range(run_ours, rng, shape):
    # The bias is broadcast over every row; values reach the far negative tail (about -20),
    # where the result is a few float32 ulps of a tiny number or underflows to 0.
    a = (rng.standard_normal(shape) * 5).astype(np.float32)
    b = np.linspace(-6, 6, shape[-1], dtype=np.float32)
    (got,) = run_ours("BiasGelu", [("a", a), ("b", b)], ["c"])
    s = (a + b).astype(np.float64)  # added in float32, as onnxruntime does
    want = _gelu_erfc(s)
    assert got.dtype == np.float32 and got.shape == a.shape
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-300)
    assert rel[np.abs(s) < 4].max() < 2e-6
    assert rel[(s <= -4) & (s > -13)].max(initial=0) < 2e-5
    assert np.abs(got - want)[s <= -13].max(initial=0) < 1e-40


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_bias_gelu_other_types(run_ours, rng, dtype):
    a = (rng.standard_normal(SHAPE) * 3).astype(dtype)
    b = rng.standard_normal(SHAPE[-1]).astype(dtype)
    (got,) = run_ours("BiasGelu", [("a", a), ("b", b)], ["c"])
    assert got.dtype == dtype
    want = _gelu_erfc((a + b).astype(np.float64))  # the sum in the inputs' type, then Gelu
    if dtype == np.float16:
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float16).astype(np.float64), rtol=1e-3, atol=1e-7
        )
    else:  # float64 is 1 + erf: relative accuracy where that sum does not cancel
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-15)
        keep = (a + b) > -5
        np.testing.assert_allclose(got[keep], want[keep], rtol=1e-9)


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
