"""IOBinding's run: feeds that may live in device memory, outputs that may stay there.

A device feed reaches the steps of its own memory without a copy (the plan's copy steps pass
values their target already owns); it is copied home once when a host kernel reads it too, or
when its readers use another memory.  Outputs flagged ``keep`` are read where they were computed,
before the plan's final copies home (``GraphPlan.execute_on_devices``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidArgument
from ..kernels import RunState, enter_run, leave_run
from ._io import check_feeds, check_tensor_type, fresh_outputs
from .ortvalue import OrtValue

if TYPE_CHECKING:
    from ._plan import GraphPlan
    from .session import InferenceSession

__all__ = ["run_on_devices"]

_COPIES_IN = ("MemcpyFromHost", "MemcpyDLPack")


def run_on_devices(
    session: InferenceSession,
    plan: GraphPlan,
    output_names: Sequence[str],
    feeds: dict[str, Any],
    keep: Sequence[bool],
    run_options: Any,
    synchronize: bool = True,
) -> list[tuple[Any, Any]]:
    """Run ``plan``; returns ``(value, memory or None)`` per requested output.  ``synchronize``
    is false while a provider records the run (:mod:`onnxplug.capture`): waiting is not
    recordable, and the replay waits instead."""
    indices = session._output_indices(output_names)
    specs = {spec.name: spec for spec in session._input_specs}
    host_feeds: dict[str, Any] = {}
    device_feeds: dict[str, Any] = {}
    for name, value in feeds.items():
        memory = value._onnxplug_memory() if isinstance(value, OrtValue) else None
        if memory is None:
            host_feeds[name] = value
            continue
        spec = specs.get(name)
        if spec is None:
            raise InvalidArgument(f"Invalid input name: {name} (the model's inputs are {list(specs)})")
        array = value._onnxplug_value()
        check_tensor_type(spec, *memory.shape_and_type(array))
        if _read_only_in(session, plan, name, memory):
            device_feeds[name] = array
        else:
            memory.synchronize()
            host_feeds[name] = memory.to_host(array)
    checked = check_feeds([spec for spec in session._input_specs if spec.name not in device_feeds], host_feeds)
    inputs = [
        device_feeds[name] if name in device_feeds else checked.get(name, default)
        for name, default in plan.input_defaults()
    ]
    wanted = [False] * len(plan.output_names)
    for index, kept in zip(indices, keep):
        wanted[index] = wanted[index] or kept
    token = enter_run(RunState(run_options))
    try:
        with np.errstate(all="ignore"):  # as in InferenceSession._execute
            results = plan.execute_on_devices(inputs, wanted)
    finally:
        leave_run(token)
    for provider in session._providers if synchronize else ():
        provider.synchronize()  # the end of the run: every provider's queued work is done
    # Host outputs get run()'s guarantees (fresh, writable, no aliasing); device ones are new.
    host = iter(fresh_outputs([value for value, memory in results if memory is None]))
    results = [(value, memory) if memory is not None else (next(host), None) for value, memory in results]
    return [results[i] for i in indices]


def _read_only_in(session: InferenceSession, plan: GraphPlan, name: str, memory: Any) -> bool:
    """Whether every step reading graph input ``name`` copies it into ``memory``."""
    owners = {p.ort_name for p in session._providers if p.transfer() is memory}
    readers = plan.input_readers(name)
    return bool(readers) and all(op in _COPIES_IN and provider in owners for op, provider in readers)
