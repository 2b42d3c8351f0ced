"""The compiled plane loops around ``kernels._pool_ir``'s AVX-512 pool planes.

Imported only by ``kernels._pool_compiled``, after it has checked that numba is usable and the
CPU has AVX-512F: importing this module imports numba and compiles (or loads from numba's
on-disk cache) its two loops, each for one explicit signature so that a node may call their
entry points (``kernels._jit.direct_call``).  One loop serves every window this module knows
(:data:`WINDOWS`, :data:`FLAT_WINDOWS`), chosen by a number per call: numba caches module-level
functions only, and a branch per plane costs nothing beside a plane's vectors.
"""

from __future__ import annotations

import numba
from numba import prange, types

from ._f32_conv_gather import array_type
from ._pool_ir import flat_plane, plane

__all__ = ["FLAT_WINDOWS", "WINDOWS", "pool_planes", "pool_planes_parallel"]

#: ``(rows, columns, column stride, maximum)`` → the number :func:`pool_planes` takes: the windows
#: of the pools in the benchmark's models (and many more): 3×3 at stride 2 (ResNet's, Inception's,
#: SqueezeNet's, ShuffleNet's), 2×2 at stride 2 (VGG's, DenseNet's transitions, a UNet's), 3×3 at
#: stride 1 (Inception's branches), 2×1 (an OCR recognizer's row pools).
WINDOWS = {
    (3, 3, 2, True): 0,
    (2, 2, 2, True): 1,
    (3, 3, 1, True): 2,
    (2, 1, 1, True): 3,
    (3, 3, 2, False): 4,
    (2, 2, 2, False): 5,
    (3, 3, 1, False): 6,
    (2, 1, 1, False): 7,
}
#: The numbers of 3×3 stride-1 windows with one cell of padding all round whose output is the
#: input's size (Inception's branch pools), run as one flat run of a plane's cells (``maximum`` →
#: window): every lane used on narrow maps, where a row of 13 cells left 3 of its 16 idle and
#: paid each row's setup (512 planes of 13×13, one thread: 46 µs by rows, 35 in the flat numba
#: loops of ``kernels._pool3_loops``, 16 so).
FLAT_WINDOWS = {True: 8, False: 9}
_MAX_3X3_S2 = plane(3, 3, 2, True)
_MAX_2X2_S2 = plane(2, 2, 2, True)
_MAX_3X3_S1 = plane(3, 3, 1, True)
_MAX_2X1 = plane(2, 1, 1, True)
_SUM_3X3_S2 = plane(3, 3, 2, False)
_SUM_2X2_S2 = plane(2, 2, 2, False)
_SUM_3X3_S1 = plane(3, 3, 1, False)
_SUM_2X1 = plane(2, 1, 1, False)
_MAX_FLAT = flat_plane(True)
_SUM_FLAT = flat_plane(False)

_INT = types.int64
_PLANES = array_type(types.float32, 3)
_SIGNATURE = (_PLANES, array_type(types.float32, 3, read_only=False), array_type(types.float32, 1))
_SIGNATURE += (array_type(types.uint16, 1), _INT, _INT, _INT, _INT)


@numba.njit(cache=True, nogil=True, inline="always")
def _plane(window, x, y, counts, masks, h, w, oh, ow, row_stride, top, left):  # pragma: no cover - compiled
    """One plane through the window numbered ``window`` (pointers as integers)."""
    arguments = (x, y, counts, h, w, oh, ow, row_stride, top, left)
    if window == 8:
        _MAX_FLAT(x, y, counts, masks, h * w, w)
    elif window == 9:
        _SUM_FLAT(x, y, counts, masks, h * w, w)
    elif window == 0:
        _MAX_3X3_S2(*arguments)
    elif window == 1:
        _MAX_2X2_S2(*arguments)
    elif window == 2:
        _MAX_3X3_S1(*arguments)
    elif window == 3:
        _MAX_2X1(*arguments)
    elif window == 4:
        _SUM_3X3_S2(*arguments)
    elif window == 5:
        _SUM_2X2_S2(*arguments)
    elif window == 6:
        _SUM_3X3_S1(*arguments)
    else:
        _SUM_2X1(*arguments)


@numba.njit(types.void(*_SIGNATURE), cache=True, nogil=True)
def pool_planes(x, y, counts, masks, window, row_stride, top, left):  # pragma: no cover - compiled
    """Each ``(H, W)`` plane of ``x`` pooled into its plane of ``y`` through the window numbered
    ``window`` (:data:`WINDOWS`, :data:`FLAT_WINDOWS`), the first window of output row ``oy`` at
    input row ``row_stride · oy - top``, column ``-left``; sums divided by ``counts`` (the output
    plane's window counts, flat) unless it is empty.  ``masks``: a flat window's
    ``kernels._simd_ir.flat_masks`` (empty for the others)."""
    height, width = x.shape[1], x.shape[2]
    out_height, out_width = y.shape[1], y.shape[2]
    divisors = counts.ctypes.data if counts.shape[0] > 0 else 0
    table = masks.ctypes.data
    source, target = x.ctypes.data, y.ctypes.data
    for p in range(x.shape[0]):
        _plane(
            window,
            source + 4 * p * height * width,
            target + 4 * p * out_height * out_width,
            divisors,
            table,
            height,
            width,
            out_height,
            out_width,
            row_stride,
            top,
            left,
        )


@numba.njit(types.void(*_SIGNATURE, _INT), cache=True, nogil=True, parallel=True)
def pool_planes_parallel(x, y, counts, masks, window, row_stride, top, left, parts):  # pragma: no cover - compiled
    """:func:`pool_planes` over ``parts`` blocks of planes on numba's threading layer."""
    planes = x.shape[0]
    for part in prange(parts):
        lo, hi = planes * part // parts, planes * (part + 1) // parts
        pool_planes(x[lo:hi], y[lo:hi], counts, masks, window, row_stride, top, left)
