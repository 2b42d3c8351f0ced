"""The compiled loop of :mod:`._softmax_jit` (needs numba; module globals only, as in
:mod:`._vexp`)."""

from __future__ import annotations

import numba
import numpy as np

from ._jit import compiler
from ._row_max_ir import run_max
from ._vexp import exp_value

# The sum may be reordered so that it vectorises; nothing else is fast-math.
_jit = compiler(fastmath={"contract", "reassoc"})
_split = compiler(fastmath={"contract", "reassoc"}, parallel=True)
_ZERO = np.float32(0)


@_jit
def row_max(row):  # pragma: no cover - compiled (inlined)
    """The row's max, NaN passed over (whose exp still makes the row's sum, so the row, NaN):
    :func:`._row_max_ir.run_max` over the row's memory (a C-contiguous row of a C-contiguous
    array), 16 lanes at a time."""
    return run_max(row.ctypes.data, row.shape[0])


@_jit
def softmax_rows(x):  # pragma: no cover - compiled
    """Every row ``x[i]`` replaced by ``exp(x[i] - max x[i]) / sum(...)``, in place: one array
    read and written through one view, which LLVM vectorises (with a separate output it cannot
    prove distinct, its overlap check sends an in-place call to the scalar loop)."""
    for i in range(x.shape[0]):
        row = x[i]
        top = row_max(row)
        total = _ZERO
        for j in range(row.shape[0]):
            e = exp_value(row[j] - top)
            row[j] = e
            total += e
        for j in range(row.shape[0]):
            row[j] = np.divide(row[j], total)  # np.divide: no ZeroDivisionError branch


@_split
def softmax_rows_parallel(x, parts):  # pragma: no cover - compiled
    """:func:`softmax_rows` with the rows in ``parts`` blocks on numba's threading layer (the
    same values: each row is computed as there)."""
    rows = x.shape[0]
    for part in numba.prange(parts):
        softmax_rows(x[rows * part // parts : rows * (part + 1) // parts])
