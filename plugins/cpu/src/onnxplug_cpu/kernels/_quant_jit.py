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
    def requantize(acc, multiplier, low, high, zero, out):
        """``acc`` ``(N, M, P)`` exact integer sums, ``multiplier`` ``(M,)`` float32, ``low``/
        ``high`` the saturation bounds minus ``zero`` (float32), ``out`` ``(N, M, P)`` integers."""
        for n in range(acc.shape[0]):
            for m in range(acc.shape[1]):
                k = multiplier[m]
                for p in range(acc.shape[2]):
                    t = np.rint(np.float32(acc[n, m, p]) * k)
                    if t < low:
                        t = low
                    elif t > high:
                        t = high
                    out[n, m, p] = np.int32(t) + zero

    return types.SimpleNamespace(fake_quantize_chain=fake_quantize_chain, requantize=requantize)
