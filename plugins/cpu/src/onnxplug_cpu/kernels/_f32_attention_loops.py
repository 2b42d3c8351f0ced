"""The compiled loop of :mod:`._f32_attention`: attention's two products and its softmax, one
block of query rows of one head at a time, on the AVX-512 tile (``kernels._f32_tile_ir``).

Imported only by :func:`._f32_attention.loops`, after it has checked that numba is usable and
the CPU has AVX-512F.  Module-level definitions with an explicit signature, as
``kernels._f32_matmul_loops``, so that numba's on-disk cache serves every process.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange, types

from ._f32_tile_ir import COLUMNS, ROWS, tile, tile_16, tile_32, tile_48
from ._softmax_loops import softmax_rows

__all__ = ["COLUMNS", "ROWS", "attend_parallel"]

_INT, _F32 = types.int64, types.float32


def _array(dtype, ndim: int, *, read_only: bool = True):
    return types.Array(dtype, ndim, "C", readonly=read_only)


@numba.njit(cache=True, nogil=True)
def _product(left, depth, right, offsets, into, ldy, rows, width):  # pragma: no cover - compiled
    """``into[r·ldy + c] = sum_k left[r·depth + k] · right[offsets[k] + c]`` for ``r < rows`` and
    ``c < width`` (float32 addresses as int64), tile by tile of ``ROWS`` rows and ``COLUMNS``
    columns: each sum ``k`` in order, one rounding a multiply-add, as ``kernels._f32_matmul``'s
    products add them."""
    low, high, no_silu = np.float32(-np.inf), np.float32(np.inf), np.float32(np.nan)
    for m0 in range(0, rows, ROWS):
        count = min(ROWS, rows - m0)
        a, y = left + 4 * m0 * depth, into + 4 * m0 * ldy
        for p0 in range(0, width, COLUMNS):
            valid = min(COLUMNS, width - p0)
            arguments = (a, right, y, offsets, depth, p0, valid, count, ldy, 0, 0, 0, 0, 0)
            if valid > 48:
                tile(*arguments, low, high, no_silu)
            elif valid > 32:
                tile_48(*arguments, low, high, no_silu)
            elif valid > 16:
                tile_32(*arguments, low, high, no_silu)
            else:
                tile_16(*arguments, low, high, no_silu)


@numba.njit(cache=True, nogil=True)
def _block(q, kt, v, term, heads, scale, out, key_offsets, value_offsets, scores, g, r0, r1):  # pragma: no cover
    """Query rows ``[r0, r1)`` of head ``g``: their scores against every key into ``scores``
    (``(rows, T)``, in cache), scaled and with ``term``'s rows added (two roundings, as the
    separate passes made them), their softmax, then their product with the head's values stored
    at the head's columns of ``out``."""
    b = g // heads
    n = g - b * heads
    head_size, keys = q.shape[2], kt.shape[2]
    rows = r1 - r0
    block = scores[:rows]
    # (addresses as int64: numba adds uint64 and int64 in float64)
    query_rows, keys_t = np.int64(q[g, r0].ctypes.data), np.int64(kt[g].ctypes.data)
    scores_at, key_steps = np.int64(block.ctypes.data), np.int64(key_offsets.ctypes.data)
    _product(query_rows, head_size, keys_t, key_steps, scores_at, keys, rows, keys)
    if term.shape[0] > 0:
        added = term[b, n if term.shape[1] > 1 else 0]
        for r in range(rows):
            row, extra = block[r], added[r0 + r]
            for j in range(keys):
                row[j] = np.float32(row[j] * scale) + extra[j]
    else:
        for r in range(rows):
            row = block[r]
            for j in range(keys):
                row[j] = row[j] * scale
    softmax_rows(block)
    width = out.shape[2]
    target = np.int64(out[b, r0].ctypes.data) + 4 * n * head_size
    values, value_steps = np.int64(v[g].ctypes.data), np.int64(value_offsets.ctypes.data)
    _product(scores_at, keys, values, value_steps, target, width, rows, head_size)


_ATTEND = (_array(_F32, 3), _array(_F32, 3), _array(_F32, 3), _array(_F32, 4), _INT, _F32)
_ATTEND += (_array(_F32, 3, read_only=False), _array(_INT, 1), _array(_INT, 1), _array(_F32, 3, read_only=False))
_ATTEND += (_INT, _INT)


@numba.njit(types.void(*_ATTEND), cache=True, nogil=True, parallel=True)
def attend_parallel(
    q, kt, v, term, heads, scale, out, key_offsets, value_offsets, scratch, block_rows, parts
):  # pragma: no cover - compiled
    """``out[b, s, n·H : (n+1)·H] = softmax(scale · q[g, s] · kt[g] + term[b, n, s]) · v[g]``
    for ``g = b·heads + n``: ``q`` ``(G, S, H)``, ``kt`` ``(G, H, T)``, ``v`` ``(G, T, H)``, ``term``
    ``(B, 1 or heads, S, T)`` or empty for none, ``out`` ``(B, S, heads·H)``;
    ``key_offsets`` ``k · T`` and ``value_offsets`` ``k · H``.  The work is blocks of
    ``block_rows`` query rows, head after head, in ``parts`` ranges on numba's threading layer,
    each part's scores in its own ``scratch[part]`` (``(block_rows, T)``)."""
    groups, length = q.shape[0], q.shape[1]
    blocks = (length + block_rows - 1) // block_rows
    count = groups * blocks
    for part in prange(parts):
        for item in range(count * part // parts, count * (part + 1) // parts):
            g = item // blocks
            r0 = (item - g * blocks) * block_rows
            r1 = min(length, r0 + block_rows)
            _block(q, kt, v, term, heads, scale, out, key_offsets, value_offsets, scratch[part], g, r0, r1)
