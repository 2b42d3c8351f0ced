"""Sandboxed custom ops: the example op library runs through the public API, and hostile
kernels (an infinite loop, an out-of-bounds write, a huge allocation) are stopped with clear
errors while the host process carries on."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

pytest.importorskip("wasmtime", reason="wasmtime is not installed (pip install onnxplug[wasm])")

import onnxplug
from onnxplug_wasm import build
from onnxplug_wasm.sandbox import SandboxLibrary

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "sandboxed_ops"
HOSTILE = HERE / "hostile"
EXAMPLE_DOMAIN = "ai.onnxplug.example.sandboxed"
HOSTILE_DOMAIN = "ai.onnxplug.test.hostile"


def _model(op: str, domain: str, inputs: list[str]) -> bytes:
    node = helper.make_node(op, inputs, ["y"], domain=domain, name=op.lower())
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 3]) for name in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def _session(model: bytes, library: Path) -> onnxplug.InferenceSession:
    options = onnxplug.SessionOptions()
    options.register_custom_ops_library(str(library))
    return onnxplug.InferenceSession(model, options, providers=["CPUExecutionProvider"])


@pytest.mark.skipif(build.toolchain_missing() is not None, reason=f"cannot rebuild: {build.toolchain_missing()}")
@pytest.mark.parametrize("folder, module", [(EXAMPLE, "ops.wasm"), (HOSTILE, "hostile.wasm")])
def test_committed_sandbox_modules_are_what_their_sources_build(folder, module):
    assert build.check(folder, folder / module)


def test_example_op_library_runs_sandboxed_through_the_public_api():
    x = np.array([[-2.0, 0.0, 1.0], [3.0, -0.5, 10.0]], np.float32)
    b = np.ones((2, 3), np.float32)
    (y,) = _session(_model("Squareplus", EXAMPLE_DOMAIN, ["x"]), EXAMPLE / "plugin.py").run(None, {"x": x})
    np.testing.assert_allclose(y, (x + np.sqrt(x * x + 4)) / 2, rtol=1e-6)
    session = _session(_model("SquaredDifference", EXAMPLE_DOMAIN, ["a", "b"]), EXAMPLE / "plugin.py")
    (y,) = session.run(None, {"a": x, "b": b})
    np.testing.assert_allclose(y, (x - b) ** 2, rtol=1e-6)


@pytest.fixture()
def hostile_plugin(tmp_path) -> Path:
    plugin = tmp_path / "hostile_ops.py"
    plugin.write_text(
        (EXAMPLE / "plugin.py")
        .read_text()
        .replace('Path(__file__).with_name("manifest.json")', repr(str(HOSTILE / "manifest.json")))
    )
    return plugin


@pytest.mark.parametrize(
    "op, message",
    [
        ("Spin", r"Spin: the sandboxed kernel 'spin' was stopped: it ran out of fuel \(limit 10000000"),
        ("Scribble", r"Scribble: the sandboxed kernel 'scribble' was stopped: out-of-bounds memory access"),
        ("Hog", r"Hog: the sandboxed kernel 'hog' was stopped: out-of-bounds memory access.*16777216 bytes"),
        ("Refuse", r"Refuse: the sandboxed kernel 'refuse' returned status 7"),
    ],
)
def test_hostile_kernels_are_stopped_with_a_clear_error(op, message, hostile_plugin):
    session = _session(_model(op, HOSTILE_DOMAIN, ["x"]), hostile_plugin)
    with pytest.raises(onnxplug.Fail, match=message):
        session.run(None, {"x": np.ones((2, 3), np.float32)})


def test_inputs_beyond_the_sandbox_memory_limit_are_refused_before_the_call(tmp_path):
    manifest = json.loads((EXAMPLE / "manifest.json").read_text())
    manifest["module"] = str(EXAMPLE / "ops.wasm")
    manifest["memory_limit"] = 1 << 20
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    library = SandboxLibrary.load(path)
    (op,) = [op for op in library.ops if op.op == "Squareplus"]
    with pytest.raises(onnxplug.Fail, match="do not fit the sandbox's memory limit of 1048576 bytes"):
        library.run(op, [np.ones(1 << 18, np.float32)])


def test_a_broken_manifest_names_the_file(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text('{"module": "x.wasm"}')
    with pytest.raises(onnxplug.PluginError, match="manifest.json: not a valid sandboxed op manifest"):
        SandboxLibrary.load(path)
