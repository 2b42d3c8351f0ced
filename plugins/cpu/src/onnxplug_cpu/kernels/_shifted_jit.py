"""The shifted convolution's adds (``kernels._shifted``) in one compiled pass.

Why: after its one matmul, the shifted path adds k² shifted column ranges of the product ``z``
(k²·M values per padded cell) with numpy, one pass over the accumulator per offset, then copies
the output cells out of the padded layout and adds the bias: eleven passes, and on thin layers
with large maps (``unet``'s 16-channel 3×3 layers at 128×128: ``z`` is 9.7 MB) each one goes to
memory.  Here every output row is summed in L1 from its k² source rows, cropped and biased on the
way: ``z`` is read once.  The adds are in the numpy path's order (offset ``(0, 0)`` first, then
row-major, the bias last), so the results are the numpy path's bits.

Computing the product in bands of rows small enough for the L2 cache measured slower: at 2
threads OpenBLAS's per-call cost on ~20 short products outweighed the memory traffic saved.

Used only where numba is already loaded (``kernels._jit.numba_loaded``), as DenseNet-style models
would otherwise load it for a gain of 5-20 % on these layers.  ``None`` without numba or with
``ONNXPLUG_CPU_JIT=0``: the numpy passes are used.
"""

from __future__ import annotations

import functools
from typing import Any

from ._jit import compiler

__all__ = ["compiled"]


@functools.cache
def compiled() -> Any | None:
    """``shift_add(z, offsets, bias, has_bias, y, n, origin, wp)``: ``y[n]`` ``(M, OH, OW)``
    from ``z`` ``(k²·M, …)``, where output row ``r`` of channel ``c`` sums, for every tap
    ``t``, ``z[t·M + c]`` from column ``origin + r·wp + offsets[t]`` on; or ``None``."""
    jit = compiler()
    if jit is None:
        return None

    @jit
    def shift_add(z, offsets, bias, has_bias, y, n, origin, wp):  # pragma: no cover - compiled
        m, rows, ow = y.shape[1], y.shape[2], y.shape[3]
        taps = offsets.shape[0]
        for c in range(m):
            for r in range(rows):
                base = origin + r * wp
                out = y[n, c, r]
                first = z[c, base : base + ow]
                for col in range(ow):
                    out[col] = first[col]
                for t in range(1, taps):
                    # a slice per tap: indexed by the loop variable alone, the loads are provably
                    # contiguous and non-negative (no wraparound select), so the loop vectorises
                    start = base + offsets[t]
                    src = z[t * m + c, start : start + ow]
                    for col in range(ow):
                        out[col] += src[col]
                if has_bias:
                    value = bias[c]
                    for col in range(ow):
                        out[col] += value

    return shift_add
