"""A model split between the virtual device and the CPU gives the CPU's results."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model

F = TensorProto.FLOAT
VD = "VirtualDeviceExecutionProvider"


def _model() -> bytes:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        helper.make_node("Add", ["h", "b"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r"], name="relu"),
        helper.make_node("Softmax", ["r"], ["p"], name="softmax", axis=-1),
        helper.make_node("Mul", ["p", "r"], ["y"], name="mul"),
        helper.make_node("Sigmoid", ["y"], ["z"], name="sigmoid"),
    ]
    rng = np.random.default_rng(0)
    return make_model(
        nodes,
        [("x", F, ["n", 4])],
        [("z", F, None), ("r", F, None)],
        {"w": rng.standard_normal((4, 3)).astype(np.float32), "b": rng.standard_normal(3).astype(np.float32)},
    ).SerializeToString()


MODEL = _model()
X = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
EXPECTED = onnxplug.InferenceSession(MODEL).run(None, {"x": X})


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"ops": "Relu,Mul"},
        {"ops": "", "fuse": "MatMul,Add,Relu"},
        {"ops": "Sigmoid", "fuse": "Add,Relu,Softmax,Mul"},
    ],
    ids=["kernels", "some-kernels", "fused-head", "fused-and-kernels"],
)
def test_split_model_matches_cpu(options):
    session = onnxplug.InferenceSession(MODEL, providers=[(VD, options)])
    assert session.partition_counts().get(VD, 0) > 0
    results = session.run(None, {"x": X})
    for got, expected in zip(results, EXPECTED):
        assert isinstance(got, np.ndarray)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_fused_partition_reported():
    session = onnxplug.InferenceSession(MODEL, providers=[(VD, {"ops": "", "fuse": "MatMul,Add,Relu"})])
    fused = {name: sorted(nodes) for name, (_, nodes) in session._plan.partition.fused.items()}
    assert list(fused.values()) == [["add", "matmul", "relu"]]
    copies = [str(c) for c in session._plan.copies]
    assert "x: host -> VirtualDeviceExecutionProvider" in copies
    assert "r: VirtualDeviceExecutionProvider -> host" in copies


def test_device_values_refuse_numpy():
    from onnxplug_virtual_device.memory import DeviceArray  # the plugin's own test

    value = DeviceArray(np.ones(2, np.float32))
    with pytest.raises(TypeError):
        np.add(value, 1)
    with pytest.raises(TypeError, match="virtual-device memory"):
        np.asarray(value)


def test_unknown_option_names_valid_ones():
    with pytest.raises(onnxplug.InvalidArgument, match="unknown provider option.*'speed'.*valid options: fuse, ops"):
        onnxplug.InferenceSession(MODEL, providers=[(VD, {"speed": "max"})], enable_fallback=0)


def test_partition_command_explains_assignments(tmp_path, capsys):
    from onnxplug.cli import main

    path = tmp_path / "model.onnx"
    path.write_bytes(MODEL)
    html = tmp_path / "graph.html"
    assert main(["partition", str(path), "--providers", VD, "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "VirtualDeviceExecutionProvider: 4 nodes" in out
    assert "declined matmul (MatMul): MatMul is not in this provider's 'ops' or 'fuse' options" in out
    assert "copies inserted:" in out
    page = html.read_text()
    assert "<svg" in page and "http" not in page.replace("http://www.w3.org/2000/svg", "")
