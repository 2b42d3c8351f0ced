"""light_resnet50 before/after the residual fusion (and the compiled conv epilogue), interleaved.

    python scripts/cnn_epilogue_ab.py [--batch 8] [--rounds 6] [--threads 2] [--settle 0.3] [--numba]

"before" is the graph optimized without ``ms_ops.fused_conv``'s residual rule (16 Sum and 16
Relu nodes stay) with the numpy epilogue passes (bias, Z, Relu one pass each); "after" is the
graph as optimized now (those folded into FusedConv), with the epilogue the code picks: the
numpy passes, or with ``--numba`` (numba loaded, as the tree kernels or an application load
it) the one-pass compiled loop of ``kernels._epilogue``.  Each graph is written by a child
process (``optimized_model_filepath``; the rules are built once per process), then both run here
with optimizations off, alternating, ``--settle`` idle seconds before each timed run.  Medians
per image and the before/after ratio at batch 1 and ``--batch``.

It also prints, for the current code, the minor page faults and system CPU seconds of one run at
each batch with the malloc settings of ``use_arena`` on and off (``ONNXPLUG_CPU_ARENA``), each in
its own child process: those settings are process-wide, so they cannot alternate in one process,
and fault counts, unlike times, are not disturbed by a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from load_test import light_resnet50_with_batch

import onnxplug

_WRITE = """
import sys, warnings
warnings.simplefilter("ignore")
import onnxplug
if sys.argv[3] == "before":
    import onnxplug_ms_ops.rules.fused as fused
    fused.fused_conv_rules = lambda: [
        fused.FuseConvActivation.rule(f"conv_{a}", activation=a) for a in fused._CONV_ACTIVATIONS
    ]
options = onnxplug.SessionOptions()
options.optimized_model_filepath = sys.argv[2]
onnxplug.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
"""

_FAULTS = """
import json, resource, sys, time
import numpy as np
import onnxplug
options = onnxplug.SessionOptions()
options.intra_op_num_threads = int(sys.argv[2])
session = onnxplug.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
name = session.get_inputs()[0].name
counts = {}
for size in (1, int(sys.argv[3])):
    x = np.random.default_rng(0).random((size, 3, 224, 224), dtype=np.float32)
    for _ in range(2):  # the first runs at a new size grow the heap to that size's peak
        session.run(None, {name: x})
    before = resource.getrusage(resource.RUSAGE_SELF)
    session.run(None, {name: x})
    after = resource.getrusage(resource.RUSAGE_SELF)
    counts[size] = (after.ru_minflt - before.ru_minflt, after.ru_stime - before.ru_stime)
print(json.dumps(counts))
"""


def optimized(path: str, folder: str, variant: str) -> str:
    target = os.path.join(folder, f"{variant}.onnx")
    subprocess.run([sys.executable, "-c", _WRITE, path, target, variant], check=True)
    return target


def session(path: str, threads: int) -> onnxplug.InferenceSession:
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = onnxplug.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onnxplug.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--settle", type=float, default=0.3)
    parser.add_argument("--numba", action="store_true", help="load numba: the compiled epilogue runs")
    args = parser.parse_args()
    if args.numba:
        import numba  # noqa: F401
    from onnxplug_cpu.kernels import _epilogue

    folder = tempfile.mkdtemp()
    path = light_resnet50_with_batch(folder)
    sessions = {v: session(optimized(path, folder, v), args.threads) for v in ("before", "after")}
    compiled = _epilogue._compiled
    epilogues = {"before": lambda: None, "after": compiled}  # before: always the numpy passes
    name = sessions["after"].get_inputs()[0].name
    rng = np.random.default_rng(0)
    images = {size: rng.random((size, 3, 224, 224), dtype=np.float32) for size in (1, args.batch)}
    outputs = {}
    for variant, s in sessions.items():
        _epilogue._compiled = epilogues[variant]
        outputs[variant] = [s.run(None, {name: images[size]})[0] for size in images]  # warm-up
    for a, b in zip(outputs["before"], outputs["after"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    per_image: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds):
        for variant, s in sessions.items():
            _epilogue._compiled = epilogues[variant]
            for size, batch in images.items():
                time.sleep(args.settle)
                start = time.perf_counter()
                s.run(None, {name: batch})
                per_image.setdefault((variant, size), []).append((time.perf_counter() - start) / size)
    _epilogue._compiled = compiled
    for size in images:
        before, after = (statistics.median(per_image[(v, size)]) * 1e3 for v in ("before", "after"))
        print(f"batch {size}: before {before:.1f} ms per image, after {after:.1f} ms: {before / after:.2f}x")
    for arena in ("0", "1"):
        env = {**os.environ, "ONNXPLUG_CPU_ARENA": arena}
        command = [sys.executable, "-c", _FAULTS, path, str(args.threads), str(args.batch)]
        counts = json.loads(subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout)
        text = ", ".join(f"batch {k}: {f} minor faults, {s:.3f} s system" for k, (f, s) in counts.items())
        print(f"use_arena {'on' if arena == '1' else 'off'}: per run {text}")


if __name__ == "__main__":
    main()
