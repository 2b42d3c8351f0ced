"""The classifier's row-times-matrix product on numba's team (``kernels._gemv``): numpy's values,
the same bits however the rows are split, and which Gemm/MatMul calls take it."""

from __future__ import annotations

import numpy as np
import pytest

from onnxplug_cpu.kernels import _gemv, _team
from onnxplug_cpu.kernels import math as linear

pytest.importorskip("numba")
if _gemv.compiled() is None:
    pytest.skip("the compiled kernels are disabled by ONNXPLUG_CPU_JIT=0", allow_module_level=True)


@pytest.mark.parametrize("rows, depth", [(1000, 544), (7, 1), (33, 17), (1, 2048), (1001, 1280), (6, 40)])
def test_rows_dot_matches_numpy_on_any_split(rows, depth):
    rng = np.random.default_rng(rows + depth)
    w = rng.standard_normal((rows, depth), dtype=np.float32)
    x = rng.standard_normal(depth, dtype=np.float32)
    results = [_gemv.row_times_matrix(x, w, parts) for parts in (1, 2, 3, 5)]
    np.testing.assert_allclose(results[0], w.astype(np.float64) @ x.astype(np.float64), rtol=1e-5, atol=1e-4)
    for other in results[1:]:
        np.testing.assert_array_equal(results[0], other)


def test_gemm_rows_take_it_inside_a_team_run_only(monkeypatch):
    if not _team.parallel_ready():
        pytest.skip("needs numba with a thread-safe threading layer (omp or tbb)")
    rng = np.random.default_rng(3)
    a = rng.standard_normal((1, 300), dtype=np.float32)
    b = rng.standard_normal((120, 300), dtype=np.float32)
    c = rng.standard_normal(120, dtype=np.float32)
    calls = []
    real = _gemv.row_times_matrix
    monkeypatch.setattr(_gemv, "row_times_matrix", lambda *args: calls.append(1) or real(*args))
    outside = linear.gemm_product(a, b, c, 1.0, 1.0, 0, 1)
    assert calls == []
    monkeypatch.setattr(linear, "team_joined", lambda: True)
    inside = linear.gemm_product(a, b, c, 1.0, 1.0, 0, 1)
    assert calls == [1]
    np.testing.assert_allclose(inside, outside, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(inside, a.astype(np.float64) @ b.T.astype(np.float64) + c, rtol=1e-5, atol=1e-4)
    linear.gemm_product(a, b.T.copy(), c, 1.0, 1.0, 0, 0)  # B not stored transposed
    assert calls == [1]


@pytest.mark.parametrize("c_shape", [(120,), (1, 120)])
def test_a_classifier_s_product_and_c_in_one_call_keep_numpy_s_bits(monkeypatch, c_shape):
    """``Gemm`` with ``transB`` on one float32 row inside a team run adds ``C`` in the product's
    compiled call (``_gemv.row_times_matrix_plus``): the same bits as the product, then numpy's
    add; a ``C`` that only broadcasts, another ``alpha`` or a row outside a team run take the
    general path."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((1, 300), dtype=np.float32)
    b = rng.standard_normal((120, 300), dtype=np.float32)
    c = rng.standard_normal(c_shape, dtype=np.float32)
    monkeypatch.setattr(linear, "team_joined", lambda: True)
    calls = []
    real = _gemv.row_times_matrix_plus
    monkeypatch.setattr(_gemv, "row_times_matrix_plus", lambda *args: calls.append(args[-1]) or real(*args))
    gemm = linear.Gemm(b, trans_b=1)
    got = gemm(a, b, c)
    assert len(calls) == 1 and got.shape == (1, 120) and got.dtype == np.float32
    expected = _gemv.row_times_matrix(a[0], b, calls[0])[None, :] + c.reshape(1, 120)
    np.testing.assert_array_equal(got, expected)
    for parts in (1, 2, 3):
        np.testing.assert_array_equal(real(a[0], b, c.reshape(120), parts), expected)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.T.astype(np.float64) + c, rtol=1e-5, atol=1e-4)
    scalar_c = np.float32([0.5])
    np.testing.assert_array_equal(gemm(a, b, scalar_c), linear.gemm_product(a, b, scalar_c, 1.0, 1.0, 0, 1))
    np.testing.assert_array_equal(
        linear.Gemm(b, alpha=2.0, trans_b=1)(a, b, c), linear.gemm_product(a, b, c, 2.0, 1.0, 0, 1)
    )
    monkeypatch.setattr(linear, "team_joined", lambda: False)
    gemm(a, b, c)
    assert len(calls) == 1
