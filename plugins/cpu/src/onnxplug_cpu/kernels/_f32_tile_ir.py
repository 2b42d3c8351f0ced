"""The AVX-512 float32 tile of ``kernels._f32_conv`` and ``kernels._f32_matmul`` as LLVM IR,
through numba intrinsics.

Imported by ``kernels._f32_conv_tile`` and ``kernels._f32_matmul_loops`` only (after
``kernels._f32_conv.loops`` or ``kernels._f32_matmul.available`` has checked that numba is usable
and the CPU has AVX-512F).  Module-level intrinsics, not closures, so that numba's on-disk cache
recognises the loops that call them from one process to the next.

:func:`tile` computes :data:`ROWS` output channels × 64 output columns: 24 accumulators (four
16-lane vectors per channel) start at zero; for each input column ``k`` (channel and tap) the
four vectors ``planes[offsets[k] + p0 : ... + 64]`` are loaded and each channel's weight
``w[m, k]`` is broadcast and multiplied into its four accumulators (``llvm.fma.v16f32``: one
rounding per multiply-add, ``k`` in order).  Loads and stores are masked to the ``valid``
columns of the last tile, so nothing past the output or the planes is read or written; rows past
the last channel read the last channel's weights and are not stored.  LLVM keeps the
accumulators in registers (24 of the 32 zmm).  A last tile of at most 48, 32 or 16 columns takes
a variant with that many vectors (``tile_48`` …), so that masked-off vectors are not computed: a
14×14 map's 196 columns cost 208, not 256.  Likewise a full-width last row tile of one or two
channels (``tile_2_rows``, ``crop_tile_2_rows``) computes only those: 32 output channels are five
tiles of six and one of two, which the six-row tile computed as 36 rows of multiply-adds (a 32 →
32 3×3 layer at 80×80, one thread: 301-304 → 280-285 µs).  Not for three or four channels: a
four-row tile (16 accumulators) saved less than its two rows (16 → 64 channels pointwise at 55×55
1-2 % slower), and short-row variants in the masked loop slowed its six-row tile by 1-2 %.  The
sums a tile stores are the same whatever its row count (each channel's ``k`` in order, one
rounding each).

The store adds the bias and a residual and clamps, in the epilogue's order (``kernels._epilogue``),
then applies the SiLU.  It is written out once per case (with or without a residual, with or
without the SiLU), chosen once a tile: tested per vector, the two branches split each vector's
store into blocks of its own, which kept the SiLU's ``exp`` chains from interleaving and cost a
16-deep layer's plain store a sixth of its time (16 → 96 channels at 112×112: 136-142 → 112-117 µs
at two threads).
The ``crop_*`` variants store a gathered layer's sums straight into its output: the computed
columns ``oy·Wq + ox`` include ``Wq - OW`` padding columns a row, so each vector's kept lanes
(``keep``, 16 bits a vector) are compressed together (``vcompressps`` on a register; its memory
form is slow on AMD Zen 4) and stored at the output position of the first (``at``), and a
residual is loaded there and expanded to the same lanes.  That removes the separate crop pass
and its scratch sums, which on large maps cost as much memory traffic as the output itself.

The ``masked_*`` variants read a stride-1 layer's input in place: each ``k``'s loads are also
masked by its tap's lanes, those whose cell lies inside the map, from a small per-tile table
(``kernels._f32_conv_layout.masked_layout``); a masked-off lane reads zero, as the padding would.  Their
loops must be compiled in a function of their own (``kernels._f32_conv_tile._masked_range``):
inlined into one loop with the other eight variants they ran 25 % slower (LLVM's allocation of
the mask registers, it seems; the other variants were unaffected).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._simd_ir import F32, I16, I32, I64, INDICES, LANES, MASK, i64, splat
from ._simd_ir import prefetch as prefetch_line

ROWS = 6
COLUMNS = 64


_LN2_HI = 0.693359375  # 9 significant bits: n·_LN2_HI is exact for |n| < 2^15
_LN2_LO = math.log(2) - 0.693359375
_EXP_LOW, _EXP_HIGH = -120.0, 89.0
_TAYLOR = [1 / 5040, 1 / 720, 1 / 120, 1 / 24, 1 / 6, 0.5, 1.0, 1.0]


def _lanes(value: float):
    return ir.Constant(LANES, [float(np.float32(value))] * 16)


def _exp(builder, y):
    """``exp`` of 16 float32 lanes: ``kernels._vexp.exp_value``'s steps (clamp, ``n = rint(y log2
    e)``, Cody-Waite reduction, degree-7 polynomial), with each multiply-add fused, then scaled by
    ``2^n`` with AVX-512's ``vscalefps`` (where ``_vexp`` multiplies by two halves built from
    exponent bits: eight operations there, one here)."""
    module = builder.module
    fma = cgutils.get_or_insert_function(module, ir.FunctionType(LANES, [LANES] * 3), "llvm.fma.v16f32")
    rint = cgutils.get_or_insert_function(module, ir.FunctionType(LANES, [LANES]), "llvm.rint.v16f32")
    low, high = _lanes(_EXP_LOW), _lanes(_EXP_HIGH)
    y = builder.select(builder.fcmp_ordered("<", y, low), low, y)  # NaN kept: it compares false
    y = builder.select(builder.fcmp_ordered(">", y, high), high, y)
    n = builder.call(rint, [builder.fmul(y, _lanes(1 / math.log(2)))])
    r = builder.call(fma, [n, _lanes(-_LN2_HI), y])
    r = builder.call(fma, [n, _lanes(-_LN2_LO), r])
    q = _lanes(_TAYLOR[0])
    for coefficient in _TAYLOR[1:]:
        q = builder.call(fma, [q, r, _lanes(coefficient)])
    # q · 2^n in one instruction (vscalefps: overflow to inf, underflow through the subnormals,
    # rounded once); a NaN n gives NaN, as q is already.
    scale = cgutils.get_or_insert_function(
        module,
        ir.FunctionType(LANES, [LANES, LANES, LANES, I16, I32]),
        "llvm.x86.avx512.mask.scalef.ps.512",
    )
    q = builder.call(scale, [q, n, ir.Constant(LANES, None), ir.Constant(I16, -1), ir.Constant(I32, 4)])
    return q


def store_cases(builder, has_residual, has_silu, stores) -> None:
    """``stores(with_residual, with_silu)`` written out once for each of the four cases, the one
    to run chosen by the i1 flags ``has_residual`` and ``has_silu`` once a tile: tested per
    vector instead, the branches split each vector's store into blocks of its own, which kept
    the SiLU's ``exp`` chains from interleaving (see the module's docstring)."""
    with builder.if_else(has_silu) as (silu_case, plain_case):
        for case, with_silu in ((silu_case, True), (plain_case, False)):
            with case:
                with builder.if_else(has_residual) as (residual_case, bare_case):
                    with residual_case:
                        stores(True, with_silu)
                    with bare_case:
                        stores(False, with_silu)


def silu_lanes(builder, value, minus_alpha):
    """``value / (1 + exp(-alpha · value))`` of 16 float32 lanes, ``minus_alpha`` the splat of
    ``-alpha``: the SiLU the tiles' stores apply (``kernels._row_conv_ir``'s too)."""
    scaled = builder.fmul(value, minus_alpha)
    return builder.fdiv(value, builder.fadd(_lanes(1.0), _exp(builder, scaled)))


def _codegen(vectors: int, crop: bool = False, prefetch: bool = False, masked: bool = False, row_count: int = ROWS):
    """The tile's LLVM IR for ``vectors`` 16-lane column vectors (1 to 4) of ``row_count`` output
    channels (a short last row tile's, see the module's docstring); ``crop``: the stores
    compress each vector's kept lanes to its output position (see the module's docstring);
    ``prefetch``: each ``k`` also prefetches the cache lines ``keep`` values past the ones it
    loads (``kernels._f32_matmul_loops``: rows of weights a few rows on, each on a page of its
    own, which the hardware's prefetchers do not follow)."""

    def codegen(context, builder, sig, args):
        w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha = args
        module = builder.module
        vector_pointer = LANES.as_pointer()
        fma = cgutils.get_or_insert_function(module, ir.FunctionType(LANES, [LANES] * 3), "llvm.fma.v16f32")
        load = cgutils.get_or_insert_function(
            module, ir.FunctionType(LANES, [vector_pointer, I32, MASK, LANES]), "llvm.masked.load.v16f32.p0"
        )
        store = cgutils.get_or_insert_function(
            module, ir.FunctionType(ir.VoidType(), [LANES, vector_pointer, I32, MASK]), "llvm.masked.store.v16f32.p0"
        )
        weights = builder.inttoptr(w, F32.as_pointer())
        source = builder.inttoptr(planes, F32.as_pointer())
        target = builder.inttoptr(y, F32.as_pointer())
        starts = builder.inttoptr(offsets, I64.as_pointer())
        zero = ir.Constant(LANES, None)
        four = ir.Constant(I32, 4)
        lanes = ir.Constant(INDICES, list(range(16)))
        valid32 = builder.trunc(valid, I32)
        masks = [
            builder.icmp_signed("<", lanes, splat(builder, builder.sub(valid32, ir.Constant(I32, 16 * v)), INDICES))
            for v in range(vectors)
        ]
        last = builder.sub(rows, i64(1))
        row_starts = [
            builder.mul(builder.select(builder.icmp_signed("<", i64(r), rows), i64(r), last), depth)
            for r in range(row_count)
        ]
        accumulators = [[cgutils.alloca_once_value(builder, zero) for _ in range(vectors)] for _ in range(row_count)]
        if masked:
            tap_classes = builder.inttoptr(keep, I16.as_pointer())
            class_masks = builder.inttoptr(at, I16.as_pointer())
        with cgutils.for_range(builder, depth) as k_loop:
            k = k_loop.index
            base = builder.add(builder.load(builder.gep(starts, [k])), p0)
            if masked:  # the tap's four 16-lane masks: one int64, read as four uint16 (loads
                # straight into mask registers; shifting them out of one load ran ~20 % slower)
                first = builder.mul(builder.zext(builder.load(builder.gep(tap_classes, [k])), I64), i64(4))
            columns = []
            for v in range(vectors):
                address = builder.bitcast(builder.gep(source, [builder.add(base, i64(16 * v))]), vector_pointer)
                lane_mask = masks[v]
                if masked:
                    bits = builder.load(builder.gep(class_masks, [builder.add(first, i64(v))]))
                    lane_mask = builder.and_(builder.bitcast(bits, MASK), lane_mask)
                columns.append(builder.call(load, [address, four, lane_mask, zero]))
                if prefetch:  # one cache line per vector
                    prefetch_line(builder, builder.gep(source, [builder.add(builder.add(base, keep), i64(16 * v))]))
            for r in range(row_count):
                weight = builder.load(builder.gep(weights, [builder.add(row_starts[r], k)]))
                broadcast = splat(builder, weight, LANES)
                for v in range(vectors):
                    acc = accumulators[r][v]
                    builder.store(builder.call(fma, [broadcast, columns[v], builder.load(acc)]), acc)
        # Per vector: the lanes computed (``kept``), the lanes stored (``stored``: the first ones
        # after compression) and where in the output row the first stored lane goes.
        if crop:
            compress = cgutils.get_or_insert_function(
                module, ir.FunctionType(LANES, [LANES, LANES, MASK]), "llvm.x86.avx512.mask.compress.v16f32"
            )
            expand = cgutils.get_or_insert_function(
                module, ir.FunctionType(LANES, [LANES, LANES, MASK]), "llvm.x86.avx512.mask.expand.v16f32"
            )
            popcount = cgutils.get_or_insert_function(module, ir.FunctionType(I16, [I16]), "llvm.ctpop.i16")
            keep_bits = builder.inttoptr(keep, I16.as_pointer())
            positions = builder.inttoptr(at, I64.as_pointer())
            first_vector = builder.ashr(p0, i64(4))
            kept, stored, places = [], [], []
            for v in range(vectors):
                index = builder.add(first_vector, i64(v))
                lanes_kept = builder.and_(
                    builder.bitcast(builder.load(builder.gep(keep_bits, [index])), MASK), masks[v]
                )
                count = builder.zext(builder.call(popcount, [builder.bitcast(lanes_kept, I16)]), I32)
                kept.append(lanes_kept)
                stored.append(builder.icmp_signed("<", lanes, splat(builder, count, INDICES)))
                places.append(builder.load(builder.gep(positions, [index])))
        else:
            kept = stored = masks
            places = [builder.add(p0, i64(16 * v)) for v in range(vectors)]
        biases = builder.inttoptr(bias, F32.as_pointer())
        has_bias = builder.icmp_signed("!=", bias, i64(0))
        residuals = builder.inttoptr(residual, F32.as_pointer())
        has_residual = builder.icmp_signed("!=", residual, i64(0))
        lows, highs = splat(builder, low, LANES), splat(builder, high, LANES)
        has_silu = builder.icmp_signed("!=", silu, i64(0))
        minus_alpha = splat(builder, builder.fneg(alpha), LANES)

        def stores(with_residual: bool, with_silu: bool) -> None:
            """Each kept row's vectors, plus the bias, plus the residual (``with_residual``),
            clamped, then the SiLU (``with_silu``), stored: one straight run of code, so that the
            vectors' SiLU chains (an ``exp`` each) interleave."""
            for r in range(row_count):
                with builder.if_then(builder.icmp_signed("<", i64(r), rows)):
                    row = builder.mul(i64(r), ldy)
                    with builder.if_else(has_bias) as (then, otherwise):
                        with then:
                            then_block = builder.block
                            shift = splat(builder, builder.load(builder.gep(biases, [i64(r)])), LANES)
                        with otherwise:
                            else_block = builder.block
                    added = builder.phi(LANES)
                    added.add_incoming(shift, then_block)
                    added.add_incoming(zero, else_block)
                    for v in range(vectors):
                        place = builder.add(row, places[v])
                        value = builder.load(accumulators[r][v])
                        value = builder.select(has_bias, builder.fadd(value, added), value)
                        if with_residual:
                            there = builder.bitcast(builder.gep(residuals, [place]), vector_pointer)
                            extra = builder.call(load, [there, four, stored[v], zero])
                            if crop:
                                extra = builder.call(expand, [extra, zero, kept[v]])
                            value = builder.fadd(value, extra)
                        value = builder.select(builder.fcmp_ordered("<", value, lows), lows, value)
                        value = builder.select(builder.fcmp_ordered(">", value, highs), highs, value)
                        if with_silu:
                            value = silu_lanes(builder, value, minus_alpha)
                        if crop:
                            value = builder.call(compress, [value, zero, kept[v]])
                        address = builder.bitcast(builder.gep(target, [place]), vector_pointer)
                        builder.call(store, [value, address, four, stored[v]])

        store_cases(builder, has_residual, has_silu, stores)
        return context.get_dummy_value()

    return codegen


_SIGNATURE = types.void(*([types.intp] * 14), types.float32, types.float32, types.float32)


@intrinsic
def tile(
    typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha
):
    """``y[r·ldy + p0 + i] = clamp(sum_k w[r·depth + k] · planes[offsets[k] + p0 + i] + bias[r]
    + residual[r·ldy + p0 + i])`` for ``r < rows`` (at most ROWS) and ``i < valid`` (at most
    COLUMNS), added in that order and clamped to ``[low, high]`` as the epilogue does (NaN
    kept); ``bias`` and ``residual`` pointers or 0 for none; pointers and sizes as integers.
    ``keep`` and ``at`` are unused (the ``crop_*`` variants' tables)."""
    return _SIGNATURE, _codegen(4)


@intrinsic
def tile_48(
    typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha
):
    """:func:`tile` for at most 48 valid columns (three vectors: the masked fourth is not computed)."""
    return _SIGNATURE, _codegen(3)


@intrinsic
def tile_32(
    typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha
):
    """:func:`tile` for at most 32 valid columns."""
    return _SIGNATURE, _codegen(2)


@intrinsic
def tile_16(
    typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha
):
    """:func:`tile` for at most 16 valid columns."""
    return _SIGNATURE, _codegen(1)


@intrinsic
def prefetching_tile(
    typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha
):
    """:func:`tile` that also prefetches, for each ``k``, the cache lines ``keep`` values past the
    ones it reads (``kernels._f32_matmul_loops``: the weights' rows a few rows on;
    ``kernels._f32_conv_tile``: a deep pointwise layer's input planes a few planes on)."""
    return _SIGNATURE, _codegen(4, prefetch=True)


@intrinsic
def crop_tile(
    typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha
):
    """:func:`tile` storing the kept lanes of computed columns ``p0 + i`` at output positions:
    vector ``j = p0 / 16 + v`` keeps the lanes of bit mask ``keep[j]`` (uint16) and stores them,
    in order, from ``y[r·ldy + at[j]]`` (int64); a residual is read at the same positions."""
    return _SIGNATURE, _codegen(4, crop=True)


@intrinsic
def crop_tile_48(
    typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha
):
    """:func:`crop_tile` for at most 48 valid columns."""
    return _SIGNATURE, _codegen(3, crop=True)


@intrinsic
def crop_tile_32(
    typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha
):
    """:func:`crop_tile` for at most 32 valid columns."""
    return _SIGNATURE, _codegen(2, crop=True)


@intrinsic
def crop_tile_16(
    typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha
):
    """:func:`crop_tile` for at most 16 valid columns."""
    return _SIGNATURE, _codegen(1, crop=True)


@intrinsic
def masked_tile(
    typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha
):
    """:func:`tile` whose loads of each ``k`` are also masked by its tap's lanes (a convolution
    read in place, the padding lanes masked off: ``kernels._f32_conv``): ``keep`` points at one
    uint16 tap per ``k`` and ``at`` at this column tile's lane masks, one int64 per tap whose bits
    ``16·v`` to ``16·v + 15`` are vector ``v``'s; a masked-off lane reads zero (not touched)."""
    return _SIGNATURE, _codegen(4, masked=True)


@intrinsic
def masked_tile_48(
    typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha
):
    """:func:`masked_tile` for at most 48 valid columns."""
    return _SIGNATURE, _codegen(3, masked=True)


@intrinsic
def masked_tile_32(
    typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha
):
    """:func:`masked_tile` for at most 32 valid columns."""
    return _SIGNATURE, _codegen(2, masked=True)


@intrinsic
def masked_tile_16(
    typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha
):
    """:func:`masked_tile` for at most 16 valid columns."""
    return _SIGNATURE, _codegen(1, masked=True)


@intrinsic
def tile_2_rows(
    typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha
):
    """:func:`tile` of at most 2 output channels (``rows``): only their sums are computed."""
    return _SIGNATURE, _codegen(4, row_count=2)


@intrinsic
def crop_tile_2_rows(
    typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, keep, at, silu, low, high, alpha
):
    """:func:`crop_tile` of at most 2 output channels."""
    return _SIGNATURE, _codegen(4, crop=True, row_count=2)
