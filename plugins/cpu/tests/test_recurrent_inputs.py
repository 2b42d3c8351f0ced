"""What the recurrent layers (``kernels.rnn``) do with malformed or empty inputs: a clear error
naming the input and the shape it needed, or empty outputs, on the compiled loops and the numpy
ones alike."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model
from onnxplug_cpu.kernels import rnn

STEPS, BATCH, INPUT, HIDDEN = 7, 3, 5, 6


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize(
    "bad,message",
    [
        ("initial_h", r"initial_h has shape \[1, 1, 6\], expected \[1, 3, 6\]"),
        ("W", r"expected W \[1, \d+, 5\]"),
        ("B", r"B has shape \[1, 7\], expected"),
    ],
)
def test_malformed_inputs_are_refused_with_the_shape_expected(op, bad, message):
    """The compiled loops read every array by its expected shape: a wrong one is an error naming
    the input and the shape it needed, never a read past an array's end."""
    gates = 4 if op == "LSTM" else 3
    rng = np.random.default_rng(5)
    feeds = {
        "X": rng.standard_normal((STEPS, BATCH, INPUT)),
        "W": rng.standard_normal((1, gates * HIDDEN, INPUT - 1 if bad == "W" else INPUT)),
        "R": rng.standard_normal((1, gates * HIDDEN, HIDDEN)),
        "B": rng.standard_normal((1, 7 if bad == "B" else 2 * gates * HIDDEN)),
        "H0": rng.standard_normal((1, 1 if bad == "initial_h" else BATCH, HIDDEN)),
    }
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    names = ["X", "W", "R", "B", "", "H0"]
    node = helper.make_node(op, names, ["Y"], direction="forward", hidden_size=HIDDEN)
    model = make_model([node], [(n, TensorProto.FLOAT, None) for n in names if n], [("Y", TensorProto.FLOAT, None)])
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(onnxplug.errors.InvalidArgument, match=message):
        session.run(None, feeds)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy_loops"])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("shape", [(0, 2, 3), (4, 0, 3)], ids=["no_steps", "no_batch"])
def test_an_empty_sequence_or_batch_gives_empty_outputs(op, shape, compiled, monkeypatch):
    """No steps: an empty Y and the final state the initial one (onnxruntime's shapes); no batch
    entries: empty outputs (the reference evaluator's).  The projection's reshape had no size
    to infer there and raised."""
    if not compiled:
        monkeypatch.setattr(rnn, "_compiled", lambda cell: None)
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    rng = np.random.default_rng(3)
    node = helper.make_node(op, ["X", "W", "R", "", "", "H0"], ["Y", "Y_h"], direction="bidirectional", hidden_size=5)
    names = ["X", "W", "R", "H0"]
    model = make_model(
        [node],
        [(n, TensorProto.FLOAT, None) for n in names],
        [("Y", TensorProto.FLOAT, None), ("Y_h", TensorProto.FLOAT, None)],
        opset=14,
    )
    feeds = {
        "X": np.ones(shape, np.float32),
        "W": rng.standard_normal((2, gates * 5, 3)).astype(np.float32),
        "R": rng.standard_normal((2, gates * 5, 5)).astype(np.float32),
        "H0": rng.standard_normal((2, shape[1], 5)).astype(np.float32),
    }
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y, final = session.run(None, feeds)
    assert y.shape == (shape[0], 2, shape[1], 5) and final.shape == (2, shape[1], 5)
    np.testing.assert_array_equal(final, feeds["H0"])  # nothing ran: the initial state
