"""Models that can never run are refused at session creation, with onnxruntime's class.

Each test builds a model that breaks one rule; where onnxruntime raises, the class is checked
against it (onnxruntime is a test-only oracle, skipped when absent).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug
from onnxplug.testing import make_model

F = TensorProto.FLOAT


def _session(model: onnx.ModelProto) -> onnxplug.InferenceSession:
    return onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _ort_class(model: onnx.ModelProto) -> str | None:
    """The class name onnxruntime raises for ``model`` (``None`` when it loads)."""
    ort = pytest.importorskip("onnxruntime", reason="comparing error classes needs onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # noqa: BLE001 - the class is what is compared
        return type(error).__name__
    return None


def _relu(**attrs) -> onnx.ModelProto:
    return make_model([helper.make_node("Relu", ["x"], ["y"], **attrs)], [("x", F, [3])], [("y", F, [3])])


def _softmax(axis) -> onnx.ModelProto:
    return make_model([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], [("x", F, [2, 3])], [("y", F, [2, 3])])


# -- attributes against the schema ---------------------------------------------------------


@pytest.mark.parametrize(("value", "actual"), [(1.5, "FLOAT"), ("a", "STRING"), ([1], "INTS")])
def test_attribute_of_the_wrong_type(value, actual):
    model = _softmax(value)
    with pytest.raises(onnxplug.InvalidGraph, match=rf"'Softmax'.*'axis'. Expected: 'INT', actual: '{actual}'"):
        _session(model)
    assert _ort_class(model) == "InvalidGraph"


def test_missing_required_attribute():
    model = make_model([helper.make_node("Cast", ["x"], ["y"], name="c")], [("x", F, [3])], [("y", F, [3])])
    with pytest.raises(onnxplug.InvalidGraph, match=r"node 'c' \(Cast\): Required attribute 'to' is missing"):
        _session(model)
    assert _ort_class(model) == "InvalidGraph"


def test_unknown_attribute_in_a_standard_domain():
    model = _relu(foo=1)
    with pytest.raises(onnxplug.InvalidGraph, match="Unrecognized attribute: foo for operator Relu"):
        _session(model)
    assert _ort_class(model) == "InvalidGraph"


@pytest.mark.parametrize(
    ("node", "opset", "message"),
    [
        (helper.make_node("Gemm", ["x", "w"], ["y"], name="g"), 9, r"'g' \(Gemm\) has 2 inputs; .*opset 9\) takes 3"),
        (helper.make_node("Relu", ["x", "x"], ["y"], name="r"), 14, r"node 'r' \(Relu\) has 2 inputs; .* takes 1"),
        (helper.make_node("Relu", ["x"], ["y", "z"], name="r"), 14, r"node 'r' \(Relu\) has 2 outputs; .* takes 1"),
        (helper.make_node("Concat", [], ["y"], name="c", axis=0), 13, r"'c' \(Concat\) has 0 inputs; .* at least 1"),
    ],
    ids=["too-few", "too-many", "outputs", "variadic-empty"],
)
def test_input_and_output_counts_outside_the_schema(node, opset, message):
    """A node with more or fewer inputs or outputs than its schema allows is refused at session
    creation, as onnxruntime refuses it, not at its first run."""
    inputs = [("x", F, [2, 2]), ("w", F, [2, 2])]
    model = make_model([node], inputs, [("y", F, None)], opset=opset)
    with pytest.raises(onnxplug.InvalidGraph, match=message):
        _session(model)
    assert _ort_class(model) in ("InvalidGraph", "Fail")


def test_optional_inputs_left_empty_count_as_given():
    """An omitted optional input written as an empty name counts, as onnxruntime counts it: a
    Clip with ``["x", "", "hi"]`` has three inputs, within its schema's one to three."""
    node = helper.make_node("Clip", ["x", "", "hi"], ["y"])
    model = make_model([node], [("x", F, [3])], [("y", F, [3])], {"hi": np.array(1.0, np.float32)})
    got = _session(model).run(None, {"x": np.array([-2.0, 0.5, 3.0], np.float32)})[0]
    np.testing.assert_array_equal(got, [-2.0, 0.5, 1.0])


def test_attribute_checked_inside_a_subgraph():
    then = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["t"], name="inner", axis=1.5)],
        "then",
        [],
        [helper.make_tensor_value_info("t", F, [2, 3])],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, [2, 3])]
    )
    model = make_model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        [("c", TensorProto.BOOL, []), ("x", F, [2, 3])],
        [("y", F, [2, 3])],
    )
    with pytest.raises(onnxplug.InvalidGraph, match=r"node 'inner' \(Softmax\): Mismatched attribute type"):
        _session(model)
    assert _ort_class(model) == "InvalidGraph"


def test_custom_domain_attribute_type_is_checked():
    """A schema an op library registers counts like a standard one."""
    schema = onnx.defs.OpSchema(
        "ValidateProbe",
        "test.validation",
        1,
        inputs=[onnx.defs.OpSchema.FormalParameter("x", "T")],
        outputs=[onnx.defs.OpSchema.FormalParameter("y", "T")],
        type_constraints=[("T", ["tensor(float)"], "")],
        attributes=[onnx.defs.OpSchema.Attribute("alpha", onnx.defs.OpSchema.AttrType.FLOAT, "")],
    )
    try:
        onnx.defs.get_schema("ValidateProbe", 1, "test.validation")
    except onnx.defs.SchemaError:
        onnx.defs.register_schema(schema)
    node = helper.make_node("ValidateProbe", ["x"], ["y"], domain="test.validation", alpha="high")
    model = make_model([node], [("x", F, [3])], [("y", F, [3])], extra_opsets={"test.validation": 1})
    with pytest.raises(onnxplug.InvalidGraph, match="'alpha'. Expected: 'FLOAT', actual: 'STRING'"):
        _session(model)


# -- names ---------------------------------------------------------------------------------


def test_duplicate_initializer_names():
    model = make_model(
        [helper.make_node("Add", ["x", "w"], ["y"])], [("x", F, [3])], [("y", F, [3])], {"w": np.ones(3, np.float32)}
    )
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(3, np.float32), "w"))
    with pytest.raises(onnxplug.InvalidGraph, match="initializer 'w' is defined twice"):
        _session(model)


@pytest.mark.parametrize("case", ["two nodes", "graph input", "initializer"])
def test_duplicate_value_names(case):
    if case == "two nodes":
        nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"], name="second")]
        model, name = make_model(nodes, [("x", F, [3])], [("y", F, [3])]), "y"
    elif case == "graph input":
        nodes = [helper.make_node("Relu", ["x"], ["x"], name="second"), helper.make_node("Neg", ["x"], ["y"])]
        model, name = make_model(nodes, [("x", F, [3])], [("y", F, [3])]), "x"
    else:
        nodes = [helper.make_node("Add", ["x", "w"], ["w"], name="second")]
        model = make_model(nodes, [("x", F, [3])], [("w", F, [3])], {"w": np.ones(3, np.float32)})
        name = "w"
    with pytest.raises(onnxplug.Fail, match=rf"Duplicate definition of name \({name}\).*node 'second'"):
        _session(model)
    assert _ort_class(model) == "Fail"


def test_graph_input_without_a_type():
    model = _relu()
    model.graph.input[0].ClearField("type")
    with pytest.raises(onnxplug.Fail, match=r"Model input \(x\) does not have type information"):
        _session(model)
    assert _ort_class(model) == "Fail"


def test_model_without_opset_import():
    model = _relu()
    del model.opset_import[:]
    with pytest.raises(onnxplug.Fail, match="Missing opset in the model"):
        _session(model)
    assert _ort_class(model) == "Fail"


# -- tensor payloads -----------------------------------------------------------------------


def _identity_of(tensor: onnx.TensorProto, elem: int) -> onnx.ModelProto:
    model = make_model([helper.make_node("Identity", ["w"], ["y"])], [], [("y", elem, [2])])
    model.graph.initializer.append(tensor)
    return model


def _tensor(data_type: int, raw: bytes) -> onnx.TensorProto:
    tensor = onnx.TensorProto(name="w", data_type=data_type, dims=[2])
    tensor.raw_data = raw
    return tensor


def test_string_tensor_in_raw_data():
    model = _identity_of(_tensor(TensorProto.STRING, b"abcd"), TensorProto.STRING)
    with pytest.raises(onnxplug.Fail, match="initializer 'w': string tensor can not have raw data"):
        _session(model)
    assert _ort_class(model) == "Fail"


def test_undefined_data_type():
    model = _identity_of(_tensor(TensorProto.UNDEFINED, b"abcdefgh"), F)
    with pytest.raises(onnxplug.Fail, match="initializer 'w' has data type UNDEFINED"):
        _session(model)
    assert _ort_class(model) == "Fail"


def test_raw_data_of_the_wrong_length():
    model = _identity_of(_tensor(F, b"abcdef"), F)
    with pytest.raises(onnxplug.Fail, match="initializer 'w' holds 6 bytes of raw data but its shape"):
        _session(model)
    assert _ort_class(model) == "Fail"


def test_constant_attribute_tensor_checked():
    value = _tensor(TensorProto.STRING, b"ab")
    model = make_model(
        [helper.make_node("Constant", [], ["y"], name="k", value=value)], [], [("y", TensorProto.STRING, [2])]
    )
    with pytest.raises(onnxplug.Fail, match="attribute 'value' of node 'k'.*string tensor can not have raw data"):
        _session(model)


# -- duplicate opset imports ---------------------------------------------------------------


def test_duplicate_opset_import_at_one_version_is_accepted():
    """skl2onnx writes ('', N) twice; onnxruntime accepts it."""
    model = _relu()
    model.opset_import.append(helper.make_opsetid("", 17))
    model.opset_import.append(helper.make_opsetid("ai.onnx", 17))
    (y,) = _session(model).run(None, {"x": np.array([-1, 0, 2], np.float32)})
    np.testing.assert_array_equal(y, [0, 0, 2])
    assert _ort_class(model) is None


def test_duplicate_opset_import_at_two_versions():
    model = _relu()
    model.opset_import.append(helper.make_opsetid("", 13))
    with pytest.raises(onnxplug.InvalidGraph, match="domain 'ai.onnx' twice, at versions 17 and 13"):
        _session(model)


def test_duplicate_opset_import_in_a_function():
    body = [helper.make_node("Relu", ["a"], ["b"])]
    function = helper.make_function(
        "local", "MyRelu", ["a"], ["b"], body, [helper.make_opsetid("", 17), helper.make_opsetid("", 17)]
    )
    model = make_model(
        [helper.make_node("MyRelu", ["x"], ["y"], domain="local")],
        [("x", F, [3])],
        [("y", F, [3])],
        extra_opsets={"local": 1},
    )
    model.functions.append(function)
    (y,) = _session(model).run(None, {"x": np.array([-1, 0, 2], np.float32)})
    np.testing.assert_array_equal(y, [0, 0, 2])
    model.functions[0].opset_import[1].version = 13  # append() copied the function
    with pytest.raises(onnxplug.InvalidGraph, match="function 'local::MyRelu' imports domain 'ai.onnx' twice"):
        _session(model)


def test_scikit_learn_model_loads():
    """The model that made this rule matter: skl2onnx's converter output."""
    skl2onnx = pytest.importorskip("skl2onnx", reason="needs skl2onnx to convert a scikit-learn model")
    linear_model = pytest.importorskip("sklearn.linear_model", reason="needs scikit-learn")
    x = np.random.default_rng(0).random((20, 3), dtype=np.float32)
    model = linear_model.LinearRegression().fit(x, x @ np.array([1.0, 2.0, 3.0], np.float32))
    proto = skl2onnx.to_onnx(model, x[:1], target_opset=17)
    proto.opset_import.append(helper.make_opsetid("", 17))  # as newer skl2onnx releases write it
    session = onnxplug.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(y.ravel(), model.predict(x), rtol=1e-5)
