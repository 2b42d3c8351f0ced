"""Parallel execution (ORT_PARALLEL): independent steps of a plan run concurrently.

Steps are called through the same ``run_step`` the sequential loop uses (``_loop``), so inputs,
outputs, errors and profiling behave the same; only the order differs.  Dependencies between
steps are computed once; a value is released when its last reader finished (not after a position
in a sequential order, which concurrent steps break).
"""

from __future__ import annotations

import concurrent.futures
import contextvars
from collections.abc import Sequence
from typing import Any

from ..errors import RunTerminated
from ._loop import load_values, run_step, terminated
from ._plan import GraphPlan

__all__ = ["ParallelExecutor"]


class ParallelExecutor:
    """Runs independent steps of a plan concurrently on a thread pool.

    :param plan: the plan (its steps are not modified).
    :param threads: pool size (``inter_op_num_threads``; 0 picks the CPU count).
    """

    def __init__(self, plan: GraphPlan, threads: int) -> None:
        self._plan = plan
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=threads or None, thread_name_prefix="onnxplug-inter-op"
        )
        producer = {slot: index for index, step in enumerate(plan.steps) for slot in step.outputs}
        self._dependencies = []
        self._consumers: list[list[int]] = [[] for _ in plan.steps]
        readers: dict[int, int] = {}
        for index, step in enumerate(plan.steps):
            sources = {producer[s] for s in step.inputs if s in producer and producer[s] != index}
            self._dependencies.append(len(sources))
            for source in sources:
                self._consumers[source].append(index)
            for slot in set(step.inputs):
                readers[slot] = readers.get(slot, 0) + 1
        kept = set(plan.output_slots) | set(plan.outer_slots) | {0, 1}
        self._readers = {slot: count for slot, count in readers.items() if slot not in kept}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def execute(self, inputs: Sequence[Any], profiler: Any = None) -> list[Any]:
        plan = self._plan
        values = load_values(plan.template, plan.input_slots, inputs)
        waiting = list(self._dependencies)
        remaining_readers = dict(self._readers)

        def work(index: int) -> None:
            step = plan.steps[index]
            start = profiler.now() if profiler is not None else 0
            args, result = run_step(step, values)
            if profiler is not None:
                profiler.node_event(step, start, profiler.now(), args, result)

        def submit(index: int) -> concurrent.futures.Future:
            context = contextvars.copy_context()  # each task carries the run state (terminate)
            future = self._pool.submit(context.run, work, index)
            future.step_index = index  # type: ignore[attr-defined]
            return future

        running = {submit(i) for i, count in enumerate(waiting) if count == 0}
        try:
            while running:
                done, running = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    future.result()  # re-raises the step's (already attributed) error
                    index = future.step_index  # type: ignore[attr-defined]
                    for slot in set(plan.steps[index].inputs):
                        if slot in remaining_readers:
                            remaining_readers[slot] -= 1
                            if remaining_readers[slot] == 0:
                                values[slot] = None
                    for consumer in self._consumers[index]:
                        waiting[consumer] -= 1
                        if waiting[consumer] == 0:
                            if terminated():
                                raise RunTerminated()
                            running.add(submit(consumer))
        except BaseException:
            for future in running:
                future.cancel()
            concurrent.futures.wait(running)
            raise
        return [values[slot] for slot in plan.output_slots]
