"""The @kernel decorator checks registrations against onnx.defs, naming the kernel."""

from __future__ import annotations

import pytest

from onnxplug import PluginError
from onnxplug.kernels import KernelRegistry, NodeContext


def test_exact_versions_registered():
    registry = KernelRegistry("t")

    @registry.kernel("Relu", since=(6, 13, 14))
    def relu(x):
        return x

    assert registry.lookup("", "Relu", 13).fn is relu
    assert registry.lookup("ai.onnx", "Relu", 14).fn is relu
    assert registry.lookup("", "Relu", 7) is None
    assert len(registry) == 3


def test_version_that_does_not_exist():
    registry = KernelRegistry("t")
    with pytest.raises(PluginError, match=r"relu.*Relu-7.*versions of Relu are \[1, 6, 13, 14\]"):

        @registry.kernel("Relu", since=(7,))
        def relu(x):
            return x


def test_unknown_attribute_parameter():
    registry = KernelRegistry("t")
    with pytest.raises(PluginError, match=r"\['axes'\] are not attributes"):

        @registry.kernel("Softmax", since=(13,))
        def softmax(x, *, axis, axes):
            return x


def test_missing_attribute_parameter():
    registry = KernelRegistry("t")
    with pytest.raises(PluginError, match=r"attributes \['transB'\] are not keyword-only"):

        @registry.kernel("Gemm", since=(13,))
        def gemm(a, b, c=None, *, alpha, beta, transA):
            return a


def test_attributes_ignored_deliberately_with_var_keyword():
    registry = KernelRegistry("t")

    @registry.kernel("Gemm", since=(13,))
    def gemm(a, b, c=None, *, alpha, **ignored):
        return a

    assert registry.lookup("", "Gemm", 13) is not None


def test_python_default_must_match_schema():
    registry = KernelRegistry("t")
    with pytest.raises(PluginError, match=r"'alpha' defaults to 2.0 in Python but to 1.0"):

        @registry.kernel("Gemm", since=(13,))
        def gemm(a, b, c=None, *, alpha=2.0, beta, transA, transB):
            return a


def test_variadic_input_needs_star_args():
    registry = KernelRegistry("t")
    with pytest.raises(PluginError, match="variadic"):

        @registry.kernel("Concat", since=(13,))
        def concat(a, b, *, axis):
            return a


def test_optional_inputs_need_defaults():
    registry = KernelRegistry("t")
    with pytest.raises(PluginError, match="give optional inputs a default"):

        @registry.kernel("Gemm", since=(13,))
        def gemm(a, b, c, *, alpha, beta, transA, transB):
            return a


def test_duplicate_registration():
    registry = KernelRegistry("t")

    @registry.kernel("Relu", since=(14,))
    def relu(x):
        return x

    with pytest.raises(PluginError, match="registered twice"):

        @registry.kernel("Relu", since=(14,))
        def relu_again(x):
            return x


def test_schema_defaults_are_filled_in():
    registry = KernelRegistry("t")
    seen = {}

    @registry.kernel("Gemm", since=(13,))
    def gemm(a, b, c=None, *, alpha, beta, transA, transB):
        seen.update(alpha=alpha, beta=beta, transA=transA, transB=transB)
        return a

    definition = registry.lookup("", "Gemm", 13)
    ctx = NodeContext(
        name="g", op_type="Gemm", domain="", since_version=13, opsets={"": 13}, num_inputs=2, num_outputs=1
    )
    definition.build(ctx, {"transB": 1})(1, 2)
    assert seen == {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 1}


def test_custom_domain_checked_later():
    registry = KernelRegistry("t")

    @registry.kernel("Thing", since=(1,), domain="my.domain")
    def thing(x):
        return x

    with pytest.raises(PluginError, match="unknown op"):
        registry.validate()
