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


def _loop_session(body_op: str = "Add"):
    """``h = Relu(x)`` on the device, then a 3-trip Loop whose body combines the carried value
    with the outer ``h`` by ``body_op`` (Add runs on the device, Max on the CPU)."""
    body = helper.make_graph(
        [
            helper.make_node(body_op, ["acc_in", "h"], ["acc_out"], name="body_op"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [2, 3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2, 3]),
        ],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["h"], name="relu"),
            helper.make_node("Loop", ["trips", "", "x"], ["y"], name="loop", body=body),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("trips", TensorProto.INT64, [], [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnxplug.InferenceSession(model.SerializeToString(), providers=[VD, "CPUExecutionProvider"])


def test_an_outer_scope_value_stays_on_the_device_across_loop_iterations():
    session = _loop_session("Add")
    copies.reset()
    (y,) = session.run(None, {"x": _x()})
    np.testing.assert_allclose(y, _x() + 3 * np.maximum(_x(), 0))
    # x goes to the device once for Relu and once per iteration (the carried value comes from the
    # host Loop kernel), the body's sum comes back each iteration; h itself is never copied.
    assert (copies.to_device, copies.to_host) == (1 + 3, 3)


def test_a_host_reader_of_a_device_outer_value_gets_it_copied_home():
    session = _loop_session("Max")
    copies.reset()
    (y,) = session.run(None, {"x": _x()})
    np.testing.assert_array_equal(y, np.maximum(_x(), 0))
    assert (copies.to_device, copies.to_host) == (1, 3)  # x for Relu; h home once per iteration


def test_copies_out_of_a_device_wait_for_its_provider():
    copies.reset()
    _session("Floor").run(None, {"x": _x()})
    # once before Floor reads r on the host, once before y comes home
    assert copies.synchronized >= 2
