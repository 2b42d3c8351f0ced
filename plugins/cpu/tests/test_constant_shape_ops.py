"""Reshape and Slice whose shape, starts, ends, axes and steps are constants (as exporters write
them): the CPU kernels read those once at session creation (``kernels.shape._reshape_kernel``,
``kernels.indexing.slice_10``) and keep a Slice's index per input shape.  Checked against onnx's
reference evaluator over inputs of changing shapes, and for the errors a shape that does not fit
still raises."""

from __future__ import annotations

import numpy as np
import onnx.reference
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model

F = TensorProto.FLOAT
I64 = np.int64


def _session_and_reference(node, initializers, rank=3):
    dims = [f"d{i}" for i in range(rank)]
    model = make_model([node], [("x", F, dims)], [("y", F, None)], initializers, opset=18)
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session, onnx.reference.ReferenceEvaluator(model)


@pytest.mark.parametrize(
    "starts, ends, axes, steps",
    [
        ([0], [2], None, None),
        ([1, -3], [100, -1], [2, 0], None),
        ([-1], [-100], [1], [-1]),  # backwards through index 0
        ([5, 0], [1, 4], [-1, 1], [-2, 3]),
        ([0], [0], [0], [1]),  # empty
    ],
)
def test_a_constant_slice_matches_the_reference_over_changing_shapes(starts, ends, axes, steps):
    given = {"starts": np.array(starts, I64), "ends": np.array(ends, I64)}
    names = ["x", "starts", "ends"]
    if axes is not None:
        given["axes"] = np.array(axes, I64)
        names.append("axes")
    if steps is not None:
        given["steps"] = np.array(steps, I64)
        names.append("steps")
    session, reference = _session_and_reference(helper.make_node("Slice", names, ["y"]), given)
    rng = np.random.default_rng(3)
    for shape in [(4, 5, 6), (7, 3, 9), (4, 5, 6), (2, 8, 1)]:  # a shape again: its kept index
        x = rng.standard_normal(shape).astype(np.float32)
        (got,) = session.run(None, {"x": x})
        np.testing.assert_array_equal(got, reference.run(None, {"x": x})[0])


def test_a_slice_with_an_omitted_axes_input_and_given_steps():
    node = helper.make_node("Slice", ["x", "starts", "ends", "", "steps"], ["y"])
    given = {"starts": np.array([0, 1], I64), "ends": np.array([4, 5], I64), "steps": np.array([2, 2], I64)}
    session, reference = _session_and_reference(node, given, rank=2)
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], reference.run(None, {"x": x})[0])


def test_a_constant_slice_with_a_bad_axis_names_it():
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"])
    given = {"starts": np.array([0], I64), "ends": np.array([1], I64), "axes": np.array([5], I64)}
    session, _ = _session_and_reference(node, given)
    with pytest.raises(onnxplug.InvalidArgument, match=r"Slice: axes 5 is out of range \[-3, 2\]"):
        session.run(None, {"x": np.zeros((2, 3, 4), np.float32)})


@pytest.mark.parametrize("shape", [[-1, 6], [2, -1, 3], [0, -1], [6, 0, 1]])
def test_a_constant_reshape_matches_the_reference_over_changing_shapes(shape):
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    session, reference = _session_and_reference(node, {"shape": np.array(shape, I64)})
    rng = np.random.default_rng(4)
    for x_shape in [(6, 1, 2), (6, 3, 2), (6, 1, 2)]:
        x = rng.standard_normal(x_shape).astype(np.float32)
        if 0 in shape and shape.index(0) == 1 and x_shape[1] * 6 * 1 != x.size:
            continue  # [6, 0, 1] copies x's second dimension: only where the sizes fit
        (got,) = session.run(None, {"x": x})
        np.testing.assert_array_equal(got, reference.run(None, {"x": x})[0])


def test_a_constant_reshape_that_does_not_fit_raises_naming_both_shapes():
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    session, _ = _session_and_reference(node, {"shape": np.array([5, -1], I64)})
    with pytest.raises(onnxplug.Fail, match=r"Input shape:\[2, 3, 4\], requested shape:\[5, -1\]"):
        session.run(None, {"x": np.zeros((2, 3, 4), np.float32)})
