"""Compiled partitions that accept only the shapes they were built for
(``CompiledPartition.input_shapes``): the core compiles again for new shapes and keeps the
compilations it made, as a TensorRT-style engine per shape needs."""

from __future__ import annotations

import concurrent.futures

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.api import CompiledPartition, Partition
from onnxplug_virtual_device.memory import copies

VD = "VirtualDeviceExecutionProvider"
WEIGHT = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5


def _model() -> bytes:
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
            helper.make_node("Relu", ["m"], ["y"], name="relu"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [onnx.numpy_helper.from_array(WEIGHT, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _session(specialize: str = "1"):
    options = {"ops": "", "fuse": "MatMul,Relu", "specialize": specialize}
    return onnxplug.InferenceSession(_model(), providers=[(VD, options)])


def _x(batch: int) -> np.ndarray:
    return np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)


def _expected(x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ WEIGHT, 0)


def test_new_shapes_compile_again_and_known_ones_reuse_their_compilation():
    copies.reset()
    session = _session()
    assert copies.compiles == 1  # at session creation, for batch 1 (the symbolic dim taken as 1)
    for batch, compiles in ((1, 1), (5, 2), (1, 2), (5, 2), (2, 3)):
        (y,) = session.run(None, {"x": _x(batch)})
        np.testing.assert_allclose(y, _expected(_x(batch)), rtol=1e-6)
        assert copies.compiles == compiles, batch


def test_a_provider_accepting_any_shape_is_compiled_once():
    copies.reset()
    session = _session(specialize="0")
    for batch in (1, 5, 2):
        session.run(None, {"x": _x(batch)})
    assert copies.compiles == 1


def test_only_the_most_recent_compilations_are_kept():
    copies.reset()
    session = _session()
    for batch in range(1, 11):  # ten shapes: batch 1 (and 2) fall out of the eight kept
        session.run(None, {"x": _x(batch)})
    assert copies.compiles == 10
    session.run(None, {"x": _x(10)})
    assert copies.compiles == 10
    session.run(None, {"x": _x(1)})
    assert copies.compiles == 11


def test_concurrent_runs_with_new_shapes_compile_each_shape_once():
    copies.reset()
    session = _session()
    batches = [3, 4] * 8
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda b: session.run(None, {"x": _x(b)})[0], batches))
    for batch, y in zip(batches, results):
        np.testing.assert_allclose(y, _expected(_x(batch)), rtol=1e-6)
    assert copies.compiles == 3  # batch 1 at creation, then 3 and 4 once each


def test_with_input_shapes_fixes_the_inputs_and_leaves_the_original_alone():
    model = onnx.load_from_string(_model())
    partition = Partition("p", ("matmul", "relu"), ("x",), ("y",), model)
    fixed = partition.with_input_shapes([(7, 4)])
    assert fixed.input_shapes == ((7, 4),)
    dims = fixed.model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [7, 4]
    assert partition.input_shapes is None
    assert partition.model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    with pytest.raises(ValueError, match="1 inputs, got 2 shapes"):
        partition.with_input_shapes([(1, 4), (2, 4)])


def test_declared_input_shapes_must_match_the_inputs():
    with pytest.raises(ValueError, match="2 entries for 1 inputs"):
        CompiledPartition(("x",), ("y",), lambda x: [x], input_shapes=[(1,), (2,)])


def test_a_failed_compilation_for_new_shapes_names_the_partition_and_the_shapes(monkeypatch):
    from onnxplug_virtual_device.provider import VirtualDeviceProvider

    session = _session()

    def refuse(self, partition):
        raise ValueError("no engine for these dimensions")

    monkeypatch.setattr(VirtualDeviceProvider, "compile", refuse)
    with pytest.raises(onnxplug.OnnxplugError, match=r"again for input shapes \(x: \[6, 4\]\).*no engine"):
        session.run(None, {"x": _x(6)})
    session.run(None, {"x": _x(1)})  # the compilation made at creation still serves its shape
