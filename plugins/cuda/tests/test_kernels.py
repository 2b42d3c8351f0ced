"""What the node cases do not pin down: claim-time declines (the node goes to the CPU provider
with a reason), host inputs, and numerics the kernels build from the standard's functions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug
from onnxplug_cuda.kernels import registry
from onnxplug_cuda.testing import BACKENDS, environment_for

CUDA = "CUDAExecutionProvider"
F = TensorProto.FLOAT


def _session(nodes, inputs, outputs, backend="array_api_strict", opset=21, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return onnxplug.InferenceSession(
        model.SerializeToString(), providers=[CUDA, "CPUExecutionProvider"], environment=environment_for(backend)
    )


def _placement(session):
    return {node.name: node.provider for node in session.get_partition_report().nodes}


def _info(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


@pytest.mark.parametrize(
    "node, inputs, outputs",
    [
        (
            helper.make_node("MaxPool", ["x"], ["y", "i"], name="n", kernel_shape=[2, 2]),
            [_info("x", F, [1, 1, 4, 4])],
            [_info("y", F, [1, 1, 3, 3]), _info("i", TensorProto.INT64, [1, 1, 3, 3])],
        ),
        (
            helper.make_node("Resize", ["x", "", "s"], ["y"], name="n", mode="cubic"),
            [_info("x", F, [1, 1, 4, 4]), _info("s", F, [4])],
            [_info("y", F, None)],
        ),
        (
            helper.make_node("Pad", ["x", "p"], ["y"], name="n", mode="wrap"),
            [_info("x", F, [3, 4]), _info("p", TensorProto.INT64, [4])],
            [_info("y", F, None)],
        ),
        (
            helper.make_node("Dropout", ["x", "r", "t"], ["y"], name="n"),
            [_info("x", F, [3]), _info("r", F, []), _info("t", TensorProto.BOOL, [])],
            [_info("y", F, [3])],
        ),
        (
            helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="n", training_mode=1),
            [_info("x", F, [2, 3, 4])] + [_info(n, F, [3]) for n in "sbmv"],
            [_info("y", F, [2, 3, 4])],
        ),
        (
            helper.make_node("Gather", ["x", "i"], ["y"], name="n"),
            [_info("x", TensorProto.STRING, [3]), _info("i", TensorProto.INT64, [2])],
            [_info("y", TensorProto.STRING, [2])],
        ),
    ],
    ids=["maxpool-indices", "resize-cubic", "pad-wrap", "dropout-training-input", "batchnorm-training", "strings"],
)
def test_what_the_kernels_cannot_do_is_declined_to_the_cpu(node, inputs, outputs):
    session = _session([node], inputs, outputs)
    assert _placement(session) == {"n": "CPUExecutionProvider"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_erf_and_exact_gelu_match_math_erf_across_the_switch_between_series_and_rational_form(backend):
    x = np.concatenate([np.linspace(-4, 4, 401), [1e-6, -1e-6, 0.4999, 0.5, 0.5001]]).astype(np.float32)
    nodes = [helper.make_node("Erf", ["x"], ["e"], name="erf"), helper.make_node("Gelu", ["x"], ["g"], name="gelu")]
    session = _session(nodes, [_info("x", F, [x.size])], [_info("e", F, [x.size]), _info("g", F, [x.size])], backend)
    assert set(_placement(session).values()) == {CUDA}
    erf, gelu = session.run(None, {"x": x})
    expected = np.array([math.erf(v) for v in x.astype(np.float64)])
    np.testing.assert_allclose(erf, expected, rtol=2e-6, atol=2e-7)
    np.testing.assert_allclose(gelu, 0.5 * x * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x])), atol=3e-7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_wraps_negative_indices_held_on_the_device(backend):
    nodes = [helper.make_node("Gather", ["x", "i"], ["y"], name="g", axis=1)]
    session = _session(
        nodes, [_info("x", F, [2, 4]), _info("i", TensorProto.INT64, [2, 2])], [_info("y", F, [2, 2, 2])], backend
    )
    assert _placement(session) == {"g": CUDA}
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    i = np.array([[-1, 0], [2, -4]], dtype=np.int64)
    (y,) = session.run(None, {"x": x, "i": i})
    np.testing.assert_array_equal(y, np.take(x, i % 4, axis=1))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_modes_and_negative_pads_match_numpy(mode):
    nodes = [helper.make_node("Pad", ["x", "p", "c"], ["y"], name="p", mode=mode)]
    session = _session(
        nodes,
        [_info("x", F, [3, 4]), _info("p", TensorProto.INT64, [4]), _info("c", F, [])],
        [_info("y", F, None)],
    )
    assert _placement(session) == {"p": CUDA}
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (y,) = session.run(None, {"x": x, "p": np.array([2, -1, 1, 2], dtype=np.int64), "c": np.float32(7)})
    cropped = x[:, 1:]
    kwargs = {"constant_values": 7} if mode == "constant" else {}
    np.testing.assert_array_equal(y, np.pad(cropped, [(2, 1), (0, 2)], mode=mode, **kwargs))


def test_slice_with_negative_steps_clamps_as_onnx_does_not_as_python():
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"], name="s")]
    ints = TensorProto.INT64
    session = _session(
        nodes,
        [_info("x", F, [5]), *(_info(n, ints, [1]) for n in "seat")],
        [_info("y", F, None)],
    )
    x = np.arange(5, dtype=np.float32)
    one = lambda v: np.array([v], dtype=np.int64)  # noqa: E731
    # ends = -(2**62) clamps to "before index 0": every element, reversed (Python's -1 would give none).
    (y,) = session.run(None, {"x": x, "s": one(-1), "e": one(-(2**62)), "a": one(0), "t": one(-1)})
    np.testing.assert_array_equal(y, x[::-1])
    assert _placement(session) == {"s": CUDA}


@pytest.mark.parametrize("backend", BACKENDS)
def test_reductions_over_an_empty_axis_give_the_identity(backend):
    nodes = [
        helper.make_node("ReduceMax", ["x", "a"], ["mx"], name="max", keepdims=0),
        helper.make_node("ReduceSum", ["x", "a"], ["s"], name="sum", keepdims=0),
        helper.make_node("ReduceProd", ["x", "a"], ["p"], name="prod", keepdims=0),
    ]
    session = _session(
        nodes,
        [_info("x", F, [2, 0]), _info("a", TensorProto.INT64, [1])],
        [_info(n, F, [2]) for n in ("mx", "s", "p")],
        backend,
    )
    assert set(_placement(session).values()) == {CUDA}
    mx, s, p = session.run(None, {"x": np.zeros((2, 0), np.float32), "a": np.array([1], np.int64)})
    np.testing.assert_array_equal(mx, [-np.inf, -np.inf])
    np.testing.assert_array_equal(s, [0, 0])
    np.testing.assert_array_equal(p, [1, 1])


def test_the_registry_covers_the_issue_op_list():
    ops = {kernel.key.op_type for kernel in registry}
    wanted = {
        "Pow", "Max", "Min", "Sum", "Mean", "Clip", "LeakyRelu", "Elu", "Selu", "HardSigmoid", "HardSwish",
        "Softplus", "Erf", "Gelu", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Where", "Equal", "Less",
        "Greater", "Cast", "Identity", "Dropout", "BatchNormalization", "InstanceNormalization", "ReduceSum",
        "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceLogSumExp", "ArgMax", "ArgMin",
        "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Concat", "Split", "Slice", "Squeeze",
        "Unsqueeze", "Flatten", "Expand", "Gather", "Tile", "Pad", "Resize", "Attention",
    }  # fmt: skip
    assert wanted <= ops
    assert not {"Shape", "Size"} & ops  # host metadata: left to the CPU provider on purpose


def test_an_opset_9_cnn_runs_entirely_on_the_cuda_kernels_and_matches_the_cpu():
    """The onnx wheel's light models are opset 9: Conv-1, MaxPool-8, AveragePool-7, Gemm-9,
    Reshape-5, Dropout-7, Unsqueeze-1, Transpose-1 must be claimed, not only the newest versions."""
    rng = np.random.default_rng(0)
    weights = {
        "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "scale": rng.random(4).astype(np.float32) + 0.5,
        "bias": rng.standard_normal(4).astype(np.float32),
        "mean": rng.standard_normal(4).astype(np.float32),
        "var": rng.random(4).astype(np.float32) + 0.5,
        "shape": np.array([1, -1], dtype=np.int64),
        "fc": rng.standard_normal((5, 16)).astype(np.float32),
        "fcb": rng.standard_normal(5).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"], name="bn"),
        helper.make_node("Relu", ["b"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["m"], name="maxpool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("AveragePool", ["m"], ["a"], name="avgpool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Transpose", ["a"], ["t"], name="transpose", perm=[0, 1, 3, 2]),
        helper.make_node("Reshape", ["t", "shape"], ["flat"], name="reshape"),
        helper.make_node("Dropout", ["flat"], ["d"], name="dropout", ratio=0.3),
        helper.make_node("Gemm", ["d", "fc", "fcb"], ["g"], name="gemm", transB=1),
        helper.make_node("Unsqueeze", ["g"], ["u"], name="unsqueeze", axes=[0]),
        helper.make_node("Softmax", ["u"], ["y"], name="softmax", axis=2),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn9",
        [_info("x", F, [1, 3, 8, 8])],
        [_info("y", F, [1, 1, 5])],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)]).SerializeToString()
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    environment = environment_for("array_api_strict")
    cuda = onnxplug.InferenceSession(data, providers=[CUDA, "CPUExecutionProvider"], environment=environment)
    assert set(_placement(cuda).values()) == {CUDA}
    cpu = onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"], environment=environment)
    np.testing.assert_allclose(cuda.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
