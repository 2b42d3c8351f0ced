"""Public numeric helpers of the CPU provider, for op libraries built on it (``onnxplug_ms_ops``).

These are the CPU kernels' own building blocks, so a contrib op such as ``FusedConv`` computes a
convolution, a window geometry or an erf exactly as the provider's ``Conv`` and ``Erf`` do
(one implementation to fix and to speed up).  Everything here is part of the distribution's
public surface: other packages import from ``onnxplug_cpu.numerics``, never from the private
``kernels._*`` modules.

* :func:`erf`: the error function (numpy has none): double precision for float64 inputs, a
  faster single-precision path otherwise.
* :func:`widen`, :func:`is_float`: narrow floats (float16, bfloat16, float8) are computed in float32.
* :func:`pool_geometry`, :func:`windows`: output sizes and pads of a sliding window
  (auto_pad, pads, strides, dilations, ceil_mode) and the strided window view of the padded input.
* :func:`pack_conv_weights`, :func:`convolve`: N-d grouped convolution (ONNX ``Conv``), im2col
  over the window view and one batched matmul for all groups.
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from .kernels._numeric import erf, is_float, widen
from .kernels.pool import pool_geometry, windows
from .kernels.rnn import rnn_activations

__all__ = [
    "rnn_activations",
    "conv_compute_dtype",
    "convolve",
    "erf",
    "is_float",
    "pack_conv_weights",
    "pool_geometry",
    "widen",
    "windows",
]


def conv_compute_dtype(dtype: np.dtype) -> type:
    """float64 stays float64; every other input type is convolved in float32."""
    return np.float64 if dtype == np.float64 else np.float32


def pack_conv_weights(w: np.ndarray, group: int, op: str = "Conv") -> np.ndarray:
    """``(M, C/g, *k)`` weights as ``(g, M/g, C/g*K)`` for :func:`convolve` (done once per node
    when the weights are constant).

    :raises InvalidArgument: ``M`` cannot be split into ``group`` groups.
    """
    m = w.shape[0]
    if group <= 0 or m % group:
        raise InvalidArgument(f"{op}: {m} output channels cannot be split into group={group}")
    w = w.astype(conv_compute_dtype(w.dtype))
    return np.ascontiguousarray(w.reshape(group, m // group, math.prod(w.shape[1:])))


def convolve(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    group: int = 1,
    kernel_shape=None,
    strides=None,
    dilations=None,
    pads=None,
    auto_pad: str = "NOTSET",
    packed: np.ndarray | None = None,
    op: str = "Conv",
) -> np.ndarray:
    """ONNX ``Conv`` of ``x`` ``(N, C, *spatial)`` with ``w`` ``(M, C/group, *k)`` and bias ``b``,
    in ``x``'s dtype.  ``packed`` is :func:`pack_conv_weights` of ``w`` when the caller has it.

    :raises Fail: shapes that do not fit (named with ``op``).
    :raises InvalidArgument: a bad group, kernel, stride or dilation.
    """
    if x.ndim < 3 or w.ndim != x.ndim:
        raise Fail(f"{op}: X shape {list(x.shape)} and W shape {list(w.shape)} do not match")
    nd = x.ndim - 2
    ks = tuple(kernel_shape) if kernel_shape else w.shape[2:]
    if tuple(ks) != w.shape[2:]:
        raise Fail(f"{op}: kernel_shape {list(ks)} differs from the weights' {list(w.shape[2:])}")
    if x.shape[1] != w.shape[1] * group:
        raise Fail(  # onnxruntime's class for a channel mismatch
            f"{op}: X has {x.shape[1]} channels but W {list(w.shape)} with group={group} needs {w.shape[1] * group}"
        )
    weights = packed if packed is not None else pack_conv_weights(w, group, op)
    out, begin, end, _ = pool_geometry(x.shape[2:], ks, strides, dilations, pads, auto_pad, 0, op)
    ct = conv_compute_dtype(x.dtype)
    n, c = x.shape[:2]
    if out == x.shape[2:] and all(k == 1 for k in ks) and not any(begin):
        # A pointwise convolution is a plain matmul over channels: no im2col copy.
        pixels = x.astype(ct, copy=False).reshape(n, group, c // group, math.prod(out))
        y = np.matmul(weights, pixels).reshape((n, w.shape[0]) + out)
    else:
        view = windows(x.astype(ct, copy=False), out, begin, end, ks, strides, dilations, 0)
        # (N, C, *out, *k) -> (N, g, C/g*K, P): the im2col copy.  Output positions stay the
        # innermost axis, so the copy reads input rows in order and the product lands in
        # (N, M, *out) layout without a transpose.
        view = view.reshape((n, group, c // group) + view.shape[2:])
        order = (0, 1, 2) + tuple(range(3 + nd, 3 + 2 * nd)) + tuple(range(3, 3 + nd))
        cols = view.transpose(order).reshape(n, group, (c // group) * math.prod(ks), math.prod(out))
        y = np.matmul(weights, cols).reshape((n, w.shape[0]) + out)  # (N, g, M/g, P)
    if b is not None:
        y = y + b.astype(ct).reshape((1, -1) + (1,) * nd)
    return y.astype(x.dtype, copy=False)
