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
from ._team import run_parts, team_parts

__all__ = ["compiled", "layer_norm_last_axis", "skip_layer_norm_last_axis"]

#: Smaller inputs stay in numpy (microseconds there), so a small model does not load numba
#: (about 0.5 s and 110 MiB on first use) for them.
MIN_VALUES = 1 << 14
_NO_BIAS = np.zeros(0, dtype=np.float32)


@functools.cache
def compiled() -> Any | None:
    """The module ``kernels._layernorm_loops`` (``layer_norm_rows``, ``skip_layer_norm_rows``
    and their ``*_parallel`` forms), or ``None`` without numba."""
    if compiler() is None:
        return None
    from . import _layernorm_loops

    return _layernorm_loops


def _parameters(x: np.ndarray, *vectors) -> bool:
    """Whether float32 ``x`` is large enough and every given vector float32 of ``x``'s width."""
    if x.dtype != np.float32 or x.ndim == 0 or x.size < MIN_VALUES:
        return False
    cols = x.shape[-1]
    return all(v.dtype == np.float32 and v.size == cols for v in vectors if v is not None)


def layer_norm_last_axis(
    x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, epsilon: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(y, mean, inv_std)``: ``x`` float32 normalised over its last axis, times ``scale`` plus
    ``bias`` (each with ``x.shape[-1]`` values), the statistics shaped ``x.shape[:-1] + (1,)``
    (float32, keepdims).  ``None`` when the loop does not apply (not float32, fewer than
    :data:`MIN_VALUES` values, parameters of another size or type, no numba).  Split over the
    run's thread team where the run has joined it (``kernels._team.team_parts``)."""
    if not _parameters(x, scale, bias):
        return None
    loops = compiled()
    if loops is None:
        return None
    cols = x.shape[-1]
    inputs = (_rows(x), _vector(scale, cols), _vector(bias, cols), np.float32(epsilon))
    return _normalize(loops.layer_norm_rows, loops.layer_norm_parallel, x, inputs, with_total=False)


def skip_layer_norm_last_axis(
    x: np.ndarray,
    skip: np.ndarray,
    skip_bias: np.ndarray | None,
    scale: np.ndarray,
    bias: np.ndarray | None,
    epsilon: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """com.microsoft SkipLayerNormalization in one compiled pass: ``(y, mean, inv_std, total)``
    with ``total = x + skip (+ skip_bias)`` (numpy's rounding and order) normalised as
    :func:`layer_norm_last_axis` does.  ``skip`` has ``x``'s shape or its last two axes' (the
    caller checked which); ``None`` where the loop does not apply.

    Why: the sum as numpy passes wrote two fresh arrays and the normalisation read them again
    (GPT-2 small, 128 tokens: 119 µs a node against onnxruntime's 69 for its LayerNormalization
    and Add)."""
    if not _parameters(x, scale, bias, skip_bias) or skip.dtype != np.float32:
        return None
    loops = compiled()
    if loops is None:
        return None
    cols = x.shape[-1]
    inputs = (_rows(x), _rows(skip), _vector(skip_bias, cols), _vector(scale, cols), _vector(bias, cols))
    inputs += (np.float32(epsilon),)
    return _normalize(loops.skip_layer_norm_rows, loops.skip_layer_norm_parallel, x, inputs, with_total=True)


def _normalize(serial, parallel, x: np.ndarray, inputs: tuple, *, with_total: bool) -> tuple:
    """A row loop's ``serial(*inputs, y, mean, inv_std[, total], lo, hi)`` over ``x``'s rows, split
    over the run's team where it has joined (``kernels._team.team_parts``); the outputs shaped as
    ``x`` (the statistics ``x.shape[:-1] + (1,)``)."""
    cols = x.shape[-1]
    rows = x.size // cols
    outputs = [np.empty((rows, cols), np.float32), np.empty(rows, np.float32), np.empty(rows, np.float32)]
    if with_total:
        outputs.append(np.empty((rows, cols), np.float32))
    run_parts(serial, parallel, rows, team_parts(x.size, rows), *inputs, *outputs)
    y, mean, inv_std, *total = outputs
    stats = x.shape[:-1] + (1,)
    return (y.reshape(x.shape), mean.reshape(stats), inv_std.reshape(stats), *(t.reshape(x.shape) for t in total))


def _rows(value: np.ndarray) -> np.ndarray:
    """``value`` as C-contiguous rows of its last axis."""
    return np.ascontiguousarray(value).reshape(-1, value.shape[-1])


def _vector(value: np.ndarray | None, cols: int) -> np.ndarray:
    return _NO_BIAS if value is None else np.ascontiguousarray(value).reshape(cols)
