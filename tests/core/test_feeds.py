"""Bad feeds on the vertical slice: each raises an onnxplug exception naming the input."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model


@pytest.fixture(scope="module")
def session():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    model = make_model(
        nodes,
        [("x", TensorProto.FLOAT, ["batch", 4])],
        [("y", TensorProto.FLOAT, None)],
        {"w": np.ones((4, 2), np.float32)},
    )
    return onnxplug.InferenceSession(model.SerializeToString())


def test_good_feed(session):
    (y,) = session.run(None, {"x": np.ones((3, 4), np.float32)})
    np.testing.assert_array_equal(y, np.full((3, 2), 4.0, np.float32))
    assert y.flags.writeable and y.flags.c_contiguous


def test_missing_feed(session):
    with pytest.raises(onnxplug.InvalidArgument, match=r"Required inputs \(\['x'\]\) are missing"):
        session.run(None, {})


def test_missing_feed_is_a_value_error_too(session):
    with pytest.raises(ValueError):
        session.run(None, {})


def test_unknown_feed_name(session):
    with pytest.raises(onnxplug.InvalidArgument, match="Invalid input name: q"):
        session.run(None, {"x": np.ones((1, 4), np.float32), "q": np.ones(1)})


def test_wrong_dtype_names_the_input(session):
    with pytest.raises(
        onnxplug.InvalidArgument, match=r"input 'x'.*Actual: \(tensor\(double\)\).*expected: \(tensor\(float\)\)"
    ):
        session.run(None, {"x": np.ones((1, 4), np.float64)})


def test_wrong_rank(session):
    with pytest.raises(onnxplug.InvalidArgument, match="Invalid rank for input: x Got: 1 Expected: 2"):
        session.run(None, {"x": np.ones(4, np.float32)})


def test_wrong_fixed_dim(session):
    with pytest.raises(onnxplug.InvalidArgument, match="invalid dimensions for input: x.*index: 1 Got: 5 Expected: 4"):
        session.run(None, {"x": np.ones((2, 5), np.float32)})


def test_a_shape_that_passed_once_does_not_let_others_through(session):
    """A free-dimension input remembers the last shape that passed its checks (so a repeated
    batch skips them); every other shape and dtype is still checked in full."""
    for _ in range(2):
        (y,) = session.run(None, {"x": np.ones((2, 4), np.float32)})
        assert y.shape == (2, 2)
    with pytest.raises(onnxplug.InvalidArgument, match="index: 1 Got: 5 Expected: 4"):
        session.run(None, {"x": np.ones((2, 5), np.float32)})
    with pytest.raises(onnxplug.InvalidArgument, match=r"Actual: \(tensor\(double\)\)"):
        session.run(None, {"x": np.ones((2, 4), np.float64)})
    with pytest.raises(onnxplug.InvalidArgument, match="Invalid rank for input: x Got: 3"):
        session.run(None, {"x": np.ones((2, 4, 1), np.float32)})
    (y,) = session.run(None, {"x": np.ones((7, 4), np.float32)})
    assert y.shape == (7, 2)


def test_none_feed(session):
    with pytest.raises(onnxplug.InvalidArgument, match="input 'x' is None"):
        session.run(None, {"x": None})


def test_list_feed_converted_to_expected_dtype(session):
    (y,) = session.run(None, {"x": [[1, 1, 1, 1]]})
    np.testing.assert_array_equal(y, [[4.0, 4.0]])


def test_unknown_output_name(session):
    with pytest.raises(onnxplug.InvalidArgument, match="Invalid output name: nope"):
        session.run(["nope"], {"x": np.ones((1, 4), np.float32)})


def test_output_names_as_string_is_type_error(session):
    with pytest.raises(TypeError):
        session.run("y", {"x": np.ones((1, 4), np.float32)})


def test_feed_not_mutated_and_output_fresh():
    model = make_model(
        [helper.make_node("Identity", ["x"], ["y"])], [("x", TensorProto.FLOAT, [3])], [("y", TensorProto.FLOAT, [3])]
    )
    session = onnxplug.InferenceSession(model.SerializeToString())
    x = np.arange(3, dtype=np.float32)
    (y,) = session.run(None, {"x": x})
    assert not np.shares_memory(x, y)
    y[:] = 7
    np.testing.assert_array_equal(x, [0, 1, 2])


def test_kernel_failure_names_node_and_op():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="the_reshape")]
    model = make_model(
        nodes, [("x", TensorProto.FLOAT, [6]), ("shape", TensorProto.INT64, [2])], [("y", TensorProto.FLOAT, None)]
    )
    session = onnxplug.InferenceSession(model.SerializeToString())
    with pytest.raises(onnxplug.Fail, match=r"Reshape node\. Name:'the_reshape'.*shape"):
        session.run(None, {"x": np.ones(6, np.float32), "shape": np.array([4, 4], np.int64)})
    # the session stays usable after a failed run
    (y,) = session.run(None, {"x": np.ones(6, np.float32), "shape": np.array([2, 3], np.int64)})
    assert y.shape == (2, 3)
