"""Convolutions and CNNs: onnxplug's CPU provider against onnxruntime, interleaved in one process.

    python scripts/bench_conv.py                       # single layers at one thread
    python scripts/bench_conv.py --models all          # the cnn bench family at 2 threads
    python scripts/bench_conv.py --models mobilenetv2,unet --by-op

Layers mode prints each layer's median time and GFLOP/s for both (resnet-like shapes), to see how
far the provider's convolution is from onnxruntime's MLAS kernels.  Models mode times every model
of ``scripts/bench_families/cnn.py`` in rounds that alternate the runtimes (a short sleep and an
untimed call before each block, so one runtime's spinning threads slow the other less), and prints
the median latencies, their ratio and the geometric mean of the ratios; ``--by-op`` adds
onnxplug's time per op type from its profiler, to show where the remaining gap is.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import statistics
import sys
import tempfile
import time

import numpy as np
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model

LAYERS = [(64, 64, 56, 3, 1), (64, 256, 56, 1, 1), (128, 128, 28, 3, 1), (3, 64, 224, 7, 2)]


def _median_ms(fn, repeat: int = 9) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def layers() -> None:
    import onnxruntime

    for channels, maps, size, kernel, stride in LAYERS:
        weights = np.random.default_rng(0).random((maps, channels, kernel, kernel), dtype=np.float32)
        node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[kernel // 2] * 4, strides=[stride, stride])
        model = make_model(
            [node],
            [("x", TensorProto.FLOAT, [1, channels, size, size])],
            [("y", TensorProto.FLOAT, None)],
            {"w": weights},
        ).SerializeToString()
        x = np.random.default_rng(1).random((1, channels, size, size), dtype=np.float32)
        options = onnxplug.SessionOptions()
        options.intra_op_num_threads = 1
        ours = onnxplug.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        ort_options = onnxruntime.SessionOptions()
        ort_options.intra_op_num_threads = 1
        theirs = onnxruntime.InferenceSession(model, ort_options, providers=["CPUExecutionProvider"])
        gflop = 2 * maps * channels * kernel * kernel * (size // stride) ** 2 / 1e9
        a = _median_ms(lambda session=ours, feed=x: session.run(None, {"x": feed}))
        b = _median_ms(lambda session=theirs, feed=x: session.run(None, {"x": feed}))
        print(
            f"C={channels:3d} M={maps:3d} {size}x{size} k={kernel} s={stride}: onnxplug {a:6.2f} ms "
            f"({gflop / a * 1e3:4.0f} GFLOP/s)  onnxruntime {b:6.2f} ms ({gflop / b * 1e3:4.0f} GFLOP/s)  "
            f"ratio {a / b:4.2f}"
        )


def _by_op(data: bytes, feeds: dict, threads: int, runs: int) -> list[tuple[str, float]]:
    """onnxplug's median-free mean time per op type (ms per run) from its profiler."""
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = threads
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "conv")
    session = onnxplug.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    for _ in range(runs):
        session.run(None, feeds)
    with open(session.end_profiling()) as f:
        events = json.load(f)
    totals: collections.Counter[str] = collections.Counter()
    for event in events:
        if event.get("cat") == "Node":
            totals[event["args"]["op_name"]] += event["dur"] / 1e3 / (runs + 1)
    return totals.most_common()


def models(names: list[str], threads: int, rounds: int, block: int, by_op: bool) -> None:
    import onnxruntime

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_families import cnn

    chosen = [m for m in cnn.MODELS if names == ["all"] or m.name in names]
    ratios = []
    print(f"| model | onnxplug+cpu ms | onnxruntime ms | ratio | max abs diff / max |  ({threads} threads)")
    print("|---|---|---|---|---|")
    for model in chosen:
        data, feeds = model.build()
        options = onnxplug.SessionOptions()
        options.intra_op_num_threads = threads
        ours = onnxplug.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        ort_options = onnxruntime.SessionOptions()
        ort_options.intra_op_num_threads = threads
        ort_options.inter_op_num_threads = 1
        theirs = onnxruntime.InferenceSession(data, ort_options, providers=["CPUExecutionProvider"])
        a, b = ours.run(None, feeds), theirs.run(None, feeds)
        diff = max(float(np.abs(x - y).max() / (np.abs(y).max() or 1)) for x, y in zip(a, b))
        samples: dict[str, list[float]] = {"ours": [], "theirs": []}
        runners = {"ours": ours, "theirs": theirs}
        for index in range(rounds):
            order = ("ours", "theirs") if index % 2 == 0 else ("theirs", "ours")
            for name in order:
                time.sleep(0.02)
                runners[name].run(None, feeds)
                for _ in range(block):
                    start = time.perf_counter()
                    runners[name].run(None, feeds)
                    samples[name].append(time.perf_counter() - start)
        ms = {name: statistics.median(values) * 1e3 for name, values in samples.items()}
        ratio = ms["ours"] / ms["theirs"]
        ratios.append(ratio)
        print(f"| {model.name} | {ms['ours']:.2f} | {ms['theirs']:.2f} | {ratio:.2f} | {diff:.1e} |", flush=True)
        if by_op:
            for op, t in _by_op(data, feeds, threads, max(2, block))[:8]:
                print(f"|   {op} | {t:.2f} | | | |")
    if ratios:
        print(f"geometric mean of the ratios: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated cnn family models, or 'all' (default: single layers)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--block", type=int, default=3)
    parser.add_argument("--by-op", action="store_true", help="onnxplug's time per op type")
    args = parser.parse_args(argv)
    if args.models:
        models(args.models.split(","), args.threads, args.rounds, args.block, args.by_op)
    else:
        layers()


if __name__ == "__main__":
    main()
