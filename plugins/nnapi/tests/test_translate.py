"""The NNAPI translator, checked structurally: for each op the NNAPI table claims, the operations,
operand types and shapes, constant values and input/output order of the program it writes; and
the programs of the light models' partitions as a session hands them to ``compile()``.

This is onnxplug's own description of an NNAPI model, not a stand-in for the library: nothing
here executes it (the ctypes layer that does runs on Android only)."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug
from onnxplug.api import CompiledPartition, Device, Provider, ProviderFactory
from onnxplug.partition.targets import table_claims
from onnxplug_nnapi.program import OPERAND, Program
from onnxplug_nnapi.provider import NnapiProvider, NnapiProviderFactory, parse_flags
from onnxplug_nnapi.table import TABLE
from onnxplug_nnapi.translate import Untranslatable, converters, declines, translate, translate_partition

F, I64, I32, U8, I8 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.UINT8, TensorProto.INT8
T_F32, T_I32 = OPERAND["TENSOR_FLOAT32"], OPERAND["TENSOR_INT32"]
MS = {"com.microsoft": 1}


def model(op, inputs, outputs, constants=None, opset=17, domain="", **attributes):
    constants = {k: np.asarray(v) for k, v in (constants or {}).items()}
    graph = helper.make_graph(
        [
            helper.make_node(
                op, [n for n, _, _ in inputs], [n for n, _, _ in outputs], name="node", domain=domain, **attributes
            )
        ],
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs if n not in constants and n],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(v, n) for n, v in constants.items()],
    )
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    built = helper.make_model(graph, opset_imports=opsets)
    built.ir_version = 8
    return built


def program(built: onnx.ModelProto, layout="nhwc") -> Program:
    inputs = [v.name for v in built.graph.input]
    return translate(built, inputs, [v.name for v in built.graph.output], layout=layout)


def core(prog: Program) -> list[str]:
    """The operation names without the layout transposes."""
    return [name for name in prog.ops() if name != "TRANSPOSE"]


def main(prog: Program, name: str):
    found = [op for op in prog.operations if op.name == name]
    assert len(found) == 1, prog.ops()
    return found[0]


def scalars(prog: Program, operation, start: int = 1):
    return [prog.operand(i).scalar() for i in operation.inputs[start:] if prog.operand(i).is_scalar]


#: Each operation's inputs as NeuralNetworks.h documents them (explicit-padding forms, with the
#: API 29 layout flag and dilations): T a tensor, I an INT32 scalar, F a FLOAT32 scalar, B a BOOL
#: scalar; "T*" any number of tensors first (CONCATENATION).
SIGNATURES = {
    **dict.fromkeys(["ADD", "SUB", "MUL", "DIV"], "TTI"),
    "CONV_2D": "TTTIIIIIIIBII",
    "DEPTHWISE_CONV_2D": "TTTIIIIIIIIBII",
    "GROUPED_CONV_2D": "TTTIIIIIIIIB",
    **dict.fromkeys(["AVERAGE_POOL_2D", "MAX_POOL_2D"], "TIIIIIIIIIB"),
    **dict.fromkeys(["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"], "TIIBBB"),
    "DEPTH_TO_SPACE": "TIB",
    "LOCAL_RESPONSE_NORMALIZATION": "TIFFFI",
    "SOFTMAX": "TFI",
    "CONCATENATION": "T*I",
    "SPLIT": "TII",
    "MEAN": "TTI",
    "PAD": "TT",
    "PAD_V2": "TTF",
    "STRIDED_SLICE": "TTTTIII",
    "GATHER": "TIT",
    **dict.fromkeys(["TRANSPOSE", "RESHAPE", "PRELU", "MAXIMUM", "MINIMUM", "POW"], "TT"),
    "FULLY_CONNECTED": "TTTI",
    "BATCH_MATMUL": "TTBB",
    "ELU": "TF",
    **dict.fromkeys(
        [
            "ABS",
            "EXP",
            "FLOOR",
            "LOG",
            "NEG",
            "RELU",
            "RELU1",
            "RELU6",
            "LOGISTIC",
            "SIN",
            "SQRT",
            "TANH",
            "CAST",
            "QUANTIZE",
            "DEQUANTIZE",
        ],
        "T",
    ),
}
_KIND = {OPERAND["INT32"]: "I", OPERAND["FLOAT32"]: "F", OPERAND["BOOL"]: "B"}


def check_signatures(prog: Program) -> None:
    """Every operation has the inputs its NeuralNetworks.h entry lists; scalars are constants."""
    for operation in prog.operations:
        kinds = "".join(_KIND.get(prog.operand(i).code, "T") for i in operation.inputs)
        expected = SIGNATURES[operation.name]
        if expected.startswith("T*"):
            assert set(kinds[:-1]) == {"T"} and kinds[-1] == expected[-1], (operation, kinds)
        else:
            assert kinds == expected, (operation.name, operation.node, kinds, expected)
        assert all(prog.operand(i).value is not None for i in operation.inputs if prog.operand(i).is_scalar)


X4 = ("x", F, [1, 4, 6, 6])
Y4 = ("y", F, [1, 4, 6, 6])
rng = np.random.default_rng(0)


def _cases():
    w = rng.normal(size=(8, 4, 3, 3)).astype(np.float32)
    q = {"xs": np.float32(0.1), "xz": np.uint8(128), "ys": np.float32(0.2), "yz": np.uint8(120)}
    quant_in = [("xq", U8, [1, 4, 6, 6]), ("xs", F, []), ("xz", U8, [])]
    return {
        "Abs": model("Abs", [X4], [Y4]),
        "Add": model("Add", [X4, ("b", F, [4, 1, 1])], [Y4], {"b": np.ones((4, 1, 1), np.float32)}),
        "AveragePool": model("AveragePool", [X4], [("y", F, [1, 4, 3, 3])], kernel_shape=[2, 2], strides=[2, 2]),
        "BatchNormalization": model(
            "BatchNormalization",
            [X4, ("s", F, [4]), ("bb", F, [4]), ("m", F, [4]), ("v", F, [4])],
            [Y4],
            {
                "s": np.full(4, 2, np.float32),
                "bb": np.ones(4, np.float32),
                "m": np.zeros(4, np.float32),
                "v": np.full(4, 3, np.float32),
            },
            epsilon=1.0,
        ),
        "Cast": model("Cast", [("x", F, [2, 3])], [("y", I32, [2, 3])], to=I32),
        "Clip": model("Clip", [X4, ("lo", F, []), ("hi", F, [])], [Y4], {"lo": np.float32(0), "hi": np.float32(6)}),
        "Concat": model("Concat", [X4, ("z", F, [1, 4, 6, 6])], [("y", F, [1, 8, 6, 6])], axis=1),
        "Conv": model(
            "Conv", [X4, ("w", F, [8, 4, 3, 3])], [("y", F, [1, 8, 3, 3])], {"w": w}, pads=[1, 0, 1, 2], strides=[2, 2]
        ),
        "DepthToSpace": model("DepthToSpace", [X4], [("y", F, [1, 1, 12, 12])], blocksize=2, mode="DCR"),
        "DequantizeLinear": model(
            "DequantizeLinear", quant_in, [("y", F, [1, 4, 6, 6])], {"xs": q["xs"], "xz": q["xz"]}
        ),
        "Div": model("Div", [X4, ("z", F, [1, 4, 6, 6])], [Y4]),
        "Elu": model("Elu", [X4], [Y4], alpha=0.5),
        "Exp": model("Exp", [X4], [Y4]),
        "Flatten": model("Flatten", [X4], [("y", F, [1, 144])]),
        "Floor": model("Floor", [X4], [Y4]),
        "Gather": model("Gather", [("x", F, [5, 3]), ("i", I64, [2])], [("y", F, [2, 3])], {"i": np.array([-1, 0])}),
        "Gemm": model(
            "Gemm",
            [("x", F, [2, 3]), ("b", F, [3, 4]), ("c", F, [4])],
            [("y", F, [2, 4])],
            {"b": np.arange(12, dtype=np.float32).reshape(3, 4), "c": np.ones(4, np.float32)},
            alpha=2.0,
            beta=0.5,
        ),
        "GlobalAveragePool": model("GlobalAveragePool", [X4], [("y", F, [1, 4, 1, 1])]),
        "GlobalMaxPool": model("GlobalMaxPool", [X4], [("y", F, [1, 4, 1, 1])]),
        "Identity": model("Identity", [X4], [Y4]),
        "LeakyRelu": model("LeakyRelu", [X4], [Y4], alpha=0.2),
        "Log": model("Log", [X4], [Y4]),
        "LRN": model("LRN", [X4], [Y4], size=3, alpha=3e-4, beta=0.75, bias=2.0),
        "MatMul": model(
            "MatMul",
            [("x", F, [2, 3]), ("b", F, [3, 4])],
            [("y", F, [2, 4])],
            {"b": np.arange(12, dtype=np.float32).reshape(3, 4)},
        ),
        "MaxPool": model("MaxPool", [X4], [("y", F, [1, 4, 3, 3])], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        "Max": model("Max", [X4, ("z", F, [1, 4, 6, 6]), ("u", F, [1, 4, 6, 6])], [Y4]),
        "Min": model("Min", [X4, ("z", F, [1, 4, 6, 6])], [Y4]),
        "Mul": model("Mul", [X4, ("z", F, [1, 4, 6, 6])], [Y4]),
        "Neg": model("Neg", [X4], [Y4]),
        "Pad": model(
            "Pad",
            [X4, ("p", I64, [8]), ("v", F, [])],
            [("y", F, [1, 4, 9, 7])],
            {"p": np.array([0, 0, 1, 0, 0, 0, 2, 1]), "v": np.float32(0.5)},
        ),
        "Pow": model("Pow", [X4, ("z", F, [1, 4, 6, 6])], [Y4]),
        "PRelu": model("PRelu", [X4, ("s", F, [4, 1, 1])], [Y4], {"s": np.full((4, 1, 1), 0.1, np.float32)}),
        "QLinearConv": model(
            "QLinearConv",
            [
                *quant_in,
                ("w", U8, [8, 4, 1, 1]),
                ("ws", F, []),
                ("wz", U8, []),
                ("ys", F, []),
                ("yz", U8, []),
                ("bq", I32, [8]),
            ],
            [("y", U8, [1, 8, 6, 6])],
            {
                "xs": q["xs"],
                "xz": q["xz"],
                "w": np.full((8, 4, 1, 1), 130, np.uint8),
                "ws": np.float32(0.5),
                "wz": np.uint8(128),
                "ys": q["ys"],
                "yz": q["yz"],
                "bq": np.arange(8, dtype=np.int32),
            },
        ),
        "QLinearMatMul": model(
            "QLinearMatMul",
            [
                ("a", U8, [2, 3]),
                ("as", F, []),
                ("az", U8, []),
                ("b", I8, [3, 4]),
                ("bs", F, []),
                ("bz", I8, []),
                ("ys", F, []),
                ("yz", U8, []),
            ],
            [("y", U8, [2, 4])],
            {
                "as": np.float32(0.1),
                "az": np.uint8(0),
                "b": np.ones((3, 4), np.int8),
                "bs": np.float32(0.2),
                "bz": np.int8(0),
                "ys": np.float32(0.3),
                "yz": np.uint8(5),
            },
        ),
        "QuantizeLinear": model(
            "QuantizeLinear",
            [X4, ("ys", F, []), ("yz", U8, [])],
            [("y", U8, [1, 4, 6, 6])],
            {"ys": q["ys"], "yz": q["yz"]},
        ),
        "ReduceMean": model("ReduceMean", [X4], [("y", F, [1, 4])], axes=[2, 3], keepdims=0),
        "Relu": model("Relu", [X4], [Y4]),
        "Reshape": model("Reshape", [X4, ("s", I64, [2])], [("y", F, [4, 36])], {"s": np.array([4, -1])}),
        "Resize": model(
            "Resize",
            [X4, ("roi", F, [0]), ("sc", F, [4])],
            [("y", F, [1, 4, 12, 12])],
            {"roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 2], np.float32)},
            mode="linear",
            coordinate_transformation_mode="align_corners",
        ),
        "Sigmoid": model("Sigmoid", [X4], [Y4]),
        "Sin": model("Sin", [X4], [Y4]),
        "Slice": model(
            "Slice",
            [X4, ("st", I64, [1]), ("en", I64, [1]), ("ax", I64, [1]), ("sp", I64, [1])],
            [("y", F, [1, 4, 6, 6])],
            {"st": np.array([-1]), "en": np.array([-100]), "ax": np.array([3]), "sp": np.array([-1])},
        ),
        "Softmax": model("Softmax", [("x", F, [2, 5])], [("y", F, [2, 5])], axis=-1),
        "Split": model(
            "Split", [X4], [("a", F, [1, 2, 6, 6]), ("b", F, [1, 2, 6, 6])], axis=1, num_outputs=2, opset=18
        ),
        "Sqrt": model("Sqrt", [X4], [Y4]),
        "Squeeze": model("Squeeze", [("x", F, [1, 4, 1]), ("ax", I64, [1])], [("y", F, [1, 4])], {"ax": np.array([2])}),
        "Sub": model("Sub", [X4, ("z", F, [1, 4, 6, 6])], [Y4]),
        "Tanh": model("Tanh", [X4], [Y4]),
        "Transpose": model("Transpose", [("x", F, [2, 3, 4])], [("y", F, [4, 2, 3])], perm=[2, 0, 1]),
        "Unsqueeze": model("Unsqueeze", [("x", F, [4]), ("ax", I64, [1])], [("y", F, [1, 4])], {"ax": np.array([0])}),
        "QLinearAdd": model(
            "QLinearAdd",
            [*quant_in, ("bq", U8, [1, 4, 6, 6]), ("bs", F, []), ("bz", U8, []), ("ys", F, []), ("yz", U8, [])],
            [("y", U8, [1, 4, 6, 6])],
            {"xs": q["xs"], "xz": q["xz"], "bs": np.float32(0.3), "bz": np.uint8(3), "ys": q["ys"], "yz": q["yz"]},
            domain="com.microsoft",
        ),
        "QLinearAveragePool": model(
            "QLinearAveragePool",
            [*quant_in, ("ys", F, []), ("yz", U8, [])],
            [("y", U8, [1, 4, 3, 3])],
            {"xs": q["xs"], "xz": q["xz"], "ys": q["xs"], "yz": q["xz"]},
            domain="com.microsoft",
            kernel_shape=[2, 2],
            strides=[2, 2],
        ),
        "QLinearSigmoid": model(
            "QLinearSigmoid",
            [*quant_in, ("ys", F, []), ("yz", U8, [])],
            [("y", U8, [1, 4, 6, 6])],
            {"xs": q["xs"], "xz": q["xz"], "ys": np.float32(1 / 256), "yz": np.uint8(0)},
            domain="com.microsoft",
        ),
    }


CASES = _cases()
EXPECTED = {
    "Abs": ["ABS"],
    "Add": ["ADD"],
    "AveragePool": ["AVERAGE_POOL_2D"],
    "BatchNormalization": ["MUL", "ADD"],
    "Cast": ["CAST"],
    "Clip": ["RELU6"],
    "Concat": ["CONCATENATION"],
    "Conv": ["CONV_2D"],
    "DepthToSpace": ["DEPTH_TO_SPACE"],
    "DequantizeLinear": ["DEQUANTIZE"],
    "Div": ["DIV"],
    "Elu": ["ELU"],
    "Exp": ["EXP"],
    "Flatten": ["RESHAPE"],
    "Floor": ["FLOOR"],
    "Gather": ["GATHER"],
    "Gemm": ["FULLY_CONNECTED"],
    "GlobalAveragePool": ["AVERAGE_POOL_2D"],
    "GlobalMaxPool": ["MAX_POOL_2D"],
    "Identity": ["RESHAPE"],
    "LeakyRelu": ["PRELU"],
    "Log": ["LOG"],
    "LRN": ["LOCAL_RESPONSE_NORMALIZATION"],
    "MatMul": ["FULLY_CONNECTED"],
    "MaxPool": ["MAX_POOL_2D"],
    "Max": ["MAXIMUM", "MAXIMUM"],
    "Min": ["MINIMUM"],
    "Mul": ["MUL"],
    "Neg": ["NEG"],
    "Pad": ["PAD_V2"],
    "Pow": ["POW"],
    "PRelu": ["PRELU"],
    "QLinearConv": ["CONV_2D"],
    "QLinearMatMul": ["FULLY_CONNECTED"],
    "QuantizeLinear": ["QUANTIZE"],
    "ReduceMean": ["MEAN"],
    "Relu": ["RELU"],
    "Reshape": ["RESHAPE"],
    "Resize": ["RESIZE_BILINEAR"],
    "Sigmoid": ["LOGISTIC"],
    "Sin": ["SIN"],
    "Slice": ["STRIDED_SLICE"],
    "Softmax": ["SOFTMAX"],
    "Split": ["SPLIT"],
    "Sqrt": ["SQRT"],
    "Squeeze": ["RESHAPE"],
    "Sub": ["SUB"],
    "Tanh": ["TANH"],
    "Transpose": ["TRANSPOSE"],
    "Unsqueeze": ["RESHAPE"],
    "QLinearAdd": ["ADD"],
    "QLinearAveragePool": ["AVERAGE_POOL_2D"],
    "QLinearSigmoid": ["LOGISTIC"],
}


def test_every_op_the_table_claims_has_a_converter_and_a_case():
    assert {op for _, op in TABLE.ops} == set(CASES) == set(EXPECTED)
    assert set(TABLE.ops) <= converters()


@pytest.mark.parametrize("op", sorted(CASES))
def test_each_claimed_op_translates(op):
    built = CASES[op]
    prog = program(built)
    names = core(prog) if op != "Transpose" else prog.ops()
    assert names == EXPECTED[op]
    # inputs and outputs in the model's order, with the ONNX shapes (NCHW at the borders)
    for index, value in zip(prog.inputs, built.graph.input):
        dims = tuple(d.dim_value for d in value.type.tensor_type.shape.dim)
        assert prog.operand(index).dims == dims and prog.operand(index).label == value.name
    for index, value in zip(prog.outputs, built.graph.output):
        dims = tuple(d.dim_value for d in value.type.tensor_type.shape.dim)
        assert prog.operand(index).dims == dims and prog.operand(index).value is None
    assert prog.input_names == tuple(v.name for v in built.graph.input)
    # every operation's operands exist, and each computed operand is written once
    written = [o for op_ in prog.operations for o in op_.outputs]
    assert len(written) == len(set(written))
    assert all(i < len(prog.operands) for op_ in prog.operations for i in op_.inputs + op_.outputs)
    check_signatures(prog)
    assert not declines(built)


def test_conv_filter_padding_strides_and_layout():
    prog = program(CASES["Conv"])
    conv = main(prog, "CONV_2D")
    w = numpy_helper.to_array(CASES["Conv"].graph.initializer[0])
    src, filt, bias = (prog.operand(i) for i in conv.inputs[:3])
    assert src.dims == (1, 6, 6, 4)  # NHWC, through one TRANSPOSE
    assert filt.code == T_F32 and np.array_equal(filt.value, w.transpose(0, 2, 3, 1))  # OHWI
    assert bias.dims == (8,) and not bias.value.any()
    # ONNX pads (top=1, left=0, bottom=1, right=2) -> left, right, top, bottom; strides W, H; fuse; NHWC; dilations
    assert scalars(prog, conv, 3) == [0, 2, 1, 1, 2, 2, 0, False, 1, 1]
    assert prog.operand(conv.outputs[0]).dims == (1, 3, 3, 8)
    assert prog.ops() == ["TRANSPOSE", "CONV_2D", "TRANSPOSE"]
    assert prog.operand(prog.operations[0].inputs[1]).value.tolist() == [0, 2, 3, 1]
    assert prog.operand(prog.operations[2].inputs[1]).value.tolist() == [0, 3, 1, 2]
    nchw = translate(CASES["Conv"], ["x"], ["y"], layout="nchw")
    conv = main(nchw, "CONV_2D")
    assert nchw.ops() == ["CONV_2D"] and scalars(nchw, conv, 3)[7] is True  # the layout flag
    assert nchw.operand(conv.inputs[0]).dims == (1, 4, 6, 6)
    check_signatures(nchw)


def test_depthwise_and_grouped_convolutions():
    w = rng.normal(size=(8, 1, 3, 3)).astype(np.float32)
    built = model("Conv", [X4, ("w", F, [8, 1, 3, 3])], [("y", F, [1, 8, 4, 4])], {"w": w}, group=4)
    prog = program(built)
    conv = main(prog, "DEPTHWISE_CONV_2D")
    assert np.array_equal(prog.operand(conv.inputs[1]).value, w.transpose(1, 2, 3, 0))  # [1, kh, kw, M]
    assert scalars(prog, conv, 3)[6] == 2  # depth_multiplier
    w = rng.normal(size=(4, 2, 1, 1)).astype(np.float32)
    grouped = program(model("Conv", [X4, ("w", F, [4, 2, 1, 1])], [Y4], {"w": w}, group=2))
    check_signatures(prog)
    check_signatures(grouped)
    conv = main(grouped, "GROUPED_CONV_2D")
    assert grouped.operand(conv.inputs[1]).dims == (4, 1, 1, 2) and scalars(grouped, conv, 3)[6] == 2


def test_pools_gemm_batchnorm_and_constants():
    prog = program(CASES["MaxPool"])  # 6 -> ceil((6-3)/2)+1 = 3: one extra column and row of end padding
    assert scalars(prog, main(prog, "MAX_POOL_2D")) == [0, 1, 0, 1, 2, 2, 3, 3, 0, False]
    prog = program(CASES["GlobalAveragePool"])
    assert scalars(prog, main(prog, "AVERAGE_POOL_2D"))[4:8] == [1, 1, 6, 6]
    prog = program(CASES["Gemm"])
    fc = main(prog, "FULLY_CONNECTED")
    weights, bias = prog.operand(fc.inputs[1]).value, prog.operand(fc.inputs[2]).value
    assert np.array_equal(weights, 2 * np.arange(12, dtype=np.float32).reshape(3, 4).T)  # [N, K], alpha folded
    assert bias.tolist() == [0.5] * 4
    prog = program(CASES["BatchNormalization"])
    mul, add = main(prog, "MUL"), main(prog, "ADD")
    assert prog.operand(mul.inputs[1]).value.reshape(-1).tolist() == [1.0] * 4  # 2 / sqrt(3 + 1)
    assert prog.operand(add.inputs[1]).value.reshape(-1).tolist() == [1.0] * 4
    prog = program(CASES["Gather"])
    gather = main(prog, "GATHER")
    assert prog.operand(gather.inputs[2]).code == T_I32 and prog.operand(gather.inputs[2]).value.tolist() == [4, 0]
    prog = program(CASES["Pad"])
    pad = main(prog, "PAD_V2")
    assert prog.operand(pad.inputs[1]).value.tolist() == [[0, 0], [0, 0], [1, 2], [0, 1]]
    assert prog.operand(pad.inputs[2]).scalar() == 0.5
    prog = program(CASES["Slice"])  # reversed last axis: from -1 to the start (end mask bit 3)
    ss = main(prog, "STRIDED_SLICE")
    values = [prog.operand(i).value.tolist() for i in ss.inputs[1:4]]
    assert values == [[0, 0, 0, 5], [1, 4, 6, -1], [1, 1, 1, -1]] and scalars(prog, ss) == [0, 8, 0]
    prog = program(CASES["Resize"])
    assert scalars(prog, main(prog, "RESIZE_BILINEAR")) == [12, 12, False, True, False]
    prog = program(CASES["LRN"])
    assert scalars(prog, main(prog, "LOCAL_RESPONSE_NORMALIZATION")) == pytest.approx([1, 2.0, 1e-4, 0.75, 3])
    prog = program(CASES["ReduceMean"])  # keepdims=0: read in NCHW
    assert prog.operand(main(prog, "MEAN").inputs[1]).value.tolist() == [2, 3]


def test_quantized_operands_carry_scale_and_zero_point():
    prog = program(CASES["QLinearConv"])
    conv = main(prog, "CONV_2D")
    x, w, b = (prog.operand(i) for i in conv.inputs[:3])
    assert (x.type_name, x.scale, x.zero_point) == ("TENSOR_QUANT8_ASYMM", pytest.approx(0.1), 128)
    assert (w.type_name, w.scale, w.zero_point) == ("TENSOR_QUANT8_ASYMM", 0.5, 128)
    assert b.code == T_I32 and b.scale == pytest.approx(0.05) and b.value.tolist() == list(range(8))
    y = prog.operand(conv.outputs[0])
    assert (y.type_name, y.scale, y.zero_point) == ("TENSOR_QUANT8_ASYMM", pytest.approx(0.2), 120)
    prog = program(CASES["QLinearMatMul"])  # int8 weights shifted to the input's uint8
    fc = main(prog, "FULLY_CONNECTED")
    w = prog.operand(fc.inputs[1])
    assert w.type_name == "TENSOR_QUANT8_ASYMM" and w.zero_point == 128 and (w.value == 129).all()
    assert w.dims == (4, 3)
    per_channel = model(
        "QLinearConv",
        [
            ("xq", I8, [1, 4, 6, 6]),
            ("xs", F, []),
            ("xz", I8, []),
            ("w", I8, [8, 4, 1, 1]),
            ("ws", F, [8]),
            ("wz", I8, [8]),
            ("ys", F, []),
            ("yz", I8, []),
        ],
        [("y", I8, [1, 8, 6, 6])],
        {
            "xs": np.float32(0.1),
            "xz": np.int8(0),
            "w": np.ones((8, 4, 1, 1), np.int8),
            "ws": np.linspace(0.1, 0.8, 8).astype(np.float32),
            "wz": np.zeros(8, np.int8),
            "ys": np.float32(0.2),
            "yz": np.int8(0),
        },
    )
    prog = program(per_channel)
    conv = main(prog, "CONV_2D")
    w, b = prog.operand(conv.inputs[1]), prog.operand(conv.inputs[2])
    assert w.type_name == "TENSOR_QUANT8_SYMM_PER_CHANNEL" and w.channel_quant[0] == 0
    assert w.channel_quant[1] == pytest.approx(np.linspace(0.1, 0.8, 8).tolist()) and b.scale == 0.0
    assert prog.operand(prog.inputs[0]).type_name == "TENSOR_QUANT8_ASYMM_SIGNED"
    check_signatures(prog)


def test_nhwc_values_stay_nhwc_between_spatial_ops():
    """Conv → Relu → MaxPool: one TRANSPOSE in, one out; Relu reads the NHWC operand."""
    w = rng.normal(size=(4, 4, 1, 1)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
            helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", F, [1, 4, 3, 3])],
        [numpy_helper.from_array(w, "w")],
    )
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    prog = program(built)
    assert prog.ops() == ["TRANSPOSE", "CONV_2D", "RELU", "MAX_POOL_2D", "TRANSPOSE"]
    assert prog.operand(main(prog, "RELU").inputs[0]).dims == (1, 6, 6, 4)
    assert program(built, "nchw").ops() == ["CONV_2D", "RELU", "MAX_POOL_2D"]


@pytest.mark.parametrize(
    ("built", "reason"),
    [
        (model("Conv", [X4, ("w", F, [4, 4, 1, 1])], [Y4]), "weights W must be a constant"),
        (
            model("Clip", [X4, ("lo", F, []), ("hi", F, [])], [Y4], {"lo": np.float32(0), "hi": np.float32(5)}),
            "neither RELU6",
        ),
        (
            model(
                "Resize",
                [X4, ("roi", F, [0]), ("sc", F, [4])],
                [("y", F, [1, 4, 12, 12])],
                {"roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 2], np.float32)},
                mode="cubic",
            ),
            "mode 'cubic'",
        ),
        (
            model(
                "AveragePool",
                [X4],
                [("y", F, [1, 4, 6, 6])],
                kernel_shape=[3, 3],
                pads=[1, 1, 1, 1],
                count_include_pad=1,
            ),
            "count_include_pad=1",
        ),
        (
            model(
                "Split",
                [X4, ("s", I64, [2])],
                [("a", F, [1, 1, 6, 6]), ("b", F, [1, 3, 6, 6])],
                {"s": np.array([1, 3])},
                axis=1,
            ),
            "uneven split",
        ),
        (model("Relu", [("x", F, ["n", 4])], [("y", F, ["n", 4])]), "no static shape"),
        (model("Gather", [("x", F, [5, 3]), ("i", I64, [2])], [("y", F, [2, 3])]), "NNAPI has no tensor type"),
    ],
    ids=["conv-weights", "clip-range", "resize-cubic", "avgpool-include-pad", "split-uneven", "dynamic", "gather"],
)
def test_refusals_name_the_node_and_the_reason(built, reason):
    with pytest.raises(Untranslatable, match=reason) as caught:
        program(built)
    assert "node 'node'" in str(caught.value)
    assert reason in declines(built)["node"]


class _Recorder(Provider):
    """Claims what the NNAPI table claims and keeps the Partitions the core hands to compile()."""

    partitions: list = []

    def capability(self, graph, kernels):
        return table_claims(TABLE, graph)

    def compile(self, partition):
        _Recorder.partitions.append(partition)
        return CompiledPartition(partition.inputs, partition.outputs, lambda *values: [])


class _RecorderFactory(ProviderFactory):
    name, ort_name, priority = "nnapi_recorder", "NnapiExecutionProvider", -1

    def devices(self):
        return [Device("npu", 0, name="records partitions")]

    def create(self, device, options):
        return _Recorder(self, device)


class _Plugin:
    @onnxplug.hookimpl
    def onnxplug_provider_factories(self):
        return [_RecorderFactory()]


def _partitions(path):
    _Recorder.partitions = []
    environment = onnxplug.Environment(only=["cpu"])
    environment.register(_Plugin(), name="recorder")
    onnxplug.InferenceSession(
        path, providers=["NnapiExecutionProvider", "CPUExecutionProvider"], environment=environment
    )
    return list(_Recorder.partitions)


LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


@pytest.mark.parametrize("name", ["squeezenet", "resnet50", "shufflenet", "inception_v1"])
def test_light_model_partitions_translate(name):
    partitions = _partitions(os.path.join(LIGHT, f"light_{name}.onnx"))
    assert partitions
    for partition in partitions:
        prog = translate_partition(partition)
        check_signatures(prog)
        assert prog.input_names == partition.inputs and prog.output_names == partition.outputs
        nodes = {op.node for op in prog.operations}
        assert set(partition.nodes) <= nodes | _folded(partition)  # every node became operations
        for index, name_ in zip(prog.outputs, partition.outputs):
            value = next(v for v in partition.model.graph.output if v.name == name_)
            assert prog.operand(index).dims == tuple(d.dim_value for d in value.type.tensor_type.shape.dim)
        # spatial operations run in NHWC: none reads a 4-D operand whose dims are the NCHW ones of a model input
        assert all(prog.operand(i).code in (T_F32, T_I32) or prog.operand(i).is_scalar for i in prog.inputs)


def _folded(partition):
    return {n.name for n in partition.model.graph.node if n.op_type == "DequantizeLinear"}


def test_light_models_are_in_the_checkout():
    assert len(glob.glob(os.path.join(LIGHT, "light_*.onnx"))) >= 4


class _ClaimingFactory(NnapiProviderFactory):
    """The real NNAPI provider's capability(), with a device as on a phone; compile() records the
    partitions instead of loading libneuralnetworks.so (this checks the claim, not an execution)."""

    name = "nnapi_claims"

    def devices(self):
        return [Device("npu", 0, name="claims only")]

    def create(self, device, options):
        provider = _RecordingNnapi(self, device, parse_flags(options.get("nnapi_flags", "")))
        return provider


class _RecordingNnapi(NnapiProvider):
    def compile(self, partition):
        _Recorder.partitions.append(partition)
        return CompiledPartition(partition.inputs, partition.outputs, lambda *values: [])


class _ClaimingPlugin:
    @onnxplug.hookimpl
    def onnxplug_provider_factories(self):
        return [_ClaimingFactory()]


def test_the_provider_claims_only_what_the_translator_expresses():
    """Relu → Resize(cubic) → Relu: the table takes all three (rank-4 Resize), the translator has
    no cubic Resize, so the provider declines it with the translator's reason and claims the rest."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"], name="first"),
            helper.make_node("Resize", ["a", "", "scales"], ["b"], name="resize", mode="cubic"),
            helper.make_node("Relu", ["b"], ["y"], name="last"),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", F, [1, 2, 8, 8])],
        [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")],
    )
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    _Recorder.partitions = []
    environment = onnxplug.Environment(only=["cpu"])
    environment.register(_ClaimingPlugin(), name="claims")
    session = onnxplug.InferenceSession(
        built.SerializeToString(), providers=["NnapiExecutionProvider", "CPUExecutionProvider"], environment=environment
    )
    report = session.get_partition_report()
    placed = {n.name: n.provider for n in report.nodes}
    assert placed == {
        "first": "NnapiExecutionProvider",
        "resize": "CPUExecutionProvider",
        "last": "NnapiExecutionProvider",
    }
    reasons = report.declined["NnapiExecutionProvider"]["resize"]
    assert any("the NNAPI translator cannot express it: mode 'cubic'" in r for r in reasons)
    assert sorted(p.nodes for p in _Recorder.partitions) == [("first",), ("last",)]
