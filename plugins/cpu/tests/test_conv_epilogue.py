"""Conv's epilogue (``kernels._epilogue.finish``): bias, FusedConv's Z and its Relu or Clip in one
compiled pass (or the depthwise kernels' store), bit-identical to the numpy passes it replaces,
on every convolution path."""

from __future__ import annotations

import numpy as np
import pytest

from onnxplug_cpu.kernels import _epilogue

try:  # the compiled loop is used where numba is loaded
    import numba  # noqa: F401
except ImportError:
    pass
from onnxplug_cpu.numerics import PackedConv, convolve

needs_numba = pytest.mark.skipif(
    _epilogue._compiled() is None, reason="numba is not installed (or ONNXPLUG_CPU_JIT=0): only numpy passes run"
)


RELU = (0.0, np.inf)
RELU6 = (0.0, 6.0)


def numpy_passes(y, b, z, clamp):
    y = y.copy()
    if b is not None:
        y += b.reshape((1, -1) + (1,) * (y.ndim - 2))
    if z is not None:
        y += z
    if clamp == RELU:
        return np.maximum(y, 0, out=y)
    return np.clip(y, *clamp, out=y) if clamp else y


@needs_numba
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("clamp", [RELU, RELU6, (-0.5, 0.25), None])
def test_one_pass_matches_numpy_passes_exactly(rng, bias, residual, clamp):
    y = rng.standard_normal((2, 5, 7, 3)).astype(np.float32)
    y[0, 1, 2, 0] = np.nan  # NaN stays NaN through the clamp, as with np.maximum and np.clip
    b = rng.standard_normal(5).astype(np.float32) if bias else None
    z = rng.standard_normal(y.shape).astype(np.float32) if residual else None
    want = numpy_passes(y, b, z, clamp)
    got = _epilogue.finish(y.copy(), b, z, clamp)
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[0, 1, 2, 0])


def test_broadcast_residual_and_float64_take_the_numpy_passes(rng):
    y = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    z = rng.standard_normal((1, 4, 1, 3)).astype(np.float32)
    np.testing.assert_array_equal(_epilogue.finish(y.copy(), b, z, RELU), numpy_passes(y, b, z, RELU))
    y64, b64 = y.astype(np.float64), b.astype(np.float64)
    got = _epilogue.finish(y64.copy(), b64, None, RELU6)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, numpy_passes(y64, b64, None, RELU6))


@pytest.mark.parametrize(
    "x_shape, w_shape, geometry",
    [
        ((2, 32, 20, 20), (32, 32, 3, 3), dict(pads=[1, 1, 1, 1])),  # Winograd
        ((2, 64, 14, 14), (16, 64, 3, 3), dict(pads=[1, 1, 1, 1])),  # shifted
        ((2, 16, 9, 9), (24, 16, 1, 1), {}),  # pointwise
        ((2, 8, 11, 11), (12, 8, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),  # im2col
        ((2, 8, 10, 10), (8, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=8)),  # depthwise
    ],
)
@pytest.mark.parametrize("clamp", [RELU, RELU6])
@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_convolve_with_bias_residual_and_clamp(rng, x_shape, w_shape, geometry, clamp, residual, dtype):
    x = (rng.standard_normal(x_shape) * 4).astype(dtype)
    w = (rng.standard_normal(w_shape) * 0.5).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype)
    group = geometry.get("group", 1)
    plain = convolve(x, w, None, packed=PackedConv(w, group), **geometry)
    z = rng.standard_normal(plain.shape).astype(dtype) if residual else None
    got = convolve(x, w, b, packed=PackedConv(w, group), residual=z, clamp=clamp, **geometry)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, numpy_passes(plain, b, z, clamp))
    assert (got == 0).any() and (got > 0).any()
    if clamp == RELU6:
        assert (got == 6).any()


@pytest.fixture
def rng():
    return np.random.default_rng(20261203)
