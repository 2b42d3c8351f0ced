"""Benchmark: onnxplug against onnxruntime's CPU provider (and OpenVINO used directly), in one process.

    python scripts/bench.py                                    # CPU provider, every family and section
    python scripts/bench.py --families cnn,transformers        # the geometric-mean set only
    python scripts/bench.py --models resnet50,bert-base --repeat 20
    python scripts/bench.py --providers openvino --families cnn  # + an "OpenVINO direct" column
    python scripts/bench.py --sections creation,memory

Models come from ``scripts/bench_families/`` (cnn, transformers, sklearn, micro, sequence; see
each module), built locally and cached under ``~/.cache/onnxplug-bench/``.  Every runtime gets the same
model bytes, FP32 and the same thread count (``--threads``, default 2: onnxplug's
``intra_op_num_threads``, onnxruntime's ``intra_op_num_threads`` with one inter-op thread,
OpenVINO's ``INFERENCE_NUM_THREADS``).  After warm-up the runtimes are timed in interleaved rounds
(a block of calls each per round, after a pause and two untimed calls, so that one runtime's
spinning threads do not slow the next; the order rotates), so that machine noise hits them alike;
onnxplug's thread governor is off here (it would take onnxruntime's spinning pool in the same
process for contention; ``scripts/bench_contention.py`` measures it);
tables show medians and the ratios measured in this one run.  "max rel diff" is the largest
difference between the runtimes' first outputs relative to the output's largest magnitude.

Sections:

- ``latency``: per-model table, the geometric mean of onnxplug/onnxruntime over the cnn and
  transformers families, per-node overhead (``elementwise-1000``), a small model's run
  (``six-nodes``) and the cost of a small convolution layer (``small-convs``) from the micro
  family, classical ML at batch 1 and 1000 (sklearn family), recurrent networks that begin with
  their LSTM or GRU layers (sequence family; outside the geometric mean, as sklearn is);
- ``creation``: session creation in this process (median of 5, after one untimed) and the first
  session of a fresh process (``python -c`` importing the runtime and creating it; bytecode
  caching on, as users run), for ``six-nodes``, ``resnet50`` and ``resnet50-weights``;
- ``memory``: peak resident memory of a fresh process that creates a session and runs it three
  times, per runtime, for ``resnet50``, ``resnet50-weights`` and ``bert-base``; "run" is the
  growth of the peak during the runs (above what creating the session reached).

``resnet50`` is the onnx wheel's light model, whose weights are ConstantOfShape nodes that every
runtime folds at creation; ``resnet50-weights`` is the same model with those weights stored in
the file (100 MB), as exporters write them, so loading and holding real weights is measured too.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import math
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable

import numpy as np
import onnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_families import BenchModel, family_names, load_family

#: onnxplug provider short name → onnxruntime name.
PROVIDERS = {
    "openvino": "OpenVINOExecutionProvider",
    "cpu": "CPUExecutionProvider",
}
#: The families the geometric mean is taken over (the issue's CNN + transformer set).
GEOMEAN_FAMILIES = ("cnn", "transformers")


# -- runtimes ------------------------------------------------------------------------------------


def onnxplug_runner(data: bytes, provider: str, threads: int) -> tuple[Callable[[dict], list], str]:
    import onnxplug

    name = PROVIDERS[provider]
    options = {"num_of_threads": str(threads), "precision": "FP32"} if provider == "openvino" else {}
    so = onnxplug.SessionOptions()
    if provider == "cpu":  # the numpy kernels' BLAS threads (OpenVINO gets num_of_threads)
        so.intra_op_num_threads = threads
    # The thread governor (onnxplug.runtime._blas_threads) would answer onnxruntime's spinning
    # pool in this same process as contention and move to one thread: compare at a fixed count,
    # as onnxruntime runs.  scripts/bench_contention.py measures the governor.
    so.add_session_config_entry("onnxplug.adaptive_threads", "0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = onnxplug.InferenceSession(data, so, providers=[(name, options)])
    counts = session.partition_counts()
    note = ", ".join(f"{k.replace('ExecutionProvider', '')}={v}" for k, v in counts.items())
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


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lines += ["| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    return "\n".join(lines)


def _selected(args) -> list[tuple[str, BenchModel]]:
    families = [f.strip() for f in args.families.split(",") if f.strip()] if args.families else family_names()
    unknown = sorted(set(families) - set(family_names()))
    if unknown:
        raise SystemExit(f"unknown families {unknown}; known: {', '.join(family_names())}")
    wanted = {m.strip() for m in args.models.split(",") if m.strip()} if args.models else None
    chosen = [(family, model) for family in families for model in load_family(family)]
    if wanted is not None:
        chosen = [(f, m) for f, m in chosen if m.name in wanted]
        missing = wanted - {m.name for _, m in chosen}
        if missing:
            raise SystemExit(f"unknown models {sorted(missing)}")
    return chosen


def latency(args, providers: list[str]) -> None:
    with_ov = "openvino" in providers
    header = ["family", "model"] + [f"onnxplug+{p} ms" for p in providers]
    header += (["OV direct ms"] if with_ov else []) + ["ORT ms"]
    header += [f"{p}/ORT" for p in providers] + (["openvino/OV"] if with_ov else [])
    header += ["max rel diff", "onnxplug nodes"]
    rows, ratios = [], {p: {} for p in providers}
    for family, model in _selected(args):
        data, feeds = model.build()
        runners: dict[str, Callable[[dict], list]] = {}
        notes = []
        for p in providers:
            runner, note = onnxplug_runner(data, p, args.threads)
            runners[p] = runner
            notes.append(note)
        if with_ov:
            runners["ov"] = openvino_runner(data, args.threads)
        runners["ort"] = ort_runner(data, args.threads)
        diff = check_agreement(runners, feeds)
        repeat = args.repeat if family != "micro" else max(args.repeat, 200)
        medians = time_interleaved(runners, feeds, args.warmup, repeat, args.block, args.settle_ms / 1e3)
        row = [family, model.name] + [f"{medians[p] * 1e3:.3f}" for p in providers]
        row += ([f"{medians['ov'] * 1e3:.3f}"] if with_ov else []) + [f"{medians['ort'] * 1e3:.3f}"]
        for p in providers:
            ratios[p][(family, model.name)] = medians[p] / medians["ort"]
            row.append(f"{medians[p] / medians['ort']:.2f}")
        if with_ov:
            row.append(f"{medians['openvino'] / medians['ov']:.2f}")
        row += [f"{diff:.1e}", "; ".join(notes)]
        if family == "micro" and model.name in ("elementwise-1000", "small-convs"):
            unit, count = ("node", 1000) if model.name == "elementwise-1000" else ("layer", 20)
            mine, theirs = medians[providers[0]] / count * 1e6, medians["ort"] / count * 1e6
            row[-1] += f" | per {unit}: onnxplug {mine:.2f} us, ORT {theirs:.2f} us"
        rows.append(row)
        print(" | ".join(row), flush=True)
    print()
    print(_table(header, rows))
    for p in providers:
        chosen = [r for (family, _), r in ratios[p].items() if family in GEOMEAN_FAMILIES]
        if chosen:
            geomean = math.exp(sum(math.log(r) for r in chosen) / len(chosen))
            worst = max(ratios[p].items(), key=lambda item: item[1] if item[0][0] in GEOMEAN_FAMILIES else 0)
            print(
                f"\n{p}/ORT geometric mean over {len(chosen)} {'+'.join(GEOMEAN_FAMILIES)} models: {geomean:.2f} "
                f"(worst: {worst[0][1]} {worst[1]:.2f})"
            )


_FRESH = {
    "onnxplug": (
        "import time; t = time.perf_counter(); import onnxplug as rt; "
        "s = rt.InferenceSession({path!r}, providers=['CPUExecutionProvider']); print(time.perf_counter() - t)"
    ),
    "onnxruntime": (
        "import time; t = time.perf_counter(); import onnxruntime as rt; "
        "s = rt.InferenceSession({path!r}, providers=['CPUExecutionProvider']); print(time.perf_counter() - t)"
    ),
}


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # users' imports read cached bytecode
    return env


def weights_in_file(data: bytes) -> bytes:
    """The model with each ConstantOfShape of a constant shape replaced by the initializer it
    computes (the same model, its weights stored as exporters write them)."""
    from onnx import numpy_helper

    model = onnx.load_from_string(data)
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    kept = []
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in constants:
            fill = next((numpy_helper.to_array(a.t) for a in node.attribute if a.name == "value"), np.float32(0))
            value = np.full(constants[node.input[0]], fill.reshape(()), dtype=fill.dtype)
            model.graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return model.SerializeToString()


def _creation_models(names: tuple[str, ...]) -> dict[str, tuple[bytes, dict]]:
    """Bytes and feeds of the creation and memory sections' models (see the module docstring)."""
    models = {m.name: m for fam in ("micro", "cnn", "transformers") for m in load_family(fam)}
    built = {}
    for name in names:
        data, feeds = models[name.removesuffix("-weights")].build()
        built[name] = (weights_in_file(data) if name.endswith("-weights") else data), feeds
    return built


def creation(args) -> None:
    import onnxruntime

    import onnxplug

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (data, _) in _creation_models(("six-nodes", "resnet50", "resnet50-weights")).items():
            path = os.path.join(tmp, f"{name}.onnx")
            pathlib.Path(path).write_bytes(data)
            makers = {
                "onnxplug": lambda data=data: onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"]),
                "onnxruntime": lambda data=data: onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]),
            }
            times = {}
            for runtime, make in makers.items():
                make()
                samples = []
                for _ in range(5):
                    start = time.perf_counter()
                    make()
                    samples.append(time.perf_counter() - start)
                times[runtime] = statistics.median(samples)
            fresh = {}
            for runtime, code in _FRESH.items():
                samples = []
                for _ in range(3):
                    out = subprocess.run(
                        [sys.executable, "-c", code.format(path=path)], capture_output=True, text=True, env=_child_env()
                    )
                    if out.returncode:
                        raise SystemExit(f"{runtime} fresh-process creation failed: {out.stderr[-2000:]}")
                    samples.append(float(out.stdout.strip().splitlines()[-1]))
                fresh[runtime] = statistics.median(samples)
            rows.append(
                [
                    name,
                    f"{times['onnxplug'] * 1e3:.1f}",
                    f"{times['onnxruntime'] * 1e3:.1f}",
                    f"{times['onnxplug'] / times['onnxruntime']:.2f}",
                    f"{fresh['onnxplug'] * 1e3:.0f}",
                    f"{fresh['onnxruntime'] * 1e3:.0f}",
                    f"{fresh['onnxplug'] / fresh['onnxruntime']:.2f}",
                ]
            )
            print(" | ".join(rows[-1]), flush=True)
    header = ["model", "onnxplug ms", "ORT ms", "ratio", "fresh onnxplug ms", "fresh ORT ms", "fresh ratio"]
    print("\nsession creation (in process: median of 5; fresh process: import + create, median of 3)")
    print(_table(header, rows))


_MEMORY = """
import sys, numpy as np

def peak_mib():  # VmHWM: this process's own high-water mark (ru_maxrss can carry the forking parent's)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

runtime, path, feeds_path = sys.argv[1:4]
if runtime == "onnxplug":
    import onnxplug as rt
    so = rt.SessionOptions(); so.intra_op_num_threads = {threads}
else:
    import onnxruntime as rt
    so = rt.SessionOptions(); so.intra_op_num_threads = {threads}; so.inter_op_num_threads = 1
feeds = dict(np.load(feeds_path))
session = rt.InferenceSession(path, so, providers=["CPUExecutionProvider"])
before = peak_mib()
for _ in range(3):
    session.run(None, feeds)
after = peak_mib()
print(before, after)
"""


def memory(args) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (data, feeds) in _creation_models(("resnet50", "resnet50-weights", "bert-base")).items():
            path, feeds_path = os.path.join(tmp, f"{name}.onnx"), os.path.join(tmp, f"{name}.npz")
            pathlib.Path(path).write_bytes(data)
            np.savez(feeds_path, **feeds)
            peaks = {}
            for runtime in ("onnxplug", "onnxruntime"):
                out = subprocess.run(
                    [sys.executable, "-c", _MEMORY.format(threads=args.threads), runtime, path, feeds_path],
                    capture_output=True,
                    text=True,
                    env=_child_env(),
                )
                if out.returncode:
                    raise SystemExit(f"{runtime} memory run failed: {out.stderr[-2000:]}")
                before, after = (float(v) for v in out.stdout.split()[-2:])
                peaks[runtime] = (after, after - before)
            rows.append(
                [
                    name,
                    f"{peaks['onnxplug'][0]:.0f}",
                    f"{peaks['onnxruntime'][0]:.0f}",
                    f"{peaks['onnxplug'][0] / peaks['onnxruntime'][0]:.2f}",
                    f"{peaks['onnxplug'][1]:.0f}",
                    f"{peaks['onnxruntime'][1]:.0f}",
                ]
            )
            print(" | ".join(rows[-1]), flush=True)
    header = ["model", "onnxplug peak MiB", "ORT peak MiB", "ratio", "onnxplug run MiB", "ORT run MiB"]
    print("\npeak resident memory of a process creating a session and running it 3 times")
    print(_table(header, rows))


def _blas_line() -> str:
    """numpy's BLAS and the kernel family it chose: some machines set ``OPENBLAS_CORETYPE``
    (older OpenBLAS builds crash on their CPUs), which makes a current numpy take slower kernels
    (Haswell's AVX2 instead of SkylakeX's AVX-512: BERT-base's products 1.4× slower), and
    onnxruntime's MLAS ignores it."""
    try:
        import threadpoolctl
    except ImportError:
        return "blas: unknown (threadpoolctl missing)"
    libraries = [
        f"{info.get('internal_api')} {info.get('version')} {info.get('architecture', '?')}"
        for info in threadpoolctl.threadpool_info()
        if info.get("user_api") == "blas"
    ]
    forced = {name: os.environ[name] for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if name in os.environ}
    return f"blas: {', '.join(libraries) or 'none loaded'}" + (f" (set: {forced})" if forced else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--providers", default="cpu", help="onnxplug providers to bench (cpu, openvino)")
    parser.add_argument("--families", default="", help=f"comma-separated (default: all of {', '.join(family_names())})")
    parser.add_argument("--models", default="", help="comma-separated model names (default: every model)")
    parser.add_argument("--sections", default="latency,creation,memory", help="latency, creation, memory")
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20, help="timed calls per runtime (micro models: 200 or more)")
    parser.add_argument("--block", type=int, default=5, help="consecutive timed calls per runtime and round")
    parser.add_argument("--settle-ms", type=float, default=30.0, help="sleep before each block (spinning threads)")
    args = parser.parse_args(argv)

    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    unknown = [p for p in providers if p not in PROVIDERS]
    if unknown:
        parser.error(f"unknown provider(s) {unknown}; known: {', '.join(PROVIDERS)}")
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    print(
        f"# bench: threads={args.threads} FP32 warmup={args.warmup} repeat={args.repeat} block={args.block} "
        f"settle={args.settle_ms:g}ms (interleaved rounds, medians); {os.cpu_count()} CPUs"
    )
    versions = [f"python {sys.version.split()[0]}", f"numpy {np.__version__}", f"onnx {onnx.__version__}"]
    # From the installed metadata, not by importing: importing openvino loads its TBB into the
    # process, where numba once took it for the CPU provider's team (docs/benchmarks.md).
    for module in ("openvino", "onnxruntime"):
        try:
            versions.append(f"{module} {importlib.metadata.version(module).split('-')[0]}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{module} missing")
    print("# " + ", ".join(versions))
    print("# " + _blas_line())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "latency" in sections:
            latency(args, providers)
        if "creation" in sections:
            creation(args)
        if "memory" in sections:
            memory(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
