"""The compiled loop of ``kernels._row_conv``: every tile of a layer for every block of 32 output
channels, split over numba's threading layer (imported only through ``kernels._row_conv.loops``:
this module needs numba and AVX-512F)."""

from __future__ import annotations

import numba
import numpy as np
from numba import prange, types

from . import _row_conv_ir as ir
from ._f32_conv_gather import array_type

_CHANNELS = 16 * ir.VECTORS

# Each loop is compiled for one signature when this module is imported (or loaded from numba's
# cache), every array it only reads typed read-only (a writable one converts at the call): left
# to compile per call, numba would make one specialisation for each mix of read-only (a model's
# initializers) and writable arguments, each several seconds of LLVM on a cold cache.
_INT, _F32 = types.int64, types.float32
_TABLES = (array_type(_INT, 2), array_type(_INT, 3), array_type(_F32, 1))  # tiles, tables, b
_STORE = (_F32, _F32, _F32, _INT)  # low, high, alpha, step
_RANGE = (array_type(_F32, 3), array_type(_F32, 2), array_type(_F32, 2, read_only=False), *_TABLES)
_RANGE += (array_type(_F32, 2), *_STORE, _INT, _INT, types.boolean)
_CONVOLVE = (array_type(_F32, 4), array_type(_F32, 2), array_type(_F32, 3, read_only=False), *_TABLES)
_CONVOLVE += (array_type(_F32, 3), *_STORE, _INT, types.boolean)


@numba.njit(cache=True, nogil=True)
def _tile(positions, arguments):  # pragma: no cover - compiled
    """One tile of ``positions`` (``ir.MIN_POSITIONS`` to ``ir.MAX_POSITIONS``): the intrinsic
    compiled for that width, given ``arguments`` (``ir.row_tile_4``'s, in order)."""
    if positions == 4:
        ir.row_tile_4(*arguments)
    elif positions == 5:
        ir.row_tile_5(*arguments)
    elif positions == 6:
        ir.row_tile_6(*arguments)
    elif positions == 7:
        ir.row_tile_7(*arguments)
    elif positions == 8:
        ir.row_tile_8(*arguments)
    elif positions == 9:
        ir.row_tile_9(*arguments)
    elif positions == 10:
        ir.row_tile_10(*arguments)
    elif positions == 11:
        ir.row_tile_11(*arguments)
    else:
        ir.row_tile_12(*arguments)


@numba.njit(types.void(*_RANGE), cache=True, nogil=True)
def tiles_range(x, wp, y, tiles, tables, b, z, low, high, alpha, step, lo, hi, by_tiles):  # pragma: no cover
    """Work items ``[lo, hi)`` of one image: item ``j`` is block ``j // T`` of tile ``j % T`` (a
    block's tiles in turn, so that its weights stay in cache), or, ``by_tiles``, tile ``j // B``'s
    block ``j % B`` (each range a run of output rows with all their channels: see
    ``kernels._row_conv.WEIGHTS_IN_CACHE``)."""
    channels = x.shape[0]
    hw = x.shape[1] * x.shape[2]
    maps, ostride = y.shape[0], y.shape[1]
    count, blocks = tiles.shape[0], wp.shape[0]
    silu = 0 if np.isnan(alpha) else 1
    residual = z.ctypes.data if z.shape[1] > 0 else 0
    for j in range(lo, hi):
        if by_tiles:
            i = j // blocks
            block = j - i * blocks
        else:
            block = j // count
            i = j - block * count
        first = block * _CHANNELS
        bias = np.int64(b.ctypes.data) + first * 4 if b.shape[0] > 0 else 0  # (an address: kept integer)
        valid = min(_CHANNELS, maps - first)
        ybase = first * ostride + tiles[i, 0]
        pointers = (wp[block].ctypes.data, x.ctypes.data, y.ctypes.data)
        _tile(
            tiles[i, 1],
            (
                *pointers,
                channels,
                hw,
                tiles[i, 2],
                tables[i].ctypes.data,
                ybase,
                ostride,
                bias,
                residual,
                valid,
                step,
                silu,
                low,
                high,
                alpha,
            ),
        )


@numba.njit(types.void(*_CONVOLVE), cache=True, nogil=True, parallel=True)
def convolve_rows(x, wp, y, tiles, tables, b, z, low, high, alpha, step, parts, by_tiles):  # pragma: no cover
    """The layer of ``x`` ``(N, C, H, W)`` into ``y`` ``(N, M, OH·OW)`` (see ``kernels._row_conv``),
    each image's work items in ``parts`` contiguous ranges (on numba's threading layer when more
    than one)."""
    blocks = wp.shape[0]
    items = blocks * tiles.shape[0]
    for image in range(x.shape[0]):
        if parts <= 1:
            tiles_range(x[image], wp, y[image], tiles, tables, b, z[image], low, high, alpha, step, 0, items, by_tiles)
        else:
            for part in prange(parts):
                lo, hi = items * part // parts, items * (part + 1) // parts
                tiles_range(
                    x[image], wp, y[image], tiles, tables, b, z[image], low, high, alpha, step, lo, hi, by_tiles
                )
