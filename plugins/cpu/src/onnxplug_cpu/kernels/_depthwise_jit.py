"""3×3 depthwise convolutions (dilation 1, stride 1 or 2) compiled with numba.

Why: the numpy path (``_depthwise``) makes nine passes over each block — a multiply into a
temporary and an add into the accumulator per kernel offset — so every output cell is read and
written nine times.  Here each output cell is one local sum of its nine taps, written once.  A
generic loop that accumulated into the output row per offset (``out[ox] += row[ox*sw+j] * t``)
measured slower than numpy: the read-modify-write of an array LLVM cannot prove distinct from the
input stays scalar.  A local sum with one store per cell, with the kernel size and the stride
fixed at compile time, vectorises.

The kernels read the same zero-padded input as the numpy path and add the nine products in the
same order (offset ``(0, 0)``, ``(0, 1)``, … ``(2, 2)``; the first one is the start value), with
no fused multiply-add (numba does not contract without ``fastmath``), so results are the numpy
path's bits.  Unlike the numpy path they stay channels-first on wide layers too: compiled, the
transposes to and from channels-last cost more than they save (measured on MobileNetV2's layers,
e.g. 144 channels at 56×56: 0.26 ms channels-first against 1.76 ms channels-last).

``None`` without numba or with ``ONNXPLUG_CPU_JIT=0``: the caller uses the numpy path.
"""

from __future__ import annotations

import functools
from typing import Any

from ._jit import compiler

__all__ = ["compiled"]


@functools.cache
def compiled() -> dict[int, Any] | None:
    """``{stride: kernel(padded, taps, y)}`` for ``padded`` ``(N, C, Hp, Wp)``, ``taps``
    ``(C, 9)``, ``y`` ``(N, C, oh, ow)`` and ``stride`` 1 or 2 on both axes, and
    ``"split": kernel(even, odd, taps, y)``, stride 2 on the padded input's even and odd columns
    (``_depthwise._split_columns``); or ``None``."""
    jit = compiler()
    if jit is None:
        return None

    def strided(stride):
        # ``stride`` is a closure constant, so numba compiles each kernel with it known.
        @jit
        def kernel(p, t, y):  # pragma: no cover - compiled
            for n in range(y.shape[0]):
                for c in range(y.shape[1]):
                    t0, t1, t2, t3, t4 = t[c, 0], t[c, 1], t[c, 2], t[c, 3], t[c, 4]
                    t5, t6, t7, t8 = t[c, 5], t[c, 6], t[c, 7], t[c, 8]
                    for oy in range(y.shape[2]):
                        iy = stride * oy
                        r0, r1, r2, o = p[n, c, iy], p[n, c, iy + 1], p[n, c, iy + 2], y[n, c, oy]
                        for ox in range(y.shape[3]):
                            ix = stride * ox
                            s = r0[ix] * t0
                            s = s + r0[ix + 1] * t1
                            s = s + r0[ix + 2] * t2
                            s = s + r1[ix] * t3
                            s = s + r1[ix + 1] * t4
                            s = s + r1[ix + 2] * t5
                            s = s + r2[ix] * t6
                            s = s + r2[ix + 1] * t7
                            o[ox] = s + r2[ix + 2] * t8

        return kernel

    @jit
    def split_s2(e, d, t, y):  # pragma: no cover - compiled
        for n in range(y.shape[0]):
            for c in range(y.shape[1]):
                t0, t1, t2, t3, t4 = t[c, 0], t[c, 1], t[c, 2], t[c, 3], t[c, 4]
                t5, t6, t7, t8 = t[c, 5], t[c, 6], t[c, 7], t[c, 8]
                for oy in range(y.shape[2]):
                    iy = 2 * oy
                    e0, e1, e2 = e[n, c, iy], e[n, c, iy + 1], e[n, c, iy + 2]
                    d0, d1, d2, o = d[n, c, iy], d[n, c, iy + 1], d[n, c, iy + 2], y[n, c, oy]
                    for ox in range(y.shape[3]):
                        s = e0[ox] * t0
                        s = s + d0[ox] * t1
                        s = s + e0[ox + 1] * t2
                        s = s + e1[ox] * t3
                        s = s + d1[ox] * t4
                        s = s + e1[ox + 1] * t5
                        s = s + e2[ox] * t6
                        s = s + d2[ox] * t7
                        o[ox] = s + e2[ox + 1] * t8

    return {1: strided(1), 2: strided(2), "split": split_s2}
