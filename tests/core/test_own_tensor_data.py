"""The loader moves embedded weights out of the parsed protobuf (``graph/_own_data.py``), so a
session holds them once: every tensor of the loaded IR, in every graph, is array-backed and
equal to what onnx reads from the file.  And once built, a session lets the loaded model go, so
weights the optimizer replaced are not held beside their replacements."""

from __future__ import annotations

import gc
import tracemalloc

import ml_dtypes
import numpy as np
import onnx
import onnx.reference
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug
from onnxplug.graph import load_model
from onnxplug.runtime import _source


def _model() -> bytes:
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((64, 32)).astype(np.float32)
    half = rng.standard_normal(32).astype(np.float16)
    bf16 = helper.make_tensor(
        "bf", TensorProto.BFLOAT16, [4], np.array([1, -2, 3.5, 0.25], ml_dtypes.bfloat16).view(np.uint16).tolist()
    )
    branch = helper.make_graph(
        [helper.make_node("Add", ["y", "inner"], ["z"])],
        "then",
        [],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 32])],
        [numpy_helper.from_array(np.full(32, 0.5, np.float32), "inner")],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["y"], ["z2"])],
        "else",
        [],
        [helper.make_tensor_value_info("z2", TensorProto.FLOAT, [2, 32])],
    )
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(half, "c_value")),
        helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["m", "cf"], ["y"]),
        helper.make_node("ReduceSum", ["y"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["flag"]),
        helper.make_node("If", ["flag"], ["out"], then_branch=branch, else_branch=other),
        helper.make_node("Cast", ["bf"], ["bf32"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 32]),
            helper.make_tensor_value_info("bf32", TensorProto.FLOAT, [4]),
        ],
        [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(np.float32(-1e9), "zero"), bf16],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _all_tensors(model: ir.Model):
    for graph in [model.graph, *model.graph.subgraphs()]:
        for value in graph.initializers.values():
            yield value.name, value.const_value
        for node in graph:
            for attribute in node.attributes.values():
                if attribute.type is ir.AttributeType.TENSOR:
                    yield f"{node.name}.{attribute.name}", attribute.value


def test_every_tensor_is_array_backed_and_unchanged():
    data = _model()
    loaded = load_model(data)
    reference = ir.serde.deserialize_model(onnx.load_from_string(data))
    expected = {name: tensor.numpy() for name, tensor in _all_tensors(reference)}
    seen = {}
    for name, tensor in _all_tensors(loaded.model):
        assert not isinstance(tensor, ir.serde.TensorProtoTensor), f"{name} still reads from the protobuf"
        seen[name] = tensor.numpy()
    assert seen.keys() == expected.keys()
    for name, array in expected.items():
        assert seen[name].dtype == array.dtype, name
        np.testing.assert_array_equal(seen[name], array, err_msg=name)


def test_a_session_on_the_model_computes_as_before():
    data = _model()
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    out, bf = onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    want_out, want_bf = onnx.reference.ReferenceEvaluator(data).run(None, {"x": x})
    np.testing.assert_allclose(out, want_out, rtol=1e-5)
    np.testing.assert_array_equal(bf, want_bf)


def _conv_batchnorm_model(channels: int) -> bytes:
    """A 3×3 convolution whose weights (``channels``² × 9 floats) the optimizer folds the
    following BatchNormalization into: the folded weights replace the loaded ones."""
    rng = np.random.default_rng(2)
    weights = rng.standard_normal((channels, channels, 3, 3)).astype(np.float32)
    scale, bias, mean = (rng.standard_normal(channels).astype(np.float32) for _ in range(3))
    variance = rng.uniform(0.5, 2.0, channels).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 4, 4])],
        [
            numpy_helper.from_array(weights, "w"),
            numpy_helper.from_array(scale, "scale"),
            numpy_helper.from_array(bias, "bias"),
            numpy_helper.from_array(mean, "mean"),
            numpy_helper.from_array(variance, "var"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_built_session_holds_the_folded_weights_once(tmp_path):
    channels = 256  # 2.25 MiB of weights
    weight_bytes = channels * channels * 9 * 4
    path = tmp_path / "conv_bn.onnx"
    path.write_bytes(_conv_batchnorm_model(channels))
    x = np.random.default_rng(3).standard_normal((1, channels, 4, 4)).astype(np.float32)
    want = onnx.reference.ReferenceEvaluator(str(path)).run(None, {"x": x})[0]
    onnxplug.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})  # imports
    gc.collect()
    tracemalloc.start()
    try:
        session = onnxplug.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert session.get_optimization_report().nodes_after == 1  # the normalization was folded
    # the folded weights, not the loaded ones beside them (that was twice the weights)
    assert held < 1.5 * weight_bytes, held / weight_bytes
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-3, atol=1e-3)
    # set_providers reads the model again from its path, as onnxruntime does
    session.set_providers(["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-3, atol=1e-3)


def test_a_dropped_session_frees_its_weights_without_the_garbage_collector():
    channels = 256
    weight_bytes = channels * channels * 9 * 4
    data = _conv_batchnorm_model(channels)
    x = np.zeros((1, channels, 4, 4), np.float32)
    onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})  # imports
    gc.collect()
    gc.disable()  # graphs are reference cycles: only the session's own release frees them now
    tracemalloc.start()
    try:
        session = onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"])
        session.run(None, {"x": x})
        created = tracemalloc.get_traced_memory()[0]
        del session
        dropped = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        gc.enable()
    assert dropped < 0.1 * weight_bytes < weight_bytes < created, (created, dropped)


def test_the_optimization_report_outlives_its_session():
    data = _conv_batchnorm_model(8)
    report = onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"]).get_optimization_report()
    gc.collect()
    assert [node.op_type for node in report.model.graph] == ["Conv"]
    x = np.random.default_rng(4).standard_normal((1, 8, 4, 4)).astype(np.float32)
    folded = ir.serde.serialize_model(report.model)
    got = onnx.reference.ReferenceEvaluator(folded).run(None, {"x": x})[0]
    want = onnx.reference.ReferenceEvaluator(data).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("small", [True, False], ids=["small-bytes-read-again", "large-bytes-loaded-model-kept"])
def test_a_session_from_bytes_builds_again_for_set_providers(small, monkeypatch):
    """Nothing else holds the bytes: set_providers builds again, from the bytes it kept where
    they are small (``runtime._source.KEEP_BYTES_UNDER``), else from the loaded model it kept
    (whose weights the optimizer did not replace are shared with the optimized model)."""
    if not small:
        monkeypatch.setattr(_source, "KEEP_BYTES_UNDER", 0)
    x = np.random.default_rng(5).standard_normal((1, 16, 4, 4)).astype(np.float32)
    data = _conv_batchnorm_model(16)
    want = onnx.reference.ReferenceEvaluator(data).run(None, {"x": x})[0]
    loads = []
    real_load = _source.load_model
    monkeypatch.setattr(_source, "load_model", lambda *a, **k: loads.append(1) or real_load(*a, **k))
    session = onnxplug.InferenceSession(bytes(bytearray(data)))  # a copy only the session sees
    del data
    for _ in range(2):
        session.set_providers(["CPUExecutionProvider"])
        np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-4)
    assert len(loads) == (3 if small else 1)


def test_a_model_from_a_path_or_small_bytes_is_optimized_without_a_copy(tmp_path, monkeypatch):
    """A path, or bytes under ``KEEP_BYTES_UNDER``, is read again for each build, so the
    optimizer takes the loaded model for its own instead of copying it (``runtime._source``);
    the partition stage shares the optimized model (``partition._model``).  A model from larger
    bytes, whose loaded form is kept for ``set_providers``, is copied once."""
    path = tmp_path / "conv_bn.onnx"
    data = _conv_batchnorm_model(16)
    path.write_bytes(data)
    x = np.random.default_rng(6).standard_normal((1, 16, 4, 4)).astype(np.float32)
    want = onnx.reference.ReferenceEvaluator(data).run(None, {"x": x})[0]
    copies = []
    real_clone = ir.Model.clone
    monkeypatch.setattr(ir.Model, "clone", lambda model: copies.append(1) or real_clone(model))
    for source in (str(path), data):
        session = onnxplug.InferenceSession(source, providers=["CPUExecutionProvider"])
        assert copies == []
        for _ in range(2):  # each build reads the model again and takes that model
            np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-4)
            session.set_providers(["CPUExecutionProvider"])
        assert copies == []
    monkeypatch.setattr(_source, "KEEP_BYTES_UNDER", len(data))
    onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert copies == [1]
