"""The CoreML provider on this (non-macOS) machine: no device, with the reason; sessions asking
for it fall back (or fail with fallback off) saying why; planning works from its table; the
options parse as onnxruntime's CoreML EP names them."""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxplug
import onnxplug_coreml.plugin
from onnxplug.errors import InvalidArgument
from onnxplug.partition.targets import find_table, plan_for_target
from onnxplug_coreml.package import Settings, parse_settings
from onnxplug_coreml.provider import CoremlProviderFactory, detect
from onnxplug_coreml.table import TABLE

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
off_macos = pytest.mark.skipif(sys.platform == "darwin", reason="these check detection off macOS")


def _environment():
    environment = onnxplug.Environment(only=["cpu"])
    environment.register(onnxplug_coreml.plugin, name="coreml")
    return environment


def _relu() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@off_macos
def test_detection_reports_no_device_with_the_reason():
    assert detect().startswith(f"CoreML prediction needs macOS (this is {sys.platform})")
    factory = CoremlProviderFactory()
    assert factory.devices() == []
    assert factory.unavailable_reason().startswith("CoreML prediction needs macOS")


@off_macos
def test_not_listed_as_available_and_sessions_say_why():
    environment = _environment()
    assert environment.factory("CoreMLExecutionProvider") is not None
    assert "CoreMLExecutionProvider" not in [f.ort_name for f in environment.available_factories()]
    with pytest.warns(UserWarning, match="CoreML prediction needs macOS"):
        session = onnxplug.InferenceSession(_relu(), providers=["CoreMLExecutionProvider"], environment=environment)
    assert session.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(InvalidArgument, match="CoreML prediction needs macOS"):
        onnxplug.InferenceSession(
            _relu(), providers=["CoreMLExecutionProvider"], environment=environment, enable_fallback=0
        )


def test_discovery_does_not_import_coremltools():
    """The hooks and the table are import-light: planning never needs coremltools."""
    import subprocess

    code = (
        "import sys, onnxplug_coreml.plugin as p; f = p.onnxplug_provider_factories()[0]; f.capability_table(); "
        "f.devices(); print('coremltools' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_factory_hands_out_its_table():
    assert CoremlProviderFactory().capability_table() is TABLE
    assert find_table("coreml", _environment()) is TABLE
    assert find_table("CoreMLExecutionProvider", _environment()) is TABLE
    assert TABLE.static_shapes and TABLE.memory is None
    assert TABLE.source.startswith("onnxruntime 1.32.0 coreml_supported_mlprogram_ops.md")
    assert all(onnx.defs.has(op, domain) for domain, op in TABLE.ops if domain == "")


def test_options_follow_onnxruntimes_names_and_the_issues():
    assert parse_settings({}) == Settings()
    assert parse_settings({"MLComputeUnits": "CPUAndNeuralEngine"}).compute_units == "CPU_AND_NE"
    assert parse_settings({"compute_units": "CPU_AND_GPU"}).compute_units == "CPU_AND_GPU"
    assert parse_settings({"AllowLowPrecisionAccumulationOnGPU": "1"}).precision == "FP16"
    assert parse_settings({"precision": "FP16", "minimum_deployment_target": "iOS17"}).package_options() == {
        "precision": "FP16",
        "minimum_deployment_target": "iOS17",
        "format": "MLProgram",
    }
    assert parse_settings({"ModelCacheDirectory": "/tmp/x"}).model_cache_dir == "/tmp/x"
    with pytest.raises(InvalidArgument, match="ML Programs only"):
        parse_settings({"ModelFormat": "NeuralNetwork"})
    with pytest.raises(InvalidArgument, match="compute units 'GPU'"):
        parse_settings({"MLComputeUnits": "GPU"})
    with pytest.raises(InvalidArgument, match="precision 'INT8'"):
        parse_settings({"precision": "INT8"})
    with pytest.raises(InvalidArgument, match="minimum_deployment_target 'iOS11'"):
        parse_settings({"minimum_deployment_target": "iOS11"})
    with pytest.raises(InvalidArgument, match="fixed-shape programs only"):
        parse_settings({"RequireStaticInputShapes": "0"})


def _conv_model(bias_computed: bool, pool_rank: int = 4) -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv")]
    inits = [onnx.numpy_helper.from_array(np.ones((2, 3, 1, 1), np.float32), "w")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])]
    if bias_computed:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [2]))
    else:
        inits.append(onnx.numpy_helper.from_array(np.zeros(2, np.float32), "b"))
    nodes.append(helper.make_node("Relu", ["c"], ["r"], name="relu"))
    nodes.append(helper.make_node("Det", ["r2"], ["d"], name="det"))
    nodes.insert(2, helper.make_node("Reshape", ["r", "shape"], ["r2"], name="reshape"))
    inits.append(onnx.numpy_helper.from_array(np.array([8, 4], np.int64), "shape"))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("d", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_plan_claims_what_the_table_accepts_and_says_why_not():
    plan = plan_for_target(_conv_model(bias_computed=True), "coreml", environment=_environment())
    assert plan.provider == "CoreMLExecutionProvider"
    assert plan.claimed == ("relu", "reshape")
    assert "Bias ('b') must be a constant initializer" in plan.declined["conv"][0]
    assert plan.declined["det"] == ("ai.onnx::Det is not in the coreml table",)
    plan = plan_for_target(_conv_model(bias_computed=False), "coreml", environment=_environment())
    assert plan.claimed == ("conv", "relu", "reshape") and plan.fallback == ("det",)


def test_partition_target_coreml_and_check_model_usability(capsys):
    from onnxplug.cli import main
    from onnxplug.partition.targets import check_usability

    path = os.path.join(LIGHT, "light_resnet50.onnx")
    assert main(["partition", path, "--target", "coreml"]) == 0
    out = capsys.readouterr().out
    assert "coreml would run 176 of 176 nodes (100%) in 1 partition" in out
    assert "CoreMLExecutionProvider: 176 nodes" in out
    assert check_usability(path, "coreml", ["--require-all"]) == 0
    assert "plan for CoreMLExecutionProvider" in capsys.readouterr().out


def test_resize_rows_share_the_translators_conditions():
    def resize(scales, mode):
        graph = helper.make_graph(
            [helper.make_node("Resize", ["x", "", "s"], ["y"], name="resize", mode=mode)],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [onnx.numpy_helper.from_array(np.array(scales, np.float32), "s")],
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    assert plan_for_target(resize([1, 1, 2, 2], "nearest"), "coreml").claimed == ("resize",)
    declined = plan_for_target(resize([1, 1, 1.5, 1.5], "nearest"), "coreml").declined["resize"][0]
    assert "nearest Resize needs integer upscaling factors" in declined
    declined = plan_for_target(resize([1, 1, 2, 2], "cubic"), "coreml").declined["resize"][0]
    assert "mode='cubic' has no MIL form" in declined


@off_macos
def test_the_execution_path_up_to_predict_with_detection_forced(monkeypatch, tmp_path):
    """With detection forced, a session claims, translates, packages and loads each partition
    here too; only Core ML's predict is missing, and the run fails with its reason."""
    pytest.importorskip("coremltools", reason="the execution path builds packages with coremltools")
    import onnxplug_coreml.provider as provider

    monkeypatch.setattr(provider, "detect", lambda: "")
    options = onnxplug.SessionOptions()
    options.add_session_config_entry("session.compile_cache_dir", str(tmp_path))
    session = onnxplug.InferenceSession(
        _conv_model(bias_computed=False).SerializeToString(),
        options,
        providers=["CoreMLExecutionProvider", "CPUExecutionProvider"],
        environment=_environment(),
    )
    report = session.get_partition_report()
    assert report.counts == {"CoreMLExecutionProvider": 3, "CPUExecutionProvider": 1}
    assert any(name.endswith(".bin") for name in os.listdir(tmp_path))  # the package, in the compile cache
    with pytest.raises(Exception, match="only supported on macOS"):
        session.run(None, {"x": np.ones((1, 3, 4, 4), np.float32)})
