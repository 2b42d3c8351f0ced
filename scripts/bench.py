"""Benchmark: onnxplug with a vendor provider vs the vendor library used directly vs onnxruntime.

    python scripts/bench.py --providers openvino                  # what `nox -s bench -- --providers openvino` runs
    python scripts/bench.py --providers openvino --layers 4 --seq 64 --repeat 50

Every runtime gets the same model bytes, the same precision (FP32: OpenVINO's
``INFERENCE_PRECISION_HINT=f32``, which its CPU plugin would otherwise lower to bf16 on AMX CPUs)
and the same thread count (OpenVINO ``INFERENCE_NUM_THREADS`` / onnxplug's ``num_of_threads`` /
onnxruntime's ``intra_op_num_threads``).  After warm-up the runtimes are timed in interleaved
rounds (a block of calls each per round, after a pause and two untimed calls, so that one
runtime's spinning threads do not slow the next; the order rotates), so that machine noise hits
them alike, and the table shows median latencies and the ratios measured in
this one run.  "max rel diff" is the largest difference between the runtimes' first outputs,
relative to the output's largest magnitude (the light models' weights are all 0.02, so their
logits tie at about 1e10 and a final Softmax turns 1e-7 differences into different winners:
squeezenet shows that).

Models: the light model-zoo classics shipped in the onnx wheel (their weights are
ConstantOfShape of shape initializers; the initializers are taken out of the graph inputs so that
they are constants, as exporters write weights today, else no runtime could fold them), and a
BERT-base-sized transformer encoder built here with onnx.helper (``--layers``, ``--seq``; post-LN,
erf GELU, hidden 768, 12 heads, FFN 3072, random weights).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT_MODELS = ("resnet50", "densenet121", "inception_v2", "squeezenet", "vgg19")

#: onnxplug provider short name → onnxruntime name.
PROVIDERS = {
    "openvino": "OpenVINOExecutionProvider",
    "cpu": "CPUExecutionProvider",
}


# -- models --------------------------------------------------------------------------------------


def light_model(name: str) -> onnx.ModelProto:
    from onnx.backend.test import loader

    path = os.path.join(loader.DATA_DIR, "light", f"light_{name}.onnx")
    model = onnx.load(path)
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    model.ir_version = max(model.ir_version, 4)
    return model


def encoder_model(layers: int, seq: int, hidden: int = 768, heads: int = 12, ffn: int = 3072) -> onnx.ModelProto:
    """A BERT-base-like encoder stack over ``[1, seq, hidden]`` hidden states (opset 17)."""
    rng = np.random.default_rng(0)
    head = hidden // heads
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def weight(name: str, shape: tuple[int, ...], scale: float = 0.02) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name: str, values, dtype=np.int64) -> str:
        inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    def node(op: str, inputs: list[str], output: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    split_shape = const("split_shape", [1, seq, heads, head])
    merge_shape = const("merge_shape", [1, seq, hidden])
    scale = const("scale", np.float32(1.0 / np.sqrt(head)), np.float32)
    sqrt2 = const("sqrt2", np.float32(np.sqrt(2.0)), np.float32)
    one = const("one", np.float32(1.0), np.float32)
    half = const("half", np.float32(0.5), np.float32)

    def proj(p: str, inp: str, name: str, n_in: int, n_out: int) -> str:
        mm = node("MatMul", [inp, weight(p + name + "_w", (n_in, n_out))], p + name + "_mm")
        return node("Add", [mm, weight(p + name + "_b", (n_out,))], p + name)

    def split(p: str, t: str, name: str, perm: list[int]) -> str:
        r = node("Reshape", [t, split_shape], p + name + "_r")
        return node("Transpose", [r], p + name + "_t", perm=perm)

    def layer_norm(p: str, a: str, b: str, name: str) -> str:
        total = node("Add", [a, b], p + name + "_res")
        gamma, beta = weight(p + name + "_g", (hidden,), 1.0), weight(p + name + "_b", (hidden,))
        return node("LayerNormalization", [total, gamma, beta], p + name, axis=-1, epsilon=1e-12)

    x = "hidden_states"
    for i in range(layers):
        p = f"l{i}_"
        q = split(p, proj(p, x, "q", hidden, hidden), "q", [0, 2, 1, 3])
        k = split(p, proj(p, x, "k", hidden, hidden), "k", [0, 2, 3, 1])
        v = split(p, proj(p, x, "v", hidden, hidden), "v", [0, 2, 1, 3])
        scores = node("Mul", [node("MatMul", [q, k], p + "qk"), scale], p + "scores")
        probs = node("Softmax", [scores], p + "probs", axis=-1)
        ctx = node("Transpose", [node("MatMul", [probs, v], p + "ctx")], p + "ctx_t", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, merge_shape], p + "ctx_r")
        x = layer_norm(p, x, proj(p, ctx, "o", hidden, hidden), "ln1")
        h = proj(p, x, "ff1", hidden, ffn)
        erf = node("Erf", [node("Div", [h, sqrt2], p + "gelu_div")], p + "gelu_erf")
        gelu_mul = node("Mul", [h, node("Add", [erf, one], p + "gelu_add")], p + "gelu_mul")
        gelu = node("Mul", [gelu_mul, half], p + "gelu")
        x = layer_norm(p, x, proj(p, gelu, "ff2", ffn, hidden), "ln2")
    nodes.append(helper.make_node("Identity", [x], ["output"], name="output"))
    graph = helper.make_graph(
        nodes,
        "encoder",
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, [1, seq, hidden])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, seq, hidden])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def dummy_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """onnx's light-model inputs: float32 ``arange(n) / n``; unknown dims as 1."""
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for info in model.graph.input:
        if info.name in initializers:
            continue
        dims = info.type.tensor_type.shape.dim
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in dims)
        size = int(np.prod(shape))
        feeds[info.name] = (np.arange(size).reshape(shape) / size).astype(np.float32)
    return feeds


# -- runtimes ------------------------------------------------------------------------------------


def onnxplug_runner(data: bytes, provider: str, threads: int) -> tuple[Callable[[dict], list], str]:
    import onnxplug

    name = PROVIDERS[provider]
    options = {"num_of_threads": str(threads), "precision": "FP32"} if provider == "openvino" else {}
    so = onnxplug.SessionOptions()
    if provider == "cpu":  # the numpy kernels' BLAS threads (OpenVINO gets num_of_threads)
        so.intra_op_num_threads = threads
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = onnxplug.InferenceSession(data, so, providers=[(name, options)])
    counts = session.partition_counts()
    note = ", ".join(f"{k.replace('ExecutionProvider', '')}={v}" for k, v in counts.items())
    partitions = len(session._plan.partition.fused)
    if partitions:
        note += f" in {partitions} partition{'s' if partitions != 1 else ''}"
    if any("fall back" in str(w.message) for w in caught):
        note += " (a partition fell back to CPU)"
    return (lambda feeds: session.run(None, feeds)), note


def openvino_runner(data: bytes, threads: int) -> Callable[[dict], list]:
    import openvino as ov

    core = ov.Core()
    config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads}
    compiled = core.compile_model(core.read_model(data), "CPU", config)
    request = compiled.create_infer_request()
    names = [port.get_any_name() for port in compiled.inputs]

    def run(feeds: dict) -> list:
        result = request.infer({i: feeds[n] for i, n in enumerate(names)}, share_inputs=True, share_outputs=False)
        return list(result.to_tuple())

    return run


def ort_runner(data: bytes, threads: int) -> Callable[[dict], list]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)


# -- timing --------------------------------------------------------------------------------------


def time_interleaved(
    runners: dict[str, Callable[[dict], list]], feeds: dict, warmup: int, repeat: int, block: int, settle: float
):
    """Median latency per runtime, from rounds of ``block`` timed calls per runtime.

    A runtime's idle threads keep spinning after a call (onnxruntime's for 10-20 ms on this kind
    of machine) and slow whichever runtime runs next on a small machine, so each block starts
    after ``settle`` seconds of sleep and two untimed calls; the order rotates every round.
    """
    for run in runners.values():
        for _ in range(warmup):
            run(feeds)
    samples: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    rounds = max(1, -(-repeat // block))
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            run = runners[name]
            time.sleep(settle)
            run(feeds)
            run(feeds)
            for _ in range(block):
                start = time.perf_counter()
                run(feeds)
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def check_agreement(runners: dict[str, Callable[[dict], list]], feeds: dict) -> float:
    """Largest relative difference between runtimes' first outputs (scaled by the output's range)."""
    outputs = {name: np.asarray(run(feeds)[0], dtype=np.float64) for name, run in runners.items()}
    values = list(outputs.values())
    reference = values[0]
    scale = float(np.abs(reference).max()) or 1.0
    return max(float(np.abs(v - reference).max()) / scale for v in values[1:]) if len(values) > 1 else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--providers", default="openvino", help="onnxplug providers to bench (openvino, cpu)")
    parser.add_argument("--models", default=",".join((*LIGHT_MODELS, "encoder")), help="comma-separated")
    parser.add_argument("--layers", type=int, default=12, help="encoder layers (BERT-base: 12)")
    parser.add_argument("--seq", type=int, default=128, help="encoder sequence length")
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=30, help="timed calls per runtime")
    parser.add_argument("--block", type=int, default=5, help="consecutive timed calls per runtime and round")
    parser.add_argument("--settle-ms", type=float, default=50.0, help="sleep before each block (spinning threads)")
    args = parser.parse_args(argv)

    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    unknown = [p for p in providers if p not in PROVIDERS]
    if unknown:
        parser.error(f"unknown provider(s) {unknown}; known: {', '.join(PROVIDERS)}")
    print(
        f"# bench: threads={args.threads} precision=FP32 warmup={args.warmup} repeat={args.repeat} "
        f"block={args.block} settle={args.settle_ms:g}ms (interleaved rounds, medians); "
        f"encoder layers={args.layers} seq={args.seq}"
    )
    versions = [f"python {sys.version.split()[0]}", f"onnx {onnx.__version__}"]
    for module in ("openvino", "onnxruntime"):
        try:
            versions.append(f"{module} {__import__(module).__version__.split('-')[0]}")
        except ImportError:
            versions.append(f"{module} missing")
    print("# " + ", ".join(versions))

    header = ["model"]
    for p in providers:
        header.append(f"onnxplug+{p} ms")
    header += ["OV direct ms", "ORT ms"]
    for p in providers:
        header += [f"onnxplug+{p}/OV", f"onnxplug+{p}/ORT"]
    header += ["max rel diff", "onnxplug partitioning"]
    rows = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        model = encoder_model(args.layers, args.seq) if name == "encoder" else light_model(name)
        label = f"encoder-{args.layers}L-seq{args.seq}" if name == "encoder" else name
        data = model.SerializeToString()
        feeds = dummy_inputs(model)
        runners: dict[str, Callable[[dict], list]] = {}
        notes = []
        for p in providers:
            runner, note = onnxplug_runner(data, p, args.threads)
            runners[f"onnxplug+{p}"] = runner
            notes.append(note)
        runners["ov"] = openvino_runner(data, args.threads)
        runners["ort"] = ort_runner(data, args.threads)
        diff = check_agreement(runners, feeds)
        medians = time_interleaved(runners, feeds, args.warmup, args.repeat, args.block, args.settle_ms / 1e3)
        row = [label]
        row += [f"{medians[f'onnxplug+{p}'] * 1e3:.2f}" for p in providers]
        row += [f"{medians['ov'] * 1e3:.2f}", f"{medians['ort'] * 1e3:.2f}"]
        for p in providers:
            mine = medians[f"onnxplug+{p}"]
            row += [f"{mine / medians['ov']:.3f}", f"{mine / medians['ort']:.3f}"]
        row += [f"{diff:.1e}", "; ".join(notes)]
        rows.append(row)
        print(" | ".join(row), flush=True)
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print()
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
