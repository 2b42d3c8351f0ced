"""Where a float32 convolution's tiles read and store (``kernels._f32_conv``): the offsets of
each weight column in the padded (phase-split) planes or in the input itself, the lane masks of a
layer read in place on a small map, the columns computed as dot products at a row's end, and the
crop tables of the columns a padded layer's tiles compute but the output does not keep.

Why a module of its own: these are pure tables of the layer's shape and attributes, worked out
once per shape (cached) and read by ``kernels._f32_conv``'s plan; they need no numba.
"""

from __future__ import annotations

import functools

import numpy as np

from ._conv_geometry import PhaseGeometry

__all__ = [
    "COLUMNS",
    "MASKED_ALWAYS_CELLS",
    "MASKED_SHARE",
    "TAIL_COLUMNS",
    "crop_tables",
    "layout",
    "masked_layout",
    "tail_columns",
]

#: Output columns a tile computes (``kernels._f32_tile_ir.COLUMNS``, which imports numba).
COLUMNS = 64
#: A stride-1 layer is read masked (:func:`masked_layout`) where that computes at most this share
#: of the columns the padded planes do.
MASKED_SHARE = 0.95
#: ... and on maps of up to this many cells whatever the share: without the padded planes' copy a
#: ResNet-50's 56×56 layers (64 channels, 3×3) ran its whole model 4-5 % faster (24.4-24.7 →
#: 23.1-23.6 ms, alternating runs), where their columns alone saved 3 %.
MASKED_ALWAYS_CELLS = 56 * 56
#: Lane masks (one int64 per tap and column tile) a masked layer's table may hold (32 MiB).
MAX_LANE_MASKS = 1 << 22

#: A layer read in place whose columns end this many or fewer past a multiple of 16 computes
#: those last columns as dot products (``_f32_conv_tail.tail_rows``) instead of one more 16-lane
#: vector a tile: a 7×7 map's 49 columns cost 48 and a dot product, not 64.  Weights-first
#: layers take each block of row tiles' dot products right after its tiles, while its weights
#: are in cache (``_f32_conv_tile.TAIL_BLOCK_BYTES``).  At two threads, at 7×7, against 64
#: columns: 2048 → 512 channels pointwise 265-269 → 233 µs, 512 → 2048 269-274 → 236, a 3×3
#: 512 → 512 578-592 → 495-500, 160 → 960 46 → 42 (six rows' dot products together,
#: ``_f32_conv_tail.row_dots``).  Not more: four columns (14×14, 10×10) lost 0-25 % (64 → 256
#: channels at 10×10: 15 → 16-19 µs), even as four columns' dot products at once (below).
TAIL_COLUMNS = 2
#: ... and up to this many where each dot product is at least :data:`WIDE_TAIL_DEPTH` long, four
#: columns at once (``_f32_conv_tail.row_dots_4``: each row's weights read once for them): a
#: 14×14 map's last four of 196 columns.  At two threads, against the tiles' 16-lane vector for
#: them: 1024 → 256 pointwise 233 → 220 µs, a 3×3 256 → 256 485 → 455 (and at one thread 442 →
#: 410, 957 → 878); shallower, the dot products' closing sums cost more than they save (256 →
#: 1024 pointwise 235 → 223 but 256 → 256 67 → 65 and 128 → 256 43 → 45, a 3×3 64 → 64 43 → 44),
#: and nine columns (13×13) lost 8-25 % at every depth tried (up to 1152).
WIDE_TAIL_COLUMNS = 4
WIDE_TAIL_DEPTH = 1024


@functools.lru_cache(maxsize=512)
def layout(shape: tuple, groups: int, kernel: tuple, strides, dilations, pads, auto_pad: str):
    """``(geometry, offsets, in_place, group_stride)`` for input ``shape`` ``(C, H, W)`` in
    ``groups`` channel groups.  The offsets (int64, one per weight column of a group,
    channel-major as the weights) index the phase images laid out ``(P, C, length)``; or, when
    ``in_place`` (a pointwise stride-1 convolution without padding, whose computed columns are
    the output's), the input itself.  Group ``g`` reads from ``g · group_stride`` values on."""
    conv = {"strides": strides, "dilations": dilations, "pads": pads, "auto_pad": auto_pad}
    geometry = PhaseGeometry(shape[1:], kernel, conv, "Conv")
    channels, height, width = shape
    in_place = geometry.shifts == [0] and geometry.wq == width and geometry.hq == height and not any(geometry.pads)
    plane = height * width if in_place else geometry.length
    taps = geometry.tap_offsets(channels * plane)
    per_group = channels // groups
    offsets = (np.arange(per_group, dtype=np.int64)[:, None] * plane + taps[None, :]).reshape(-1)
    offsets.flags.writeable = False
    return geometry, offsets, in_place, per_group * plane


def _computed(columns: int) -> int:
    """The columns the tiles compute for ``columns``: whole tiles, then the last one's vectors."""
    return columns // COLUMNS * COLUMNS + -(-(columns % COLUMNS) // 16) * 16


def tail_columns(columns: int, depth: int) -> int:
    """How many of a layer's last ``columns`` (read in place) are dot products of ``depth`` values
    each (:data:`TAIL_COLUMNS`, :data:`WIDE_TAIL_COLUMNS`)."""
    rest = columns % 16
    if columns <= 16:
        return 0
    if rest <= TAIL_COLUMNS or (rest <= WIDE_TAIL_COLUMNS and depth >= WIDE_TAIL_DEPTH):
        return rest
    return 0


@functools.lru_cache(maxsize=512)
def masked_layout(shape: tuple, groups: int, kernel: tuple, strides, dilations, pads, auto_pad: str):
    """``(offsets, taps, lane_masks)`` for reading a stride-1 layer whose output rows are as wide
    as its input's (``same`` padding across) from the input itself, or ``None`` for other
    layers (and for pointwise ones without padding, which :func:`layout` reads in place).

    Why: the padded planes (:func:`layout`) cost a copy of the input and compute ``Wq - OW``
    padding columns a row, which on small maps are a large share (2 of 22 at 20×20, and the
    last tile's rounding: 448 columns computed for 400); masked, the columns are the output's.
    At two threads, masked against padded: 64 → 64 channels at 20×20 67 against 81 µs, 64 → 256
    at 13×13 113 against 139, 128 → 128 at 14×14 140 against 146; at 56×56 and 7×7 within 2 %
    alone, but inside VGG-19's runs its 112×112 and 224×224 layers ran 5-10 % slower masked.  So
    a layer is masked only where that computes at most :data:`MASKED_SHARE` of the padded
    planes' columns (the dot products' tail counted: a 7×7 map's 49 columns cost 48, not 64), or
    on maps of up to :data:`MASKED_ALWAYS_CELLS` cells.

    Output column ``p = oy·W + ox`` of tap ``(ky, kx)`` reads ``p + (ky·dh - top)·W + kx·dw -
    left`` in its channel's plane; the lanes whose cell falls outside the map (the padding) are
    masked off and read as zeros, the padded planes' values.  ``offsets`` (int64, per weight
    column of a group, channel-major as the weights), ``taps`` (uint16 per weight column: the
    tap's index) and ``lane_masks`` (int64, ``taps`` per 64-column tile: bit ``16·v + i`` set
    where lane ``i`` of vector ``v`` reads the map)."""
    channels, height, width = shape
    geometry, _, in_place, _ = layout(shape, groups, kernel, strides, dilations, pads, auto_pad)
    (oh, ow), (top, left) = geometry.out, geometry.pads
    if in_place or geometry.stride != (1, 1) or ow != width or kernel[0] * kernel[1] > np.iinfo(np.uint16).max:
        return None
    columns = oh * width
    depth = channels // groups * kernel[0] * kernel[1]
    share = _computed(columns - tail_columns(columns, depth)) / _computed(geometry.columns)
    if share > MASKED_SHARE and height * width > MASKED_ALWAYS_CELLS:
        return None
    if -(-columns // COLUMNS) * kernel[0] * kernel[1] > MAX_LANE_MASKS:
        return None  # a huge kernel on a large map: the padded planes, without a table this size
    dh, dw = tuple(dilations) if dilations else (1, 1)
    shifts = [(ky * dh - top, kx * dw - left) for ky in range(kernel[0]) for kx in range(kernel[1])]
    plane = height * width
    per_group = channels // groups
    flat = np.array([dy * width + dx for dy, dx in shifts], dtype=np.int64)
    offsets = (np.arange(per_group, dtype=np.int64)[:, None] * plane + flat[None, :]).reshape(-1)
    taps = np.tile(np.arange(len(shifts), dtype=np.uint16), per_group)
    tiles = -(-columns // COLUMNS)
    p = np.arange(tiles * COLUMNS)
    oy, ox = p // width, p % width
    lane_masks = np.empty((tiles, len(shifts)), dtype=np.int64)
    for tap, (dy, dx) in enumerate(shifts):
        inside = (p < columns) & (0 <= oy + dy) & (oy + dy < height) & (0 <= ox + dx) & (ox + dx < width)
        lane_masks[:, tap] = np.packbits(inside.reshape(tiles, COLUMNS), axis=1, bitorder="little").view("<i8")[:, 0]
    lane_masks = lane_masks.reshape(-1)
    for table in (offsets, taps, lane_masks):
        table.flags.writeable = False
    return offsets, taps, lane_masks


def crop_tables(columns: int, wq: int, ow: int) -> tuple[np.ndarray, np.ndarray]:
    """For computed columns ``q = oy·wq + ox`` (``ox < wq``), per 16-column vector: the bits of the
    lanes the output keeps (``ox < ow``, ``q < columns``; uint16) and the output position of the
    vector's first kept lane (int64): the count of kept columns before it."""
    vectors = -(-columns // 16)
    q = np.arange(vectors * 16, dtype=np.int64)
    kept = ((q % wq) < ow) & (q < columns)
    keep = (kept.reshape(vectors, 16).astype(np.int64) << np.arange(16)).sum(axis=1).astype(np.uint16)
    starts = q[::16]
    at = (starts // wq) * ow + np.minimum(starts % wq, ow)
    keep.flags.writeable = False
    at.flags.writeable = False
    return keep, at
