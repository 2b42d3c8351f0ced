"""One session from many threads; intermediate values released after their last use."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model


def _chain_model(length: int, size: int) -> bytes:
    nodes = []
    previous = "x"
    for index in range(length):
        op = "Relu" if index % 2 == 0 else "Tanh"
        nodes.append(helper.make_node(op, [previous], [f"v{index}"]))
        previous = f"v{index}"
    nodes.append(helper.make_node("Identity", [previous], ["y"]))
    return make_model(nodes, [("x", TensorProto.FLOAT, [size])], [("y", TensorProto.FLOAT, [size])]).SerializeToString()


def test_sixteen_threads_get_their_own_results():
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        [("x", TensorProto.FLOAT, ["batch", 8])],
        [("y", TensorProto.FLOAT, None)],
        {"w": w},
    ).SerializeToString()
    session = onnxplug.InferenceSession(model)
    errors: list[str] = []
    barrier = threading.Barrier(16)

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        barrier.wait()
        for _ in range(50):
            x = rng.standard_normal((seed + 1, 8)).astype(np.float32)
            (y,) = session.run(None, {"x": x})
            if not np.allclose(y, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6):
                errors.append(f"thread {seed}: wrong result for its own batch of {seed + 1}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def _peak_bytes(model: bytes, size: int) -> int:
    session = onnxplug.InferenceSession(model)
    x = np.ones(size, np.float32)
    session.run(None, {"x": x})
    tracemalloc.start()
    try:
        session.run(None, {"x": x})
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_peak_memory_does_not_grow_with_chain_length():
    size = 1 << 18  # 1 MiB of float32 per intermediate
    short = _peak_bytes(_chain_model(4, size), size)
    long = _peak_bytes(_chain_model(64, size), size)
    assert long < short + 2 * size * 4, (short, long)
    assert long < 6 * size * 4
