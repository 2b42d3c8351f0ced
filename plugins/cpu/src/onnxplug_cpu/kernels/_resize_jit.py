"""2-D nearest and bilinear Resize of float32 maps in one compiled pass.

Why: the numpy path (``resize.resize_nd``) resizes one axis at a time with ``np.take``, and a
linear axis is two takes, two multiplies and an add, each a pass over a map as large as the
output; a broadcasting copy for integer nearest upsampling is slower still (its innermost run is
the factor, 2 elements).  The 2× upsamplings of detection necks and UNet decoders (``yolo``,
``ocr_det``, ``unet`` in the benchmark) took 8–25× the time of one copy of their output.  Here
each output row is written once:

* nearest: the output row is the source row gathered through the column table; a row whose
  source row equals the previous one's is a copy of that output row (every second row at 2×);
* linear: the two source rows are blended into a scratch row (``r0·wy0 + r1·wy1``, vectorised),
  which is then gathered and blended through the column taps (``t[i0]·wx0 + t[i1]·wx1``).

The tap tables are ``resize.axis_taps``' (every coordinate mode and nearest rounding), and the
linear path multiplies and adds in the numpy path's order (rows first, then columns; no fused
multiply-add without ``fastmath``), so results are the numpy path's bits.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._jit import compiler

__all__ = ["compiled"]


@functools.cache
def compiled() -> tuple[Any, Any] | None:
    """``(nearest(x, iy, ix, y), linear(x, iy, wy, ix, wx, y))`` for ``x`` ``(B, H, W)`` and
    ``y`` ``(B, OH, OW)`` float32, int64 ``iy`` ``(OH,)`` / ``ix`` ``(OW,)`` (nearest) or
    ``(OH, 2)`` / ``(OW, 2)`` with float32 weights of the same shape (linear); or ``None``."""
    jit = compiler()
    if jit is None:
        return None

    @jit
    def nearest(x, iy, ix, y):  # pragma: no cover - compiled
        for b in range(y.shape[0]):
            for oy in range(y.shape[1]):
                out = y[b, oy]
                if oy > 0 and iy[oy] == iy[oy - 1]:
                    previous = y[b, oy - 1]
                    for ox in range(out.shape[0]):
                        out[ox] = previous[ox]
                else:
                    row = x[b, iy[oy]]
                    for ox in range(out.shape[0]):
                        out[ox] = row[ix[ox]]

    @jit
    def linear(x, iy, wy, ix, wx, y):  # pragma: no cover - compiled
        blend = np.empty(x.shape[2], np.float32)
        for b in range(y.shape[0]):
            for oy in range(y.shape[1]):
                r0, r1 = x[b, iy[oy, 0]], x[b, iy[oy, 1]]
                w0, w1 = wy[oy, 0], wy[oy, 1]
                for j in range(blend.shape[0]):
                    blend[j] = r0[j] * w0 + r1[j] * w1
                out = y[b, oy]
                for ox in range(out.shape[0]):
                    out[ox] = blend[ix[ox, 0]] * wx[ox, 0] + blend[ix[ox, 1]] * wx[ox, 1]

    return nearest, linear
