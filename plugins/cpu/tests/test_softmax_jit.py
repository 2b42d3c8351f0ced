"""The compiled float32 softmax over the last axis (``kernels._softmax_jit``, public as
``numerics.softmax_last_axis``): accuracy against float64, NaN/inf rows as numpy gives them,
masked scores, in-place use, which inputs it takes, the ONNX ``Softmax`` node, and the numpy
path with ``ONNXPLUG_CPU_JIT=0``."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model
from onnxplug_cpu.kernels import _softmax_jit
from onnxplug_cpu.numerics import softmax_last_axis


def _reference(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _close(got, want):
    """2e-6 relative for probabilities above 1e-6; below, the float32 rounding of ``x - max``
    (|x - max| up to ~87 before exp underflows) is 2^-24 |x - max| of the result: 1e-5."""
    want = np.asarray(want, dtype=np.float64)
    big = want >= 1e-6
    np.testing.assert_allclose(got[big], want[big], rtol=2e-6)
    np.testing.assert_allclose(got[~big], want[~big], rtol=1e-5, atol=1e-37)


def _scores(rng, shape, spread):
    return (rng.standard_normal(shape) * spread).astype(np.float32)


@pytest.mark.numba
@pytest.mark.parametrize("shape", [(2, 12, 128, 128), (300, 77), (5, 4096), (16384, 1)])
@pytest.mark.parametrize("spread", [0.1, 3.0, 40.0])
def test_matches_float64(shape, spread):
    x = _scores(np.random.default_rng(sum(shape)), shape, spread)
    got = softmax_last_axis(x)
    assert got is not None and got.shape == x.shape and got.dtype == np.float32
    _close(got, _reference(x))
    np.testing.assert_allclose(got.astype(np.float64).sum(axis=-1), 1.0, rtol=2e-6)


@pytest.mark.numba
def test_masked_keys_and_special_rows():
    x = _scores(np.random.default_rng(1), (200, 128), 2.0)
    x[0, 5:] = -10000.0  # a padding mask (onnxruntime's filter value)
    x[1, 64:] = np.finfo(np.float32).min  # a causal mask
    x[2, :] = -10000.0  # a fully masked row: uniform
    x[3, 7] = np.nan
    x[4, :] = -np.inf
    x[5, 9] = np.inf
    x[6, 3] = 80.0  # one dominant key: the others underflow to 0
    with np.errstate(all="ignore"):
        want = _reference(x).astype(np.float32)
        got = softmax_last_axis(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[3]).all() and np.isnan(got[4]).all() and np.isnan(got[5]).all()
    keep = ~np.isnan(want)
    _close(got[keep], want[keep])
    assert (got[0, 5:] == 0).all() and (got[1, 64:] == 0).all()
    np.testing.assert_allclose(got[2], 1 / 128, rtol=1e-6)


@pytest.mark.numba
def test_in_place_and_copies():
    x = _scores(np.random.default_rng(2), (4, 64, 96), 3.0)
    kept = x.copy()
    copy = softmax_last_axis(x)
    np.testing.assert_array_equal(x, kept)  # not in place: the input is untouched
    assert softmax_last_axis(x, in_place=True) is x
    np.testing.assert_array_equal(x, copy)
    view = kept.transpose(0, 2, 1)  # strided: computed on a C-ordered copy
    _close(softmax_last_axis(view), _reference(view))
    with pytest.raises(ValueError, match="C-contiguous"):
        softmax_last_axis(view, in_place=True)


def test_what_it_declines(monkeypatch):
    rng = np.random.default_rng(3)
    small = _scores(rng, (10, 1000), 1.0)
    assert _softmax_jit.compiled() is not None  # imports numba
    _close(softmax_last_axis(small), _reference(small))  # small, with numba loaded: the loop
    monkeypatch.setattr(_softmax_jit, "numba_loaded", lambda: False)
    assert softmax_last_axis(small) is None  # small, before anything loaded numba: numpy
    assert softmax_last_axis(_scores(rng, (64, 1024), 1.0).astype(np.float64)) is None
    assert softmax_last_axis(np.zeros((20000, 0), np.float32)) is None


def test_numpy_fallback(monkeypatch):
    monkeypatch.setenv("ONNXPLUG_CPU_JIT", "0")
    _softmax_jit.compiled.cache_clear()
    try:
        assert softmax_last_axis(_scores(np.random.default_rng(4), (64, 1024), 1.0)) is None
        x = _scores(np.random.default_rng(5), (2, 4, 64, 64), 3.0)
        _close(_run_softmax(x, 13, -1), _reference(x))
    finally:
        _softmax_jit.compiled.cache_clear()


def _run_softmax(x, opset, axis):
    model = make_model(
        [helper.make_node("Softmax", ["x"], ["y"], axis=axis)],
        [("x", TensorProto.FLOAT, x.shape)],
        [("y", TensorProto.FLOAT, x.shape)],
        opset=opset,
    )
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("opset, axis", [(13, -1), (13, 3), (11, 3), (11, 2), (13, 1)])
def test_onnx_softmax_node(opset, axis):
    # Last-axis cases take the compiled loop (2·4·64·64 values); (11, 2) flattens to rows of
    # 64·64 and (13, 1) normalises across the heads: numpy.
    x = _scores(np.random.default_rng(6), (2, 4, 64, 64), 3.0)
    got = _run_softmax(x, opset, axis)
    if opset == 11:
        rows = int(np.prod(x.shape[:axis]))
        want = _reference(x.reshape(rows, -1)).reshape(x.shape)
    else:
        want = np.moveaxis(_reference(np.moveaxis(x, axis, -1)), -1, axis)
    _close(got, want)


@pytest.mark.numba
def test_rows_split_over_the_team_keep_the_bits(monkeypatch):
    """Inside a run that started numba's team the rows split over it: the same values, NaN and
    infinite rows included."""
    from onnxplug_cpu.kernels import _team

    if _softmax_jit.compiled() is None or not _team.parallel_ready():
        pytest.skip("needs numba with a thread-safe threading layer (omp or tbb)")
    rng = np.random.default_rng(21)
    x = rng.standard_normal((12, 197, 197)).astype(np.float32) * 4
    x[3, 5, 7], x[7, 0, :] = np.nan, -np.inf
    alone = softmax_last_axis(x)
    monkeypatch.setattr(_softmax_jit, "team_parts", lambda size, rows: 2)  # a team run's split on two threads
    from onnxplug_cpu.kernels import _softmax_loops

    parallel, calls = _softmax_loops.softmax_rows_parallel, []
    monkeypatch.setattr(
        _softmax_loops, "softmax_rows_parallel", lambda rows, parts: calls.append(parts) or parallel(rows, parts)
    )
    split = softmax_last_axis(x)
    assert calls == [2]
    np.testing.assert_array_equal(split, alone)
    assert np.isnan(split[3, 5]).all() and np.isnan(split[7, 0]).all()


@pytest.mark.numba
def test_the_row_max_reads_every_lane_and_passes_over_nan():
    """``kernels._row_max_ir.run_max``, softmax's row max: every length around the 16 lanes (the
    masked last vector), the max at each position, NaN passed over, ``-inf`` for NaN alone."""
    from onnxplug_cpu.kernels._softmax_loops import row_max

    rng = np.random.default_rng(7)
    for length in [*range(1, 50), 128, 197]:
        row = rng.standard_normal(length).astype(np.float32) - 100
        for at in {0, length // 2, length - 1}:
            probe = row.copy()
            probe[at] = 5.0
            assert row_max(probe) == 5.0, (length, at)
        assert row_max(row) == row.max()
    row = np.array([1.0, np.nan, 3.0, np.nan] * 5, np.float32)
    assert row_max(row) == 3.0
    assert row_max(np.full(3, np.nan, np.float32)) == -np.inf
    assert row_max(np.full(20, -np.inf, np.float32)) == -np.inf
