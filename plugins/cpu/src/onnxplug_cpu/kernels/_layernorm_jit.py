"""Layer normalisation over the last axis of a float32 array, one compiled loop per row (numba).

Why: a transformer normalises every token's hidden vector two or three times a layer, and in
numpy that is about ten passes over the activations (a widening copy, the mean, the centred
copy, its square, the second mean, the scale, the shift, the copy back): 140-400 µs per node on
MiniLM/BERT (seq 128).  Here each row (384-1024 values) is summed, centred and squared, then
written once, while it stays in L1.

The same arithmetic as the numpy kernels, in float32: the mean as sum / n, the variance as the
mean of the squared centred values (two passes, no cancellation), ``1/sqrt(var + eps)``, then
``(x - mean) * inv_std * scale + bias``.  The loop is compiled with ``reassoc`` so that LLVM
vectorises the two sums (added in another order than numpy's pairwise sum: equally accurate for
rows this short) and ``contract`` (the final multiply-add fuses).  ``None`` without numba, with
``ONNXPLUG_CPU_JIT=0``, or where the loop does not apply: callers use numpy.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._jit import compiler

__all__ = ["compiled", "layer_norm_last_axis"]

#: Smaller inputs stay in numpy (microseconds there), so a small model does not load numba
#: (about 0.5 s and 110 MiB on first use) for them.
MIN_VALUES = 1 << 14
_NO_BIAS = np.zeros(0, dtype=np.float32)


@functools.cache
def compiled() -> Any | None:
    """``layer_norm_rows(x, scale, bias, epsilon, y, mean, inv_std)`` on float32 ``(rows, cols)``
    arrays and ``(rows,)`` statistics, or ``None``."""
    if compiler() is None:
        return None
    from . import _layernorm_loops

    return _layernorm_loops.layer_norm_rows


def layer_norm_last_axis(
    x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, epsilon: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(y, mean, inv_std)``: ``x`` float32 normalised over its last axis, times ``scale`` plus
    ``bias`` (each with ``x.shape[-1]`` values), the statistics shaped ``x.shape[:-1] + (1,)``
    (float32, keepdims).  ``None`` when the loop does not apply (not float32, fewer than
    :data:`MIN_VALUES` values, parameters of another size or type, no numba)."""
    if x.dtype != np.float32 or x.ndim == 0 or x.size < MIN_VALUES:
        return None
    cols = x.shape[-1]
    params = (scale,) if bias is None else (scale, bias)
    if any(p.dtype != np.float32 or p.size != cols for p in params):
        return None
    loop = compiled()
    if loop is None:
        return None
    rows = x.size // cols
    x2 = np.ascontiguousarray(x).reshape(rows, cols)
    y = np.empty((rows, cols), dtype=np.float32)
    mean = np.empty(rows, dtype=np.float32)
    inv_std = np.empty(rows, dtype=np.float32)
    scale1 = np.ascontiguousarray(scale).reshape(cols)
    bias1 = _NO_BIAS if bias is None else np.ascontiguousarray(bias).reshape(cols)
    loop(x2, scale1, bias1, np.float32(epsilon), y, mean, inv_std)
    stats = x.shape[:-1] + (1,)
    return y.reshape(x.shape), mean.reshape(stats), inv_std.reshape(stats)
