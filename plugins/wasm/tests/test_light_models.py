"""The light model-zoo classics shipped in the onnx wheel, all on the WASM provider, agree with
the CPU provider within rtol 1e-3.

Their weights are all 0.02, so logits reach 1e10 and all classes tie: a final Softmax turns
1e-7 relative differences into different winners, so the logits (its input) are compared.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

pytest.importorskip("wasmtime", reason="wasmtime is not installed (pip install onnxplug[wasm])")

import onnxplug
from onnxplug_wasm.testing import environment

WASM = "WasmExecutionProvider"
MODELS = ("resnet50", "squeezenet", "densenet121", "inception_v2", "shufflenet", "vgg19")


def _logits_model(name: str) -> bytes:
    from onnx.backend.test import loader

    path = os.path.join(loader.DATA_DIR, "light", f"light_{name}.onnx")
    if not os.path.exists(path):
        pytest.skip(f"the installed onnx wheel has no light_{name}.onnx")
    model = onnx.load(path)
    last = model.graph.node[-1]
    if last.op_type == "Softmax":
        output = model.graph.output[0]
        output.name = last.input[0]
        output.type.tensor_type.ClearField("shape")
        del model.graph.node[-1]
    return model.SerializeToString()


def _feeds(session) -> dict[str, np.ndarray]:
    feeds = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in arg.shape]
        size = int(np.prod(shape))
        feeds[arg.name] = (np.arange(size).reshape(shape) / size).astype(np.float32)
    return feeds


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_light_model_runs_in_wasm_and_agrees_with_cpu(name):
    data = _logits_model(name)
    env = environment()
    session = onnxplug.InferenceSession(data, providers=[WASM, "CPUExecutionProvider"], environment=env)
    report = session.get_partition_report()
    # vgg19's 25088x4096 weight is too large to fold, so its ConstantOfShape stays a node, which
    # needs no device input and has no wasm kernel: it runs on the CPU and is copied in.
    on_cpu = {node.op_type for node in report.nodes if node.provider != WASM}
    assert on_cpu <= {"ConstantOfShape"}, f"the wasm kernels should take every other node: {on_cpu}"
    feeds = _feeds(session)
    got = session.run(None, feeds)
    expected = onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"], environment=env).run(None, feeds)
    for value, reference in zip(got, expected):
        assert value.dtype == reference.dtype and value.shape == reference.shape
        np.testing.assert_allclose(value, reference, rtol=1e-3, atol=1e-5 * float(np.abs(reference).max()))
