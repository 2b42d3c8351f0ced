"""The DirectML provider on this Linux machine without /dev/dxg: no device, with the reason;
sessions asking for it fall back (or fail with fallback off) saying why; planning works."""

from __future__ import annotations

import os
import sys

import onnx
import pytest
from onnx import TensorProto, helper

import onnxplug
import onnxplug_directml.plugin
from onnxplug.errors import InvalidArgument
from onnxplug.partition.targets import find_table
from onnxplug_directml.provider import DmlProviderFactory, detect
from onnxplug_directml.table import TABLE

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or os.path.exists("/dev/dxg"), reason="these check detection without Windows or WSL2"
)
REASON = "DirectML needs Windows or WSL2"


def _environment():
    environment = onnxplug.Environment(only=["cpu"])
    environment.register(onnxplug_directml.plugin, name="directml")
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
    found, reason = detect()
    assert not found and reason.startswith(REASON)
    factory = DmlProviderFactory()
    assert factory.devices() == []
    assert factory.unavailable_reason().startswith(REASON)


def test_not_listed_as_available_and_sessions_say_why():
    environment = _environment()
    assert environment.factory("DmlExecutionProvider") is not None
    assert "DmlExecutionProvider" not in [f.ort_name for f in environment.available_factories()]
    assert "DmlExecutionProvider" not in onnxplug.get_available_providers()
    with pytest.warns(UserWarning, match=REASON):
        session = onnxplug.InferenceSession(_relu(), providers=["DmlExecutionProvider"], environment=environment)
    assert session.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(InvalidArgument, match=REASON):
        onnxplug.InferenceSession(
            _relu(), providers=["DmlExecutionProvider"], environment=environment, enable_fallback=0
        )


def test_the_factory_hands_out_its_table():
    assert DmlProviderFactory().capability_table() is TABLE
    assert find_table("directml", _environment()) is TABLE
    assert TABLE.memory == "dml"
    assert all(onnx.defs.has(op, domain) for domain, op in TABLE.ops if domain == "")


@pytest.mark.skipif(sys.maxsize < 2**32, reason="the expected sizes are those of a 64-bit ABI")
def test_the_com_layer_declares_the_c_layouts_and_loads_nothing():
    """The ctypes structures have the sizes of their d3d12.h / DirectML.h declarations on a
    64-bit ABI, IIDs parse to their GUID fields, and importing the layer loads no library."""
    import ctypes

    from onnxplug_directml import _com, d3d12

    sizes = {
        "RESOURCE_DESC": 56,
        "HEAP_PROPERTIES": 20,
        "BUFFER_TENSOR_DESC": 48,
        "BINDING_PROPERTIES": 24,
        "BINDING_TABLE_DESC": 32,
        "GRAPH_DESC": 72,
        "INTERMEDIATE_EDGE": 24,
    }
    assert {name: ctypes.sizeof(getattr(_com, name)) for name in sizes} == sizes
    assert ctypes.sizeof(_com.OPERATOR_STRUCTS["CONVOLUTION"]) == 104
    assert ctypes.sizeof(_com.OPERATOR_STRUCTS["GEMM"]) == 56
    iid = _com.IID["IDMLDevice1"]
    assert (iid.Data1, iid.Data2, iid.Data3, bytes(iid.Data4).hex()) == (0xA0884F9A, 0xD2BE, 0x4355, "aa5d5901281ad1d2")
    assert (
        d3d12.DmlCompiledGraph
    )  # the platform layer imported here, off Windows/WSL2: it loads DirectML only in DmlDevice()
