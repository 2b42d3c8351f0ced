"""2-D MaxPool and AveragePool sums of float32 maps in one compiled pass.

Why: the numpy path (``pool.separable_reduce``) pads the input (a filled array and a copy), then
reduces one axis at a time, one pass per kernel offset; along the last axis each pass reads every
``stride``-th element.  SqueezeNet's and Inception's pools and ``ocr_det``'s stem pool took 4–9×
onnxruntime's time that way.  Here each output row first reduces its window's input rows into a
scratch row (a vectorised pass per row, in L1), then reduces that row's windows.  The window
width and the column stride are compile-time constants (one kernel per pair, built on first use),
so the column loop unrolls over the window and vectorises with interleaved loads; compiled with a
run-time width it stayed scalar and lost to numpy.

Same values as the numpy path: rows outside the input are skipped (the padded path reduces them
as -inf or 0, which changes nothing), the scratch row carries the padding value in its border
columns, the window sums are added in the numpy path's order, and NaN wins a maximum as in
``np.maximum``.  The caller divides the sums by the window counts.

Used where numba is loaded (a session with a float32 2-D convolution loads it, see
``kernels._jit``); inputs of at least 32K elements per thread are split into blocks of planes
run on the session's threads: numba's threading layer where it is safe (``kernels._team``) and
the convolutions use it too (``kernels._f32_conv``), else Python threads
(``kernels._split_rows``).  ``None`` without numba or with ``ONNXPLUG_CPU_JIT=0``: the numpy
path is used.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._jit import compiler

__all__ = ["compiled", "compiled_parallel"]


@functools.cache
def compiled(width: int, stride: int, maximum: bool) -> Any | None:
    """``pool(x, y, kh, sh, top, left)`` for ``x`` ``(B, H, W)`` and ``y`` ``(B, OH, OW)``
    float32, windows ``kh × width`` at strides ``sh × stride`` starting ``top``/``left`` cells
    before the input (dilation 1); the maximum or the sum of each window.  ``None`` without numba."""
    jit = compiler()
    if jit is None:
        return None
    fill = np.float32(-np.inf) if maximum else np.float32(0.0)

    @jit
    def pool(x, y, kh, sh, top, left):  # pragma: no cover - compiled
        h, w = x.shape[1], x.shape[2]
        oh, ow = y.shape[1], y.shape[2]
        span = max(left + w, (ow - 1) * stride + width)
        half = (span + 1) // 2
        rows = np.full(2 * half, fill, np.float32)  # even length: the split reads pairs
        even = np.empty(half, np.float32)
        odd = np.empty(half, np.float32)
        inner = rows[left : left + w]
        for b in range(x.shape[0]):
            for oy in range(oh):
                first = True
                for i in range(kh):
                    iy = oy * sh - top + i
                    if iy < 0 or iy >= h:
                        continue
                    src = x[b, iy]
                    if first:
                        for j in range(w):
                            inner[j] = src[j]
                        first = False
                    elif maximum:
                        for j in range(w):
                            v, r = src[j], inner[j]
                            inner[j] = v if (v > r) | (v != v) else r  # | not or: no branch
                    else:
                        for j in range(w):
                            inner[j] += src[j]
                out = y[b, oy]
                if first:  # the window has no input row
                    for ox in range(ow):
                        out[ox] = fill
                    continue
                if stride == 2:
                    # Split the row into its even and odd cells once (one loop writing both:
                    # interleaved loads), so that every tap below is a unit-stride read; the
                    # windows read rows[2·ox + j] as even[ox + j // 2] or odd[ox + j // 2].
                    for i in range(half):
                        even[i] = rows[2 * i]
                        odd[i] = rows[2 * i + 1]
                    for ox in range(ow):
                        acc = even[ox]
                        for j in range(1, width):
                            v = odd[ox + j // 2] if j % 2 else even[ox + j // 2]
                            if maximum:
                                acc = v if (v > acc) | (v != v) else acc
                            else:
                                acc += v
                        out[ox] = acc
                    continue
                for ox in range(ow):
                    start = ox * stride
                    acc = rows[start]
                    for j in range(1, width):
                        v = rows[start + j]
                        if maximum:
                            acc = v if (v > acc) | (v != v) else acc
                        else:
                            acc += v
                    out[ox] = acc

    return pool


@functools.cache
def compiled_parallel(width: int, stride: int, maximum: bool) -> Any | None:
    """``pool_parallel(x, y, kh, sh, top, left, parts)``: :func:`compiled`'s loop over ``parts``
    blocks of planes on numba's threading layer (``kernels._team``); ``None`` without numba."""
    pool = compiled(width, stride, maximum)
    jit = compiler(parallel=True)
    if pool is None or jit is None:
        return None

    import numba  # loaded: compiler() found it

    @jit
    def pool_parallel(x, y, kh, sh, top, left, parts):  # pragma: no cover - compiled
        planes = x.shape[0]
        for part in numba.prange(parts):
            lo, hi = planes * part // parts, planes * (part + 1) // parts
            pool(x[lo:hi], y[lo:hi], kh, sh, top, left)

    return pool_parallel
