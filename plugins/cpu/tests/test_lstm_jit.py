"""The compiled LSTM recurrence (``kernels._lstm_jit``) against the numpy loop it replaces and
onnx's reference evaluator: directions, peepholes, clip, input_forget, sequence_lens, initial
states and layout; other activations and float64 keep the numpy loop."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxplug
from onnxplug.testing import make_model
from onnxplug_cpu.kernels import rnn

STEPS, BATCH, INPUT, HIDDEN = 7, 3, 5, 6
#: attributes and inputs onnx's reference LSTM does not implement: those cases are checked against the
#: numpy loop (conformance-tested) only
REFERENCE_IGNORES = {"clip", "input_forget", "lens"}

CASES = {
    "forward": dict(direction="forward"),
    "reverse": dict(direction="reverse"),
    "bidirectional": dict(direction="bidirectional"),
    "peepholes": dict(direction="bidirectional", peepholes=True),
    "clip": dict(direction="forward", clip=0.7),
    "input_forget": dict(direction="reverse", input_forget=1, peepholes=True),
    "sequence_lens": dict(direction="bidirectional", lens=[7, 3, 0], initial=True),
    "layout": dict(direction="bidirectional", layout=1, initial=True),
    "named_defaults": dict(direction="bidirectional", activations=["sigmoid", "TANH", "Tanh"] * 2),
}


def _inputs(rng, case, dtype=np.float32):
    dirs = 2 if case["direction"] == "bidirectional" else 1
    layout = case.get("layout", 0)
    x = rng.standard_normal((BATCH, STEPS, INPUT) if layout else (STEPS, BATCH, INPUT)) * 2
    feeds = {
        "X": x,
        "W": rng.standard_normal((dirs, 4 * HIDDEN, INPUT)) * 0.5,
        "R": rng.standard_normal((dirs, 4 * HIDDEN, HIDDEN)) * 0.5,
        "B": rng.standard_normal((dirs, 8 * HIDDEN)) * 0.3,
    }
    names = ["X", "W", "R", "B", "", "", "", ""]
    if "lens" in case:
        feeds["L"] = np.array(case["lens"], np.int32)
        names[4] = "L"
    if case.get("initial"):
        shape = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
        feeds["H0"], feeds["C0"] = rng.standard_normal(shape), rng.standard_normal(shape)
        names[5:7] = ["H0", "C0"]
    if case.get("peepholes"):
        feeds["P"] = rng.standard_normal((dirs, 3 * HIDDEN)) * 0.5
        names[7] = "P"
    feeds = {k: v.astype(dtype) if v.dtype.kind == "f" else v for k, v in feeds.items()}
    while names and not names[-1]:
        names.pop()
    return feeds, names


def _model(case, names, dtype=TensorProto.FLOAT):
    attrs = dict(direction=case["direction"], hidden_size=HIDDEN)
    for key in ("clip", "input_forget", "layout", "activations"):
        if key in case:
            attrs[key] = case[key]
    node = helper.make_node("LSTM", names, ["Y", "Y_h", "Y_c"], **attrs)
    inputs = [(n, TensorProto.INT32 if n == "L" else dtype, None) for n in names if n]
    outputs = [(n, dtype, None) for n in ("Y", "Y_h", "Y_c")]
    return make_model([node], inputs, outputs, opset=14)


def _call(feeds, names, case):
    args = [feeds[n] if n else None for n in names]
    attrs = dict(
        direction=case["direction"],
        hidden_size=HIDDEN,
        input_forget=case.get("input_forget", 0),
        clip=case.get("clip"),
        activations=case.get("activations"),
        layout=case.get("layout", 0),
    )
    return rnn.lstm_values(*args, **attrs)


@pytest.mark.numba
@pytest.mark.parametrize("name", list(CASES))
def test_compiled_matches_numpy_and_reference(name, monkeypatch):
    case = CASES[name]
    feeds, names = _inputs(np.random.default_rng(len(name)), case)
    compiled = _call(feeds, names, case)
    monkeypatch.setattr(rnn, "_compiled_lstm", lambda: None)
    numpy_loop = _call(feeds, names, case)
    want = ReferenceEvaluator(_model(case, names)).run(None, feeds)
    for got, loop, ref in zip(compiled, numpy_loop, want):
        assert got.dtype == np.float32 and got.shape == ref.shape == loop.shape
        np.testing.assert_allclose(got, loop, rtol=1e-5, atol=1e-6)
        if not REFERENCE_IGNORES & set(case):
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    if REFERENCE_IGNORES & set(case):  # and the attribute changed the result
        assert not np.allclose(compiled[0], want[0], rtol=1e-3, atol=1e-3)
    if "lens" in case:  # the finished entry emits zeros
        np.testing.assert_array_equal(compiled[0][:, :, 2], 0)


def test_which_lstms_are_compiled(monkeypatch):
    """Only float32 with the default activations; a session runs through the same kernel."""
    calls = []
    real = rnn._compiled_lstm

    def spy():
        kernel = real()
        if kernel is None:
            return None

        def wrapped(*args):
            calls.append(args[0].dtype)
            return kernel(*args)

        return wrapped

    monkeypatch.setattr(rnn, "_compiled_lstm", spy)
    case = CASES["bidirectional"]
    feeds, names = _inputs(np.random.default_rng(0), case)
    _call(feeds, names, dict(case, activations=["Sigmoid", "Tanh", "Relu"] * 2))
    _call(*_inputs(np.random.default_rng(0), case, np.float64), case)
    assert calls == []
    session = onnxplug.InferenceSession(_model(case, names).SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, feeds)
    if real() is not None:
        assert len(calls) == 2  # one call per direction
    for g, w in zip(got, ReferenceEvaluator(_model(case, names)).run(None, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.numba
@pytest.mark.parametrize("clip", [None, 0.7])
def test_nan_propagates_as_in_the_numpy_loop(monkeypatch, clip):
    case = dict(CASES["forward"], **({} if clip is None else {"clip": clip}))
    feeds, names = _inputs(np.random.default_rng(9), case)
    feeds["X"][2, 1, 0] = np.nan
    compiled = _call(feeds, names, case)
    monkeypatch.setattr(rnn, "_compiled_lstm", lambda: None)
    with np.errstate(invalid="ignore"):
        numpy_loop = _call(feeds, names, case)
    for got, loop in zip(compiled, numpy_loop):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(loop))
        np.testing.assert_allclose(got, loop, rtol=1e-5, atol=1e-6)


@pytest.mark.numba
@pytest.mark.parametrize("name", ["bidirectional", "sequence_lens", "peepholes"])
def test_both_directions_at_once_on_the_team_match_the_numpy_loop(name, monkeypatch):
    """Inside a run on numba's team a bidirectional layer runs both directions in one parallel
    call, and its input projection on the convolution tiles; the same results as the numpy loop."""
    from onnxplug_cpu.kernels import _f32_conv, _f32_products, _team

    if rnn._compiled_lstm() is None or not _team.parallel_ready():
        pytest.skip("needs numba with a thread-safe threading layer (omp or tbb)")
    case = CASES[name]
    feeds, names = _inputs(np.random.default_rng(len(name) + 1), case)
    monkeypatch.setattr(rnn, "_compiled_lstm", lambda: None)
    numpy_loop = _call(feeds, names, case)
    monkeypatch.undo()
    products, both = [], []
    real_product, real_both = _f32_products.matrix_product, rnn._compiled_both
    monkeypatch.setattr(rnn, "team_joined", lambda: True)
    monkeypatch.setattr(rnn, "thread_budget", lambda: 2)
    monkeypatch.setattr(_f32_products, "matrix_product", lambda *a: products.append(1) or real_product(*a))
    monkeypatch.setattr(rnn, "_compiled_both", lambda: both.append(1) or real_both())
    on_team = _call(feeds, names, case)
    assert both == [1] and products == ([1, 1] if _f32_conv.available() else [])
    for got, loop in zip(on_team, numpy_loop):
        np.testing.assert_allclose(got, loop, rtol=1e-5, atol=1e-6)


@pytest.mark.numba
def test_a_constant_recurrence_is_transposed_once_at_creation(monkeypatch):
    """A session whose ``R`` is an initializer makes ``Rᵀ`` when it is created, not on every run;
    the results are those of a session fed the same ``R``."""
    case = CASES["peepholes"]
    feeds, names = _inputs(np.random.default_rng(11), case)
    made = []
    real = rnn.transposed_recurrence
    monkeypatch.setattr(rnn, "transposed_recurrence", lambda r: made.append(r is not None) or real(r))
    fed = onnxplug.InferenceSession(_model(case, names).SerializeToString(), providers=["CPUExecutionProvider"])
    model = _model(case, names)
    model.graph.initializer.append(numpy_helper.from_array(feeds["R"], "R"))
    model.graph.input.remove(next(i for i in model.graph.input if i.name == "R"))
    constant = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert made == [False, True]  # made once, for the session whose R is a constant
    runs = [constant.run(None, {k: v for k, v in feeds.items() if k != "R"}) for _ in range(3)]
    assert made == [False, True]
    want = fed.run(None, feeds)
    assert len(made) == 3 and made[2]  # the session fed R transposes it on its run
    for outputs in runs:
        for got, expected in zip(outputs, want):
            np.testing.assert_array_equal(got, expected)
