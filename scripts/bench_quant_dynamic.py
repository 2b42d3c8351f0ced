"""A dynamically quantized transformer against its float version on onnxplug's CPU provider.

Builds a benchmark transformer (``scripts/bench_families/transformers.py``: minilm, bert-base,
gpt2-small, vit-base; random weights, no download), quantizes it with
``onnxplug.quantization.quantize_dynamic`` (int8 weights, ``DynamicQuantizeLinear →
MatMulInteger``), then times float and quantized sessions in one process, in blocks after a
pause, alternating order (compare the ratio, not the times, on shared machines).

    python scripts/bench_quant_dynamic.py [--model minilm] [--runs 12] [--threads 2]

``ONNXPLUG_CPU_VNNI=0`` times the quantized model without the int8 (AVX-512 VNNI) products.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile

import numpy as np

import onnxplug
from onnxplug.quantization import quantize_dynamic

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _blocks import print_ratio, time_in_blocks
from bench_families import load_family


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--block", type=int, default=3)
    parser.add_argument("--settle", type=float, default=0.3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    models = {model.name: model for model in load_family("transformers")}
    data, feeds = models[args.model].build()
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = args.threads
    with tempfile.TemporaryDirectory() as folder:
        source, target = os.path.join(folder, "float.onnx"), os.path.join(folder, "dynamic.onnx")
        pathlib.Path(source).write_bytes(data)
        quantize_dynamic(source, target)
        sessions = [
            ("float", onnxplug.InferenceSession(source, options, providers=["CPUExecutionProvider"])),
            ("dynamic int8", onnxplug.InferenceSession(target, options, providers=["CPUExecutionProvider"])),
        ]
    want, got = (session.run(None, feeds)[0] for _, session in sessions)
    print(
        f"{args.model}: max |int8 - float| / max |float| on the first output: "
        f"{np.abs(got - want).max() / np.abs(want).max():.4f}"
    )
    runners = [(name, lambda session=session: session.run(None, feeds)) for name, session in sessions]
    times = time_in_blocks(runners, args.runs, args.block, args.settle)
    print_ratio(times, "dynamic int8", "float")


if __name__ == "__main__":
    main()
