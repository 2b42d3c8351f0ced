"""The CPU provider's depthwise convolution: numba 3×3 kernels against the numpy passes, interleaved.

    python scripts/bench_depthwise.py                    # MobileNetV2's depthwise layers
    python scripts/bench_depthwise.py --models shufflenetv2 --rounds 9
    python scripts/bench_depthwise.py --whole --models mobilenetv2,shufflenetv2   # whole models
    python scripts/bench_depthwise.py --memory          # peak RSS with and without numba's kernels

Records the arguments of every depthwise convolution (``group`` == channels, one filter each)
that one onnxplug run of the bench family's model makes (``scripts/bench_families/cnn.py``), then
times ``_depthwise.depthwise_conv`` (compiled where the layer is 3×3) and ``depthwise_conv_numpy``
in alternation: per round each call once with each, in turn.  Prints each layer's median time for
both and their ratio, the total over the model's layers, and checks that the two agree bit for bit.

``--whole`` times whole models instead, at 2 threads, in rounds that alternate onnxplug with the
compiled kernels, onnxplug with the numpy passes (``numerics.depthwise_conv`` swapped for
``depthwise_conv_numpy``, nothing else changed: numba is loaded in both) and onnxruntime (order
reversed every round, 30 ms pause and an untimed run before each block, so that onnxruntime's
spinning pool does not slow whichever variant follows it), and prints the median latencies and
the ratios to onnxruntime.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_families import load_family

from onnxplug_cpu.kernels import _depthwise


def depthwise_calls(data: bytes, feeds) -> list[tuple]:
    """The arguments of every depthwise convolution one run of the model makes (the provider's
    own calls, so the shapes, pads and strides it really uses), in run order."""
    import onnxplug
    from onnxplug_cpu import numerics

    calls = []
    compiled_path = numerics.depthwise_conv

    def record(*args):
        calls.append(args)
        return compiled_path(*args)

    session = onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"])
    numerics.depthwise_conv = record
    try:
        session.run(None, feeds)
    finally:
        numerics.depthwise_conv = compiled_path
    return calls


def _run_with(session, feeds, depthwise):
    """One run of ``session`` with ``depthwise`` as the CPU provider's depthwise convolution."""
    from onnxplug_cpu import numerics

    compiled_path = numerics.depthwise_conv
    numerics.depthwise_conv = depthwise
    try:
        return session.run(None, feeds)
    finally:
        numerics.depthwise_conv = compiled_path


def _timed(depthwise, sink: list[float]):
    """``depthwise`` adding its seconds to ``sink[0]``: the depthwise share of a whole run."""

    def timed(*args):
        start = time.perf_counter()
        try:
            return depthwise(*args)
        finally:
            sink[0] += time.perf_counter() - start

    return timed


def whole_models(names, rounds, repeat):
    import onnxruntime

    import onnxplug
    from onnxplug_cpu import numerics

    family = {m.name: m for m in load_family("cnn")}
    compiled_path = numerics.depthwise_conv
    print(f"whole models, 2 threads, medians of {rounds} interleaved rounds of {repeat} runs")
    print("(dw ms: the depthwise calls' time inside those runs)")
    print(
        f"{'model':<14}{'jit ms':>9}{'numpy ms':>10}{'ORT ms':>9}{'jit/ORT':>9}{'numpy/ORT':>11}{'jit/numpy':>11}"
        f"{'jit dw ms':>11}{'numpy dw ms':>13}"
    )
    for name in names:
        data, feeds = family[name].build()
        options = onnxplug.SessionOptions()
        options.intra_op_num_threads = 2
        ours = onnxplug.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        ort_options = onnxruntime.SessionOptions()
        ort_options.intra_op_num_threads = 2
        theirs = onnxruntime.InferenceSession(data, ort_options, providers=["CPUExecutionProvider"])

        sinks = {"jit": [0.0], "numpy": [0.0], "ort": [0.0]}
        variants = {
            "jit": functools.partial(_run_with, ours, feeds, _timed(compiled_path, sinks["jit"])),
            "numpy": functools.partial(_run_with, ours, feeds, _timed(_depthwise.depthwise_conv_numpy, sinks["numpy"])),
            "ort": functools.partial(theirs.run, None, feeds),
        }
        times = {v: [] for v in variants}
        inside = {v: [] for v in variants}
        order = list(variants.items())
        for _ in range(rounds):
            order.reverse()  # no variant always runs right after onnxruntime
            for variant, fn in order:
                time.sleep(0.03)  # lets the previous runtime's spinning threads go idle
                fn()  # untimed: wakes this runtime's threads
                sinks[variant][0] = 0.0
                start = time.perf_counter()
                for _ in range(repeat):
                    fn()
                times[variant].append((time.perf_counter() - start) / repeat * 1e3)
                inside[variant].append(sinks[variant][0] / repeat * 1e3)
        med = {v: statistics.median(t) for v, t in times.items()}
        dw = {v: statistics.median(t) for v, t in inside.items()}
        print(
            f"{name:<14}{med['jit']:>9.2f}{med['numpy']:>10.2f}{med['ort']:>9.2f}{med['jit'] / med['ort']:>9.2f}"
            f"{med['numpy'] / med['ort']:>11.2f}{med['jit'] / med['numpy']:>11.2f}"
            f"{dw['jit']:>11.2f}{dw['numpy']:>13.2f}"
        )


_PEAK = """
import resource, sys
sys.path.insert(0, sys.argv[1])
import onnxplug
from bench_families import load_family
data, feeds = {m.name: m for m in load_family("cnn")}[sys.argv[2]].build()
session = onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"])
for _ in range(3):
    session.run(None, feeds)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "numba" in sys.modules)
"""


def peak_memory(names) -> None:
    """Peak RSS of a fresh process that creates the session and runs it 3 times, with the
    compiled kernels (numba loaded on the first depthwise call) and with ``ONNXPLUG_CPU_JIT=0``."""
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    print(f"{'model':<14}{'jit peak MiB':>14}{'JIT=0 peak MiB':>16}  numba loaded")
    for name in names:
        peaks = []
        for jit in ("1", "0"):
            env = dict(os.environ, ONNXPLUG_CPU_JIT=jit)
            out = subprocess.run([sys.executable, "-c", _PEAK, here, name], env=env, capture_output=True, text=True)
            peaks.append(out.stdout.split())
        print(f"{name:<14}{float(peaks[0][0]):>14.0f}{float(peaks[1][0]):>16.0f}  {peaks[0][1]}/{peaks[1][1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenetv2")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=5, help="calls per timing")
    parser.add_argument("--whole", action="store_true", help="whole models against onnxruntime")
    parser.add_argument("--memory", action="store_true", help="peak RSS with and without the compiled kernels")
    args = parser.parse_args()
    if args.memory:
        peak_memory(args.models.split(","))
        return
    if args.whole:
        whole_models(args.models.split(","), args.rounds, args.repeat)
        return
    family = {m.name: m for m in load_family("cnn")}
    for name in args.models.split(","):
        data, feeds = family[name].build()
        cases = []
        for index, call in enumerate(depthwise_calls(data, feeds)):
            x, w, _, _, _, strides = call[:6]
            same = np.array_equal(_depthwise.depthwise_conv(*call), _depthwise.depthwise_conv_numpy(*call))
            cases.append((f"#{index}", x.shape, w.shape[1:], strides, call, same))
        times = {(c[0], v): [] for c in cases for v in ("jit", "numpy")}
        for _ in range(args.rounds):
            for layer, _, _, _, call, _ in cases:
                for variant, fn in (("jit", _depthwise.depthwise_conv), ("numpy", _depthwise.depthwise_conv_numpy)):
                    start = time.perf_counter()
                    for _ in range(args.repeat):
                        fn(*call)
                    times[layer, variant].append((time.perf_counter() - start) / args.repeat)
        print(f"{name}: {len(cases)} depthwise layers, medians of {args.rounds} interleaved rounds")
        print(f"{'call':<8}{'x shape':<20}{'k':<7}{'s':<5}{'jit ms':>9}{'numpy ms':>10}{'ratio':>7}  same")
        total = {"jit": 0.0, "numpy": 0.0}
        for layer, shape, k, strides, _, same in cases:
            med = {v: statistics.median(times[layer, v]) * 1e3 for v in total}
            for v in total:
                total[v] += med[v]
            print(
                f"{layer:<8}{str(list(shape)):<20}{'x'.join(map(str, k)):<7}{strides[0]:<5}"
                f"{med['jit']:>9.3f}{med['numpy']:>10.3f}{med['jit'] / med['numpy']:>7.2f}  {same}"
            )
        print(f"{'total':<40}{total['jit']:>9.3f}{total['numpy']:>10.3f}{total['jit'] / total['numpy']:>7.2f}")


if __name__ == "__main__":
    main()
