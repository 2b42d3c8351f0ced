"""Plain float32 matrix products on the convolution's compiled tiles (``kernels._f32_conv``).

Why: the Winograd, grouped, transposed and recurrent layers end in plain products; run on the
same tiles as the direct convolutions, a CNN's whole run keeps to numba's one thread team
(``kernels._team``) instead of waking OpenBLAS's threads beside it (its polling worker stalled
both).  Where the tiles are not available, :func:`matmul` is numpy's."""

from __future__ import annotations

import functools

import numpy as np

from ._f32_conv import COLUMNS, MIN_TILES_PER_PART, available, in_weight_order, loops, thread_parts
from ._team import run_parts

__all__ = ["matmul", "matrix_product"]

_NO_BIAS = np.zeros(0, dtype=np.float32)
_NO_RESIDUAL = np.zeros((0, 0), dtype=np.float32)
_NO_CLAMP = (np.float32(-np.inf), np.float32(np.inf))
_NO_KEEP = np.zeros(0, dtype=np.uint16)
_NO_AT = np.zeros(0, dtype=np.int64)
_NO_SILU = np.float32(np.nan)


@functools.lru_cache(maxsize=64)
def _row_offsets(rows: int, length: int) -> np.ndarray:
    offsets = np.arange(rows, dtype=np.int64) * length
    offsets.flags.writeable = False
    return offsets


def matrix_product(w: np.ndarray, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``w @ x`` for float32 C-contiguous ``w`` ``(R, C)`` and ``x`` ``(C, P)`` on the same tiles
    (a pointwise convolution's product), as a fresh ``(R, P)`` array or into ``out`` (float32,
    C-contiguous, ``(R, P)``): ConvTranspose's ``Wᵀ @ x``, so that a CNN's products all run on
    one thread team (``kernels._team``)."""
    compiled = loops()
    rows, depth = w.shape
    length = x.shape[1]
    y = np.empty((rows, length), dtype=np.float32) if out is None else out
    count = compiled.tile_count(rows, 1, length)
    plain_store = (_NO_BIAS, _NO_RESIDUAL, *_NO_CLAMP, _NO_KEEP, _NO_AT)
    geometry = (length, 1, 0)  # columns, groups, group stride
    # The tiles' order as a convolution's (``in_weight_order``): ViT-B's patch embedding (768 ×
    # 768 weights, 196 columns) split by column tiles left one thread the short fourth tile,
    # 1111 µs on one thread and 719 on two.
    column_tiles = -(-length // COLUMNS)
    chunk = column_tiles if in_weight_order(rows * depth, depth * length, column_tiles) else 1
    # then: the chunk, no SiLU, not masked, no tail
    run_parts(
        compiled.tiles,
        compiled.tiles_parallel,
        count,
        thread_parts(count, MIN_TILES_PER_PART),
        *(w, x.reshape(-1), _row_offsets(depth, length), y, *geometry, *plain_store, chunk, _NO_SILU, False, 0),
    )
    return y


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b)`` for float32 operands, on the tiles when :func:`available` (the products
    of the Winograd, grouped and transposed convolutions, so that a CNN's run keeps to one thread
    team: OpenBLAS's polling worker beside numba's team stalled both), else numpy's.  ``a`` is
    ``(..., R, C)`` and ``b`` ``(..., C, P)``; leading dimensions broadcast."""
    if not available() or a.dtype != np.float32 or b.dtype != np.float32 or a.ndim < 2 or b.ndim < 2:
        return np.matmul(a, b)
    lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, lead + a.shape[-2:]).reshape(-1, *a.shape[-2:])
    b = np.broadcast_to(b, lead + b.shape[-2:]).reshape(-1, *b.shape[-2:])
    out = np.empty((a.shape[0], a.shape[1], b.shape[2]), dtype=np.float32)
    for i in range(a.shape[0]):
        out[i] = matrix_product(np.ascontiguousarray(a[i]), np.ascontiguousarray(b[i]))
    return out.reshape(lead + out.shape[1:])
