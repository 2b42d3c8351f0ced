"""OpenVINO on quantized models (QDQ from onnxplug's and onnxruntime's quantizers, QOperator,
IntegerOps) against the CPU provider: the quantized patterns it claims must agree."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxplug
from onnxplug import quantization as oq

sys.path.insert(0, str(Path(__file__).parent))
import models


@pytest.fixture(scope="module")
def openvino():
    names = {p.split("ExecutionProvider")[0].lower() for p in onnxplug.get_available_providers()}
    if "openvino" not in names:
        pytest.skip("the OpenVINO provider (plugins/openvino and the openvino package) is not installed")


@pytest.mark.parametrize("kind", sorted(models.BUILDERS))
@pytest.mark.parametrize("writer", ["onnxplug-QDQ", "onnxplug-QOperator", "onnxplug-dynamic", "onnxruntime-QDQ"])
def test_openvino_agrees_with_cpu_on_quantized_models(openvino, kind, writer, tmp_path):
    model, shapes = models.BUILDERS[kind](np.random.default_rng(0))
    src, out = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    reader = models.SampleReader(shapes, 8, 1)
    if writer == "onnxruntime-QDQ":
        ortq = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime writes the reference QDQ model")
        ortq.quantize_static(str(src), str(out), reader, activation_type=ortq.QuantType.QUInt8, per_channel=True)
    elif writer == "onnxplug-dynamic":
        oq.quantize_dynamic(str(src), str(out), per_channel=True)
    else:
        fmt = oq.QuantFormat[writer.split("-")[1]]
        oq.quantize_static(str(src), str(out), reader, quant_format=fmt, per_channel=True)
    cpu = onnxplug.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    ov = onnxplug.InferenceSession(str(out), providers=["openvino"])
    claimed = [n for n in ov.get_partition_report().nodes if n.provider.startswith("OpenVINO")]
    for sample in models.SampleReader(shapes, 3, 7).samples:
        want = cpu.run(None, sample)[0]
        got = ov.run(None, sample)[0]
        # One quantization step of the output at most (fused int8 paths may round differently).
        assert np.abs(got - want).max() <= 0.02 * np.abs(want).max(), [n.op_type for n in claimed]
