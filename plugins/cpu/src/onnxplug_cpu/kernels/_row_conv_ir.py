"""The row tile of ``kernels._row_conv`` as LLVM IR, through numba intrinsics: ``P`` output
positions of one output row × 32 output channels (two 16-lane vectors), the channels in the
vector lanes.

Imported only by ``kernels._row_conv_loops`` (after ``kernels._row_conv.loops`` has checked that
numba is usable and the CPU has AVX-512F).  Module-level intrinsics (``row_tile_4`` …
``row_tile_12``), so that numba's on-disk cache recognises the loop that calls them.

For each tap of the tile's table (the taps whose input row lies inside the map: a top or bottom
row's dead taps are not in it) and each input channel ``c``, the two weight vectors
``wp[tap, c, 0:32]`` are loaded and each live position's input value is broadcast and multiplied
into its two accumulators (``llvm.fma.v16f32``).  A tap is live for positions ``[lo, hi)``,
``lo`` up to :data:`SKIPPED` and ``hi`` from ``P - SKIPPED`` (a row's first and last positions,
whose left or right taps fall in the padding): the loop over the channels is written out once
for each of those nine ranges, so that no multiply-add is spent on a padding cell.  That is the difference
from ``kernels._f32_tile_ir``'s tiles (output columns in the lanes), which multiply the
padding's zeros: 18 % of a 7×7 map's taps, 35 % of a 3×41 map's 2×2 ones.

The store transposes each vector's accumulators in registers (four stages of shuffles), so that
each channel's positions are one vector, then adds the channel's bias, then the residual, clamps,
then applies the SiLU (``kernels._epilogue``'s order, as the other tiles) and stores each
channel's positions as one masked run of its output row.  Channels past the layer's last
(``valid``) are neither read nor written.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._f32_tile_ir import silu_lanes, store_cases
from ._simd_ir import F32, I32, I64, INDICES, LANES, MASK, i64, splat
from ._simd_ir import prefetch as prefetch_line

__all__ = ["MAX_POSITIONS", "MIN_POSITIONS", "PREFETCH_STEPS", "SKIPPED", "VECTORS"]
__all__ += [f"row_tile_{positions}" for positions in range(4, 13)]

#: Output channels a tile computes: this many 16-lane vectors.
VECTORS = 2
#: Positions a tile computes, at most (24 accumulators of the 32 zmm) and at least (fewer
#: accumulators than the multiply-adds in flight leave the FMA units idle).
MAX_POSITIONS = 12
MIN_POSITIONS = 4
#: Positions at either end of a tile a tap may skip: its loop over the channels is written out for
#: each first live position ``0 … SKIPPED`` and each end ``P - SKIPPED … P`` (pads of up to 2 at
#: stride 1, 3 at stride 2).
SKIPPED = 2
#: Channels ahead whose weights each step prefetches.
PREFETCH_STEPS = 8


def _codegen(positions: int):
    def codegen(context, builder, sig, args):
        wp, x, y, channels, hw, taps, table, ybase, ostride, bias, residual, valid, step, silu, low, high, alpha = args
        module = builder.module
        vector_pointer = LANES.as_pointer()
        fma = cgutils.get_or_insert_function(module, ir.FunctionType(LANES, [LANES] * 3), "llvm.fma.v16f32")
        weights = builder.inttoptr(wp, F32.as_pointer())
        source = builder.inttoptr(x, F32.as_pointer())
        entries = builder.inttoptr(table, I64.as_pointer())
        zero = ir.Constant(LANES, None)
        accumulators = [[cgutils.alloca_once_value(builder, zero) for _ in range(VECTORS)] for _ in range(positions)]
        weight_step = i64(16 * VECTORS)
        with cgutils.for_range(builder, taps) as tap_loop:
            entry = builder.mul(tap_loop.index, i64(4))
            x_offset, w_offset, lo, hi = (
                builder.load(builder.gep(entries, [builder.add(entry, i64(f))])) for f in range(4)
            )
            done = builder.append_basic_block("tap_done")
            for first in range(SKIPPED + 1):
                for last in range(positions - SKIPPED, positions + 1):
                    chosen = builder.and_(
                        builder.icmp_signed("==", lo, i64(first)), builder.icmp_signed("==", hi, i64(last))
                    )
                    body = builder.append_basic_block(f"positions_{first}_{last}")
                    other = builder.append_basic_block(f"not_{first}_{last}")
                    builder.cbranch(chosen, body, other)
                    builder.position_at_end(body)
                    with cgutils.for_range(builder, channels) as channel_loop:
                        c = channel_loop.index
                        at = builder.add(w_offset, builder.mul(c, weight_step))
                        vectors = [
                            builder.load(
                                builder.bitcast(builder.gep(weights, [builder.add(at, i64(16 * v))]), vector_pointer),
                                align=4,
                            )
                            for v in range(VECTORS)
                        ]
                        for v in range(VECTORS):  # the weights a few channels on (cold from memory in a model)
                            prefetch_line(
                                builder,
                                builder.gep(weights, [builder.add(at, i64(16 * (v + VECTORS * PREFETCH_STEPS)))]),
                            )
                        row = builder.add(x_offset, builder.mul(c, hw))
                        for p in range(first, last):
                            value = builder.load(builder.gep(source, [builder.add(row, builder.mul(i64(p), step))]))
                            broadcast = splat(builder, value)
                            for v in range(VECTORS):
                                cell = accumulators[p][v]
                                builder.store(builder.call(fma, [broadcast, vectors[v], builder.load(cell)]), cell)
                    builder.branch(done)
                    builder.position_at_end(other)
            builder.branch(done)  # (a range no variant has: the plan never makes one)
            builder.position_at_end(done)
        _store(builder, accumulators, positions, y, ybase, ostride, bias, residual, valid, silu, low, high, alpha)
        return context.get_dummy_value()

    return codegen


def _transposed(builder, rows):
    """The 16 vectors ``t[j][i] = rows[i][j]`` of 16 vectors ``rows`` (missing ones zeros): four
    stages of two-source shuffles, each swapping one bit of the row index with the same bit of
    the lane index."""
    rows = list(rows) + [ir.Constant(LANES, None)] * (16 - len(rows))
    for bit in (1, 2, 4, 8):
        low = [lane if not lane & bit else 16 + lane - bit for lane in range(16)]
        high = [lane + bit if not lane & bit else 16 + lane for lane in range(16)]
        for i in range(16):
            if i & bit:
                continue
            a, b = rows[i], rows[i + bit]
            rows[i] = builder.shuffle_vector(a, b, ir.Constant(INDICES, low))
            rows[i + bit] = builder.shuffle_vector(a, b, ir.Constant(INDICES, high))
    return rows


def _store(builder, accumulators, positions, y, ybase, ostride, bias, residual, valid, silu, low, high, alpha):
    """Each vector's accumulators transposed (:func:`_transposed`: each channel's positions in
    one vector), plus the channel's bias, plus the residual, clamped, then the SiLU, stored as
    one masked run of the channel's row; one straight run of code per case (residual or not,
    SiLU or not), chosen once.  (Scattering each position's 16 channels instead, 16 planes
    apart, cost a 3-channel layer 16x its arithmetic.)"""
    module = builder.module
    pointer = LANES.as_pointer()
    load = cgutils.get_or_insert_function(
        module, ir.FunctionType(LANES, [pointer, I32, MASK, LANES]), "llvm.masked.load.v16f32.p0"
    )
    store = cgutils.get_or_insert_function(
        module, ir.FunctionType(ir.VoidType(), [LANES, pointer, I32, MASK]), "llvm.masked.store.v16f32.p0"
    )
    zero = ir.Constant(LANES, None)
    four = ir.Constant(I32, 4)
    inside = ir.Constant(MASK, [p < positions for p in range(16)])
    has_bias = builder.icmp_signed("!=", bias, i64(0))
    biases = builder.inttoptr(bias, F32.as_pointer())
    targets = builder.inttoptr(y, F32.as_pointer())
    residuals = builder.inttoptr(residual, F32.as_pointer())
    lows, highs = splat(builder, low, LANES), splat(builder, high, LANES)
    minus_alpha = splat(builder, builder.fneg(alpha), LANES)
    channels = [
        _transposed(builder, [builder.load(accumulators[p][v]) for p in range(positions)]) for v in range(VECTORS)
    ]
    # each vector's 16 biases, zeros for channels past ``valid`` or no bias: lane j is channel j's
    lanes = ir.Constant(INDICES, list(range(16)))
    valid32 = builder.trunc(valid, I32)
    bias_vectors = []
    for v in range(VECTORS):
        live = builder.icmp_signed("<", lanes, splat(builder, builder.sub(valid32, ir.Constant(I32, 16 * v)), INDICES))
        live = builder.and_(live, builder.select(has_bias, ir.Constant(MASK, [1] * 16), ir.Constant(MASK, None)))
        address = builder.bitcast(builder.gep(biases, [i64(16 * v)]), pointer)
        bias_vectors.append(builder.call(load, [address, four, live, zero]))

    def stores(with_residual: bool, with_silu: bool) -> None:
        for v in range(VECTORS):
            for j in range(16):
                channel = 16 * v + j
                live = builder.icmp_signed("<", i64(channel), valid)
                mask = builder.select(live, inside, ir.Constant(MASK, None))
                place = builder.add(ybase, builder.mul(i64(channel), ostride))
                shift = builder.extract_element(bias_vectors[v], ir.Constant(I32, j))
                value = builder.fadd(channels[v][j], splat(builder, shift))
                if with_residual:
                    there = builder.bitcast(builder.gep(residuals, [place]), pointer)
                    value = builder.fadd(value, builder.call(load, [there, four, mask, zero]))
                value = builder.select(builder.fcmp_ordered("<", value, lows), lows, value)
                value = builder.select(builder.fcmp_ordered(">", value, highs), highs, value)
                if with_silu:
                    value = silu_lanes(builder, value, minus_alpha)
                address = builder.bitcast(builder.gep(targets, [place]), pointer)
                builder.call(store, [value, address, four, mask])

    has_silu = builder.icmp_signed("!=", silu, i64(0))
    store_cases(builder, builder.icmp_signed("!=", residual, i64(0)), has_silu, stores)


_SIGNATURE = types.void(*([types.intp] * 14), types.float32, types.float32, types.float32)


_TILE_DOC = """``{positions}`` positions × 32 channels (lanes ``16·v + j``):
    ``y[ybase + (16·v + j)·ostride + p]`` is the sum over the table's taps and the channels
    ``c < channels`` of ``wp[w_offset + 32·c + 16·v + j] · x[x_offset + c·hw + p·step]``, plus
    ``bias[16·v + j]``, plus the residual at the same place, clamped to ``[low, high]``, then the
    SiLU of ``alpha`` where ``silu`` is nonzero, for the lanes below ``valid``.  ``table`` points
    at ``taps`` rows of four int64: x offset, weight offset, first live position, end; ``bias``
    and ``residual`` are pointers or 0 for none; pointers and sizes as integers."""


def _row_tile(positions: int):
    def row_tile(
        typingctx,
        wp,
        x,
        y,
        channels,
        hw,
        taps,
        table,
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
    ):
        return _SIGNATURE, _codegen(positions)

    row_tile.__name__ = row_tile.__qualname__ = f"row_tile_{positions}"
    row_tile.__doc__ = _TILE_DOC.format(positions=positions)
    return intrinsic(row_tile)


row_tile_4 = _row_tile(4)
row_tile_5 = _row_tile(5)
row_tile_6 = _row_tile(6)
row_tile_7 = _row_tile(7)
row_tile_8 = _row_tile(8)
row_tile_9 = _row_tile(9)
row_tile_10 = _row_tile(10)
row_tile_11 = _row_tile(11)
row_tile_12 = _row_tile(12)
