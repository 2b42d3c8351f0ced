"""Device-resident inputs and outputs on the virtual device: OrtValues in its memory, IOBinding
leaving outputs there, and the host copies the core makes (counted by the device's memory)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug_virtual_device.memory import copies

VD = "VirtualDeviceExecutionProvider"


def _model(middle: str = "Add") -> bytes:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node(middle, ["r", "x"] if middle == "Add" else ["r"], ["m"], name="middle"),
        helper.make_node("Mul", ["m", "x"], ["y"], name="mul"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _x() -> np.ndarray:
    return np.array([[-1, 2, 3], [4, -5, 6]], np.float32)


def _session(middle: str = "Add"):
    return onnxplug.InferenceSession(_model(middle), providers=[(VD, {"ops": "Relu,Add,Mul"})])


def _bound(session):
    """A binding with ``x`` in virtual-device memory and ``y`` left there."""
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", onnxplug.OrtValue.ortvalue_from_numpy(_x(), "virtual", 0))
    binding.bind_output("y", "virtual")
    return binding


def test_device_inputs_and_outputs_make_no_host_copy():
    session = _session()
    binding = _bound(session)
    copies.reset()
    session.run_with_iobinding(binding)
    assert copies.host_copies == 0
    (y,) = binding.get_outputs()
    assert y.device_name() == "virtual" and y.shape() == [2, 3]
    np.testing.assert_array_equal(y.numpy(), (np.maximum(_x(), 0) + _x()) * _x())
    assert copies.to_host == 1  # numpy() is the one copy, made when the caller asks


def test_a_host_kernel_between_device_nodes_costs_exactly_two_copies():
    session = _session("Floor")  # Floor is not among the device's ops: the CPU runs it
    binding = _bound(session)
    copies.reset()
    session.run_with_iobinding(binding)
    assert (copies.to_host, copies.to_device) == (1, 1)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], np.floor(np.maximum(_x(), 0)) * _x())


def test_host_outputs_and_preallocated_device_outputs():
    session = _session()
    x = onnxplug.OrtValue.ortvalue_from_numpy(_x(), "virtual", 0)
    target = onnxplug.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32, "virtual", 0)
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", x)
    binding.bind_ortvalue_output("y", target)
    copies.reset()
    session.run_with_iobinding(binding)
    assert copies.host_copies == 0 and binding.get_outputs()[0] is target
    np.testing.assert_array_equal(target.numpy(), (np.maximum(_x(), 0) + _x()) * _x())
    binding.bind_output("y")  # back to host memory: one copy home
    copies.reset()
    session.run_with_iobinding(binding)
    assert copies.to_host == 1 and binding.get_outputs()[0].device_name() == "cpu"


def test_ortvalues_on_the_device_and_their_errors():
    x = onnxplug.OrtValue.ortvalue_from_numpy(_x(), "virtual", 0)
    assert x.device_name() == "virtual" and x.data_type() == "tensor(float)"
    assert x.data_ptr() != 0
    with pytest.raises(RuntimeError, match="no installed provider offers it"):
        onnxplug.OrtValue.ortvalue_from_numpy(_x(), "cuda", 0)
    with pytest.raises(Exception, match="Unsupported device type"):
        onnxplug.OrtValue.ortvalue_from_numpy(_x(), "tpu", 0)
    session = _session()
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", onnxplug.OrtValue.ortvalue_from_numpy(np.zeros((3, 3), np.float32), "virtual", 0))
    binding.bind_output("y", "virtual")
    with pytest.raises(RuntimeError, match="invalid dimensions"):
        session.run_with_iobinding(binding)
