"""Resize's compiled pass over the last two axes of a float32 map (``kernels._resize_jit``'s
loops), planned once per geometry and bound to it.

:func:`bound` gives a :class:`Resized2D` for a geometry the pass serves (nearest or linear on the
last two axes, no roi, no antialias), or ``None``: then ``kernels.resize`` takes the numpy path.
A Resize node keeps the bound call of its last input shape and constant scales
(``kernels.resize._ResizeNode``), so a later call is an allocation and one compiled call; in a
segment of the plan (``Resized2D.bind``) it is one compiled call over planned buffers.

Why bound: the plan lookup (a hash of the shapes, scales and options), the loop lookups and the
scratch row cost 8-16 µs a call inside a model's run, where the Python around a node runs with
its caches cold after the convolutions (YOLO's 2× upsamplings 30-38 µs a node, 12-14 of them
the compiled pass).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from onnxplug.kernels import Binding, Scratch

from ._conv_bindings import team_settings
from ._resize_jit import compiled as _compiled_2d
from ._resize_jit import compiled_doubled_columns as _compiled_doubled_columns
from ._resize_jit import compiled_doubling as _compiled_doubling
from ._resize_jit import compiled_parallel as _compiled_2d_parallel
from ._resize_taps import cached_taps, doubled
from ._scratch import scratch
from ._split_rows import thread_budget
from ._team import run_settings, team_joined

__all__ = ["COMPILED_MIN_ELEMENTS", "PART_ELEMENTS", "Resized2D", "bound", "plan_2d"]

#: Smaller outputs keep the numpy path: the first compiled call loads numba (once per process).
COMPILED_MIN_ELEMENTS = 4096
#: Output elements per thread from which a run on numba's team splits a resize over it.
PART_ELEMENTS = 1 << 15


@functools.lru_cache(maxsize=256)
def plan_2d(shape: tuple, out_shape: tuple, scales: tuple, options: tuple):
    """What the compiled pass runs for this geometry, worked out once: ``None`` where it does
    not apply, else ``(form, tables)``: ``"double"`` (an exact 2× nearest upsampling of both
    axes), ``"nearest"`` (each axis' source index), ``"linear"`` (each axis' two taps and
    weights) or ``"linear_doubled"`` (those, the columns a bilinear 2× upsampling's:
    :func:`_doubles_columns`)."""
    opts = dict(options)
    if len(shape) < 3 or opts["ctm"] == "tf_crop_and_resize" or opts["antialias"]:
        return None
    if opts["mode"] not in ("nearest", "linear") or math.prod(out_shape) < COMPILED_MIN_ELEMENTS:
        return None
    if tuple(out_shape[:-2]) != shape[:-2] or any(float(s) != 1.0 for s in scales[:-2]) or 0 in shape:
        return None
    tables = []
    for axis in (-2, -1):
        in_size, out_size, scale = shape[axis], out_shape[axis], float(scales[axis])
        if in_size == out_size and scale == 1.0:  # an axis the numpy path leaves alone
            if opts["mode"] == "linear":
                return None  # x·1 + x·0 is not x for infinities
            tables.append((np.arange(in_size, dtype=np.int64)[:, None], None))
        else:
            tables.append(cached_taps(in_size, out_size, scale, options))
    (iy, wy), (ix, wx) = tables
    if opts["mode"] == "linear":
        form = "linear_doubled" if _doubles_columns(shape[-1], out_shape[-1], ix, wx) else "linear"
        return form, (iy, wy, ix, wx)
    if all(doubled(shape[axis], out_shape[axis], float(scales[axis]), options) for axis in (-2, -1)):
        return "double", ()
    return "nearest", (np.ascontiguousarray(iy[:, 0]), np.ascontiguousarray(ix[:, 0]))


def _doubles_columns(width: int, out_width: int, ix: np.ndarray, wx: np.ndarray) -> bool:
    """Whether a linear column table doubles a width of at least 3 with repeating interior taps:
    output ``2j + 1`` reads ``(j, j + 1)`` with output 1's weights and ``2j + 2`` the same two
    with output 2's (a bilinear 2× upsampling), for ``_resize_loops.linear_doubled_columns``."""
    if out_width != 2 * width or width < 3:
        return False
    j = np.arange(width - 1)
    pairs = np.stack([j, j + 1], axis=1)
    return (
        np.array_equal(ix[1:-1:2], pairs)
        and np.array_equal(ix[2:-1:2], pairs)
        and bool((wx[1:-1:2] == wx[1]).all())
        and bool((wx[2:-1:2] == wx[2]).all())
    )


class Resized2D:
    """The compiled pass of one geometry (input and output shapes, scales, options), its loops
    and tables chosen once; called on an input of that shape (any float32 layout)."""

    __slots__ = ("_out_shape", "_source", "_target", "_size", "_planes", "_serial", "_parallel", "_tables", "_rows")

    def __init__(self, shape: tuple, out_shape: tuple, form: str, tables: tuple, kernels: tuple) -> None:
        self._out_shape = tuple(out_shape)
        self._source = (-1, *shape[-2:])
        self._size = math.prod(out_shape)
        self._planes = math.prod(out_shape[:-2])
        self._tables = tables
        self._rows = None
        if form == "double":
            # Rows of the input, each doubled into the scratch and stored twice (R, 2, 2W).
            self._rows = (math.prod(shape[:-1]), shape[-1])
            self._target = (self._rows[0], 2, 2 * shape[-1])
            self._serial, self._parallel = _compiled_doubling()
        else:
            self._target = (-1, *out_shape[-2:])
            if form == "linear_doubled":
                self._serial, self._parallel = _compiled_doubled_columns()
            else:
                linear = form == "linear"
                self._serial, self._parallel = kernels[linear], _compiled_2d_parallel()[linear]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = np.empty(self._out_shape, np.float32)
        target = y.reshape(self._target)
        if self._rows is None:
            arguments = (np.ascontiguousarray(x).reshape(self._source), *self._tables, target)
        else:
            source = np.ascontiguousarray(x).reshape(self._rows)
            arguments = (source, scratch("resize_doubled", (self._rows[0] * self._target[2],), np.float32), target)
        # Split over numba's team only between the convolutions of a run that started it.
        parts = self._parts(thread_budget())
        if parts > 1 and team_joined():
            self._parallel(*arguments, parts)
        else:
            self._serial(*arguments)
        return y

    def _parts(self, budget: int) -> int:
        """Ranges of planes the pass splits into at a thread ``budget``."""
        return min(budget, self._size // PART_ELEMENTS, self._planes)

    def bind(self, x: np.ndarray, output: np.ndarray, work: Scratch) -> Binding:
        """This pass over ``output`` as an ``onnxplug.kernels.Binding`` (the plan's segments):
        split over the team where a call in a run that started it would be, which its guard
        starts as a convolution's does (``kernels._conv_bindings.team_settings``)."""
        settings = run_settings()
        parts = self._parts(settings.budget)
        team = parts > 1 and settings.team
        kernel = self._parallel if team else self._serial
        last = (parts,) if team else ()
        if self._rows is None:
            source_shape, middle = self._source, self._tables
        else:
            source_shape, middle = self._rows, (work((self._rows[0] * self._target[2],), np.float32),)
        target_shape = self._target
        bound_x, source, bound_output, target = x, x.reshape(source_shape), output, output.reshape(target_shape)

        def call(out: np.ndarray, x: np.ndarray, *_: object) -> None:
            kernel(
                source if x is bound_x else x.reshape(source_shape),
                *middle,
                target if out is bound_output else out.reshape(target_shape),
                *last,
            )

        return Binding(call, team_settings if team else run_settings)


def bound(shape: tuple, out_shape: tuple, scales: tuple, options: tuple) -> Resized2D | None:
    """The compiled pass bound to this geometry, or ``None`` where it does not apply (another
    mode, axis or coordinate mode with a roi, a small output, no numba).  The caller checks
    that the input is float32."""
    plan = plan_2d(shape, tuple(out_shape), scales, options)
    kernels = None if plan is None else _compiled_2d()
    if kernels is None:
        return None
    return Resized2D(shape, out_shape, *plan, kernels)
