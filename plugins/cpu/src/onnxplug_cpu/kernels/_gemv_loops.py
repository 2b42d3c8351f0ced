"""The compiled loop of :mod:`._gemv` (imported only when :func:`._jit.compiler` gives a decorator:
this module needs numba)."""

from __future__ import annotations

import numba
import numpy as np

from ._jit import compiler

# Reassociation lets LLVM sum each row in vector lanes; each row is still one thread's sum in
# one fixed order, so the bits do not depend on how the rows are split.
_row = compiler(fastmath={"reassoc", "contract"})
_split = compiler(parallel=True)
_plain = compiler()

#: Rows summed together: each ``x[k]`` loaded once for four rows, four streams of weights in
#: flight (a 1000 × 1280 classifier from memory: 60 → 52 µs at two threads).
BLOCK = 4


@_row
def _dot(row, x):  # pragma: no cover - compiled
    s = np.float32(0.0)
    for k in range(x.shape[0]):
        s += row[k] * x[k]
    return s


@_row
def _rows(w, x, y, lo, hi):  # pragma: no cover - compiled
    """Rows ``[lo, hi)``: in blocks of :data:`BLOCK` from ``lo`` (a multiple of it), the rows past
    the last whole block one at a time; so a row is summed by the same loop whatever the split."""
    i = lo
    while i + BLOCK <= hi:
        r0, r1, r2, r3 = w[i], w[i + 1], w[i + 2], w[i + 3]
        s0 = s1 = s2 = s3 = np.float32(0.0)
        for k in range(x.shape[0]):
            v = x[k]
            s0 += r0[k] * v
            s1 += r1[k] * v
            s2 += r2[k] * v
            s3 += r3[k] * v
        y[i], y[i + 1], y[i + 2], y[i + 3] = s0, s1, s2, s3
        i += BLOCK
    for j in range(i, hi):
        y[j] = _dot(w[j], x)


@_plain
def _part(rows, part, parts):  # pragma: no cover - compiled
    """Rows ``[lo, hi)`` of ``part`` of ``parts``: whole blocks of :data:`BLOCK`, the last part to
    the end."""
    blocks = rows // BLOCK
    lo = blocks * part // parts * BLOCK
    hi = rows if part == parts - 1 else blocks * (part + 1) // parts * BLOCK
    return lo, hi


@_split
def rows_dot(w, x, y, parts):  # pragma: no cover - compiled
    for part in numba.prange(parts):
        lo, hi = _part(w.shape[0], part, parts)
        _rows(w, x, y, lo, hi)


@_split
def rows_dot_plus(w, x, c, y, parts):  # pragma: no cover - compiled
    """:func:`rows_dot`, then ``y[i] += c[i]`` in each part: a classifier's Gemm with its ``C`` in
    the one call (the add compiled without reassociation: numpy's float32 add, bit for bit)."""
    for part in numba.prange(parts):
        lo, hi = _part(w.shape[0], part, parts)
        _rows(w, x, y, lo, hi)
        for i in range(lo, hi):
            y[i] = y[i] + c[i]


@_split
def rows_dot_over(w, x, divisor, y, parts):  # pragma: no cover - compiled
    """:func:`rows_dot`, then ``y[i] /= divisor`` in each part (a global average: ``x`` ones, the
    division numpy's float32 one, bit for bit)."""
    for part in numba.prange(parts):
        lo, hi = _part(w.shape[0], part, parts)
        _rows(w, x, y, lo, hi)
        for i in range(lo, hi):
            y[i] = y[i] / divisor
