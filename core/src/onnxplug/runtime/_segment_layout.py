"""Where a segment's values live: which values are views of others (a Concat written in place)
and which reused buffer holds each of the others.

Why a module of its own: ``_segments`` runs and binds; this is the arithmetic it relies on, with
the one property tests check directly (two values alive at once never share memory).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._concat_in_place import Allocation, Join, Write, role_of
from ._steps import Step

__all__ = ["Layout", "aligned", "plan_buffers"]

#: Buffers are aligned to this many bytes (a cache line).
ALIGN = 64


class Layout:
    """The views among a segment's step outputs.

    A Concat written in place (``_concat_in_place``) is three kinds of steps: an
    :class:`Allocation` makes the target (its output here: the Concat's array), each
    :class:`Write` makes view ``index`` of it, the :class:`Join` returns the array itself; a
    nested allocation's array is a view of the enclosing one.  Inside a segment they cost nothing:
    the array is one planned buffer, the writers are bound over their views, and the join only
    copies the inputs that were not written in place.

    :ivar roles: per step, its role or ``None``.
    :ivar parents: per step, ``None`` (its output is an array of its own) or ``(step, region)``:
        its output is that earlier step's array (``region`` ``None``) or the view at ``region``.
    :ivar roots: per step, the step whose array it is or views (itself for a plain output).
    """

    __slots__ = ("roles", "parents", "roots", "_views")

    def __init__(self, steps: Sequence[Step]) -> None:
        made_by = {step.outputs[0]: index for index, step in enumerate(steps)}
        self.roles = tuple(role_of(step.call) for step in steps)
        parents: list[tuple[int, tuple | None] | None] = []
        views: list[tuple[int, int] | None] = []  # (allocation, input index) a step's output is
        for step, role in zip(steps, self.roles):
            parent = made_by[step.inputs[-1]] if step.inputs and step.inputs[-1] in made_by else None
            if isinstance(role, Write) and parent is not None:
                parents.append((parent, self.roles[parent].regions[role.index]))
                views.append((parent, role.index))
            elif isinstance(role, Allocation) and role.within is not None and parent is not None:
                parents.append((parent, self.roles[parent].regions[role.within]))
                views.append((parent, role.within))
            elif isinstance(role, Join) and parent is not None:
                parents.append((parent, None))
                views.append(views[parent])
            else:
                parents.append(None)
                views.append(None)
        self.parents = tuple(parents)
        self._views = tuple(views)
        roots = []
        for index, parent in enumerate(parents):
            roots.append(index if parent is None else roots[parent[0]])
        self.roots = tuple(roots)

    def in_place(self, producer: int | None, allocation: int, index: int) -> bool:
        """Whether step ``producer``'s output is view ``index`` of ``allocation``'s array."""
        return producer is not None and self._views[producer] == (allocation, index)

    def arrays(self, roots: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        """Every step's output array, given the roots' (``roots[i]`` for steps that are roots)."""
        arrays: list[Any] = []
        for index, parent in enumerate(self.parents):
            if parent is None:
                arrays.append(roots[index])
            else:
                source, region = parent
                arrays.append(arrays[source] if region is None else arrays[source][region])
        return arrays


def plan_buffers(
    steps: Sequence[Step], shapes: list, exits: set[int], roots: Sequence[int] | None = None
) -> tuple[list[int | None], list[int]]:
    """Per step, the buffer its output is written to (``None`` for an exit, for a view of another
    step's array, and for an array with an exit among its views), and each buffer's bytes: the
    arrays used only inside the segment share buffers, best fit, a buffer being free once the last
    reader of its array (or of any view of it) has run, never while the step writing the new
    value reads it.

    :param roots: per step, the step whose array its output is or views (default: itself).
    """
    count = len(steps)
    roots = list(range(count)) if roots is None else list(roots)
    made = {step.outputs[0]: index for index, step in enumerate(steps)}
    fresh = {roots[index] for index, step in enumerate(steps) if step.outputs[0] in exits}
    last = list(range(count))  # each array's last reader (itself where it has none)
    for index, step in enumerate(steps):
        for slot in step.inputs:
            producer = made.get(slot)
            if producer is not None and producer < index:
                root = roots[producer]
                last[root] = max(last[root], index)
    sizes: list[int] = []
    owner: list[int | None] = [None] * count
    free: list[int] = []
    releasing: dict[int, list[int]] = {}
    for index in range(count):
        if roots[index] == index and index not in fresh:
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


def aligned(size: int) -> np.ndarray:
    """``size`` bytes, :data:`ALIGN`-byte aligned."""
    raw = np.empty(size + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start : start + size]
