"""Which providers a session uses: the user's order, or the default selection policy.

With ``providers`` omitted, every available provider is used in the order the
``onnxplug_select_providers`` hook gives: the core's default policy (a plugin like any other)
sorts by ``ProviderFactory.priority`` with CPU last, a policy plugin may answer first, and
``ONNXPLUG_PROVIDERS`` overrides both.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.api import KernelClaim
from onnxplug.testing import make_model
from onnxplug.testing.fakes import FakeFactory, fake_plugin

RELU = make_model(
    [helper.make_node("Relu", ["x"], ["y"], name="relu")],
    [("x", TensorProto.FLOAT, [3])],
    [("y", TensorProto.FLOAT, [3])],
).SerializeToString()
X = np.array([-1.0, 0.0, 2.0], np.float32)


def _claim_relus(graph, kernels):
    return [KernelClaim(n.name) for n in graph.nodes if n.op_type == "Relu"]


@pytest.fixture(autouse=True)
def _no_provider_variable(monkeypatch):
    monkeypatch.delenv("ONNXPLUG_PROVIDERS", raising=False)


@pytest.fixture
def fakes():
    """An environment with the CPU plugin and two fakes: ``low`` (priority 10), ``high`` (90)."""
    env = onnxplug.Environment(only=["cpu"])
    low, high = FakeFactory("low", _claim_relus, priority=10), FakeFactory("high", _claim_relus, priority=90)
    env.register(fake_plugin(low, high), name="fakes")
    return env, low, high


def test_omitted_providers_use_every_available_one_by_priority(fakes):
    env, low, high = fakes
    session = onnxplug.InferenceSession(RELU, environment=env)
    assert session.get_providers() == ["HighExecutionProvider", "LowExecutionProvider", "CPUExecutionProvider"]
    (y,) = session.run(None, {"x": X})
    np.testing.assert_array_equal(y, [0, 0, 2])
    assert high.calls["Relu"] == 1 and low.calls["Relu"] == 0


def test_cpu_is_last_even_with_a_higher_priority(fakes):
    env, _, _ = fakes
    env.factory("cpu").priority = 1000  # the instance attribute shadows the class's
    expected = ["HighExecutionProvider", "LowExecutionProvider", "CPUExecutionProvider"]
    try:
        assert [f.ort_name for f in env.available_factories()] == expected
        assert onnxplug.InferenceSession(RELU, environment=env).get_providers() == expected
    finally:
        del env.factory("cpu").priority


def test_a_policy_plugin_answers_before_the_default(fakes):
    env, low, high = fakes
    seen = []

    class LowFirst:
        @onnxplug.hookimpl
        def onnxplug_select_providers(self, candidates, policy):
            seen.append(policy)
            return sorted(candidates, key=lambda f: f.name != "low")

    env.register(LowFirst(), name="low-first")
    session = onnxplug.InferenceSession(RELU, environment=env)
    assert session.get_providers()[0] == "LowExecutionProvider"
    session.run(None, {"x": X})
    assert low.calls["Relu"] == 1 and high.calls["Relu"] == 0
    assert "default" in seen


def test_a_policy_returning_a_stranger_is_refused(fakes):
    env, _, _ = fakes
    stranger = FakeFactory("stranger", _claim_relus)

    class Bad:
        @onnxplug.hookimpl
        def onnxplug_select_providers(self, candidates, policy):
            return [stranger]

    env.register(Bad(), name="bad-policy")
    with pytest.raises(onnxplug.PluginError, match="not among the candidates"):
        env.available_factories()


def test_environment_variable_overrides_the_default(fakes, monkeypatch):
    env, low, high = fakes
    monkeypatch.setenv("ONNXPLUG_PROVIDERS", "low, cpu")
    session = onnxplug.InferenceSession(RELU, environment=env)
    assert session.get_providers() == ["LowExecutionProvider", "CPUExecutionProvider"]
    session.run(None, {"x": X})
    assert low.calls["Relu"] == 1 and high.calls["Relu"] == 0
    explicit = onnxplug.InferenceSession(RELU, providers=["high"], environment=env)
    assert explicit.get_providers() == ["HighExecutionProvider", "CPUExecutionProvider"]


def test_get_providers_keeps_the_users_order_with_cpu_first(fakes):
    """onnxruntime lists the providers as asked: ['CPU', 'Azure'] stays in that order."""
    env, low, high = fakes
    session = onnxplug.InferenceSession(RELU, providers=["CPUExecutionProvider", "high"], environment=env)
    assert session.get_providers() == ["CPUExecutionProvider", "HighExecutionProvider"]
    session.run(None, {"x": X})
    assert high.calls["Relu"] == 0  # CPU asked first claims the node
    appended = onnxplug.InferenceSession(RELU, providers=["low", "high"], environment=env)
    assert appended.get_providers() == ["LowExecutionProvider", "HighExecutionProvider", "CPUExecutionProvider"]


def test_user_order_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime", reason="comparing provider order needs onnxruntime")
    if "AzureExecutionProvider" not in ort.get_available_providers():
        pytest.skip("needs a second onnxruntime provider (the Azure EP of the CPU wheel)")
    asked = ["CPUExecutionProvider", "AzureExecutionProvider"]
    assert ort.InferenceSession(RELU, providers=asked).get_providers() == asked
    env = onnxplug.Environment(only=["cpu"])
    env.register(fake_plugin(FakeFactory("azure", _claim_relus)), name="azure")
    session = onnxplug.InferenceSession(RELU, providers=asked, environment=env)
    assert session.get_providers() == asked


def test_a_provider_with_negative_priority_runs_only_when_named(monkeypatch):
    monkeypatch.delenv("ONNXPLUG_PROVIDERS", raising=False)
    default = onnxplug.InferenceSession(RELU)
    assert "VirtualDeviceExecutionProvider" not in default.get_providers()
    assert "VirtualDeviceExecutionProvider" in onnxplug.get_available_providers()
    named = onnxplug.InferenceSession(RELU, providers=["VirtualDeviceExecutionProvider"])
    assert named.get_providers()[0] == "VirtualDeviceExecutionProvider"


def test_asking_for_a_provider_whose_plugin_is_missing_names_the_extra():
    environment = onnxplug.Environment(only=["cpu"])
    with pytest.warns(UserWarning, match=r"not installed: pip install onnxplug\[tensorrt\]"):
        onnxplug.InferenceSession(
            RELU, providers=["TensorrtExecutionProvider", "CPUExecutionProvider"], environment=environment
        )
    with pytest.warns(UserWarning) as record:
        onnxplug.InferenceSession(
            RELU, providers=["NoSuchExecutionProvider", "CPUExecutionProvider"], environment=environment
        )
    assert "pip install" not in str(record[0].message)
