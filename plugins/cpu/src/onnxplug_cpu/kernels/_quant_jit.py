"""Quantization epilogues compiled with numba: one pass where numpy needs four or five.

- :func:`fake_quantize_chain`: ``QuantizeLinear → DequantizeLinear`` stages (each optionally
  preceded by a Relu) on float32 values, the QDQ model's activation path after a Conv, a Sum or
  a Relu.  Per element and per stage it performs the float32 operations of
  ``kernels._qdq.fake_quantize`` in the same order — ``rint(x / s_q)``, saturation to
  ``[low - z_q, high - z_q]``, ``+ (z_q - z_dq)``, ``* s_dq``; NaN quantizes to the zero point —
  so the bits are the same (no fast-math: the division stays a division).
- :func:`requantize`: QLinearConv's output, ``saturate(rint(float32(acc) * multiplier) + z)``
  per output channel, from the exact integer sums (float32 or float64), as
  ``kernels.quantization._requantize`` computes it.

numba is optional: without it (or with ``ONNXPLUG_CPU_JIT=0``) :func:`compiled` returns ``None``
and callers use numpy.  ``cache=True`` keeps the machine code under numba's cache directory.
"""

from __future__ import annotations

import functools
import os
from typing import Any

__all__ = ["compiled"]


@functools.cache
def compiled() -> Any | None:
    """A namespace with ``fake_quantize_chain`` and ``requantize``, or ``None`` when numba is
    unavailable or disabled."""
    if os.environ.get("ONNXPLUG_CPU_JIT", "1") == "0":
        return None
    try:
        import numba
    except ImportError:
        return None
    return _build(numba)


def _build(numba: Any) -> Any:
    import types

    import numpy as np

    jit = numba.njit(cache=True, nogil=True)

    @jit
    def fake_quantize_chain(x, out, table, relu):
        """1-D float32 ``x`` into ``out`` (may be ``x``); ``table`` rows ``(s_q, low - z_q,
        high - z_q, z_q - z_dq, s_dq)`` in float32, ``relu[s]``: a Relu before stage ``s``."""
        zero = np.float32(0.0)
        for i in range(x.shape[0]):
            t = x[i]
            for s in range(table.shape[0]):
                if relu[s] and t < zero:
                    t = zero
                t = np.rint(t / table[s, 0])
                if t != t:  # NaN: the zero point
                    t = zero
                elif t < table[s, 1]:
                    t = table[s, 1]
                elif t > table[s, 2]:
                    t = table[s, 2]
                t = (t + table[s, 3]) * table[s, 4]
            out[i] = t

    @jit
    def requantize(acc, correction, multiplier, low, high, zero, out):
        """``acc`` ``(N, M, P)`` exact integer sums (float32 or float64) plus ``correction``
        ``(M, P)`` (float64: exact), scaled by ``multiplier`` ``(M,)`` float32; ``low``/``high``:
        the saturation bounds minus ``zero`` (float32); ``out`` ``(N, M, P)`` integers."""
        for n in range(acc.shape[0]):
            for m in range(acc.shape[1]):
                k = multiplier[m]
                for p in range(acc.shape[2]):
                    t = np.rint(np.float32(acc[n, m, p] + correction[m, p]) * k)
                    if t < low:
                        t = low
                    elif t > high:
                        t = high
                    out[n, m, p] = np.int32(t) + zero

    @jit
    def shifted_requantize(z, offsets, hp, wp, correction, multiplier, low, high, zero, out):
        """The shifted layout's epilogue: ``z`` ``(B, T·M, L)`` per-block, per-tap products
        (exact float32 integers), output ``(n, m, y, x)`` = sum over blocks ``b`` and taps ``t``
        of ``z[b, t·M + m, n·hp·wp + y·wp + x + offsets[t]]`` (in float64: exact), plus
        ``correction[m, y, x]``, requantized as :func:`requantize`.  The sums run over each
        image's whole padded span (long contiguous loops), the padding columns then skipped."""
        maps, oh, ow = out.shape[1], out.shape[2], out.shape[3]
        span = (oh - 1) * wp + ow
        row = np.empty(span, dtype=np.float64)
        for n in range(out.shape[0]):
            base = n * hp * wp
            for m in range(maps):
                k = multiplier[m]
                first = True
                for b in range(z.shape[0]):
                    for t in range(offsets.shape[0]):
                        source = z[b, t * maps + m]
                        start = base + offsets[t]
                        if first:
                            for i in range(span):
                                row[i] = source[start + i]
                            first = False
                        else:
                            for i in range(span):
                                row[i] += source[start + i]
                for y in range(oh):
                    for x in range(ow):
                        v = np.rint(np.float32(row[y * wp + x] + correction[m, y, x]) * k)
                        if v < low:
                            v = low
                        elif v > high:
                            v = high
                        out[n, m, y, x] = np.int32(v) + zero

    return types.SimpleNamespace(
        fake_quantize_chain=fake_quantize_chain, requantize=requantize, shifted_requantize=shifted_requantize
    )
