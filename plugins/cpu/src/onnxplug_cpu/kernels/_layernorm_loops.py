"""The compiled loop of :mod:`._layernorm_jit` (needs numba; module globals only, as in
:mod:`._vexp`)."""

from __future__ import annotations

import numpy as np

from ._jit import compiler

# The two sums may be reordered so that they vectorise; multiply-adds fuse; nothing else.
_jit = compiler(fastmath={"contract", "reassoc"})
_ZERO, _ONE = np.float32(0), np.float32(1)


@_jit
def layer_norm_rows(x, scale, bias, epsilon, y, mean, inv_std):  # pragma: no cover - compiled
    """Per row ``i`` of ``x`` ``(rows, cols)``: ``mean[i]``, ``inv_std[i] = 1/sqrt(var + eps)``
    (two-pass variance, as numpy's ``((x - mean)**2).mean()``) and
    ``y[i] = (x[i] - mean) * inv_std * scale + bias`` (``bias`` empty: none)."""
    rows, cols = x.shape
    n = np.float32(cols)
    has_bias = bias.shape[0] > 0
    for i in range(rows):
        row, out = x[i], y[i]
        total = _ZERO
        for j in range(cols):
            total += row[j]
        m = total / n
        squares = _ZERO
        for j in range(cols):
            c = row[j] - m
            squares += c * c
        inv = _ONE / np.sqrt(squares / n + epsilon)
        mean[i] = m
        inv_std[i] = inv
        if has_bias:
            for j in range(cols):
                out[j] = (row[j] - m) * inv * scale[j] + bias[j]
        else:
            for j in range(cols):
                out[j] = (row[j] - m) * inv * scale[j]
