"""Gelu family, BiasAdd and Trilu: element-wise ops that onnxruntime's fusions emit."""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import Fail
from onnxplug_cpu.numerics import gelu_tanh_single, silu

from ._common import gelu as _gelu
from ._common import widen
from ._registry import kernel

_TANH_COEF = math.sqrt(2.0 / math.pi)


@kernel("Gelu", since=(1,))
def gelu(x):
    return _gelu(x)


@kernel("BiasGelu", since=(1,))
def bias_gelu(a, b):
    if b.ndim != 1 or a.shape[-1:] != b.shape:
        raise Fail(f"BiasGelu: B must be 1-D with A's last dimension {a.shape[-1:]}, got {b.shape}")
    return _gelu(a, b)


@kernel("FastGelu", since=(1,))
def fast_gelu(x, bias=None):
    if x.dtype == np.float32 and (bias is None or (bias.dtype == np.float32 and bias.shape == x.shape[-1:])):
        return gelu_tanh_single(x, bias)  # the bias add fused into one compiled pass
    if bias is not None:
        x = x + bias
    w = widen(x)
    inner = _TANH_COEF * (w + 0.044715 * w * w * w)
    return (0.5 * w * (1.0 + np.tanh(inner))).astype(x.dtype, copy=False)


@kernel("QuickGelu", since=(1,))
def quick_gelu(x, *, alpha):
    # x / (1 + exp(-alpha x)): where exp overflows the result is an exact 0; float32 in one
    # compiled pass (the SiLU that QuickGelu fusion makes of every Conv + Sigmoid + Mul).
    return silu(widen(x), alpha).astype(x.dtype, copy=False)


@kernel("BiasAdd", since=(1,))
def bias_add(x, bias, skip):
    if x.ndim != 3 or bias.shape != x.shape[-1:] or skip.shape != x.shape:
        raise Fail(f"BiasAdd expects X (N, S, C), bias (C,), skip (N, S, C); got {x.shape}, {bias.shape}, {skip.shape}")
    return x + bias + skip


@kernel("Trilu", since=(1,))
def trilu(x, k=None, *, upper):
    if x.ndim < 2:
        raise Fail(f"Trilu needs a tensor of rank >= 2, got shape {x.shape}")
    diagonal = 0 if k is None else int(k.reshape(-1)[0]) if k.size == 1 else None
    if diagonal is None:
        raise Fail(f"Trilu: k must hold one value, got shape {k.shape}")
    rows, cols = x.shape[-2:]
    keep = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    keep = keep >= diagonal if upper else keep <= diagonal
    return np.where(keep, x, np.zeros((), dtype=x.dtype))
