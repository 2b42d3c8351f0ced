"""The op library as a plugin: discovery, schemas, and conflicting schema declarations."""

from __future__ import annotations

import types

import numpy as np
import onnx
import onnx.defs
import pytest

import onnxplug
from onnxplug.errors import PluginError


def _schema_plugin(domain, op):
    @onnxplug.hookimpl
    def onnxplug_op_schemas():
        return [
            onnx.defs.OpSchema(
                op,
                domain,
                1,
                "",
                inputs=[onnx.defs.OpSchema.FormalParameter("X", "T")],
                outputs=[onnx.defs.OpSchema.FormalParameter("Y", "T")],
                type_constraints=[("T", ["tensor(float)"], "")],
            )
        ]

    return types.SimpleNamespace(onnxplug_op_schemas=onnxplug_op_schemas)


def test_two_plugins_declaring_one_schema_is_an_error_naming_both():
    env = onnxplug.Environment(entry_points=[])
    env.register(_schema_plugin("test.onnxplug.duplicate", "Twice"), name="first_library")
    with pytest.raises(PluginError) as info:
        env.register(_schema_plugin("test.onnxplug.duplicate", "Twice"), name="second_library")
    message = str(info.value)
    assert "first_library" in message and "second_library" in message
    assert "test.onnxplug.duplicate::Twice-1" in message


def test_redeclaring_a_com_microsoft_op_names_this_distribution():
    env = onnxplug.Environment()
    assert any(r.name == "ms_ops" and r.status == "loaded" for r in env.plugins)
    with pytest.raises(PluginError) as info:
        env.register(_schema_plugin("com.microsoft", "FastGelu"), name="impostor")
    assert "onnxplug-contrib-ms-ops" in str(info.value) and "impostor" in str(info.value)


def test_schemas_are_registered_and_shape_inference_runs():
    onnxplug.Environment()
    for domain, op in [
        ("com.microsoft", "Attention"),
        ("com.microsoft", "MatMulNBits"),
        ("", "SimplifiedLayerNormalization"),
    ]:
        assert onnx.defs.has(op, domain)
    node = onnx.helper.make_node("Attention", ["x", "w", "b"], ["y"], domain="com.microsoft", num_heads=2)
    graph = onnx.helper.make_graph(
        [node],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["B", "S", 8])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        initializer=[
            onnx.numpy_helper.from_array(np.zeros((8, 24), np.float32), "w"),
            onnx.numpy_helper.from_array(np.zeros(24, np.float32), "b"),
        ],
    )
    model = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("com.microsoft", 1)]
    )
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (output,) = session.get_outputs()
    assert output.type == "tensor(float)" and output.shape == ["B", "S", 8]


def test_kernels_are_offered_to_the_cpu_provider_only():
    env = onnxplug.Environment()
    fake = types.SimpleNamespace(name="not_cpu")
    hook = env.plugin_manager.hook.onnxplug_kernels
    per_plugin = {impl.plugin_name: impl.function(provider=fake) for impl in hook.get_hookimpls()}
    assert per_plugin["ms_ops"] == []


def test_onnx_reference_still_imports_after_the_schemas_are_registered():
    # onnx.reference refuses an op name declared in two domains (com.microsoft Gelu vs ONNX Gelu)
    # if it is first imported after they are registered; the plugin imports it beforehand.
    import subprocess
    import sys

    code = "import onnxplug; onnxplug.Environment(); from onnx.reference import ReferenceEvaluator; print('ok')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "ok", result.stderr


@pytest.mark.parametrize("library", ["ms_ops", "onnxplug-contrib-ms-ops"])
def test_a_blocked_library_loads_per_session(library):
    node = onnx.helper.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft")
    graph = onnx.helper.make_graph(
        [node],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])],
    )
    model = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("com.microsoft", 1)]
    )
    environment = onnxplug.Environment(block=["ms_ops"])
    # Fail (unknown op) in a fresh process; NotImplemented (no kernel) once another environment
    # registered the schemas, which onnx.defs keeps process-wide.
    with pytest.raises((onnxplug.Fail, onnxplug.NotImplemented), match="FastGelu"):
        onnxplug.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"], environment=environment
        )
    options = onnxplug.SessionOptions()
    options.register_custom_ops_library(library)
    session = onnxplug.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"], environment=environment
    )
    (y,) = session.run(None, {"x": np.array([-1.0, 0.0, 1.0, 2.0], np.float32)})
    np.testing.assert_allclose(y, [-0.158808, 0.0, 0.841192, 1.954598], atol=1e-5)


def _formals(params, type_attr):
    return [(p.name, str(p.option).split(".")[-1], getattr(p, type_attr)) for p in params]


def test_schemas_match_onnxruntimes(ort):
    """Names, input order, optionality, type constraints and attribute defaults equal onnxruntime's
    registrations, so its models mean the same thing here."""
    pybind = pytest.importorskip("onnxruntime.capi._pybind_state")
    onnxplug.Environment()
    ops = [
        ("com.microsoft", op)
        for op in (
            "FusedConv",
            "FusedGemm",
            "FusedMatMul",
            "Gelu",
            "FastGelu",
            "BiasGelu",
            "QuickGelu",
            "BiasAdd",
            "SkipLayerNormalization",
            "SkipSimplifiedLayerNormalization",
            "EmbedLayerNormalization",
            "Attention",
            "MultiHeadAttention",
            "GroupQueryAttention",
            "RotaryEmbedding",
            "MatMulNBits",
            "DynamicQuantizeMatMul",
            "MatMulIntegerToFloat",
            "QLinearAdd",
            "QLinearMul",
            "QLinearSigmoid",
            "QLinearLeakyRelu",
            "QLinearGlobalAveragePool",
            "QLinearConcat",
            "NhwcMaxPool",
            "Trilu",
        )
    ]
    ops += [("", "SimplifiedLayerNormalization"), ("", "LayerNormalization")]
    theirs = {(s.domain, s.name): s for s in pybind.get_all_operator_schema() if s.since_version == 1}
    for domain, op in ops:
        mine, their = onnx.defs.get_schema(op, 1, domain), theirs[(domain, op)]
        assert _formals(mine.inputs, "type_str") == _formals(their.inputs, "typeStr"), op
        assert _formals(mine.outputs, "type_str") == _formals(their.outputs, "typeStr"), op
        assert {c.type_param_str: sorted(c.allowed_type_strs) for c in mine.type_constraints} == {
            c.type_param_str: sorted(c.allowed_type_strs) for c in their.type_constraints
        }, op
        for name, attr in their.attributes.items():
            ours = mine.attributes[name]
            assert ours.required == attr.required, (op, name)
            want = onnx.AttributeProto.FromString(attr._default_value) if attr._default_value else None
            got = ours.default_value if ours.default_value and ours.default_value.type else None
            assert (got is None) == (want is None), (op, name)
            if want is not None:
                assert onnx.helper.get_attribute_value(got) == onnx.helper.get_attribute_value(want), (op, name)
        assert set(mine.attributes) == set(their.attributes), op


def _model_with(op, domain="com.microsoft", version=1):
    import onnx.helper as oh

    graph = oh.make_graph(
        [oh.make_node(op, ["x"], ["y"], domain=domain, name="the_node")],
        "g",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
    )
    opsets = [oh.make_opsetid("", 17), oh.make_opsetid(domain, version)]
    return oh.make_model(graph, opset_imports=opsets, ir_version=9).SerializeToString()


def test_contrib_op_this_library_lacks_is_named_as_missing_from_the_library():
    with pytest.raises(onnxplug.Fail) as info:
        onnxplug.InferenceSession(_model_with("QLinearGelu"), providers=["CPUExecutionProvider"])
    message = str(info.value)
    assert "com.microsoft:QLinearGelu(1)" in message and "'the_node'" in message
    assert "op library for domain 'com.microsoft' is installed, but it does not provide QLinearGelu" in message
