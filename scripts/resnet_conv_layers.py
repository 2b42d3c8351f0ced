"""Per Conv layer of light_resnet50: onnxplug's ``convolve`` against a one-node onnxruntime
session, per image at batch 1 and batch N, interleaved in one process.

    python scripts/resnet_conv_layers.py [--batch 8] [--rounds 5] [--threads 2] [--settle 0.15]

One row per distinct layer (input shape, weights, strides, pads; ``n=`` how many the model has),
largest batch-N share of onnxplug's time first, with the Winograd filters prepared and whether the
layer is shiftable and the two runtimes' per-image times.  The minimum over rounds is reported, as it is
the figure least moved by other processes on a shared machine; ``--settle`` idle seconds before
each timed call keep one runtime's spinning threads out of the other's timing.  The last line
sums each column weighted by the layer counts.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import time

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper, shape_inference
from threadpoolctl import threadpool_limits

from onnxplug_cpu.numerics import PackedConv, convolve


def conv_layers() -> collections.Counter:
    path = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_resnet50.onnx")
    model = shape_inference.infer_shapes(onnx.load(path))
    values = list(model.graph.value_info) + list(model.graph.input)
    shapes = {v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim) for v in values}
    layers = collections.Counter()
    for node in model.graph.node:
        if node.op_type == "Conv":
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            strides, pads = tuple(attrs.get("strides", (1, 1))), tuple(attrs.get("pads", (0, 0, 0, 0)))
            layers[(shapes[node.input[0]][1:], shapes[node.input[1]], strides, pads)] += 1
    return layers


def ort_conv(w, b, strides, pads, channels_and_map, threads):
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=list(strides), pads=list(pads))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", *channels_and_map])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    weights = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    graph = helper.make_graph([node], "conv", inputs, outputs, weights)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def ort_call(session, x):
    return session.run(None, {"x": x})[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--settle", type=float, default=0.15)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    sizes = (1, args.batch)
    rows, totals = [], collections.Counter()
    with threadpool_limits(args.threads):
        for (xs, ws, strides, pads), count in conv_layers().items():
            w = (rng.standard_normal(ws) * 0.1).astype(np.float32)
            b = (rng.standard_normal(ws[0]) * 0.1).astype(np.float32)
            session = ort_conv(w, b, strides, pads, xs, args.threads)
            packed = PackedConv(w, 1)
            images = {n: rng.standard_normal((n, *xs)).astype(np.float32) for n in sizes}
            geometry = dict(packed=packed, strides=strides, pads=pads)
            calls = {}
            for n in sizes:
                calls[("onnxplug", n)] = functools.partial(convolve, images[n], w, b, **geometry)
                calls[("onnxruntime", n)] = functools.partial(ort_call, session, images[n])
            want = calls[("onnxruntime", args.batch)]()
            error = np.abs(calls[("onnxplug", args.batch)]() - want).max() / np.abs(want).max()
            times = collections.defaultdict(list)
            for _ in range(args.rounds):
                for key, call in calls.items():
                    time.sleep(args.settle)
                    start = time.perf_counter()
                    call()
                    times[key].append((time.perf_counter() - start) / key[1])
            best = {key: min(v) * 1e3 for key, v in times.items()}
            for key, value in best.items():
                totals[key] += value * count
            cells = " | ".join(
                f"{runtime} b1 {best[(runtime, 1)]:.2f} b{args.batch} {best[(runtime, args.batch)]:.2f} ms"
                for runtime in ("onnxplug", "onnxruntime")
            )
            rows.append(
                (
                    count * best[("onnxplug", args.batch)],
                    f"x{xs} w{ws} s{strides} n={count} winograd={sorted(packed.winograd)} "
                    f"shiftable={packed.shiftable}: {cells} | error {error:.1e}",
                )
            )
    for _, text in sorted(rows, reverse=True):
        print(text)
    print(
        "sum over the model's layers, ms per image: "
        + ", ".join(f"{runtime} b{n} {totals[(runtime, n)]:.1f}" for runtime, n in totals)
    )


if __name__ == "__main__":
    main()
