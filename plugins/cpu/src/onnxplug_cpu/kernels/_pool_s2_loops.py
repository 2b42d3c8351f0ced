"""Stride-2 pools without padding in one compiled pass per output row: 3×3 MaxPool (SqueezeNet's)
and 2×2 MaxPool and AveragePool sums (VGG's, a UNet's, an OCR recognizer's, DenseNet's
transitions).  Needs numba; module-level functions, so that numba's on-disk cache serves every
process.

Why: the general loop of :mod:`._pool_jit` makes five passes per output row (a copy of the first
input row, a maximum with each of the other two, a split into even and odd columns, the
windows), each a short loop with its own remainder.  Here the three rows are reduced and split
into even and odd columns in one loop (interleaved loads), then the windows read the two halves
at unit stride: one thread, 64 planes of 111×111 121 → 99 µs, 128 of 55×55 87 → 61, 256 of
27×27 75 → 49.  Only where every window lies inside the map: a general form (padding, edge
rows, halves chosen per call) measured no faster, LLVM leaving its loops scalar.  An odd width's
last column is stored before the loop for the same reason: stored after it, inside the row
loop, it kept the loop scalar.

The same values as :mod:`._pool_jit`: the three rows and the three columns are taken in order,
and NaN wins as in ``np.maximum``.

The 2×2 windows: the general loop copied the first row, combined the second into it, split it
into even and odd cells and then took the windows, four short loops per output row; here each
output is its two columns' row pairs combined, then the pair, in that same order (the same bits,
NaN and sums included): one thread, 64 planes of 224×224 326 → 224 µs, 128 of 112×112 148 → 96,
512 of 14×14 52 → 19, 128 of 8×40 9.5 → 2.7.
"""

from __future__ import annotations

import numba
import numpy as np

from ._jit import compiler

jit = compiler()
_parallel = compiler(parallel=True)
if jit is None:  # pragma: no cover - the caller checks compiler() first
    raise ImportError("numba is disabled (ONNXPLUG_CPU_JIT=0) or not installed")


@jit
def _larger(acc, value):  # pragma: no cover - compiled (inlined)
    return value if (value > acc) | (value != value) else acc


@jit
def max_3x3_s2(x, y):  # pragma: no cover - compiled
    """``y[p, oy, ox]`` = the maximum of ``x[p, 2·oy : 2·oy + 3, 2·ox : 2·ox + 3]`` for ``x``
    ``(P, H, W)`` and ``y`` ``(P, (H - 3) // 2 + 1, (W - 3) // 2 + 1)`` float32."""
    width = x.shape[2]
    oh, ow = y.shape[1], y.shape[2]
    pairs = width // 2
    even = np.empty(pairs + 1, np.float32)  # input columns 2j: the row maxima
    odd = np.empty(pairs + 1, np.float32)  # input columns 2j + 1
    for p in range(y.shape[0]):
        for oy in range(oh):
            r0, r1, r2 = x[p, 2 * oy], x[p, 2 * oy + 1], x[p, 2 * oy + 2]
            if width % 2:
                even[pairs] = _larger(_larger(r0[width - 1], r1[width - 1]), r2[width - 1])
            for j in range(pairs):
                even[j] = _larger(_larger(r0[2 * j], r1[2 * j]), r2[2 * j])
                odd[j] = _larger(_larger(r0[2 * j + 1], r1[2 * j + 1]), r2[2 * j + 1])
            out, ahead = y[p, oy], even[1:]
            for ox in range(ow):
                out[ox] = _larger(_larger(even[ox], odd[ox]), ahead[ox])


@_parallel
def max_3x3_s2_parallel(x, y, parts):  # pragma: no cover - compiled
    """:func:`max_3x3_s2` over ``parts`` blocks of planes on numba's threading layer."""
    planes = x.shape[0]
    for part in numba.prange(parts):
        lo, hi = planes * part // parts, planes * (part + 1) // parts
        max_3x3_s2(x[lo:hi], y[lo:hi])


@jit
def max_2x2_s2(x, y):  # pragma: no cover - compiled
    """``y[p, oy, ox]`` = the maximum of ``x[p, 2·oy : 2·oy + 2, 2·ox : 2·ox + 2]`` for ``x``
    ``(P, H, W)`` and ``y`` ``(P, oh, ow)`` float32 with ``2·oh <= H`` and ``2·ow <= W``."""
    for p in range(y.shape[0]):
        for oy in range(y.shape[1]):
            r0, r1, out = x[p, 2 * oy], x[p, 2 * oy + 1], y[p, oy]
            for ox in range(y.shape[2]):
                out[ox] = _larger(_larger(r0[2 * ox], r1[2 * ox]), _larger(r0[2 * ox + 1], r1[2 * ox + 1]))


@jit
def sum_2x2_s2(x, y):  # pragma: no cover - compiled
    """:func:`max_2x2_s2` with each window's sum (AveragePool's, before the division)."""
    for p in range(y.shape[0]):
        for oy in range(y.shape[1]):
            r0, r1, out = x[p, 2 * oy], x[p, 2 * oy + 1], y[p, oy]
            for ox in range(y.shape[2]):
                out[ox] = (r0[2 * ox] + r1[2 * ox]) + (r0[2 * ox + 1] + r1[2 * ox + 1])


@_parallel
def max_2x2_s2_parallel(x, y, parts):  # pragma: no cover - compiled
    """:func:`max_2x2_s2` over ``parts`` blocks of planes on numba's threading layer."""
    planes = x.shape[0]
    for part in numba.prange(parts):
        lo, hi = planes * part // parts, planes * (part + 1) // parts
        max_2x2_s2(x[lo:hi], y[lo:hi])


@_parallel
def sum_2x2_s2_parallel(x, y, parts):  # pragma: no cover - compiled
    """:func:`sum_2x2_s2` over ``parts`` blocks of planes on numba's threading layer."""
    planes = x.shape[0]
    for part in numba.prange(parts):
        lo, hi = planes * part // parts, planes * (part + 1) // parts
        sum_2x2_s2(x[lo:hi], y[lo:hi])


def inside_loops(kernel: int, maximum: bool):
    """``(serial, parallel)`` loops for ``kernel × kernel`` windows at stride 2 all inside the map,
    or ``None`` where this module has none (a 3×3 AveragePool)."""
    if kernel == 2:
        return (max_2x2_s2, max_2x2_s2_parallel) if maximum else (sum_2x2_s2, sum_2x2_s2_parallel)
    if kernel == 3 and maximum:
        return max_3x3_s2, max_3x3_s2_parallel
    return None
