"""The compiled loops of :mod:`._depthwise_jit` (imported only when :func:`._jit.compiler` gives a
decorator: this module needs numba).  Module-level functions only, as in :mod:`._vexp`: a jitted
closure that calls another jitted closure misses numba's on-disk cache and was compiled again in
every process (about 1 s on the first depthwise layer)."""

from __future__ import annotations

import numba
import numpy as np

from ._depthwise_ir import plane_s1, plane_s2
from ._jit import compiler

jit = compiler()
# Inlined where called (numba's IR, not LLVM's choice): called once per plane, a call with a
# dozen array arguments cost as much as a 7×7 plane's arithmetic.
_inlined = compiler(inline="always")
if jit is None:  # pragma: no cover - the caller checks compiler() first
    raise ImportError("numba is disabled (ONNXPLUG_CPU_JIT=0) or not installed")


@jit
def tap(row, i, width):  # pragma: no cover - compiled
    return row[i] if 0 <= i < width else row.dtype.type(0)


@jit
def window(r0, r1, r2, ix, width, t0, t1, t2, t3, t4, t5, t6, t7, t8):  # pragma: no cover - compiled
    """One border cell's sum: columns outside ``[0, width)`` read the padding's zeros."""
    s = tap(r0, ix, width) * t0
    s = s + tap(r0, ix + 1, width) * t1
    s = s + tap(r0, ix + 2, width) * t2
    s = s + tap(r1, ix, width) * t3
    s = s + tap(r1, ix + 1, width) * t4
    s = s + tap(r1, ix + 2, width) * t5
    s = s + tap(r2, ix, width) * t6
    s = s + tap(r2, ix + 1, width) * t7
    return s + tap(r2, ix + 2, width) * t8


@jit
def finish(s, b, has_bias, low, high):  # pragma: no cover - compiled
    """A cell's sum plus the bias, clamped to ``[low, high]`` (NaN stays NaN): the value stored."""
    if has_bias:
        s = s + b
    s = low if s < low else s
    return high if s > high else s


@jit
def stride_1(x, t, bias, has_bias, low, high, top, left, y):  # pragma: no cover - compiled
    height, width = x.shape[1], x.shape[2]
    channels = t.shape[0]
    oh, ow = y.shape[1], y.shape[2]
    zero = np.zeros(width, dtype=x.dtype)
    # Output columns [first, last) read only input columns: no check in their loop.
    first = min(left, ow)
    last = max(first, min(ow, width - 2 + left))
    for p in range(y.shape[0]):
        c = p % channels
        t0, t1, t2, t3, t4 = t[c, 0], t[c, 1], t[c, 2], t[c, 3], t[c, 4]
        t5, t6, t7, t8 = t[c, 5], t[c, 6], t[c, 7], t[c, 8]
        b = bias[c]
        for oy in range(oh):
            iy = oy - top
            r0 = x[p, iy] if 0 <= iy < height else zero
            r1 = x[p, iy + 1] if 0 <= iy + 1 < height else zero
            r2 = x[p, iy + 2] if 0 <= iy + 2 < height else zero
            # Views that start at the first interior column, so that every index below is
            # provably non-negative: numba's negative-index wraparound otherwise keeps the
            # loop scalar (measured 2.1 against 0.38 ms on 144 channels at 56×56).
            o = y[p, oy]
            a0, a1, a2, out = r0[first - left :], r1[first - left :], r2[first - left :], o[first:]
            for ix in range(last - first):
                s = a0[ix] * t0
                s = s + a0[ix + 1] * t1
                s = s + a0[ix + 2] * t2
                s = s + a1[ix] * t3
                s = s + a1[ix + 1] * t4
                s = s + a1[ix + 2] * t5
                s = s + a2[ix] * t6
                s = s + a2[ix + 1] * t7
                s = s + a2[ix + 2] * t8
                out[ix] = finish(s, b, has_bias, low, high)
            for ox in range(first):  # the border columns, with the padding's zeros
                s = window(r0, r1, r2, ox - left, width, t0, t1, t2, t3, t4, t5, t6, t7, t8)
                o[ox] = finish(s, b, has_bias, low, high)
            for ox in range(last, ow):
                s = window(r0, r1, r2, ox - left, width, t0, t1, t2, t3, t4, t5, t6, t7, t8)
                o[ox] = finish(s, b, has_bias, low, high)


@jit
def stride_2(x, t, bias, has_bias, low, high, top, left, y):  # pragma: no cover - compiled
    height, width = x.shape[1], x.shape[2]
    channels = t.shape[0]
    oh, ow = y.shape[1], y.shape[2]
    # One plane's padded rows as their even and odd columns; the padding cells are never
    # written, so they stay zero from plane to plane.
    even = np.zeros((height, ow + 1), dtype=x.dtype)
    odd = np.zeros((height, ow + 1), dtype=x.dtype)
    zero = np.zeros(ow + 1, dtype=x.dtype)
    # Input columns 2j and 2j + 1 are padded columns 2j + left and 2j + 1 + left: one goes to
    # ``even``, the other to ``odd``, at index j + offset; one loop writes both (two strided
    # loops, one per parity, measured 4.7× slower).
    first, second = (even, odd) if left % 2 == 0 else (odd, even)
    first_at, second_at = left // 2, (left + 1) // 2
    pairs = max(0, min(width // 2, ow + 1 - second_at))
    last_at = width // 2 + first_at  # an odd width's last column, kept if a window reads it
    for p in range(y.shape[0]):
        c = p % channels
        t0, t1, t2, t3, t4 = t[c, 0], t[c, 1], t[c, 2], t[c, 3], t[c, 4]
        t5, t6, t7, t8 = t[c, 5], t[c, 6], t[c, 7], t[c, 8]
        b = bias[c]
        for iy in range(height):  # (non-negative indices into views, as in stride_1)
            row, a, z = x[p, iy], first[iy, first_at:], second[iy, second_at:]
            for j in range(pairs):
                a[j] = row[2 * j]
                z[j] = row[2 * j + 1]
        if width % 2 and last_at <= ow:
            # In a loop of its own: stored inside the loop above, it kept the pairs scalar.
            for iy in range(height):
                first[iy, last_at] = x[p, iy, width - 1]
        for oy in range(oh):
            iy = 2 * oy - top
            e0 = even[iy] if 0 <= iy < height else zero
            d0 = odd[iy] if 0 <= iy < height else zero
            e1 = even[iy + 1] if 0 <= iy + 1 < height else zero
            d1 = odd[iy + 1] if 0 <= iy + 1 < height else zero
            e2 = even[iy + 2] if 0 <= iy + 2 < height else zero
            d2 = odd[iy + 2] if 0 <= iy + 2 < height else zero
            o = y[p, oy]
            for ox in range(ow):
                s = e0[ox] * t0
                s = s + d0[ox] * t1
                s = s + e0[ox + 1] * t2
                s = s + e1[ox] * t3
                s = s + d1[ox] * t4
                s = s + e1[ox + 1] * t5
                s = s + e2[ox] * t6
                s = s + d2[ox] * t7
                s = s + e2[ox + 1] * t8
                o[ox] = finish(s, b, has_bias, low, high)


@jit
def _flat_plane(
    source, padded, width, first_column, last_column, t, c, b, has_bias, low, high, out
):  # pragma: no cover
    """One plane ``source`` (flat, ``H·W``) convolved with padding 1 all round into ``out`` (flat,
    ``H·W``), the bias and the clamp in the store; ``padded`` is scratch of ``H·W + 2·W + 2``
    cells whose first and last ``W + 1`` are zero."""
    cells = source.shape[0]
    zero = source.dtype.type(0)
    t0, t1, t2, t3, t4 = t[c, 0], t[c, 1], t[c, 2], t[c, 3], t[c, 4]
    t5, t6, t7, t8 = t[c, 5], t[c, 6], t[c, 7], t[c, 8]
    inner = padded[width + 1 :]
    for n in range(cells):
        inner[n] = source[n]
    # Views that start at each tap row's first cell read: every index is non-negative.
    up, mid, down = padded[0:], padded[width:], padded[2 * width :]
    for n in range(cells):
        no_left, no_right = first_column[n], last_column[n]
        s = (zero if no_left else up[n]) * t0
        s = s + up[n + 1] * t1
        s = s + (zero if no_right else up[n + 2]) * t2
        s = s + (zero if no_left else mid[n]) * t3
        s = s + mid[n + 1] * t4
        s = s + (zero if no_right else mid[n + 2]) * t5
        s = s + (zero if no_left else down[n]) * t6
        s = s + down[n + 1] * t7
        s = s + (zero if no_right else down[n + 2]) * t8
        out[n] = finish(s, b, has_bias, low, high)


@jit
def _edges(height, width):  # pragma: no cover - compiled
    """Which cells of a flat ``height × width`` plane are in its first and in its last column."""
    cells = height * width
    first_column = np.empty(cells, dtype=np.bool_)
    last_column = np.empty(cells, dtype=np.bool_)
    for n in range(cells):
        column = n % width
        first_column[n] = column == 0
        last_column[n] = column == width - 1
    return first_column, last_column


@jit
def _all_edges(height, width):  # pragma: no cover - compiled
    """:func:`_edges`, then which cells are in the plane's first and in its last row."""
    first_column, last_column = _edges(height, width)
    cells = height * width
    first_row = np.empty(cells, dtype=np.bool_)
    last_row = np.empty(cells, dtype=np.bool_)
    for n in range(cells):
        first_row[n] = n < width
        last_row[n] = n >= cells - width
    return first_column, last_column, first_row, last_row


#: Planes of at most this many cells are computed from one copy of all of them (:func:`_framed`);
#: larger ones each from its own padded copy (:func:`_flat_plane`).  On small maps the per-plane
#: setup dominated: one thread, 960 planes of 7×7 74 → 32 µs, 384 of 14×14 50 → 43; at 28×28 and
#: above the plane-by-plane copy was the faster (192 of 28×28: 77 against 84 µs).
FRAMED_CELLS = 256


@jit
def _framed(x):  # pragma: no cover - compiled
    """The planes of ``x`` ``(P, H, W)`` as one flat run between ``W + 1`` zeros: every tap of
    :func:`_framed_plane` reads inside it."""
    planes, height, width = x.shape
    cells = height * width
    framed = np.zeros(planes * cells + 2 * width + 2, dtype=x.dtype)
    source, target = x.reshape(planes * cells), framed[width + 1 :]
    for n in range(planes * cells):
        target[n] = source[n]
    return framed


@_inlined
def _framed_plane(framed, p, width, edges, t, c, b, has_bias, low, high, out):  # pragma: no cover
    """Plane ``p`` of :func:`_framed`'s run convolved with padding 1 all round into ``out`` (flat);
    a tap that would read across the plane's edge (the neighbouring row, or the neighbouring plane
    above the first row and below the last) reads a zero instead, as :func:`_flat_plane`'s padded
    copy gives it: the same products in the same order."""
    first_column, last_column, first_row, last_row = edges
    cells = first_column.shape[0]
    zero = framed.dtype.type(0)
    t0, t1, t2, t3, t4 = t[c, 0], t[c, 1], t[c, 2], t[c, 3], t[c, 4]
    t5, t6, t7, t8 = t[c, 5], t[c, 6], t[c, 7], t[c, 8]
    # Cell n is framed[width + 1 + p·cells + n]: up[n] is its up-left neighbour, mid[n] its left,
    # down[n] its down-left (views from there: every index is non-negative).
    base = p * cells
    up, mid, down = framed[base:], framed[base + width :], framed[base + 2 * width :]
    for n in range(cells):
        left, right, above, below = first_column[n], last_column[n], first_row[n], last_row[n]
        s = (zero if left | above else up[n]) * t0
        s = s + (zero if above else up[n + 1]) * t1
        s = s + (zero if right | above else up[n + 2]) * t2
        s = s + (zero if left else mid[n]) * t3
        s = s + mid[n + 1] * t4
        s = s + (zero if right else mid[n + 2]) * t5
        s = s + (zero if left | below else down[n]) * t6
        s = s + (zero if below else down[n + 1]) * t7
        s = s + (zero if right | below else down[n + 2]) * t8
        out[n] = finish(s, b, has_bias, low, high)


@jit
def stride_1_flat(x, t, bias, has_bias, low, high, top, left, y):  # pragma: no cover - compiled
    """:func:`stride_1` for padding 1 on every side (output = input size), each plane as one flat
    run of ``H·W`` cells instead of ``H`` rows of a few cells, so that the loop vectorises (a
    14-wide row is all scalar remainder for 16-lane vectors).  Planes of up to
    :data:`FRAMED_CELLS` cells read one copy of all of them (:func:`_framed`), larger ones are each
    copied between ``W + 1`` zeros (:func:`_flat_plane`); either way a tap outside the map reads
    a zero.  The same products in the same order as :func:`stride_1`: the same bits."""
    height, width = x.shape[1], x.shape[2]
    channels = t.shape[0]
    cells = height * width
    if cells <= FRAMED_CELLS:
        framed = _framed(x)
        edges = _all_edges(height, width)
        # One flat view of the output: a reshaped view per plane cost ~25 ns, as much as a
        # 7×7 plane's arithmetic.
        flat = y.reshape(y.shape[0] * cells)
        for p in range(y.shape[0]):
            c = p % channels
            _framed_plane(framed, p, width, edges, t, c, bias[c], has_bias, low, high, flat[p * cells :])
        return
    padded = np.zeros(cells + 2 * width + 2, dtype=x.dtype)
    first_column, last_column = _edges(height, width)
    store = (has_bias, low, high)
    source, flat = x.reshape(x.shape[0] * cells), y.reshape(y.shape[0] * cells)
    for p in range(y.shape[0]):
        c = p % channels
        plane, out = source[p * cells : (p + 1) * cells], flat[p * cells : (p + 1) * cells]
        _flat_plane(plane, padded, width, first_column, last_column, t, c, bias[c], *store, out)


@jit
def _split_phases(plane, even, odd, ow, pad, size):  # pragma: no cover - compiled
    """Plane ``(H, W)`` into its four phase planes of ``oh × ow`` cells: even rows to the first
    half of ``even`` (even columns) and ``odd`` (odd columns), odd rows to their second halves
    (``size`` on); row ``iy`` goes to phase row ``iy // 2``, ``pad`` cells into its half.  Cells
    no input reaches (an odd map's last phase row or column) are never written."""
    height, width = plane.shape
    half = width // 2
    if width % 2:
        # An odd width's last column, in a loop of its own: stored inside the row loop below,
        # it kept that loop scalar (144 planes of 56×56: 200 against 45 µs).
        for iy in range(height):
            even[(iy // 2) * ow + pad + (iy % 2) * size + half] = plane[iy, width - 1]
    for iy in range(height):
        row = plane[iy]
        at = (iy // 2) * ow + pad + (iy % 2) * size
        columns_even, columns_odd = even[at:], odd[at:]
        for j in range(half):
            columns_even[j] = row[2 * j]
            columns_odd[j] = row[2 * j + 1]


@jit
def stride_2_phases(x, t, bias, has_bias, low, high, top, left, y):  # pragma: no cover - compiled
    """:func:`stride_2` with one cell of padding before each axis and the output ``ceil(H/2) ×
    ceil(W/2)`` (PyTorch's ``padding=1``), each plane as one flat run: the plane is split into
    its four phases (even/odd rows × even/odd columns, :func:`_split_phases`), each framed by
    ``ow + 1`` zeros, and every tap of output ``n = oy·ow + ox`` then reads one phase at
    ``n`` plus a constant; a tap left of the map (``ox = 0``) reads a zero instead.  The row
    form's rows of ``ow`` cells were mostly scalar remainder (144 planes of 56×56 on one thread:
    277 against 69 µs; 576 of 14×14: 83 against 45).  The same products in the same order as
    :func:`stride_2`: the same bits."""
    channels = t.shape[0]
    oh, ow = y.shape[1], y.shape[2]
    cells = oh * ow
    pad = ow + 1
    size = cells + 2 * pad
    even = np.zeros(2 * size, dtype=x.dtype)  # even columns: even rows, then odd rows
    odd = np.zeros(2 * size, dtype=x.dtype)  # odd columns, likewise
    first_column, _ = _edges(oh, ow)
    zero = x.dtype.type(0)
    flat = y.reshape(y.shape[0] * cells)
    # Tap (dy, dx) of output (oy, ox) is input (2·oy - 1 + dy, 2·ox - 1 + dx): rows 2·oy - 1,
    # 2·oy, 2·oy + 1 are odd phase row oy - 1, even row oy, odd row oy; likewise the columns.
    # Views that start where n = 0 reads: every index is non-negative.
    up_left, up, up_right = odd[size:], even[size + 1 :], odd[size + 1 :]
    mid_left, mid, mid_right = odd[pad - 1 :], even[pad:], odd[pad:]
    down_left, down, down_right = odd[size + pad - 1 :], even[size + pad :], odd[size + pad :]
    for p in range(y.shape[0]):
        c = p % channels
        _split_phases(x[p], even, odd, ow, pad, size)
        t0, t1, t2, t3, t4 = t[c, 0], t[c, 1], t[c, 2], t[c, 3], t[c, 4]
        t5, t6, t7, t8 = t[c, 5], t[c, 6], t[c, 7], t[c, 8]
        b = bias[c]
        out = flat[p * cells :]
        for n in range(cells):
            left_edge = first_column[n]
            s = (zero if left_edge else up_left[n]) * t0
            s = s + up[n] * t1
            s = s + up_right[n] * t2
            s = s + (zero if left_edge else mid_left[n]) * t3
            s = s + mid[n] * t4
            s = s + mid_right[n] * t5
            s = s + (zero if left_edge else down_left[n]) * t6
            s = s + down[n] * t7
            s = s + down_right[n] * t8
            out[n] = finish(s, b, has_bias, low, high)


@jit
def stride_1_fma(x, t, bias, has_bias, low, high, masks, y):  # pragma: no cover - compiled
    """float32 3×3 with padding 1 all round (the ``"flat"`` form's layers) through
    :func:`._depthwise_ir.plane_s1`, plane by plane; ``masks`` from :func:`._simd_ir.flat_masks`."""
    planes, height, width = x.shape
    channels = t.shape[0]
    cells = height * width
    with_bias = 1 if has_bias else 0
    for p in range(planes):
        c = p % channels
        at = 4 * p * cells
        plane_s1(
            x.ctypes.data + at,
            y.ctypes.data + at,
            t[c].ctypes.data,
            masks.ctypes.data,
            cells,
            width,
            bias[c],
            with_bias,
            low,
            high,
        )


@jit
def stride_2_fma(x, t, bias, has_bias, low, high, y):  # pragma: no cover - compiled
    """float32 3×3 at stride 2 with one cell of padding before each axis and a ``ceil(H/2) ×
    ceil(W/2)`` output (the ``"phases"`` form's layers) through :func:`._depthwise_ir.plane_s2`."""
    planes, height, width = x.shape
    oh, ow = y.shape[1], y.shape[2]
    channels = t.shape[0]
    with_bias = 1 if has_bias else 0
    for p in range(planes):
        c = p % channels
        source, target = x.ctypes.data + 4 * p * height * width, y.ctypes.data + 4 * p * oh * ow
        plane_s2(source, target, t[c].ctypes.data, height, width, oh, ow, bias[c], with_bias, low, high)


_parallel_jit = compiler(parallel=True)


@_parallel_jit
def stride_1_fma_parallel(x, t, bias, has_bias, low, high, masks, y, parts):  # pragma: no cover - compiled
    """:func:`stride_1_fma` with one image's channels split into ``parts`` on numba's team."""
    channels = t.shape[0]
    for part in numba.prange(parts):
        lo, hi = channels * part // parts, channels * (part + 1) // parts
        stride_1_fma(x[lo:hi], t[lo:hi], bias[lo:hi], has_bias, low, high, masks, y[lo:hi])


@_parallel_jit
def stride_2_fma_parallel(x, t, bias, has_bias, low, high, y, parts):  # pragma: no cover - compiled
    """:func:`stride_2_fma` split as :func:`stride_1_fma_parallel`."""
    channels = t.shape[0]
    for part in numba.prange(parts):
        lo, hi = channels * part // parts, channels * (part + 1) // parts
        stride_2_fma(x[lo:hi], t[lo:hi], bias[lo:hi], has_bias, low, high, y[lo:hi])


@_parallel_jit
def stride_1_parallel(x, t, bias, has_bias, low, high, top, left, y, parts):  # pragma: no cover - compiled
    """:func:`stride_1` with the channels of one image (``x.shape[0] == t.shape[0]``) split into
    ``parts`` on numba's threading layer (``kernels._team``)."""
    channels = t.shape[0]
    for part in numba.prange(parts):
        lo, hi = channels * part // parts, channels * (part + 1) // parts
        stride_1(x[lo:hi], t[lo:hi], bias[lo:hi], has_bias, low, high, top, left, y[lo:hi])


@_parallel_jit
def stride_2_parallel(x, t, bias, has_bias, low, high, top, left, y, parts):  # pragma: no cover - compiled
    """:func:`stride_2` split as :func:`stride_1_parallel`."""
    channels = t.shape[0]
    for part in numba.prange(parts):
        lo, hi = channels * part // parts, channels * (part + 1) // parts
        stride_2(x[lo:hi], t[lo:hi], bias[lo:hi], has_bias, low, high, top, left, y[lo:hi])


@_parallel_jit
def stride_1_flat_parallel(x, t, bias, has_bias, low, high, top, left, y, parts):  # pragma: no cover - compiled
    """:func:`stride_1_flat` split as :func:`stride_1_parallel`."""
    channels = t.shape[0]
    for part in numba.prange(parts):
        lo, hi = channels * part // parts, channels * (part + 1) // parts
        stride_1_flat(x[lo:hi], t[lo:hi], bias[lo:hi], has_bias, low, high, top, left, y[lo:hi])


@_parallel_jit
def stride_2_phases_parallel(x, t, bias, has_bias, low, high, top, left, y, parts):  # pragma: no cover - compiled
    """:func:`stride_2_phases` split as :func:`stride_1_parallel`."""
    channels = t.shape[0]
    for part in numba.prange(parts):
        lo, hi = channels * part // parts, channels * (part + 1) // parts
        stride_2_phases(x[lo:hi], t[lo:hi], bias[lo:hi], has_bias, low, high, top, left, y[lo:hi])
