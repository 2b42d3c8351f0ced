"""Malformed models are refused at session creation with the class onnxruntime uses."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model

F = TensorProto.FLOAT


def _session(model):
    return onnxplug.InferenceSession(model.SerializeToString())


def test_missing_file(tmp_path):
    with pytest.raises(onnxplug.NoSuchFile, match="doesn't exist"):
        onnxplug.InferenceSession(str(tmp_path / "absent.onnx"))


def test_garbage_bytes():
    with pytest.raises(onnxplug.InvalidProtobuf):
        onnxplug.InferenceSession(b"\xff\xff\xff not a model")


def test_empty_bytes():
    with pytest.raises(onnxplug.InvalidArgument, match="No graph was found"):
        onnxplug.InferenceSession(b"")


def test_directory_is_invalid_protobuf(tmp_path):
    with pytest.raises(onnxplug.InvalidProtobuf):
        onnxplug.InferenceSession(tmp_path)


def test_unknown_op_default_domain():
    model = make_model([helper.make_node("FooBar", ["x"], ["y"])], [("x", F, [1])], [("y", F, [1])])
    with pytest.raises(onnxplug.InvalidGraph, match="No Op registered for FooBar with domain_version of 17"):
        _session(model)


def test_unknown_custom_domain_names_domain_and_how_to_fix():
    model = make_model(
        [helper.make_node("FooBar", ["x"], ["y"], domain="custom.dom")],
        [("x", F, [1])],
        [("y", F, [1])],
        extra_opsets={"custom.dom": 1},
    )
    with pytest.raises(onnxplug.Fail, match=r"custom\.dom:FooBar.*register_custom_ops_library"):
        _session(model)


def test_undefined_node_input():
    model = make_model([helper.make_node("Relu", ["q"], ["y"])], [("x", F, [1])], [("y", F, [1])])
    with pytest.raises(onnxplug.InvalidArgument, match="input 'q' is not a graph input"):
        _session(model)


def test_graph_output_not_produced():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [1])], [("w", F, [1])])
    with pytest.raises(onnxplug.Fail, match=r"Graph output \(w\) does not exist"):
        _session(model)


def test_duplicate_output_name():
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["y"])]
    model = make_model(nodes, [("x", F, [1])], [("y", F, [1])])
    with pytest.raises(onnxplug.Fail, match=r"Duplicate definition of name \(y\)"):  # onnxruntime's class
        _session(model)


def test_cycle():
    nodes = [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])]
    model = make_model(nodes, [("x", F, [1])], [("a", F, [1])])
    with pytest.raises(onnxplug.InvalidGraph, match="cycle"):
        _session(model)


def test_unsorted_graph_runs():
    nodes = [helper.make_node("Relu", ["h"], ["y"]), helper.make_node("Tanh", ["x"], ["h"])]
    model = make_model(nodes, [("x", F, [2])], [("y", F, [2])])
    (y,) = _session(model).run(None, {"x": np.array([-1, 1], np.float32)})
    np.testing.assert_allclose(y, [0, np.tanh(1)], rtol=1e-6)


def test_initializer_size_mismatch():
    model = make_model(
        [helper.make_node("Add", ["x", "w"], ["y"])], [("x", F, [2])], [("y", F, [2])], {"w": np.ones(2, np.float32)}
    )
    model.graph.initializer[0].dims[:] = [3]
    with pytest.raises(onnxplug.Fail, match="'w' holds 8 bytes"):  # onnxruntime's class
        _session(model)


def test_opset_too_new():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [1])], [("y", F, [1])], opset=999)
    with pytest.raises(onnxplug.Fail, match="opset 999"):
        _session(model)


def test_exception_classes_importable_from_capi_path():
    from onnxplug.capi.onnxruntime_pybind11_state import Fail, InvalidArgument

    assert Fail is onnxplug.Fail and InvalidArgument is onnxplug.InvalidArgument
    assert issubclass(onnxplug.Fail, RuntimeError) and issubclass(onnxplug.InvalidArgument, ValueError)


def test_subgraph_output_naming_an_outer_value_runs():
    then_graph = helper.make_graph([], "then", [], [helper.make_tensor_value_info("x", F, [2])])
    else_graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["nx"])], "else", [], [helper.make_tensor_value_info("nx", F, [2])]
    )
    model = make_model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_graph, else_branch=else_graph)],
        [("c", TensorProto.BOOL, []), ("x", F, [2])],
        [("y", F, [2])],
    )
    session = _session(model)
    x = np.array([1, 2], np.float32)
    np.testing.assert_array_equal(session.run(None, {"c": np.array(True), "x": x})[0], [1, 2])
    np.testing.assert_array_equal(session.run(None, {"c": np.array(False), "x": x})[0], [-1, -2])


def test_sparse_constant_becomes_dense():
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("v", F, [2], [5, 6]), helper.make_tensor("i", TensorProto.INT64, [2], [1, 3]), [4]
    )
    model = make_model([helper.make_node("Constant", [], ["y"], sparse_value=sparse)], [], [("y", F, [4])])
    np.testing.assert_array_equal(_session(model).run(None, {})[0], [0, 5, 0, 6])


def test_sparse_indices_out_of_bounds_refused():
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("v", F, [1], [5]), helper.make_tensor("i", TensorProto.INT64, [1], [9]), [4]
    )
    model = make_model([helper.make_node("Constant", [], ["y"], sparse_value=sparse)], [], [("y", F, [4])])
    with pytest.raises(onnxplug.InvalidGraph, match="sparse indices out of bounds"):
        _session(model)
