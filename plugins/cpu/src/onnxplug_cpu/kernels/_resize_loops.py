"""The compiled loops of :mod:`._resize_jit` (imported only when :func:`._jit.compiler` gives a
decorator: this module needs numba).  Module-level functions, as in :mod:`._depthwise_loops`, so
that the parallel forms calling the serial ones stay in numba's on-disk cache."""

from __future__ import annotations

import numba
import numpy as np

from ._jit import compiler

jit = compiler()
if jit is None:  # pragma: no cover - the caller checks compiler() first
    raise ImportError("numba is disabled (ONNXPLUG_CPU_JIT=0) or not installed")
_parallel_jit = compiler(parallel=True)


@jit
def nearest(x, iy, ix, y):  # pragma: no cover - compiled
    for b in range(y.shape[0]):
        for oy in range(y.shape[1]):
            out = y[b, oy]
            if oy > 0 and iy[oy] == iy[oy - 1]:
                previous = y[b, oy - 1]
                for ox in range(out.shape[0]):
                    out[ox] = previous[ox]
            else:
                row = x[b, iy[oy]]
                for ox in range(out.shape[0]):
                    out[ox] = row[ix[ox]]


@jit
def double_both_axes(x, doubled, y):  # pragma: no cover - compiled
    """``y`` ``(R, 2, 2W)``: each row of ``x`` ``(R, W)`` with its values doubled, twice.  The
    columns are doubled for all the rows in one flat run into ``doubled`` ``(R·2W,)`` (a row of
    10-40 values alone would leave most of the loop to its scalar remainder), then each doubled
    row is stored twice."""
    flat = x.reshape(-1)
    for i in range(flat.shape[0]):
        value = flat[i]
        doubled[2 * i] = value
        doubled[2 * i + 1] = value
    width = y.shape[2]
    for r in range(y.shape[0]):
        row, first, second = doubled[r * width : (r + 1) * width], y[r, 0], y[r, 1]
        for j in range(width):
            value = row[j]
            first[j] = value
            second[j] = value


@jit
def linear(x, iy, wy, ix, wx, y):  # pragma: no cover - compiled
    blend = np.empty(x.shape[2], np.float32)
    for b in range(y.shape[0]):
        for oy in range(y.shape[1]):
            r0, r1 = x[b, iy[oy, 0]], x[b, iy[oy, 1]]
            w0, w1 = wy[oy, 0], wy[oy, 1]
            for j in range(blend.shape[0]):
                blend[j] = r0[j] * w0 + r1[j] * w1
            out = y[b, oy]
            for ox in range(out.shape[0]):
                out[ox] = blend[ix[ox, 0]] * wx[ox, 0] + blend[ix[ox, 1]] * wx[ox, 1]


@jit
def linear_doubled_columns(x, iy, wy, ix, wx, y):  # pragma: no cover - compiled
    """:func:`linear` for a doubled width whose interior columns repeat two taps (``_resize_2d._doubles_columns``:
    output ``2j + 1`` blends ``t[j]`` and ``t[j + 1]`` with column 1's weights, ``2j + 2``
    the same two with column 2's): one loop over ``j`` storing both, where the gather through
    the tables kept each output scalar (32 planes of 32×32 → 64×64 on one thread: 89 → 28 µs).
    The edge columns read the tables.  The same products and sums as :func:`linear`."""
    width = x.shape[2]
    blend = np.empty(width, np.float32)
    odd0, odd1 = wx[1, 0], wx[1, 1]
    even0, even1 = wx[2, 0], wx[2, 1]
    last = 2 * width - 1
    for b in range(y.shape[0]):
        for oy in range(y.shape[1]):
            r0, r1 = x[b, iy[oy, 0]], x[b, iy[oy, 1]]
            w0, w1 = wy[oy, 0], wy[oy, 1]
            for j in range(width):
                blend[j] = r0[j] * w0 + r1[j] * w1
            out = y[b, oy]
            out[0] = blend[ix[0, 0]] * wx[0, 0] + blend[ix[0, 1]] * wx[0, 1]
            out[last] = blend[ix[last, 0]] * wx[last, 0] + blend[ix[last, 1]] * wx[last, 1]
            ahead = blend[1:]
            for j in range(width - 1):
                out[2 * j + 1] = blend[j] * odd0 + ahead[j] * odd1
                out[2 * j + 2] = blend[j] * even0 + ahead[j] * even1


@_parallel_jit
def nearest_parallel(x, iy, ix, y, parts):  # pragma: no cover - compiled
    planes = y.shape[0]
    for part in numba.prange(parts):
        lo, hi = planes * part // parts, planes * (part + 1) // parts
        nearest(x[lo:hi], iy, ix, y[lo:hi])


@_parallel_jit
def linear_parallel(x, iy, wy, ix, wx, y, parts):  # pragma: no cover - compiled
    planes = y.shape[0]
    for part in numba.prange(parts):
        lo, hi = planes * part // parts, planes * (part + 1) // parts
        linear(x[lo:hi], iy, wy, ix, wx, y[lo:hi])


@_parallel_jit
def double_both_axes_parallel(x, doubled, y, parts):  # pragma: no cover - compiled
    rows, width = y.shape[0], y.shape[2]
    for part in numba.prange(parts):
        lo, hi = rows * part // parts, rows * (part + 1) // parts
        double_both_axes(x[lo:hi], doubled[lo * width : hi * width], y[lo:hi])


@_parallel_jit
def linear_doubled_columns_parallel(x, iy, wy, ix, wx, y, parts):  # pragma: no cover - compiled
    planes = y.shape[0]
    for part in numba.prange(parts):
        lo, hi = planes * part // parts, planes * (part + 1) // parts
        linear_doubled_columns(x[lo:hi], iy, wy, ix, wx, y[lo:hi])
