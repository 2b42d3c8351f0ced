"""The compiled loops around the float32 tile of ``kernels._f32_conv`` (``kernels._f32_tile_ir``).

Imported only by :func:`kernels._f32_conv.loops`, after it has checked that numba is usable and
the CPU has AVX-512F: importing this module imports numba.  Module-level definitions (not
closures) so that numba's on-disk cache recognises them from one process to the next, as
``kernels._vnni_tile``.

:func:`convolve_images` is a whole convolution (the gather, then the tiles storing the output
with the bias, the residual and the clamp, for every image) in one call from Python, each stage
split over numba's threading layer (``prange``) when its caller asks for more than one part,
which it does only where :func:`kernels._team.parallel_ready` says that layer is safe.  The
stages also have serial forms over a range (``nogil``), which ``kernels._f32_conv`` runs on
Python threads where the layer is not safe; :func:`tiles_parallel` serves the plain products
(``kernels._f32_products.matrix_product``).
"""

from __future__ import annotations

import numba
from numba import prange, types

from ._f32_conv_gather import PHASES as _PHASES
from ._f32_conv_gather import array_type as _array
from ._f32_conv_gather import gather
from ._f32_conv_tail import tail_inputs, tail_rows
from ._f32_tile_ir import (
    COLUMNS,
    ROWS,
    crop_tile,
    crop_tile_2_rows,
    crop_tile_16,
    crop_tile_32,
    crop_tile_48,
    masked_tile,
    masked_tile_16,
    masked_tile_32,
    masked_tile_48,
    prefetching_tile,
    tile,
    tile_2_rows,
    tile_16,
    tile_32,
    tile_48,
)

#: A full tile reading whole planes (a pointwise layer in place, a plain product: ``offsets``
#: ``k`` planes apart) at least this deep prefetches, for each ``k``, its lines ``PREFETCH_PLANES``
#: planes on: each ``k`` reads a plane kilobytes from the last, where the hardware's prefetchers
#: do not follow, and past ~192 planes a column tile's reads no longer stay in L1 between row
#: tiles.  Layers alone, two threads (hand-made A/B, processes alternating): 256 → 512 at 28×28
#: 470-498 → 432-465 µs, 1024 → 256 at 14×14 238-260 → 230-246, 512 → 128 at 28×28 228-246 →
#: 219-231, 256 → 64 at 56×56 254-257 → 224-234; shallower layers (64, 128 deep) unchanged
#: either way, so they do not prefetch.
PREFETCH_PLANES = 2
PREFETCH_MIN_DEPTH = 192

__all__ = [
    "COLUMNS",
    "ROWS",
    "convolve_images",
    "gather",
    "tail_inputs",
    "tail_rows",
    "tile_count",
    "tiles",
    "tiles_parallel",
]


# Each loop is compiled for one signature, when this module is imported (or loaded from numba's
# cache), with every array it only reads typed read-only.  A writable array converts to a
# read-only one at the call; left to compile per call, numba made a specialisation for every mix
# of read-only (a model's initializers) and writable arguments: 16 of `convolve_images`, each
# ~13 s of LLVM on a cold cache, which was most of the CPU plugin's test time.
_INT, _F32 = types.int64, types.float32
_W, _PLANES, _OFFSETS = _array(_F32, 2), _array(_F32, 1), _array(_INT, 1)
_BIAS, _KEEP, _AT = _array(_F32, 1), _array(types.uint16, 1), _array(_INT, 1)
# w, planes, offsets, y, columns, groups, group_stride, b, z, low, high, keep, at, chunk, alpha,
# masked, tail
_TILE_ARGUMENTS = (_W, _PLANES, _OFFSETS, _array(_F32, 2, read_only=False), _INT, _INT, _INT, _BIAS)
_TILE_ARGUMENTS += (_array(_F32, 2), _F32, _F32, _KEEP, _AT, _INT, _F32, types.boolean, _INT)


@numba.njit(cache=True, nogil=True, inline="always")
def _tile_arguments(
    w, planes, offsets, y, columns, per_group, group_stride, b, z, keep, at, g, row, column_tile, mask_step
):  # pragma: no cover - compiled
    """The pointer and size arguments (see :func:`tiles` for the order) of the tile of row tile
    ``row`` of group ``g`` and column tile ``column_tile``, its valid columns and its rows (output
    channels)."""
    m0 = g * per_group + row * ROWS
    p0 = column_tile * COLUMNS
    valid = min(COLUMNS, columns - p0)
    rows = min(ROWS, (g + 1) * per_group - m0)
    arguments = (
        w[m0].ctypes.data,
        planes.ctypes.data + 4 * g * group_stride,
        y[m0].ctypes.data,
        offsets.ctypes.data,
        w.shape[1],
        p0,
        valid,
        rows,
        y.shape[1],
        b[m0:].ctypes.data if b.shape[0] > 0 else 0,
        z[m0].ctypes.data if z.shape[0] > 0 else 0,
        keep.ctypes.data,
        at.ctypes.data + mask_step * column_tile,
    )
    return arguments, valid, rows


@numba.njit(cache=True, nogil=True, inline="always")
def _tile_order(w, columns, groups, chunk, t0):  # pragma: no cover - compiled
    """Where tile ``t0`` lies in :func:`tiles`' order: chunks of ``chunk`` column tiles, each all
    its row tiles (group after group), row tile after row tile, each across the chunk's column
    tiles (the last chunk may be narrower).  ``(m_tiles, column_tiles, chunk index, chunk width,
    group, row tile in the group, column tile in the chunk)``; :func:`_next_tile` steps on without
    the divisions (four integer divisions a tile cost a 16-deep layer 15 % of its time, a 64-deep
    one 7 %).  ``t0`` is a tile (not past the last)."""
    m_tiles = (w.shape[0] // groups + ROWS - 1) // ROWS
    row_tiles = groups * m_tiles
    column_tiles = (columns + COLUMNS - 1) // COLUMNS
    full = row_tiles * chunk
    q = t0 // full
    width = min(chunk, column_tiles - q * chunk)
    rest = t0 - q * full
    r = rest // width
    g = r // m_tiles
    return m_tiles, column_tiles, q, width, g, r - g * m_tiles, rest - r * width


@numba.njit(cache=True, nogil=True, inline="always")
def _next_tile(m_tiles, groups, column_tiles, chunk, q, width, g, row, column):  # pragma: no cover - compiled
    """The tile after ``(q, width, g, row, column)`` in :func:`_tile_order`'s terms."""
    column += 1
    if column == width:
        column = 0
        row += 1
        if row == m_tiles:
            row = 0
            g += 1
            if g == groups:
                g = 0
                q += 1
                width = min(chunk, column_tiles - q * chunk)
    return q, width, g, row, column


@numba.njit(cache=True, nogil=True)
def _unmasked_range(
    w, planes, offsets, y, columns, groups, group_stride, b, z, low, high, keep, at, chunk, alpha, t0, t1
):  # pragma: no cover - compiled
    """:func:`tiles` on planes (or a pointwise layer's input) read whole: cropping through
    ``keep``/``at`` where they are not empty."""
    if t1 <= t0:
        return  # (an empty range: no tile to place)
    silu = 0 if alpha != alpha else 1  # NaN: no SiLU
    crop = keep.shape[0] > 0
    per_group = w.shape[0] // groups
    ahead = 0
    if offsets.shape[0] >= PREFETCH_MIN_DEPTH and offsets[1] - offsets[0] >= COLUMNS:  # planes apart
        ahead = PREFETCH_PLANES * (offsets[1] - offsets[0])
    m_tiles, column_tiles, q, width, g, row, column = _tile_order(w, columns, groups, chunk, t0)
    for _ in range(t0, t1):
        arguments, valid, rows = _tile_arguments(
            w, planes, offsets, y, columns, per_group, group_stride, b, z, keep, at, g, row, q * chunk + column, 0
        )
        q, width, g, row, column = _next_tile(m_tiles, groups, column_tiles, chunk, q, width, g, row, column)
        # A short last tile (196 columns at 14×14: 3 tiles of 64 and 4 columns) computes only
        # the vectors it stores, and a full-width last row tile of one or two channels only those
        # (not in the masked loop: see kernels._f32_tile_ir).
        if crop:
            if valid > 48:
                if rows <= 2:
                    crop_tile_2_rows(*arguments, silu, low, high, alpha)
                else:
                    crop_tile(*arguments, silu, low, high, alpha)
            elif valid > 32:
                crop_tile_48(*arguments, silu, low, high, alpha)
            elif valid > 16:
                crop_tile_32(*arguments, silu, low, high, alpha)
            else:
                crop_tile_16(*arguments, silu, low, high, alpha)
        elif valid > 48:
            if rows <= 2:
                tile_2_rows(*arguments, silu, low, high, alpha)
            elif ahead > 0:  # (its ``keep`` argument is the distance: plain tiles have no crop table)
                prefetching_tile(*arguments[:11], ahead, arguments[12], silu, low, high, alpha)
            else:
                tile(*arguments, silu, low, high, alpha)
        elif valid > 32:
            tile_48(*arguments, silu, low, high, alpha)
        elif valid > 16:
            tile_32(*arguments, silu, low, high, alpha)
        else:
            tile_16(*arguments, silu, low, high, alpha)


@numba.njit(cache=True, nogil=True)
def _masked_range(
    w,
    planes,
    offsets,
    y,
    columns,
    groups,
    group_stride,
    b,
    z,
    low,
    high,
    keep,
    at,
    chunk,
    alpha,
    all_columns,
    t0,
    t1,
):  # pragma: no cover - compiled
    """:func:`tiles` reading a layer's input in place through the ``masked_*`` tiles (a function
    of its own: see ``kernels._f32_tile_ir``); ``columns`` of the layer's ``all_columns`` (the
    lane masks' table has a row of taps for each of their tiles)."""
    if t1 <= t0:
        return
    silu = 0 if alpha != alpha else 1
    step = 8 * (at.shape[0] // ((all_columns + COLUMNS - 1) // COLUMNS))  # lane masks' bytes per column tile
    per_group = w.shape[0] // groups
    m_tiles, column_tiles, q, width, g, row, column = _tile_order(w, columns, groups, chunk, t0)
    for _ in range(t0, t1):
        arguments, valid, _ = _tile_arguments(
            w, planes, offsets, y, columns, per_group, group_stride, b, z, keep, at, g, row, q * chunk + column, step
        )
        q, width, g, row, column = _next_tile(m_tiles, groups, column_tiles, chunk, q, width, g, row, column)
        if valid > 48:
            masked_tile(*arguments, silu, low, high, alpha)
        elif valid > 32:
            masked_tile_48(*arguments, silu, low, high, alpha)
        elif valid > 16:
            masked_tile_32(*arguments, silu, low, high, alpha)
        else:
            masked_tile_16(*arguments, silu, low, high, alpha)


@numba.njit(types.void(*_TILE_ARGUMENTS, _INT, _INT), cache=True, nogil=True)
def tiles(  # pragma: no cover - compiled
    w,
    planes,
    offsets,
    y,
    columns,
    groups,
    group_stride,
    b,
    z,
    low,
    high,
    keep,
    at,
    chunk,
    alpha,
    masked,
    tail,
    t0,
    t1,
):
    """Tiles ``[t0, t1)`` of ``y = silu(clamp(w @ implicit(planes, offsets) + b + z))`` over
    the first ``columns - tail`` of ``columns`` computed columns (the last ``tail`` are left to
    :func:`tail_rows`) (``b`` and ``z`` empty for none, ``z`` laid out as ``y``;
    ``low``/``high`` ``-inf``/``inf`` for no clamp; ``silu(v) = v / (1 + exp(-alpha·v))``, none
    where ``alpha`` is NaN).  With ``keep``/``at`` not empty the computed columns are a gathered
    layer's ``oy·Wq + ox`` and the tiles store only the kept ones, at their output positions
    (``kernels._f32_tile_ir.crop_tile``); otherwise column ``i`` is ``y[:, i]``.  ``masked``: the
    planes are the input itself and ``keep``/``at`` are each ``k``'s tap and each column tile's
    lane masks per tap (``kernels._f32_tile_ir.masked_tile``; ``at`` holds ``taps`` int64 a column
    tile, column tile after column tile), the padding's lanes read as zeros.  The rows of
    ``w`` form ``groups`` equal groups; group ``g`` reads the planes from ``g · group_stride``
    values on (its block of input channels).

    The tiles run in chunks of ``chunk`` column tiles, each chunk's row tiles (the group, then
    the channel tile within it) one after another, each across the chunk's column tiles.  One
    column tile a chunk is column-major order: consecutive tiles share their input columns, which
    stay in cache.  A chunk of every column tile is weights-first order, for layers whose weights
    outweigh their input: each tile's weights then stay in cache across the columns, where
    column-major order streamed all the weights once per column tile (ocr_rec's 256-channel
    layers on 4×40 maps: 1196 against 949 µs).  Between the two, a chunk whose input stays in a
    core's cache: each output row is then written in runs of the chunk's columns instead of 64
    at a time (``kernels._f32_conv.ConvPlan``)."""
    main = columns - tail
    arguments = (w, planes, offsets, y, main, groups, group_stride, b, z, low, high, keep, at, chunk, alpha)
    if masked:
        _masked_range(*arguments, columns, t0, t1)
    else:
        _unmasked_range(*arguments, t0, t1)


def tile_count(rows: int, groups: int, columns: int) -> int:
    """How many tiles :func:`tiles` computes for ``rows`` weight rows in ``groups`` groups over
    ``columns`` (without a tail)."""
    return groups * -(-(rows // groups) // ROWS) * -(-columns // COLUMNS)


@numba.njit(types.void(*_TILE_ARGUMENTS, _INT), cache=True, nogil=True, parallel=True)
def tiles_parallel(
    w,
    planes,
    offsets,
    y,
    columns,
    groups,
    group_stride,
    b,
    z,
    low,
    high,
    keep,
    at,
    chunk,
    alpha,
    masked,
    tail,
    parts,
):  # pragma: no cover
    """:func:`tiles` over all its tiles in ``parts`` ranges on numba's threading layer (the last
    ``tail`` columns, as there, left to :func:`tail_rows`)."""
    count = groups * ((w.shape[0] // groups + ROWS - 1) // ROWS) * ((columns - tail + COLUMNS - 1) // COLUMNS)
    for part in prange(parts):
        lo, hi = count * part // parts, count * (part + 1) // parts
        fused = (b, z, low, high, keep, at, chunk, alpha, masked, tail)
        tiles(w, planes, offsets, y, columns, groups, group_stride, *fused, lo, hi)


#: Bytes of weights a block of row tiles holds whose dot products (the tail) follow its tiles.
TAIL_BLOCK_BYTES = 128 << 10

_CONVOLVE_ARGUMENTS = (_array(_F32, 4), _W, _array(_F32, 3, read_only=False), _OFFSETS)
_CONVOLVE_ARGUMENTS += (_array(_F32, 3, read_only=False), _INT, _INT, _INT, _BIAS, _array(_F32, 3), _F32, _F32)
_CONVOLVE_ARGUMENTS += (_KEEP, _AT, _INT, _F32, types.boolean, _INT)
_CONVOLVE_ARGUMENTS += (_INT, _INT, _INT, _INT, _PHASES, _INT, _INT, types.boolean)


@numba.njit(types.void(*_CONVOLVE_ARGUMENTS, _INT, _INT), cache=True, nogil=True, parallel=True)
def convolve_images(  # pragma: no cover - compiled
    x,
    w,
    planes,
    offsets,
    y,
    columns,
    groups,
    group_stride,
    b,
    z,
    low,
    high,
    keep,
    at,
    chunk,
    alpha,
    masked,
    tail,
    sh,
    sw,
    top,
    left,
    phases,
    hq,
    wq,
    in_place,
    gather_parts,
    tile_parts,
):
    """A whole convolution in one call (one dispatch from Python instead of one per stage).

    For each image of ``x`` ``(N, C, H, W)``: the gather into the phase images ``planes`` (unless
    ``in_place``: a pointwise stride-1 layer, or a ``masked`` one, reads ``x`` itself), then the
    tiles, which store
    ``y`` ``(N, M, OH·OW)`` with the bias, the residual ``z`` (``(N, M, OH·OW)``, or ``(N, 0,
    0)`` for none), the clamp and the SiLU (``alpha``, NaN for none), cropping through
    ``keep``/``at`` where the computed columns are not the output's (or, ``masked``, masking the
    padding's lanes through them: :func:`tiles`).  Each stage runs in
    ``*_parts`` ranges, over numba's threading layer when more than one (the caller has checked
    that the layer is safe, ``kernels._team``)."""
    channels = x.shape[1]
    row_tiles = groups * ((w.shape[0] // groups + ROWS - 1) // ROWS)
    main = columns - tail
    count = row_tiles * ((main + COLUMNS - 1) // COLUMNS)
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
        target = y[image]
        fused = (b, residual, low, high, keep, at, chunk, alpha, masked, tail)
        # (allocated in a serial function: numba turns an allocation in a parallel one into a
        # parallel region of its own, a thread team's start and stop each call, ~5 µs)
        inputs = tail_inputs(source, offsets, keep, at, masked, columns, main, groups, group_stride, w.shape[1])
        if tail > 0 and chunk * COLUMNS >= main:
            # Each block of row tiles' dot products right after its tiles, while its weights are
            # in cache (a 7×7 map: one tile a row tile): read again after all the tiles, the
            # weights of a 512-channel 3×3 layer (9 MB) came from memory a second time.  Blocks
            # of about TAIL_BLOCK_BYTES of weights, not single row tiles: two calls per row tile
            # cost 160 → 960 channels at 7×7 a quarter of its time (50 against 40 µs).
            column_tiles = count // row_tiles
            block = max(1, TAIL_BLOCK_BYTES // (4 * ROWS * w.shape[1]))
            for part in prange(tile_parts):
                lo, hi = row_tiles * part // tile_parts, row_tiles * (part + 1) // tile_parts
                for r in range(lo, hi, block):
                    end = min(hi, r + block)
                    tiles(
                        w,
                        source,
                        offsets,
                        target,
                        columns,
                        groups,
                        group_stride,
                        *fused,
                        r * column_tiles,
                        end * column_tiles,
                    )
                    tail_rows(w, inputs, target, main, groups, b, residual, low, high, alpha, r, end)
        elif tile_parts <= 1:
            tiles(w, source, offsets, target, columns, groups, group_stride, *fused, 0, count)
            if tail > 0:
                tail_rows(w, inputs, target, main, groups, b, residual, low, high, alpha, 0, row_tiles)
        else:
            for part in prange(tile_parts):
                lo, hi = count * part // tile_parts, count * (part + 1) // tile_parts
                tiles(w, source, offsets, target, columns, groups, group_stride, *fused, lo, hi)
                if tail > 0:
                    lo, hi = row_tiles * part // tile_parts, row_tiles * (part + 1) // tile_parts
                    tail_rows(w, inputs, target, main, groups, b, residual, low, high, alpha, lo, hi)
