"""Large model files are read with their weights detached (``graph/_detach.py``): the raw data
of big top-level initializers goes straight from the file into numpy arrays and the rest of the
model is parsed as usual.  The model must load exactly as onnx reads it, whatever else the file
holds, and a malformed payload must be refused as before."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx.reference
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug
from onnxplug.errors import Fail, InvalidProtobuf
from onnxplug.graph import _detach, _load, load_model


@pytest.fixture(autouse=True)
def _small_thresholds(monkeypatch):
    """Detach from a few hundred bytes on, so small test files take the detaching route."""
    monkeypatch.setattr(_load, "DETACH_FROM_BYTES", 1)
    monkeypatch.setattr(_detach, "MIN_BYTES", 256)


def _model(folder) -> tuple[onnx.ModelProto, str]:
    rng = np.random.default_rng(0)
    big = rng.standard_normal((32, 16)).astype(np.float32)
    ints = rng.integers(-5, 5, size=(16, 16)).astype(np.int64)
    half = rng.standard_normal((16, 16)).astype(np.float16)
    flags = rng.random((300,)) < 0.5
    bf = helper.make_tensor(
        "bf", TensorProto.BFLOAT16, [200], (np.arange(200) / 8).astype(ml_dtypes.bfloat16).view(np.uint16).tolist()
    )
    bf.raw_data = (np.arange(200) / 8).astype(ml_dtypes.bfloat16).tobytes()
    del bf.int32_data[:]
    ext_values = rng.standard_normal((16,)).astype(np.float32)
    (folder / "ext.bin").write_bytes(ext_values.tobytes())
    external = TensorProto(name="ext", data_type=TensorProto.FLOAT, dims=[16], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "ext.bin"), ("offset", "0"), ("length", "64")):
        external.external_data.add(key=key, value=value)
    branch = helper.make_graph(
        [helper.make_node("Add", ["y", "inner"], ["z"])],
        "then",
        [],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 16])],
        [numpy_helper.from_array(np.full((16,), 0.5, np.float32), "inner")],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["y"], ["z2"])], "else", [], [helper.make_tensor_value_info("z2", 1, [2, 16])]
    )
    nodes = [
        helper.make_node("MatMul", ["x", "big"], ["m"]),
        helper.make_node("Cast", ["ints"], ["intsf"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["m", "intsf"], ["m2"]),
        helper.make_node("Cast", ["half"], ["halff"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["m2", "halff"], ["m3"]),
        helper.make_node("Add", ["m3", "ext"], ["y"]),
        helper.make_node("ReduceSum", ["y"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "small"], ["flag"]),
        helper.make_node("If", ["flag"], ["out"], then_branch=branch, else_branch=other),
        helper.make_node("Cast", ["flags"], ["count_in"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["count_in"], ["count"], keepdims=0),
        helper.make_node("Cast", ["bf"], ["bf32"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32])],
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 16]),
            helper.make_tensor_value_info("count", TensorProto.INT64, []),
            helper.make_tensor_value_info("bf32", TensorProto.FLOAT, [200]),
        ],
        [
            numpy_helper.from_array(big, "big"),
            numpy_helper.from_array(ints, "ints"),
            numpy_helper.from_array(half, "half"),
            numpy_helper.from_array(flags, "flags"),
            numpy_helper.from_array(np.float32(-1e9), "small"),
            bf,
            external,
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = str(folder / "model.onnx")
    (folder / "model.onnx").write_bytes(model.SerializeToString())
    return model, path


def test_the_model_loads_as_onnx_reads_it(tmp_path):
    model, path = _model(tmp_path)
    result = _detach.read_detached(path)
    assert result is not None
    _, detached = result
    assert set(detached) == {"big", "ints", "half", "flags"}  # bfloat16, small, external: not detached
    loaded = load_model(path)
    reference = ir.load(path)
    for name, value in reference.graph.initializers.items():
        got = loaded.model.graph.initializers[name].const_value
        np.testing.assert_array_equal(got.numpy(), value.const_value.numpy(), err_msg=name)
        assert got.dtype == value.const_value.dtype, name
    assert not loaded.proto.graph.initializer[0].raw_data  # the described proto holds no weights


def test_a_session_computes_what_the_reference_does(tmp_path):
    _, path = _model(tmp_path)
    x = np.random.default_rng(1).standard_normal((2, 32)).astype(np.float32)
    got = onnxplug.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    want = onnx.reference.ReferenceEvaluator(path).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4)


def test_a_raw_payload_of_the_wrong_size_is_refused_naming_it(tmp_path):
    tensor = numpy_helper.from_array(np.zeros((10, 10), np.float32), "w")
    tensor.raw_data = tensor.raw_data[:-4]
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", 1, [10, 10])],
        [helper.make_tensor_value_info("y", 1, [10, 10])],
        [tensor],
    )
    path = tmp_path / "bad.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    with pytest.raises(Fail, match="initializer 'w' holds 396 bytes of raw data but its shape \\[10, 10\\] needs 400"):
        onnxplug.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_a_truncated_file_is_still_reported_as_unparseable(tmp_path):
    _, path = _model(tmp_path)
    data = open(path, "rb").read()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(data[: len(data) // 2])
    assert _detach.read_detached(str(truncated)) is None
    with pytest.raises(InvalidProtobuf, match="protobuf parsing failed"):
        onnxplug.InferenceSession(str(truncated), providers=["CPUExecutionProvider"])
