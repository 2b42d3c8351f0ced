"""The WASM provider against the CPU provider and onnxruntime: GEMM GFLOP/s and light-model latency.

    python scripts/bench_wasm.py [--repeat 10] [--threads 1] [--models resnet50,squeezenet]

GEMM: one MatMul kernel call of the wasm module under wasmtime (host call included) against
numpy (the CPU provider's MatMul is numpy's BLAS) and an onnxruntime MatMul session.  Models:
the onnx wheel's light model-zoo classics, every node on the WASM provider, against the CPU
provider alone and onnxruntime.  The runtimes are interleaved run by run in one process and the
medians reported; the wasm kernels are single-threaded, the others get ``--threads``.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

import onnxplug

GEMMS = ((64, 512, 1024), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024))
MODELS = ("resnet50", "squeezenet", "densenet121", "inception_v2", "shufflenet", "vgg19")


def _interleaved(fns: dict, repeat: int) -> dict[str, float]:
    for fn in fns.values():
        fn()  # warm up
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def bench_gemm(repeat: int, threads: int) -> None:
    import onnxruntime as ort
    from threadpoolctl import threadpool_limits

    from onnxplug_wasm.kernels_nn import matmul_tensors
    from onnxplug_wasm.memory import LinearMemory

    print(f"\n| M×K×N | wasm GFLOP/s | numpy GFLOP/s ({threads} thr) | onnxruntime GFLOP/s ({threads} thr) ", end="")
    print("| wasm / numpy |")
    print("|---|---|---|---|---|")
    memory = LinearMemory(1 << 30)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    rng = np.random.default_rng(0)
    for m, k, n in GEMMS:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        da, db = memory.to_device(a), memory.to_device(b)
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["a", "b"], ["y"])],
            "g",
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
            [onnx.numpy_helper.from_array(b, "b")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        got = memory.to_host(matmul_tensors(da, db))
        np.testing.assert_allclose(got, a @ b, rtol=1e-3, atol=1e-3 * np.abs(a @ b).max())
        with threadpool_limits(threads):
            medians = _interleaved(
                {
                    "wasm": functools.partial(matmul_tensors, da, db),
                    "numpy": functools.partial(np.matmul, a, b),
                    "ort": functools.partial(session.run, None, {"a": a}),
                },
                repeat,
            )
        flops = 2 * m * n * k
        rates = {name: flops / t / 1e9 for name, t in medians.items()}
        print(
            f"| {m}×{k}×{n} | {rates['wasm']:.1f} | {rates['numpy']:.1f} | {rates['ort']:.1f} | "
            f"{rates['wasm'] / rates['numpy']:.2f} |"
        )


def _logits(name: str) -> bytes | None:
    from onnx.backend.test import loader

    path = os.path.join(loader.DATA_DIR, "light", f"light_{name}.onnx")
    if not os.path.exists(path):
        return None
    model = onnx.load(path)
    if model.graph.node[-1].op_type == "Softmax":
        model.graph.output[0].name = model.graph.node[-1].input[0]
        model.graph.output[0].type.tensor_type.ClearField("shape")
        del model.graph.node[-1]
    return model.SerializeToString()


def bench_models(models: list[str], repeat: int, threads: int) -> None:
    import onnxruntime as ort

    from onnxplug_wasm.testing import environment

    env = environment()
    print(
        f"\n| model | onnxplug WASM ms | onnxplug CPU ms ({threads} thr) | onnxruntime ms ({threads} thr) "
        "| WASM / CPU | WASM / ORT |"
    )
    print("|---|---|---|---|---|---|")
    for name in models:
        data = _logits(name)
        if data is None:
            print(f"| {name} | (not in this onnx wheel) | | | | |")
            continue
        options = onnxplug.SessionOptions()
        options.intra_op_num_threads = threads
        wasm = onnxplug.InferenceSession(data, options, providers=["WasmExecutionProvider"], environment=env)
        # vgg19's largest weight is an unfolded ConstantOfShape: the CPU makes it, it is copied in.
        off = {n.op_type for n in wasm.get_partition_report().nodes if n.provider != "WasmExecutionProvider"}
        assert off <= {"ConstantOfShape"}, off
        cpu = onnxplug.InferenceSession(data, options, providers=["CPUExecutionProvider"], environment=env)
        ort_options = ort.SessionOptions()
        ort_options.intra_op_num_threads = threads
        reference = ort.InferenceSession(data, ort_options, providers=["CPUExecutionProvider"])
        feeds = {}
        for arg in wasm.get_inputs():
            shape = [d if isinstance(d, int) else 1 for d in arg.shape]
            feeds[arg.name] = (np.arange(int(np.prod(shape))).reshape(shape) / np.prod(shape)).astype(np.float32)
        medians = _interleaved(
            {
                "wasm": functools.partial(wasm.run, None, feeds),
                "cpu": functools.partial(cpu.run, None, feeds),
                "ort": functools.partial(reference.run, None, feeds),
            },
            repeat,
        )
        ms = {k: v * 1e3 for k, v in medians.items()}
        print(
            f"| {name} | {ms['wasm']:.1f} | {ms['cpu']:.1f} | {ms['ort']:.1f} | {ms['wasm'] / ms['cpu']:.2f} | "
            f"{ms['wasm'] / ms['ort']:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--skip-gemm", action="store_true")
    args = parser.parse_args()
    from importlib.metadata import version

    print(f"wasmtime {version('wasmtime')}, numpy {np.__version__}, onnx {onnx.__version__}")
    if not args.skip_gemm:
        bench_gemm(args.repeat, args.threads)
    if args.models:
        bench_models([m for m in args.models.split(",") if m], max(3, args.repeat // 2), args.threads)


if __name__ == "__main__":
    main()
