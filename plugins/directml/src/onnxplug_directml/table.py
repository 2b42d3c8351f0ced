"""DirectML's capability table.

Source: the ``DmlExecutionProvider`` section of onnxruntime's ``docs/OperatorKernels.md``
(generated from the registered kernels; microsoft/onnxruntime at commit 001d12d2623f, the
1.2x series): every ai.onnx and com.microsoft kernel with the schema versions it is registered
for and the element types of its first type parameter.  Each registration is onnxruntime's
``N+`` (from version N on), so a row maps each registered version to its types and a node takes
the entry of the highest registered version not above its own.  Ops of the old experimental set
(Affine, Crop, ImageScaler, ParametricSoftplus, ScaledTanh), the internal Memcpy kernels and the
com.microsoft.dml fused kernels (which only DirectML's own graph fusion creates) are left out.
"""

from __future__ import annotations

from onnxplug.partition.targets import CapabilityTable, OpSupport, types

SOURCE = "onnxruntime docs/OperatorKernels.md, DmlExecutionProvider section (commit 001d12d2623f)"

H = types("FP32", "FP16")
BOOL = types("BOOL")
ALL = types("BOOL", "DOUBLE", "FP32", "FP16", "INT16", "INT32", "INT64", "INT8", "UINT16", "UINT32", "UINT64", "UINT8")
NUM = ALL - types("BOOL", "DOUBLE")
F6 = types("FP32", "FP16", "INT32", "INT64", "UINT32", "UINT64")
SIGNED = types("FP32", "FP16", "INT16", "INT32", "INT64", "INT8")
INT8 = types("INT8", "UINT8")
BITS = NUM - H


def _at(accepted, *versions):
    return {v: accepted for v in versions}


def _row(op, entries, typed=(0,), domain=""):
    return OpSupport(op, domain=domain, types=entries, typed=typed)


_ONNX = [
    ("Abs", _at(SIGNED, 6, 13)),
    ("Acos", _at(H, 7)),
    ("Acosh", _at(H, 9)),
    ("Add", _at(NUM, 7, 13, 14)),
    ("And", _at(BOOL, 7)),
    ("ArgMax", _at(NUM, 1, 11, 12, 13)),
    ("ArgMin", _at(NUM, 1, 11, 12, 13)),
    ("Asin", _at(H, 7)),
    ("Asinh", _at(H, 9)),
    ("Atan", _at(H, 7)),
    ("Atanh", _at(H, 9)),
    ("AveragePool", _at(H, 7, 10, 11, 19)),
    ("BatchNormalization", _at(H, 7, 9, 14, 15)),
    ("BitShift", _at(types("UINT16", "UINT32", "UINT64", "UINT8"), 11)),
    ("BitwiseAnd", _at(BITS, 18)),
    ("BitwiseNot", _at(BITS, 18)),
    ("BitwiseOr", _at(BITS, 18)),
    ("BitwiseXor", _at(BITS, 18)),
    ("Cast", _at(ALL, 6, 9, 13, 19, 21)),
    ("CastLike", _at(ALL, 15, 19, 21)),
    ("Ceil", _at(H, 6, 13)),
    ("Celu", _at(H, 12)),
    ("Clip", {**_at(H, 6, 11), **_at(NUM, 12, 13)}),
    ("Col2Im", _at(ALL, 18)),
    ("Concat", _at(ALL, 4, 11, 13)),
    ("ConstantOfShape", _at(types("INT64"), 9, 21)),
    ("Conv", _at(H, 1, 11)),
    ("ConvInteger", _at(INT8, 10)),
    ("ConvTranspose", _at(H, 1, 11)),
    ("Cos", _at(H, 7)),
    ("Cosh", _at(H, 9)),
    ("CumSum", _at(F6, 11, 14)),
    ("DFT", _at(types("DOUBLE", "FP32", "FP16"), 17, 20)),
    ("DepthToSpace", _at(ALL, 1, 11, 13)),
    (
        "DequantizeLinear",
        {**_at(types("INT32", "INT8", "UINT8"), 10, 13, 19), **_at(types("INT4", "INT8", "UINT4", "UINT8"), 21)},
    ),
    ("Div", _at(NUM, 7, 13, 14)),
    ("Dropout", _at(H, 7)),
    ("DynamicQuantizeLinear", _at(types("FP32"), 11)),
    ("Einsum", _at(H, 12)),
    ("Elu", _at(H, 6)),
    ("Equal", {**_at(H, 7), **_at(NUM, 11, 13, 19)}),
    ("Erf", _at(H, 9, 13)),
    ("Exp", _at(H, 6, 13)),
    ("Expand", _at(ALL, 8, 13)),
    ("EyeLike", _at(ALL, 9)),
    ("Flatten", _at(ALL, 1, 9, 11, 13, 21)),
    ("Floor", _at(H, 6, 13)),
    ("GRU", _at(H, 7, 14)),
    ("Gather", _at(ALL, 1, 11, 13)),
    ("GatherElements", _at(ALL, 11, 13)),
    ("GatherND", _at(ALL, 11, 12, 13)),
    ("Gemm", _at(H, 7, 9, 11, 13)),
    ("GlobalAveragePool", _at(H, 1)),
    ("GlobalLpPool", _at(H, 2)),
    ("GlobalMaxPool", _at(H, 1)),
    ("Greater", {**_at(H, 7), **_at(NUM, 9, 13)}),
    ("GreaterOrEqual", _at(NUM, 12, 16)),
    ("GridSample", _at(NUM, 16)),
    ("HardSigmoid", _at(H, 6)),
    ("Hardmax", _at(H, 1, 11, 13)),
    ("Identity", _at(ALL, 1, 13, 14, 16, 19, 21)),
    ("If", _at(BOOL, 7, 11, 13, 16, 19)),
    ("InstanceNormalization", _at(H, 6)),
    ("IsInf", _at(types("FP32"), 10, 20)),
    ("IsNaN", _at(H, 9, 13, 20)),
    ("LRN", _at(H, 1, 13)),
    ("LSTM", _at(H, 7, 14)),
    ("LayerNormalization", _at(H, 17)),
    ("LeakyRelu", _at(H, 6, 16)),
    ("Less", {**_at(H, 7), **_at(NUM, 9, 13)}),
    ("LessOrEqual", _at(NUM, 12, 16)),
    ("Log", _at(H, 6, 13)),
    ("LogSoftmax", _at(H, 1, 11, 13)),
    ("LpNormalization", _at(H, 1)),
    ("LpPool", _at(H, 2, 11, 18)),
    ("MatMul", _at(H, 1, 9, 13)),
    ("MatMulInteger", _at(INT8, 10)),
    ("Max", {**_at(H, 6, 8), **_at(NUM, 12, 13)}),
    ("MaxPool", {**_at(H, 1), **_at(H | INT8, 8, 10, 11, 12)}),
    ("MaxRoiPool", _at(H, 1)),
    ("MaxUnpool", _at(H, 9, 11)),
    ("Mean", _at(H, 6, 8, 13)),
    ("MeanVarianceNormalization", _at(H, 1, 9, 13)),
    ("Min", {**_at(H, 6, 8), **_at(NUM, 12, 13)}),
    ("Mod", _at(types("FP32", "FP16", "INT16", "INT32", "INT8", "UINT16", "UINT32", "UINT8"), 10, 13)),
    ("Mul", _at(NUM, 7, 13, 14)),
    ("Neg", _at(SIGNED, 6, 13)),
    ("NonZero", _at(types("BOOL", "FP32", "FP16", "INT16", "INT32", "INT8", "UINT16", "UINT32", "UINT8"), 9, 13)),
    ("Not", _at(BOOL, 1)),
    ("OneHot", _at(types("INT32", "INT64", "UINT32", "UINT64"), 9, 11)),
    ("Or", _at(BOOL, 7)),
    ("PRelu", {**_at(H, 7), **_at(types("FP32", "FP16", "INT16", "INT32", "INT8"), 9, 16)}),
    ("Pad", _at(ALL, 2, 11, 13, 18, 19, 21)),
    ("Pow", {**_at(H, 7), **_at(types("FP32", "FP16", "INT32"), 12, 13, 15)}),
    ("QLinearConv", _at(INT8, 10)),
    ("QLinearMatMul", _at(INT8, 10, 21)),
    (
        "QuantizeLinear",
        {**_at(types("FP32", "INT32"), 10, 13), **_at(types("FP32", "FP16", "INT32"), 19), **_at(H, 21)},
    ),
    ("RNN", _at(H, 7, 14)),
    ("Range", _at(types("FP32", "INT16", "INT32", "INT64"), 11)),
    ("Reciprocal", _at(H, 6, 13)),
    ("ReduceL1", _at(F6, 1, 11, 13, 18)),
    ("ReduceL2", {**_at(H, 1, 11, 13), **_at(F6, 18)}),
    ("ReduceLogSum", {**_at(H, 1, 11, 13), **_at(F6, 18)}),
    ("ReduceLogSumExp", {**_at(H, 1, 11, 13), **_at(F6, 18)}),
    ("ReduceMax", {**_at(H, 1, 11), **_at(NUM, 12, 13), **_at(F6, 18), **_at(ALL, 20)}),
    ("ReduceMean", {**_at(H, 1, 11, 13), **_at(F6, 18)}),
    ("ReduceMin", {**_at(H, 1, 11), **_at(NUM, 12, 13), **_at(F6, 18), **_at(ALL, 20)}),
    ("ReduceProd", _at(F6, 1, 11, 13, 18)),
    ("ReduceSum", _at(F6, 1, 11, 13)),
    ("ReduceSumSquare", _at(F6, 1, 11, 13, 18)),
    ("Relu", {**_at(H, 6, 13), **_at(types("FP32", "FP16", "INT16", "INT32", "INT8"), 14)}),
    ("Reshape", _at(ALL, 5, 13, 14, 19, 21)),
    ("Resize", {**_at(H, 10), **_at(H | INT8, 11, 13, 18, 19)}),
    ("ReverseSequence", _at(ALL, 10)),
    ("RoiAlign", _at(H, 10, 16)),
    ("Round", _at(H, 11)),
    ("STFT", _at(H, 17)),
    ("Scatter", _at(ALL, 9, 11, 13)),
    ("ScatterElements", _at(ALL, 11, 13, 16)),
    ("ScatterND", _at(ALL, 11, 13, 16)),
    ("Selu", _at(H, 6)),
    ("Shrink", _at(types("FP32", "FP16", "INT16", "INT32", "INT8", "UINT16", "UINT32", "UINT8"), 9)),
    ("Sigmoid", _at(H, 6, 13)),
    ("Sign", _at(NUM, 9, 13)),
    ("Sin", _at(H, 7)),
    ("Sinh", _at(H, 9)),
    ("Slice", _at(ALL, 1, 10, 11, 13)),
    ("Softmax", _at(H, 1, 11, 13)),
    ("Softplus", _at(H, 1)),
    ("Softsign", _at(H, 1)),
    ("SpaceToDepth", _at(ALL, 1, 13)),
    ("Split", _at(ALL, 2, 11, 13, 18)),
    ("Sqrt", _at(H, 6, 13)),
    ("Squeeze", _at(ALL, 1, 11, 13, 21)),
    ("Sub", _at(NUM, 7, 13, 14)),
    ("Sum", _at(H, 6, 8, 13)),
    ("Tan", _at(H, 7)),
    ("Tanh", _at(H, 6, 13)),
    ("ThresholdedRelu", _at(H, 1, 10)),
    ("Tile", _at(ALL, 6, 13)),
    ("TopK", _at(NUM, 1, 10, 11)),
    ("Transpose", _at(ALL, 1, 13, 21)),
    ("Trilu", _at(ALL, 14)),
    ("Unsqueeze", _at(ALL, 1, 11, 13, 21)),
    ("Upsample", _at(H, 7, 9, 10)),
    ("Where", _at(ALL, 9, 16)),
    ("Xor", _at(BOOL, 7)),
]

#: Ops whose registration lists every type (Shape, Size, sequences, optionals): no type check.
_ANY_TYPE = {
    "Shape": (1, 13, 15, 19, 21),
    "Size": (1, 13, 19, 21),
    "ConcatFromSequence": (11,),
    "SequenceAt": (11,),
    "SequenceConstruct": (11,),
    "SequenceEmpty": (11,),
    "SequenceErase": (11,),
    "SequenceInsert": (11,),
    "SequenceLength": (11,),
    "OptionalGetElement": (15, 18),
    "OptionalHasElement": (15, 18),
}

#: Which input carries the row's type parameter, where it is not the first.
_TYPED = {"Where": (1,), "ConstantOfShape": (0,), "If": (0,)}

_MICROSOFT = [
    ("Attention", H),
    ("BiasAdd", H),
    ("BiasGelu", H),
    ("BiasSplitGelu", H),
    ("ConvTransposeWithDynamicPads", H),
    ("DequantizeLinear", types("INT32", "INT8", "UINT8")),
    ("DynamicQuantizeMatMul", types("FP32")),
    ("EmbedLayerNormalization", H, (2,)),
    ("FastGelu", H),
    ("FusedMatMul", H),
    ("FusedMatMulActivation", H),
    ("Gelu", H),
    ("GroupNorm", H),
    ("GroupQueryAttention", H),
    ("MatMulIntegerToFloat", INT8),
    ("MatMulNBits", H),
    ("MultiHeadAttention", H),
    ("NhwcConv", H),
    ("QAttention", INT8),
    ("QLinearAdd", INT8),
    ("QLinearAveragePool", INT8),
    ("QLinearConcat", None),
    ("QLinearGlobalAveragePool", INT8),
    ("QLinearSigmoid", INT8),
    ("QuantizeLinear", types("FP32", "FP16", "INT32")),
    ("QuickGelu", H),
    ("RotaryEmbedding", H),
    ("SkipLayerNormalization", H),
    ("SkipSimplifiedLayerNormalization", H),
]

ROWS = (
    [_row(op, entries, _TYPED.get(op, (0,))) for op, entries in _ONNX]
    + [_row(op, {v: None for v in versions}, ()) for op, versions in _ANY_TYPE.items()]
    + [
        OpSupport(entry[0], domain="com.microsoft", types=entry[1], typed=entry[2] if len(entry) > 2 else (0,))
        for entry in _MICROSOFT
    ]
)

TABLE = CapabilityTable(
    target="directml",
    provider="DmlExecutionProvider",
    source=SOURCE,
    rows=ROWS,
    memory="dml",  # DirectML computes in D3D12 GPU memory: copies at its borders
    notes=(
        "DirectML is in sustained engineering (new work moved to Windows ML); the table lists kernels, "
        "DirectML's own graph fusion may merge claimed nodes further",
    ),
)
