"""The WASM provider: build reproducibility, detection, options, memory limits, declines, CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

pytest.importorskip("wasmtime", reason="wasmtime is not installed (pip install onnxplug[wasm])")

import onnxplug
from onnxplug_wasm import build
from onnxplug_wasm.memory import LinearMemory, WasmTensor
from onnxplug_wasm.provider import WasmProviderFactory
from onnxplug_wasm.testing import environment

WASM = "WasmExecutionProvider"
CPU = "CPUExecutionProvider"


def _model(nodes, inputs, outputs, initializers=(), opset=17) -> bytes:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _mlp(hidden: int = 256) -> bytes:
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [64, hidden], rng.standard_normal((64, hidden)).astype(np.float32))
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    return _model(nodes, [("x", TensorProto.FLOAT, ["n", 64])], [("y", TensorProto.FLOAT, ["n", hidden])], [w])


@pytest.mark.skipif(build.toolchain_missing() is not None, reason=f"cannot rebuild: {build.toolchain_missing()}")
def test_committed_module_is_what_its_sources_build():
    assert build.check(), "kernels.wasm differs from its sources: run python -m onnxplug_wasm.build"


def test_without_wasmtime_there_is_no_device_and_the_reason_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "wasmtime", None)  # import wasmtime now raises ImportError
    factory = WasmProviderFactory()
    assert factory.devices() == []
    assert "wasmtime is not installed" in factory.unavailable_reason()
    assert "onnxplug[wasm]" in factory.unavailable_reason()


def test_claimed_nodes_run_in_wasm_and_the_rest_on_the_cpu():
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Floor", ["m"], ["f"], name="floor"),  # no wasm kernel
        helper.make_node("Sigmoid", ["f"], ["y"], name="sigmoid"),
    ]
    data = _model(
        nodes, [("x", TensorProto.FLOAT, [2, 3]), ("w", TensorProto.FLOAT, [3, 4])], [("y", TensorProto.FLOAT, [2, 4])]
    )
    session = onnxplug.InferenceSession(data, providers=[WASM, CPU], environment=environment())
    placed = {node.name: node.provider for node in session.get_partition_report().nodes}
    assert placed == {"mm": WASM, "floor": CPU, "sigmoid": WASM}
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    (y,) = session.run(None, {"x": x, "w": w})
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-np.floor(x @ w))), rtol=1e-6)


def test_non_float_and_three_d_nodes_are_declined_with_reasons():
    nodes = [
        helper.make_node("Add", ["i", "i"], ["j"], name="int_add"),
        helper.make_node("Conv", ["v", "k"], ["c"], name="conv3d"),
    ]
    data = _model(
        nodes,
        [
            ("i", TensorProto.INT64, [3]),
            ("v", TensorProto.FLOAT, [1, 1, 4, 4, 4]),
            ("k", TensorProto.FLOAT, [1, 1, 2, 2, 2]),
        ],
        [("j", TensorProto.INT64, [3]), ("c", TensorProto.FLOAT, None)],
    )
    session = onnxplug.InferenceSession(data, providers=[WASM, CPU], environment=environment())
    report = {node.name: node for node in session.get_partition_report().nodes}
    assert report["int_add"].provider == CPU and report["conv3d"].provider == CPU
    declined = session.get_partition_report().declined[WASM]
    assert "float32" in " ".join(declined["int_add"])
    assert "1-D and 2-D windows" in " ".join(declined["conv3d"])


@pytest.mark.parametrize(
    "options, message",
    [
        ({"wasm_memory_limit": "lots"}, "must be an integer"),
        ({"wasm_memory_limit": "0"}, "must be in"),
        ({"wasm_memory_limit": str(1 << 33)}, "must be in"),
        ({"threads": "2"}, "unknown provider option"),
    ],
)
def test_bad_options_are_refused_naming_them(options, message):
    with pytest.raises(onnxplug.InvalidArgument, match=message):
        onnxplug.InferenceSession(_mlp(), providers=[(WASM, options)], environment=environment())


def test_weights_beyond_the_memory_limit_fail_at_session_creation():
    # 64 x 8192 float32 weights are 2 MiB; the limit is 1.5 MiB.
    with pytest.raises(onnxplug.Fail, match=r"out of linear memory.*wasm_memory_limit"):
        onnxplug.InferenceSession(
            _mlp(8192), providers=[(WASM, {"wasm_memory_limit": str(3 << 19)})], environment=environment()
        )


def test_activations_beyond_the_limit_fail_clearly_and_the_session_recovers():
    session = onnxplug.InferenceSession(
        _mlp(), providers=[(WASM, {"wasm_memory_limit": str(2 << 20)})], environment=environment()
    )
    small = np.ones((8, 64), np.float32)
    (expected,) = session.run(None, {"x": small})
    with pytest.raises(onnxplug.Fail, match=r"mm.*out of linear memory.*MatMul's output"):
        session.run(None, {"x": np.ones((4096, 64), np.float32)})  # 4 MiB of output
    (again,) = session.run(None, {"x": small})
    np.testing.assert_array_equal(again, expected)


def test_repeated_runs_reuse_memory_instead_of_growing():
    # The limit holds the weights and one run's values a few times over, not 50 runs' worth:
    # memory that was not returned to the allocator would run out.
    session = onnxplug.InferenceSession(
        _mlp(), providers=[(WASM, {"wasm_memory_limit": str(3 << 20)})], environment=environment()
    )
    x = np.ones((512, 64), np.float32)  # 512 KiB in, 512 KiB out of the matmul, 512 KiB after Relu
    for _ in range(50):
        session.run(None, {"x": x})


def test_allocator_merges_freed_blocks_and_stays_within_its_pages():
    memory = LinearMemory(4 << 20)
    blocks = [memory.tensor((1024,)) for _ in range(64)]
    grown = memory._bytes
    del blocks[::2]
    del blocks[:]
    assert memory.in_use == 0
    big = memory.tensor((64 * 1024,))  # fits only if all 64 freed blocks merged back into one
    assert memory._bytes == grown and big.offset < grown
    with pytest.raises(onnxplug.Fail, match="out of linear memory"):
        memory.tensor((2 << 20,))


def test_values_round_trip_and_numpy_refuses_device_tensors():
    memory = LinearMemory(1 << 20)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    value = memory.to_device(x)
    assert isinstance(value, WasmTensor) and memory.owns(value) and not LinearMemory(1 << 20).owns(value)
    assert memory.shape_and_type(value) == ((3, 4), np.dtype(np.float32))
    np.testing.assert_array_equal(memory.to_host(value), x)
    with pytest.raises(TypeError, match="copy it to the host"):
        np.asarray(value)


def test_a_kernel_trap_is_a_fail_not_a_crash():
    memory = LinearMemory(1 << 20)
    from onnxplug_wasm.memory import K_MATMUL

    with pytest.raises(onnxplug.Fail, match="trapped"):
        memory.call(K_MATMUL, 1, 64, 64, 64, 0x7FFF0000, 0, 0x7FFF0000, 0, 0x7FFF0000)  # far outside memory
    with pytest.raises(onnxplug.Fail, match="not in the module"):
        memory.call(99)


def test_cli_runs_a_light_model_on_the_wasm_provider(tmp_path):
    from onnx.backend.test import loader

    model = Path(loader.DATA_DIR) / "light" / "light_resnet50.onnx"
    if not model.exists():
        pytest.skip("the installed onnx wheel has no light_resnet50.onnx")
    # The entry point as an installed distribution declares it (a source checkout has none).
    info = tmp_path / "onnxplug_wasm-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: onnxplug-wasm\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[onnxplug]\nwasm = onnxplug_wasm.plugin\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    done = subprocess.run(
        [sys.executable, "-m", "onnxplug", "run", str(model), "--providers", WASM],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "median latency" in done.stdout and WASM in done.stdout


def test_weights_are_copied_into_linear_memory_once_when_the_session_is_built(monkeypatch):
    copied = []
    to_device = LinearMemory.to_device

    def spy(self, value):
        copied.append(np.shape(value))
        return to_device(self, value)

    monkeypatch.setattr(LinearMemory, "to_device", spy)
    session = onnxplug.InferenceSession(_mlp(), providers=[WASM], environment=environment())
    assert copied == [(64, 256)]
    copies = {(c.value, c.how) for c in session.get_partition_report().copies}
    assert ("w", "build") in copies and ("x", "run") in copies and ("y", "run") in copies
    copied.clear()
    for _ in range(3):
        session.run(None, {"x": np.ones((2, 64), np.float32)})
    assert copied == [(2, 64)] * 3  # only the feed, every run
