"""The gather of ``kernels._f32_conv``: an input's padded (for strides, phase-split) planes for the
tiles (``kernels._f32_conv_tile``, which re-exports :func:`gather` and calls it from its driver).

Imported only by ``kernels._f32_conv_tile`` (it imports numba).  Module-level functions, so that
numba's on-disk cache recognises them from one process to the next.
"""

from __future__ import annotations

import numba
from numba import types

__all__ = ["PHASES", "array_type", "gather"]

_INT, _F32 = types.int64, types.float32


def array_type(dtype, ndim: int, *, read_only: bool = True):
    """numba's type of a C-contiguous array, read-only unless said: the compiled loops' declared
    signatures type every array they only read read-only (see ``kernels._f32_conv_tile``)."""
    return types.Array(dtype, ndim, "C", readonly=read_only)


@numba.njit(cache=True, nogil=True)
def _phase_of(phases, py, px):  # pragma: no cover - compiled
    for p in range(phases.shape[0]):
        if phases[p, 0] == py and phases[p, 1] == px:
            return p
    return -1


#: The phase table's type: ``(P, 2)`` int64 rows of (row phase, column phase).
PHASES = array_type(_INT, 2)
_GATHER_ARGUMENTS = (array_type(_F32, 3), array_type(_F32, 3, read_only=False), _INT, _INT, _INT, _INT, PHASES)
_GATHER_ARGUMENTS += (_INT, _INT)


@numba.njit(types.void(*_GATHER_ARGUMENTS, _INT, _INT), cache=True, nogil=True)
def gather(x, planes, sh, sw, top, left, phases, hq, wq, c0, c1):  # pragma: no cover - compiled
    """Channels ``[c0, c1)`` of ``x`` ``(C, H, W)`` into the phase images ``planes`` ``(P, C,
    length)`` (``kernels._conv_geometry``), zero where the padding or the tiles' overrun is.
    Each plane is zeroed, then each input row copied through views that start at the first cell
    read: a loop index that is never negative keeps numba's wraparound checks out, so the
    stride-1 copy vectorises (indexing ``row[base + i]`` ran 5x slower).  At column stride 2,
    where both column phases of a row are read, one loop splits each input row into both
    (``even[j] = row[2j]``, ``odd[j] = row[2j + 1]``: interleaved loads): a loop per phase read
    every row twice and ran about 3x slower."""
    _, height, width = x.shape
    for c in range(c0, c1):
        for p in range(phases.shape[0]):
            plane = planes[p, c]
            for i in range(plane.shape[0]):
                plane[i] = 0.0
    paired_rows = sw == 2
    if paired_rows:  # every row phase read must read both column phases
        for p in range(phases.shape[0]):
            if _phase_of(phases, phases[p, 0], 1 - phases[p, 1]) < 0:
                paired_rows = False
    if paired_rows:
        # Input column 2j is padded column 2j + left: phase left % 2, position j + left // 2;
        # input column 2j + 1 is phase (left + 1) % 2, position j + (left + 1) // 2.
        at_even, at_odd = left // 2, (left + 1) // 2
        pairs = max(0, min(width // 2, wq - at_even, wq - at_odd))
        last_even = width // 2 + at_even if width % 2 and width // 2 + at_even < wq else -1
        for p in range(phases.shape[0]):
            py = phases[p, 0]
            if phases[p, 1] != left % 2:
                continue  # each row phase once, from its even-column phase
            q = _phase_of(phases, py, (left + 1) % 2)
            for c in range(c0, c1):
                even_plane, odd_plane = planes[p, c], planes[q, c]
                for iy in range(hq):
                    sy = iy * sh + py - top
                    if sy < 0 or sy >= height:
                        continue
                    row = x[c, sy]
                    even = even_plane[iy * wq + at_even :]
                    odd = odd_plane[iy * wq + at_odd :]
                    for j in range(pairs):
                        even[j] = row[2 * j]
                        odd[j] = row[2 * j + 1]
                if last_even >= 0:
                    # An odd width's last column, in a loop of its own: stored inside the loop
                    # above, it kept the pairs' loop scalar (16 channels at 160×160: 67 µs).
                    for iy in range(hq):
                        sy = iy * sh + py - top
                        if 0 <= sy < height:
                            even_plane[iy * wq + last_even] = x[c, sy, width - 1]
        return
    for p in range(phases.shape[0]):
        py = phases[p, 0]
        px = phases[p, 1]
        first = max(0, -((px - left) // sw))  # the first column with ix·sw + px - left >= 0
        last = min(wq, (width - 1 - px + left) // sw + 1) if width - 1 - px + left >= 0 else 0
        count = max(0, last - first)
        base = first * sw + px - left
        if count == 0:
            continue
        for c in range(c0, c1):
            plane = planes[p, c]
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
