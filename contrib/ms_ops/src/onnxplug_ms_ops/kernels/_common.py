"""Numeric helpers shared by the kernel modules."""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import Fail

_NARROW = frozenset({"float16", "bfloat16"})


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float16/bfloat16 are computed in float32 (as onnxruntime's CPU kernels do)."""
    return np.dtype(np.float32) if np.dtype(dtype).name in _NARROW else np.dtype(dtype)


def widen(x: np.ndarray) -> np.ndarray:
    return x.astype(compute_dtype(x.dtype), copy=False)


def erf(x: np.ndarray) -> np.ndarray:
    """erf to float64 accuracy (numpy has none).

    |x| < 3: the all-positive series ``2/sqrt(pi) exp(-x^2) sum_n 2^n x^(2n+1) / (2n+1)!!``;
    above, erfc's continued fraction evaluated backwards; beyond 6, erf is +-1 in float64.
    """
    z = np.abs(np.asarray(x, dtype=np.float64))
    out = np.ones_like(z)
    small = z < 3.0
    if small.any():
        s = z[small]
        term = s.copy()
        total = s.copy()
        s2 = 2.0 * s * s
        for n in range(1, 80):
            term = term * s2 / (2 * n + 1)
            total = total + term
        out[small] = 2.0 / math.sqrt(math.pi) * np.exp(-s * s) * total
    mid = ~small & (z < 6.0)
    if mid.any():
        m = z[mid]
        frac = np.zeros_like(m)
        for k in range(60, 0, -1):
            frac = (k / 2.0) / (m + frac)
        out[mid] = 1.0 - np.exp(-m * m) / math.sqrt(math.pi) / (m + frac)
    return np.copysign(out, x)


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact Gelu in x's dtype (computed in float64 for the erf)."""
    wide = x.astype(np.float64)
    return (0.5 * wide * (1.0 + erf(wide / math.sqrt(2.0)))).astype(x.dtype)


def softmax(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    shifted = scores - scores.max(axis=axis, keepdims=True)
    np.exp(shifted, out=shifted)
    shifted /= shifted.sum(axis=axis, keepdims=True)
    return shifted


def scalar(value: np.ndarray | None, name: str, default: float | int = 0) -> float | int:
    """A per-tensor quantization parameter: absent -> ``default``; one element -> its value."""
    if value is None:
        return default
    if value.size != 1:
        raise Fail(f"{name} must be a scalar (per-tensor), got shape {value.shape}")
    return value.reshape(()).item()


def check_last_dim(x: np.ndarray, name: str, size: int) -> None:
    if x.shape[-1:] != (size,):
        raise Fail(f"{name} must have last dimension {size}, got shape {x.shape}")
