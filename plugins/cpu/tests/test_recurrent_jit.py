"""The compiled LSTM and GRU recurrences (``kernels._recurrent_jit``) against the numpy loops they
replace and onnx's reference evaluator: directions, peepholes, clip, input_forget,
linear_before_reset, sequence_lens, initial states, layout and batches wider than one pass of the
product; other activations and float64 keep the numpy loops.  The product itself is checked in
``test_recurrent_product.py``, the inputs' checks in ``test_recurrent_inputs.py``."""

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
    monkeypatch.setattr(rnn, "_compiled", lambda cell: None)
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


class _Spy:
    """A cell's compiled loops, recording which of them each call took."""

    def __init__(self, loops):
        self.loops, self.calls = loops, []

    def direction(self, *args):
        self.calls.append("direction")
        return self.loops.direction(*args)

    def both_directions(self, *args):
        self.calls.append("both")
        return self.loops.both_directions(*args)


def _spy_on_loops(monkeypatch):
    """``{cell: _Spy}``, filled as the kernels ask for their compiled loops."""
    spies = {}
    real = rnn._compiled

    def compiled(cell):
        loops = real(cell)
        return None if loops is None else spies.setdefault(cell, _Spy(loops))

    monkeypatch.setattr(rnn, "_compiled", compiled)
    return spies


def test_which_lstms_are_compiled(monkeypatch):
    """Only float32 with the default activations; a session runs through the same kernel."""
    compiled = rnn._compiled("lstm") is not None  # (numba present)
    spies = _spy_on_loops(monkeypatch)
    case = CASES["bidirectional"]
    feeds, names = _inputs(np.random.default_rng(0), case)
    _call(feeds, names, dict(case, activations=["Sigmoid", "Tanh", "Relu"] * 2))
    _call(*_inputs(np.random.default_rng(0), case, np.float64), case)
    assert "lstm" not in spies or spies["lstm"].calls == []
    session = onnxplug.InferenceSession(_model(case, names).SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, feeds)
    if compiled:
        assert spies["lstm"].calls in (["direction", "direction"], ["both"])  # per direction, or both at once
    for g, w in zip(got, ReferenceEvaluator(_model(case, names)).run(None, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.numba
@pytest.mark.parametrize("clip", [None, 0.7])
def test_nan_propagates_as_in_the_numpy_loop(monkeypatch, clip):
    case = dict(CASES["forward"], **({} if clip is None else {"clip": clip}))
    feeds, names = _inputs(np.random.default_rng(9), case)
    feeds["X"][2, 1, 0] = np.nan
    compiled = _call(feeds, names, case)
    monkeypatch.setattr(rnn, "_compiled", lambda cell: None)
    with np.errstate(invalid="ignore"):
        numpy_loop = _call(feeds, names, case)
    for got, loop in zip(compiled, numpy_loop):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(loop))
        np.testing.assert_allclose(got, loop, rtol=1e-5, atol=1e-6)


def _needs_team():
    from onnxplug_cpu.kernels import _team

    if rnn._compiled("lstm") is None or not _team.parallel_ready():
        pytest.skip("needs numba with a thread-safe threading layer (omp or tbb)")


@pytest.mark.numba
@pytest.mark.parametrize("name", ["bidirectional", "sequence_lens", "peepholes"])
def test_both_directions_at_once_on_the_team_match_the_numpy_loop(name, monkeypatch):
    """On numba's team a bidirectional layer runs both directions in one parallel call, and its
    input projection on the convolution tiles; the same results as the numpy loop."""
    from onnxplug_cpu.kernels import _f32_conv, _f32_products

    _needs_team()
    case = CASES[name]
    feeds, names = _inputs(np.random.default_rng(len(name) + 1), case)
    monkeypatch.setattr(rnn, "_compiled", lambda cell: None)
    numpy_loop = _call(feeds, names, case)
    monkeypatch.undo()
    products = []
    real_product = _f32_products.matrix_product
    spies = _spy_on_loops(monkeypatch)
    monkeypatch.setattr(rnn, "_on_team", lambda: True)
    monkeypatch.setattr(rnn, "team_joined", lambda: True)
    monkeypatch.setattr(_f32_products, "matrix_product", lambda *a: products.append(1) or real_product(*a))
    on_team = _call(feeds, names, case)
    assert spies["lstm"].calls == ["both"] and products == ([1, 1] if _f32_conv.available() else [])
    for got, loop in zip(on_team, numpy_loop):
        np.testing.assert_allclose(got, loop, rtol=1e-5, atol=1e-6)


@pytest.mark.numba
@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_a_model_that_begins_with_its_recurrent_layer_runs_it_on_the_team(op, monkeypatch):
    """With nothing before it to start the team, a bidirectional layer in a two-thread session
    still runs both directions as one call on the team (it had split them over Python threads,
    beside the team's and OpenBLAS's spinning workers), with onnx's reference evaluator's results."""
    _needs_team()
    gates = 4 if op == "LSTM" else 3
    rng = np.random.default_rng(21)
    weights = {
        "W": rng.standard_normal((2, gates * HIDDEN, INPUT)).astype(np.float32),
        "R": rng.standard_normal((2, gates * HIDDEN, HIDDEN)).astype(np.float32) * 0.5,
    }
    node = helper.make_node(op, ["X", "W", "R"], ["Y"], direction="bidirectional", hidden_size=HIDDEN)
    model = make_model([node], [("X", TensorProto.FLOAT, None)], [("Y", TensorProto.FLOAT, None)], opset=14)
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in weights.items())
    feeds = {"X": rng.standard_normal((STEPS, BATCH, INPUT)).astype(np.float32)}
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = 2
    spies = _spy_on_loops(monkeypatch)
    session = onnxplug.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    got = [session.run(None, feeds)[0] for _ in range(2)]
    assert spies[op.lower()].calls == ["both", "both"]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    for y in got:
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


@pytest.mark.numba
def test_constant_weights_are_laid_out_once_at_creation(monkeypatch):
    """A session whose ``W`` and ``R`` are initializers lays out ``Wᵀ`` and the packed ``Rᵀ`` when
    it is created, not on every run; the results are those of a session fed the same arrays."""
    case = CASES["peepholes"]
    feeds, names = _inputs(np.random.default_rng(11), case)
    made = []
    real_r, real_w = rnn.packed_recurrence, rnn.transposed_inputs
    monkeypatch.setattr(rnn, "packed_recurrence", lambda r, g: made.append(("R", r is not None)) or real_r(r, g))
    monkeypatch.setattr(rnn, "transposed_inputs", lambda w: made.append(("W", w is not None)) or real_w(w))
    fed = onnxplug.InferenceSession(_model(case, names).SerializeToString(), providers=["CPUExecutionProvider"])
    assert sorted(made) == [("R", False), ("W", False)]  # (fed: nothing to lay out at creation)
    model = _model(case, names)
    for name in ("W", "R"):
        model.graph.initializer.append(numpy_helper.from_array(feeds[name], name))
        model.graph.input.remove(next(i for i in model.graph.input if i.name == name))
    made.clear()
    constant = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sorted(made) == [("R", True), ("W", True)]  # laid out once, for the constants
    runs = [constant.run(None, {k: v for k, v in feeds.items() if k not in ("W", "R")}) for _ in range(3)]
    assert len(made) == 2
    want = fed.run(None, feeds)
    assert made[2:] == [("R", True)]  # the session fed R packs it on its run
    for outputs in runs:
        for got, expected in zip(outputs, want):
            np.testing.assert_array_equal(got, expected)


# -- GRU ----------------------------------------------------------------------------------------

GRU_CASES = {
    "forward": dict(direction="forward"),
    "reverse_linear": dict(direction="reverse", linear_before_reset=1),
    "bidirectional": dict(direction="bidirectional"),
    "bidirectional_linear": dict(direction="bidirectional", linear_before_reset=1, initial=True),
    "clip": dict(direction="forward", clip=0.7, linear_before_reset=1),
    "sequence_lens": dict(direction="bidirectional", lens=[7, 3, 0], initial=True),
    "layout": dict(direction="bidirectional", layout=1, initial=True, linear_before_reset=1),
}
#: (steps, batch, input, hidden): one pass of the product and a partial block; a batch over two
#: passes (4 + 2 entries) with 37 hidden units (74 and 37 columns); three passes with a hidden size
#: whose gate groups span whole and partial blocks (140 and 70 columns).
SHAPES = [(STEPS, BATCH, INPUT, HIDDEN), (5, 6, 4, 37), (4, 9, 3, 70)]


def _gru_inputs(rng, case, shape):
    steps, batch, inputs, hidden = shape
    dirs = 2 if case["direction"] == "bidirectional" else 1
    layout = case.get("layout", 0)
    feeds = {
        "X": rng.standard_normal((batch, steps, inputs) if layout else (steps, batch, inputs)),
        "W": rng.standard_normal((dirs, 3 * hidden, inputs)) * 0.5,
        "R": rng.standard_normal((dirs, 3 * hidden, hidden)) * 0.3,
        "B": rng.standard_normal((dirs, 6 * hidden)) * 0.3,
    }
    names = ["X", "W", "R", "B", "", ""]
    if "lens" in case:
        feeds["L"] = np.minimum((case["lens"] * batch)[:batch], steps).astype(np.int32)
        names[4] = "L"
    if case.get("initial"):
        feeds["H0"] = rng.standard_normal((batch, dirs, hidden) if layout else (dirs, batch, hidden))
        names[5] = "H0"
    feeds = {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in feeds.items()}
    while names and not names[-1]:
        names.pop()
    return feeds, names


def _gru_attributes(case, hidden):
    attrs = dict(direction=case["direction"], hidden_size=hidden)
    for key in ("clip", "linear_before_reset", "layout"):
        if key in case:
            attrs[key] = case[key]
    return attrs


def _gru_call(feeds, names, case, hidden):
    args = [feeds[n] if n else None for n in names]
    attrs = _gru_attributes(case, hidden)
    attrs.setdefault("clip", None)
    return rnn.gru_values(*args, **attrs)


@pytest.mark.numba
@pytest.mark.parametrize("shape", SHAPES, ids=["small", "two_passes", "three_passes"])
@pytest.mark.parametrize("name", list(GRU_CASES))
def test_compiled_gru_matches_numpy_and_reference(name, shape, monkeypatch):
    case = GRU_CASES[name]
    hidden = shape[3]
    feeds, names = _gru_inputs(np.random.default_rng(len(name) + shape[1]), case, shape)
    spies = _spy_on_loops(monkeypatch)
    compiled = _gru_call(feeds, names, case, hidden)
    assert spies["gru"].calls  # (the compiled loops ran)
    monkeypatch.setattr(rnn, "_compiled", lambda cell: None)
    numpy_loop = _gru_call(feeds, names, case, hidden)
    node = helper.make_node("GRU", names, ["Y", "Y_h"], **_gru_attributes(case, hidden))
    inputs = [(n, TensorProto.INT32 if n == "L" else TensorProto.FLOAT, None) for n in names if n]
    model = make_model([node], inputs, [("Y", TensorProto.FLOAT, None), ("Y_h", TensorProto.FLOAT, None)], opset=14)
    want = ReferenceEvaluator(model).run(None, feeds)
    ignored = {"clip", "lens"} & set(case)  # (onnx's reference GRU implements neither)
    for got, loop, ref in zip(compiled, numpy_loop, want):
        assert got.dtype == np.float32 and got.shape == ref.shape == loop.shape
        np.testing.assert_allclose(got, loop, rtol=1e-5, atol=2e-6)
        if not ignored:
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    if ignored:  # and the attribute changed the result
        assert not np.allclose(compiled[0], want[0], rtol=1e-3, atol=1e-3)
    if "lens" in case:  # a finished entry emits zeros
        finished = [b for b, n in enumerate(feeds["L"]) if n == 0]
        np.testing.assert_array_equal(compiled[0][:, :, finished], 0)


@pytest.mark.numba
@pytest.mark.parametrize("shape", SHAPES[1:], ids=["two_passes", "three_passes"])
@pytest.mark.parametrize("name", ["bidirectional", "sequence_lens"])
def test_compiled_lstm_over_several_passes_matches_numpy(name, shape, monkeypatch):
    """Batches wider than one pass of the product, hidden sizes with partial blocks."""
    case = dict(CASES[name], **({"lens": [5, 2, 0, 4, 1, 5, 3, 0, 2][: shape[1]]} if "lens" in CASES[name] else {}))
    steps, batch, inputs, hidden = shape
    rng = np.random.default_rng(batch)
    feeds = {
        "X": rng.standard_normal((steps, batch, inputs)).astype(np.float32),
        "W": (rng.standard_normal((2, 4 * hidden, inputs)) * 0.5).astype(np.float32),
        "R": (rng.standard_normal((2, 4 * hidden, hidden)) * 0.3).astype(np.float32),
    }
    lens = np.minimum(case["lens"], steps).astype(np.int32) if "lens" in case else None
    attrs = dict(direction="bidirectional", hidden_size=hidden, input_forget=0, clip=None, activations=None)
    args = (feeds["X"], feeds["W"], feeds["R"], None, lens)
    compiled = rnn.lstm_values(*args, **attrs)
    monkeypatch.setattr(rnn, "_compiled", lambda cell: None)
    numpy_loop = rnn.lstm_values(*args, **attrs)
    for got, loop in zip(compiled, numpy_loop):
        np.testing.assert_allclose(got, loop, rtol=1e-5, atol=2e-6)


def test_which_grus_are_compiled(monkeypatch):
    """Only float32 with the default activations (Sigmoid, Tanh)."""
    compiled = rnn._compiled("gru") is not None  # (numba present)
    spies = _spy_on_loops(monkeypatch)
    case = GRU_CASES["bidirectional"]
    feeds, names = _gru_inputs(np.random.default_rng(3), case, SHAPES[0])
    args = [feeds[n] if n else None for n in names]
    attrs = _gru_attributes(case, HIDDEN)
    rnn.gru_values(*args, activations=["Sigmoid", "Relu"] * 2, **attrs)
    rnn.gru_values(*[a.astype(np.float64) if a is not None and a.dtype.kind == "f" else a for a in args], **attrs)
    assert "gru" not in spies
    rnn.gru_values(*args, activations=["sigmoid", "TANH"] * 2, **attrs)
    assert ("gru" in spies) == compiled


@pytest.mark.numba
def test_a_new_process_loads_the_recurrent_loops_from_numba_cache(cache_misses_in_new_processes):
    code = (
        "import numpy as np\n"
        "from onnxplug_cpu.kernels import rnn\n"
        "from onnxplug_cpu.kernels._recurrent_jit import loops\n"
        "x = np.ones((3, 2, 4), np.float32)\n"
        "rnn.lstm_values(x, np.ones((1, 20, 4), np.float32), np.ones((1, 20, 5), np.float32),"
        " direction='forward', input_forget=0)\n"
        "rnn.gru_values(x, np.ones((1, 15, 4), np.float32), np.ones((1, 15, 5), np.float32), direction='forward')\n"
        "print(sum(sum(loops(c).direction.stats.cache_misses.values()) for c in ('lstm', 'gru')))\n"
    )
    first, second = cache_misses_in_new_processes(code)
    assert first > 0 and second == 0
