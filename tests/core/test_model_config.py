"""Session options from the model's ``ort_config`` metadata, read when
``ORT_LOAD_CONFIG_FROM_MODEL=1`` (or ``read_config_from_model=1``) asks, as onnxruntime does."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model

F = TensorProto.FLOAT


def _model(config) -> bytes:
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [3])], [("y", F, [3])])
    text = config if isinstance(config, str) else json.dumps(config)
    helper.set_model_props(model, {"ort_config": text})
    return model.SerializeToString()


CONFIG = {
    "session_options": {
        "intra_op_num_threads": 2,
        "inter_op_num_threads": 3,
        "execution_mode": 1,
        "graph_optimization_level": 1,
        "enable_profiling": 0,
        "unsupported_key": "ignored",
    }
}


def _session(data, **kwargs):
    return onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"], **kwargs)


@pytest.fixture
def load_config(monkeypatch):
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1")


def test_options_from_the_model_replace_the_callers(load_config):
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = 7
    session = onnxplug.InferenceSession(_model(CONFIG), options, providers=["CPUExecutionProvider"])
    effective = session.get_session_options()
    assert effective.intra_op_num_threads == 2
    assert effective.inter_op_num_threads == 3
    assert effective.execution_mode == onnxplug.ExecutionMode.ORT_PARALLEL
    assert effective.graph_optimization_level == onnxplug.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert options.intra_op_num_threads == 7  # the caller's object is left alone
    (y,) = session.run(None, {"x": np.array([-1, 0, 2], np.float32)})
    np.testing.assert_array_equal(y, [0, 0, 2])


def test_ignored_without_the_request(monkeypatch):
    monkeypatch.delenv("ORT_LOAD_CONFIG_FROM_MODEL", raising=False)
    assert _session(_model(CONFIG)).get_session_options().intra_op_num_threads == 0


def test_keyword_asks_for_it(monkeypatch):
    monkeypatch.delenv("ORT_LOAD_CONFIG_FROM_MODEL", raising=False)
    session = _session(_model(CONFIG), read_config_from_model=1)
    assert session.get_session_options().inter_op_num_threads == 3


def test_profiling_enabled_by_the_model(load_config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    session = _session(_model({"session_options": {"enable_profiling": 1}}))
    session.run(None, {"x": np.zeros(3, np.float32)})
    path = session.end_profiling()
    assert path, "profiling was not enabled by the model's config"
    assert (tmp_path / path).is_file()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("{not json", "cannot be parsed"),
        ({"session_options": {"intra_op_num_threads": "2"}}, "intra_op_num_threads option in the model file must be"),
        ({"session_options": {"inter_op_num_threads": -1}}, "Unsupported value for inter_op_num_threads: -1"),
        ({"session_options": {"execution_mode": 5}}, "Unsupported execution_mode value in ORT config: 5"),
        ({"session_options": {"graph_optimization_level": 7}}, "Unsupported graph_optimization_level value"),
        ({"session_options": {"enable_profiling": 2}}, "Unsupported value for enable_profiling option: 2"),
    ],
)
def test_bad_config_fails(load_config, config, message):
    with pytest.raises(onnxplug.Fail, match=message):
        _session(_model(config))


def test_bad_config_class_matches_onnxruntime(load_config):
    ort = pytest.importorskip("onnxruntime", reason="comparing error classes needs onnxruntime")
    data = _model({"session_options": {"execution_mode": 5}})
    with pytest.raises(RuntimeError, match="Unsupported execution_mode"):
        ort.InferenceSession(data, providers=["CPUExecutionProvider"], enable_fallback=0)
    with pytest.raises(RuntimeError, match="Unsupported execution_mode"):
        _session(data)
