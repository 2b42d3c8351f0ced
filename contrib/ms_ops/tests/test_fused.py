"""FusedConv, FusedGemm and FusedMatMul against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.parametrize(
    "activation,params",
    [
        (None, None),
        ("Relu", None),
        ("Tanh", None),
        ("Sigmoid", None),
        ("LeakyRelu", [0.2]),
        ("Clip", [-0.5, 0.7]),
        ("HardSigmoid", [0.3, 0.4]),
    ],
)
def test_fused_conv_activations(run_both, close, rng, activation, params):
    x = rng.standard_normal((2, 4, 9, 9)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    attrs = {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}
    if activation:
        attrs["activation"] = activation
    if params:
        attrs["activation_params"] = params
    close(*run_both("FusedConv", [("x", x), ("w", w), ("b", b)], ["y"], initializers=("w", "b"), **attrs))


@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": [2, 2], "dilations": [1, 2], "pads": [0, 1, 2, 1]},
        {"group": 2, "auto_pad": "SAME_UPPER"},
        {"group": 4, "auto_pad": "SAME_LOWER", "strides": [2, 1]},
        {"auto_pad": "VALID", "dilations": [2, 2]},
    ],
)
def test_fused_conv_geometry(run_both, close, rng, attrs):
    group = attrs.get("group", 1)
    x = rng.standard_normal((1, 4, 10, 11)).astype(np.float32)
    w = rng.standard_normal((8, 4 // group, 3, 2)).astype(np.float32)
    close(*run_both("FusedConv", [("x", x), ("w", w)], ["y"], activation="Relu", **attrs))


def test_fused_conv_with_residual(run_both, close, rng):
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    z = rng.standard_normal((2, 5, 8, 8)).astype(np.float32)
    close(*run_both("FusedConv", [("x", x), ("w", w), ("b", b), ("z", z)], ["y"], pads=[1, 1, 1, 1], activation="Relu"))


def test_fused_conv_1d(run_both, close, rng):
    x = rng.standard_normal((2, 3, 20)).astype(np.float32)
    w = rng.standard_normal((4, 3, 5)).astype(np.float32)
    close(*run_both("FusedConv", [("x", x), ("w", w)], ["y"], strides=[3], activation="Sigmoid"))


@pytest.mark.parametrize(
    "attrs",
    [
        {"activation": "Relu"},
        {"activation": "LeakyRelu", "activation_alpha": 0.3, "transA": 1},
        {"activation": "Tanh", "alpha": 0.5, "beta": 2.0, "transB": 1},
        {"activation": "Sigmoid"},
        {"activation": "HardSigmoid", "activation_alpha": 0.25, "activation_beta": 0.45},
        {"activation": "Elu", "activation_alpha": 0.8},
        {"activation": "Softplus"},
    ],
)
def test_fused_gemm(run_both, close, rng, attrs):
    a = rng.standard_normal((7, 12) if not attrs.get("transA") else (12, 7)).astype(np.float32)
    b = rng.standard_normal((12, 5) if not attrs.get("transB") else (5, 12)).astype(np.float32)
    c = rng.standard_normal(5).astype(np.float32)
    close(*run_both("FusedGemm", [("a", a), ("b", b), ("c", c)], ["y"], **attrs))


@pytest.mark.parametrize("trans_b", [0, 1])
def test_fused_gemm_with_constant_weights(run_both, close, rng, trans_b):
    """Constant weights as onnxruntime's optimizer leaves them: the CPU provider's Gemm (its tiles
    where ``B`` is stored as ``op(B)``), then the activation."""
    a = rng.standard_normal((20, 96)).astype(np.float32)
    b = rng.standard_normal((200, 96) if trans_b else (96, 200)).astype(np.float32)
    c = rng.standard_normal(200).astype(np.float32)
    attrs = {"activation": "Relu", "transB": trans_b}
    close(*run_both("FusedGemm", [("a", a), ("b", b), ("c", c)], ["y"], initializers=("b", "c"), **attrs))


def test_fused_gemm_splits_a_single_row_over_the_team_as_gemm_does(monkeypatch, run_both, close, rng):
    """A classifier's FusedGemm (one row times a matrix stored transposed) inside a run on the
    convolutions' team is split over it, as the provider's Gemm is (its ``C`` in the same call):
    numpy's product there ran on the one BLAS thread such a run leaves (VGG-19's 411 MB
    classifier on one core)."""
    from onnxplug_cpu.kernels import _gemv, _team
    from onnxplug_cpu.kernels import math as linear

    if _gemv.compiled() is None or not _team.parallel_ready():
        pytest.skip("needs numba with a thread-safe threading layer (omp or tbb)")
    calls = []
    real, real_plus = _gemv.row_times_matrix, _gemv.row_times_matrix_plus
    monkeypatch.setattr(_gemv, "row_times_matrix", lambda *args: calls.append(1) or real(*args))
    monkeypatch.setattr(_gemv, "row_times_matrix_plus", lambda *args: calls.append(1) or real_plus(*args))
    monkeypatch.setattr(linear, "team_joined", lambda: True)
    a = rng.standard_normal((1, 300)).astype(np.float32)
    b = rng.standard_normal((120, 300)).astype(np.float32)
    c = rng.standard_normal(120).astype(np.float32)
    attrs = {"activation": "Relu", "transB": 1}
    close(*run_both("FusedGemm", [("a", a), ("b", b), ("c", c)], ["y"], initializers=("b",), **attrs))
    assert calls == [1]


@pytest.mark.parametrize(
    "shapes,attrs",
    [
        (((2, 3, 4, 5), (2, 3, 5, 6)), {}),
        (((2, 3, 5, 4), (2, 3, 5, 6)), {"transA": 1, "alpha": 0.125}),
        (((2, 3, 4, 5), (2, 3, 6, 5)), {"transB": 1}),
        (((4, 2, 3, 5), (2, 3, 5, 6)), {"transBatchA": 1}),
        (((4, 2, 3, 5), (2, 3, 6, 5)), {"transBatchA": 1, "transB": 1}),
        (((2, 3, 4, 5), (5, 2, 3, 6)), {"transBatchB": 1}),
        (((2, 3, 4, 5), (6, 2, 3, 5)), {"transBatchB": 1, "transB": 1}),
        (((5, 2, 3, 4), (6, 2, 3, 5)), {"transBatchA": 1, "transA": 1, "transBatchB": 1, "transB": 1}),
        (((4, 5), (3, 5, 6)), {}),
    ],
)
def test_fused_matmul(run_both, close, rng, shapes, attrs):
    a = rng.standard_normal(shapes[0]).astype(np.float32)
    b = rng.standard_normal(shapes[1]).astype(np.float32)
    close(*run_both("FusedMatMul", [("a", a), ("b", b)], ["y"], **attrs))
