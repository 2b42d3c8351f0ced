"""Profiling in onnxruntime's Chrome-trace format (opens in Perfetto and chrome://tracing).

Events are "X" (complete) events with integer microsecond ``ts``/``dur`` relative to the start of
profiling; ``Session`` events cover loading, initialization and each run, and one ``Node`` event
per executed node carries the op, the provider and the input/output types and shapes.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
import time
from typing import Any

import numpy as np

from ..graph import element_name, onnx_element_type

__all__ = ["Profiler"]


def _type_shape(value: Any) -> dict[str, list[int]]:
    if isinstance(value, np.ndarray):
        code = onnx_element_type(value.dtype)
        return {element_name(code) if code is not None else str(value.dtype): [int(d) for d in value.shape]}
    if isinstance(value, list):
        return {"sequence": [len(value)]}
    return {type(value).__name__: []}


def _nbytes(values: Any) -> int:
    return sum(int(v.nbytes) for v in values if isinstance(v, np.ndarray))


class Profiler:
    """Collects events for one session; thread-safe, so concurrent runs can be profiled."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._start_ns = time.time_ns()
        self._start_perf = time.perf_counter_ns()
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.ended = False

    @property
    def start_time_ns(self) -> int:
        """Wall-clock epoch nanoseconds at which profiling started (as onnxruntime reports)."""
        return self._start_ns

    def now(self) -> int:
        return time.perf_counter_ns()

    def _event(self, category: str, name: str, start: int, end: int, args: dict[str, Any]) -> None:
        event = {
            "cat": category,
            "pid": self._pid,
            "tid": threading.get_native_id(),
            "dur": max(0, (end - start) // 1000),
            "ts": max(0, (start - self._start_perf) // 1000),
            "ph": "X",
            "name": name,
            "args": args,
        }
        with self._lock:
            self._events.append(event)

    def session_event(self, name: str, start: int, end: int) -> None:
        self._event("Session", name, start, end, {})

    def node_event(self, step: Any, start: int, end: int, inputs: Any, outputs: Any) -> None:
        produced = outputs if not step.single else (outputs,)
        self._event(
            "Node",
            f"{step.name}_kernel_time",
            start,
            end,
            {
                "op_name": step.op_type,
                "provider": step.provider,
                "node_index": str(step.node_index),
                "input_type_shape": [_type_shape(v) for v in inputs if v is not None],
                "output_type_shape": [_type_shape(v) for v in produced],
                "activation_size": str(_nbytes(inputs)),
                "output_size": str(_nbytes(produced)),
            },
        )

    def write(self) -> str:
        """Write the trace to ``<prefix>_<date>_<time>.json`` in the current folder; return its path."""
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        path = f"{self._prefix}_{stamp}_{int(time.time() * 1000) % 1000:03d}.json"
        with self._lock:
            events = list(self._events)
            self.ended = True
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("[\n" + ",\n".join(json.dumps(e) for e in events) + "\n]\n")
        return path
