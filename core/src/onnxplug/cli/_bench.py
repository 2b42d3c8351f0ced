"""``onnxplug bench MODEL``: a model's latency, and with ``--by-op`` where the time goes.

The latency is the median of ``--repeat`` runs after ``--warmup`` untimed ones, at
``--threads`` intra-op threads, with its percentiles (p50, p90, p99, min, max, mean) and the
throughput they imply (runs per second, and samples per second for the inputs' batch size).
Timed runs show a progress bar on a terminal; Ctrl-C stops the command with one line (status 130,
see ``onnxplug.cli.main``).  ``--by-op`` runs the model again in a session with profiling on
(the same trace ``SessionOptions.enable_profiling`` writes) and sums the node events by op type:
the time per run, its share of the run, nodes per run and the mean per node.  "(outside nodes)"
is the rest of each run: feeding, the run loop, copies between providers, fetching outputs.
Comparing against onnxruntime is ``scripts/bench.py``'s job; this command explains one model.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import tempfile
import time

import numpy as np

from ..runtime import InferenceSession, SessionOptions
from ._progress import progress
from ._run import add_feed_arguments, build_feeds

__all__ = ["add_parser", "latency_summary", "op_breakdown"]

#: The percentiles reported, in order.
PERCENTILES = (50, 90, 99)


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("bench", help="time a model; --by-op: time per op type")
    parser.add_argument("model", help="path of an .onnx file")
    parser.add_argument("--providers", default="", help="comma-separated provider names, highest priority first")
    parser.add_argument("--threads", type=int, default=0, help="intra_op_num_threads (0: the default)")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs first")
    parser.add_argument("--by-op", action="store_true", help="time per op type, from the session profiler")
    add_feed_arguments(parser)
    parser.set_defaults(handler=bench)


def _session(args: argparse.Namespace, profile_prefix: str | None = None) -> InferenceSession:
    options = SessionOptions()
    options.intra_op_num_threads = args.threads
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    names = [p.strip() for p in args.providers.split(",") if p.strip()] or None
    return InferenceSession(args.model, options, providers=names)


def op_breakdown(trace: list[dict], runs: int) -> list[tuple[str, float, float, int]]:
    """``(op type, µs per run, share of the run, nodes per run)`` from a profiler trace, the
    biggest first, with ``"(outside nodes)"`` for the part of ``model_run`` no node event covers."""
    per_op: dict[str, float] = collections.defaultdict(float)
    counts: dict[str, int] = collections.Counter()
    total_run = 0.0
    for event in trace:
        if event.get("cat") == "Node":
            op = event.get("args", {}).get("op_name", "?")
            per_op[op] += event["dur"]
            counts[op] += 1
        elif event.get("cat") == "Session" and event.get("name") == "model_run":
            total_run += event["dur"]
    inside = sum(per_op.values())
    if total_run > inside:
        per_op["(outside nodes)"] = total_run - inside
    total = max(total_run, inside, 1e-9)
    rows = [(op, us / runs, us / total, counts.get(op, 0) // runs) for op, us in per_op.items()]
    return sorted(rows, key=lambda row: -row[1])


def latency_summary(latencies: list[float], batch: int | None) -> dict[str, float]:
    """Seconds per run → milliseconds (``mean``, ``min``, ``max``, ``p50``/``p90``/``p99``:
    linear-interpolated percentiles) and throughput (``runs_per_s``; ``samples_per_s`` when the
    batch size is known)."""
    values = np.asarray(latencies, dtype=np.float64) * 1e3
    summary = {"mean": float(values.mean()), "min": float(values.min()), "max": float(values.max())}
    for q in PERCENTILES:
        summary[f"p{q}"] = float(np.percentile(values, q))
    summary["runs_per_s"] = 1e3 / summary["mean"]
    if batch:
        summary["samples_per_s"] = summary["runs_per_s"] * batch
    return summary


def _batch(feeds: dict) -> int | None:
    """The leading dimension the feeds share (the batch size), if they have one."""
    dims = {value.shape[0] for value in feeds.values() if getattr(value, "ndim", 0) >= 1}
    return dims.pop() if len(dims) == 1 else None


def bench(args: argparse.Namespace) -> int:
    session = _session(args)
    feeds, _ = build_feeds(args, session)
    runs = max(1, args.repeat)
    latencies = []
    with progress(max(0, args.warmup) + runs, "benchmarking", unit="run") as update:
        for index in range(max(0, args.warmup)):
            session.run(None, feeds)
            update(index + 1)
        for _ in range(runs):
            start = time.perf_counter()
            session.run(None, feeds)
            latencies.append(time.perf_counter() - start)
            update(max(0, args.warmup) + len(latencies))
    counts = ", ".join(f"{name}: {count}" for name, count in session.partition_counts().items())
    print(f"{args.model}: median {statistics.median(latencies) * 1e3:.3f} ms over {len(latencies)} runs ({counts})")
    batch = _batch(feeds)
    summary = latency_summary(latencies, batch)
    spread = "  ".join(f"{key} {summary[key]:.3f}" for key in ("mean", "min", *(f"p{q}" for q in PERCENTILES), "max"))
    print(f"latency ms: {spread}")
    rate = f"throughput: {summary['runs_per_s']:.2f} runs/s"
    if batch:
        rate += f", {summary['samples_per_s']:.2f} samples/s (batch {batch})"
    print(rate)
    if not args.by_op:
        return 0
    with tempfile.TemporaryDirectory() as folder:
        profiled = _session(args, os.path.join(folder, "bench"))
        for _ in range(max(0, args.warmup)):
            profiled.run(None, feeds)
        path = profiled.end_profiling()  # the warm-up's events are dropped with this trace
        profiled = _session(args, os.path.join(folder, "bench"))
        with progress(runs, "profiling", unit="run") as update:
            for index in range(runs):
                profiled.run(None, feeds)
                update(index + 1)
        path = profiled.end_profiling()
        with open(path, encoding="utf-8") as handle:
            trace = json.load(handle)
    rows = op_breakdown(trace, max(1, args.repeat))
    width = max(len(op) for op, *_ in rows) if rows else 8
    print(f"\n{'op type'.ljust(width)}  ms/run      %  nodes  us/node")
    for op, us, share, nodes in rows:
        mean = f"{us / nodes:8.1f}" if nodes else " " * 8
        print(f"{op.ljust(width)}  {us / 1e3:6.3f}  {share * 100:5.1f}  {nodes:5d} {mean}")
    return 0
