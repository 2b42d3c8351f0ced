"""The compiled loops of :mod:`._channel_jit` (imported only when :func:`._jit.compiler` gives a
decorator: this module needs numba)."""

from __future__ import annotations

import numba
import numpy as np

from ._jit import compiler

_split = compiler(parallel=True)
_ZERO = np.float32(0.0)


@_split
def affine_rows(x, a, c, low, high, y, parts):  # pragma: no cover - compiled
    """``y[r] = x[r] · a[r % C] + c[r % C]`` clamped to ``[low, high]`` (NaN kept; ``-inf``/``inf``
    for none) over the rows of ``(N·C, P)`` arrays, ``parts`` ranges of rows on numba's threading
    layer (one range: the calling thread).  BatchNormalization, and with a clamp its Relu or Clip
    as a depthwise 1×1 convolution (``kernels._depthwise.BoundChannelAffine``)."""
    rows, channels = x.shape[0], a.shape[0]
    for part in numba.prange(parts):
        for r in range(rows * part // parts, rows * (part + 1) // parts):
            scale, shift = a[r % channels], c[r % channels]
            source, target = x[r], y[r]
            for i in range(source.shape[0]):
                v = source[i] * scale + shift
                v = low if v < low else v
                target[i] = high if v > high else v


@_split
def relu_flat(x, y, parts):  # pragma: no cover - compiled
    """``y = np.maximum(x, 0)`` over 1-D arrays, in ``parts`` ranges."""
    size = x.shape[0]
    for part in numba.prange(parts):
        lo, hi = size * part // parts, size * (part + 1) // parts
        source, target = x[lo:hi], y[lo:hi]
        for i in range(hi - lo):
            v = source[i]
            target[i] = v if (v >= _ZERO) | (v != v) else _ZERO
