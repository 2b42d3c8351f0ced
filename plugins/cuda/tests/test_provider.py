"""Detection without a GPU, options, and device memory on the test backend."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug_cuda.provider import CUDAProviderFactory
from onnxplug_cuda.testing import environment_for

CUDA = "CUDAExecutionProvider"


def _model() -> bytes:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Relu", ["m"], ["r"], name="relu"),
        helper.make_node("Atan", ["r"], ["y"], name="atan"),  # not claimed: runs on the CPU
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [3, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_without_cupy_there_is_no_device_and_the_reason_says_how_to_install():
    pytest.importorskip("onnxplug_cuda")
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("cupy is installed on this machine: the no-CuPy path cannot be observed")
    factory = CUDAProviderFactory()
    assert factory.devices() == []
    assert "cupy is not installed" in factory.unavailable_reason()
    assert "onnxplug[cuda12]" in factory.unavailable_reason()
    assert CUDA not in onnxplug.get_available_providers()
    assert CUDA in onnxplug.get_all_providers()


def test_claimed_nodes_run_on_device_arrays_and_the_rest_on_the_cpu():
    environment = environment_for("array_api_strict")
    session = onnxplug.InferenceSession(_model(), providers=[CUDA, "CPUExecutionProvider"], environment=environment)
    placed = {node.name: node.provider for node in session.get_partition_report().nodes}
    assert placed == {"mm": CUDA, "relu": CUDA, "atan": "CPUExecutionProvider"}
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    (y,) = session.run(None, {"x": x, "w": w})
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, np.arctan(np.maximum(x @ w, 0)), rtol=1e-6)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"device_id": "3"}, "device_id 3 does not exist"),
        ({"device_id": "x"}, "must be an integer"),
        ({"gpu_mem_limit": "-1"}, ">= 0"),
        ({"arena_extend_strategy": "kBig"}, "arena_extend_strategy must be one of"),
        ({"do_copy_in_default_stream": "yes"}, "must be 0 or 1"),
        ({"enable_cuda_graph": "1"}, "test backend has none"),
        ({"cudnn_conv_algo_search": "EXHAUSTIVE"}, "unknown provider option"),
    ],
)
def test_bad_options_are_refused_naming_them(options, message):
    environment = environment_for("array_api_strict")
    with pytest.raises(onnxplug.InvalidArgument, match=message):
        onnxplug.InferenceSession(
            _model(), providers=[(CUDA, options)], environment=environment, sess_options=None
        ).set_providers([(CUDA, options)])


def test_memory_describes_and_exports_device_values():
    factory = CUDAProviderFactory(backend="array_api_strict")
    memory = factory.memory(factory.devices()[0])
    value = memory.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert memory.owns(value) and not memory.owns(np.zeros(2))
    assert memory.shape_and_type(value) == ((2, 3), np.dtype(np.float32))
    np.testing.assert_array_equal(np.from_dlpack(memory.to_dlpack(value)), np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(memory.to_host(memory.from_dlpack(np.ones(3))), np.ones(3))
    assert memory.shape_and_type(memory.empty((4,), np.float64)) == ((4,), np.dtype(np.float64))
    assert memory.device_name == "cuda"


def test_memory_fills_preallocated_values_in_place():
    factory = CUDAProviderFactory(backend="array_api_strict")
    memory = factory.memory(factory.devices()[0])
    target = memory.empty((2, 3), np.float32)
    memory.copy_into(target, memory.to_device(np.arange(6, dtype=np.float32)))
    np.testing.assert_array_equal(memory.to_host(target), np.arange(6).reshape(2, 3))
