"""Accuracy of onnxplug.quantization on the test models (MLP, CNN, transformer block), and
agreement of onnxplug and onnxruntime on the written models.

For each model, mode (dynamic, QDQ, QOperator) and per-tensor/per-channel: the worst element error
against the float model relative to the output's largest magnitude, over 4 held-out samples
(calibration: 16 other samples), and the same measure between onnxplug and onnxruntime (optimized
and unoptimized) on the quantized file.  onnxruntime is only the oracle here.

    python scripts/quant_accuracy.py
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np
import onnx

import onnxplug
from onnxplug.quantization import QuantFormat, quantize_dynamic, quantize_static

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "quantization"))
import models


def main() -> None:
    import onnxruntime as ort

    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    print(f"{'model':<12} {'mode':<10} {'channel':<8} {'vs float':>9} {'vs ort':>9} {'vs ort-opt':>10}")
    with tempfile.TemporaryDirectory() as folder:
        for name, build in models.BUILDERS.items():
            model, shapes = build(np.random.default_rng(0))
            src = os.path.join(folder, f"{name}.onnx")
            onnx.save(model, src)
            samples = models.SampleReader(shapes, 4, 99).samples
            reference = onnxplug.InferenceSession(src, providers=["CPUExecutionProvider"])
            expected = [reference.run(None, s)[0] for s in samples]
            for mode in ("dynamic", "QDQ", "QOperator"):
                for per_channel in (False, True):
                    out = os.path.join(folder, f"{name}_{mode}_{per_channel}.onnx")
                    if mode == "dynamic":
                        quantize_dynamic(src, out, per_channel=per_channel)
                    else:
                        reader = models.SampleReader(shapes, 16, 1)
                        quantize_static(src, out, reader, quant_format=QuantFormat[mode], per_channel=per_channel)
                    plug = onnxplug.InferenceSession(out, providers=["CPUExecutionProvider"])
                    oracle = ort.InferenceSession(out, plain, providers=["CPUExecutionProvider"])
                    oracle_opt = ort.InferenceSession(out, providers=["CPUExecutionProvider"])
                    worst = [0.0, 0.0, 0.0]
                    for sample, want in zip(samples, expected, strict=True):
                        got = plug.run(None, sample)[0]
                        peak = float(np.abs(want).max())
                        for i, other in enumerate((want, oracle.run(None, sample)[0], oracle_opt.run(None, sample)[0])):
                            worst[i] = max(worst[i], float(np.abs(got - other).max()) / peak)
                    channel = "channel" if per_channel else "tensor"
                    print(f"{name:<12} {mode:<10} {channel:<8} {worst[0]:>9.4f} {worst[1]:>9.1e} {worst[2]:>10.4f}")


if __name__ == "__main__":
    main()
