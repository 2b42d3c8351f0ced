"""The run loop: how a plan's steps are called, shared by every way of executing a plan.

``run_step`` calls one step on the slot values and stores its results, naming the node in any
error; ``run_sequential`` is the loop profiled runs use (a profiler, when given, times every
step); the parallel executor calls ``run_step`` from its worker threads; ``StraightLine`` is what
plain sequential runs use: the steps written out as straight-line Python, so that a graph of
small nodes pays for its kernels and not for a loop interpreting step records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import Fail, OnnxplugError, RunTerminated
from ..kernels import current_run
from ._steps import Step

__all__ = ["StraightLine", "attribute_error", "load_values", "run_sequential", "run_step", "terminated"]


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
            _store_outputs(step, result, values)
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
        _run_fast(steps, values, options)
        return
    for step in steps:
        if options is not None and options.terminate:
            raise RunTerminated()
        start = profiler.now()
        args, result = run_step(step, values)
        profiler.node_event(step, start, profiler.now(), args, result)
        for slot in step.free:
            values[slot] = None


def _run_fast(steps: Sequence[Step], values: list[Any], options: Any) -> None:
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
                _store_outputs(step, result, values)
        except Exception as error:
            raise attribute_error(error, step) from error
        for slot in step.free:
            values[slot] = None


class StraightLine:
    """A plan's steps compiled to straight-line Python functions, from the second run on.

    Each step becomes one line, ``values[o] = c17(values[i], values[j])``, followed by the stores
    that free its inputs' last uses, so a run does no per-step attribute lookups, length tests or
    loops over the free lists (on a chain of 1000 element-wise nodes the interpreted loop cost
    about as much as the numpy calls).  The generated source holds only integers and names of
    the form ``cN``: the callables and steps are bound through the function's namespace, never
    written into the text, so nothing from a model reaches the compiler.  Steps are split into
    functions of :data:`CHUNK` so compile time stays linear for very large graphs.  An error is
    attributed to its step by the line it was raised from (each line belongs to one step), through
    :func:`attribute_error` as in the interpreted loop; with run options the ``terminate`` flag is
    tested before every step, as there.

    Compiling costs tens of microseconds per step, more than an interpreted run of small nodes,
    so the first run of each kind (with and without run options) is interpreted and only a plan
    that runs again is compiled: a session that runs once never pays for it.
    """

    #: Steps per generated function.
    CHUNK = 256

    __slots__ = ("_steps", "_plain", "_checked")

    def __init__(self, steps: Sequence[Step]) -> None:
        self._steps = tuple(steps)
        # None: not run yet; (): run once, interpreted; else the compiled functions.
        self._plain: tuple[Any, ...] | None = None
        self._checked: tuple[Any, ...] | None = None

    def __call__(self, values: list[Any], options: Any) -> None:
        """Run every step on ``values``; ``options``: the run's RunOptions or ``None``."""
        chunks = self._plain if options is None else self._checked
        if not chunks:
            if chunks is None:
                if options is None:
                    self._plain = ()
                else:
                    self._checked = ()
                _run_fast(self._steps, values, options)
                return
            chunks = self._build(checked=options is not None)
        for chunk in chunks:
            chunk(values, options)

    def _build(self, *, checked: bool) -> tuple[Any, ...]:
        chunks = tuple(
            _compile_chunk(self._steps[start : start + self.CHUNK], checked)
            for start in range(0, len(self._steps), self.CHUNK)
        )
        if checked:
            self._checked = chunks
        else:
            self._plain = chunks
        return chunks


def _compile_chunk(steps: Sequence[Step], checked: bool) -> Any:
    lines = ["def chunk(values, options):", "    try:"]
    step_of_line: dict[int, Step] = {}
    namespace: dict[str, Any] = {
        "steps": tuple(steps),
        "step_of_line": step_of_line,
        "attribute_error": attribute_error,
        "store_outputs": _store_outputs,
        "RunTerminated": RunTerminated,
    }
    for index, step in enumerate(steps):
        namespace[f"c{index}"] = step.call
        arguments = ", ".join(f"values[{int(slot)}]" for slot in step.inputs)
        first = len(lines)
        if checked:
            lines.append("        if options.terminate: raise RunTerminated()")
        if step.single:
            lines.append(f"        values[{int(step.outputs[0])}] = c{index}({arguments})")
        else:
            lines.append(f"        store_outputs(steps[{index}], c{index}({arguments}), values)")
        lines.extend(f"        values[{int(slot)}] = None" for slot in step.free)
        for line in range(first + 1, len(lines) + 1):  # line numbers count from 1
            step_of_line[line] = step
    if not steps:
        lines.append("        pass")
    lines += [
        "    except Exception as error:",
        "        raise attribute_error(error, step_of_line[error.__traceback__.tb_lineno]) from error",
    ]
    exec(compile("\n".join(lines), "<onnxplug plan>", "exec"), namespace)
    return namespace["chunk"]


def _store_outputs(step: Step, result: Sequence[Any], values: list[Any]) -> None:
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
