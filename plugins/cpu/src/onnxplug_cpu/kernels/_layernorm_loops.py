"""The compiled loops of :mod:`._layernorm_jit` (needs numba; module globals only, as in
:mod:`._vexp`)."""

from __future__ import annotations

import numba
import numpy as np

from ._jit import compiler

# The two sums may be reordered so that they vectorise; multiply-adds fuse; nothing else.
_jit = compiler(fastmath={"contract", "reassoc"})
_parallel = compiler(fastmath={"contract", "reassoc"}, parallel=True)
# SkipLayerNormalization's input sum keeps numpy's rounding and order: no fast-math flag at all.
_exact = compiler()
_ZERO, _ONE = np.float32(0), np.float32(1)


@_exact
def _skip_sum_row(x, skip, bias, total):  # pragma: no cover - compiled
    """``total = x + skip``, then ``+ bias`` where ``bias`` is not empty: numpy's two passes."""
    if bias.shape[0] > 0:
        for j in range(x.shape[0]):
            total[j] = (x[j] + skip[j]) + bias[j]
    else:
        for j in range(x.shape[0]):
            total[j] = x[j] + skip[j]


@_jit
def _normalize_row(row, out, scale, bias, epsilon):  # pragma: no cover - compiled
    """``out = (row - mean) * inv_std * scale + bias`` (``bias`` empty: none); ``(mean,
    inv_std)`` with ``inv_std = 1/sqrt(var + eps)`` (two-pass variance, as numpy's ``((x -
    mean)**2).mean()``)."""
    cols = row.shape[0]
    n = np.float32(cols)
    total = _ZERO
    for j in range(cols):
        total += row[j]
    m = total / n
    squares = _ZERO
    for j in range(cols):
        c = row[j] - m
        squares += c * c
    inv = _ONE / np.sqrt(squares / n + epsilon)
    if bias.shape[0] > 0:
        for j in range(cols):
            out[j] = (row[j] - m) * inv * scale[j] + bias[j]
    else:
        for j in range(cols):
            out[j] = (row[j] - m) * inv * scale[j]
    return m, inv


@_jit
def layer_norm_rows(x, scale, bias, epsilon, y, mean, inv_std, lo, hi):  # pragma: no cover - compiled
    """Rows ``[lo, hi)`` of ``x`` ``(rows, cols)``: ``mean[i]``, ``inv_std[i]`` and ``y[i]``
    (:func:`_normalize_row`)."""
    for i in range(lo, hi):
        mean[i], inv_std[i] = _normalize_row(x[i], y[i], scale, bias, epsilon)


@_jit
def skip_layer_norm_rows(
    x, skip, skip_bias, scale, bias, epsilon, y, mean, inv_std, total, lo, hi
):  # pragma: no cover - compiled
    """:func:`layer_norm_rows` of ``total[i] = x[i] + skip[i % len(skip)] (+ skip_bias)``, each
    row summed into ``total`` and normalised while it is in L1 (SkipLayerNormalization)."""
    skips = skip.shape[0]
    for i in range(lo, hi):
        _skip_sum_row(x[i], skip[i % skips], skip_bias, total[i])
        mean[i], inv_std[i] = _normalize_row(total[i], y[i], scale, bias, epsilon)


@_parallel
def layer_norm_parallel(x, scale, bias, epsilon, y, mean, inv_std, parts):  # pragma: no cover - compiled
    """:func:`layer_norm_rows` over ``parts`` blocks of rows on numba's threading layer."""
    rows = x.shape[0]
    for part in numba.prange(parts):
        layer_norm_rows(x, scale, bias, epsilon, y, mean, inv_std, rows * part // parts, rows * (part + 1) // parts)


@_parallel
def skip_layer_norm_parallel(
    x, skip, skip_bias, scale, bias, epsilon, y, mean, inv_std, total, parts
):  # pragma: no cover - compiled
    """:func:`skip_layer_norm_rows` over ``parts`` blocks of rows on numba's threading layer."""
    rows = x.shape[0]
    for part in numba.prange(parts):
        lo, hi = rows * part // parts, rows * (part + 1) // parts
        skip_layer_norm_rows(x, skip, skip_bias, scale, bias, epsilon, y, mean, inv_std, total, lo, hi)
