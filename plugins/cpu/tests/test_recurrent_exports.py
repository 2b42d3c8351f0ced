"""LSTM and GRU models as torch.onnx writes them (``tests/data/recurrent/``, made by
``scripts/make_recurrent_models.py``) against torch's own outputs, on every path the CPU provider
takes: the compiled recurrence on numba's team (a two-thread session), on one thread, split over
Python threads (``ONNXPLUG_CPU_TEAM=0``), and the numpy loops (no compiled loops, as without
numba)."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import onnxplug
from onnxplug_cpu.kernels import rnn

DATA = pathlib.Path(__file__).resolve().parents[3] / "tests" / "data" / "recurrent"
MODELS = sorted(path.name for path in DATA.glob("*.onnx"))
#: Path name -> (environment, intra_op_num_threads, compiled loops)
PATHS = {
    "team": ({}, 2, True),
    "one_thread": ({}, 1, True),
    "python_threads": ({"ONNXPLUG_CPU_TEAM": "0"}, 2, True),
    "numpy_loops": ({}, 2, False),
}


def test_the_exports_are_here():
    assert len(MODELS) >= 8, f"expected the exports of scripts/make_recurrent_models.py in {DATA}"


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("model", MODELS)
def test_an_export_matches_torch(model, path, monkeypatch):
    environment, threads, compiled = PATHS[path]
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    if not compiled:
        monkeypatch.setattr(rnn, "_compiled", lambda cell: None)
    stored = np.load(DATA / f"{model.split('.')[0]}.npz")
    feeds = {key: stored[key] for key in stored.files if not key.startswith("out:")}
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxplug.InferenceSession(str(DATA / model), options, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    for _ in range(2):  # the first run and a later one (bound, on the team where it runs)
        got = session.run(None, feeds)
        for name, value in zip(names, got, strict=True):
            want = stored[f"out:{name}"]
            assert value.shape == want.shape and value.dtype == np.float32
            np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-5, err_msg=f"{model} {name} ({path})")
