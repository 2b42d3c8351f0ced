"""The NNAPI provider on this (non-Android) machine: no device, with the reason; sessions asking
for it fall back (or fail with fallback off) saying why; planning works from its table."""

from __future__ import annotations

import sys

import onnx
import pytest
from onnx import TensorProto, helper

import onnxplug
import onnxplug_nnapi.plugin
from onnxplug.errors import InvalidArgument
from onnxplug.partition.targets import find_table
from onnxplug_nnapi.provider import NnapiProviderFactory, detect
from onnxplug_nnapi.table import TABLE

pytestmark = pytest.mark.skipif(sys.platform == "android", reason="these check detection off Android")


def _environment():
    environment = onnxplug.Environment(only=["cpu"])
    environment.register(onnxplug_nnapi.plugin, name="nnapi")
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


def test_detection_reports_no_device_with_the_reason():
    assert detect() == (0, f"NNAPI is Android only (this is {sys.platform})")
    factory = NnapiProviderFactory()
    assert factory.devices() == []
    assert factory.unavailable_reason() == f"NNAPI is Android only (this is {sys.platform})"


def test_not_listed_as_available_and_sessions_say_why():
    environment = _environment()
    assert environment.factory("NnapiExecutionProvider") is not None  # registered...
    assert "NnapiExecutionProvider" not in [f.ort_name for f in environment.available_factories()]  # ...not available
    assert "NnapiExecutionProvider" not in onnxplug.get_available_providers()
    with pytest.warns(UserWarning, match="NNAPI is Android only"):
        session = onnxplug.InferenceSession(_relu(), providers=["NnapiExecutionProvider"], environment=environment)
    assert session.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(InvalidArgument, match="NNAPI is Android only"):
        onnxplug.InferenceSession(
            _relu(), providers=["NnapiExecutionProvider"], environment=environment, enable_fallback=0
        )


def test_the_factory_hands_out_its_table():
    assert NnapiProviderFactory().capability_table() is TABLE
    assert find_table("nnapi", _environment()) is TABLE
    assert TABLE.static_shapes and TABLE.memory is None
    assert TABLE.source.startswith("onnxruntime 1.32.0 nnapi_supported_ops.md")
    assert onnx.defs.has("Relu")  # the rows name real ops
    assert all(onnx.defs.has(op, domain) for domain, op in TABLE.ops if domain == "")


def test_nnapi_flags_follow_onnxruntimes_bits():
    from onnxplug_nnapi.provider import Settings, parse_flags

    assert parse_flags("") == Settings()
    assert parse_flags("3") == Settings(fp16=True, layout="nchw")
    assert parse_flags("NNAPI_FLAG_CPU_DISABLED|NNAPI_FLAG_USE_FP16") == Settings(
        fp16=True, device_filter="cpu_disabled"
    )
    assert parse_flags("0x8").device_filter == "cpu_only"
    with pytest.raises(InvalidArgument, match="unknown nnapi_flags entry 'FAST'"):
        parse_flags("FAST")
    with pytest.raises(InvalidArgument, match="exclude each other"):
        parse_flags("12")
    with pytest.raises(InvalidArgument, match="unknown bits 0x10"):
        parse_flags("16")


def test_the_platform_layer_loads_nothing_on_import():
    """ndk.py is plain ctypes declarations until load_library() runs (only on Android, in compile())."""
    from onnxplug_nnapi import ndk

    assert ndk._LIBRARY is None
    assert ctypes_size_of_operand_type() == 24  # int32, uint32, pointer, float, int32 on a 64-bit ABI


def ctypes_size_of_operand_type() -> int:
    import ctypes

    from onnxplug_nnapi.ndk import OperandType

    return ctypes.sizeof(OperandType)
