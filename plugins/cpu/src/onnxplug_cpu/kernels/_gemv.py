"""One row times a matrix stored transposed (``W·x``), split over numba's team.

Why: a CNN's classifier (Gemm with ``transB``: ResNet-50's 2048×1000, ShuffleNet's 544×1000
weights) runs once per image after the convolutions, whose run has pinned BLAS to one thread
(``kernels._team``); on one thread, with its weights fallen out of the shared cache, OpenBLAS's
``sgemv`` streamed them at 2.2 MB in 250-300 µs (onnxruntime: 40-110).  Here the rows are split
over the team's threads; each row's dot product is one thread's, summed in 16-lane partial sums
(``fastmath`` reassociation), so the result does not depend on the split.

Used only inside a run that started the team (``kernels._team.team_joined``), from
``kernels.math``; ``None`` without numba.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._jit import compiler

__all__ = ["compiled", "row_means", "row_times_matrix", "row_times_matrix_plus"]


@functools.cache
def _loops() -> Any | None:
    """``kernels._gemv_loops`` (it imports numba), or ``None`` without numba."""
    if compiler() is None:
        return None
    from . import _gemv_loops

    return _gemv_loops


def compiled() -> Any | None:
    """``rows_dot(w, x, y, parts)``: ``y[i] = w[i] · x`` for float32 ``w`` ``(N, K)`` C-contiguous
    and ``x`` ``(K,)``, rows split into ``parts`` on numba's threading layer; or ``None``."""
    loops = _loops()
    return None if loops is None else loops.rows_dot


def row_times_matrix(x: np.ndarray, w: np.ndarray, parts: int) -> np.ndarray:
    """``x @ w.T`` for float32 ``x`` ``(K,)`` and C-contiguous ``w`` ``(N, K)``: an ``(N,)`` array."""
    y = np.empty(w.shape[0], dtype=np.float32)
    compiled()(w, np.ascontiguousarray(x), y, parts)
    return y


def row_times_matrix_plus(x: np.ndarray, w: np.ndarray, c: np.ndarray, parts: int) -> np.ndarray | None:
    """``(x @ w.T + c)[None, :]`` for float32 ``x`` ``(K,)``, C-contiguous ``w`` ``(N, K)`` and
    ``c`` ``(N,)``, in one compiled call (the sums as :func:`row_times_matrix`'s, then ``C``
    added as numpy adds it), or ``None`` without numba.  Why: after a CNN's convolutions every
    numpy step costs several µs while its code comes back into the caches, and the classifier's
    ``C`` took three (broadcast, add, cast: MobileNetV2's Gemm node 88 µs in its run, 54 of them
    the product)."""
    loops = _loops()
    if loops is None:
        return None
    y = np.empty((1, w.shape[0]), dtype=np.float32)
    loops.rows_dot_plus(w, np.ascontiguousarray(x), c, y[0], parts)
    return y


def row_means(w: np.ndarray, ones: np.ndarray, parts: int) -> np.ndarray | None:
    """Each row's mean of C-contiguous float32 ``w`` ``(N, K)``, ``ones`` ``K`` float32 ones: the
    sums as :func:`row_times_matrix`'s, divided by ``K`` in the same call (a global average
    pool's, ``kernels.reduce.trailing_mean``: its division and reshape were 19 µs of ResNet-50's
    59 right after the convolutions); ``None`` without numba."""
    loops = _loops()
    if loops is None:
        return None
    y = np.empty(w.shape[0], dtype=np.float32)
    loops.rows_dot_over(w, ones, np.float32(w.shape[1]), y, parts)
    return y
