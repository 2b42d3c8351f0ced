"""TensorRT's capability table.

Source: onnx-tensorrt's operator support list, ``docs/operators.md`` of onnx/onnx-tensorrt for
TensorRT 10.15 ("supports operators in the inclusive range of opset 9 to opset 24"): every op
marked ``Y`` with its supported types and its restrictions, transcribed as checks.  Types follow
the list: INT8, INT4, FP8 and FP4 are "quantized types" that TensorRT handles only through
QuantizeLinear/DequantizeLinear from a wider float type, and UINT8 only as a network input or
output, so an op's row lists only what the document lists for it.  Where the TensorRT ONNX parser
is installed, its own ``supports_model_v2`` answer refines this table at run time.
"""

from __future__ import annotations

import numpy as np

from onnxplug.partition.targets import (
    AttributeIn,
    AttributeTest,
    CapabilityTable,
    ConstantInput,
    ConstantValue,
    InputAbsent,
    InputRank,
    InputTypes,
    NoOutput,
    OpSupport,
    StaticInput,
    types,
)

SOURCE = "onnx-tensorrt docs/operators.md for TensorRT 10.15 (opsets 9-24)"

F = types("FP32", "FP16", "BF16")
FI = F | types("INT32", "INT64")
FIB = FI | types("BOOL")
BOOL = types("BOOL")
F32_16 = types("FP32", "FP16")


def _ones(value) -> bool:
    return not value or all(int(v) == 1 for v in value)


def _zero(value) -> bool:
    return bool(np.all(np.asarray(value) == 0))


_NO_DILATION = AttributeTest("dilations", _ones, (), "`dilations` must be empty or all ones")
_POOL_RANK = InputRank(0, (4, 5), "2D or 3D pooling only")
_AXES_CONSTANT = ConstantInput(1, "`axes`")
_ONLY_Y = "only the first output `Y` is supported"
_SCATTER_REDUCTION = AttributeIn("reduction", ("none",), "none", "`reduction` other than none is unsupported")


def _row(op, accepted=F, typed=(0,), checks=()):
    return OpSupport(op, types=accepted, typed=typed, checks=tuple(checks))


_REDUCE = [
    _row(op, FI, checks=[ConstantInput(1, "`axes`")])
    for op in (
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceSum",
        "ReduceSumSquare",
    )
]

_RESIZE = [
    AttributeIn(
        "coordinate_transformation_mode",
        ("half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn", "asymmetric", "align_corners"),
        "half_pixel",
        "unsupported resize transformation mode",
    ),
    AttributeIn("mode", ("nearest", "linear"), "nearest", "supported resize modes: nearest, linear"),
    AttributeIn(
        "nearest_mode",
        ("floor", "ceil", "round_prefer_floor", "round_prefer_ceil"),
        "round_prefer_floor",
        "unsupported nearest mode",
    ),
    AttributeIn("keep_aspect_ratio_policy", ("stretch",), "stretch", "supported aspect ratio policy: stretch"),
    AttributeIn("antialias", (0,), 0, "antialiasing is not supported"),
]

ROWS = [
    _row("Abs", FI),
    _row("Acos"),
    _row("Acosh"),
    _row("Add", FI),
    _row("And", BOOL),
    _row("ArgMax", FI),
    _row("ArgMin", FI),
    _row("Asin"),
    _row("Asinh"),
    _row("Atan"),
    _row("Atanh"),
    _row(
        "Attention",
        F | types("INT8", "FP8"),
        checks=[
            InputRank(0, (4,), "`Q` must be 4D"),
            InputRank(1, (4,), "`K` must be 4D"),
            InputRank(2, (4,), "`V` must be 4D"),
            InputRank(3, (4,), "`attn_mask` must be 4D"),
            InputAbsent(4, "`past_key` is unsupported"),
            InputAbsent(5, "`past_value` is unsupported"),
            InputAbsent(6, "`nonpad_kv_seqlen` is unsupported"),
            NoOutput(1, "`present_key` is unsupported"),
            NoOutput(2, "`present_value` is unsupported"),
            NoOutput(3, "`qk_matmul_output` is unsupported"),
            AttributeIn("qk_matmul_output_mode", (0,), 0, "`qk_matmul_output_mode` is unsupported"),
            AttributeIn("softcap", (0.0,), 0.0, "`softcap` is unsupported"),
        ],
    ),
    _row("AveragePool", checks=[_POOL_RANK, _NO_DILATION]),
    _row("BatchNormalization"),
    _row("BlackmanWindow", typed=()),
    _row("Cast", F | types("INT32", "INT64", "UINT8", "BOOL")),
    _row("CastLike", F | types("INT32", "INT64", "UINT8", "BOOL")),
    _row("Ceil"),
    _row("Celu"),
    _row("Clip"),
    _row("Concat", FIB),
    _row(
        "Constant",
        typed=(),
        checks=[
            AttributeTest(a, lambda v: v is None, None, f"`{a}` is unsupported")
            for a in ("sparse_value", "value_string", "value_strings")
        ],
    ),
    _row("ConstantOfShape", typed=()),
    _row("Conv"),
    _row("ConvTranspose"),
    _row("Cos"),
    _row("Cosh"),
    _row("CumSum", checks=[ConstantInput(1, "`axis`")]),
    _row(
        "DeformConv",
        F32_16,
        checks=[
            InputRank(0, (3, 4), "`input` must have 1D or 2D spatial dimensions"),
            AttributeTest(
                "pads",
                lambda p: not p or list(p[: len(p) // 2]) == list(p[len(p) // 2 :]),
                (),
                "`pads` for the beginning and end along each spatial axis must be the same",
            ),
        ],
    ),
    _row("DepthToSpace", FI),
    _row(
        "DequantizeLinear",
        types("INT8", "FP8", "FP4", "INT4"),
        checks=[ConstantValue(2, _zero, "`x_zero_point` must be zero")],
    ),
    _row("Div", FI),
    _row("Dropout", checks=[ConstantValue(2, lambda v: not bool(np.any(v)), "`is_training` must be False")]),
    _row("Einsum"),
    _row("Elu"),
    _row("Equal", FI),
    _row("Erf"),
    _row("Exp"),
    _row("Expand", FIB),
    _row("EyeLike", FIB, checks=[StaticInput(0, "`input` must have static dimensions")]),
    _row("Flatten", FIB),
    _row("Floor"),
    _row("Gather", FIB),
    _row("GatherElements", FIB),
    _row("GatherND", FIB),
    _row("Gelu", F | types("INT8", "INT32", "INT64")),
    _row("Gemm"),
    _row("GlobalAveragePool"),
    _row("GlobalLpPool"),
    _row("GlobalMaxPool"),
    _row("Greater", FI),
    _row("GreaterOrEqual", FI),
    _row("GridSample", F32_16, checks=[InputRank(0, (4,), "input must be 4D")]),
    _row("GroupNormalization"),
    _row("GRU"),
    _row("HammingWindow", typed=()),
    _row("HannWindow", typed=()),
    _row("HardSigmoid"),
    _row("HardSwish"),
    _row(
        "Hardmax",
        checks=[StaticInput(0, "`axis` dimension of input must be a build-time constant", "axis", -1)],
    ),
    _row("Identity", FIB),
    _row("If", typed=()),
    _row("InstanceNormalization"),
    _row("IsInf"),
    _row("IsNaN", FI),
    _row(
        "LayerNormalization",
        checks=[
            NoOutput(1, "only the first output `Y` is supported"),
            NoOutput(2, "only the first output `Y` is supported"),
        ],
    ),
    _row("LeakyRelu"),
    _row("Less", FI),
    _row("LessOrEqual", FI),
    _row("Log"),
    _row("LogSoftmax"),
    _row("Loop", typed=()),
    _row("LRN"),
    _row(
        "LSTM",
        checks=[
            AttributeIn("input_forget", (0,), 0, "`input_forget` attribute must be 0"),
            AttributeIn("layout", (0,), 0, "`layout` attribute must be 0"),
        ],
    ),
    _row("LpNormalization"),
    _row("LpPool", checks=[_NO_DILATION]),
    _row("MatMul"),
    _row("Max", FI),
    _row("MaxPool", checks=[_POOL_RANK, NoOutput(1, "`Indices` output tensor unsupported"), _NO_DILATION]),
    _row("Mean", F | types("FP8", "INT32", "INT64")),
    _row("MeanVarianceNormalization"),
    _row("Min", FI),
    _row("Mish", F32_16),
    _row("Mod", FI),
    _row("Mul", FI),
    _row("Neg", FI),
    _row("NonMaxSuppression", F32_16),
    _row("NonZero", F32_16),
    _row("Not", BOOL),
    _row("OneHot", FIB, typed=(2,), checks=[ConstantInput(1, "`depth`")]),
    _row("Or", BOOL),
    _row("Pad", FI),
    _row("Pow", FI),
    _row("PRelu"),
    _row("QuantizeLinear", checks=[ConstantValue(2, _zero, "`y_zero_point` must be 0")]),
    _row("RandomNormal", typed=()),
    _row("RandomNormalLike"),
    _row("RandomUniform", typed=()),
    _row("RandomUniformLike"),
    _row("Range", FI),
    _row("Reciprocal"),
    *_REDUCE,
    _row("Relu", FI),
    _row("Reshape", FIB),
    _row("Resize", checks=_RESIZE),
    _row("ReverseSequence", FIB),
    _row("RMSNormalization"),
    _row("RNN"),
    _row("RoiAlign", F32_16),
    _row("RotaryEmbedding", checks=[InputTypes(3, types("INT64"), "`position_ids` must be INT64")]),
    _row("Round"),
    _row("STFT", types("FP32"), checks=[ConstantInput(1, "`frame_step`"), ConstantInput(2, "`window`")]),
    _row("Scan", typed=()),
    _row("Scatter", FI),
    _row("ScatterElements", FI),
    _row(
        "ScatterND",
        FI,
        checks=[_SCATTER_REDUCTION],
    ),
    _row("Selu"),
    _row("Shape", FIB),
    _row("Shrink", FI),
    _row("Sigmoid"),
    _row("Sign", FI),
    _row("Sin"),
    _row("Sinh"),
    _row("Size", FIB),
    _row("Slice", FIB),
    _row("Softmax"),
    _row("Softplus"),
    _row("Softsign"),
    _row("SpaceToDepth", FI),
    _row("Split", FIB),
    _row("Sqrt"),
    _row("Squeeze", FIB, checks=[_AXES_CONSTANT]),
    _row("Sub", FI),
    _row("Sum", FI),
    _row("Tan"),
    _row("Tanh"),
    _row(
        "TensorScatter",
        F | types("INT32"),
        checks=[
            InputRank(0, (4,), "`past_cache` must be 4D"),
            InputRank(1, (4,), "`update` must be 4D"),
            AttributeIn("axis", (-2,), -2, "`axis` must be -2"),
        ],
    ),
    _row("ThresholdedRelu"),
    _row("Tile", FIB),
    _row(
        "TopK",
        FI,
        checks=[
            AttributeIn("sorted", (1,), 1, "`sorted` must be 1"),
            ConstantValue(1, lambda v: int(np.asarray(v).reshape(-1)[0]) < 3840, "`K` input must be less than 3840"),
        ],
    ),
    _row("Transpose", FIB),
    _row("Trilu", FIB),
    _row("Unsqueeze", FIB, checks=[_AXES_CONSTANT]),
    _row("Upsample"),
    _row("Where", FIB, typed=(1,)),
    _row("Xor", BOOL),
]

TABLE = CapabilityTable(
    target="tensorrt",
    provider="TensorrtExecutionProvider",
    source=SOURCE,
    rows=ROWS,
    opsets={"": (9, 24)},
    memory="cuda",  # TensorRT runs on the CUDA provider's device buffers
    notes=(
        "INT8/INT4/FP8/FP4 run only through QuantizeLinear/DequantizeLinear; UINT8 only as network input or output",
        "where the TensorRT ONNX parser is installed, its supports_model_v2 answer refines this plan",
    ),
)
