"""Statistical tests of the CPU random generators, through the public API.

ONNX's own node tests cannot check these ops (their expected values are one draw of numpy's
legacy generator), so these check what is specified: shape, dtype, range, the first two moments
on ~100k samples (tolerances of about six standard errors), and that a seed makes runs
reproducible while its absence does not.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug

N = 100_000


def _session(op, attrs=None, inputs=(), out_type=TensorProto.FLOAT, opset=22):
    node = helper.make_node(op, [name for name, _, _ in inputs], ["y"], **(attrs or {}))
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(name, elem, shape) for name, elem, shape in inputs],
        [helper.make_tensor_value_info("y", out_type, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _run(session, **feeds):
    return session.run(None, feeds)[0]


def _check_moments(values, mean, std):
    values = values.astype(np.float64).ravel()
    error = std / np.sqrt(values.size)
    assert abs(values.mean() - mean) < 6 * error + 1e-3 * abs(mean)
    assert abs(values.std() - std) < 0.02 * std


# -- RandomNormal / RandomUniform ---------------------------------------------------------------


@pytest.mark.parametrize("opset", [1, 22])
def test_random_normal_moments_and_shape(opset):
    y = _run(_session("RandomNormal", {"shape": [250, 400], "mean": 3.0, "scale": 2.0}, opset=opset))
    assert y.shape == (250, 400) and y.dtype == np.float32
    _check_moments(y, 3.0, 2.0)


@pytest.mark.parametrize(("elem", "dtype"), [(TensorProto.FLOAT16, np.float16), (TensorProto.DOUBLE, np.float64)])
def test_random_normal_dtype(elem, dtype):
    y = _run(_session("RandomNormal", {"shape": [N], "dtype": elem}, out_type=elem))
    assert y.dtype == dtype and y.shape == (N,)
    _check_moments(y, 0.0, 1.0)


def test_random_uniform_range_and_moments():
    y = _run(_session("RandomUniform", {"shape": [N], "low": -2.0, "high": 6.0}))
    assert y.dtype == np.float32 and y.shape == (N,)
    assert y.min() >= -2.0 and y.max() <= 6.0
    _check_moments(y, 2.0, 8.0 / np.sqrt(12))
    # roughly flat: each eighth of the range holds about an eighth of the samples
    counts = np.histogram(y, bins=8, range=(-2.0, 6.0))[0]
    assert np.all(np.abs(counts / N - 1 / 8) < 0.01)


def test_random_uniform_double():
    y = _run(_session("RandomUniform", {"shape": [N], "dtype": TensorProto.DOUBLE}, out_type=TensorProto.DOUBLE))
    assert y.dtype == np.float64 and 0.0 <= y.min() and y.max() < 1.0
    _check_moments(y, 0.5, 1 / np.sqrt(12))


def test_seed_reproducible_across_runs_and_sessions():
    attrs = {"shape": [1000], "seed": 7.0}
    first = _session("RandomNormal", attrs)
    a, b = _run(first), _run(first)
    c = _run(_session("RandomNormal", attrs))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    other = _run(_session("RandomNormal", {"shape": [1000], "seed": 8.0}))
    assert not np.array_equal(a, other)
    fractional = _run(_session("RandomNormal", {"shape": [1000], "seed": 7.5}))
    assert not np.array_equal(a, fractional)


def test_without_seed_runs_differ():
    session = _session("RandomUniform", {"shape": [1000]})
    assert not np.array_equal(_run(session), _run(session))


# -- *Like --------------------------------------------------------------------------------------


def test_random_normal_like_takes_shape_and_dtype_of_input():
    x = np.zeros((200, 500), np.float64)
    session = _session(
        "RandomNormalLike",
        {"mean": -1.0, "scale": 0.5},
        inputs=[("x", TensorProto.DOUBLE, [200, 500])],
        out_type=TensorProto.DOUBLE,
    )
    y = _run(session, x=x)
    assert y.shape == x.shape and y.dtype == np.float64
    _check_moments(y, -1.0, 0.5)


def test_random_uniform_like_dtype_attribute():
    x = np.zeros((N,), np.int32)
    session = _session(
        "RandomUniformLike",
        {"dtype": TensorProto.FLOAT, "low": 1.0, "high": 2.0, "seed": 3.0},
        inputs=[("x", TensorProto.INT32, [N])],
    )
    y = _run(session, x=x)
    assert y.shape == (N,) and y.dtype == np.float32
    assert y.min() >= 1.0 and y.max() <= 2.0
    _check_moments(y, 1.5, 1 / np.sqrt(12))
    np.testing.assert_array_equal(y, _run(session, x=x))


# -- Bernoulli ----------------------------------------------------------------------------------


def test_bernoulli_frequency_follows_probabilities():
    p = np.where(np.arange(N) % 2 == 0, 0.2, 0.7).astype(np.float32)
    session = _session("Bernoulli", inputs=[("p", TensorProto.FLOAT, [N])])
    y = _run(session, p=p)
    assert y.dtype == np.float32 and y.shape == (N,)
    assert set(np.unique(y)) <= {0.0, 1.0}
    tolerance = 6 * np.sqrt(0.25 / (N / 2))
    assert abs(y[0::2].mean() - 0.2) < tolerance
    assert abs(y[1::2].mean() - 0.7) < tolerance


def test_bernoulli_certain_probabilities_and_dtype():
    p = np.array([0.0, 1.0, 0.0, 1.0], np.float64)
    session = _session(
        "Bernoulli",
        {"dtype": TensorProto.INT64},
        inputs=[("p", TensorProto.DOUBLE, [4])],
        out_type=TensorProto.INT64,
        opset=15,
    )
    y = _run(session, p=p)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, [0, 1, 0, 1])


def test_bernoulli_seed_reproducible():
    p = np.full((1000,), 0.5, np.float32)
    session = _session("Bernoulli", {"seed": 1.0}, inputs=[("p", TensorProto.FLOAT, [1000])])
    np.testing.assert_array_equal(_run(session, p=p), _run(session, p=p))


def test_bernoulli_rejects_probability_outside_unit_interval():
    session = _session("Bernoulli", inputs=[("p", TensorProto.FLOAT, [2])])
    with pytest.raises(onnxplug.InvalidArgument):
        _run(session, p=np.array([0.5, 1.5], np.float32))


# -- Multinomial --------------------------------------------------------------------------------


def test_multinomial_frequencies():
    probabilities = np.array([[0.1, 0.6, 0.3, 0.0], [0.25, 0.25, 0.25, 0.25]])
    with np.errstate(divide="ignore"):
        logits = np.log(probabilities).astype(np.float32) + 5.0  # unnormalised log-probabilities
    session = _session(
        "Multinomial", {"sample_size": N}, inputs=[("x", TensorProto.FLOAT, [2, 4])], out_type=TensorProto.INT32
    )
    y = _run(session, x=logits)
    assert y.shape == (2, N) and y.dtype == np.int32
    assert y.min() >= 0 and y.max() <= 3
    for row in range(2):
        frequencies = np.bincount(y[row], minlength=4) / N
        np.testing.assert_allclose(frequencies, probabilities[row], atol=6 * np.sqrt(0.25 / N))
    assert not np.any(y[0] == 3)  # zero probability is never drawn


def test_multinomial_int64_and_seed():
    x = np.zeros((3, 5), np.float32)
    session = _session(
        "Multinomial",
        {"sample_size": 7, "dtype": TensorProto.INT64, "seed": 2.0},
        inputs=[("x", TensorProto.FLOAT, [3, 5])],
        out_type=TensorProto.INT64,
        opset=7,
    )
    y = _run(session, x=x)
    assert y.shape == (3, 7) and y.dtype == np.int64
    np.testing.assert_array_equal(y, _run(session, x=x))
