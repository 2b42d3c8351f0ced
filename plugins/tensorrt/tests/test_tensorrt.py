"""The TensorRT provider on this machine (no GPU, no TensorRT SDK): no device, with the reason,
found without creating any TensorRT object; sessions asking for it fall back (or fail) saying
why; the option parsing; planning works from its table.  The engine path is not exercised."""

from __future__ import annotations

import sys
import types

import onnx
import pytest
from onnx import TensorProto, helper

import onnxplug
import onnxplug_tensorrt.plugin
from onnxplug.errors import InvalidArgument
from onnxplug.partition.targets import find_table
from onnxplug_tensorrt._engine import parse_settings
from onnxplug_tensorrt.provider import TensorrtProviderFactory, detect
from onnxplug_tensorrt.table import TABLE


def _environment():
    environment = onnxplug.Environment(only=["cpu"])
    environment.register(onnxplug_tensorrt.plugin, name="tensorrt")
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


def _cuda_available() -> bool:
    try:
        import cupy

        return bool(cupy.cuda.is_available())
    except Exception:  # noqa: BLE001 - any failure means no CUDA here
        return False


needs_no_gpu = pytest.mark.skipif(_cuda_available(), reason="these check detection on a machine without CUDA")


@needs_no_gpu
def test_detection_reports_no_device_with_the_reason():
    devices, reason = detect()
    assert devices == []
    assert reason.startswith(("cupy is not installed", "no CUDA device"))
    factory = TensorrtProviderFactory()
    assert factory.devices() == [] and factory.unavailable_reason() == reason


def test_cuda_is_checked_before_tensorrt_is_imported(monkeypatch):
    """Without a usable GPU, TensorRT is never imported (a Runtime made then crashes on use)."""
    fake_cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False))
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.delitem(sys.modules, "tensorrt", raising=False)
    devices, reason = detect()
    assert devices == [] and reason.startswith("no CUDA device")
    assert "tensorrt" not in sys.modules


@needs_no_gpu
def test_not_listed_as_available_and_sessions_say_why():
    environment = _environment()
    reason = TensorrtProviderFactory().unavailable_reason()
    assert environment.factory("TensorrtExecutionProvider") is not None
    assert "TensorrtExecutionProvider" not in [f.ort_name for f in environment.available_factories()]
    assert "TensorrtExecutionProvider" not in onnxplug.get_available_providers()
    with pytest.warns(UserWarning, match=reason.split(" (")[0]):
        session = onnxplug.InferenceSession(_relu(), providers=["TensorrtExecutionProvider"], environment=environment)
    assert session.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(InvalidArgument, match="TensorrtExecutionProvider"):
        onnxplug.InferenceSession(
            _relu(), providers=["TensorrtExecutionProvider"], environment=environment, enable_fallback=0
        )


def test_options_follow_onnxruntimes_names():
    settings = parse_settings(
        {
            "trt_fp16_enable": "1",
            "trt_int8_enable": "true",
            "trt_max_workspace_size": "1073741824",
            "trt_profile_min_shapes": "x:1x3x224x224,mask:1x8",
            "trt_profile_opt_shapes": "x:4x3x224x224,mask:4x8",
            "trt_profile_max_shapes": "x:8x3x224x224,mask:8x8",
        },
        "TRT",
    )
    assert settings.fp16 and settings.int8 and settings.workspace == 1 << 30 and settings.timing_cache
    assert settings.profiles["x"] == {"min": (1, 3, 224, 224), "opt": (4, 3, 224, 224), "max": (8, 3, 224, 224)}
    with pytest.raises(InvalidArgument, match="must name the same inputs"):
        parse_settings({"trt_profile_min_shapes": "x:1", "trt_profile_max_shapes": "y:1"}, "TRT")
    with pytest.raises(InvalidArgument, match="is not name:d1xd2"):
        parse_settings(
            {"trt_profile_min_shapes": "x:1xa", "trt_profile_opt_shapes": "x:1", "trt_profile_max_shapes": "x:1"}, "TRT"
        )
    with pytest.raises(InvalidArgument, match="trt_fp16_enable must be 0 or 1"):
        parse_settings({"trt_fp16_enable": "yes"}, "TRT")
    with pytest.raises(InvalidArgument, match="unknown provider option"):
        TensorrtProviderFactory().check_options({"trt_nonsense": "1"})


def test_the_factory_hands_out_its_table():
    assert TensorrtProviderFactory().capability_table() is TABLE
    assert find_table("TensorrtExecutionProvider", _environment()) is TABLE
    assert TABLE.opsets == {"": (9, 24)} and TABLE.memory == "cuda"
    assert all(onnx.defs.has(op, domain) for domain, op in TABLE.ops if domain == "")


def test_engines_are_shared_only_across_the_shapes_a_profile_covers():
    from onnxplug_tensorrt._engine import engine_signature

    profiles = parse_settings(
        {"trt_profile_min_shapes": "x:1x3", "trt_profile_opt_shapes": "x:4x3", "trt_profile_max_shapes": "x:8x3"}, "TRT"
    ).profiles
    one = engine_signature({"x": (2, 3), "mask": (2, 5)}, profiles)
    assert engine_signature({"x": (7, 3), "mask": (2, 5)}, profiles) == one  # x varies inside its profile
    assert engine_signature({"x": (2, 3), "mask": (3, 5)}, profiles) != one  # mask has no profile: its own engine
    assert engine_signature({"x": (2, 3)}, {}) != engine_signature({"x": (3, 3)}, {})
