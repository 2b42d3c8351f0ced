"""FP32 agreement with the CPU provider on the light model-zoo classics shipped in the onnx wheel.

The light models keep their weights as ConstantOfShape of shape initializers that are also graph
inputs (IR 3), so for onnxplug they are overridable inputs and every Conv has weights of unknown
shape, which OpenVINO's CPU plugin refuses.  The test therefore also runs them with the
initializers taken out of the graph inputs (constant weights, as any exporter writes them today),
where OpenVINO takes every node.

Their weights are all 0.02, so logits reach 1e10 and all classes tie: a final Softmax turns
1e-7 relative differences into different winners.  Where the model ends in Softmax the logits
(its input) are compared instead.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

pytest.importorskip("openvino", reason="the 'openvino' package is not installed (pip install onnxplug[openvino])")

import onnxplug

OV = "OpenVINOExecutionProvider"
CPU = "CPUExecutionProvider"
MODELS = ("resnet50", "densenet121", "inception_v2", "squeezenet", "vgg19")


def _path(name: str) -> str:
    from onnx.backend.test import loader

    path = os.path.join(loader.DATA_DIR, "light", f"light_{name}.onnx")
    if not os.path.exists(path):
        pytest.skip(f"the installed onnx wheel has no light_{name}.onnx")
    return path


def _logits_model(path: str, constant_weights: bool) -> bytes:
    model = onnx.load(path)
    if constant_weights:
        initializers = {t.name for t in model.graph.initializer}
        inputs = [i for i in model.graph.input if i.name not in initializers]
        del model.graph.input[:]
        model.graph.input.extend(inputs)
        model.ir_version = max(model.ir_version, 4)
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
@pytest.mark.parametrize("constant_weights", [True, False], ids=["constant-weights", "as-shipped"])
@pytest.mark.parametrize("name", MODELS)
def test_light_model_agrees_with_cpu_at_fp32(name, constant_weights, recwarn):
    data = _logits_model(_path(name), constant_weights)
    session = onnxplug.InferenceSession(data, providers=[(OV, {"precision": "FP32"})])
    counts = session.partition_counts()
    if constant_weights:
        assert set(counts) == {OV}, f"OpenVINO should take every node: {counts}"
        assert len(session._plan.partition.fused) == 1
        assert not [w for w in recwarn if "fall back" in str(w.message)]
    feeds = _feeds(session)
    got = session.run(None, feeds)
    expected = onnxplug.InferenceSession(data, providers=[CPU]).run(None, feeds)
    for value, reference in zip(got, expected):
        assert value.dtype == reference.dtype and value.shape == reference.shape
        np.testing.assert_allclose(value, reference, rtol=1e-3, atol=1e-5 * float(np.abs(reference).max()))
