"""The CPU provider's depthwise convolution: numba 3×3 kernels against the numpy passes, interleaved.

    python scripts/bench_depthwise.py                    # MobileNetV2's depthwise layers
    python scripts/bench_depthwise.py --models shufflenetv2 --rounds 9
    python scripts/bench_depthwise.py --whole --models mobilenetv2,shufflenetv2   # whole models

Takes every depthwise ``Conv`` (``group`` == channels, one filter each) of the bench family's
model (``scripts/bench_families/cnn.py``, input shapes from onnx shape inference), then times
``_depthwise.depthwise_conv`` (compiled where the layer is 3×3) and ``depthwise_conv_numpy`` in
alternation: per round each layer once with each, in turn.  Prints each layer's median time for
both and their ratio, the total over the model's layers, and checks that the two agree bit for bit.

``--whole`` times whole models instead, at 2 threads, in rounds that alternate onnxplug with the
compiled kernels, onnxplug with the numpy passes (``numerics.depthwise_conv`` swapped for
``depthwise_conv_numpy``, nothing else changed: numba is loaded in both) and onnxruntime, and
prints the median latencies and the ratios to onnxruntime.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_families import load_family

from onnxplug_cpu.kernels import _depthwise
from onnxplug_cpu.numerics import pool_geometry


def depthwise_layers(model: onnx.ModelProto):
    """``(name, x shape, w (C, kh, kw), pads, strides)`` of each depthwise Conv."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in list(inferred.graph.value_info) + list(inferred.graph.input)
    }
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    layers = []
    for node in model.graph.node:
        if node.op_type != "Conv" or node.input[1] not in weights:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        w = weights[node.input[1]]
        x = shapes.get(node.input[0])
        if x and attrs.get("group", 1) == x[1] == w.shape[0] and w.shape[1] == 1:
            pads = attrs.get("pads", [0] * 4)
            layers.append((node.name, tuple(x), w[:, 0], pads, attrs.get("strides", [1, 1])))
    return layers


def label(node_name: str) -> str:
    """``features.3`` of ``/features/features.3/body/.../Conv``: the block, short enough for a column."""
    parts = node_name.strip("/").split("/")
    return parts[min(1, len(parts) - 1)][-27:]


def _run_with(session, feeds, depthwise):
    """One run of ``session`` with ``depthwise`` as the CPU provider's depthwise convolution."""
    from onnxplug_cpu import numerics

    compiled_path = numerics.depthwise_conv
    numerics.depthwise_conv = depthwise
    try:
        return session.run(None, feeds)
    finally:
        numerics.depthwise_conv = compiled_path


def whole_models(names, rounds, repeat):
    import onnxruntime

    import onnxplug
    from onnxplug_cpu import numerics

    family = {m.name: m for m in load_family("cnn")}
    compiled_path = numerics.depthwise_conv
    print(f"whole models, 2 threads, medians of {rounds} interleaved rounds of {repeat} runs")
    print(f"{'model':<14}{'jit ms':>9}{'numpy ms':>10}{'ORT ms':>9}{'jit/ORT':>9}{'numpy/ORT':>11}{'jit/numpy':>11}")
    for name in names:
        data, feeds = family[name].build()
        options = onnxplug.SessionOptions()
        options.intra_op_num_threads = 2
        ours = onnxplug.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        ort_options = onnxruntime.SessionOptions()
        ort_options.intra_op_num_threads = 2
        theirs = onnxruntime.InferenceSession(data, ort_options, providers=["CPUExecutionProvider"])

        variants = {
            "jit": functools.partial(_run_with, ours, feeds, compiled_path),
            "numpy": functools.partial(_run_with, ours, feeds, _depthwise.depthwise_conv_numpy),
            "ort": functools.partial(theirs.run, None, feeds),
        }
        times = {v: [] for v in variants}
        for _ in range(rounds):
            for variant, fn in variants.items():
                fn()  # untimed: wakes this runtime's threads
                start = time.perf_counter()
                for _ in range(repeat):
                    fn()
                times[variant].append((time.perf_counter() - start) / repeat * 1e3)
        med = {v: statistics.median(t) for v, t in times.items()}
        print(
            f"{name:<14}{med['jit']:>9.2f}{med['numpy']:>10.2f}{med['ort']:>9.2f}{med['jit'] / med['ort']:>9.2f}"
            f"{med['numpy'] / med['ort']:>11.2f}{med['jit'] / med['numpy']:>11.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenetv2")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=5, help="calls per timing")
    parser.add_argument("--whole", action="store_true", help="whole models against onnxruntime")
    args = parser.parse_args()
    if args.whole:
        whole_models(args.models.split(","), args.rounds, args.repeat)
        return
    family = {m.name: m for m in load_family("cnn")}
    rng = np.random.default_rng(0)
    for name in args.models.split(","):
        data, _ = family[name].build()
        layers = depthwise_layers(onnx.load_from_string(data))
        cases = []
        for layer, shape, w, pads, strides in layers:
            x = rng.standard_normal(shape).astype(np.float32)
            out, begin, end, _ = pool_geometry(shape[2:], w.shape[1:], strides, None, pads, "NOTSET", 0, "Conv")
            call = (x, w.astype(np.float32), begin, end, out, tuple(strides), (1, 1))
            same = np.array_equal(_depthwise.depthwise_conv(*call), _depthwise.depthwise_conv_numpy(*call))
            cases.append((layer, shape, w.shape[1:], strides, call, same))
        times = {(c[0], v): [] for c in cases for v in ("jit", "numpy")}
        for _ in range(args.rounds):
            for layer, _, _, _, call, _ in cases:
                for variant, fn in (("jit", _depthwise.depthwise_conv), ("numpy", _depthwise.depthwise_conv_numpy)):
                    start = time.perf_counter()
                    for _ in range(args.repeat):
                        fn(*call)
                    times[layer, variant].append((time.perf_counter() - start) / args.repeat)
        print(f"{name}: {len(cases)} depthwise layers, medians of {args.rounds} interleaved rounds")
        print(f"{'layer':<28}{'x shape':<20}{'k':<7}{'s':<5}{'jit ms':>9}{'numpy ms':>10}{'ratio':>7}  same")
        total = {"jit": 0.0, "numpy": 0.0}
        for layer, shape, k, strides, _, same in cases:
            med = {v: statistics.median(times[layer, v]) * 1e3 for v in total}
            for v in total:
                total[v] += med[v]
            print(
                f"{label(layer):<28}{str(list(shape)):<20}{'x'.join(map(str, k)):<7}{strides[0]:<5}"
                f"{med['jit']:>9.3f}{med['numpy']:>10.3f}{med['jit'] / med['numpy']:>7.2f}  {same}"
            )
        print(f"{'total':<60}{total['jit']:>9.3f}{total['numpy']:>10.3f}{total['jit'] / total['numpy']:>7.2f}")


if __name__ == "__main__":
    main()
