"""Every op the CoreML translator handles, one node at a time, on any machine.

Numeric where MIL computes values for constant inputs (the inputs are fed as MIL constants and
the values MIL's ``value_inference`` computes are compared with onnxplug's CPU provider);
structural where it does not (conv, pooling, batch/instance norm, upsampling, LRN, ...): the
built program's MIL op types, output shapes and dtypes.  Which ops fall in which group is the
cases with a ``mil=`` op below; a numeric case whose value MIL does not compute fails, and so
does a structural one that gains a value (it must become numeric).  Every case's program also
converts to an ML Program (coremltools' passes) at each deployment target and precision.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug

pytest.importorskip("coremltools", reason="the translator builds MIL programs with coremltools")

from onnxplug_coreml.table import TABLE, NotTranslated
from onnxplug_coreml.translate import Untranslatable, converters, declines, translate

RNG = np.random.default_rng(0)


def f32(*shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, shape).astype(np.float32)


def case(op, inputs, consts=None, attrs=None, opset=17, outputs=1, case_id=None, mil=None):
    """``inputs``: name → array fed at run time; ``consts``: name → initializer; input order is
    the dicts' order with ``""`` for an absent optional input (given as ``{"": None}`` entries)."""
    return pytest.param(op, inputs, consts or {}, attrs or {}, opset, outputs, mil, id=case_id or op)


X4 = f32(1, 3, 6, 6)
X2 = f32(3, 4)
X3 = f32(2, 3, 4)
B = f32(3, 4) > 0

CASES = [
    *(
        case(op, {"x": f32(2, 3, low=0.1, high=2.0)})
        for op in [
            "Relu",
            "Sigmoid",
            "Tanh",
            "Exp",
            "Log",
            "Sqrt",
            "Abs",
            "Erf",
            "Floor",
            "Ceil",
            "Sin",
            "Cos",
            "Softplus",
            "Identity",
            "Neg",
            "Reciprocal",
        ]
    ),
    case("Round", {"x": np.array([0.2, 1.7, -2.2, 3.4], np.float32)}),
    case("Not", {"x": B}),
    *(
        case(op, {"a": f32(3, 4), "b": f32(4)})
        for op in ["Add", "Sub", "Mul", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]
    ),
    case("Div", {"a": f32(3, 4), "b": f32(3, 4, low=0.5, high=2)}),
    case("Pow", {"a": f32(3, 4, low=0.5, high=2), "b": f32(3, 4)}),
    *(case(op, {"a": B, "b": ~B}) for op in ["And", "Or", "Xor"]),
    *(case(op, {"a": f32(3, 4), "b": f32(3, 4), "c": f32(4)}) for op in ["Max", "Min", "Sum", "Mean"]),
    case(
        "Add",
        {"a": np.arange(6, dtype=np.int64).reshape(2, 3), "b": np.int64(3) * np.ones(3, np.int64)},
        case_id="Add-int64",
    ),
    case("LeakyRelu", {"x": X2}, attrs={"alpha": 0.3}),
    case("Elu", {"x": X2}, attrs={"alpha": 0.7}),
    case("HardSigmoid", {"x": X2}, attrs={"alpha": 0.3, "beta": 0.4}),
    case("PRelu", {"x": X4}, consts={"slope": f32(3, 1, 1)}),
    case("Gelu", {"x": X2}, opset=20),
    case("Gelu", {"x": X2}, attrs={"approximate": "tanh"}, opset=20, case_id="Gelu-tanh"),
    case("Clip", {"x": X2}, consts={"min": np.float32(-0.2), "max": np.float32(0.5)}),
    case("Softmax", {"x": X3}, attrs={"axis": 1}),
    case("Softmax", {"x": X3}, attrs={"axis": 1}, opset=11, case_id="Softmax-11"),
    case("LogSoftmax", {"x": X3}),
    case("MatMul", {"a": f32(2, 3, 4), "b": f32(4, 5)}),
    case(
        "Gemm", {"a": f32(2, 4)}, consts={"b": f32(3, 4), "c": f32(3)}, attrs={"transB": 1, "alpha": 0.5, "beta": 2.0}
    ),
    case(
        "Gemm",
        {"a": f32(4, 2)},
        consts={"b": f32(4, 3), "c": f32(2, 3)},
        attrs={"transA": 1},
        case_id="Gemm-transA-C2d",
    ),
    case("LayerNormalization", {"x": X3}, consts={"s": f32(4), "b": f32(4)}, attrs={"axis": -1, "epsilon": 1e-5}),
    case(
        "LayerNormalization", {"x": X3, "s": f32(3, 4)}, attrs={"axis": 1}, case_id="LayerNormalization-runtime-scale"
    ),
    case("Cast", {"x": X2 * 5}, attrs={"to": TensorProto.INT32}),
    case("Cast", {"x": np.arange(4, dtype=np.int64)}, attrs={"to": TensorProto.FLOAT}, case_id="Cast-int64-float"),
    case("Reshape", {"x": X3}, consts={"shape": np.array([4, -1], np.int64)}),
    case("Flatten", {"x": X3}, attrs={"axis": 2}),
    case("Squeeze", {"x": f32(2, 1, 3)}, consts={"axes": np.array([1], np.int64)}),
    case("Unsqueeze", {"x": X2}, consts={"axes": np.array([0, 3], np.int64)}),
    case("Expand", {"x": f32(3, 1)}, consts={"shape": np.array([2, 3, 4], np.int64)}),
    case("Transpose", {"x": X3}, attrs={"perm": [2, 0, 1]}),
    case("Concat", {"a": X3, "b": f32(2, 1, 4)}, attrs={"axis": 1}),
    case("Split", {"x": f32(2, 6)}, consts={"split": np.array([2, 4], np.int64)}, attrs={"axis": 1}, outputs=2),
    case(
        "Split", {"x": f32(2, 7)}, attrs={"axis": 1, "num_outputs": 3}, opset=18, outputs=3, case_id="Split-uneven-18"
    ),
    case(
        "Slice",
        {"x": f32(4, 6)},
        consts={
            "starts": np.array([1, -1], np.int64),
            "ends": np.array([3, -7], np.int64),
            "axes": np.array([0, 1], np.int64),
            "steps": np.array([1, -2], np.int64),
        },
    ),
    case("Gather", {"x": f32(5, 3)}, consts={"i": np.array([[0, -1], [2, 3]], np.int64)}),
    case("Gather", {"x": f32(5, 3), "i": np.array([4, 0, 2], np.int64)}, attrs={"axis": 0}, case_id="Gather-runtime"),
    case(
        "GatherElements",
        {"x": f32(3, 4)},
        consts={"i": np.array([[0, 3], [1, 2], [2, 0]], np.int64)},
        attrs={"axis": 1},
    ),
    case("GatherND", {"x": f32(3, 4)}, consts={"i": np.array([[0, 1], [2, 3]], np.int64)}, mil="gather_nd"),
    case("Shape", {"x": X3}),
    case("Size", {"x": X3}),
    case(
        "ConstantOfShape",
        {},
        consts={"s": np.array([2, 3], np.int64)},
        attrs={"value": numpy_helper.from_array(np.array([1.5], np.float32))},
    ),
    case("Range", {}, consts={"a": np.int64(1), "b": np.int64(9), "d": np.int64(3)}),
    case("Where", {"c": B, "a": X2, "b": f32(3, 4)}),
    case("Tile", {"x": X2}, consts={"r": np.array([2, 1], np.int64)}),
    case("ArgMax", {"x": X3}, attrs={"axis": 1, "keepdims": 0}),
    case("ArgMin", {"x": X3}, attrs={"axis": 2}),
    case("ReduceSum", {"x": X3}, consts={"axes": np.array([1], np.int64)}),
    *(
        case(
            op, {"x": f32(2, 3, 4, low=0.1)}, consts={"axes": np.array([-1], np.int64)}, attrs={"keepdims": 0}, opset=18
        )
        for op in [
            "ReduceMean",
            "ReduceMax",
            "ReduceMin",
            "ReduceProd",
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSumExp",
            "ReduceSumSquare",
        ]
    ),
    case("ReduceMean", {"x": X3}, attrs={"axes": [0, 2]}, opset=13, case_id="ReduceMean-13-attr"),
    case("DepthToSpace", {"x": f32(1, 8, 2, 3)}, attrs={"blocksize": 2}),
    case("DepthToSpace", {"x": f32(1, 8, 2, 3)}, attrs={"blocksize": 2, "mode": "CRD"}, case_id="DepthToSpace-CRD"),
    case("Dropout", {"x": X2}),
    case("Pad", {"x": X3}, consts={"p": np.array([0, 1, 2, 1, 0, 3], np.int64), "v": np.float32(0.5)}),
    case(
        "Pad",
        {"x": X4},
        consts={"p": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)},
        attrs={"mode": "reflect"},
        case_id="Pad-reflect",
    ),
    case(
        "Pad",
        {"x": X4},
        consts={"p": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)},
        attrs={"mode": "edge"},
        case_id="Pad-edge",
    ),
    # float16 values: MIL takes no mixed-type arithmetic, so constants next to them are float16 too
    *(
        case(op, {"x": f32(3, 4).astype(np.float16)}, case_id=f"{op}-fp16")
        for op in ["Neg", "Reciprocal", "Relu", "Softmax"]
    ),
    case(
        "PRelu",
        {"x": f32(1, 3, 2, 2).astype(np.float16)},
        consts={"s": f32(3, 1, 1).astype(np.float16)},
        case_id="PRelu-fp16",
    ),
    case(
        "Clip",
        {"x": f32(3, 4).astype(np.float16)},
        consts={"lo": np.float16(-0.2), "hi": np.float16(0.5)},
        case_id="Clip-fp16",
    ),
    case("Mean", {"a": f32(3, 4).astype(np.float16), "b": f32(3, 4).astype(np.float16)}, case_id="Mean-fp16"),
    case(
        "Gemm",
        {"a": f32(2, 4).astype(np.float16)},
        consts={"b": f32(4, 3).astype(np.float16), "c": f32(3).astype(np.float16)},
        attrs={"alpha": 0.5},
        case_id="Gemm-fp16",
    ),
    case(
        "LayerNormalization",
        {"x": X3.astype(np.float16)},
        consts={"s": f32(4).astype(np.float16), "b": f32(4).astype(np.float16)},
        case_id="LayerNormalization-fp16",
    ),
    case(
        "Pad",
        {"x": X3.astype(np.float16)},
        consts={"p": np.array([0, 1, 0, 0, 1, 0], np.int64), "v": np.float16(2)},
        case_id="Pad-fp16",
    ),
    case(
        "BatchNormalization",
        {"x": f32(4, 3).astype(np.float16)},
        consts={k: f32(3, low=0.5).astype(np.float16) for k in "sbmv"},
        case_id="BatchNormalization-2d-fp16",
    ),
    case(
        "Conv",
        {"x": X4.astype(np.float16)},
        consts={"w": f32(2, 3, 3, 3).astype(np.float16), "b": f32(2).astype(np.float16)},
        case_id="Conv-fp16",
        mil="conv",
    ),
    case(
        "BatchNormalization",
        {"x": X4.astype(np.float16)},
        consts={k: f32(3, low=0.5).astype(np.float16) for k in "sbmv"},
        case_id="BatchNormalization-fp16",
        mil="batch_norm",
    ),
    # structural: MIL computes no value for these
    case(
        "Conv",
        {"x": X4},
        consts={"w": f32(4, 3, 3, 3), "b": f32(4)},
        attrs={"pads": [1, 0, 1, 2], "strides": [2, 1]},
        mil="conv",
    ),
    case(
        "Conv",
        {"x": f32(1, 4, 9)},
        consts={"w": f32(4, 2, 3)},
        attrs={"group": 2, "dilations": [2]},
        case_id="Conv-1d-grouped",
        mil="conv",
    ),
    case(
        "Conv",
        {"x": X4},
        consts={"w": f32(2, 3, 3, 3)},
        attrs={"auto_pad": "SAME_UPPER"},
        case_id="Conv-same",
        mil="conv",
    ),
    case(
        "ConvTranspose",
        {"x": X4},
        consts={"w": f32(3, 2, 3, 3), "b": f32(2)},
        attrs={"strides": [2, 2], "pads": [1, 1, 1, 1]},
        mil="conv_transpose",
    ),
    case("MaxPool", {"x": X4}, attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, mil="max_pool"),
    case(
        "MaxPool",
        {"x": X4},
        attrs={"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
        case_id="MaxPool-ceil",
        mil="max_pool",
    ),
    case(
        "AveragePool",
        {"x": X4},
        attrs={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
        mil="avg_pool",
    ),
    case("GlobalAveragePool", {"x": X4}),
    case("GlobalMaxPool", {"x": X4}),
    case(
        "BatchNormalization",
        {"x": X4},
        consts={"s": f32(3), "b": f32(3), "m": f32(3), "v": f32(3, low=0.5)},
        mil="batch_norm",
    ),
    case(
        "BatchNormalization",
        {"x": f32(4, 3)},
        consts={"s": f32(3), "b": f32(3), "m": f32(3), "v": f32(3, low=0.5)},
        case_id="BatchNormalization-2d",
    ),
    case("InstanceNormalization", {"x": X4}, consts={"s": f32(3), "b": f32(3)}, mil="instance_norm"),
    case("LRN", {"x": X4}, attrs={"size": 3}, mil="local_response_norm"),
    case(
        "Resize",
        {"x": X4},
        consts={"": None, "scales": np.array([1, 1, 2, 2], np.float32)},
        attrs={"mode": "nearest"},
        mil="upsample_nearest_neighbor",
    ),
    case(
        "Resize",
        {"x": X4},
        consts={"": None, "_": None, "sizes": np.array([1, 3, 9, 12], np.int64)},
        attrs={"mode": "linear"},
        case_id="Resize-linear-half-pixel",
        mil="upsample_bilinear",
    ),
    case(
        "Resize",
        {"x": X4},
        consts={"": None, "scales": np.array([1, 1, 2, 2], np.float32)},
        attrs={"mode": "linear", "coordinate_transformation_mode": "align_corners"},
        case_id="Resize-linear-align",
        mil="upsample_bilinear",
    ),
]

#: (minimum_deployment_target, precision) pairs a case's program is converted under, in turn.
SETTINGS = [("iOS15", "FP32"), ("iOS16", "FP16"), ("iOS17", "FP32"), ("iOS18", "FP16")]


def _model(op, inputs, consts, attrs, opset, outputs):
    names = list(inputs) + list(consts)
    graph_inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in inputs.items()
    ]
    initializers = [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items() if v is not None]
    node_inputs = [n if consts.get(n, 0) is not None else "" for n in names]
    out_names = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, node_inputs, out_names, name="node", **attrs)
    graph = helper.make_graph(
        [node], "g", graph_inputs, [helper.make_value_info(n, onnx.TypeProto()) for n in out_names], initializers
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _cpu(model, inputs):
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(inputs))


@pytest.mark.parametrize("op,inputs,consts,attrs,opset,outputs,mil", CASES)
def test_op(op, inputs, consts, attrs, opset, outputs, mil):
    model = _model(op, inputs, consts, attrs, opset, outputs)
    expected = _cpu(model, inputs)
    assert declines(model) == {}
    built = translate(model, target="iOS15")  # with placeholders: the program the package holds
    function = built.program.functions["main"]
    for var, want, spec in zip(function.outputs, expected, built.outputs):
        assert tuple(var.shape) == want.shape == spec.shape
        assert spec.numpy_dtype == want.dtype
    if mil is not None:  # structural: the MIL op that carries it, its shapes and dtypes
        assert mil in {o.op_type for o in function.operations}
        assert all(o.val is None for o in translate(model, constant_inputs=inputs).output_vars)  # else make it numeric
        return
    numeric = translate(model, constant_inputs=inputs)
    for var, want in zip(numeric.output_vars, expected):
        assert var.val is not None, f"MIL computed no value for {op}: move it to the structural cases"
        got = np.asarray(var.val)
        if want.dtype == np.bool_:
            np.testing.assert_array_equal(got.astype(bool), want)
        else:
            tolerance = 3e-3 if want.dtype == np.float16 else 2e-5
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize(
    "index",
    [
        pytest.param(i, id=c.id, marks=() if c.values[-1] else pytest.mark.slow)  # structural ones always
        for i, c in enumerate(CASES)
    ],
)
def test_op_converts_to_an_ml_program(index):
    from onnxplug_coreml.package import Settings, convert

    op, inputs, consts, attrs, opset, outputs, _ = CASES[index].values
    target, precision = SETTINGS[index % len(SETTINGS)]
    model = _model(op, inputs, consts, attrs, opset, outputs)
    spec = convert(translate(model, target=target), Settings(target=target, precision=precision)).get_spec()
    assert spec.WhichOneof("Type") == "mlProgram"
    assert len(spec.description.output) == outputs


def test_every_converter_has_a_case_and_every_table_row_a_converter():
    covered = {c.values[0] for c in CASES}
    handled = {op for domain, op in converters() if domain == ""}
    assert handled - covered == set()
    for row in TABLE.rows:
        if any(isinstance(check, NotTranslated) for check in row.checks):
            assert (row.domain, row.op_type) not in converters()
        else:
            assert (row.domain, row.op_type) in converters(), row.op_type
    assert {op for _, op in converters()} - {r.op_type for r in TABLE.rows} == set()


def _single(op, inputs, consts=None, attrs=None, opset=17):
    return _model(op, inputs, consts or {}, attrs or {}, opset, 1)


@pytest.mark.parametrize(
    "model,reason",
    [
        (_single("Conv", {"x": X4, "w": f32(2, 3, 1, 1), "b": f32(2)}), "bias B ('b') must be a constant"),
        (_single("Div", {"a": np.ones(3, np.int64), "b": np.ones(3, np.int64)}), "integer Div truncates"),
        (_single("MaxPool", {"x": X4}, attrs={"kernel_shape": [2, 2], "dilations": [2, 2]}), "dilated pooling"),
        (_single("Resize", {"x": X4}, {"": None, "s": np.array([1, 1, 1.5, 1.5], np.float32)}), "integer upscaling"),
        (_single("Pad", {"x": X3}, {"p": np.array([0, 0, -1, 0, 0, 0], np.int64)}), "negative pads"),
        (_single("Cast", {"x": X2}, attrs={"to": TensorProto.DOUBLE}), "Cast to double has no Core ML type"),
        (_single("Relu", {"x": np.ones(3, np.float64)}), "'x' is double, which Core ML has no tensor type for"),
        (
            _single("Slice", {"x": X2, "s": np.array([0], np.int64), "e": np.array([1], np.int64)}),
            "starts ('s') must be a constant",
        ),
        (_single("Det", {"x": f32(3, 3)}), "no MIL form for this op"),
    ],
    ids=[
        "conv-bias",
        "int-div",
        "dilated-pool",
        "resize-fraction",
        "negative-pad",
        "cast-double",
        "float64",
        "slice",
        "Det",
    ],
)
def test_refusals_name_the_node_and_the_reason(model, reason):
    refused = declines(model)
    assert list(refused) == ["node"] and reason in refused["node"]
    with pytest.raises(Untranslatable, match="CoreML cannot run"):
        translate(model)


def test_dynamic_shapes_are_refused_with_the_fix():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert "has dynamic dimensions ['batch', 4]; fix them first (--dim NAME=VALUE)" in declines(model)["relu"]


def test_io_names_and_types_cross_the_border_as_ml_program_arrays():
    """int64 and bool inputs/outputs are int32 multi-arrays; names become MIL identifiers."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["input.1"], ["mask/out"], to=TensorProto.BOOL, name="cast"),
            helper.make_node("Identity", ["input.1"], ["ids:copy"], name="copy"),
        ],
        "g",
        [helper.make_tensor_value_info("input.1", TensorProto.INT64, [2, 3])],
        [
            helper.make_tensor_value_info("mask/out", TensorProto.BOOL, [2, 3]),
            helper.make_tensor_value_info("ids:copy", TensorProto.INT64, [2, 3]),
        ],
    )
    built = translate(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert [(s.onnx_name, s.mil_name, s.io_dtype) for s in built.inputs] == [("input.1", "input_1", "int32")]
    assert [(s.mil_name, s.io_dtype, s.numpy_dtype) for s in built.outputs] == [
        ("mask_out", "int32", np.dtype(bool)),
        ("ids_copy", "int32", np.dtype(np.int64)),
    ]
    assert [v.name for v in built.program.functions["main"].outputs] == ["mask_out", "ids_copy"]
