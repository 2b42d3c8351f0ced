"""The last one or two columns of a convolution read in place, as dot products of the weights'
rows (``kernels._f32_conv_layout.TAIL_COLUMNS``): a 7×7 map's 49 columns cost the tiles 48 and a dot
product per row, instead of one more 16-lane vector a tile of which one lane is kept.

Imported by ``kernels._f32_conv_tile`` only (it imports numba), which calls them from its
driver and re-exports them.  A row tile's six dot products run together (:func:`row_dots`, LLVM
IR as the tiles): six independent chains of 16-lane multiply-adds over the weights' rows, where
one row after another (a vectorised loop each) waited on each row's single chain.  At two threads,
160 → 960 channels pointwise at 7×7 took 50 µs with the rows one at a time after each row tile,
42 with the rows together after each block of row tiles (``_f32_conv_tile.TAIL_BLOCK_BYTES``);
a 6×8 map's 48 columns, without a tail, 38-40.  The sums add in 16 lane partial sums
(lane ``l`` takes every ``k ≡ l`` mod 16 in order), then the lanes in a fixed tree: not the
tiles' bits for those columns, the same on every call and thread split.  Module-level functions,
so that numba's on-disk cache recognises them from one process to the next.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._f32_tile_ir import COLUMNS, ROWS
from ._simd_ir import F32, I32, INDICES, LANES, Intrinsics, i64, lanes_below


def _dots_codegen(columns: int):
    """The IR of six rows' dot products with ``columns`` columns at once (1 to 4): per 16 values
    of ``k``, each column and each row loaded once and ``6 × columns`` multiply-adds."""

    def codegen(context, builder, sig, args):
        w, x, y, depth, ldw, ldy, rows, ldx = args
        calls = Intrinsics(builder)
        weights, source = builder.inttoptr(w, F32.as_pointer()), builder.inttoptr(x, F32.as_pointer())
        target = builder.inttoptr(y, F32.as_pointer())
        last = builder.sub(rows, i64(1))
        # rows past the last read the last row's weights (as the tiles do) and are not stored
        starts = [
            builder.mul(builder.select(builder.icmp_signed("<", i64(r), rows), i64(r), last), ldw) for r in range(ROWS)
        ]
        sums = [
            [cgutils.alloca_once_value(builder, ir.Constant(LANES, None)) for _ in range(columns)] for _ in range(ROWS)
        ]
        steps = builder.sdiv(builder.add(depth, i64(15)), i64(16))
        with cgutils.for_range(builder, steps) as loop:
            k = builder.mul(loop.index, i64(16))
            mask = lanes_below(builder, builder.sub(depth, k))
            values = [
                calls.masked_load(builder, source, builder.add(builder.mul(i64(c), ldx), k), mask)
                for c in range(columns)
            ]
            for r in range(ROWS):
                row = calls.masked_load(builder, weights, builder.add(starts[r], k), mask)
                for c, value in enumerate(values):
                    builder.store(builder.call(calls.fma, [row, value, builder.load(sums[r][c])]), sums[r][c])
        for r in range(ROWS):
            with builder.if_then(builder.icmp_signed("<", i64(r), rows)):
                for c in range(columns):
                    total = builder.load(sums[r][c])
                    for half in (8, 4, 2, 1):  # lane i plus lane i + half: lane 0 ends with the sum
                        rotated = ir.Constant(INDICES, [(i + half) % 16 for i in range(16)])
                        shuffled = builder.shuffle_vector(total, ir.Constant(LANES, ir.Undefined), rotated)
                        total = builder.fadd(total, shuffled)
                    place = builder.gep(target, [builder.add(builder.mul(i64(r), ldy), i64(c))])
                    builder.store(builder.extract_element(total, ir.Constant(I32, 0)), place)
        return context.get_dummy_value()

    return codegen


_DOTS_SIGNATURE = types.void(*([types.intp] * 8))


@intrinsic
def row_dots(typingctx, w, x, y, depth, ldw, ldy, rows, ldx):
    """``y[r·ldy] = sum_k w[r·ldw + k] · x[k]`` for ``r < rows`` (at most ROWS) and ``k < depth``:
    six rows' dot products with one column at once (pointers and sizes as integers; nothing past
    ``depth`` is read; ``ldx`` unused)."""
    return _DOTS_SIGNATURE, _dots_codegen(1)


@intrinsic
def row_dots_2(typingctx, w, x, y, depth, ldw, ldy, rows, ldx):
    """:func:`row_dots` with two columns, ``x`` and ``x + ldx``, stored at ``y[r·ldy + c]``."""
    return _DOTS_SIGNATURE, _dots_codegen(2)


@intrinsic
def row_dots_3(typingctx, w, x, y, depth, ldw, ldy, rows, ldx):
    """:func:`row_dots` with three columns ``ldx`` apart, stored at ``y[r·ldy + c]``."""
    return _DOTS_SIGNATURE, _dots_codegen(3)


@intrinsic
def row_dots_4(typingctx, w, x, y, depth, ldw, ldy, rows, ldx):
    """:func:`row_dots` with four columns ``ldx`` apart, stored at ``y[r·ldy + c]``."""
    return _DOTS_SIGNATURE, _dots_codegen(4)


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


@numba.njit(cache=True, nogil=True)
def tail_rows(w, inputs, y, main, groups, b, z, low, high, alpha, r0, r1):  # pragma: no cover - compiled
    """Row tiles ``[r0, r1)`` of the last columns ``main, main + 1, …`` of ``y`` as dot products
    of the weights' rows with ``inputs`` (:func:`tail_inputs`; :func:`row_dots`), stored as the
    tiles store: plus the bias, plus the residual, clamped, then the SiLU (``alpha``; NaN for
    none)."""
    m, depth = w.shape
    per_group = m // groups
    m_tiles = (per_group + ROWS - 1) // ROWS
    tail = inputs.shape[1]
    for r in range(r0, r1):
        g = r // m_tiles
        m0 = g * per_group + (r - g * m_tiles) * ROWS
        rows = min(ROWS, (g + 1) * per_group - m0)
        for j in range(0, tail, 4):  # up to four columns at once: each row's weights read once
            count = min(4, tail - j)
            arguments = (w[m0].ctypes.data, inputs[g, j].ctypes.data, y[m0, main + j :].ctypes.data)
            sizes = (depth, depth, y.shape[1], rows, depth)
            if count == 4:
                row_dots_4(*arguments, *sizes)
            elif count == 3:
                row_dots_3(*arguments, *sizes)
            elif count == 2:
                row_dots_2(*arguments, *sizes)
            else:
                row_dots(*arguments, *sizes)
        for row in range(m0, m0 + rows):
            for j in range(tail):
                value = y[row, main + j]
                if b.shape[0] > 0:
                    value += b[row]
                if z.shape[0] > 0:
                    value += z[row, main + j]
                value = low if value < low else value
                value = high if value > high else value
                if alpha == alpha:
                    value = value / (np.float32(1.0) + np.exp(-alpha * value))
                y[row, main + j] = value
