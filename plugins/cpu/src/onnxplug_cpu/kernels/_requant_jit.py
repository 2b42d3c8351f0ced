"""QLinearConv's requantization as one in-place compiled pass (numba).

``_requantize`` in numpy is four passes over the float32 sums (scale, round, saturate, add the
zero point while casting).  Here each value becomes ``min(max(rint(acc * k[m]), low - z),
high - z) + z`` in place — the same float32 operations in the same order, so the same values —
and one cast writes the 8-bit output.  In place on one array and branch-free, so LLVM vectorises
the loop (a separate output array it cannot prove distinct keeps it scalar, several times
slower).  ``None`` without numba or with ``ONNXPLUG_CPU_JIT=0``: callers use numpy.
"""

from __future__ import annotations

import functools
from typing import Any

from ._jit import compiler

__all__ = ["compiled"]


@functools.cache
def compiled() -> Any | None:
    """``requantize_in_place(acc, multiplier, low, high, zero)`` for ``acc`` ``(N, M, P)``
    float32 and ``multiplier`` ``(M,)`` float32, or ``None``."""
    jit = compiler()
    if jit is None:
        return None
    import numpy as np

    @jit
    def requantize_in_place(acc, multiplier, low, high, zero):  # pragma: no cover - compiled
        for n in range(acc.shape[0]):
            for m in range(acc.shape[1]):
                k = multiplier[m]
                row = acc[n, m]
                for p in range(row.shape[0]):
                    row[p] = min(max(np.rint(row[p] * k), low), high) + zero

    return requantize_in_place


@functools.cache
def compiled_with_correction() -> Any | None:
    """``(per_channel, per_position)``: requantization that first adds :class:`ExactConv`'s
    correction (``offset * conv(ones) + bias``), ``None`` as :func:`compiled`.

    Why: adding the correction in numpy is one more read-and-write pass over every sum; here it
    is one float32 addition in the requantization's own pass.  ``(acc + c) * k`` is the same
    float32 addition, then the same multiplication, as ``acc += c`` followed by
    :func:`compiled`'s pass, so the values are the same.  ``per_channel(acc, plus, ...)`` takes
    ``plus`` ``(M,)`` (a map constant over positions: unpadded layers); ``per_position`` takes
    ``plus`` ``(M, P)`` (the map of a padded layer, the same for every image)."""
    jit = compiler()
    if jit is None:
        return None
    import numpy as np

    @jit
    def per_channel(acc, plus, multiplier, low, high, zero):  # pragma: no cover - compiled
        for n in range(acc.shape[0]):
            for m in range(acc.shape[1]):
                k = multiplier[m]
                c = plus[m]
                row = acc[n, m]
                for p in range(row.shape[0]):
                    row[p] = min(max(np.rint((row[p] + c) * k), low), high) + zero

    @jit
    def per_position(acc, plus, multiplier, low, high, zero):  # pragma: no cover - compiled
        for n in range(acc.shape[0]):
            for m in range(acc.shape[1]):
                k = multiplier[m]
                row = acc[n, m]
                add = plus[m]
                for p in range(row.shape[0]):
                    row[p] = min(max(np.rint((row[p] + add[p]) * k), low), high) + zero

    return per_channel, per_position
