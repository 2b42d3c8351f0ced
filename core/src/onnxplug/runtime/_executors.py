"""The other ways to run a plan: profiled (timing every step) and parallel (ORT_PARALLEL).

``GraphPlan.execute`` is the lean sequential loop every run uses by default; these executors are
chosen by the session when profiling is on or ``execution_mode`` is ``ORT_PARALLEL``.  They
share the step semantics (inputs read from slots, outputs stored, errors named after the node).
"""

from __future__ import annotations

import concurrent.futures
import contextvars
from collections.abc import Sequence
from typing import Any

from ..errors import Fail
from ..kernels._runstate import current_run
from ._plan import GraphPlan, _attribute_error
from ._steps import Step

__all__ = ["execute_profiled", "ParallelExecutor"]

_TERMINATED = "Exiting due to terminate flag being set to true."


def _load(plan: GraphPlan, inputs: Sequence[Any], outer: Sequence[Any]) -> list[Any]:
    values = plan.template.copy()
    for slot, value in zip(plan.input_slots, inputs):
        values[slot] = value
    for slot, value in zip(plan.outer_slots, outer):
        values[slot] = value
    return values


def _store(step: Step, values: list[Any], result: Any) -> None:
    if step.single:
        values[step.outputs[0]] = result
        return
    if len(result) < len(step.outputs):
        raise Fail(f"the kernel returned {len(result)} outputs, the node has {len(step.outputs)}")
    for slot, value in zip(step.outputs, result):
        values[slot] = value


def _terminated() -> bool:
    state = current_run()
    return state is not None and state.terminated()


def execute_profiled(plan: GraphPlan, inputs: Sequence[Any], profiler: Any, outer: Sequence[Any] = ()) -> list[Any]:
    """Run ``plan`` sequentially, recording one Node event per step."""
    values = _load(plan, inputs, outer)
    for step in plan.steps:
        if _terminated():
            raise Fail(_TERMINATED)
        args = [values[i] for i in step.inputs]
        start = profiler.now()
        try:
            result = step.call(*args)
            _store(step, values, result)
        except Exception as error:
            raise _attribute_error(error, step) from error
        profiler.node_event(step, start, profiler.now(), args, result)
        for slot in step.free:
            values[slot] = None
    return [values[slot] for slot in plan.output_slots]


class ParallelExecutor:
    """Runs independent steps of a plan concurrently on a thread pool.

    Dependencies between steps are computed once; a value is released when its last reader
    finished (not after a position in a sequential order, which concurrent steps break).

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
        values = _load(plan, inputs, ())
        waiting = list(self._dependencies)
        remaining_readers = dict(self._readers)

        def run_step(index: int) -> None:
            step = plan.steps[index]
            args = [values[i] for i in step.inputs]
            start = profiler.now() if profiler is not None else 0
            try:
                result = step.call(*args)
                _store(step, values, result)
            except Exception as error:
                raise _attribute_error(error, step) from error
            if profiler is not None:
                profiler.node_event(step, start, profiler.now(), args, result)

        def submit(index: int) -> concurrent.futures.Future:
            context = contextvars.copy_context()  # each task carries the run state (terminate)
            future = self._pool.submit(context.run, run_step, index)
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
                            if _terminated():
                                raise Fail(_TERMINATED)
                            running.add(submit(consumer))
        except BaseException:
            for future in running:
                future.cancel()
            concurrent.futures.wait(running)
            raise
        return [values[slot] for slot in plan.output_slots]
