"""NNAPI's capability table.

Source: onnxruntime's NNAPI support table, ``tools/ci_build/github/android/nnapi_supported_ops.md``
as shipped in the onnxruntime 1.32.0 wheel (``onnxruntime/tools/mobile_helpers/nnapi_supported_ops.md``,
kept in sync with docs/execution-providers/NNAPI-ExecutionProvider.md): 50 ai.onnx ops and 3
com.microsoft ops, with the notes transcribed as checks below.  Two conditions come from the
NNAPI EP's code rather than the table (``onnxruntime/core/providers/nnapi/nnapi_builtin/builders/
op_support_checker.cc``): Clip is only mapped when it is relu6 or relu1 (constant min/max of 0/6
or -1/1), and non-quantized ops take float32 inputs only.  onnxruntime's NNAPI EP also needs
fixed shapes (its usability checker recommends ``make_dynamic_shape_fixed``): the table asks for
static shapes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from onnxplug.partition.targets import (
    AnyOf,
    AttributeIn,
    CapabilityTable,
    Check,
    ConstantInput,
    ConstantValue,
    InputRank,
    InputTypes,
    OpSupport,
    types,
)

SOURCE = "onnxruntime 1.32.0 nnapi_supported_ops.md (NNAPI EP op table)"
FLOAT = types("FP32")
QUANT = types("UINT8", "INT8")
_2D = "only 2-D is supported (rank-4 input)"


def _constants(indices, what="all quantization scales and zero points should be constant"):
    return tuple(ConstantInput(i, what) for i in indices)


@dataclasses.dataclass(frozen=True)
class ClipRange(Check):
    """Clip maps to NNAPI's RELU6 or RELU1 only: min/max constant and (0, 6) or (-1, 1)."""

    def reason(self, node, context):
        if node.since_version is not None and node.since_version < 11:
            attributes = node.attributes
            low, high = attributes.get("min", -3.4028234663852886e38), attributes.get("max", 3.4028234663852886e38)
        else:
            values = []
            for index in (1, 2):
                name = node.inputs[index] if index < len(node.inputs) else ""
                if not name:
                    values.append(None)
                    continue
                if not context.is_constant(name):
                    return f"Clip maps to RELU6/RELU1 only: its bound '{name}' is computed at run time"
                value = context.constant(name)
                if value is None:
                    return f"Clip maps to RELU6/RELU1 only: the planner cannot read '{name}'"
                values.append(float(np.asarray(value).reshape(-1)[0]))
            low, high = values
        if (low, high) in ((0.0, 6.0), (-1.0, 1.0)):
            return None
        return f"Clip maps to RELU6 (0, 6) or RELU1 (-1, 1) only: bounds are ({low}, {high})"


@dataclasses.dataclass(frozen=True)
class EvenSplit(Check):
    """Split: the number of outputs must divide the split axis evenly when ``split`` is not given."""

    def reason(self, node, context):
        if len(node.inputs) > 1 and node.inputs[1]:
            return None  # explicit sizes (constant: checked separately)
        shape = node.input_shapes[0]
        axis = int(node.attributes.get("axis", 0))
        if shape is None or not (-len(shape) <= axis < len(shape)) or not isinstance(shape[axis], int):
            return "number of splits must evenly divide the split axis: the axis size is unknown"
        if shape[axis] % len(node.outputs):
            count = len(node.outputs)
            return f"number of splits must evenly divide the split axis: {count} outputs, size {shape[axis]}"
        return None


def _row(op, domain="", types=FLOAT, typed=(0,), checks=()):
    return OpSupport(op, domain=domain, types=types, typed=typed, checks=tuple(checks))


ROWS = [
    _row("Abs"),
    _row("Add"),
    _row("AveragePool", checks=[InputRank(0, (4,), _2D)]),
    _row("BatchNormalization"),
    _row("Cast", types=types("FP32", "INT32")),
    _row("Clip", checks=[ClipRange()]),
    _row("Concat"),
    _row(
        "Conv",
        checks=[InputRank(0, (4,), _2D), ConstantInput(1, "weights W"), ConstantInput(2, "bias B")],
    ),
    _row("DepthToSpace", checks=[AttributeIn("mode", ("DCR",), "DCR", "only DCR mode is supported")]),
    _row("DequantizeLinear", types=QUANT, checks=_constants((1, 2))),
    _row("Div"),
    _row("Elu"),
    _row("Exp"),
    _row("Flatten"),
    _row("Floor"),
    _row(
        "Gather",
        checks=[
            AnyOf(
                (InputTypes(1, types("INT32"), "int32 indices"), ConstantInput(1, "indices")),
                "input indices should be constant if not int32",
            )
        ],
    ),
    _row(
        "Gemm",
        checks=[
            AnyOf(
                (ConstantInput(1, "input B"), AttributeIn("transB", (1,), 0, "transB must be 1")),
                "if input B is not constant, transB should be 1",
            )
        ],
    ),
    _row("GlobalAveragePool", checks=[InputRank(0, (4,), _2D)]),
    _row("GlobalMaxPool", checks=[InputRank(0, (4,), _2D)]),
    _row("Identity"),
    _row("LeakyRelu"),
    _row("Log"),
    _row("LRN"),
    _row("MatMul"),
    _row("MaxPool", checks=[InputRank(0, (4,), _2D)]),
    _row("Max"),
    _row("Min"),
    _row("Mul"),
    _row("Neg"),
    _row(
        "Pad",
        checks=[
            AttributeIn("mode", ("constant",), "constant", "only constant mode Pad is supported"),
            ConstantInput(1, "input pads"),
            ConstantInput(2, "input constant_value"),
            ConstantValue(1, lambda v: bool(np.all(np.asarray(v) >= 0)), "input pads values should be non-negative"),
        ],
    ),
    _row("Pow"),
    _row("PRelu"),
    _row(
        "QLinearConv",
        types=QUANT,
        checks=[InputRank(0, (4,), _2D), ConstantInput(3, "weights w"), ConstantInput(8, "bias B")]
        + list(_constants((1, 2, 4, 5, 6, 7))),
    ),
    _row("QLinearMatMul", types=QUANT, checks=_constants((1, 2, 4, 5, 6, 7))),
    _row("QuantizeLinear", checks=_constants((1, 2))),
    _row("ReduceMean"),
    _row("Relu"),
    _row("Reshape"),
    _row("Resize", checks=[InputRank(0, (4,), "only 2-D Resize is supported (rank-4 input)")]),
    _row("Sigmoid"),
    _row("Sin"),
    _row("Slice"),
    _row("Softmax"),
    _row("Split", checks=[ConstantInput(1, "input split"), EvenSplit()]),
    _row("Sqrt"),
    _row("Squeeze", checks=[ConstantInput(1, "input axes")]),
    _row("Sub"),
    _row("Tanh"),
    _row("Transpose"),
    _row("Unsqueeze", checks=[ConstantInput(1, "input axes")]),
    _row("QLinearAdd", domain="com.microsoft", types=QUANT, checks=_constants((1, 2, 4, 5, 6, 7))),
    _row(
        "QLinearAveragePool",
        domain="com.microsoft",
        types=QUANT,
        checks=[InputRank(0, (4,), _2D)] + list(_constants((1, 2, 3, 4))),
    ),
    _row("QLinearSigmoid", domain="com.microsoft", types=QUANT, checks=_constants((1, 2, 3, 4))),
]

TABLE = CapabilityTable(
    target="nnapi",
    provider="NnapiExecutionProvider",
    source=SOURCE,
    rows=ROWS,
    static_shapes=True,
    memory=None,  # NNAPI reads and writes host buffers: no copies at its borders
    notes=(
        "the published table lists no element types; as onnxruntime's NNAPI EP, non-quantized ops take float32",
        "NNAPI drivers may still run a claimed op on the CPU reference path (Android decides per device)",
    ),
)
