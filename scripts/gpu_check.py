"""The CUDA provider's checks on a real GPU, in one command that installs nothing.

    python scripts/gpu_check.py            # node cases, kernels, light models: counts and latencies
    python scripts/gpu_check.py --backend array_api_strict --case-seconds 30   # the script itself, no GPU

1. ONNX's node cases that have an op the CUDA kernels claim, run with CUDAExecutionProvider first
   (CuPy arrays) and the CPU provider behind it: pass / fail counts, the nodes the GPU ran, and
   the claimed ops that no case ran on the GPU (every kernel module is covered this way: the op
   list comes from the registry).  Stops starting new cases after ``--case-seconds`` (240).
2. Per-kernel latency on larger inputs than the node cases (Conv, MatMul, Softmax,
   LayerNormalization, Attention, MaxPool, AveragePool, Resize, ReduceMean, Gather, Where): the
   CUDA provider against the CPU provider in the same process.
3. Latency of a few light models (onnx wheel: resnet50, squeezenet) with the CUDA provider,
   against the CPU provider and, when importable, onnxruntime-gpu's CUDAExecutionProvider
   (medians of 20 runs after 5 warm-ups).
4. ``enable_cuda_graph``: the same models through IOBinding with preallocated device values,
   recorded once and replayed (the contract kit's capture check runs in the pytest line of
   ``plugins/cuda/tests/test_contract.py``), against the same binding without the graph.

It needs CuPy and a GPU; without them it says why and exits 2.  It installs nothing and is
meant to finish in under 8 minutes.  Not run in CI, and not run yet at all (no GPU was lent
when it was written): its first run is its test.
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
#: ``--backend array_api_strict`` (or ``numpy``): the same script on the test backends, on any
#: machine, to check the script itself; its timings say nothing about a GPU.
ENVIRONMENT = None


def _session(data, providers):
    import onnxplug

    return onnxplug.InferenceSession(data, providers=providers, environment=ENVIRONMENT)


def _median_ms(run, feeds, warmup=5, repeat=20) -> float:
    for _ in range(warmup):
        run(feeds)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run(feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def node_cases(budget_s: float) -> None:
    import _harness

    from onnxplug_cuda.kernels import registry

    ops = {kernel.key.op_type for kernel in registry}
    expectations = _harness.load_expectations(str(_harness.XFAIL_FILE))
    passed = failed = gpu_nodes = skipped = 0
    failures = []
    ran_on_gpu: set[str] = set()
    deadline = None
    for case in _harness.load_cases(("node",)):
        deadline = deadline or time.perf_counter() + budget_s  # from the first case: loading is slow
        if time.perf_counter() > deadline:
            skipped += 1
            continue
        expectation = expectations.get((case.suite, case.name))
        if expectation is not None and expectation.reason is not None:
            continue
        if case.model is None or not {n.op_type for n in case.model.graph.node} & ops:
            continue
        sessions: list = []

        def factory(source, providers=None, enable_fallback=1, sessions=sessions):
            session = _session(source, [CUDA, "CPUExecutionProvider"])
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
            report = session.get_partition_report().nodes
            gpu_nodes += sum(1 for n in report if n.provider == CUDA)
            ran_on_gpu.update(n.op_type for n in report if n.provider == CUDA)
    print(
        f"node cases with CUDA kernels first: {passed} passed, {failed} failed"
        f"{f', {skipped} not started (time budget)' if skipped else ''}; the GPU ran {gpu_nodes} nodes"
    )
    print("claimed ops no case ran on the GPU:", ", ".join(sorted(ops - ran_on_gpu)) or "none")
    for line in failures[:30]:
        print("  FAIL", line)


def _single_node_model(op, inputs, outputs, attributes=None, initializers=()):
    from onnx import TensorProto, helper

    def info(name, shape, elem=TensorProto.FLOAT):
        return helper.make_tensor_value_info(name, elem, shape)

    node = helper.make_node(op, [n for n, _, _ in inputs], [n for n, _ in outputs], **(attributes or {}))
    graph = helper.make_graph(
        [node],
        op,
        [info(n, s, e) for n, s, e in inputs if n and n not in {t.name for t in initializers}],
        [info(n, s) for n, s in outputs],
        initializer=list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]).SerializeToString()


def kernels() -> None:
    """One node per op, GPU against CPU, inputs big enough for the GPU to matter."""
    from onnx import TensorProto, numpy_helper

    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT

    def r(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    cases = [
        ("Conv", [("x", [8, 64, 56, 56], f), ("w", [64, 64, 3, 3], f)], [("y", None)], {"pads": [1, 1, 1, 1]}),
        ("MatMul", [("m1", [2048, 2048], f), ("m2", [2048, 2048], f)], [("y", None)], {}),
        ("Softmax", [("x", [64, 12, 128, 128], f)], [("y", None)], {"axis": -1}),
        ("LayerNormalization", [("x", [64, 128, 768], f), ("gamma", [768], f)], [("y", None)], {"axis": -1}),
        ("Attention", [("q", [8, 12, 256, 64], f), ("k", [8, 12, 256, 64], f), ("v", [8, 12, 256, 64], f)],
         [("y", None)], {"is_causal": 1}),
        ("MaxPool", [("x", [8, 64, 112, 112], f)], [("y", None)], {"kernel_shape": [3, 3], "strides": [2, 2]}),
        ("AveragePool", [("x", [8, 64, 112, 112], f)], [("y", None)], {"kernel_shape": [3, 3], "pads": [1] * 4}),
        ("Resize", [("x", [8, 64, 56, 56], f), ("", None, f), ("scales", [4], f)], [("y", None)], {"mode": "linear"}),
        ("ReduceMean", [("x", [64, 128, 768], f), ("axes", [1], TensorProto.INT64)], [("y", None)], {}),
        ("Gather", [("x", [50000, 768], f), ("indices", [64, 128], TensorProto.INT64)], [("y", None)], {}),
        ("Where", [("cond", [64, 128, 768], TensorProto.BOOL), ("x", [64, 128, 768], f), ("z", [64, 128, 768], f)],
         [("y", None)], {}),
    ]  # fmt: skip
    constants = {
        "gamma": np.ones(768, np.float32),
        "scales": np.array([1, 1, 2, 2], np.float32),
        "axes": np.array([-1], np.int64),
        "indices": rng.integers(0, 50000, (64, 128)),
        "cond": rng.random((64, 128, 768)) > 0.5,
    }
    weights = ("gamma", "scales", "axes")  # initializers; everything else is fed
    for op, inputs, outputs, attributes in cases:
        initializers = []
        feeds = {}
        for name, shape, _ in inputs:
            if not name:
                continue
            value = constants[name] if name in constants else r(*shape)
            if name in weights:
                initializers.append(numpy_helper.from_array(value, name))
            else:
                feeds[name] = value
        try:
            data = _single_node_model(op, [i for i in inputs], outputs, attributes, initializers)
            cuda = _session(data, [CUDA, "CPUExecutionProvider"])
            placed = {n.provider for n in cuda.get_partition_report().nodes}
            cpu = _session(data, ["CPUExecutionProvider"])
            gpu_ms = _median_ms(functools.partial(cuda.run, None), feeds, warmup=3, repeat=10)
            cpu_ms = _median_ms(functools.partial(cpu.run, None), feeds, warmup=1, repeat=3)
            got, want = cuda.run(None, feeds)[0], cpu.run(None, feeds)[0]
            scale = float(np.abs(want).max()) or 1.0
            diff = float(np.abs(got.astype(np.float64) - want).max()) / scale
            where = "GPU" if placed == {CUDA} else f"placed on {sorted(placed)}"
            print(f"{op}: {where}, CUDA {gpu_ms:.2f} ms (host I/O), CPU {cpu_ms:.2f} ms, max rel diff {diff:.1e}")
        except Exception as error:  # noqa: BLE001 - a report, not a test
            print(f"{op}: FAILED {type(error).__name__}: {str(error)[:200]}")


def models() -> None:
    from bench_families import load_family

    chosen = {m.name: m for m in load_family("cnn") if m.name in ("resnet50", "squeezenet")}
    rows = []
    builds = [(name, model.build) for name, model in chosen.items()]
    for name, build in builds:
        data, feeds = build()
        cuda = _session(data, [CUDA, "CPUExecutionProvider"])
        cpu = _session(data, ["CPUExecutionProvider"])
        placed = [n.provider for n in cuda.get_partition_report().nodes]
        print(f"{name}: {placed.count(CUDA)} of {len(placed)} nodes on the CUDA provider")
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


def cuda_graphs() -> None:
    from bench_families import load_family

    import onnxplug

    for model in (m for m in load_family("cnn") if m.name in ("resnet50", "squeezenet")):
        data, feeds = model.build()
        timings = {}
        outputs = {}
        for graph in ("0", "1"):
            try:
                session = _session(data, [(CUDA, {"enable_cuda_graph": graph})])
            except onnxplug.InvalidArgument as error:
                print(f"{model.name}: enable_cuda_graph={graph} refused: {error}")
                break
            binding = session.io_binding()
            name, value = next(iter(feeds.items()))
            x = onnxplug.OrtValue.ortvalue_from_numpy(value, "cuda", 0)
            first = session.run(None, feeds)[0]
            y = onnxplug.OrtValue.ortvalue_from_shape_and_type(first.shape, first.dtype, "cuda", 0)
            binding.bind_ortvalue_input(name, x)
            binding.bind_ortvalue_output(session.get_outputs()[0].name, y)
            run = functools.partial(lambda s, b, _: s.run_with_iobinding(b), session, binding)
            timings[graph] = _median_ms(run, None)
            outputs[graph] = y.numpy()
        if len(timings) == 2:
            diff = float(np.abs(outputs["1"] - outputs["0"]).max())
            print(
                f"{model.name}: IOBinding {timings['0']:.2f} ms, with CUDA graph {timings['1']:.2f} ms "
                f"(max abs diff {diff:.1e})"
            )


def main() -> int:
    global ENVIRONMENT
    from onnxplug_cuda.provider import CUDAProviderFactory

    if "--backend" in sys.argv:
        from onnxplug_cuda.testing import environment_for

        ENVIRONMENT = environment_for(sys.argv[sys.argv.index("--backend") + 1])
        factory = CUDAProviderFactory(backend=sys.argv[sys.argv.index("--backend") + 1])
    else:
        factory = CUDAProviderFactory()
    if not factory.devices():
        print(f"no CUDA device: {factory.unavailable_reason()}")
        return 2
    print("devices:", ", ".join(str(d) for d in factory.devices()))
    budget = float(sys.argv[sys.argv.index("--case-seconds") + 1]) if "--case-seconds" in sys.argv else 240.0
    node_cases(budget)
    kernels()
    models()
    if ENVIRONMENT is None:  # the test backends have no streams to capture
        cuda_graphs()
    return 0


if __name__ == "__main__":
    sys.exit(main())
