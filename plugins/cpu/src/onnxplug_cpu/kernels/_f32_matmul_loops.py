"""The compiled loops of :mod:`._f32_matmul`: a float32 matrix times a constant matrix read where
it is stored, on the AVX-512 tile of the convolutions (``kernels._f32_tile_ir``).

Imported only by :func:`._f32_matmul.loops`, after :func:`._f32_matmul.available` has checked
that numba is usable and the CPU has AVX-512F.  Module-level definitions with explicit signatures,
as ``kernels._f32_conv_tile``, so that numba's on-disk cache serves every process.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange, types

from ._f32_tile_ir import COLUMNS, ROWS, prefetching_tile, tile, tile_16, tile_32, tile_48

__all__ = [
    "BLOCK",
    "COLUMNS",
    "PREFETCH_ROWS",
    "PREFETCHING_ROW_TILES",
    "ROWS",
    "batched_parallel",
    "gather_groups",
    "panel_product",
    "panel_product_parallel",
    "product",
    "product_parallel",
]

#: Rows of the right operand (``k``) per block: each block's tiles sum their part of ``k`` and
#: add it to what the blocks before stored.
BLOCK = 768
#: How many rows of the right operand ahead of the ones it reads a tile prefetches.
PREFETCH_ROWS = 2
#: In panels, how many row tiles of each column tile prefetch the panel read next, row for row
#: (:func:`_tiles`).  The first row tile of a panel otherwise waited on memory for every row:
#: 128 rows times a transformer's weights (768 × 3072, 768 × 2304, 768 × 768, 3072 × 768) at two
#: threads, out of the caches (a rotation of 60 MB of them), 177-195 G multiply-adds a second
#: without, 198-237 with two row tiles prefetching (one row tile: 200-215; every one: 173-205,
#: the prefetches of the later ones costing more than they found); from the caches, 226-233
#: either way.
PREFETCHING_ROW_TILES = 2


def _array(dtype, ndim: int, *, read_only: bool = True):
    return types.Array(dtype, ndim, "C", readonly=read_only)


_INT, _F32 = types.int64, types.float32
# a, b, offsets, y
_ARGUMENTS = (_array(_F32, 2), _array(_F32, 2), _array(_INT, 1), _array(_F32, 2, read_only=False))
# a, panels, offsets, y
_PANEL_ARGUMENTS = (_array(_F32, 2), _array(_F32, 3), _array(_INT, 1), _array(_F32, 2, read_only=False))


@numba.njit(cache=True, nogil=True)
def _tiles(a, right, panel_values, k0, offsets, y, t0, t1, accumulate, ahead, more):  # pragma: no cover - compiled
    """Tiles ``[t0, t1)`` of ``y (+)= a @ right[rows]``: ``a`` ``(M, D)`` holds one block of the
    left operand's columns, ``offsets`` (``D`` values) where the block's rows of the right operand
    start, from address ``right``; with ``accumulate`` the tiles add what ``y`` holds.  Tile
    ``t`` is column tile ``t // row_tiles``, then ``ROWS`` rows of ``a``: consecutive tiles read
    the same 64 columns of the right operand, which stay in cache while the rows of ``a`` pass
    over them.  ``panel_values`` 0: the right operand as stored (``offsets`` ``k · N``), whole
    tiles prefetching ``ahead`` values on; else panels of that many values (``k · 64``, the
    block's rows from ``k0`` on), read through a base pointer placed so that the tile's own
    ``p0`` lands on its panel's first column.

    In panels, the first :data:`PREFETCHING_ROW_TILES` row tiles of a column tile also prefetch,
    row for row, the panel this range reads next: the next column tile's, or, after the range's
    last one and where ``more`` blocks of depth follow, the range's first column tile's rows of
    the next block.  Without it each panel's first row tile waited on memory for its 768 rows
    (see :data:`PREFETCHING_ROW_TILES`).  Where the next block is shorter, the last rows'
    prefetches point past its panel (at most past the array): a prefetch never faults."""
    m, depth = a.shape
    n = y.shape[1]
    row_tiles = (m + ROWS - 1) // ROWS
    first_column, last_column = t0 // row_tiles, (t1 - 1) // row_tiles
    no_clamp_low, no_clamp_high, no_silu = np.float32(-np.inf), np.float32(np.inf), np.float32(np.nan)
    for t in range(t0, t1):
        j = t // row_tiles
        m0 = (t - j * row_tiles) * ROWS
        p0 = j * COLUMNS
        valid = min(COLUMNS, n - p0)
        # (j · panel_values + k0 · 64 - p0 >= 0: panel_values >= 64)
        shift = 4 * (j * panel_values + k0 * COLUMNS - p0) if panel_values else 0
        summed = y[m0].ctypes.data if accumulate else np.uintp(0)  # the sum so far, as a residual
        rows = min(ROWS, m - m0)
        arguments = (a[m0].ctypes.data, right + np.uintp(shift), y[m0].ctypes.data, offsets.ctypes.data)
        arguments = arguments + (depth, p0, valid, rows, n, 0, summed)  # (0: no bias)
        # the values from this tile's reads to the same rows of the panel read next (0: none)
        following = 0
        if panel_values and m0 < PREFETCHING_ROW_TILES * ROWS:
            if j < last_column:
                following = panel_values
            elif more:
                following = (first_column - j) * panel_values + depth * COLUMNS
        if valid > 48 and not panel_values:
            # The rows are n values apart: each k reads a new page, where the hardware's
            # prefetchers do not follow; the tile fetches the lines PREFETCH_ROWS rows ahead.
            prefetching_tile(*arguments, ahead, 0, 0, no_clamp_low, no_clamp_high, no_silu)
        elif valid > 48 and following != 0:
            prefetching_tile(*arguments, following, 0, 0, no_clamp_low, no_clamp_high, no_silu)
        elif valid > 48:
            tile(*arguments, 0, 0, 0, no_clamp_low, no_clamp_high, no_silu)
        elif valid > 32:
            tile_48(*arguments, 0, 0, 0, no_clamp_low, no_clamp_high, no_silu)
        elif valid > 16:
            tile_32(*arguments, 0, 0, 0, no_clamp_low, no_clamp_high, no_silu)
        else:
            tile_16(*arguments, 0, 0, 0, no_clamp_low, no_clamp_high, no_silu)


@numba.njit(cache=True, nogil=True)
def _tile_count(a, y):  # pragma: no cover - compiled (inlined)
    """The tiles of ``y = a @ b``: column tiles times row tiles."""
    return ((y.shape[1] + COLUMNS - 1) // COLUMNS) * ((a.shape[0] + ROWS - 1) // ROWS)


@numba.njit(cache=True, nogil=True)
def _block_rows(offsets, panel_values, k0, k1):  # pragma: no cover - compiled (inlined)
    """The offsets of the block of rows ``[k0, k1)``: its own ``k · N`` as stored, or, in panels,
    the first ``k1 - k0`` (each block read from its own first row on, :func:`_tiles`)."""
    return offsets[k0:k1] if panel_values == 0 else offsets[: k1 - k0]


@numba.njit(cache=True, nogil=True, parallel=True)
def _blocks_parallel(a, right, panel_values, offsets, y, onto, parts, ahead):  # pragma: no cover - compiled
    """``y (+)= a @ right`` block by block of :data:`BLOCK` rows, each block's :func:`_tiles` in
    ``parts`` ranges on numba's threading layer."""
    depth = a.shape[1]
    count = _tile_count(a, y)
    for k0 in range(0, depth, BLOCK):
        k1 = min(depth, k0 + BLOCK)
        block = np.ascontiguousarray(a[:, k0:k1])
        rows = _block_rows(offsets, panel_values, k0, k1)
        for part in prange(parts):
            lo, hi = count * part // parts, count * (part + 1) // parts
            _tiles(block, right, panel_values, k0, rows, y, lo, hi, onto or k0 > 0, ahead, k1 < depth)


@numba.njit(cache=True, nogil=True)
def _blocks(a, right, panel_values, offsets, y, t0, t1, onto, ahead):  # pragma: no cover - compiled
    """Tiles ``[t0, t1)`` of ``y (+)= a @ right`` over every block of depth, in order, on the
    calling thread."""
    depth = a.shape[1]
    for k0 in range(0, depth, BLOCK):
        k1 = min(depth, k0 + BLOCK)
        block = a if k1 - k0 == depth else np.ascontiguousarray(a[:, k0:k1])
        rows = _block_rows(offsets, panel_values, k0, k1)
        _tiles(block, right, panel_values, k0, rows, y, t0, t1, onto or k0 > 0, ahead, k1 < depth)


@numba.njit(types.void(*_PANEL_ARGUMENTS, types.boolean, _INT), cache=True, nogil=True)
def panel_product_parallel(a, panels, offsets, y, onto, parts):  # pragma: no cover - compiled
    """:func:`product_parallel` of the right operand copied into panels (``panels`` ``(N / 64, K,
    64)``, each 64 columns' rows one after another; ``offsets``: ``k · 64`` for the first
    :data:`BLOCK` rows): the same blocks, tiles and sums, so the same bits."""
    _blocks_parallel(a, panels.ctypes.data, panels.shape[1] * COLUMNS, offsets, y, onto, parts, 0)


@numba.njit(types.void(*_PANEL_ARGUMENTS, types.boolean), cache=True, nogil=True)
def panel_product(a, panels, offsets, y, onto):  # pragma: no cover - compiled
    """:func:`panel_product_parallel` on the calling thread alone."""
    _blocks(a, panels.ctypes.data, panels.shape[1] * COLUMNS, offsets, y, 0, _tile_count(a, y), onto, 0)


@numba.njit(types.void(*_ARGUMENTS, types.boolean, _INT), cache=True, nogil=True)
def product_parallel(a, b, offsets, y, onto, parts):  # pragma: no cover - compiled
    """``y = a @ b`` for ``a`` ``(M, K)``, ``b`` ``(K, N)`` (``offsets`` the ``K`` values ``k ·
    N``), or with ``onto`` ``y += a @ b`` (a Gemm's ``C`` put in ``y`` first), block by block of
    :data:`BLOCK` rows of ``b``, each block's tiles in ``parts`` ranges on numba's threading
    layer."""
    _blocks_parallel(a, b.ctypes.data, 0, offsets, y, onto, parts, PREFETCH_ROWS * y.shape[1])


@numba.njit(types.void(*_ARGUMENTS, types.boolean), cache=True, nogil=True)
def product(a, b, offsets, y, onto):  # pragma: no cover - compiled
    """:func:`product_parallel` on the calling thread alone."""
    _blocks(a, b.ctypes.data, 0, offsets, y, 0, _tile_count(a, y), onto, PREFETCH_ROWS * y.shape[1])


_BATCHED = (_array(_F32, 3), _array(_F32, 3), _array(_INT, 1), _array(_F32, 3, read_only=False), _INT)


@numba.njit(types.void(*_BATCHED), cache=True, nogil=True, parallel=True)
def batched_parallel(a, b, offsets, y, parts):  # pragma: no cover - compiled
    """``y[g] = a[g] @ b[g]`` for ``a`` ``(G, M, K)``, ``b`` ``(G, K, N)`` (``offsets`` the ``K``
    values ``k · N``): every matrix's tiles in one range, split into ``parts`` on numba's
    threading layer (attention's heads: each head's product is too small to split alone)."""
    groups, m, _ = a.shape
    per = ((y.shape[2] + COLUMNS - 1) // COLUMNS) * ((m + ROWS - 1) // ROWS)
    count = groups * per
    for part in prange(parts):
        t, stop = count * part // parts, count * (part + 1) // parts
        while t < stop:
            g = t // per
            last = min(stop, (g + 1) * per)
            lo, hi = t - g * per, last - g * per
            _blocks(a[g], b[g].ctypes.data, 0, offsets, y[g], lo, hi, False, PREFETCH_ROWS * y.shape[2])
            t = last


@numba.njit(cache=True, nogil=True, parallel=True)
def gather_groups_shifted(source, shift, along_rows, target, parts):  # pragma: no cover - compiled
    """:func:`gather_groups` with a shift added on the way: ``target[g] = source[g] + shift[g]``
    broadcast down the columns (``shift`` ``(G, C)``) or, ``along_rows``, across each row
    (``shift`` ``(G, R)``): attention's per-head Q, K and V biases, added in the copy the
    products make anyway instead of in three numpy passes before it."""
    groups = source.shape[0]
    for part in prange(parts):
        for g in range(groups * part // parts, groups * (part + 1) // parts):
            rows, into, by = source[g], target[g], shift[g]
            height, width = rows.shape
            if rows.strides[1] == 4 and not along_rows:  # Q's heads, V's: each row one run
                for r in range(height):
                    for c in range(width):
                        into[r, c] = rows[r, c] + by[c]
                continue
            for c0 in range(0, width, 16):  # (apart values: see gather_groups)
                c1 = min(width, c0 + 16)
                for r in range(height):
                    if along_rows:
                        step = by[r]
                        for c in range(c0, c1):
                            into[r, c] = rows[r, c] + step
                    else:
                        for c in range(c0, c1):
                            into[r, c] = rows[r, c] + by[c]


@numba.njit(cache=True, nogil=True, parallel=True)
def gather_groups(source, target, parts):  # pragma: no cover - compiled
    """``target[g] = source[g]`` for a strided float32 ``(G, R, C)`` ``source`` and a C-contiguous
    ``target``, the groups split into ``parts`` on numba's threading layer: the per-head operands
    of :func:`batched_parallel` laid out as it reads them.  Rows whose values are apart
    (attention's ``Kᵀ``: each value 3 KiB from the next, BERT-base's 768 features) are copied
    16 columns at a time down the rows, so the lines read are used again before they leave L1:
    12 heads of 64 × 128 at two threads 28-34 µs, row by row 40, numpy's copy 81 on one thread."""
    groups = source.shape[0]
    for part in prange(parts):
        for g in range(groups * part // parts, groups * (part + 1) // parts):
            rows, into = source[g], target[g]
            height, width = rows.shape
            if rows.strides[1] == 4:  # each row one run: row by row (Q's heads, V's)
                for r in range(height):
                    for c in range(width):
                        into[r, c] = rows[r, c]
                continue
            for c0 in range(0, width, 16):
                c1 = min(width, c0 + 16)
                for r in range(height):
                    for c in range(c0, c1):
                        into[r, c] = rows[r, c]
