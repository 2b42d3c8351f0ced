"""Bad inputs to the quantized and skl2onnx ops fail with onnxplug exceptions that name the node,
the input and what was expected."""

from __future__ import annotations

import numpy as np
import pytest

import onnxplug

U8, I8, F32 = np.uint8, np.int8, np.float32


def _s(value):
    return np.array(value, F32)


_CASES = [
    (
        "QGemm",
        [
            ("a", np.zeros((3, 8), U8)),
            ("as", _s(0.1)),
            ("az", np.array(0, U8)),
            ("b", np.zeros((7, 4), I8)),
            ("bs", _s(0.1)),
            ("bz", np.array(0, I8)),
        ],
        {},
        r"op\(A\) \(3, 8\) and op\(B\) \(7, 4\) do not multiply",
    ),
    (
        "QGemm",
        [
            ("a", np.zeros((3, 8), U8)),
            ("as", _s(0.1)),
            ("az", np.array(0, U8)),
            ("b", np.zeros((8, 4), I8)),
            ("bs", np.ones(3, F32)),
            ("bz", np.array(0, I8)),
        ],
        {},
        r"b_scale must be a scalar or have shape \(4,\)",
    ),
    (
        "QLinearWhere",
        [
            ("c", np.ones((2, 3), bool)),
            ("x", np.zeros((2, 3), U8)),
            ("xs", _s(0.1)),
            ("xz", np.array(0, U8)),
            ("y", np.zeros((2, 3), I8)),
            ("ys", _s(0.1)),
            ("yz", np.array(0, I8)),
            ("zs", _s(0.1)),
            ("zz", np.array(0, U8)),
        ],
        {},
        "X and Y must have the same type",
    ),
    (
        "QLinearAveragePool",
        [("x", np.zeros((1, 2, 4, 4), U8)), ("xs", _s(0.1)), ("xz", np.array(0, U8)), ("ys", _s(0.1))],
        {"kernel_shape": [2, 2], "pads": [1, 1]},
        r"pads \[1, 1\] must have 4 values",
    ),
    (
        "QLinearReduceMean",
        [("x", np.zeros((2, 3), U8)), ("xs", _s(0.1)), ("xz", np.array(0, U8)), ("ys", _s(0.1))],
        {"axes": [2], "keepdims": 1},
        r"axes \[2\] are out of range for rank 2",
    ),
    (
        "QLinearSoftmax",
        [("x", np.zeros((2, 3), U8)), ("xs", np.ones(2, F32)), ("xz", np.array(0, U8)), ("ys", _s(0.1))],
        {"node_attrs": {"opset": 13}},
        r"X_scale must be a scalar \(per-tensor\)",
    ),
    ("CDist", [("a", np.zeros((2, 3), F32)), ("b", np.zeros((4, 5), F32))], {}, r"must be \(M, N\) and \(K, N\)"),
]


@pytest.mark.parametrize("op,inputs,attrs,message", _CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(_CASES)])
def test_bad_input_names_node_and_problem(run_ours, op, inputs, attrs, message):
    with pytest.raises(onnxplug.OnnxplugError, match=message) as info:
        run_ours(op, inputs, ["out"], **attrs)
    assert op in str(info.value)
