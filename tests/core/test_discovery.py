"""Plugin discovery through entry points: broken plugins, blocking, selection, in-process plugins."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.api import Device, KernelProvider, ProviderFactory
from onnxplug.kernels import KernelRegistry
from onnxplug.testing import fake_distribution, make_model

BROKEN = {"broken_plugin": "raise ImportError('vendor library libfoo.so not found')\n"}


def _relu_model() -> bytes:
    node = helper.make_node("Relu", ["x"], ["y"])
    return make_model([node], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])]).SerializeToString()


@pytest.fixture
def broken_dist(tmp_path, monkeypatch):
    fake_distribution(tmp_path, "onnxplug-broken", {"broken": "broken_plugin"}, BROKEN, version="2.3")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_broken_plugin_is_recorded_and_skipped(broken_dist):
    env = onnxplug.Environment()
    records = {r.name: r for r in env.plugins}
    assert records["broken"].status == "failed"
    assert records["broken"].distribution == "onnxplug-broken"
    assert "libfoo.so" in records["broken"].error
    assert records["cpu"].status == "loaded"
    session = onnxplug.InferenceSession(_relu_model(), environment=env)
    result = session.run(None, {"x": np.array([-1.0, 2.0], np.float32)})[0]
    np.testing.assert_array_equal(result, [0.0, 2.0])


def test_plugins_command_reports_the_broken_plugin(broken_dist):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(broken_dist), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-m", "onnxplug.cli", "plugins"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "broken  [onnxplug-broken 2.3]  failed" in done.stdout
    assert "libfoo.so not found" in done.stdout
    assert "CPUExecutionProvider" in done.stdout


def test_block_by_environment_variable(broken_dist, monkeypatch):
    monkeypatch.setenv("ONNXPLUG_BLOCK", "broken")
    records = {r.name: r for r in onnxplug.Environment().plugins}
    assert records["broken"].status == "blocked"
    assert records["broken"].error is None


def test_blocking_cpu_leaves_no_provider(monkeypatch):
    monkeypatch.setenv("ONNXPLUG_BLOCK", "cpu")
    env = onnxplug.Environment()
    assert env.factory("CPUExecutionProvider") is None
    with pytest.raises(onnxplug.NotImplemented, match="Relu"):
        onnxplug.InferenceSession(_relu_model(), environment=env)


def test_autoload_disabled_loads_only_named(broken_dist, monkeypatch):
    monkeypatch.setenv("ONNXPLUG_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("ONNXPLUG_PLUGINS", "cpu")
    records = {r.name: r for r in onnxplug.Environment().plugins}
    assert records["cpu"].status == "loaded"
    assert records["broken"].status == "not selected"


def test_cpu_provider_comes_from_its_entry_point():
    env = onnxplug.Environment()
    record = next(r for r in env.plugins if r.name == "cpu")
    assert record.distribution == "onnxplug-cpu"
    assert [f.ort_name for f in record.factories] == ["CPUExecutionProvider"]
    assert env.factory("cpu") is env.factory("CPUExecutionProvider")


def test_nothing_is_loaded_at_import():
    code = "import sys, onnxplug; print('onnxplug_cpu' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


class _CountingFactory(ProviderFactory):
    name = "toy"
    ort_name = "ToyExecutionProvider"
    priority = 10

    def devices(self):
        return [Device("cpu", name="toy")]

    def create(self, device, options):
        self.check_options(options)
        return KernelProvider(self, device)


def _toy_plugin(calls: list) -> types.SimpleNamespace:
    registry = KernelRegistry("toy")

    @registry.kernel("Relu", since=(14,))
    def relu(x):
        calls.append(x.shape)
        return np.maximum(x, x.dtype.type(0))

    @onnxplug.hookimpl
    def onnxplug_provider_factories():
        return [_CountingFactory()]

    @onnxplug.hookimpl
    def onnxplug_kernels(provider):
        return [registry] if provider.name == "toy" else []

    return types.SimpleNamespace(
        onnxplug_provider_factories=onnxplug_provider_factories, onnxplug_kernels=onnxplug_kernels
    )


def test_in_process_plugin_is_used():
    calls: list = []
    env = onnxplug.Environment()
    env.register(_toy_plugin(calls), name="toy")
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Tanh", ["r"], ["y"])]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [3])], [("y", TensorProto.FLOAT, [3])])
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["ToyExecutionProvider"], environment=env)
    assert session.get_providers() == ["ToyExecutionProvider", "CPUExecutionProvider"]
    assert session.partition_counts() == {"ToyExecutionProvider": 1, "CPUExecutionProvider": 1}
    result = session.run(None, {"x": np.array([-1.0, 0.5, 2.0], np.float32)})[0]
    np.testing.assert_allclose(result, np.tanh([0.0, 0.5, 2.0]), rtol=1e-6)
    assert calls == [(3,)]
    assert "ToyExecutionProvider" in [f.ort_name for f in env.available_factories()]


def test_registering_a_plugin_with_a_misspelled_hook_fails():
    @onnxplug.hookimpl
    def onnxplug_provider_factory():  # no such hook
        return []

    env = onnxplug.Environment(entry_points=[])
    with pytest.raises(onnxplug.PluginError, match="onnxplug_provider_factory"):
        env.register(types.SimpleNamespace(onnxplug_provider_factory=onnxplug_provider_factory), name="typo")


def test_two_plugins_claiming_one_provider_name():
    env = onnxplug.Environment()
    with pytest.raises(onnxplug.PluginError, match="already taken by plugin 'cpu'"):

        class Impostor(_CountingFactory):
            name = "cpu2"
            ort_name = "CPUExecutionProvider"

        @onnxplug.hookimpl
        def onnxplug_provider_factories():
            return [Impostor()]

        env.register(types.SimpleNamespace(onnxplug_provider_factories=onnxplug_provider_factories), name="impostor")
    assert env.factory("CPUExecutionProvider").name == "cpu"


def test_model_runs_without_any_plugin_gives_clear_error():
    env = onnxplug.Environment(entry_points=[])
    with pytest.raises(onnxplug.NotImplemented, match=r"Relu"):
        onnxplug.InferenceSession(_relu_model(), environment=env)


def test_unused_model_proto_type_is_rejected_like_onnxruntime():
    with pytest.raises(TypeError, match="Unable to load from type"):
        onnxplug.InferenceSession(onnx.ModelProto())
