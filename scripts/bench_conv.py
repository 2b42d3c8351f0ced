"""Single convolutions, onnxplug's CPU provider against onnxruntime, at one thread.

Prints each layer's median time and GFLOP/s for both (resnet-like shapes), to see how far
im2col + numpy's BLAS is from onnxruntime's MLAS kernels.

    python scripts/bench_conv.py
"""

from __future__ import annotations

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


def main() -> None:
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
        ours = onnxplug.InferenceSession(model, options)
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


if __name__ == "__main__":
    main()
