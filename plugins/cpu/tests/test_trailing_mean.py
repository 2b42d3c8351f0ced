"""A float32 mean over trailing axes as one matrix-vector product (``kernels.reduce.trailing_mean``,
used by ReduceMean and GlobalAveragePool): numpy's values, NaN and infinities as numpy, the
shapes keepdims gives, and the calls that keep numpy's reduction."""

from __future__ import annotations

import numpy as np
import pytest

from onnxplug_cpu.kernels import pool, reduce


@pytest.mark.parametrize("keepdims", [True, False])
@pytest.mark.parametrize("shape, axes", [((1, 1280, 7, 7), (2, 3)), ((2, 96, 5, 3), (3, 2)), ((300, 17), (1,))])
def test_matches_numpy(shape, axes, keepdims):
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32) * 10
    x.reshape(-1)[7] = np.nan
    x.reshape(-1)[100] = np.inf
    got = reduce.trailing_mean(x, axes, keepdims)
    want = x.astype(np.float64).mean(axis=axes, keepdims=keepdims)
    assert got is not None and got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_other_calls_keep_numpy():
    x = np.ones((1, 1280, 7, 7), np.float32)
    assert reduce.trailing_mean(x, (1, 2), True) is None  # not the trailing axes
    assert reduce.trailing_mean(x.astype(np.float64), (2, 3), True) is None
    assert reduce.trailing_mean(np.ones((1, 8, 7, 7), np.float32), (2, 3), True) is None  # too few rows
    assert reduce.trailing_mean(x.transpose(0, 1, 3, 2), (2, 3), True) is None  # not contiguous
    assert reduce.trailing_mean(x, (), True) is None


def test_global_average_pool_takes_it():
    x = np.random.default_rng(6).standard_normal((2, 100, 9, 9)).astype(np.float32)
    got = pool.global_average_pool(x)
    assert got.shape == (2, 100, 1, 1) and got.dtype == np.float32
    np.testing.assert_allclose(got, x.astype(np.float64).mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)


def test_a_team_run_splits_the_rows_over_the_team(monkeypatch):
    """Inside a run on numba's team the rows are summed by ``kernels._gemv`` split over it (each
    thread reading what its share of the last convolution left in its cache) and divided in the
    same call: the same values."""
    from onnxplug_cpu.kernels import _gemv, _team

    if _gemv.compiled() is None or not _team.parallel_ready():
        pytest.skip("needs numba with a thread-safe threading layer (omp or tbb)")
    x = np.random.default_rng(8).standard_normal((1, 1280, 7, 7)).astype(np.float32)
    x[0, 700, 3, 3] = np.nan
    outside = reduce.trailing_mean(x, (2, 3), False)
    calls = []
    real = _gemv.row_means
    monkeypatch.setattr(_gemv, "row_means", lambda *args: calls.append(args[2]) or real(*args))
    monkeypatch.setattr(reduce, "team_joined", lambda: True)
    monkeypatch.setattr(reduce, "thread_budget", lambda: 2)
    inside = reduce.trailing_mean(x, (2, 3), False)
    assert calls == [2]
    np.testing.assert_allclose(inside, outside, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.isnan(inside), np.isnan(outside))
    # the sums as the row product's, then numpy's float32 division: the same bits, on any split
    rows = x.reshape(1280, 49)
    ones = np.ones(49, np.float32)
    divided = np.divide(_gemv.row_times_matrix(ones, rows, 2), np.float32(49))
    np.testing.assert_array_equal(inside.reshape(-1), divided)
    for parts in (1, 3, 5):
        np.testing.assert_array_equal(real(rows, ones, parts), divided)


@pytest.mark.parametrize("include_pad", [0, 1])
def test_an_average_pool_whose_window_is_the_whole_map_takes_it(monkeypatch, include_pad):
    x = np.random.default_rng(9).standard_normal((2, 100, 7, 7)).astype(np.float32)
    calls = []
    real = pool.trailing_mean
    monkeypatch.setattr(pool, "trailing_mean", lambda *args: calls.append(1) or real(*args))
    got = pool.average_pool(x, kernel_shape=[7, 7], auto_pad="NOTSET", count_include_pad=include_pad)
    assert calls == [1] and got.shape == (2, 100, 1, 1) and got.dtype == np.float32
    np.testing.assert_allclose(got, x.astype(np.float64).mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
    # padded, strided past the map, or a window smaller than the map: the windowed sums
    pool.average_pool(x, kernel_shape=[7, 7], auto_pad="NOTSET", pads=[1, 1, 1, 1], count_include_pad=include_pad)
    pool.average_pool(x, kernel_shape=[6, 6], auto_pad="NOTSET", strides=[2, 2], count_include_pad=include_pad)
    assert calls == [1]


def test_a_window_padded_past_the_map_whose_padding_is_not_counted_is_a_global_average(monkeypatch):
    """Inception-v1's head: a 7×7 window with pads [0, 0, 1, 1] over a 6×6 map (one output)."""
    x = np.random.default_rng(10).standard_normal((1, 64, 6, 6)).astype(np.float32)
    calls = []
    real = pool.trailing_mean
    monkeypatch.setattr(pool, "trailing_mean", lambda *args: calls.append(1) or real(*args))
    geometry = dict(kernel_shape=[7, 7], auto_pad="NOTSET", pads=[0, 0, 1, 1])
    got = pool.average_pool(x, **geometry)
    assert calls == [1] and got.shape == (1, 64, 1, 1)
    np.testing.assert_allclose(got, x.astype(np.float64).mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
    counted = pool.average_pool(x, count_include_pad=1, **geometry)  # the padding counted: 49 cells
    assert calls == [1]
    np.testing.assert_allclose(counted, x.astype(np.float64).sum(axis=(2, 3), keepdims=True) / 49, rtol=1e-5, atol=1e-6)
    pool.average_pool(x, dilations=[2, 2], kernel_shape=[4, 4], auto_pad="NOTSET", pads=[1, 1, 1, 1])  # dilated
    assert calls == [1]
