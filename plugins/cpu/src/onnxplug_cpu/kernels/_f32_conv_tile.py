"""The AVX-512 float32 tile of ``kernels._f32_conv`` and the compiled loops around it.

Imported only by :func:`kernels._f32_conv.loops`, after it has checked that numba is usable and
the CPU has AVX-512F: importing this module imports numba.  Module-level definitions (not a
closure) so that numba's on-disk cache recognises them from one process to the next, as
``kernels._vnni_tile``.

The tile (:func:`_tile`, LLVM IR through a numba intrinsic) computes :data:`ROWS` output channels
× 64 output columns: 24 accumulators (four 16-lane vectors per channel) start at zero; for each
input column ``k`` (channel and tap) the four vectors ``planes[offsets[k] + p0 : ... + 64]`` are
loaded and each channel's weight ``w[m, k]`` is broadcast and multiplied into its four
accumulators (``llvm.fma.v16f32``: one rounding per multiply-add, ``k`` in order).  Loads and
stores are masked to the ``valid`` columns of the last tile, so nothing past the output or the
planes is read or written; rows past the last channel read the last channel's weights and are
not stored.  LLVM keeps the accumulators in registers (24 of the 32 zmm).  A last tile of at
most 48, 32 or 16 columns takes a variant with that many vectors (``_tile_48`` …), so that the
masked-off vectors are not computed: a 14×14 map's 196 columns cost 208, not 256.  The store
adds the bias and a residual and clamps, in the epilogue's order, where the tiles write the
output itself.

:func:`convolve_images` is a whole convolution (gather, tiles, epilogue for every image) in one
call from Python, each stage split over numba's threading layer (``prange``) when its caller
asks for more than one part, which it does only where :func:`kernels._team.parallel_ready` says
that layer is safe.  The stages also have serial forms over a range (``nogil``), which
``kernels._f32_conv`` runs on Python threads where the layer is not safe; :func:`tiles_parallel`
serves the plain products (``kernels._f32_conv.matrix_product``).
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic

ROWS = 6
COLUMNS = 64
_F32, _I32, _I64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
_LANES = ir.VectorType(_F32, 16)
_INDICES = ir.VectorType(_I32, 16)
_MASK = ir.VectorType(ir.IntType(1), 16)


def _const(value: int):
    return ir.Constant(_I64, value)


def _splat(builder, value, vector_type):
    vector = builder.insert_element(ir.Constant(vector_type, ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(vector, ir.Constant(vector_type, ir.Undefined), ir.Constant(_INDICES, None))


def _codegen(vectors: int):
    """The tile's LLVM IR for ``vectors`` 16-lane column vectors (1 to 4)."""

    def codegen(context, builder, sig, args):
        w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, low, high = args
        module = builder.module
        vector_pointer = _LANES.as_pointer()
        fma = cgutils.get_or_insert_function(module, ir.FunctionType(_LANES, [_LANES] * 3), "llvm.fma.v16f32")
        load = cgutils.get_or_insert_function(
            module, ir.FunctionType(_LANES, [vector_pointer, _I32, _MASK, _LANES]), "llvm.masked.load.v16f32.p0"
        )
        store = cgutils.get_or_insert_function(
            module, ir.FunctionType(ir.VoidType(), [_LANES, vector_pointer, _I32, _MASK]), "llvm.masked.store.v16f32.p0"
        )
        weights = builder.inttoptr(w, _F32.as_pointer())
        source = builder.inttoptr(planes, _F32.as_pointer())
        target = builder.inttoptr(y, _F32.as_pointer())
        starts = builder.inttoptr(offsets, _I64.as_pointer())
        zero = ir.Constant(_LANES, None)
        four = ir.Constant(_I32, 4)
        lanes = ir.Constant(_INDICES, list(range(16)))
        valid32 = builder.trunc(valid, _I32)
        masks = [
            builder.icmp_signed("<", lanes, _splat(builder, builder.sub(valid32, ir.Constant(_I32, 16 * v)), _INDICES))
            for v in range(vectors)
        ]
        last = builder.sub(rows, _const(1))
        row_starts = [
            builder.mul(builder.select(builder.icmp_signed("<", _const(r), rows), _const(r), last), depth)
            for r in range(ROWS)
        ]
        accumulators = [[cgutils.alloca_once_value(builder, zero) for _ in range(vectors)] for _ in range(ROWS)]
        with cgutils.for_range(builder, depth) as k_loop:
            k = k_loop.index
            base = builder.add(builder.load(builder.gep(starts, [k])), p0)
            columns = []
            for v in range(vectors):
                address = builder.bitcast(builder.gep(source, [builder.add(base, _const(16 * v))]), vector_pointer)
                columns.append(builder.call(load, [address, four, masks[v], zero]))
            for r in range(ROWS):
                weight = builder.load(builder.gep(weights, [builder.add(row_starts[r], k)]))
                broadcast = _splat(builder, weight, _LANES)
                for v in range(vectors):
                    acc = accumulators[r][v]
                    builder.store(builder.call(fma, [broadcast, columns[v], builder.load(acc)]), acc)
        biases = builder.inttoptr(bias, _F32.as_pointer())
        has_bias = builder.icmp_signed("!=", bias, _const(0))
        residuals = builder.inttoptr(residual, _F32.as_pointer())
        has_residual = builder.icmp_signed("!=", residual, _const(0))
        # Without a residual its loads are masked off entirely (no address is touched) and the
        # sum is kept as it is: adding a zero would turn -0.0 into +0.0.
        residual_lanes = builder.select(has_residual, ir.Constant(_MASK, [1] * 16), ir.Constant(_MASK, None))
        residual_masks = [builder.and_(mask, residual_lanes) for mask in masks]
        lows, highs = _splat(builder, low, _LANES), _splat(builder, high, _LANES)
        for r in range(ROWS):
            with builder.if_then(builder.icmp_signed("<", _const(r), rows)):
                row = builder.add(builder.mul(_const(r), ldy), p0)
                with builder.if_else(has_bias) as (then, otherwise):
                    with then:
                        then_block = builder.block
                        shift = _splat(builder, builder.load(builder.gep(biases, [_const(r)])), _LANES)
                    with otherwise:
                        else_block = builder.block
                added = builder.phi(_LANES)
                added.add_incoming(shift, then_block)
                added.add_incoming(zero, else_block)
                for v in range(vectors):
                    value = builder.load(accumulators[r][v])
                    value = builder.select(has_bias, builder.fadd(value, added), value)
                    at = builder.bitcast(builder.gep(residuals, [builder.add(row, _const(16 * v))]), vector_pointer)
                    extra = builder.call(load, [at, four, residual_masks[v], zero])
                    value = builder.select(has_residual, builder.fadd(value, extra), value)
                    value = builder.select(builder.fcmp_ordered("<", value, lows), lows, value)
                    value = builder.select(builder.fcmp_ordered(">", value, highs), highs, value)
                    address = builder.bitcast(builder.gep(target, [builder.add(row, _const(16 * v))]), vector_pointer)
                    builder.call(store, [value, address, four, masks[v]])
        return context.get_dummy_value()

    return codegen


_SIGNATURE = types.void(*([types.intp] * 11), types.float32, types.float32)


@intrinsic
def _tile(typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, low, high):
    """``y[r·ldy + p0 + i] = clamp(sum_k w[r·depth + k] · planes[offsets[k] + p0 + i] + bias[r]
    + residual[r·ldy + p0 + i])`` for ``r < rows`` (at most ROWS) and ``i < valid`` (at most
    COLUMNS), added in that order and clamped to ``[low, high]`` as the epilogue does (NaN
    kept); ``bias`` and ``residual`` pointers or 0 for none; pointers and sizes as integers."""
    return _SIGNATURE, _codegen(4)


@intrinsic
def _tile_48(typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, low, high):
    """:func:`_tile` for at most 48 valid columns (three vectors: the masked fourth is not computed)."""
    return _SIGNATURE, _codegen(3)


@intrinsic
def _tile_32(typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, low, high):
    """:func:`_tile` for at most 32 valid columns."""
    return _SIGNATURE, _codegen(2)


@intrinsic
def _tile_16(typingctx, w, planes, y, offsets, depth, p0, valid, rows, ldy, bias, residual, low, high):
    """:func:`_tile` for at most 16 valid columns."""
    return _SIGNATURE, _codegen(1)


@numba.njit(cache=True, nogil=True)
def tiles(w, planes, offsets, acc, columns, groups, group_stride, b, z, low, high, t0, t1):  # pragma: no cover
    """Tiles ``[t0, t1)`` of ``acc[:, :columns] = clamp(w @ implicit(planes, offsets) + b + z)``
    (``b`` and ``z`` empty for none, ``z`` laid out as ``acc``; ``low``/``high`` ``-inf``/``inf``
    for no clamp).  The rows of ``w`` form ``groups`` equal groups; group ``g`` reads the planes
    from ``g · group_stride`` values on (its block of input channels).  Tile ``t`` is column tile
    ``t // row_tiles``, then the group, then the channel tile within it: consecutive tiles share
    their input columns, which stay in cache."""
    m, depth = w.shape
    per_group = m // groups
    m_tiles = (per_group + ROWS - 1) // ROWS
    row_tiles = groups * m_tiles
    ldy = acc.shape[1]
    has_b = b.shape[0] > 0
    has_z = z.shape[0] > 0
    for t in range(t0, t1):
        column_tile = t // row_tiles
        r = t - column_tile * row_tiles
        g = r // m_tiles
        m0 = g * per_group + (r - g * m_tiles) * ROWS
        p0 = column_tile * COLUMNS
        valid = min(COLUMNS, columns - p0)
        arguments = (
            w[m0].ctypes.data,
            planes.ctypes.data + 4 * g * group_stride,
            acc[m0].ctypes.data,
            offsets.ctypes.data,
            depth,
            p0,
            valid,
            min(ROWS, (g + 1) * per_group - m0),
            ldy,
            b[m0:].ctypes.data if has_b else 0,
            z[m0].ctypes.data if has_z else 0,
        )
        # A short last tile (196 columns at 14×14: 3 tiles of 64 and 4 columns) computes only
        # the vectors it stores.
        if valid > 48:
            _tile(*arguments, low, high)
        elif valid > 32:
            _tile_48(*arguments, low, high)
        elif valid > 16:
            _tile_32(*arguments, low, high)
        else:
            _tile_16(*arguments, low, high)


def tile_count(rows: int, groups: int, columns: int) -> int:
    """How many tiles :func:`tiles` computes for ``rows`` weight rows in ``groups`` groups."""
    return groups * -(-(rows // groups) // ROWS) * -(-columns // COLUMNS)


@numba.njit(cache=True, nogil=True, parallel=True)
def tiles_parallel(w, planes, offsets, acc, columns, groups, group_stride, b, z, low, high, parts):  # pragma: no cover
    count = groups * ((w.shape[0] // groups + ROWS - 1) // ROWS) * ((columns + COLUMNS - 1) // COLUMNS)
    for part in prange(parts):
        lo, hi = count * part // parts, count * (part + 1) // parts
        tiles(w, planes, offsets, acc, columns, groups, group_stride, b, z, low, high, lo, hi)


@numba.njit(cache=True, nogil=True)
def gather(x, planes, sh, sw, top, left, phases, hq, wq, c0, c1):  # pragma: no cover - compiled
    """Channels ``[c0, c1)`` of ``x`` ``(C, H, W)`` into the phase images ``planes`` ``(P, C,
    length)`` (``kernels._conv_geometry``), zero where the padding or the tiles' overrun is.
    Each plane is zeroed, then each input row copied through views that start at the first cell
    read: a loop index that is never negative keeps numba's wraparound checks out, so the
    stride-1 copy vectorises (indexing ``row[base + i]`` ran 5x slower)."""
    _, height, width = x.shape
    for p in range(phases.shape[0]):
        py = phases[p, 0]
        px = phases[p, 1]
        first = max(0, -((px - left) // sw))  # the first column with ix·sw + px - left >= 0
        last = min(wq, (width - 1 - px + left) // sw + 1) if width - 1 - px + left >= 0 else 0
        count = max(0, last - first)
        base = first * sw + px - left
        for c in range(c0, c1):
            plane = planes[p, c]
            for i in range(plane.shape[0]):
                plane[i] = 0.0
            if count == 0:
                continue
            for iy in range(hq):
                sy = iy * sh + py - top
                if sy < 0 or sy >= height:
                    continue
                target = plane[iy * wq + first :]
                source = x[c, sy, base:]
                if sw == 1:
                    for i in range(count):
                        target[i] = source[i]
                elif sw == 2:  # a constant stride: LLVM's interleaved loads, not a gather
                    for i in range(count):
                        target[i] = source[2 * i]
                else:
                    for i in range(count):
                        target[i] = source[i * sw]


@numba.njit(cache=True, nogil=True)
def finish(acc, wq, ow, b, z, low, high, y, m0, m1):  # pragma: no cover - compiled
    """Channels ``[m0, m1)`` of ``y`` ``(M, OH·OW)``: the sums ``acc`` (columns ``oy·wq + ox``),
    plus ``b[m]`` (if ``b`` is not empty), plus ``z`` ``(M, OH·OW)`` (if not empty), then clamped
    to ``[low, high]``, in that order (``kernels._epilogue``'s numerics).  ``acc`` may be ``y``
    itself when ``wq == ow``.  Rows through views, as :func:`gather`."""
    has_b, has_z = b.shape[0] > 0, z.shape[0] > 0
    rows = y.shape[1] // ow if ow else 0
    for m in range(m0, m1):
        bias = b[m] if has_b else np.float32(0)
        for oy in range(rows):
            source = acc[m, oy * wq :]
            target = y[m, oy * ow :]
            if has_z:
                residual = z[m, oy * ow :]
                for i in range(ow):
                    v = source[i] + bias if has_b else source[i]
                    v = v + residual[i]
                    v = low if v < low else v
                    target[i] = high if v > high else v
            else:
                for i in range(ow):
                    v = source[i] + bias if has_b else source[i]
                    v = low if v < low else v
                    target[i] = high if v > high else v


@numba.njit(cache=True, nogil=True, parallel=True)
def convolve_images(  # pragma: no cover - compiled
    x,
    w,
    planes,
    offsets,
    acc,
    y,
    columns,
    groups,
    group_stride,
    b,
    z,
    low,
    high,
    no_b,
    no_z,
    sh,
    sw,
    top,
    left,
    phases,
    hq,
    wq,
    ow,
    in_place,
    gather_parts,
    tile_parts,
    finish_parts,
):
    """A whole convolution in one call (one dispatch from Python instead of three per image).

    For each image of ``x`` ``(N, C, H, W)``: the gather into the phase images ``planes`` (unless
    ``in_place``: a pointwise stride-1 layer reads ``x`` itself), the tiles, then the epilogue
    into ``y`` ``(N, M, OH·OW)``.  Where the computed columns are the output's (``wq == ow``) the
    tiles store ``y`` directly with the bias, the residual ``z`` (``(N, M, OH·OW)``, or
    ``(N, 0, 0)`` for none) and the clamp; otherwise they fill ``acc`` and :func:`finish` crops
    it.  ``no_b`` ``(0,)`` and ``no_z`` ``(0, 0)`` are the empty bias and residual the tiles get
    then.  Each stage runs in ``*_parts`` ranges, over numba's threading layer when more than one
    (the caller has checked that the layer is safe, ``kernels._team``)."""
    channels = x.shape[1]
    direct = wq == ow
    count = groups * ((w.shape[0] // groups + ROWS - 1) // ROWS) * ((columns + COLUMNS - 1) // COLUMNS)
    for image in range(x.shape[0]):
        residual = z[image]
        if in_place:
            source = x[image].reshape(x[image].size)
        else:
            if gather_parts <= 1:
                gather(x[image], planes, sh, sw, top, left, phases, hq, wq, 0, channels)
            else:
                for part in prange(gather_parts):
                    lo, hi = channels * part // gather_parts, channels * (part + 1) // gather_parts
                    gather(x[image], planes, sh, sw, top, left, phases, hq, wq, lo, hi)
            source = planes.reshape(planes.size)
        target = y[image] if direct else acc
        tile_b = b if direct else no_b
        tile_z = residual if direct else no_z
        floor = low if direct else np.float32(-np.inf)
        ceiling = high if direct else np.float32(np.inf)
        if tile_parts <= 1:
            tiles(w, source, offsets, target, columns, groups, group_stride, tile_b, tile_z, floor, ceiling, 0, count)
        else:
            for part in prange(tile_parts):
                lo, hi = count * part // tile_parts, count * (part + 1) // tile_parts
                tiles(w, source, offsets, target, columns, groups, group_stride, tile_b, tile_z, floor, ceiling, lo, hi)
        if not direct:
            m = y.shape[1]
            if finish_parts <= 1:
                finish(acc, wq, ow, b, residual, low, high, y[image], 0, m)
            else:
                for part in prange(finish_parts):
                    lo, hi = m * part // finish_parts, m * (part + 1) // finish_parts
                    finish(acc, wq, ow, b, residual, low, high, y[image], lo, hi)
