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


@_row
def _dot(row, x):  # pragma: no cover - compiled
    s = np.float32(0.0)
    for k in range(x.shape[0]):
        s += row[k] * x[k]
    return s


@_row
def _rows(w, x, y, lo, hi):  # pragma: no cover - compiled
    for i in range(lo, hi):
        y[i] = _dot(w[i], x)


@_split
def rows_dot(w, x, y, parts):  # pragma: no cover - compiled
    rows = w.shape[0]
    for part in numba.prange(parts):
        _rows(w, x, y, rows * part // parts, rows * (part + 1) // parts)
