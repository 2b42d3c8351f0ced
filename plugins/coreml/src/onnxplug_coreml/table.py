"""CoreML's capability table (ML Program format).

Source: onnxruntime's CoreML ML Program support table, ``coreml_supported_mlprogram_ops.md`` as
shipped in the onnxruntime 1.32.0 wheel (``onnxruntime/tools/mobile_helpers/``): its notes are
transcribed as checks below.  Rows it lists that onnxplug's MIL translator does not express yet
(GridSample, GroupNormalization, com.microsoft FusedConv/QuickGelu) are declined with
that reason.  Rows it does not list but the translator expresses (BatchNormalization, Gather,
Pad, the other reductions, Flatten, ...) are marked ``translator``; their checks are the
translator's own conditions.  onnxplug's translator builds fixed-shape programs (onnxruntime's
``RequireStaticInputShapes``), so the table asks for static shapes; Core ML computes in fp32/fp16
(int64 indices and shapes are narrowed to int32).
"""

from __future__ import annotations

import dataclasses

from onnxplug.partition.targets import (
    AttributeIn,
    AttributeTest,
    CapabilityTable,
    Check,
    ConstantInput,
    InputRank,
    InputTypes,
    NoOutput,
    OpSupport,
    types,
)

SOURCE = "onnxruntime 1.32.0 coreml_supported_mlprogram_ops.md (CoreML EP, ML Program) + onnxplug's MIL translator"
FLOAT = types("FP32", "FP16")
NUMERIC = types("FP32", "FP16", "INT32", "INT64")
ANY = types("FP32", "FP16", "INT32", "INT64", "BOOL")
_POOL = "Only 2D Pool is supported currently"


@dataclasses.dataclass(frozen=True)
class NotTranslated(Check):
    """In onnxruntime's table, but onnxplug's MIL translator has no form for it yet."""

    def reason(self, node, context):
        return "in onnxruntime's CoreML table, but onnxplug's MIL translator does not express it yet"


@dataclasses.dataclass(frozen=True)
class ResizeForm(Check):
    """Resize: the forms MIL's upsample ops express (shared with the translator), constant scales/sizes."""

    def reason(self, node, context):
        from ._spatial import resize_form

        for index, what in ((2, "scales"), (3, "sizes")):
            name = node.inputs[index] if index < len(node.inputs) else ""
            if name and not context.is_constant(name):
                return f"{what} ('{name}') must be a constant initializer"
        in_shape, out_shape = node.input_shapes[0], node.output_shapes[0]
        if in_shape is None or out_shape is None or not all(isinstance(d, int) for d in (*in_shape, *out_shape)):
            return "Resize needs static input and output shapes"
        form = resize_form(_Attributes(node.attributes), len(in_shape), in_shape, out_shape)
        return form if isinstance(form, str) else None


class _Attributes:
    """A NodeView's attributes in the shape ``translate.attr`` reads (``node.attribute`` items)."""

    def __init__(self, attributes):
        import onnx

        self.attribute = [
            onnx.helper.make_attribute(k, v)
            for k, v in attributes.items()
            if isinstance(v, (int, float, str, bytes)) or (isinstance(v, (list, tuple)) and v)
        ]


def _row(op, domain="", types=FLOAT, typed=(0,), checks=()):
    return OpSupport(op, domain=domain, types=types, typed=typed, checks=tuple(checks))


_CONST = "the MIL translator needs it constant"
_DILATIONS_1 = AttributeTest(
    "dilations", lambda v: v is None or all(int(d) == 1 for d in v), None, "dilated pooling has no MIL form"
)
_NO_TRAINING = NoOutput(1, "training-mode outputs have no MIL form")

ROWS = [
    # --- onnxruntime's ML Program table ---------------------------------------------------------
    _row("Add", types=NUMERIC),
    _row("And", types=types("BOOL"), checks=[InputTypes(1, types("BOOL"), "Both inputs must be bool")]),
    _row("ArgMax", checks=[AttributeIn("select_last_index", (0,), 0, "select_last_index must be 0")]),
    _row("AveragePool", checks=[InputRank(0, (4,), _POOL), _DILATIONS_1]),
    _row(
        "Cast", types=ANY, checks=[AttributeIn("to", (1, 10, 6, 7, 9), 1, "Cast to float, float16, int32, int64, bool")]
    ),
    _row("Clip", checks=[ConstantInput(1, f"min ({_CONST})"), ConstantInput(2, f"max ({_CONST})")]),
    _row("Concat", types=ANY),
    _row("Conv", checks=[InputRank(0, (3, 4), "Only 1D/2D Conv is supported"), ConstantInput(2, "Bias")]),
    _row(
        "ConvTranspose",
        checks=[
            InputRank(0, (3, 4), "only 1-D/2-D ConvTranspose (translator)"),
            ConstantInput(1, "Weight"),
            ConstantInput(2, "bias"),
            AttributeIn(
                "auto_pad", ("NOTSET", "VALID"), "NOTSET", "padding_type of SAME_UPPER/SAME_LOWER is not supported"
            ),
            AttributeTest("output_shape", lambda v: v is None, None, "output_shape is not supported"),
            AttributeTest(
                "output_padding", lambda v: not v or not any(v), None, "output_padding must have default values"
            ),
        ],
    ),
    _row("Cos"),
    _row("DepthToSpace", checks=[InputRank(0, (4,), "DepthToSpace takes a rank-4 input")]),
    _row("Ceil"),
    _row("Div", checks=[InputTypes(0, FLOAT, "the translator divides floats only (ONNX integer Div truncates)")]),
    _row("Elu"),
    _row("Erf"),
    _row("Exp"),
    _row("GatherND", types=ANY, checks=[AttributeIn("batch_dims", (0,), 0, "batch_dims must be 0")]),
    _row("Gemm", checks=[ConstantInput(1, "Input B")]),
    _row("Gelu"),
    _row("GlobalAveragePool", checks=[InputRank(0, (4,), _POOL)]),
    _row("GlobalMaxPool", checks=[InputRank(0, (4,), _POOL)]),
    _row("GridSample", checks=[NotTranslated()]),
    _row("GroupNormalization", checks=[NotTranslated()]),
    _row("HardSigmoid"),
    _row("Identity", types=ANY),
    _row(
        "InstanceNormalization",
        checks=[InputRank(0, (3, 4), "1-D/2-D only (translator)"), ConstantInput(1, "scale"), ConstantInput(2, "B")],
    ),
    _row(
        "LayerNormalization",
        checks=[NoOutput(1, "the Mean output has no MIL form"), NoOutput(2, "the InvStdDev output has no MIL form")],
    ),
    _row("LeakyRelu"),
    _row("MatMul"),
    _row(
        "MaxPool",
        checks=[
            InputRank(0, (4,), _POOL),
            _DILATIONS_1,
            NoOutput(1, "the Indices output has no MIL form"),
            AttributeIn("storage_order", (0,), 0, "storage_order must be 0"),
        ],
    ),
    _row("Max", types=NUMERIC),
    _row("Mul", types=NUMERIC),
    _row(
        "Pow",
        checks=[InputTypes(0, types("FP32"), "both inputs fp32"), InputTypes(1, types("FP32"), "both inputs fp32")],
    ),
    _row("PRelu"),
    _row("Reciprocal"),
    _row("ReduceSum", types=NUMERIC, checks=[ConstantInput(1, f"axes ({_CONST})")]),
    _row("ReduceMean", checks=[ConstantInput(1, f"axes ({_CONST})")]),
    _row("ReduceMax", types=NUMERIC, checks=[ConstantInput(1, f"axes ({_CONST})")]),
    _row("Relu"),
    _row("Reshape", types=ANY),
    _row("Resize", checks=[ResizeForm()]),
    _row("Round"),
    _row("Shape", types=ANY),
    _row("Sin"),
    _row(
        "Slice",
        types=ANY,
        checks=[
            ConstantInput(i, f"{what} must be constant initializers")
            for i, what in ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps"))
        ],
    ),
    _row("Softplus"),
    _row("Split", types=ANY, checks=[ConstantInput(1, "If provided, splits")]),
    _row("Sub", types=NUMERIC),
    _row("Sigmoid"),
    _row("Softmax"),
    _row("Sqrt"),
    _row("Squeeze", types=ANY),
    _row("Tanh"),
    _row("Tile", types=ANY, checks=[ConstantInput(1, f"repeats ({_CONST})")]),
    _row("Transpose", types=ANY),
    _row("Unsqueeze", types=ANY),
    _row("Where", types=types("BOOL"), checks=[InputTypes(1, FLOAT, "X/Y branches must be float or float16")]),
    _row("QuickGelu", domain="com.microsoft", checks=[NotTranslated()]),
    _row("FusedConv", domain="com.microsoft", checks=[NotTranslated()]),
    # --- expressed by onnxplug's MIL translator, not in onnxruntime's ML Program table ----------
    _row("Abs"),
    _row(
        "BatchNormalization",
        checks=[ConstantInput(i, f"{what} ({_CONST})") for i, what in ((1, "scale"), (2, "B"), (3, "mean"), (4, "var"))]
        + [_NO_TRAINING, AttributeIn("training_mode", (0,), 0, "training mode has no MIL form")],
    ),
    _row("Dropout", checks=[ConstantInput(2, f"training_mode ({_CONST})")]),
    _row("Equal", types=NUMERIC),
    _row("Expand", types=ANY),
    _row("Flatten", types=ANY),
    _row("Floor"),
    _row("Gather", types=ANY),
    _row("GatherElements", types=ANY),
    _row(
        "Range",
        types=NUMERIC,
        checks=[
            ConstantInput(i, f"{w} ({_CONST}: shapes are static)") for i, w in enumerate(("start", "limit", "delta"))
        ],
    ),
    _row("Greater", types=NUMERIC),
    _row("GreaterOrEqual", types=NUMERIC),
    _row("Less", types=NUMERIC),
    _row("LessOrEqual", types=NUMERIC),
    _row("Log"),
    _row("LogSoftmax"),
    _row("LRN", checks=[InputRank(0, (3, 4, 5), "LRN takes a rank 3-5 input")]),
    _row("Min", types=NUMERIC),
    _row("Neg", types=types("FP32", "INT32", "INT64")),
    _row("Not", types=types("BOOL")),
    _row("Or", types=types("BOOL")),
    _row(
        "Pad",
        types=ANY,
        checks=[
            AttributeIn("mode", ("constant", "reflect", "edge"), "constant", "mode must be constant, reflect or edge"),
            ConstantInput(1, f"pads ({_CONST})"),
            ConstantInput(2, f"constant_value ({_CONST})"),
            ConstantInput(3, f"axes ({_CONST})"),
        ],
    ),
    _row("ReduceMin", types=NUMERIC, checks=[ConstantInput(1, f"axes ({_CONST})")]),
    _row("ReduceProd", types=NUMERIC, checks=[ConstantInput(1, f"axes ({_CONST})")]),
    _row("ReduceL2", checks=[ConstantInput(1, f"axes ({_CONST})")]),
    _row("ReduceSumSquare", checks=[ConstantInput(1, f"axes ({_CONST})")]),
    _row("ReduceLogSumExp", checks=[ConstantInput(1, f"axes ({_CONST})")]),
    _row("Sum", types=NUMERIC),
    _row("Mean"),
    _row("ArgMin", checks=[AttributeIn("select_last_index", (0,), 0, "select_last_index must be 0")]),
    _row("Xor", types=types("BOOL")),
    _row(
        "ConstantOfShape", types=types("INT64"), checks=[ConstantInput(0, f"input shape ({_CONST}: shapes are static)")]
    ),
    _row("Size", types=ANY),
    _row("ReduceL1", checks=[ConstantInput(1, f"axes ({_CONST})")]),
]

TABLE = CapabilityTable(
    target="coreml",
    provider="CoreMLExecutionProvider",
    source=SOURCE,
    rows=ROWS,
    static_shapes=True,
    memory=None,  # Core ML reads and writes host multi-arrays: no copies at its borders
    notes=(
        "onnxplug's CoreML translator builds fixed-shape ML Programs: fix free dimensions first (--dim)",
        "Core ML computes in fp32/fp16 and int32: int64 values are narrowed, float64 is declined",
        "Core ML decides per op whether the Neural Engine, GPU or CPU runs it (MLComputeUnits limits the choice)",
    ),
)
