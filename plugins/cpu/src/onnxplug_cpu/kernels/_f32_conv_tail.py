"""The last one or two columns of a convolution read in place, as dot products of the weights'
rows (``kernels._f32_conv._TAIL_COLUMNS``): a 7×7 map's 49 columns cost the tiles 48 and a dot
product per row, instead of one more 16-lane vector a tile of which one lane is kept.

Imported by ``kernels._f32_conv_tile`` only (it imports numba), which calls them from its
driver and re-exports them.  A row tile's six dot products run together (:func:`row_dots`, LLVM
IR as the tiles): six independent chains of 16-lane multiply-adds over the weights' rows, where
one row after another (a vectorised loop each) waited on each row's single chain.  At two threads,
160 → 960 channels pointwise at 7×7 took 50 µs with the rows one at a time, 40 without a tail
(a 6×8 map's 48 columns), 41-42 with the rows together.  The sums add in 16 lane partial sums
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

_F32, _I32, _I64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
_LANES = ir.VectorType(_F32, 16)
_INDICES = ir.VectorType(_I32, 16)
_MASK = ir.VectorType(ir.IntType(1), 16)


def _row_dots_codegen(context, builder, sig, args):
    w, x, y, depth, ldw, ldy, rows = args
    module = builder.module
    pointer = _LANES.as_pointer()
    fma = cgutils.get_or_insert_function(module, ir.FunctionType(_LANES, [_LANES] * 3), "llvm.fma.v16f32")
    load = cgutils.get_or_insert_function(
        module, ir.FunctionType(_LANES, [pointer, _I32, _MASK, _LANES]), "llvm.masked.load.v16f32.p0"
    )
    weights, source = builder.inttoptr(w, _F32.as_pointer()), builder.inttoptr(x, _F32.as_pointer())
    target = builder.inttoptr(y, _F32.as_pointer())
    zero, four = ir.Constant(_LANES, None), ir.Constant(_I32, 4)
    lanes = ir.Constant(_INDICES, list(range(16)))
    last = builder.sub(rows, ir.Constant(_I64, 1))
    # rows past the last read the last row's weights (as the tiles do) and are not stored
    starts = [
        builder.mul(
            builder.select(builder.icmp_signed("<", ir.Constant(_I64, r), rows), ir.Constant(_I64, r), last), ldw
        )
        for r in range(ROWS)
    ]
    sums = [cgutils.alloca_once_value(builder, zero) for _ in range(ROWS)]
    steps = builder.sdiv(builder.add(depth, ir.Constant(_I64, 15)), ir.Constant(_I64, 16))
    with cgutils.for_range(builder, steps) as loop:
        k = builder.mul(loop.index, ir.Constant(_I64, 16))
        left = builder.trunc(builder.sub(depth, k), _I32)
        splat = builder.insert_element(ir.Constant(_INDICES, ir.Undefined), left, ir.Constant(_I32, 0))
        splat = builder.shuffle_vector(splat, ir.Constant(_INDICES, ir.Undefined), ir.Constant(_INDICES, None))
        mask = builder.icmp_signed("<", lanes, splat)
        column = builder.call(load, [builder.bitcast(builder.gep(source, [k]), pointer), four, mask, zero])
        for r in range(ROWS):
            row = builder.call(
                load, [builder.bitcast(builder.gep(weights, [builder.add(starts[r], k)]), pointer), four, mask, zero]
            )
            builder.store(builder.call(fma, [row, column, builder.load(sums[r])]), sums[r])
    for r in range(ROWS):
        total = builder.load(sums[r])
        for half in (8, 4, 2, 1):  # lane i plus lane i + half: lane 0 ends with the sum
            rotated = ir.Constant(_INDICES, [(i + half) % 16 for i in range(16)])
            total = builder.fadd(total, builder.shuffle_vector(total, ir.Constant(_LANES, ir.Undefined), rotated))
        with builder.if_then(builder.icmp_signed("<", ir.Constant(_I64, r), rows)):
            place = builder.gep(target, [builder.mul(ir.Constant(_I64, r), ldy)])
            builder.store(builder.extract_element(total, ir.Constant(_I32, 0)), place)
    return context.get_dummy_value()


@intrinsic
def row_dots(typingctx, w, x, y, depth, ldw, ldy, rows):
    """``y[r·ldy] = sum_k w[r·ldw + k] · x[k]`` for ``r < rows`` (at most ROWS) and ``k < depth``:
    six rows' dot products with one column at once (pointers and sizes as integers; nothing past
    ``depth`` is read)."""
    return types.void(*([types.intp] * 7)), _row_dots_codegen


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
        for j in range(tail):
            row_dots(
                w[m0].ctypes.data,
                inputs[g, j].ctypes.data,
                y[m0, main + j :].ctypes.data,
                depth,
                depth,
                y.shape[1],
                rows,
            )
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
