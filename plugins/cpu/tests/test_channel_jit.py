"""BatchNormalization's per-channel multiply-add and Relu as compiled passes
(``kernels._channel_jit``): the numpy passes' bits (NaN, -0.0 and infinities included), the same
bits split over the team, and the calls that keep numpy."""

from __future__ import annotations

import numpy as np
import pytest

from onnxplug_cpu.kernels import _channel_jit, _jit, _team, activation, normalization

pytest.importorskip("numba")
if not _jit.load_for_feature_maps():
    pytest.skip("the compiled kernels are disabled by ONNXPLUG_CPU_JIT=0", allow_module_level=True)


def _maps(shape=(2, 96, 17, 19)):
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 4
    flat = x.reshape(-1)
    flat[[5, 6, 7, 8]] = [np.nan, -0.0, np.inf, -np.inf]
    return x


@pytest.mark.parametrize("split", [False, True])
def test_batchnorm_and_relu_give_the_numpy_passes_bits(split, monkeypatch):
    if split:
        if not _team.parallel_ready():
            pytest.skip("needs numba with a thread-safe threading layer (omp or tbb)")
        monkeypatch.setattr(_channel_jit, "team_joined", lambda: True)
        monkeypatch.setattr(_channel_jit, "thread_budget", lambda: 2)
    x = _maps()
    rng = np.random.default_rng(4)
    scale, bias, mean = (rng.standard_normal(96).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.1, 2, 96).astype(np.float32)
    got = normalization._batchnorm_inference(x, scale, bias, mean, var, 1e-5)
    with monkeypatch.context() as patch:
        patch.setattr(normalization, "affine_channels", lambda *a: None)
        want = normalization._batchnorm_inference(x, scale, bias, mean, var, 1e-5)
    np.testing.assert_array_equal(got, want)
    relu = activation.relu(x)
    np.testing.assert_array_equal(relu, np.maximum(x, np.float32(0)))
    assert np.signbit(relu.reshape(-1)[6])  # -0.0 passes, as np.maximum's
    assert _channel_jit.relu(x) is not None and _channel_jit.affine_channels(x, scale, bias) is not None


def test_other_calls_keep_numpy():
    x = _maps()
    assert _channel_jit.relu(x[:, :, ::2]) is None  # not contiguous
    assert _channel_jit.relu(x.astype(np.float64)) is None
    assert _channel_jit.relu(np.ones(100, np.float32)) is None  # small
    assert _channel_jit.affine_channels(x, np.ones(3, np.float32), np.ones(3, np.float32)) is None
