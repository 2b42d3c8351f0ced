"""``get_outputs()`` shapes: dims shape inference cannot name are ``None``, as onnxruntime says.

onnx's inference invents ``unk__0``-style symbols for them; onnxruntime never shows such names.
"""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64

MODELS = {
    "NonZero": (
        make_model([helper.make_node("NonZero", ["x"], ["y"])], [("x", F, [2, 3])], [("y", I64, None)]),
        [2, None],
    ),
    "Reshape": (
        make_model(
            [helper.make_node("Reshape", ["x", "s"], ["y"])], [("x", F, [None, 3]), ("s", I64, [2])], [("y", F, None)]
        ),
        [None, None],
    ),
    "declared unnamed": (
        make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [None, 3])], [("y", F, [None, 3])]),
        [None, 3],
    ),
    "Concat of symbols": (
        make_model(
            [helper.make_node("Concat", ["a", "b"], ["y"], axis=0)],
            [("a", F, ["n", 3]), ("b", F, ["m", 3])],
            [("y", F, None)],
        ),
        [None, 3],
    ),
    "named symbol kept": (
        make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["batch", 3])], [("y", F, None)]),
        ["batch", 3],
    ),
}


@pytest.mark.parametrize("case", list(MODELS))
def test_unnamed_output_dims_are_none(case):
    model, expected = MODELS[case]
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.get_outputs()[0].shape == expected


@pytest.mark.parametrize("case", list(MODELS))
def test_output_shapes_match_onnxruntime(case):
    ort = pytest.importorskip("onnxruntime", reason="comparing NodeArg shapes needs onnxruntime")
    data = MODELS[case][0].SerializeToString()
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).get_outputs()
    ours = onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"]).get_outputs()
    assert [a.shape for a in ours] == [a.shape for a in theirs]
