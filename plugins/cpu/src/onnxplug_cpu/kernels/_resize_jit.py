"""2-D nearest and bilinear Resize of float32 maps in one compiled pass.

Why: the numpy path (``resize.resize_nd``) resizes one axis at a time with ``np.take``, and a
linear axis is two takes, two multiplies and an add, each a pass over a map as large as the
output; a broadcasting copy for integer nearest upsampling is slower still (its innermost run is
the factor, 2 elements).  The 2× upsamplings of detection necks and UNet decoders (``yolo``,
``ocr_det``, ``unet`` in the benchmark) took 8–25× the time of one copy of their output.  Here
each output row is written once:

* nearest: the output row is the source row gathered through the column table; a row whose
  source row equals the previous one's is a copy of that output row (every second row at 2×);
  an exact 2× upsampling of both axes (YOLO's and FPNs' necks) doubles every value of the map in
  one flat run and stores each doubled row twice (``double_both_axes``): rows of 10-40 values
  left the gather mostly to its scalar remainder (128 planes of 10×10: 22 → 8 µs);
* linear: the two source rows are blended into a scratch row (``r0·wy0 + r1·wy1``, vectorised),
  which is then gathered and blended through the column taps (``t[i0]·wx0 + t[i1]·wx1``); a
  doubled width whose interior columns repeat two taps (a bilinear 2× upsampling: UNet's
  decoder, FPNs) blends each pair of neighbours into both outputs between them in one
  vectorised loop instead (``linear_doubled_columns``).

The tap tables are ``_resize_taps.axis_taps``' (every coordinate mode and nearest rounding), and the
linear path multiplies and adds in the numpy path's order (rows first, then columns; no fused
multiply-add without ``fastmath``), so results are the numpy path's bits.

Inside a run whose convolutions started numba's team (``kernels._team.team_joined``), large
resizes split their planes over it (UNet's bilinear 2× upsamplings ran on one core beside an
idle one).
"""

from __future__ import annotations

import functools
from typing import Any

from ._jit import compiler

__all__ = ["compiled", "compiled_doubled_columns", "compiled_doubling", "compiled_parallel"]


@functools.cache
def compiled() -> tuple[Any, Any] | None:
    """``(nearest(x, iy, ix, y), linear(x, iy, wy, ix, wx, y))`` for ``x`` ``(B, H, W)`` and
    ``y`` ``(B, OH, OW)`` float32, int64 ``iy`` ``(OH,)`` / ``ix`` ``(OW,)`` (nearest) or
    ``(OH, 2)`` / ``(OW, 2)`` with float32 weights of the same shape (linear); or ``None``."""
    if compiler() is None:
        return None
    from . import _resize_loops

    return _resize_loops.nearest, _resize_loops.linear


@functools.cache
def compiled_doubling() -> Any | None:
    """``(double_both_axes(x, doubled, y), double_both_axes_parallel(x, doubled, y, parts))``:
    ``x`` ``(R, W)`` float32 rows doubled along both axes into ``y`` ``(R, 2, 2W)`` through the
    scratch ``doubled`` ``(R·2W,)``, for a nearest 2× upsampling (``_resize_taps.doubled``), the
    second with the rows split into ``parts`` on numba's threading layer; or ``None``."""
    if compiler() is None:
        return None
    from . import _resize_loops

    return _resize_loops.double_both_axes, _resize_loops.double_both_axes_parallel


@functools.cache
def compiled_parallel() -> tuple[Any, Any] | None:
    """:func:`compiled`'s loops with one more argument, ``parts``: the planes split into that
    many ranges on numba's threading layer (``kernels._team``), each plane computed as there
    (the same bits); or ``None``."""
    if compiler() is None:
        return None
    from . import _resize_loops

    return _resize_loops.nearest_parallel, _resize_loops.linear_parallel


@functools.cache
def compiled_doubled_columns() -> tuple[Any, Any] | None:
    """``(linear_doubled_columns(x, iy, wy, ix, wx, y), its parallel form with parts)``: the
    linear loop for a doubled width with repeating interior taps (``_resize_2d._doubles_columns``),
    the same arguments and bits as :func:`compiled`'s; or ``None``."""
    if compiler() is None:
        return None
    from . import _resize_loops

    return _resize_loops.linear_doubled_columns, _resize_loops.linear_doubled_columns_parallel
