"""Where a model's time goes in onnxplug and in onnxruntime, kind by kind and layer by layer.

    python scripts/bench_layers.py --models mobilenetv2              # per kind of node
    python scripts/bench_layers.py --models ocr_det --layers 15      # and the 15 layers furthest behind
    python scripts/bench_layers.py --models squeezenet,yolo --runs 60

Both runtimes run the same model bytes in one process with profiling on (onnxplug's
``SessionOptions.enable_profiling`` writes onnxruntime's trace format), their runs alternating,
each after a pause and two unrecorded runs as in ``scripts/bench.py``.  Each node's time is its
median over the recorded runs.  The runtimes fuse differently (onnxplug's FusedConv against
onnxruntime's Conv with its activation, onnxruntime's NCHWc reorders), so nodes are compared by
kind: convolutions as pointwise, depthwise, stem (three input channels) or ``KxK``, with ``/s2``
for strides, other nodes by op type.  ``--layers`` pairs convolutions by kind, input shape and
weight shape (output channels rounded up to 16: onnxruntime's NCHWc layers pad them and report
the padded weights; layers that occur several times pair as their mean) and lists those where
onnxplug is furthest behind in µs.

A node's time includes each runtime's own work around its kernel (onnxplug's Python there: a few
µs a node), and the trace's ``model_run`` against the sum of the nodes shows the rest of a run.
With profiling on, both runtimes are slower than ``scripts/bench.py`` measures them.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_families import family_names, load_family

#: Recorded runs whose events are dropped per node (warm-up left in the trace).
_SKIP = 3


def node_kind(event: dict) -> str:
    """The kind a trace's node event is compared under (see the module's docstring)."""
    args = event.get("args", {})
    op = args.get("op_name", "?")
    if op not in ("Conv", "FusedConv"):
        return op
    shapes = [next(iter(entry.values())) for entry in args.get("input_type_shape", [])]
    if len(shapes) < 2 or len(shapes[0]) != 4 or len(shapes[1]) != 4:
        return "conv"
    x, w = shapes[0], shapes[1]
    if w[2:] == [1, 1]:
        kind = "pointwise"
    elif w[1] == 1 and w[0] == x[1]:
        kind = "depthwise"
    elif x[1] == 3:
        kind = "stem"
    else:
        kind = f"{w[2]}x{w[3]}"
    out = [next(iter(entry.values())) for entry in args.get("output_type_shape", [])]
    if out and len(out[0]) == 4 and x[2] > 1 and out[0][2] * 2 <= x[2]:
        kind += "/s2"
    return kind


def layer_key(event: dict) -> tuple[str, str] | None:
    """``(kind, "input shape x weight shape")`` of a convolution's event, else ``None``; the
    weights' output channels rounded up to 16, as onnxruntime's NCHWc layers report them."""
    kind = node_kind(event)
    if event.get("args", {}).get("op_name") not in ("Conv", "FusedConv"):
        return None
    shapes = [next(iter(entry.values())) for entry in event["args"].get("input_type_shape", [])]
    weights = [-(-shapes[1][0] // 16) * 16, *shapes[1][1:]]
    return kind, f"{shapes[0]} x {weights}"


def node_medians(trace: list[dict], skip: int = _SKIP) -> dict[str, tuple[float, dict]]:
    """Per node name: the median of its durations (µs) after its first ``skip``, and one event."""
    durations: dict[str, list[float]] = collections.defaultdict(list)
    sample: dict[str, dict] = {}
    for event in trace:
        if event.get("cat") == "Node":
            durations[event["name"]].append(float(event["dur"]))
            sample.setdefault(event["name"], event)
    return {name: (statistics.median(values[skip:] or values), sample[name]) for name, values in durations.items()}


def by_kind(medians: dict[str, tuple[float, dict]]) -> dict[str, tuple[float, int]]:
    """``{kind: (µs a run, nodes)}``."""
    totals: dict[str, list[float]] = collections.defaultdict(list)
    for us, event in medians.values():
        totals[node_kind(event)].append(us)
    return {kind: (sum(values), len(values)) for kind, values in totals.items()}


def by_layer(medians: dict[str, tuple[float, dict]]) -> dict[tuple[str, str], tuple[float, int]]:
    """``{(kind, shapes): (mean µs of those nodes, nodes)}`` for convolutions."""
    layers: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for us, event in medians.values():
        key = layer_key(event)
        if key is not None:
            layers[key].append(us)
    return {key: (sum(values) / len(values), len(values)) for key, values in layers.items()}


def profile_both(data: bytes, feeds: dict, runs: int, threads: int, settle: float = 0.03) -> dict[str, list[dict]]:
    """The traces of ``runs`` alternating recorded runs of each runtime (plus warm-up)."""
    import onnxruntime

    import onnxplug

    folder = tempfile.mkdtemp(prefix="bench_layers_")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.enable_profiling, options.profile_file_prefix = True, os.path.join(folder, "onnxruntime")
    theirs = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    mine_options = onnxplug.SessionOptions()
    mine_options.intra_op_num_threads = threads
    mine_options.enable_profiling, mine_options.profile_file_prefix = True, os.path.join(folder, "onnxplug")
    mine_options.add_session_config_entry("onnxplug.adaptive_threads", "0")
    mine = onnxplug.InferenceSession(data, mine_options, providers=["CPUExecutionProvider"])
    sessions = {"onnxruntime": theirs, "onnxplug": mine}
    for session in sessions.values():
        for _ in range(_SKIP):
            session.run(None, feeds)
    for _ in range(runs):
        for session in sessions.values():
            time.sleep(settle)
            for _ in range(3):  # two to wake the threads, one more: all recorded, medians taken
                session.run(None, feeds)
    traces = {}
    for name, session in sessions.items():
        with open(session.end_profiling(), encoding="utf-8") as handle:
            traces[name] = json.load(handle)
    return traces


def _run_total(trace: list[dict]) -> float:
    runs = [float(e["dur"]) for e in trace if e.get("cat") == "Session" and e.get("name") == "model_run"]
    return statistics.median(runs[_SKIP:] or runs) if runs else float("nan")


def report(name: str, traces: dict[str, list[dict]], layers: int) -> str:
    """The per-kind table (and the ``layers`` convolutions furthest behind) as text."""
    medians = {runtime: node_medians(trace) for runtime, trace in traces.items()}
    kinds = {runtime: by_kind(m) for runtime, m in medians.items()}
    mine, theirs = kinds["onnxplug"], kinds["onnxruntime"]
    totals = {runtime: _run_total(trace) for runtime, trace in traces.items()}
    lines = [
        f"{name}: model_run median onnxplug {totals['onnxplug']:.0f} us, onnxruntime {totals['onnxruntime']:.0f} us "
        f"(profiled; ratio {totals['onnxplug'] / totals['onnxruntime']:.2f})",
        f"{'kind':18s} {'onnxplug us':>12s} {'nodes':>5s} {'onnxruntime us':>15s} {'nodes':>5s} {'ratio':>6s}",
    ]
    order = sorted(set(mine) | set(theirs), key=lambda k: -max(mine.get(k, (0, 0))[0], theirs.get(k, (0, 0))[0]))
    for kind in order:
        (a, na), (b, nb) = mine.get(kind, (0.0, 0)), theirs.get(kind, (0.0, 0))
        ratio = f"{a / b:6.2f}" if a and b else "     -"
        lines.append(f"{kind:18s} {a:12.1f} {na:5d} {b:15.1f} {nb:5d} {ratio}")
    for runtime in ("onnxplug", "onnxruntime"):
        outside = totals[runtime] - sum(us for us, _ in kinds[runtime].values())
        lines.append(f"{'(outside nodes)':18s} {runtime}: {outside:.0f} us")
    if layers:
        mine_layers, their_layers = by_layer(medians["onnxplug"]), by_layer(medians["onnxruntime"])
        paired = [(key, mine_layers[key], their_layers[key]) for key in set(mine_layers) & set(their_layers)]
        paired.sort(key=lambda item: -(item[1][0] - item[2][0]) * item[1][1])
        lines.append(f"\nconvolutions furthest behind (µs a node; {len(paired)} layer shapes paired):")
        for (kind, shapes), (a, count), (b, _) in paired[:layers]:
            lines.append(
                f"  {kind:12s} {shapes:44s} x{count:<3d} onnxplug {a:8.1f}  onnxruntime {b:8.1f}  {a / b:5.2f}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", required=True, help="comma-separated model names (scripts/bench_families)")
    parser.add_argument("--runs", type=int, default=30, help="alternations (three recorded runs each)")
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--layers", type=int, default=0, help="list this many convolutions furthest behind")
    args = parser.parse_args(argv)
    models = {model.name: model for family in family_names() for model in load_family(family)}
    wanted = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in models]
    if unknown:
        raise SystemExit(f"unknown models {unknown}; known: {', '.join(sorted(models))}")
    for name in wanted:
        data, feeds = models[name].build()
        traces = profile_both(data, feeds, max(1, args.runs), args.threads)
        print(report(name, traces, args.layers), flush=True)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
