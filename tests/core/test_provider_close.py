"""``Provider.close()`` runs once per provider: at ``session.close()``, or when the session is
collected without it."""

from __future__ import annotations

import gc

import numpy as np
from onnx import TensorProto, helper

import onnxplug
from onnxplug.api import Device, KernelProvider, ProviderFactory

CLOSED: list[str] = []


class ClosingProvider(KernelProvider):
    def close(self) -> None:
        CLOSED.append(self.name)


class ClosingFactory(ProviderFactory):
    name = "closing"
    ort_name = "ClosingExecutionProvider"

    def devices(self):
        return [Device("cpu")]

    def create(self, device, options):
        return ClosingProvider(self, device)


class Plugin:
    @onnxplug.hookimpl
    def onnxplug_provider_factories(self):
        return [ClosingFactory()]


def _model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _session():
    environment = onnxplug.Environment(only=["cpu"])
    environment.register(Plugin(), name="closing")
    return onnxplug.InferenceSession(_model(), providers=["ClosingExecutionProvider"], environment=environment)


def test_a_collected_session_closes_its_providers():
    CLOSED.clear()
    session = _session()
    np.testing.assert_array_equal(session.run(None, {"x": np.array([-1, 2], np.float32)})[0], [0, 2])
    del session
    gc.collect()
    assert CLOSED == ["closing"]


def test_close_then_collection_closes_once():
    CLOSED.clear()
    session = _session()
    session.close()
    session.close()
    del session
    gc.collect()
    assert CLOSED.count("closing") == 1


def test_factories_taking_a_context_get_the_session_options():
    from onnxplug.api import ProviderContext

    received: list[ProviderContext] = []

    class ContextFactory(ClosingFactory):
        name = "contextual"
        ort_name = "ContextualExecutionProvider"

        def create(self, device, options, context=None):
            received.append(context)
            return KernelProvider(self, device)

    class ContextPlugin:
        @onnxplug.hookimpl
        def onnxplug_provider_factories(self):
            return [ContextFactory()]

    environment = onnxplug.Environment(only=["cpu"])
    environment.register(ContextPlugin(), name="contextual")
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = 3
    options.enable_profiling = False
    options.graph_optimization_level = onnxplug.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.add_session_config_entry("session.custom", "yes")
    options.add_session_config_entry("session.compile_cache_dir", "/tmp/onnxplug-test-cache")
    onnxplug.InferenceSession(_model(), options, providers=["ContextualExecutionProvider"], environment=environment)
    (context,) = received
    assert context.intra_op_num_threads == 3
    assert context.optimization_level == "basic"
    assert context.config["session.custom"] == "yes"
    assert context.cache is onnxplug.default_compile_cache("/tmp/onnxplug-test-cache")
    # the two-argument factories of contract 1.0 are still called without it
    _session().close()
