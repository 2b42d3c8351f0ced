"""Segments (``onnxplug.runtime._segments``) on and off, against onnxruntime, in one process.

    python scripts/bench_segments.py                               # the small CNNs
    python scripts/bench_segments.py --models resnet50,yolo --rounds 16

Per model, two onnxplug sessions (one planned with ``ONNXPLUG_SEGMENTS=0``: the variable is read
when a plan first runs) and one onnxruntime session, all at ``--threads``, run in interleaved
rounds as in ``scripts/bench.py`` (a pause and two untimed calls before each block of ten timed
calls, the order reversed every other round).  Prints each one's median and the ratios, the
number of steps in each segment, and checks that both onnxplug sessions return the same bits.
This machine's speed moves by tens of percent between phases: compare ratios from one run.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_families import load_family

DEFAULT_MODELS = "mobilenetv2,shufflenetv2,yolo,squeezenet,small-convs"


def onnxplug_session(data: bytes, feeds: dict, threads: int, segments: bool):
    """A session whose plan is built with segments on or off (its first run is made here)."""
    import onnxplug

    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxplug.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    previous = os.environ.get("ONNXPLUG_SEGMENTS")
    os.environ["ONNXPLUG_SEGMENTS"] = "1" if segments else "0"
    try:
        return session, session.run(None, feeds)
    finally:
        if previous is None:
            os.environ.pop("ONNXPLUG_SEGMENTS")
        else:
            os.environ["ONNXPLUG_SEGMENTS"] = previous


def segment_sizes(session) -> list[int]:
    """Steps per segment of a session's plan (after its first run)."""
    straight = session._plan._straight  # (a benchmark looks inside the session)
    return [] if straight is None else [len(segment.steps) for segment in straight.segments]


def interleaved(runners: dict[str, Callable[[], object]], rounds: int, calls: int = 10) -> dict[str, float]:
    """Median seconds a call per runner over ``rounds`` interleaved rounds."""
    times: dict[str, list[float]] = {name: [] for name in runners}
    for round_index in range(rounds):
        order = list(runners) if round_index % 2 == 0 else list(runners)[::-1]
        for name in order:
            time.sleep(0.03)
            runners[name]()
            runners[name]()
            block = []
            for _ in range(calls):
                start = time.perf_counter()
                runners[name]()
                block.append(time.perf_counter() - start)
            times[name].append(statistics.median(block))
    return {name: statistics.median(values) for name, values in times.items()}


def measure(name: str, data: bytes, feeds: dict, threads: int, rounds: int) -> dict:
    """One model's figures: medians in µs, the ratios, the segments, whether the bits agree."""
    import onnxruntime as ort

    on, first_on = onnxplug_session(data, feeds, threads, segments=True)
    off, first_off = onnxplug_session(data, feeds, threads, segments=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    reference = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    for _ in range(3):  # the segments record, bind, then replay
        same = all(np.array_equal(a, b) for a, b in zip(on.run(None, feeds), off.run(None, feeds)))
    medians = interleaved(
        {
            "off": lambda: off.run(None, feeds),
            "on": lambda: on.run(None, feeds),
            "onnxruntime": lambda: reference.run(None, feeds),
        },
        rounds,
    )
    us = {key: value * 1e6 for key, value in medians.items()}
    return {
        "model": name,
        **us,
        "on/off": us["on"] / us["off"],
        "off/ort": us["off"] / us["onnxruntime"],
        "on/ort": us["on"] / us["onnxruntime"],
        "segments": segment_sizes(on),
        "same bits": same and all(np.array_equal(a, b) for a, b in zip(first_on, first_off)),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    models = {m.name: m for family in ("cnn", "transformers", "micro") for m in load_family(family)}
    for name in args.models.split(","):
        data, feeds = models[name].build()
        row = measure(name, data, feeds, args.threads, args.rounds)
        print(
            f"{name}: segments off {row['off']:.0f} us, on {row['on']:.0f}, onnxruntime {row['onnxruntime']:.0f}; "
            f"on/off {row['on/off']:.3f}, off/ORT {row['off/ort']:.2f}, on/ORT {row['on/ort']:.2f}; "
            f"segments {row['segments']}; same bits: {row['same bits']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
