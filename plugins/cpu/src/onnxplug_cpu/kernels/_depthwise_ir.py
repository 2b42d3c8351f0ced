"""The 3×3 depthwise planes of ``kernels._depthwise_loops`` as AVX-512 LLVM IR, through numba
intrinsics (imported by that module only, after ``kernels._depthwise_jit`` has checked that numba
is usable; the caller checks AVX-512F).

Why: the numba loops kept numpy's rounding (a product, then an add, per tap) and read each plane
through a padded copy (stride 1) or four phase planes (stride 2) with a select per edge tap: 17-22
cycles per 16 outputs at stride 1 and 34-97 at stride 2 on MobileNetV2's layers, where nine
multiply-adds take about five.  Here each output vector is nine fused multiply-adds of masked
loads straight from the input plane: a lane whose tap falls outside the map is masked off (it
reads zero, the padding's value, and touches no memory), so there is no copy.

- :func:`plane_s1` (padding 1 all round, the output the input's size): the plane as one flat run
  of ``H·W`` cells, 16 at a time; tap ``(dy, dx)`` of cell ``n`` reads ``n + dy·W + dx``, masked
  by the vector's row and column masks (:func:`kernels._simd_ir.flat_masks`).
- :func:`plane_s2` (padding 1 before each axis, ``ceil(H/2) × ceil(W/2)`` outputs: PyTorch's
  ``padding=1``): output row by output row, 16 outputs at a time; each of the three input rows
  is loaded as 32 columns from ``2·ox0`` and split into its even columns (the centre taps) and
  odd ones (the right taps); the left taps are the odd ones moved one lane up, the first lane
  the previous 16 outputs' last right tap, carried in a register (a load of its own per row
  cost 96 channels at 112×112 → 56×56 135 against 110 µs on one thread).

Numerics: ``x₀·t₀`` rounded, then each further tap fused (one rounding per multiply-add), taps in
row-major order; then the bias added, then clamped (NaN kept), as the tiles store
(``kernels._f32_tile_ir``).  Not the numpy passes' bits; within float32 accuracy of them.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._simd_ir import ALL, F32, I16, INDICES, LANES, MASK, NONE, Intrinsics, i64, lanes_below, splat


def _finish(builder, value, bias, has_bias, low, high):
    """Plus the bias (where there is one: adding zero would turn -0.0 into +0.0), clamped with NaN
    kept: the tiles' store."""
    value = builder.select(has_bias, builder.fadd(value, splat(builder, bias)), value)
    lows, highs = splat(builder, low), splat(builder, high)
    value = builder.select(builder.fcmp_ordered("<", value, lows), lows, value)
    return builder.select(builder.fcmp_ordered(">", value, highs), highs, value)


def _sum_taps(builder, calls, products):
    """``products`` (value, tap weight), nine in row-major order: each row's three (the first
    multiplied, the others fused in), then the rows added in order."""
    rows = []
    for start in range(0, len(products), 3):
        total = None
        for value, weight in products[start : start + 3]:
            weight = splat(builder, weight)
            total = builder.fmul(value, weight) if total is None else builder.call(calls.fma, [value, weight, total])
        rows.append(total)
    total = rows[0]
    for row in rows[1:]:
        total = builder.fadd(total, row)
    return total


def _plane_s1_codegen(context, builder, sig, args):
    x, y, taps, masks, cells, width, bias, has_bias, low, high = args
    calls = Intrinsics(builder)
    source = builder.inttoptr(x, F32.as_pointer())
    target = builder.inttoptr(y, F32.as_pointer())
    weights = [builder.load(builder.gep(builder.inttoptr(taps, F32.as_pointer()), [i64(k)])) for k in range(9)]
    table = builder.inttoptr(masks, I16.as_pointer())
    has_bias = builder.icmp_signed("!=", has_bias, i64(0))
    vectors = builder.sdiv(builder.add(cells, i64(15)), i64(16))
    with cgutils.for_range(builder, vectors) as loop:
        j = loop.index
        n0 = builder.mul(j, i64(16))
        # The vector's masks: inside the map, a row above, a row below, a column left, right.
        inside, above, below, left, right = (
            builder.bitcast(builder.load(builder.gep(table, [builder.add(builder.mul(j, i64(5)), i64(i))])), MASK)
            for i in range(5)
        )
        rows = {-1: above, 0: inside, 1: below}
        columns = {-1: left, 0: ALL, 1: right}
        # A vector with every tap inside the map (most of a wide map's) loads without masks.
        every = builder.and_(builder.and_(builder.and_(above, below), left), right)
        interior = builder.icmp_unsigned("==", builder.bitcast(every, I16), ir.Constant(I16, 0xFFFF))

        def vector(masked: bool):
            products = []
            for dy in (-1, 0, 1):
                for dx in (-1, 0, 1):
                    offset = builder.add(n0, builder.add(builder.mul(i64(dy), width), i64(dx)))
                    if masked:
                        value = calls.masked_load(builder, source, offset, builder.and_(rows[dy], columns[dx]))
                    else:
                        value = builder.load(builder.bitcast(builder.gep(source, [offset]), calls.pointer), align=4)
                    products.append((value, weights[3 * (dy + 1) + dx + 1]))
            total = _finish(builder, _sum_taps(builder, calls, products), bias, has_bias, low, high)
            if masked:
                calls.masked_store(builder, total, target, n0, inside)
            else:
                builder.store(total, builder.bitcast(builder.gep(target, [n0]), calls.pointer), align=4)

        with builder.if_else(interior) as (then, otherwise):
            with then:
                vector(masked=False)
            with otherwise:
                vector(masked=True)
    return context.get_dummy_value()


@intrinsic
def plane_s1(typingctx, x, y, taps, masks, cells, width, bias, has_bias, low, high):
    """One plane of ``cells = H·W`` float32 cells at ``x`` convolved 3×3 with padding 1 all round
    into ``y`` (as many cells), the nine ``taps`` row-major, plus ``bias`` (where ``has_bias``),
    clamped to ``[low, high]``.  ``masks``: five uint16 per 16-cell vector (lanes inside the
    plane; whose row above, row below, column left, column right is inside it too).  Pointers and
    sizes as integers."""
    signature = types.void(*([types.intp] * 6), types.float32, types.intp, types.float32, types.float32)
    return signature, _plane_s1_codegen


def _plane_s2_codegen(context, builder, sig, args):
    x, y, taps, height, width, out_height, out_width, bias, has_bias, low, high = args
    calls = Intrinsics(builder)
    source = builder.inttoptr(x, F32.as_pointer())
    target = builder.inttoptr(y, F32.as_pointer())
    weights = [builder.load(builder.gep(builder.inttoptr(taps, F32.as_pointer()), [i64(k)])) for k in range(9)]
    has_bias = builder.icmp_signed("!=", has_bias, i64(0))
    even_lanes = ir.Constant(INDICES, [2 * i for i in range(16)])
    odd_lanes = ir.Constant(INDICES, [2 * i + 1 for i in range(16)])
    after_last = ir.Constant(INDICES, [31] + list(range(15)))  # lane 0: the second vector's lane 15
    chunks = builder.sdiv(builder.add(out_width, i64(15)), i64(16))
    # Each row's previous chunk's right taps (odd columns): the last is this chunk's first left
    # tap, column 2·ox0 - 1 (zero, the padding, before the first chunk).
    carried = [cgutils.alloca_once_value(builder, ir.Constant(LANES, None)) for _ in range(3)]
    with cgutils.for_range(builder, out_height) as rows_loop:
        oy = rows_loop.index
        rows = []
        for dy in range(3):
            builder.store(ir.Constant(LANES, None), carried[dy])
            iy = builder.sub(builder.add(builder.mul(oy, i64(2)), i64(dy)), i64(1))
            valid = builder.and_(builder.icmp_signed(">=", iy, i64(0)), builder.icmp_signed("<", iy, height))
            rows.append((builder.mul(builder.select(valid, iy, i64(0)), width), builder.select(valid, ALL, NONE)))
        with cgutils.for_range(builder, chunks) as chunk_loop:
            ox0 = builder.mul(chunk_loop.index, i64(16))
            column = builder.mul(ox0, i64(2))
            # Columns 2·ox0 … 2·ox0 + 31 of each row, as far as the map goes.
            first_half = lanes_below(builder, builder.sub(width, column))
            second_half = lanes_below(builder, builder.sub(width, builder.add(column, i64(16))))
            products = []
            for dy, (start, keep) in enumerate(rows):
                row = builder.add(start, column)
                low_half = calls.masked_load(builder, source, row, builder.and_(first_half, keep))
                high_half = calls.masked_load(
                    builder, source, builder.add(row, i64(16)), builder.and_(second_half, keep)
                )
                centre = builder.shuffle_vector(low_half, high_half, even_lanes)
                right = builder.shuffle_vector(low_half, high_half, odd_lanes)
                left = builder.shuffle_vector(right, builder.load(carried[dy]), after_last)
                builder.store(right, carried[dy])
                products += [(left, weights[3 * dy]), (centre, weights[3 * dy + 1]), (right, weights[3 * dy + 2])]
            total = _finish(builder, _sum_taps(builder, calls, products), bias, has_bias, low, high)
            stored = lanes_below(builder, builder.sub(out_width, ox0))
            calls.masked_store(builder, total, target, builder.add(builder.mul(oy, out_width), ox0), stored)
    return context.get_dummy_value()


@intrinsic
def plane_s2(typingctx, x, y, taps, height, width, out_height, out_width, bias, has_bias, low, high):
    """One ``height × width`` float32 plane at ``x`` convolved 3×3 at stride 2 with one cell of
    padding before each axis into the ``out_height × out_width`` plane ``y`` (``ceil`` of half
    the input's sides), the nine ``taps`` row-major, plus ``bias`` (where ``has_bias``), clamped
    to ``[low, high]``.  Pointers and sizes as integers; nothing outside the planes is read or
    written."""
    signature = types.void(*([types.intp] * 7), types.float32, types.intp, types.float32, types.float32)
    return signature, _plane_s2_codegen
