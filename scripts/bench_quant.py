"""Quantized vs float ResNet-50 (the onnx wheel's light_resnet50) on onnxplug's CPU provider.

Quantizes the model with onnxplug.quantization.quantize_static (QOperator and QDQ, per-tensor,
calibrated on a few random images), then times float and quantized runs interleaved in one
process in blocks, each after a pause (noisy shared machines: compare ratios, not absolute times).

    python scripts/bench_quant.py [--runs 5] [--samples 4] [--format QOperator] [--per-channel] [--save DIR]
                                  [--threads 2] [--block 5] [--settle 0.3]

``ONNXPLUG_CPU_VNNI=0`` times the quantized model on the float32 exact paths instead of the int8
(AVX-512 VNNI) ones.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import onnx

import onnxplug
from onnxplug.quantization import QuantFormat, quant_pre_process, quantize_static

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _blocks import print_ratio, time_in_blocks


class _Reader:
    def __init__(self, name, shape, count):
        rng = np.random.default_rng(0)
        self.items = [{name: rng.random(shape, dtype=np.float32)} for _ in range(count)]

    def get_next(self):
        return self.items.pop() if self.items else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--format", choices=["QOperator", "QDQ"], default="QOperator")
    parser.add_argument("--per-channel", action="store_true")
    parser.add_argument("--save", metavar="DIR", help="also keep the prepared float and quantized models in DIR")
    parser.add_argument("--threads", type=int, default=2, help="intra_op_num_threads of both sessions")
    parser.add_argument("--block", type=int, default=5, help="timed runs per block")
    parser.add_argument("--settle", type=float, default=0.3, help="seconds of pause before each block")
    args = parser.parse_args()
    src = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_resnet50.onnx")
    model = onnx.load(src)
    x = model.graph.input[0]
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "q.onnx")
        # The light model computes its weights with ConstantOfShape: pre-processing folds them into
        # initializers (and is what both sides of the comparison run).
        prepared = os.path.join(folder, "prepared.onnx")
        quant_pre_process(src, prepared)
        src = prepared
        start = time.perf_counter()
        quantize_static(
            src,
            out,
            _Reader(x.name, shape, args.samples),
            quant_format=QuantFormat[args.format],
            per_channel=args.per_channel,
        )
        print(f"quantize_static ({args.format}, {args.samples} samples): {time.perf_counter() - start:.1f} s")
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            suffix = f"{args.format}{'_per_channel' if args.per_channel else ''}"
            shutil.copy(src, os.path.join(args.save, "float.onnx"))
            shutil.copy(out, os.path.join(args.save, f"quant_{suffix}.onnx"))
        options = onnxplug.SessionOptions()
        options.intra_op_num_threads = args.threads
        float_session = onnxplug.InferenceSession(src, options, providers=["CPUExecutionProvider"])
        quant_session = onnxplug.InferenceSession(out, options, providers=["CPUExecutionProvider"])
    feed = {x.name: np.random.default_rng(1).random(shape, dtype=np.float32)}
    want = float_session.run(None, feed)[0]
    got = quant_session.run(None, feed)[0]
    print(f"max |quantized - float| / max |float|: {np.abs(got - want).max() / np.abs(want).max():.4f}")
    times = time_in_blocks(
        [("float", lambda: float_session.run(None, feed)), ("quantized", lambda: quant_session.run(None, feed))],
        args.runs,
        args.block,
        args.settle,
    )
    print_ratio(times, "quantized", "float")


if __name__ == "__main__":
    main()
