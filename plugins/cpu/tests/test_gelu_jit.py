"""Exact Gelu in float32 (``numerics.gelu_single``): the compiled pass (``kernels._gelu_jit``)
and the numpy fallback (``ONNXPLUG_CPU_JIT=0``) against float64 ``math.erfc``, the negative
tail and the special values included; the fused bias; views and other input types; the ONNX
``Gelu`` node in float16/float32/float64; the tanh form (``gelu_tanh_single``, FastGelu)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper

import onnxplug
from onnxplug.testing import make_model
from onnxplug_cpu.kernels import _gelu_jit, _numeric
from onnxplug_cpu.kernels._jit import compiler
from onnxplug_cpu.numerics import gelu_single, gelu_tanh_single


def _exact(x) -> np.ndarray:
    """Gelu in float64 as ``x/2 erfc(-x/sqrt 2)``: no cancellation in the negative tail."""
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in np.asarray(x, dtype=np.float64).ravel()])


def _check_accuracy(got, x):
    """The documented accuracy: relative error under 2e-6 for |x| < 4, 2e-5 down to where the
    result leaves float32's range (about -13), tiny absolute error beyond; exact above 4."""
    x64 = np.asarray(x, dtype=np.float64).ravel()
    want = _exact(x64)
    got = np.asarray(got, dtype=np.float64).ravel()
    rel = np.abs(got - want) / np.maximum(np.abs(want), np.finfo(np.float64).tiny)
    inner = np.abs(x64) < 4
    tail = (x64 <= -4) & (x64 > -13)
    assert rel[inner].max(initial=0) < 2e-6, rel[inner].max(initial=0)
    assert rel[tail].max(initial=0) < 2e-5, rel[tail].max(initial=0)
    assert rel[x64 >= 4].max(initial=0) < 2e-7
    assert np.abs(got - want)[x64 <= -13].max(initial=0) < 1e-40


# Every float32 spacing that matters: fine steps near 0, the tail down to total underflow.
GRID = np.concatenate([np.linspace(-20, 20, 40001), np.linspace(-1e-3, 1e-3, 201), [1e-30, -1e-30, 60.0, 1e6]])


@pytest.fixture
def numpy_only(monkeypatch):
    monkeypatch.setenv("ONNXPLUG_CPU_JIT", "0")
    _gelu_jit.compiled.cache_clear()
    yield
    _gelu_jit.compiled.cache_clear()


@pytest.fixture(params=["compiled", "numpy"])
def jit(request, monkeypatch):
    """Each path in turn: the compiled loop (skipped without numba) and the numpy passes."""
    if request.param == "numpy":
        monkeypatch.setenv("ONNXPLUG_CPU_JIT", "0")
    elif compiler() is None:
        pytest.skip("needs numba")
    _gelu_jit.compiled.cache_clear()
    yield request.param
    _gelu_jit.compiled.cache_clear()


@pytest.mark.numba
def test_compiled_loop_accuracy_against_erfc():
    x = GRID.astype(np.float32)
    got = _gelu_jit.gelu_float32(x)
    assert got is not None and got.dtype == np.float32 and got.shape == x.shape
    _check_accuracy(got, x)


def test_numpy_fallback_accuracy_against_erfc(numpy_only):
    assert _gelu_jit.compiled() is None and _gelu_jit.gelu_float32(np.zeros(3, np.float32)) is None
    x = GRID.astype(np.float32)
    with np.errstate(all="ignore"):
        got = gelu_single(x)
    _check_accuracy(got, x)


def test_special_values(jit):
    x = np.array([np.nan, np.inf, 0.0, -0.0, 1e30, -1e30, -40.0], dtype=np.float32)
    with np.errstate(all="ignore"):
        got = gelu_single(x)
    assert np.isnan(got[0]) and got[1] == np.inf
    assert got[2] == 0 and not np.signbit(got[2]) and got[3] == 0 and np.signbit(got[3])
    assert got[4] == np.float32(1e30) and got[5] == 0 and got[6] == 0


@pytest.mark.parametrize("shape", [(3, 5), (2, 128, 1536), (1, 7), (40, 3000), (5,)])
def test_bias_is_added_in_float32(shape, jit):
    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    b = (rng.standard_normal(shape[-1]) * 2).astype(np.float32)
    got = gelu_single(x, b)
    assert got.shape == x.shape and got.dtype == np.float32
    _check_accuracy(got, x + b)  # the float32 sum, as numpy adds it


@pytest.mark.numba
def test_every_row_and_value_is_computed():
    # Each row with the bias against the same row alone; a flat array of odd length.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((37, 1536)).astype(np.float32) * 3
    b = rng.standard_normal(1536).astype(np.float32)
    got = gelu_single(x, b)
    for i in (0, 17, 36):
        np.testing.assert_array_equal(got[i], gelu_single(x[i : i + 1] + b)[0])
    flat = rng.standard_normal(3 * 4096 + 17).astype(np.float32)
    got = gelu_single(flat)
    _check_accuracy(got, flat)
    np.testing.assert_array_equal(got[-17:], gelu_single(flat[-17:]))


@pytest.mark.numba
def test_inputs_are_not_modified_and_views_work():
    rng = np.random.default_rng(4)
    base = rng.standard_normal((6, 8)).astype(np.float32) * 3
    kept = base.copy()
    view = base.T  # not C-contiguous: copied, then written over in place
    got = gelu_single(view)
    np.testing.assert_array_equal(base, kept)
    _check_accuracy(got, view)
    wide = base.astype(np.float64)  # float64 in: computed in float32 from the rounded values
    _check_accuracy(gelu_single(wide), wide.astype(np.float32))
    assert gelu_single(np.zeros((0, 4), np.float32), np.zeros(4, np.float32)).shape == (0, 4)
    with pytest.raises(ValueError, match="last dimension"):
        _gelu_jit.gelu_float32(base, np.zeros(5, np.float32))


@pytest.mark.numba
def test_compiled_and_numpy_agree_to_their_accuracy():
    x = (np.random.default_rng(5).standard_normal(10000) * 3).astype(np.float32)
    got, numpy = _gelu_jit.gelu_float32(x), _numeric._gelu_numpy(x)
    inner = np.abs(x) < 4  # the numpy passes' error grows with x^2 in the tail (2e-5 at -13)
    np.testing.assert_allclose(got[inner], numpy[inner], rtol=4e-6, atol=0)
    np.testing.assert_allclose(got[~inner], numpy[~inner], rtol=3e-5, atol=0)
    # Huge values stay finite in the compiled loop (x/2 is taken before the product).
    assert _gelu_jit.gelu_float32(np.array([3e38], np.float32))[0] == np.float32(3e38)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_onnx_gelu_node(dtype):
    x = np.concatenate([np.linspace(-12, 6, 601), [0.0]]).astype(dtype).reshape(1, -1)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = make_model(
        [helper.make_node("Gelu", ["x"], ["y"])], [("x", elem, x.shape)], [("y", elem, x.shape)], opset=20
    )
    (got,) = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    assert got.dtype == dtype
    want = _exact(x.astype(np.float64)).reshape(x.shape)
    if dtype == np.float16:  # computed in float32, rounded once to float16
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float16).astype(np.float64), rtol=1e-3, atol=6e-8
        )
    elif dtype == np.float32:
        _check_accuracy(got, x)
    else:  # float64 takes 1 + erf (not this module's paths): relative accuracy down to -3
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
        np.testing.assert_allclose(got[x >= -3], want[x >= -3], rtol=1e-12)


def _exact_tanh(x) -> np.ndarray:
    """Gelu's tanh form in float64 as ``x / (1 + exp(-2u))``: no cancellation for negative x."""
    x = np.asarray(x, dtype=np.float64)
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    with np.errstate(over="ignore"):
        return x / (1 + np.exp(-2 * u))


def test_tanh_form(jit):
    x = np.linspace(-30, 30, 60001).astype(np.float32)
    b = np.float32(0.25) * np.ones(x.shape[-1], np.float32)
    with np.errstate(all="ignore"):
        got, with_bias = gelu_tanh_single(x), gelu_tanh_single(x.reshape(1, -1), b)
    want = _exact_tanh(x)
    assert got.dtype == np.float32 and with_bias.shape == (1, x.size)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)  # numpy's 1 + tanh cancels below
    if jit == "compiled":  # the exp form keeps its relative accuracy in the negative tail
        rel = np.abs(got - want) / np.maximum(np.abs(want), np.finfo(np.float64).tiny)
        assert rel[np.abs(x) < 5].max() < 2e-6 and rel[(x < -5) & (want < -1e-30)].max() < 2e-5
        np.testing.assert_allclose(with_bias[0], _exact_tanh(x + b), rtol=2e-5, atol=1e-37)
        special = gelu_tanh_single(np.array([np.nan, np.inf, 0.0, -0.0, -1e30], np.float32))
        assert np.isnan(special[0]) and special[1] == np.inf and special[4] == 0
        assert special[2] == 0 and not np.signbit(special[2]) and np.signbit(special[3])


def test_onnx_gelu_tanh_node():
    x = np.linspace(-8, 8, 401).astype(np.float32).reshape(1, -1)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(np.float32))
    node = helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")
    model = make_model([node], [("x", elem, x.shape)], [("y", elem, x.shape)], opset=20)
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": x})
    np.testing.assert_allclose(got, _exact_tanh(x), rtol=0, atol=1e-6)


@pytest.mark.numba
@pytest.mark.parametrize("form", ["erf", "tanh"])
def test_rows_split_over_the_team_keep_the_bits(form, monkeypatch):
    """Inside a run that started numba's team the rows split over it: the same values."""
    from onnxplug_cpu.kernels import _team

    if compiler() is None or not _team.parallel_ready():
        pytest.skip("needs numba with a thread-safe threading layer (omp or tbb)")
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 67, 1536)).astype(np.float32) * 3
    bias = rng.standard_normal(1536).astype(np.float32)
    alone, alone_unbiased = _gelu_jit.gelu_float32(x, bias, form), _gelu_jit.gelu_float32(x, None, form)
    calls = []
    parallel = _gelu_jit.compiled_parallel(form)
    monkeypatch.setattr(_gelu_jit, "team_parts", lambda size, rows: 2)  # a team run's split on two threads
    monkeypatch.setattr(_gelu_jit, "compiled_parallel", lambda f: lambda *a: calls.append(a[-1]) or parallel(*a))
    np.testing.assert_array_equal(_gelu_jit.gelu_float32(x, bias, form), alone)
    np.testing.assert_array_equal(_gelu_jit.gelu_float32(x, None, form), alone_unbiased)
    assert calls == [2, 2]
