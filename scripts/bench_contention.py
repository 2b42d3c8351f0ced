"""Latency while another process competes for the cores: onnxplug with its thread governor,
onnxplug with a fixed thread count, and onnxruntime, all at ``--threads``.

    python scripts/bench_contention.py                          # resnet50, one busy process
    python scripts/bench_contention.py --models resnet50,mobilenetv2 --busy 2 --runs 30

Starts ``--busy`` processes that spin in a Python loop, then times the three sessions in blocks
of ``--block`` runs in rotating order (each block after a short pause and an untimed run), and
prints each one's median with its ratio to onnxruntime's; then the same with the busy processes
stopped.  The governed session adapts as a user's would: its first blocks under contention are
the ones before it falls back (see ``onnxplug.runtime._blas_threads``).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import subprocess
import sys
import time

import onnxruntime

import onnxplug

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_families import cnn, transformers


def _models(names):
    catalogue = {m.name: m for m in (*cnn.MODELS, *transformers.MODELS)}
    return [catalogue[name] for name in names]


def _sessions(data: bytes, threads: int):
    governed = onnxplug.SessionOptions()
    governed.intra_op_num_threads = threads
    fixed = onnxplug.SessionOptions()
    fixed.intra_op_num_threads = threads
    fixed.add_session_config_entry("onnxplug.adaptive_threads", "0")
    reference = onnxruntime.SessionOptions()
    reference.intra_op_num_threads = threads
    return {
        "onnxplug governed": onnxplug.InferenceSession(data, governed, providers=["CPUExecutionProvider"]),
        "onnxplug fixed": onnxplug.InferenceSession(data, fixed, providers=["CPUExecutionProvider"]),
        "onnxruntime": onnxruntime.InferenceSession(data, reference, providers=["CPUExecutionProvider"]),
    }


def _time(sessions, feeds, runs: int, block: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in sessions}
    order = list(sessions)
    for round_ in range(max(1, runs // block)):
        for name in order[round_ % len(order) :] + order[: round_ % len(order)]:
            session = sessions[name]
            time.sleep(0.03)
            session.run(None, feeds)
            for _ in range(block):
                start = time.perf_counter()
                session.run(None, feeds)
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1e3 for name, values in times.items()}


def _report(label: str, medians: dict[str, float]) -> None:
    reference = medians["onnxruntime"]
    cells = ", ".join(f"{name} {ms:.1f} ms ({ms / reference:.2f}×)" for name, ms in medians.items())
    print(f"  {label}: {cells}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--busy", type=int, default=1, help="busy-looping processes started beside the sessions")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per session and phase")
    parser.add_argument("--block", type=int, default=5)
    args = parser.parse_args()
    for model in _models(args.models.split(",")):
        data, feeds = model.build()
        sessions = _sessions(data, args.threads)
        for session in sessions.values():
            session.run(None, feeds)
        print(f"{model.name} at {args.threads} threads:", flush=True)
        _report("quiet", _time(sessions, feeds, args.runs, args.block))
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
        try:
            time.sleep(0.5)
            _report(f"{args.busy} busy process(es)", _time(sessions, feeds, args.runs, args.block))
        finally:
            for process in busy:
                process.kill()
                process.wait()
        time.sleep(0.5)
        _report("quiet again", _time(sessions, feeds, args.runs, args.block))


if __name__ == "__main__":
    main()
