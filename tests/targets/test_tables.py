"""Each target's table against its source: the ops it lists, and cases drawn from the conditions
the source states (one claimed, one declined per condition), planned by the real partitioner."""

from __future__ import annotations

import importlib.resources
import re

import numpy as np
import pytest
from target_models import single_node

from onnxplug.partition.targets import plan_for_target

X4 = [("x", "float", [1, 3, 8, 8])]
Y = [("y", "float", None)]
W = {"w": np.ones((4, 3, 3, 3), np.float32)}


def decision(model, target):
    """``None`` when ``target`` would claim the node named ``node``, else its reason."""
    plan = plan_for_target(model.SerializeToString(), target)
    return None if "node" in plan.claimed else "; ".join(plan.declined["node"])


# --- NNAPI: onnxruntime's nnapi_supported_ops.md ------------------------------------------------


def test_nnapi_lists_exactly_the_ops_of_onnxruntimes_table():
    """The installed onnxruntime (the oracle) ships the table the NNAPI rows transcribe."""
    pytest.importorskip("onnxruntime", reason="onnxruntime (the test oracle) ships the NNAPI table")
    from onnxplug_nnapi.table import TABLE

    text = importlib.resources.files("onnxruntime.tools.mobile_helpers").joinpath("nnapi_supported_ops.md").read_text()
    listed = {(d.replace("ai.onnx", ""), op) for d, op in re.findall(r"^\|([\w.]+):(\w+)\|", text, re.M)}
    assert listed == set(TABLE.ops)
    assert len([op for d, op in listed if d == ""]) == 50


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (single_node("Conv", [*X4, ("w", "float", [4, 3, 3, 3])], Y, constants=W), None),
        (
            single_node(
                "Conv", [("x", "float", [1, 3, 8]), ("w", "float", [4, 3, 3])], Y, constants={"w": W["w"][..., 0]}
            ),
            "only 2-D is supported (rank-4 input): input 0 ('x') has rank 3",
        ),
        (
            single_node("Conv", [*X4, ("w", "float", [4, 3, 3, 3])], Y),
            "weights W ('w') must be a constant initializer; here it is computed at run time",
        ),
        (
            single_node("DepthToSpace", X4, Y, blocksize=1, mode="CRD"),
            "only DCR mode is supported: mode='CRD'",
        ),
        (
            single_node("Pad", [*X4, ("p", "int64", [8])], Y, constants={"p": np.zeros(8, np.int64)}, mode="reflect"),
            "only constant mode Pad is supported: mode='reflect'",
        ),
        (
            single_node("Pad", [*X4, ("p", "int64", [8])], Y, constants={"p": -np.ones(8, np.int64)}),
            "input pads values should be non-negative: 'p' does not meet it",
        ),
        (single_node("Gemm", [("a", "float", [2, 3]), ("b", "float", [4, 3])], Y, transB=1), None),
        (
            single_node("Gemm", [("a", "float", [2, 3]), ("b", "float", [3, 4])], Y),
            "if input B is not constant, transB should be 1 (input B ('b') must be a constant initializer; "
            "here it is computed at run time; transB must be 1: transB=0)",
        ),
        (single_node("Gather", [("x", "float", [5, 4]), ("i", "int32", [2])], Y), None),
        (
            single_node("Gather", [("x", "float", [5, 4]), ("i", "int64", [2])], Y),
            "input indices should be constant if not int32 (int32 indices: input 1 is int64; indices ('i') must be "
            "a constant initializer; here it is computed at run time)",
        ),
        (
            single_node("GlobalAveragePool", [("x", "float", [1, 3, 8, 8, 8])], Y),
            "only 2-D is supported (rank-4 input): input 0 ('x') has rank 5",
        ),
        (
            single_node("Relu", [("x", "float", ["n", 3])], [("y", "float", ["n", 3])]),
            "static shapes only: input 'x' has dynamic dimensions ['n']",
        ),
        (
            single_node("Relu", [("x", "int32", [3])], [("y", "int32", [3])]),
            "input 0 ('x') is int32; Relu-14 takes float",
        ),
    ],
    ids=lambda v: "" if v is None or not isinstance(v, str) else v[:30],
)
def test_nnapi_conditions(model, expected):
    assert decision(model, "nnapi") == expected


def test_nnapi_clip_is_relu6_or_relu1_only():
    inputs = [*X4, ("lo", "float", []), ("hi", "float", [])]
    relu6 = {"lo": np.float32(0), "hi": np.float32(6)}
    other = {"lo": np.float32(0), "hi": np.float32(5)}
    assert decision(single_node("Clip", inputs, Y, constants=relu6), "nnapi") is None
    assert decision(single_node("Clip", inputs, Y, constants=other), "nnapi") == (
        "Clip maps to RELU6 (0, 6) or RELU1 (-1, 1) only: bounds are (0.0, 5.0)"
    )


def test_nnapi_split_must_divide_evenly():
    x = [("x", "float", [1, 6])]
    three = [(f"y{i}", "float", None) for i in range(3)]
    four = [(f"y{i}", "float", None) for i in range(4)]
    assert decision(single_node("Split", x, three, axis=1, num_outputs=3, opset=18), "nnapi") is None
    assert decision(single_node("Split", x, four, axis=1, num_outputs=4, opset=18), "nnapi") == (
        "number of splits must evenly divide the split axis: 4 outputs, size 6"
    )


def test_nnapi_quantized_ops_need_constant_scales():
    inputs = [("x", "float", [4]), ("s", "float", []), ("z", "uint8", [])]
    out = [("y", "uint8", [4])]
    constants = {"s": np.float32(0.1), "z": np.uint8(128)}
    assert decision(single_node("QuantizeLinear", inputs, out, constants=constants), "nnapi") is None
    assert decision(single_node("QuantizeLinear", inputs, out), "nnapi") == (
        "all quantization scales and zero points should be constant ('s') must be a constant initializer; "
        "here it is computed at run time"
    )


# --- TensorRT: onnx-tensorrt's operators.md (TensorRT 10.15) -----------------------------------


def test_tensorrt_opset_range_is_9_to_24():
    assert decision(single_node("Relu", X4, Y, opset=24), "tensorrt") is None
    assert decision(single_node("Relu", X4, Y, opset=8), "tensorrt") == (
        "opset 8 of ai.onnx is outside the supported range 9..24"
    )


def test_tensorrt_unsupported_ops_and_quantized_types():
    assert decision(single_node("NonZero", X4, [("y", "int64", None)]), "tensorrt") is None
    assert decision(single_node("Unique", [("x", "float", [4])], Y), "tensorrt") == (
        "ai.onnx::Unique is not in the tensorrt table"
    )
    int8 = single_node("Relu", [("x", "int8", [4])], [("y", "int8", [4])])
    assert decision(int8, "tensorrt") == "input 0 ('x') is int8; Relu-14 takes bfloat16, float, float16, int32, int64"


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (single_node("MaxPool", X4, Y, kernel_shape=[2, 2]), None),
        (
            single_node("MaxPool", X4, [("y", "float", None), ("i", "int64", None)], kernel_shape=[2, 2]),
            "`Indices` output tensor unsupported: the node produces output 1 ('i')",
        ),
        (
            single_node("AveragePool", [("x", "float", [1, 3, 8])], Y, kernel_shape=[2]),
            "2D or 3D pooling only: input 0 ('x') has rank 3",
        ),
        (
            single_node("MaxPool", X4, Y, kernel_shape=[2, 2], dilations=[2, 2]),
            "`dilations` must be empty or all ones: dilations=(2, 2)",
        ),
        (
            single_node(
                "TopK",
                [("x", "float", [8]), ("k", "int64", [1])],
                [*Y, ("i", "int64", None)],
                constants={"k": np.array([3], np.int64)},
                sorted=0,
            ),
            "`sorted` must be 1: sorted=0",
        ),
        (
            single_node(
                "TopK",
                [("x", "float", [8]), ("k", "int64", [1])],
                [*Y, ("i", "int64", None)],
                constants={"k": np.array([4000], np.int64)},
            ),
            "`K` input must be less than 3840: 'k' does not meet it",
        ),
        (
            single_node(
                "Resize",
                [*X4, ("r", "float", [0]), ("s", "float", [4])],
                Y,
                constants={"r": np.zeros(0, np.float32), "s": np.array([1, 1, 2, 2], np.float32)},
                mode="cubic",
            ),
            "supported resize modes: nearest, linear: mode='cubic'",
        ),
        (
            single_node("ReduceSum", [*X4, ("a", "int64", [1])], Y, opset=18),
            "`axes` ('a') must be a constant initializer; here it is computed at run time",
        ),
        (
            single_node(
                "ScatterND", [("x", "float", [4]), ("i", "int64", [1, 1]), ("u", "float", [1])], Y, reduction="add"
            ),
            "`reduction` other than none is unsupported: reduction='add'",
        ),
    ],
    ids=lambda v: "" if v is None or not isinstance(v, str) else v[:30],
)
def test_tensorrt_restrictions(model, expected):
    assert decision(model, "tensorrt") == expected


def test_tensorrt_qdq_zero_points_must_be_zero():
    inputs = [("x", "int8", [4]), ("s", "float", []), ("z", "int8", [])]
    zero = {"s": np.float32(0.1), "z": np.int8(0)}
    shifted = {"s": np.float32(0.1), "z": np.int8(3)}
    assert decision(single_node("DequantizeLinear", inputs, Y, constants=zero), "tensorrt") is None
    assert decision(single_node("DequantizeLinear", inputs, Y, constants=shifted), "tensorrt") == (
        "`x_zero_point` must be zero: 'z' does not meet it"
    )


# --- DirectML: onnxruntime's OperatorKernels.md, DmlExecutionProvider -----------------------------


def test_directml_types_follow_the_registered_version():
    """Equal is registered from 7 for float/float16 and from 11 for the integer types too."""
    ints = [("a", "int32", [4]), ("b", "int32", [4])]
    out = [("y", "bool", [4])]
    assert decision(single_node("Equal", ints, out, opset=11), "directml") is None
    assert decision(single_node("Equal", ints, out, opset=10), "directml") == (
        "input 0 ('a') is int32; Equal-7 takes float, float16"
    )


def test_directml_float_kernels_decline_double_and_take_float16():
    double = single_node(
        "Conv", [("x", "double", [1, 3, 8, 8]), ("w", "double", [4, 3, 3, 3])], [("y", "double", None)]
    )
    assert decision(double, "directml") == "input 0 ('x') is double; Conv-11 takes float, float16"
    half = single_node("Relu", [("x", "float16", [4])], [("y", "float16", [4])])
    assert decision(half, "directml") is None


def test_directml_contrib_ops():
    fused = single_node(
        "FusedMatMul",
        [("a", "float", [2, 3]), ("b", "float", [3, 4])],
        Y,
        domain="com.microsoft",
        extra_opsets={"com.microsoft": 1},
    )
    assert decision(fused, "directml") is None
    assert decision(single_node("Det", [("x", "float", [3, 3])], Y), "directml") == (
        "ai.onnx::Det is not in the directml table"
    )
