"""Segments: runs of consecutive host steps whose kernels bind (``onnxplug.kernels.Binding``),
replayed as their bound calls back to back over buffers planned for their shapes.

Why: in a small CNN most of the time outside the compiled layers is each layer's own Python
(checks, lookups, allocating its output, reshaping views: ~4 µs a MobileNetV2 layer) and the run
loop around it.  Replaying MobileNetV2's 52 compiled calls back to back over six reused buffers
took 2129 µs against the run's 2455 (docs/benchmarks.md); without the reuse (every value's array
kept) the replay was no faster, so the buffers are planned, not kept.

How a segment runs, per *signature* (the shapes and element types of the arrays entering it
that are not constants):

1. first run: its steps run as plain steps do, and the shape and type of every value they
   make are recorded;
2. next run: every step is bound (``kernel.bind(inputs, output, scratch)``) over buffers planned
   for those shapes: a value used only inside the segment gets a buffer shared, best fit, with
   values whose last reader has run before it is made; a value read after the segment or a graph
   output (an *exit*) gets a fresh array every run, so nothing a run returns is overwritten by
   the next.  Where any step declines, the signature stays plain;
3. from then on the bound calls run back to back.

The buffers and the scratch belong to an :class:`Arena`: one per plan and thread, shared by all
the plan's segments (they run one at a time and their values die with them), so concurrent runs
on other threads use other memory.  A binding's guard (the CPU provider's run settings) is asked
once per run; when it answers differently the segment is bound again, at most
:data:`MAX_REBINDS` times for a signature, which then stays plain.

Segments serve plain sequential runs only (``StraightLine``); profiled runs and the parallel
executor keep one step at a time, so a profile still shows every node.  ``RunOptions.terminate``
is checked before a segment, not between its steps.  ``ONNXPLUG_SEGMENTS=0`` turns segments off
(read when a plan first runs).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import Fail
from ..kernels import Binding, Scratch
from ._loop import attribute_error
from ._steps import DROP_SLOT, NONE_SLOT, Step

__all__ = [
    "MAX_INSTANCES",
    "MAX_REBINDS",
    "MIN_STEPS",
    "Arena",
    "Segment",
    "bindable",
    "segments_enabled",
    "split_segments",
]

#: Fewest consecutive bindable steps worth a segment.
MIN_STEPS = 2
#: Signatures a segment keeps (the oldest is dropped beyond it: a model fed ever new shapes).
MAX_SIGNATURES = 8
#: Bindings an arena keeps (beyond it they are all dropped and made again as runs need them).
MAX_INSTANCES = 1024
#: How many times a signature is bound again after a guard changed before it stays plain.
MAX_REBINDS = 4
#: Buffers are aligned to this many bytes (a cache line).
_ALIGN = 64


def segments_enabled() -> bool:
    """Whether plans group bindable steps into segments (``ONNXPLUG_SEGMENTS=0``: no)."""
    return os.environ.get("ONNXPLUG_SEGMENTS", "1").strip().lower() not in ("0", "false", "off", "no")


def bindable(step: Step) -> bool:
    """Whether ``step`` may join a segment: a host step without outer-scope inputs whose callable
    offers ``bind``, with one output used (a node whose schema has more, such as MaxPool's
    Indices, may join where they are not: its kernel returns them all, the first is kept)."""
    return (
        step.device is None
        and not step.outer_inputs
        and (step.single or all(slot == DROP_SLOT for slot in step.outputs[1:]))
        and callable(getattr(step.call, "bind", None))
    )


def split_segments(steps: Sequence[Step], keep: Iterable[int], constants: Iterable[int]) -> list[Step | Segment]:
    """``steps`` with every run of at least :data:`MIN_STEPS` bindable steps replaced by a
    :class:`Segment`.

    :param keep: slots that must hold their value after the steps (the plan's outputs).
    :param constants: slots holding the same object on every run (initializers no feed replaces).
    """
    keep = set(keep)
    constants = set(constants) | {NONE_SLOT}
    last_read: dict[int, int] = {}
    for index, step in enumerate(steps):
        for slot in step.inputs:
            last_read[slot] = index
    items: list[Step | Segment] = []
    run: list[Step] = []
    for index, step in enumerate([*steps, None]):
        if step is not None and bindable(step):
            run.append(step)
            continue
        if len(run) >= MIN_STEPS:
            exits = {s.outputs[0] for s in run if s.outputs[0] in keep or last_read.get(s.outputs[0], -1) >= index}
            items.append(Segment(run, exits, constants))
        else:
            items.extend(run)
        run = []
        if step is not None:
            items.append(step)
    return items


class Arena:
    """Memory the segments of one plan share on one thread: numbered byte buffers (a segment's
    buffer ``i`` is the arena's buffer ``i``) and one :class:`~onnxplug.kernels.Scratch`, with
    each segment's bindings over them.

    Why shared: segments run one at a time on a thread and their buffers die with them, so one
    set of buffers serves them all and stays in cache; ShuffleNetV2's 16 segments, each with
    buffers and scratch of its own, ran 4 % slower than without segments.  A buffer or the
    scratch that grows is a new array, and ``generation`` changes, so that bindings over the old
    one are made again (they stay correct meanwhile: they keep their old memory alive).
    """

    __slots__ = ("buffers", "scratch", "generation", "instances")

    def __init__(self) -> None:
        self.buffers: list[np.ndarray] = []
        self.scratch = Scratch()
        self.generation = 0
        self.instances: dict[_Signature, _Instance] = {}

    def buffer(self, index: int, size: int) -> np.ndarray:
        """Byte buffer ``index``, of at least ``size`` bytes (64-byte aligned)."""
        while len(self.buffers) <= index:
            self.buffers.append(_aligned(0))
        if self.buffers[index].size < size:
            self.buffers[index] = _aligned(size)
            self.generation += 1
        return self.buffers[index]


class _Signature:
    """What a segment knows of one signature: the shapes and types its steps made (``None``:
    one was not a host array) and whether it runs plain."""

    __slots__ = ("shapes", "plain", "rebinds")

    def __init__(self, shapes: list[tuple[tuple[int, ...], np.dtype]] | None) -> None:
        self.shapes = shapes
        self.plain = shapes is None
        self.rebinds = 0


class _Instance:
    """A segment's steps bound over one arena's memory at one of its generations.

    ``arrays`` holds each step's output array (``None`` for exits), the fixed entries, then from
    ``base`` the run's entries and exits, set for the run and cleared after it.  ``program``
    holds per step its call and either its argument tuple (fixed arrays only) or ``None`` and the
    positions in ``arrays`` to read (a step reading an entry or writing an exit: they change from
    run to run)."""

    __slots__ = ("arrays", "base", "exit_specs", "program", "guards", "generation")

    def __init__(self, arrays, base, exit_specs, program, guards) -> None:
        self.arrays, self.base, self.exit_specs = arrays, base, exit_specs
        self.program, self.guards = program, guards
        self.generation = -1


class Segment:
    """Consecutive bindable steps run as one item of a plan (see the module's docstring).

    :ivar steps: the steps, in order.
    :ivar exits: their output slots written to the run's values (read later, or kept).
    :ivar entries: slots read from the run's values that change from run to run.
    :ivar fixed_entries: slots read that hold the same object every run (constants).
    """

    def __init__(self, steps: Sequence[Step], exits: set[int], constants: set[int]) -> None:
        self.steps = tuple(steps)
        made = {step.outputs[0] for step in self.steps}
        self.exits = tuple(step.outputs[0] for step in self.steps if step.outputs[0] in exits)
        entries = dict.fromkeys(slot for step in self.steps for slot in step.inputs if slot not in made)
        self.fixed_entries = tuple(slot for slot in entries if slot in constants)
        self.entries = tuple(slot for slot in entries if slot not in constants)
        # entries whose last reader is inside: freed once the segment has run
        self.frees = tuple(dict.fromkeys(slot for step in self.steps for slot in step.free if slot not in made))
        self._signatures: dict[tuple, _Signature] = {}

    def __repr__(self) -> str:
        return f"Segment({', '.join(step.name for step in self.steps)})"

    # -- running ----------------------------------------------------------------------------

    def run(self, values: list[Any], arena: Arena) -> None:
        """Run the segment's steps on ``values`` (entries read there, exits stored there), bound
        over ``arena``'s memory where its signature allows."""
        signature = self._signature(values)
        if signature is None:  # an entry that is not a C-contiguous array
            self._run_plain(values)
            return
        known = self._signatures.get(signature)
        if known is None:
            self._remember(signature, _Signature(self._run_recording(values)))
            return
        if known.plain:
            self._run_plain(values)
            return
        instance = arena.instances.get(known)
        if instance is None or instance.generation != arena.generation:
            instance = self._instance(known.shapes, values, arena)
            if instance is None:  # a step declined: this signature runs plain
                known.plain = True
                self._run_plain(values)
                return
            if len(arena.instances) >= MAX_INSTANCES:  # signatures segments have dropped, too
                arena.instances.clear()
            arena.instances[known] = instance
        for guard, token in instance.guards:
            if guard() is not token:  # the run's settings changed: bound afresh next run
                del arena.instances[known]
                known.rebinds += 1
                known.plain = known.rebinds > MAX_REBINDS
                self._run_plain(values)
                return
        self._replay(instance, values)

    def _signature(self, values: list[Any]) -> tuple | None:
        """The entries' shapes and types, or ``None`` where one is not a C-contiguous ndarray."""
        signature = []
        for slot in self.entries:
            value = values[slot]
            if type(value) is not np.ndarray or not value.flags.c_contiguous:
                return None
            signature.append((value.shape, value.dtype))
        return tuple(signature)

    def _remember(self, signature: tuple, known: _Signature) -> None:
        if len(self._signatures) >= MAX_SIGNATURES:
            try:  # the oldest
                self._signatures.pop(next(iter(self._signatures)), None)
            except (RuntimeError, StopIteration):  # a concurrent run changed the dict meanwhile
                pass
        self._signatures[signature] = known

    def _run_plain(self, values: list[Any], shapes: list | None = None) -> None:
        """The steps one by one as the plan's loop runs them; each output's shape and type is
        appended to ``shapes`` where given."""
        for step in self.steps:
            try:
                result = step.call(*[values[i] for i in step.inputs])
                if not step.single:  # its other outputs are not used (bindable)
                    if len(result) < len(step.outputs):
                        raise Fail(f"the kernel returned {len(result)} outputs, the node has {len(step.outputs)}")
                    result = result[0]
                values[step.outputs[0]] = result
            except Exception as error:
                raise attribute_error(error, step) from error
            if shapes is not None:
                shapes.append((result.shape, result.dtype) if type(result) is np.ndarray else None)
            for slot in step.free:
                values[slot] = None

    def _run_recording(self, values: list[Any]) -> list[tuple[tuple[int, ...], np.dtype]] | None:
        """A plain run that records each step's output shape and type (``None`` where one is not
        a host array: the signature then stays plain)."""
        shapes: list = []
        self._run_plain(values, shapes)
        return None if any(shape is None for shape in shapes) else shapes

    def _replay(self, instance: _Instance, values: list[Any]) -> None:
        arrays = instance.arrays
        base = instance.base
        for position, slot in enumerate(self.entries, base):
            arrays[position] = values[slot]
        exits = [np.empty(shape, dtype) for shape, dtype in instance.exit_specs]
        arrays[base + len(self.entries) :] = exits
        index = 0
        try:
            for index, (call, arguments, positions) in enumerate(instance.program):  # noqa: B007 - read on error
                call(*(arguments if arguments is not None else [arrays[p] for p in positions]))
        except Exception as error:
            raise attribute_error(error, self.steps[index]) from error
        finally:
            arrays[base:] = [None] * (len(arrays) - base)
        for slot, array in zip(self.exits, exits):
            values[slot] = array
        for slot in self.frees:
            values[slot] = None

    # -- binding ----------------------------------------------------------------------------

    def _instance(
        self, shapes: list[tuple[tuple[int, ...], np.dtype]], values: list[Any], arena: Arena
    ) -> _Instance | None:
        """Every step bound over ``arena``'s buffers as planned for ``shapes``, or ``None`` where
        a step declines.  Where binding grew the arena, it binds again over the final memory."""
        exits = set(self.exits)
        owner, sizes = _plan_buffers(self.steps, shapes, exits)
        instance = None
        for _ in range(3):
            generation = arena.generation
            outputs: list[np.ndarray] = []
            for index, (shape, dtype) in enumerate(shapes):
                if owner[index] is None:  # an exit: bound over a stand-in, a fresh array each run
                    outputs.append(np.empty(shape, dtype))
                    continue
                kind = np.dtype(dtype)
                nbytes = math.prod(shape) * kind.itemsize
                outputs.append(arena.buffer(owner[index], sizes[owner[index]])[:nbytes].view(kind).reshape(shape))
            instance = self._bind(outputs, values, arena.scratch)
            if instance is None:
                return None
            if arena.scratch.grew:
                arena.scratch.grew = False
                arena.generation += 1
            if arena.generation == generation:
                break
        instance.generation = arena.generation
        return instance

    def _bind(self, outputs: list[np.ndarray], values: list[Any], scratch: Scratch) -> _Instance | None:
        count = len(self.steps)
        base = count + len(self.fixed_entries)
        exit_at = base + len(self.entries)
        position_of = {step.outputs[0]: index for index, step in enumerate(self.steps)}
        position_of.update((slot, count + offset) for offset, slot in enumerate(self.fixed_entries))
        position_of.update((slot, base + offset) for offset, slot in enumerate(self.entries))
        position_of.update((slot, exit_at + offset) for offset, slot in enumerate(self.exits))
        stand_ins = [outputs[index] for index, step in enumerate(self.steps) if step.outputs[0] in self.exits]
        arrays = [
            *(None if step.outputs[0] in self.exits else outputs[index] for index, step in enumerate(self.steps)),
            *(values[slot] for slot in self.fixed_entries),
            *(values[slot] for slot in self.entries),
            *stand_ins,
        ]
        program = []
        guards: dict[int, tuple] = {}
        for index, step in enumerate(self.steps):
            inputs = tuple(arrays[position_of[slot]] for slot in step.inputs)
            output = position_of[step.outputs[0]] if step.outputs[0] in self.exits else index
            try:
                binding = step.call.bind(inputs, arrays[output], scratch)
            except Exception:  # noqa: BLE001 - a kernel that fails to bind runs plain
                binding = None
            if not isinstance(binding, Binding):
                return None
            if binding.guard is not None:
                guards.setdefault(id(binding.guard), (binding.guard, binding.token))
            positions = (output, *(position_of[slot] for slot in step.inputs))
            arguments = None if any(p >= base for p in positions) else tuple(arrays[p] for p in positions)
            program.append((binding.call, arguments, positions))
        arrays[base:] = [None] * (len(arrays) - base)
        exit_specs = [(array.shape, array.dtype) for array in stand_ins]
        return _Instance(arrays, base, exit_specs, program, list(guards.values()))


def _plan_buffers(steps: Sequence[Step], shapes: list, exits: set[int]) -> tuple[list[int | None], list[int]]:
    """Per step, the buffer its output is written to (``None`` for exits), and each buffer's
    bytes: values used only inside the segment share buffers, best fit, a buffer being free once
    its value's last reader has run (never while the step writing the new value reads it)."""
    made = {step.outputs[0]: index for index, step in enumerate(steps)}
    last = list(range(len(steps)))  # each value's last reader (itself where it has none)
    for index, step in enumerate(steps):
        for slot in step.inputs:
            producer = made.get(slot)
            if producer is not None and producer < index:
                last[producer] = index
    sizes: list[int] = []
    owner: list[int | None] = [None] * len(steps)
    free: list[int] = []
    releasing: dict[int, list[int]] = {}
    for index, step in enumerate(steps):
        if step.outputs[0] not in exits:
            shape, dtype = shapes[index]
            need = max(math.prod(shape) * np.dtype(dtype).itemsize, 1)
            fits = [b for b in free if sizes[b] >= need]
            if fits:  # the smallest that fits
                chosen = min(fits, key=lambda b: sizes[b])
            elif free:  # else the largest free one, grown
                chosen = max(free, key=lambda b: sizes[b])
                sizes[chosen] = need
            else:
                chosen = len(sizes)
                sizes.append(need)
            if chosen in free:
                free.remove(chosen)
            owner[index] = chosen
            releasing.setdefault(last[index], []).append(chosen)
        free.extend(releasing.pop(index, ()))
    return owner, sizes


def _aligned(size: int) -> np.ndarray:
    raw = np.empty(size + _ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % _ALIGN
    return raw[start : start + size]
