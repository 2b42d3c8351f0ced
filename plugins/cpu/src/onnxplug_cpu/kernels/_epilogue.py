"""A convolution's epilogue — bias, residual, a clamp (Relu, Clip) — in one pass over its output.

Why: with numpy each step is its own pass over the whole feature map (``y += b``, ``y += z``,
``np.maximum(y, 0, out=y)``), and on ResNet-50 those memory-bound passes over every layer's output
cost about a tenth of a run; MobileNetV2's Clip after every convolution was one more.  Compiled,
they are one read and one write of ``y`` (and one read of ``z``), in the same order of
operations, so results are bit-identical to the numpy passes: ``((y + b) + z)``, then values
below ``low`` to ``low`` and above ``high`` to ``high`` (NaN stays NaN, as with ``np.clip`` and
``np.maximum``; Relu is the clamp ``(0, inf)``).

The compiled loop is used where numba is loaded in the process: by any session with a float32
2-D convolution (``PackedConv`` asks ``kernels._jit.load_for_feature_maps``), by the tree
kernels, or by the application.  Otherwise (a convolution whose weights are not constant, in a
process without numba), or with ``ONNXPLUG_CPU_JIT=0``, :func:`finish` makes the numpy passes.
The loop is compiled once per machine (``cache=True``).  It is single-threaded: the pass is
memory-bound, and a second thread pool next to OpenBLAS's would compete with it for the cores.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._jit import compiler, numba_loaded

__all__ = ["finish"]

_NO_BIAS = np.zeros(0, dtype=np.float32)
_NO_RESIDUAL = np.zeros((0, 0, 0), dtype=np.float32)


def _compiled() -> Any | None:
    """The compiled loop, or ``None`` while numba is not loaded (or is disabled)."""
    if not numba_loaded():
        return None  # tested on every convolution: kept to dict lookups
    return _build()


@functools.cache
def _build() -> Any:
    jit = compiler()

    @jit
    def epilogue(y, b, z, low, high):  # y, z: (N, M, P) float32; b: (M,) or empty; z may be empty
        n, m, p = y.shape
        has_b, has_z = b.shape[0] > 0, z.shape[0] > 0
        for i in range(n):
            for j in range(m):
                bias = b[j] if has_b else np.float32(0)
                row = y[i, j]
                if has_z:
                    res = z[i, j]
                    for k in range(p):
                        v = row[k] + bias if has_b else row[k]
                        v = v + res[k]
                        v = low if v < low else v
                        row[k] = high if v > high else v
                else:
                    for k in range(p):
                        v = row[k] + bias if has_b else row[k]
                        v = low if v < low else v
                        row[k] = high if v > high else v

    return epilogue


def finish(
    y: np.ndarray, b: np.ndarray | None, z: np.ndarray | None = None, clamp: tuple[float, float] | None = None
) -> np.ndarray:
    """``y`` ``(N, M, *spatial)`` (fresh, the caller's to overwrite) plus the per-channel bias
    ``b``, plus ``z`` of ``y``'s shape, then clamped to ``clamp`` ``(low, high)``; in place where
    possible."""
    if b is None and z is None and clamp is None:
        return y  # nothing to add or clamp: no pass over the output
    compiled = _compiled()
    fits = (
        compiled is not None
        and y.dtype == np.float32
        and y.flags.c_contiguous
        and y.ndim >= 2
        and (b is None or (b.dtype == np.float32 and b.size == y.shape[1]))
        and (z is None or (z.dtype == np.float32 and z.shape == y.shape))
    )
    if fits:
        view = y.reshape(y.shape[0], y.shape[1], -1)
        bias = _NO_BIAS if b is None else np.ascontiguousarray(b.reshape(-1))
        residual = _NO_RESIDUAL if z is None else np.ascontiguousarray(z).reshape(view.shape)
        low, high = (-np.inf, np.inf) if clamp is None else clamp
        compiled(view, bias, residual, np.float32(low), np.float32(high))
        return y
    if b is not None:
        y += b.astype(y.dtype, copy=False).reshape((1, -1) + (1,) * (y.ndim - 2))
    if z is not None:
        if np.broadcast_shapes(y.shape, z.shape) == y.shape and np.can_cast(z.dtype, y.dtype, "same_kind"):
            y += z
        else:
            y = y + z
    if clamp is not None:
        np.clip(y, y.dtype.type(clamp[0]), y.dtype.type(clamp[1]), out=y)
    return y
