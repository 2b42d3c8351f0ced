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
   the next.  A step whose inputs after the first change from run to run (a value from
   before the segment, an array made fresh each run) is not bound, since a binding keeps what
   it derived from them (a convolution's bias); it and a step whose kernel declines are called
   as before, the result copied into its buffer (Inception-v2's final 7×7 average pool, which
   has no compiled plan, made its whole 102-step segment plain);
3. from then on the bound calls run back to back.

What binds: a kernel offering ``bind``; a numpy ufunc of one output (the CPU provider's bare
element-wise kernels), called with ``out=``; and a Concat written in place
(``_concat_in_place``), whose allocation, writers and join enter a segment together or not at
all: the join's array is then one planned buffer, each writer bound over its view, and the join
copies only the inputs that were not written there (``_segment_layout``, ``_step_bindings``).
SqueezeNet is one segment of 45 steps so, where its Concats cut it into pieces of two or three.

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
from ..kernels import Scratch
from ._concat_in_place import Allocation, ConcatTarget, Join, Write, role_of
from ._loop import attribute_error
from ._segment_layout import Layout, aligned, plan_buffers
from ._step_bindings import bind_kernel, into_place, is_ufunc, join_binding
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


def segments_enabled() -> bool:
    """Whether plans group bindable steps into segments (``ONNXPLUG_SEGMENTS=0``: no)."""
    return os.environ.get("ONNXPLUG_SEGMENTS", "1").strip().lower() not in ("0", "false", "off", "no")


def bindable(step: Step) -> bool:
    """Whether ``step`` may join a segment: a host step without outer-scope inputs with one output
    used (a node whose schema has more, such as MaxPool's Indices, may join where they are not:
    its kernel returns them all, the first is kept) whose callable offers ``bind``, is a numpy
    ufunc of one output (bound as itself with ``out=``), or takes part in a Concat written in
    place (a writer, where its kernel binds)."""
    if step.device is not None or step.outer_inputs:
        return False
    if not (step.single or all(slot == DROP_SLOT for slot in step.outputs[1:])):
        return False
    role = role_of(step.call)
    if isinstance(role, Write):
        return callable(getattr(role.kernel, "bind", None))
    return role is not None or callable(getattr(step.call, "bind", None)) or is_ufunc(step.call)


def split_segments(steps: Sequence[Step], keep: Iterable[int], constants: Iterable[int]) -> list[Step | Segment]:
    """``steps`` with every run of at least :data:`MIN_STEPS` bindable steps replaced by a
    :class:`Segment`.  The steps of one Concat written in place (its target's allocation and
    every step reading the target) join a segment together or not at all.  Ufunc steps join only
    between others: bound, a ufunc costs more than the plain loop's call (a chain of 1000
    element-wise nodes ran 0.67 µs a node against 0.23), so they are worth binding only where they
    would otherwise cut a segment of layers in two (YOLO's residual adds).

    :param keep: slots that must hold their value after the steps (the plan's outputs).
    :param constants: slots holding the same object on every run (initializers no feed replaces).
    """
    steps = tuple(steps)
    keep = set(keep)
    constants = set(constants) | {NONE_SLOT}
    last_read: dict[int, int] = {}
    for index, step in enumerate(steps):
        for slot in step.inputs:
            last_read[slot] = index
    joins = [bindable(step) for step in steps]
    light = [is_ufunc(step.call) for step in steps]
    groups = _concat_groups(steps)
    while True:
        run_of = _runs(joins, light)
        broken = [group for group in groups if len({run_of[i] for i in group}) > 1 or run_of[group[0]] is None]
        if not any(joins[i] for group in broken for i in group):
            break
        for group in broken:
            for index in group:
                joins[index] = False
    items: list[Step | Segment] = []
    index = 0
    while index < len(steps):
        start = run_of[index]
        if start is None:
            items.append(steps[index])
            index += 1
            continue
        end = index
        while end < len(steps) and run_of[end] == start:
            end += 1
        run = steps[index:end]
        exits = {s.outputs[0] for s in run if s.outputs[0] in keep or last_read.get(s.outputs[0], -1) >= end}
        items.append(Segment(run, exits, constants))
        index = end
    return items


def _runs(joins: Sequence[bool], light: Sequence[bool]) -> list[int | None]:
    """Per step, the first step of the segment it would be in (``None``: none): runs of steps
    that join, without the ``light`` ones at either end, of at least :data:`MIN_STEPS`."""
    run_of: list[int | None] = [None] * len(joins)
    start = 0
    for index in range(len(joins) + 1):
        if index < len(joins) and joins[index]:
            continue
        first, last = start, index
        while first < last and light[first]:
            first += 1
        while last > first and light[last - 1]:
            last -= 1
        if last - first >= MIN_STEPS:
            run_of[first:last] = [first] * (last - first)
        start = index + 1
    return run_of


def _concat_groups(steps: Sequence[Step]) -> list[list[int]]:
    """Per Concat written in place, the indices of its allocation and of the steps reading its
    target."""
    groups: dict[int, list[int]] = {}
    for index, step in enumerate(steps):
        if isinstance(role_of(step.call), Allocation):
            groups[step.outputs[0]] = [index]
    for index, step in enumerate(steps):
        for slot in dict.fromkeys(step.inputs):
            if slot in groups and groups[slot][0] != index:
                groups[slot].append(index)
    return list(groups.values())


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
            self.buffers.append(aligned(0))
        if self.buffers[index].size < size:
            self.buffers[index] = aligned(size)
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

    ``arrays`` holds each step's output array, then the fixed entries, then the run's entries.
    The positions in ``dynamic`` change from run to run (the entries, and the arrays that leave
    the segment with their views): set for a run from ``fresh`` (``(position, None, shape, dtype)``
    a new array, ``(position, source, region, None)`` a view of one) and cleared after it.
    ``program`` holds per bound step its call and either its argument tuple (fixed arrays only)
    or ``None`` and the positions in ``arrays`` to read; ``exits`` the ``(slot, position)`` pairs
    stored in the run's values."""

    __slots__ = ("arrays", "entries", "fresh", "dynamic", "exits", "program", "steps", "guards", "generation")

    def __init__(self, arrays, entries, fresh, dynamic, exits, program, steps, guards) -> None:
        self.arrays, self.entries, self.fresh, self.dynamic = arrays, entries, fresh, dynamic
        self.exits, self.program, self.steps, self.guards = exits, program, steps, guards
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
        self.layout = Layout(self.steps)
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
            if instance is None:  # the layout did not hold: this signature runs plain
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
        appended to ``shapes`` where given (``None`` where the segment cannot replay it)."""
        for index, step in enumerate(self.steps):
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
                shapes.append(self._made(index, result, values))
            for slot in step.free:
                values[slot] = None

    def _made(self, index: int, result: Any, values: list[Any]) -> tuple[tuple[int, ...], np.dtype] | None:
        """The shape and type of step ``index``'s array, ``None`` where it is not a host array or
        the segment's layout cannot make it: a Concat that returned an array of its own, a
        writer's array of another shape or type than its view (a writer that returned an array
        of its own but of the view's shape and type is fine: a layer's first call does, and its
        Concat copies it; bound, it stores into its view)."""
        role = self.layout.roles[index]
        if isinstance(role, Allocation):
            array = result.array if isinstance(result, ConcatTarget) else None
        else:
            array = result
        if type(array) is not np.ndarray:
            return None
        parent = self.layout.parents[index]
        if parent is not None:
            target = values[self.steps[parent[0]].outputs[0]]
            if not isinstance(target, ConcatTarget):
                return None
            if isinstance(role, Write):
                view = target.views[role.index]
                if array.shape != view.shape or array.dtype != view.dtype:
                    return None
            elif array is not (target.array if isinstance(role, Join) else target.views[role.within]):
                return None
        return array.shape, array.dtype

    def _run_recording(self, values: list[Any]) -> list[tuple[tuple[int, ...], np.dtype]] | None:
        """A plain run that records each step's output shape and type (``None`` where the
        signature stays plain)."""
        shapes: list = []
        self._run_plain(values, shapes)
        return None if any(shape is None for shape in shapes) else shapes

    def _replay(self, instance: _Instance, values: list[Any]) -> None:
        arrays = instance.arrays
        for position, slot in instance.entries:
            arrays[position] = values[slot]
        for position, source, region, dtype in instance.fresh:
            if source is None:
                arrays[position] = np.empty(region, dtype)
            else:
                arrays[position] = arrays[source] if region is None else arrays[source][region]
        index = 0
        try:
            for index, (call, arguments, positions) in enumerate(instance.program):  # noqa: B007 - read on error
                call(*(arguments if arguments is not None else [arrays[p] for p in positions]))
            for slot, position in instance.exits:
                values[slot] = arrays[position]
        except Exception as error:
            raise attribute_error(error, instance.steps[index]) from error
        finally:
            for position in instance.dynamic:
                arrays[position] = None
        for slot in self.frees:
            values[slot] = None

    # -- binding ----------------------------------------------------------------------------

    def _instance(
        self, shapes: list[tuple[tuple[int, ...], np.dtype]], values: list[Any], arena: Arena
    ) -> _Instance | None:
        """Every step bound over ``arena``'s buffers as planned for ``shapes`` (``None`` where a
        Concat's steps are not all here).  Where binding grew the arena, it binds again over the
        final memory."""
        layout = self.layout
        owner, sizes = plan_buffers(self.steps, shapes, set(self.exits), layout.roots)
        instance = None
        for _ in range(3):
            generation = arena.generation
            roots: list[np.ndarray | None] = []
            for index, (shape, dtype) in enumerate(shapes):
                buffer = owner[index]
                if layout.roots[index] != index:  # a view, made by the layout
                    roots.append(None)
                elif buffer is None:  # an array leaving the segment: bound over a stand-in
                    roots.append(np.empty(shape, dtype))
                else:
                    kind = np.dtype(dtype)
                    nbytes = math.prod(shape) * kind.itemsize
                    roots.append(arena.buffer(buffer, sizes[buffer])[:nbytes].view(kind).reshape(shape))
            fresh = {layout.roots[index] for index in range(len(shapes)) if owner[layout.roots[index]] is None}
            instance = self._bind(layout.arrays(roots), fresh, shapes, values, arena.scratch)
            if instance is None:
                return None
            if arena.scratch.grew:
                arena.scratch.grew = False
                arena.generation += 1
            if arena.generation == generation:
                break
        instance.generation = arena.generation
        return instance

    def _bind(
        self, outputs: list[np.ndarray], fresh: set[int], shapes: list, values: list[Any], scratch: Scratch
    ) -> _Instance | None:
        """The program over ``outputs`` (every step's array; those of the ``fresh`` roots and their
        views are made anew each run)."""
        layout = self.layout
        count = len(self.steps)
        base = count + len(self.fixed_entries)
        position_of = {step.outputs[0]: index for index, step in enumerate(self.steps)}
        made_by = dict(position_of)
        position_of.update((slot, count + offset) for offset, slot in enumerate(self.fixed_entries))
        position_of.update((slot, base + offset) for offset, slot in enumerate(self.entries))
        arrays = [*outputs, *(values[slot] for slot in self.fixed_entries), *(values[slot] for slot in self.entries)]
        changing = [index for index in range(count) if layout.roots[index] in fresh]
        dynamic = frozenset(changing) | frozenset(range(base, len(arrays)))
        program, guards, steps = [], {}, []
        for index, step in enumerate(self.steps):
            role = layout.roles[index]
            if role is not None and layout.parents[index] is None and not isinstance(role, Allocation):
                return None  # (split_segments keeps a join's steps together)
            used = step.inputs[:-1] if isinstance(role, (Write, Join)) else step.inputs
            inputs = tuple(arrays[position_of[slot]] for slot in used)
            if isinstance(role, Allocation):
                continue  # its array is planned: nothing to run
            if isinstance(role, Join):
                allocation = layout.parents[index][0]
                copies = [n for n, slot in enumerate(used) if not layout.in_place(made_by.get(slot), allocation, n)]
                binding = join_binding(role.regions, copies)
                if binding is None:  # every input was written in place
                    continue
            else:
                kernel = role.kernel if isinstance(role, Write) else step.call
                binding = None
                # A binding may keep what it derived from its inputs after the first (a bias):
                # only where those are the same objects every run (constants, planned buffers).
                if is_ufunc(kernel) or not any(position_of[slot] in dynamic for slot in used[1:]):
                    binding = bind_kernel(kernel, inputs, arrays[index], scratch)
                if binding is None:  # it runs as a plain call, its result copied into place
                    binding = into_place(kernel, step.single)
            if binding.guard is not None:
                guards.setdefault(id(binding.guard), (binding.guard, binding.token))
            positions = (index, *(position_of[slot] for slot in used))
            fixed = not any(p in dynamic for p in positions)
            program.append((binding.call, tuple(arrays[p] for p in positions) if fixed else None, positions))
            steps.append(step)
        fresh_specs = []
        for index in changing:
            parent = layout.parents[index]
            if parent is None:
                shape, dtype = shapes[index]
                fresh_specs.append((index, None, shape, dtype))
            else:
                fresh_specs.append((index, parent[0], parent[1], None))
        exit_pairs = tuple((slot, position_of[slot]) for slot in self.exits)
        entries = tuple((position_of[slot], slot) for slot in self.entries)
        for position in dynamic:
            arrays[position] = None
        return _Instance(
            arrays, entries, tuple(fresh_specs), tuple(dynamic), exit_pairs, program, steps, list(guards.values())
        )
