"""Whole-run capture (``enable_cuda_graph``'s contract, :mod:`onnxplug.capture`) on a device that
records its launches the way a CUDA stream does: each launch remembers the buffers it read and
wrote, and a replay runs them again on the same buffers without the core's run loop.

The device refuses host copies and waits while it records, as stream capture does, so a
recording that succeeds shows the core kept those out of it.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug
from onnxplug.api import DataTransfer, Device, KernelProvider, ProviderFactory
from onnxplug.capture import KEPT, RunCapture
from onnxplug.errors import InvalidArgument
from onnxplug.kernels import KernelRegistry
from onnxplug.testing.contract import ProviderContract, Requirements

EP = "RecordingExecutionProvider"


class Buffer:
    """A device value: not array-like, so a host kernel given one fails."""

    __slots__ = ("data",)
    __array_ufunc__ = None

    def __init__(self, data: np.ndarray) -> None:
        self.data = data

    @property
    def shape(self):
        return self.data.shape


class Device_:
    """The device's state: its launch log while recording, and counters."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.log: list | None = None
        self.launches = 0  # launches made by the core's run loop (replays make none)
        self.recordings = self.replays = self.aborts = 0

    def launch(self, fn, *inputs: Buffer, out: Buffer | None = None) -> Buffer:
        self.launches += 1
        result = fn(*(b.data for b in inputs))
        out = Buffer(np.array(result)) if out is None else out
        if out.data is not result:
            np.copyto(out.data, result)
        if self.log is not None:
            self.log.append((fn, inputs, out))
        return out

    def refuse_while_recording(self, what: str) -> None:
        if self.log is not None:
            raise RuntimeError(f"{what} is not allowed while recording")


DEVICE = Device_()


class RecordingMemory(DataTransfer):
    device_name = "recording"

    def to_device(self, value):
        DEVICE.refuse_while_recording("a copy to the device")
        return Buffer(np.array(value, copy=True))

    def to_host(self, value):
        DEVICE.refuse_while_recording("a copy to the host")
        return np.array(value.data, copy=True)

    def owns(self, value):
        return isinstance(value, Buffer)

    def empty(self, shape, dtype):
        return Buffer(np.empty(tuple(shape), np.dtype(dtype)))

    def shape_and_type(self, value):
        return tuple(value.data.shape), value.data.dtype

    def data_ptr(self, value):
        return int(value.data.__array_interface__["data"][0])

    def copy_into(self, target, value):
        DEVICE.launch(lambda v: v.reshape(target.data.shape), value, out=target)

    def synchronize(self):
        DEVICE.refuse_while_recording("synchronize()")


MEMORY = RecordingMemory()
kernels = KernelRegistry("recording")


@kernels.kernel("Relu", since=(14,))
def relu(x):
    return DEVICE.launch(lambda a: np.maximum(a, a.dtype.type(0)), x)


@kernels.kernel("MatMul", since=(13,))
def matmul(a, b):
    return DEVICE.launch(np.matmul, a, b)


@kernels.kernel("Add", since=(14,))
def add(a, b):
    return DEVICE.launch(np.add, a, b)


@kernels.kernel("Softmax", since=(13,))
def softmax(x, *, axis=-1):
    def compute(a):
        e = np.exp(a - a.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    return DEVICE.launch(compute, x)


@kernels.kernel("Sigmoid", since=(13,))
def sigmoid(x):
    MEMORY.synchronize()  # like a kernel that must wait for the device: not recordable
    return DEVICE.launch(lambda a: 1 / (1 + np.exp(-a)), x)


class Recorder(RunCapture):
    def begin(self):
        DEVICE.log = []

    def end(self):
        log, DEVICE.log = DEVICE.log, None
        DEVICE.recordings += 1

        def replay():
            DEVICE.replays += 1
            for fn, inputs, out in log:
                np.copyto(out.data, fn(*(b.data for b in inputs)))

        return replay

    def abort(self):
        DEVICE.log = None
        DEVICE.aborts += 1


class RecordingProvider(KernelProvider):
    def transfer(self):
        return MEMORY

    def run_capture(self):
        return Recorder() if self.options.get("enable_cuda_graph") == "1" else None


class RecordingFactory(ProviderFactory):
    name = "recording"
    ort_name = EP
    option_names = frozenset({"enable_cuda_graph"})

    def devices(self):
        return [Device("gpu", 0, vendor="test", name="recording device")]

    def memory(self, device):
        return MEMORY

    def create(self, device, options):
        self.check_options(options)
        provider = RecordingProvider(self, device)
        provider.options = dict(options)
        return provider


class Plugin:
    @onnxplug.hookimpl
    def onnxplug_provider_factories(self):
        return [RecordingFactory()]

    @onnxplug.hookimpl
    def onnxplug_kernels(self, provider):
        return [kernels] if provider.name == "recording" else []


WEIGHT = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5) / 4


def _model(ops=("MatMul", "Relu")) -> bytes:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul")]
    last = "m"
    for index, op in enumerate(ops[1:]):
        nodes.append(helper.make_node(op, [last], [f"t{index}"], name=op.lower()))
        last = f"t{index}"
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
        [numpy_helper.from_array(WEIGHT, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _session(model=None, capture="1", providers=None):
    environment = onnxplug.Environment(only=["cpu"])
    environment.register(Plugin(), name="recording")
    return onnxplug.InferenceSession(
        model or _model(),
        providers=providers or [(EP, {"enable_cuda_graph": capture})],
        environment=environment,
    )


def _expected(x, ops=("MatMul", "Relu")):
    y = x @ WEIGHT
    for op in ops[1:]:
        y = np.maximum(y, 0) if op == "Relu" else 1 / (1 + np.exp(-y))
    return y


def _bound(session, shape=(2, 4)):
    x = onnxplug.OrtValue(MEMORY.to_device(np.zeros(shape, np.float32)), MEMORY)
    y = onnxplug.OrtValue(MEMORY.empty((shape[0], 3), np.float32), MEMORY)
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", x)
    binding.bind_ortvalue_output("y", y)
    return binding, x, y


@pytest.fixture(autouse=True)
def _fresh_device():
    DEVICE.reset()


def _counts():
    return DEVICE.recordings, DEVICE.replays, DEVICE.aborts


def test_second_run_records_and_later_runs_replay_without_the_run_loop():
    session = _session()
    binding, x, y = _bound(session)
    rng = np.random.default_rng(0)
    launches = []
    for _ in range(4):
        data = rng.standard_normal((2, 4)).astype(np.float32)
        x.update_inplace(data)  # the caller refreshes the bound input in place
        before = DEVICE.launches
        session.run_with_iobinding(binding)
        launches.append(DEVICE.launches - before)
        assert binding.get_outputs()[0] is y
        np.testing.assert_allclose(y.numpy(), _expected(data), rtol=1e-6)
    assert _counts() == (1, 3, 0)  # one recording, replayed once after it and once per later run
    # matmul, relu and the copy into y go through the run loop twice (warm-up, recording), then
    # the replays launch nothing through it
    assert launches == [3, 3, 0, 0]


def test_another_shape_or_buffer_is_another_recording():
    session = _session()
    for shape in [(2, 4), (5, 4)]:
        binding, x, y = _bound(session, shape)
        data = np.full(shape, 0.5, np.float32)
        x.update_inplace(data)
        for _ in range(3):
            session.run_with_iobinding(binding)
        np.testing.assert_allclose(y.numpy(), _expected(data), rtol=1e-6)
    assert _counts() == (2, 4, 0)


def test_only_the_last_bindings_are_kept():
    session = _session()
    bindings = [_bound(session, (n, 4)) for n in range(1, KEPT + 2)]
    for binding, _, _ in bindings:
        session.run_with_iobinding(binding)
    for binding, _, _ in bindings[1:]:  # the last KEPT are recorded on their second run
        session.run_with_iobinding(binding)
    assert _counts() == (KEPT, KEPT, 0)
    binding, x, y = bindings[0]  # the least recently used was dropped: it warms up again
    session.run_with_iobinding(binding)
    assert _counts() == (KEPT, KEPT, 0)


def test_an_output_allocated_per_run_is_not_recorded():
    session = _session()
    x = onnxplug.OrtValue(MEMORY.to_device(np.ones((2, 4), np.float32)), MEMORY)
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", x)
    binding.bind_output("y", "recording")
    with pytest.warns(RuntimeWarning, match="output 'y' is not"):
        session.run_with_iobinding(binding)
    session.run_with_iobinding(binding)
    np.testing.assert_allclose(binding.get_outputs()[0].numpy(), _expected(np.ones((2, 4))), rtol=1e-6)
    assert _counts() == (0, 0, 0)


def test_gpu_graph_id_minus_one_skips_the_graph():
    session = _session()
    binding, x, y = _bound(session)
    options = onnxplug.RunOptions()
    options.add_run_config_entry("gpu_graph_id", "-1")
    for _ in range(3):
        session.run_with_iobinding(binding, options)
    assert _counts() == (0, 0, 0)


def test_a_run_that_cannot_be_recorded_falls_back_with_a_warning():
    ops = ("MatMul", "Sigmoid")
    session = _session(_model(ops))
    binding, x, y = _bound(session)
    data = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    x.update_inplace(data)
    session.run_with_iobinding(binding)
    with pytest.warns(RuntimeWarning, match="recording the run failed.*synchronize"):
        session.run_with_iobinding(binding)
    np.testing.assert_allclose(y.numpy(), _expected(data, ops), rtol=1e-6)
    session.run_with_iobinding(binding)  # never recorded again
    assert _counts() == (0, 0, 1)
    assert DEVICE.log is None  # the recorder was stopped


def test_a_graph_with_nodes_elsewhere_is_refused_at_creation():
    model = _model(("MatMul", "Relu", "Softplus"))  # Softplus: only the CPU provider has it
    with pytest.raises(InvalidArgument, match=r"enable_cuda_graph needs every node.*'softplus' \(Softplus\)"):
        _session(model, providers=[(EP, {"enable_cuda_graph": "1"}), "CPUExecutionProvider"])


def test_without_the_option_nothing_is_recorded():
    session = _session(capture="0")
    binding, x, y = _bound(session)
    for _ in range(3):
        session.run_with_iobinding(binding)
    np.testing.assert_allclose(y.numpy(), _expected(np.zeros((2, 4))), rtol=1e-6)
    assert _counts() == (0, 0, 0) and DEVICE.launches == 9


class RecordingRequirements(Requirements):
    transfer = True
    capture_options = {"enable_cuda_graph": "1"}


class TestRecordingDeviceContract(ProviderContract):
    """The contract kit's capture check (what a CUDA provider meets on a GPU) on this device."""

    provider = "recording"
    requirements = RecordingRequirements

    @pytest.fixture
    def environment(self):
        environment = onnxplug.Environment(only=["cpu"])
        environment.register(Plugin(), name="recording")
        return environment
