"""3×3 stride-1 MaxPool and AveragePool with one cell of padding all round, all the planes at
once (imported only where :func:`._jit.compiler` gives a decorator).

Why: Inception's branch pools run on 14×14 and 7×7 maps of 576 and 1024 channels, where the
row-by-row loops of ``kernels._pool_jit`` spent their time setting up each plane's few short rows
(576 channels of 14×14: 140-190 µs a call, onnxruntime 30-40).  Here the planes are copied once
into one flat run between ``W + 1`` fill cells, and each pass is one vectorised loop over a
plane's cells: a tap that would read across the plane's edge (the neighbouring row, or the
neighbouring plane) reads the fill instead, as the depthwise layers' framed form does
(``kernels._depthwise_loops``).  ``kernels.pool`` sends maps of up to 64×64 cells here.

Same values as ``kernels._pool_jit`` (and the numpy path): the rows of each window are reduced
first, top to bottom, then the three column results left to right, the padding reading the fill
(``-inf`` for the maximum, ``0`` for sums: the numpy path pads with it too); NaN wins a maximum as
in ``np.maximum``.  AveragePool's division by the window counts is made in the same pass (the
numpy path's division, value for value).  Module-level functions, so
that numba's on-disk cache finds them in the next process.
"""

from __future__ import annotations

import numba
import numpy as np

from ._jit import compiler

# error_model="numpy": the division by the window counts, unchecked for zero, vectorises (with
# numba's check the pass ran 3x slower); a zero count divides as numpy does.
jit = compiler(error_model="numpy")
if jit is None:  # pragma: no cover - the caller checks compiler() first
    raise ImportError("numba is disabled (ONNXPLUG_CPU_JIT=0) or not installed")
_parallel_jit = compiler(parallel=True, error_model="numpy")


@jit
def _combine(acc, value, maximum):  # pragma: no cover - compiled
    if maximum:
        return value if (value > acc) | (value != value) else acc  # | not or: no branch
    return acc + value


@jit
def pool_3x3(x, y, maximum, fill, counts):  # pragma: no cover - compiled
    """The 3×3 window maxima (``maximum``) or sums of every cell of ``x`` ``(P, H, W)`` into ``y``
    (the same shape), the cells outside the map reading ``fill``; each divided by ``counts``
    (one per cell of a plane: AveragePool's window counts) unless ``counts`` is empty."""
    planes, height, width = x.shape
    cells = height * width
    total = planes * cells
    framed = np.full(total + 2 * width + 2, fill, dtype=x.dtype)
    source, body = x.reshape(total), framed[width + 1 :]
    for n in range(total):
        body[n] = source[n]
    first_column = np.empty(cells, dtype=np.bool_)
    last_column = np.empty(cells, dtype=np.bool_)
    first_row = np.empty(cells, dtype=np.bool_)
    last_row = np.empty(cells, dtype=np.bool_)
    for n in range(cells):
        first_column[n] = n % width == 0
        last_column[n] = n % width == width - 1
        first_row[n] = n < width
        last_row[n] = n >= cells - width
    # Each cell's column of three rows, with one guard cell before and after the run.
    columns = np.full(total + 2, fill, dtype=x.dtype)
    for p in range(planes):
        base = p * cells
        # Cell n is framed[width + 1 + base + n]: the cell above it is up[n], below it down[n].
        up, mid, down = framed[base + 1 :], framed[base + width + 1 :], framed[base + 2 * width + 1 :]
        target = columns[base + 1 :]
        for n in range(cells):
            acc = fill if first_row[n] else up[n]
            acc = _combine(acc, mid[n], maximum)
            target[n] = _combine(acc, fill if last_row[n] else down[n], maximum)
    out = y.reshape(total)
    divide = counts.shape[0] > 0
    for p in range(planes):
        base = p * cells
        left, centre, o = columns[base:], columns[base + 1 :], out[base:]
        for n in range(cells):
            acc = fill if first_column[n] else left[n]
            acc = _combine(acc, centre[n], maximum)
            acc = _combine(acc, fill if last_column[n] else centre[n + 1], maximum)
            o[n] = acc / counts[n] if divide else acc


@_parallel_jit
def pool_3x3_parallel(x, y, maximum, fill, counts, parts):  # pragma: no cover - compiled
    """:func:`pool_3x3` with the planes split into ``parts`` on numba's threading layer."""
    planes = x.shape[0]
    for part in numba.prange(parts):
        lo, hi = planes * part // parts, planes * (part + 1) // parts
        pool_3x3(x[lo:hi], y[lo:hi], maximum, fill, counts)
