"""Softmax over the last axis of a float32 array in one compiled loop per row (numba).

Why: attention's softmax runs on every (head, query) row of scores — 12×128 rows of 128 for one
MiniLM layer — and in numpy it is five passes over the whole array (max, subtract, exp, sum,
divide) with two reductions along a short axis: 0.4-0.6 ms a layer.  Here each row is worked
on in place while it is in L1: a max, then ``exp(x - max)`` written and summed, then the
division, with :mod:`._vexp`'s vectorised ``exp`` and :mod:`._row_max_ir`'s 16-lane max (BERT-base's
1536 rows of 128 on one thread: 126 µs with a scalar max, 70 with it).  The loop is compiled with
``reassoc`` (the exp keeps its own flags), so LLVM vectorises the sum; it is added in another
order than numpy's pairwise sum, equally accurate for rows this short.

NaN anywhere in a row makes the row NaN, and a row of ``-inf`` is NaN, as in numpy.  ``None``
without numba or with ``ONNXPLUG_CPU_JIT=0``: callers use numpy.  Inside a run that started
numba's team (``kernels._team``: a transformer's products run on it, ``kernels._f32_matmul``) the
rows split over the team (ViT-B's 12×197 rows of 197 a layer: 436 µs on one thread).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._jit import compiler, numba_loaded
from ._team import team_parts

__all__ = ["compiled", "softmax_last_axis"]

#: Smaller inputs stay in numpy unless numba is already loaded (``kernels._jit.numba_loaded``:
#: a CNN's convolutions loaded it): a classifier's final softmax should not load numba (about
#: 1 s and 120 MiB on first use) for microseconds, but once it is there the loop is still 3×
#: faster on small inputs (41×97, OCR's per-step classes: numpy's five passes 14 µs, the loop 5).
MIN_VALUES = 1 << 14


@functools.cache
def compiled() -> Any | None:
    """``softmax_rows(x)``, in place on ``x`` ``(rows, cols)`` float32 C-contiguous, or ``None``."""
    if compiler() is None:
        return None
    from . import _softmax_loops

    return _softmax_loops.softmax_rows


def softmax_last_axis(x: np.ndarray, *, in_place: bool = False) -> np.ndarray | None:
    """Softmax of float32 ``x`` over its last axis (``in_place``: written over ``x``, which must
    then be C-contiguous and the caller's to overwrite); ``None`` when the loop does not apply
    (another dtype, fewer than :data:`MIN_VALUES` values while numba is not loaded, no numba):
    the caller uses numpy."""
    if x.dtype != np.float32 or x.shape[-1] == 0 or (x.size < MIN_VALUES and not numba_loaded()):
        return None
    loop = compiled()
    if loop is None:
        return None
    if in_place and not x.flags.c_contiguous:
        raise ValueError("softmax in place needs a C-contiguous array")
    out = x if in_place else np.array(x, order="C")  # the loop works in place
    rows = out.reshape(-1, out.shape[-1])
    parts = team_parts(x.size, rows.shape[0])
    if parts > 1:
        from . import _softmax_loops

        _softmax_loops.softmax_rows_parallel(rows, parts)
    else:
        loop(rows)
    return out
