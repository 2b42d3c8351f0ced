"""Numeric helpers shared by the kernel modules."""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import Fail
from onnxplug_cpu.numerics import gelu_single, softmax_last_axis

_NARROW = frozenset({"float16", "bfloat16"})


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float16/bfloat16 are computed in float32 (as onnxruntime's CPU kernels do)."""
    return np.dtype(np.float32) if np.dtype(dtype).name in _NARROW else np.dtype(dtype)


def per_column(value, name, columns, default, op):
    """A scale or zero point given per output column or as a scalar, as float64 (``default``
    when absent): the quantized matmuls' per-column parameters."""
    if value is None:
        return np.float64(default)
    if value.size == 1:
        return value.reshape(()).astype(np.float64)
    if value.shape != (columns,):
        raise Fail(f"{op}: {name} must be a scalar or have shape ({columns},), got {value.shape}")
    return value.astype(np.float64)


def widen(x: np.ndarray) -> np.ndarray:
    return x.astype(compute_dtype(x.dtype), copy=False)


# 1 / (2n+1)!! for n = 0..31: the coefficients of erf's all-positive series in t = 2 x^2.
_SERIES = np.cumprod([1.0] + [1.0 / (2 * n + 1) for n in range(1, 32)])[::-1].copy()


def erf(x: np.ndarray) -> np.ndarray:
    """erf to float64 accuracy (numpy has none).

    Not ``onnxplug_cpu.numerics.erf``: that one's float64 path (Chebyshev interpolants of erf on
    [1, 6]) is off by about 1e-15 for |x| in [4, 6], which is all of ``1 + erf(x)`` in Gelu's
    negative tail (``test_gelu_double_exact`` fails with it); erfc's continued fraction here
    keeps that sum accurate.

    |x| < 2: ``2/sqrt(pi) exp(-x^2) x sum_n (2x^2)^n / (2n+1)!!`` (all terms positive, so no
    cancellation; 32 terms reach 1e-17), by Horner; 2 <= |x| < 6: erfc's continued fraction,
    40 levels evaluated backwards (relative error below 1e-13 of erfc <= 5e-3); beyond 6, erf is
    +-1 in float64.
    """
    z = np.abs(np.asarray(x, dtype=np.float64))
    out = np.ones_like(z)
    small = z < 2.0
    if small.any():
        s = z[small]
        t = 2.0 * s * s
        total = np.full_like(s, _SERIES[0])
        for coefficient in _SERIES[1:]:
            total = total * t + coefficient
        out[small] = (2.0 / math.sqrt(math.pi)) * np.exp(-s * s) * s * total
    mid = ~small & (z < 6.0)
    if mid.any():
        m = z[mid]
        frac = np.zeros_like(m)
        for k in range(40, 0, -1):
            frac = (k / 2.0) / (m + frac)
        out[mid] = 1.0 - np.exp(-m * m) / math.sqrt(math.pi) / (m + frac)
    return np.copysign(out, x)


def gelu(x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """Exact Gelu of ``x + bias`` in x's dtype (``bias``: optional, 1-D, x's last dimension).
    float64 through the erf above; float32 and narrower through the CPU provider's
    single-precision Gelu (one compiled pass, or fifteen in-place float32 passes without numba,
    instead of a float64 series; accurate to a few float32 ulps, negative tail included).
    A float32 bias is added inside that pass (BiasGelu: one read of the MatMul output instead of
    an add pass and its temporary); other types add it first, in x's dtype."""
    if bias is not None and not (x.dtype == np.float32 and bias.dtype == np.float32):
        x, bias = x + bias, None
    if x.dtype != np.float64:
        return gelu_single(x, bias).astype(x.dtype, copy=False)
    wide = x.astype(np.float64)
    return (0.5 * wide * (1.0 + erf(wide / math.sqrt(2.0)))).astype(x.dtype)


def softmax(scores: np.ndarray, axis: int = -1, *, in_place: bool = False) -> np.ndarray:
    """Softmax along ``axis``; ``in_place``: ``scores`` (C-contiguous, the caller's) may be
    written over.  float32 over the last axis takes the CPU provider's compiled loop (attention's
    scores: five numpy passes become one loop per row)."""
    if axis in (-1, scores.ndim - 1):
        fast = softmax_last_axis(scores, in_place=in_place and scores.flags.c_contiguous)
        if fast is not None:
            return fast
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
