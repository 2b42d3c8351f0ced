"""The run loop: how a plan's steps are called, shared by every way of executing a plan.

``run_step`` calls one step on the slot values and stores its results, naming the node in any
error; ``run_sequential`` is the loop profiled runs use (a profiler, when given, times every
step); the parallel executor calls ``run_step`` from its worker threads; plain sequential runs
go through ``_straight_line.StraightLine``, which interprets its first run with
``run_unprofiled``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import Fail, OnnxplugError, RunTerminated
from ..kernels import current_run
from ._steps import Step

__all__ = [
    "attribute_error",
    "load_values",
    "run_sequential",
    "run_step",
    "run_unprofiled",
    "store_outputs",
    "terminated",
]


def load_values(
    template: list[Any],
    slots: Sequence[int],
    values: Sequence[Any],
    outer_slots: Sequence[int] = (),
    outer: Sequence[Any] = (),
) -> list[Any]:
    """A fresh slot list: the plan's template with the inputs and outer-scope values placed."""
    current = template.copy()
    for slot, value in zip(slots, values):
        current[slot] = value
    for slot, value in zip(outer_slots, outer):
        current[slot] = value
    return current


def terminated() -> bool:
    """Whether the caller of the run in progress set ``RunOptions.terminate``."""
    state = current_run()
    return state is not None and state.terminated()


def run_step(step: Step, values: list[Any]) -> tuple[list[Any], Any]:
    """Call ``step`` on ``values`` and store its outputs; returns the arguments and the result
    (for profilers).  Errors are re-raised naming the node (see :func:`attribute_error`)."""
    args = [values[i] for i in step.inputs]
    try:
        result = step.call(*args)
        if step.single:
            values[step.outputs[0]] = result
        else:
            store_outputs(step, result, values)
    except Exception as error:
        raise attribute_error(error, step) from error
    return args, result


def run_sequential(steps: Sequence[Step], values: list[Any], profiler: Any = None) -> None:
    """Run ``steps`` in order on ``values``, freeing each value after its last reader.

    :param profiler: records one node event per step when given (``now()``, ``node_event``).
    :raises RunTerminated: the caller set ``RunOptions.terminate`` (checked between steps).
    """
    state = current_run()
    options = None if state is None else state.run_options
    if profiler is None:
        run_unprofiled(steps, values, options)
        return
    for step in steps:
        if options is not None and options.terminate:
            raise RunTerminated()
        start = profiler.now()
        args, result = run_step(step, values)
        profiler.node_event(step, start, profiler.now(), args, result)
        for slot in step.free:
            values[slot] = None


def run_unprofiled(steps: Sequence[Step], values: list[Any], options: Any) -> None:
    """:func:`run_step` inlined for the unprofiled loop: a graph of small element-wise nodes
    spends as long in the loop as in numpy, so each step's call is written out by arity and
    the outputs of single-output steps are stored without a zip."""
    for step in steps:
        if options is not None and options.terminate:
            raise RunTerminated()
        inputs = step.inputs
        try:
            count = len(inputs)
            if count == 1:
                result = step.call(values[inputs[0]])
            elif count == 2:
                result = step.call(values[inputs[0]], values[inputs[1]])
            else:
                result = step.call(*[values[i] for i in inputs])
            if step.single:
                values[step.outputs[0]] = result
            else:
                store_outputs(step, result, values)
        except Exception as error:
            raise attribute_error(error, step) from error
        for slot in step.free:
            values[slot] = None


def store_outputs(step: Step, result: Sequence[Any], values: list[Any]) -> None:
    """Store a multi-output step's results (both loops keep the single-output store inline)."""
    if len(result) < len(step.outputs):
        raise Fail(f"the kernel returned {len(result)} outputs, the node has {len(step.outputs)}")
    for slot, value in zip(step.outputs, result):
        values[slot] = value


def attribute_error(error: Exception, step: Step) -> Exception:
    """The error re-raised with the node's name and op type, keeping onnxplug's class; an error
    already naming a node (from a subgraph) and a terminated run pass through unchanged."""
    if getattr(error, "onnxplug_node", None) is not None or isinstance(error, RunTerminated):
        return error
    if isinstance(error, OnnxplugError):
        wrapped: Exception = type(error)(
            f"Non-zero status code returned while running {step.op_type} node. Name:'{step.name}' "
            f"Status Message: {error.message}"
        )
    else:
        wrapped = Fail(
            f"Non-zero status code returned while running {step.op_type} node. Name:'{step.name}' "
            f"Status Message: {type(error).__name__}: {error}"
        )
    wrapped.onnxplug_node = step.name  # type: ignore[attr-defined]
    return wrapped
