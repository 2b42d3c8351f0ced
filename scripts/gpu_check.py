"""The CUDA provider's checks on a real GPU, in one command that installs nothing.

    python scripts/gpu_check.py            # node cases + light models, prints counts and latencies

1. ONNX's node cases that have an op the CUDA kernels claim, run with CUDAExecutionProvider first
   (CuPy arrays) and the CPU provider behind it: pass / fail counts and the nodes the GPU ran.
2. Latency of a few light models (onnx wheel: resnet50, squeezenet) with the CUDA provider,
   against the CPU provider and, when importable, onnxruntime-gpu's CUDAExecutionProvider
   (medians of 20 runs after 5 warm-ups).

It needs CuPy and a GPU; without them it says why and exits 2.  Not run in CI (no GPU there).
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "conformance"))
sys.path.insert(0, str(ROOT / "scripts"))

CUDA = "CUDAExecutionProvider"


def _median_ms(run, feeds, warmup=5, repeat=20) -> float:
    for _ in range(warmup):
        run(feeds)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run(feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def node_cases() -> None:
    import _harness

    import onnxplug
    from onnxplug_cuda.kernels import registry

    ops = {kernel.key.op_type for kernel in registry}
    expectations = _harness.load_expectations(str(_harness.XFAIL_FILE))
    passed = failed = gpu_nodes = 0
    failures = []
    for case in _harness.load_cases(("node",)):
        expectation = expectations.get((case.suite, case.name))
        if expectation is not None and expectation.reason is not None:
            continue
        if case.model is None or not {n.op_type for n in case.model.graph.node} & ops:
            continue
        sessions: list = []

        def factory(source, providers=None, enable_fallback=1, sessions=sessions):
            session = onnxplug.InferenceSession(source, providers=[CUDA, "CPUExecutionProvider"])
            sessions.append(session)
            return session

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _harness.run_case(case, expectation, session_factory=factory)
            passed += 1
        except Exception as error:  # noqa: BLE001 - a report, not a test
            failed += 1
            failures.append(f"{case.name}: {type(error).__name__}: {str(error)[:160]}")
        for session in sessions:
            gpu_nodes += sum(1 for n in session.get_partition_report().nodes if n.provider == CUDA)
    print(f"node cases with CUDA kernels first: {passed} passed, {failed} failed; the GPU ran {gpu_nodes} nodes")
    for line in failures[:30]:
        print("  FAIL", line)


def models() -> None:
    from bench_families import load_family

    import onnxplug

    chosen = {m.name: m for m in load_family("cnn") if m.name in ("resnet50", "squeezenet")}
    rows = []
    builds = [(name, model.build) for name, model in chosen.items()]
    for name, build in builds:
        data, feeds = build()
        cuda = onnxplug.InferenceSession(data, providers=[CUDA, "CPUExecutionProvider"])
        cpu = onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"])
        row = [name, _median_ms(functools.partial(cuda.run, None), feeds)]
        row.append(_median_ms(functools.partial(cpu.run, None), feeds))
        got, want = cuda.run(None, feeds)[0], cpu.run(None, feeds)[0]
        scale = float(np.abs(want).max()) or 1.0
        row.append(float(np.abs(got - want).max()) / scale)
        try:
            import onnxruntime

            if CUDA in onnxruntime.get_available_providers():
                ort = onnxruntime.InferenceSession(data, providers=[CUDA])
                row.append(_median_ms(functools.partial(ort.run, None), feeds))
        except ImportError:
            pass
        rows.append(row)
    for row in rows:
        extra = f", onnxruntime-gpu {row[4]:.2f} ms" if len(row) > 4 else ""
        print(f"{row[0]}: onnxplug CUDA {row[1]:.2f} ms, CPU {row[2]:.2f} ms{extra}, max rel diff {row[3]:.1e}")


def main() -> int:
    from onnxplug_cuda.provider import CUDAProviderFactory

    factory = CUDAProviderFactory()
    if not factory.devices():
        print(f"no CUDA device: {factory.unavailable_reason()}")
        return 2
    print("devices:", ", ".join(str(d) for d in factory.devices()))
    node_cases()
    models()
    return 0


if __name__ == "__main__":
    sys.exit(main())
