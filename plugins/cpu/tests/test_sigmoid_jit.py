"""The compiled Sigmoid and SiLU passes (``kernels._sigmoid_jit``, ``numerics.sigmoid`` /
``numerics.silu``): values against float64 numpy over the whole float32 range, in place and not,
the edges (overflow to an exact 0, infinities, NaN), the numpy fallback for small or non-float32
arrays and with ``ONNXPLUG_CPU_JIT=0``, and the Sigmoid/Swish nodes against onnx's reference
evaluator."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from onnxplug.testing import make_model
from onnxplug_cpu.kernels import _sigmoid_jit
from onnxplug_cpu.numerics import sigmoid, silu


def _reference(x, alpha=None):
    """float64 of ``x``'s function, from ``-alpha * x`` rounded to ``x``'s type as any float32
    kernel computes it (onnxruntime's too): that rounding alone moves exp by |alpha x|·6e-8."""
    w = x.astype(np.float64)
    scaled = -x if alpha is None else x.dtype.type(-alpha) * x
    with np.errstate(over="ignore"):
        s = 1.0 / (1.0 + np.exp(scaled.astype(np.float64)))
    return s if alpha is None else w * s


def _inputs(rng, n):
    # every exponent: tiny, ordinary and overflowing magnitudes of both signs
    wide = rng.standard_normal(n) * np.exp(rng.uniform(-20, 5, n))
    return wide.astype(np.float32)


@pytest.mark.numba
@pytest.mark.parametrize("alpha", [None, 1.0, 1.702, -0.5])
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("n", [_sigmoid_jit.MIN_ELEMENTS, 3 * _sigmoid_jit.BLOCK + 17])
def test_compiled_matches_float64(alpha, in_place, n):
    rng = np.random.default_rng(n)
    x = _inputs(rng, n)
    want = _reference(x, alpha)
    src = x.copy()
    got = _sigmoid_jit.logistic(src, alpha, src if in_place else None)
    assert got is not None and got.dtype == np.float32 and got.shape == x.shape
    assert (got is src) == in_place
    # a few ulp; where exp(-alpha x) passes 2^127 (x * sigmoid below ~1e-36) the result is 0
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-36)
    if not in_place:
        np.testing.assert_array_equal(src, x)  # the input is left alone


@pytest.mark.numba
def test_compiled_edges():
    x = np.zeros(_sigmoid_jit.MIN_ELEMENTS, np.float32)
    edges = np.array([-np.inf, -1e30, -100, -89, 0.0, -0.0, 1e-30, 88, 100, 1e30, np.inf, np.nan], np.float32)
    x[: edges.size] = edges
    sig = _sigmoid_jit.logistic(x)[: edges.size]
    np.testing.assert_array_equal(sig[:4], 0)  # exp overflows: an exact 0, as numpy's
    np.testing.assert_array_equal(sig[4:7], 0.5)
    np.testing.assert_array_equal(sig[7:11], 1)
    assert np.isnan(sig[11])
    y = _sigmoid_jit.logistic(x, 1.0)[: edges.size]
    np.testing.assert_array_equal(y[1:4], 0)  # -1e30 * 0: the sign of a true product
    assert np.signbit(y[2])
    np.testing.assert_array_equal(y[7:11], edges[7:11])
    assert np.isnan(y[11])


def test_fallback_paths():
    """Small arrays, float64, float16 and non-contiguous views take numpy's passes; the values
    are the same function's."""
    rng = np.random.default_rng(3)
    small = _inputs(rng, 100)
    assert _sigmoid_jit.logistic(small) is None
    for x in (small, _inputs(rng, 5000).astype(np.float64), _inputs(rng, 6000)[::2]):
        assert _sigmoid_jit.logistic(x) is None
        np.testing.assert_allclose(sigmoid(x), _reference(x), rtol=1e-6, atol=1e-37)
        with np.errstate(over="ignore"):
            np.testing.assert_allclose(silu(x, 1.702), _reference(x, 1.702), rtol=1e-6, atol=1e-37)
    out = small.copy()
    assert sigmoid(out, out=out) is out


def test_disabled_by_environment():
    code = (
        "import numpy as np, sys\n"
        "from onnxplug_cpu.kernels import _sigmoid_jit\n"
        "assert _sigmoid_jit.logistic(np.ones(10000, np.float32)) is None\n"
        "assert 'numba' not in sys.modules\n"
    )
    env = dict(os.environ, ONNXPLUG_CPU_JIT="0")
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.parametrize("op,attrs,opset", [("Sigmoid", {}, 13), ("Swish", {"alpha": 0.75}, 24)])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 8, 40, 40)])
def test_nodes_match_the_reference(op, attrs, opset, shape):
    import onnxplug

    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) * 6).astype(np.float32)
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    model = make_model([node], [("x", TensorProto.FLOAT, shape)], [("y", TensorProto.FLOAT, shape)], opset=opset)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.numba
@pytest.mark.parametrize("alpha", [None, 1.0])
def test_a_run_on_the_team_splits_the_pass_with_the_same_bits(alpha, monkeypatch):
    """Inside a run whose convolutions started numba's team, a large pass is split over it; the
    values are the one-thread pass's bits.  Outside such a run it stays on the calling thread."""
    from onnxplug_cpu.kernels import _team

    if _sigmoid_jit.compiled() is None or not _team.parallel_ready():
        pytest.skip("needs numba with a thread-safe threading layer (omp or tbb)")
    x = _inputs(np.random.default_rng(43), 5 * _sigmoid_jit.PART_ELEMENTS + 7)
    alone = _sigmoid_jit.logistic(x, alpha)
    split = []
    monkeypatch.setattr(_sigmoid_jit, "team_joined", lambda: True)
    monkeypatch.setattr(_sigmoid_jit, "thread_budget", lambda: 2)
    import onnxplug_cpu.kernels._sigmoid_loops as loops

    original = loops.logistic_parallel

    def spy(*args):
        split.append(args[-1])
        return original(*args)

    monkeypatch.setattr(loops, "logistic_parallel", spy)
    np.testing.assert_array_equal(_sigmoid_jit.logistic(x, alpha), alone)
    assert split == [2]
