"""onnxplug.translation: the converter table and the refusal every translating provider shares."""

from __future__ import annotations

import onnx_ir as ir
import pytest

import onnxplug
from onnxplug.translation import ConverterRegistry, Untranslatable


class _Refusal(Untranslatable):
    target = "Example"


def test_the_refusal_names_the_node_the_target_and_the_reason():
    node = ir.Node("", "Gemm", [], name="fc1", num_outputs=1)
    error = _Refusal(node, "input B must be constant")
    assert isinstance(error, onnxplug.EPFail)
    assert error.message == "Example cannot run node 'fc1' (Gemm): input B must be constant"
    assert (error.node, error.reason) == ("fc1", "input B must be constant")
    value = _Refusal("logits", "float64 is not supported")
    assert value.message == "Example cannot run 'logits': float64 is not supported"


def test_converters_are_found_by_domain_and_op_with_ai_onnx_as_the_default_domain():
    registry = ConverterRegistry()

    @registry.converts("Relu", "LeakyRelu")
    def activation(ctx, node):
        return "activation"

    @registry.converts("Gelu", domain="com.microsoft")
    def gelu(ctx, node):
        return "gelu"

    assert registry.get("", "Relu") is activation
    assert registry.get("ai.onnx", "LeakyRelu") is activation
    assert registry.get("com.microsoft", "Gelu") is gelu
    assert registry.get("", "Gelu") is None
    assert registry.keys() == {("", "Relu"), ("", "LeakyRelu"), ("com.microsoft", "Gelu")}


def test_each_translating_plugin_refuses_through_it():
    pytest.importorskip("onnxplug_nnapi")
    from onnxplug_nnapi.translate import Untranslatable as NnapiRefusal

    assert issubclass(NnapiRefusal, Untranslatable) and NnapiRefusal.target == "NNAPI"
