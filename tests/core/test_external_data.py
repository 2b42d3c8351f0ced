"""External data is read only from inside the model's folder, and only when it fits."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model


def _model_with_external(tmp_path, location="weights.bin", offset=0, length=None, data=None):
    weights = np.arange(4, dtype=np.float32)
    model = make_model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [("x", TensorProto.FLOAT, [4])],
        [("y", TensorProto.FLOAT, [4])],
        {"w": weights},
    )
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset)}
    if length is not None:
        entries["length"] = str(length)
    for key, value in entries.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    if data is not False:
        (folder / "weights.bin").write_bytes(weights.tobytes() if data is None else data)
    path = folder / "model.onnx"
    onnx.save(model, path)
    return path


def test_external_data_loads_from_path(tmp_path):
    path = _model_with_external(tmp_path)
    (y,) = onnxplug.InferenceSession(path).run(None, {"x": np.ones(4, np.float32)})
    np.testing.assert_array_equal(y, [1, 2, 3, 4])


def test_parent_directory_refused(tmp_path):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 16)
    path = _model_with_external(tmp_path, location="../secret.bin")
    with pytest.raises(onnxplug.InvalidGraph, match=r"contains '\.\.'"):
        onnxplug.InferenceSession(path)


def test_absolute_path_refused(tmp_path):
    target = tmp_path / "abs.bin"
    target.write_bytes(b"\0" * 16)
    path = _model_with_external(tmp_path, location=str(target))
    with pytest.raises(onnxplug.InvalidGraph, match="absolute"):
        onnxplug.InferenceSession(path)


def test_symlink_escape_refused(tmp_path):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(np.arange(4, dtype=np.float32).tobytes())
    path = _model_with_external(tmp_path, location="link.bin", data=False)
    os.symlink(outside, path.parent / "link.bin")
    with pytest.raises(onnxplug.InvalidGraph, match="outside the model's folder"):
        onnxplug.InferenceSession(path)


def test_offset_past_end_refused(tmp_path):
    path = _model_with_external(tmp_path, offset=8, length=16)
    with pytest.raises(onnxplug.InvalidGraph, match="runs past the end"):
        onnxplug.InferenceSession(path)


def test_length_mismatch_refused(tmp_path):
    path = _model_with_external(tmp_path, length=12)
    with pytest.raises(onnxplug.InvalidGraph, match="does not match its shape"):
        onnxplug.InferenceSession(path)


def test_missing_external_file(tmp_path):
    path = _model_with_external(tmp_path, data=False)
    with pytest.raises(onnxplug.NoSuchFile, match="weights.bin"):
        onnxplug.InferenceSession(path)


def test_bytes_with_external_data_refused_without_folder(tmp_path, monkeypatch):
    path = _model_with_external(tmp_path)
    monkeypatch.chdir(path.parent)  # even where the file would resolve, the CWD is never used
    with pytest.raises(onnxplug.InvalidGraph, match="loaded from bytes"):
        onnxplug.InferenceSession(path.read_bytes())


def test_bytes_with_declared_folder(tmp_path):
    path = _model_with_external(tmp_path)
    options = onnxplug.SessionOptions()
    options.add_session_config_entry("session.model_external_data_dir", str(path.parent))
    (y,) = onnxplug.InferenceSession(path.read_bytes(), options).run(None, {"x": np.zeros(4, np.float32)})
    np.testing.assert_array_equal(y, [0, 1, 2, 3])
