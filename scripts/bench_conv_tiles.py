"""The float32 convolution tiles (``kernels._f32_conv``, on by default) against the numpy paths
(``ONNXPLUG_CPU_CONV_TILE=0``) and onnxruntime, layer by layer, in one process.

    python scripts/bench_conv_tiles.py                # the layer list below, 2 threads
    python scripts/bench_conv_tiles.py --threads 1

For each layer (a single-node Conv model with bias) it times onnxplug with the tiles on, onnxplug
with them off and onnxruntime, alternating the three in rounds (onnxruntime's spinning disabled so
that its threads do not slow the others), and prints the medians and the tiles' ratio to each.
Whole models: run ``scripts/bench.py`` twice, with ``ONNXPLUG_CPU_CONV_TILE=1`` and ``=0``
(the setting is read per call, but the thread teams of the two settings disturb each other inside
one process).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model

# (input channels, output channels, map size, kernel, stride): yolo/ocr/unet/resnet/vgg shapes
LAYERS = [
    (3, 16, 320, 3, 2),
    (16, 32, 160, 3, 2),
    (32, 64, 80, 3, 2),
    (32, 32, 40, 3, 1),
    (64, 64, 20, 3, 1),
    (32, 16, 80, 1, 1),
    (64, 255, 40, 1, 1),
    (64, 64, 56, 3, 1),
    (128, 128, 28, 3, 1),
    (256, 64, 56, 1, 1),
    (512, 512, 7, 3, 1),
    (64, 64, 224, 3, 1),
    (256, 256, 56, 3, 1),
]


def _model(c, m, size, k, s):
    rng = np.random.default_rng(0)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[k // 2] * 4, strides=[s, s])
    return make_model(
        [node],
        [("x", TensorProto.FLOAT, [1, c, size, size])],
        [("y", TensorProto.FLOAT, None)],
        {"w": rng.standard_normal((m, c, k, k), dtype=np.float32), "b": rng.standard_normal(m, dtype=np.float32)},
    ).SerializeToString()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    import onnxruntime

    print("| layer (C→M, map, k, s) | tiles ms | numpy paths ms | onnxruntime ms | tiles/numpy | tiles/ORT |")
    print("|---|---|---|---|---|---|")
    for c, m, size, k, s in LAYERS:
        data = _model(c, m, size, k, s)
        options = onnxplug.SessionOptions()
        options.intra_op_num_threads = args.threads
        plug = onnxplug.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        ort_options = onnxruntime.SessionOptions()
        ort_options.intra_op_num_threads = args.threads
        ort_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        ort = onnxruntime.InferenceSession(data, ort_options, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(1).standard_normal((1, c, size, size), dtype=np.float32)
        feeds = {"x": x}
        calls = max(1, int(2e8 // (m * c * k * k * (size // s) ** 2)))
        runners = {
            "tiles": ("1", plug),
            "numpy": ("0", plug),
            "ort": (None, ort),
        }
        times: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(args.rounds):
            for name, (tile, session) in runners.items():
                if tile is not None:
                    os.environ["ONNXPLUG_CPU_CONV_TILE"] = tile
                session.run(None, feeds)
                time.sleep(0.15)  # OpenBLAS's worker polls ~0.1 s after a threaded product
                start = time.perf_counter()
                for _ in range(calls):
                    session.run(None, feeds)
                times[name].append((time.perf_counter() - start) / calls * 1e3)
        med = {name: statistics.median(values) for name, values in times.items()}
        print(
            f"| {c}→{m}, {size}², {k}×{k}, s{s} | {med['tiles']:.3f} | {med['numpy']:.3f} | {med['ort']:.3f} "
            f"| {med['tiles'] / med['numpy']:.2f} | {med['tiles'] / med['ort']:.2f} |",
            flush=True,
        )
    os.environ.pop("ONNXPLUG_CPU_CONV_TILE", None)


if __name__ == "__main__":
    main()
