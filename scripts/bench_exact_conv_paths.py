"""QOperator ResNet-50: this CPU provider's exact-convolution paths against the ones before them.

"before" switches every prepared ``ExactConv`` of the quantized session back to the earlier
behaviour — channel blocks instead of the per-offset shifted path (``tap_stacked = None``) and
the correction added in its own numpy pass (``rounded_parts`` answering ``sums(rounded=True)``) —
and "after" restores them; float, before and after run interleaved in one process, and the
outputs of before and after are checked equal.  Compare the printed ratios, not the times
(shared machines).

    python scripts/bench_exact_conv_paths.py DIR [--runs 15] [--threads 2]

DIR holds ``float.onnx`` and ``quant_QOperator.onnx`` from
``python scripts/bench_quant.py --format QOperator --save DIR``.  These are the float32 exact
paths, which a CPU with AVX-512 VNNI no longer takes (``kernels._int8_conv`` computes the layers
in int8 there): the script sets ``ONNXPLUG_CPU_VNNI=0`` for itself.
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import numpy as np

os.environ["ONNXPLUG_CPU_VNNI"] = "0"  # before any session: the float32 exact paths are measured

import onnxplug
from onnxplug_cpu.kernels._exact_conv import ExactConv


def _switch(prepared: list, saved: dict, before: bool) -> None:
    for item in prepared:
        if before:
            item.tap_stacked = None
            item.rounded_parts = lambda x, item=item: (item.sums(x, rounded=True), None)
        else:
            item.tap_stacked = saved[id(item)]
            item.__dict__.pop("rounded_parts", None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = args.threads
    float_session = onnxplug.InferenceSession(
        os.path.join(args.folder, "float.onnx"), options, providers=["CPUExecutionProvider"]
    )
    quant_session = onnxplug.InferenceSession(
        os.path.join(args.folder, "quant_QOperator.onnx"), options, providers=["CPUExecutionProvider"]
    )
    prepared = [item for item in gc.get_objects() if isinstance(item, ExactConv)]
    saved = {id(item): item.tap_stacked for item in prepared}
    print(f"{len(prepared)} exact convolutions, {sum(v is not None for v in saved.values())} on the per-offset path")
    name = float_session.get_inputs()[0].name
    shape = [1, 3, 224, 224]
    feed = {name: np.random.default_rng(1).random(shape, dtype=np.float32)}
    _switch(prepared, saved, True)
    want = quant_session.run(None, feed)[0]
    _switch(prepared, saved, False)
    got = quant_session.run(None, feed)[0]
    float_session.run(None, feed)
    if not np.array_equal(want, got):
        raise SystemExit("before and after differ")
    times = {"float": [], "before": [], "after": []}
    for _ in range(args.runs):
        for key in times:
            _switch(prepared, saved, key == "before")
            session = float_session if key == "float" else quant_session
            start = time.perf_counter()
            session.run(None, feed)
            times[key].append(time.perf_counter() - start)
    _switch(prepared, saved, False)
    medians = {key: float(np.median(values)) for key, values in times.items()}
    for key, value in medians.items():
        print(f"{key:>7}: median {value * 1000:.1f} ms over {args.runs} rounds")
    print(f"before / float: {medians['before'] / medians['float']:.2f}")
    print(f" after / float: {medians['after'] / medians['float']:.2f}")
    print(f"after / before: {medians['after'] / medians['before']:.2f}")


if __name__ == "__main__":
    main()
