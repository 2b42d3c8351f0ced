"""The last one or two columns of a convolution read in place, as dot products of the weights'
rows (``kernels._f32_conv._TAIL_COLUMNS``): a 7×7 map's 49 columns cost the tiles 48 and a dot
product per row, instead of one more 16-lane vector a tile of which one lane is kept.

Imported by ``kernels._f32_conv_tile`` only (it imports numba), which calls them from its
driver and re-exports them.  The sums add in vector partial sums, not the tiles' order: not the
tiles' bits for those columns, the same on every call and thread split.  Module-level functions,
so that numba's on-disk cache recognises them from one process to the next.
"""

from __future__ import annotations

import numba
import numpy as np

from ._f32_tile_ir import COLUMNS, ROWS

__all__ = ["tail_inputs", "tail_rows"]


@numba.njit(cache=True, nogil=True)
def tail_inputs(
    source, offsets, taps, lane_masks, masked, columns, main, groups, group_stride, depth
):  # pragma: no cover - compiled
    """The inputs each of the last ``columns - main`` columns reads, ``(groups, tail, depth)``: in
    place (a pointwise layer, or a ``masked`` one with its taps' lane masks: a masked-off lane
    reads zero, as in the tiles)."""
    tail = columns - main
    inputs = np.empty((groups, tail, depth), np.float32)  # (groups, 0, depth): no tail
    per_tile = lane_masks.shape[0] // ((columns + COLUMNS - 1) // COLUMNS) if masked else 0
    for g in range(groups):
        base = g * group_stride
        for j in range(tail):
            p = main + j
            first = (p // COLUMNS) * per_tile
            lane = p % COLUMNS
            for k in range(depth):
                if masked and (lane_masks[first + taps[k]] >> lane) & 1 == 0:
                    inputs[g, j, k] = 0.0
                else:
                    inputs[g, j, k] = source[base + offsets[k] + p]
    return inputs


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _dot(row, column):  # pragma: no cover - compiled
    """``row · column`` in float32, vectorised (partial sums across the vector lanes, then added
    together: not the tiles' order, the same on every call)."""
    total = np.float32(0.0)
    for k in range(row.shape[0]):
        total += row[k] * column[k]
    return total


@numba.njit(cache=True, nogil=True)
def tail_rows(w, inputs, y, main, groups, b, z, low, high, alpha, r0, r1):  # pragma: no cover - compiled
    """Row tiles ``[r0, r1)`` of the last columns ``main, main + 1, …`` of ``y`` as dot products
    of the weights' rows with ``inputs`` (:func:`tail_inputs`), stored as the tiles store: plus
    the bias, plus the residual, clamped, then the SiLU (``alpha``; NaN for none)."""
    m = w.shape[0]
    per_group = m // groups
    m_tiles = (per_group + ROWS - 1) // ROWS
    tail = inputs.shape[1]
    for r in range(r0, r1):
        g = r // m_tiles
        m0 = g * per_group + (r - g * m_tiles) * ROWS
        for row in range(m0, min(m0 + ROWS, (g + 1) * per_group)):
            for j in range(tail):
                value = _dot(w[row], inputs[g, j])
                if b.shape[0] > 0:
                    value += b[row]
                if z.shape[0] > 0:
                    value += z[row, main + j]
                value = low if value < low else value
                value = high if value > high else value
                if alpha == alpha:
                    value = value / (np.float32(1.0) + np.exp(-alpha * value))
                y[row, main + j] = value
