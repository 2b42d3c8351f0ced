"""Device placement: copies inserted where a value crosses between memories.

Every value has a home: graph inputs and constants live on the host; a step's outputs live in
its provider's memory (host for providers without a transfer).  Where a step reads a value that
lives elsewhere, a copy step is inserted before it (device→host, host→device, and between two
devices DLPack when the target accepts it, else a host hop); one copy serves every later reader,
and a copy step passes through a value its target memory already owns (a device feed bound
through IOBinding).  Constants needed on a device are copied once, when the plan is built.
Graph outputs end on the host (IOBinding reads device outputs before their copy home).

Outer-scope values are handed to a subgraph unmoved, so their memory is known only when the
subgraph runs: in a subgraph's plan they are *free* values, and each reader gets a copy step that
finds the memory owning the value (``memories``) and copies only when it is not where the reader
needs it.  A Loop body reading a device value computed before the Loop thus never copies it.

Before a copy reads a device value the core calls the producing provider's ``synchronize()``:
its streams may still be writing the value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..api import Provider
from ._memories import move
from ._steps import DROP_SLOT, NONE_SLOT, Step
from .report import ReportCopy

__all__ = ["Copy", "place"]


#: One inserted copy, for reports (the public report's own record).
Copy = ReportCopy


#: The home of a free value (see the module docstring).
_FREE: Any = object()


def _label(device: Provider | None) -> str:
    return "host" if device is None else device.ort_name


def _copy_call(
    transfer_fn: Callable[[Any], Any],
    skip: Callable[[Any], bool] | None = None,
    wait: Callable[[], None] | None = None,
) -> Callable[[Any], Any]:
    """A copy step's callable; ``skip(value)`` says the value is already where it is going (a
    graph input fed in device memory, say), so it passes through without a copy; ``wait`` is the
    source provider's ``synchronize``, called before its memory is read."""

    def copy(value: Any) -> Any:
        if value is None or (skip is not None and skip(value)):
            return value
        if wait is not None:
            wait()
        return transfer_fn(value)

    return copy


def _free_copy(target: Provider | None, devices: Sequence[Provider]) -> Callable[[Any], Any]:
    """A copy into ``target``'s memory (``None``: host) of a value that may be in any of the
    ``devices``' memories or on the host; a value already there passes through."""
    owners = [(provider, provider.transfer()) for provider in devices]
    memory = None if target is None else target.transfer()

    def copy(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, np.ndarray):
            for provider, owner in owners:
                if owner.owns(value):
                    return move(value, owner, memory, provider.synchronize)
        return move(value, None, memory)

    return copy


def _on_host(memory: Any) -> Callable[[Any], bool]:
    """Whether a value headed home is already a host array (a graph input fed from the host and
    read through a device step); transfers that do not implement ``owns`` still copy the rest."""
    return lambda value: isinstance(value, np.ndarray) and not memory.owns(value)


def place(
    steps: list[Step],
    output_slots: tuple[int, ...],
    template: list[Any],
    constants: dict[int, Any],
    slot_names: dict[int, str],
    *,
    devices: Sequence[Provider] = (),
    free_slots: Sequence[int] = (),
) -> tuple[list[Step], tuple[int, ...], list[Copy], tuple[tuple[int, Provider | None], ...], int]:
    """Insert copies into ``steps``; return the new steps, output slots, the copies made, and
    where each graph output is before its final copy home (``(slot, provider or None)``), which
    is what a caller keeping outputs on their device reads, and how many steps at the end are
    those final copies.

    :param template: the plan's initial slot values (constants copied to a device are added).
    :param constants: slot → host value, for slots holding constants.
    :param slot_names: slot → value name, for reports.
    :param devices: the plan's providers with device memory (none: every value is on the host).
    :param free_slots: slots whose memory is known only at run time (a subgraph's outer values).
    """
    home: dict[int, Any] = dict.fromkeys(free_slots, _FREE) if devices else {}
    converted: dict[tuple[int, int], int] = {}
    copies: list[Copy] = []
    placed: list[Step] = []

    def new_slot(name: str) -> int:
        template.append(None)
        slot_names[len(template) - 1] = name
        return len(template) - 1

    def move(slot: int, target: Provider | None, before: list[Step]) -> int:
        source = home.get(slot)
        if source is target or slot in (NONE_SLOT, DROP_SLOT):
            return slot
        key = (slot, id(target))
        if key in converted:
            return converted[key]
        name = slot_names.get(slot, f"slot{slot}")
        how = "via host" if source is not None and target is not None else "run"
        if source is _FREE:
            moved = new_slot(name)
            where = _label(target)
            before.append(
                Step(
                    _free_copy(target, devices),
                    (slot,),
                    (moved,),
                    True,
                    f"copy {name} to {where}",
                    "MemcpyIfNeeded",
                    where,
                    -1,
                )
            )
            home[moved] = target
            converted[key] = moved
            copies.append(Copy(name, "outer scope", where, "if needed"))
            return moved
        if slot in constants and source is None and target is not None:
            moved = new_slot(name)
            template[moved] = target.transfer().to_device(constants[slot])
            how = "build"
        elif source is not None and target is not None and target.transfer().accepts_dlpack:
            how = "dlpack"
            # Device to device through DLPack: one step, no host hop.
            moved = new_slot(name)
            before.append(
                Step(
                    _copy_call(target.transfer().from_dlpack, target.transfer().owns, source.synchronize),
                    (slot,),
                    (moved,),
                    True,
                    f"copy {name} to {target.ort_name}",
                    "MemcpyDLPack",
                    target.ort_name,
                    -1,
                )
            )
        else:
            current = slot
            if source is not None:
                current = new_slot(name)
                before.append(
                    Step(
                        _copy_call(source.transfer().to_host, _on_host(source.transfer()), source.synchronize),
                        (slot,),
                        (current,),
                        True,
                        f"copy {name} to host",
                        "MemcpyToHost",
                        _label(source),
                        -1,
                    )
                )
                home[current] = None
            if target is not None:
                moved = new_slot(name)
                before.append(
                    Step(
                        _copy_call(target.transfer().to_device, target.transfer().owns),
                        (current,),
                        (moved,),
                        True,
                        f"copy {name} to {target.ort_name}",
                        "MemcpyFromHost",
                        target.ort_name,
                        -1,
                    )
                )
            else:
                moved = current
        home[moved] = target
        converted[key] = moved
        copies.append(Copy(name, _label(source), _label(target), how))
        return moved

    for step in steps:
        inserted: list[Step] = []
        if step.device is not None or any(home.get(s) is not None for s in step.inputs):
            unmoved = step.outer_inputs if devices else ()
            step.inputs = tuple(
                slot
                if position in unmoved
                else move(slot, None if position in step.host_inputs else step.device, inserted)
                for position, slot in enumerate(step.inputs)
            )
        placed.extend(inserted)
        placed.append(step)
        for slot in step.outputs:
            home[slot] = step.device
    sources = tuple((slot, home.get(slot)) for slot in output_slots)
    tail: list[Step] = []
    outputs = tuple(move(slot, None, tail) for slot in output_slots)
    placed.extend(tail)
    return placed, outputs, copies, sources, len(tail)
