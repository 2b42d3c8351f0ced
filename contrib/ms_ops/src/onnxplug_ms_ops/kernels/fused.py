"""FusedConv, FusedGemm and FusedMatMul: a linear op with what onnxruntime folded into it.

The convolution is an im2col over the kernel offsets (one strided slice per offset) followed
by one batched matmul per group; the weights are reshaped once per node when constant.
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from ._common import widen
from ._registry import kernel


def _activation(name, params, op):
    """The element-wise function ``name`` with its parameters (``None`` = onnxruntime's default)."""

    def p(i, default):
        return default if len(params) <= i or params[i] is None else params[i]

    def hard_sigmoid(x):
        return np.clip(p(0, 0.2) * x + p(1, 0.5), 0, 1)

    def leaky(x):
        return np.where(x >= 0, x, p(0, 0.01) * x)

    def elu(x):
        return np.where(x >= 0, x, p(0, 1.0) * np.expm1(np.minimum(x, 0)))

    def selu(x):
        alpha, gamma = p(0, 1.6732632423543772), p(2, 1.0507009873554805)
        return gamma * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))

    def clip(x):
        low, high = p(0, -np.inf), p(1, np.inf)
        return np.clip(x, low, high)

    table = {
        None: lambda x: x,
        "": lambda x: x,
        "Identity": lambda x: x,
        "Relu": lambda x: np.maximum(x, 0),
        "Tanh": np.tanh,
        "Sigmoid": lambda x: np.exp(-np.logaddexp(0, -x)),
        "LeakyRelu": leaky,
        "HardSigmoid": hard_sigmoid,
        "Clip": clip,
        "Elu": elu,
        "Selu": selu,
        "Softplus": lambda x: np.logaddexp(0, x),
        "Softsign": lambda x: x / (1 + np.abs(x)),
        "ThresholdedRelu": lambda x: np.where(x > p(0, 1.0), x, 0),
        "ScaledTanh": lambda x: p(0, 1.0) * np.tanh(p(1, 1.0) * x),
        "ParametricSoftplus": lambda x: p(0, 1.0) * np.logaddexp(0, p(1, 1.0) * x),
    }
    if name not in table:
        raise Fail(f"{op}: unsupported activation {name!r}; supported: {sorted(k for k in table if k)}")
    fn = table[name]
    return lambda x: fn(x).astype(x.dtype, copy=False)


@kernel("FusedGemm", since=(1,), factory=True)
def fused_gemm(
    ctx, *, alpha, beta, transA, transB, activation, activation_alpha=None, activation_beta=None, activation_gamma=None
):
    act = _activation(activation, (activation_alpha, activation_beta, activation_gamma), "FusedGemm")

    def run(a, b, c=None):
        if a.ndim != 2 or b.ndim != 2:
            raise Fail(f"FusedGemm: A and B must be 2-D, got {a.shape} and {b.shape}")
        a2 = a.T if transA else a
        b2 = b.T if transB else b
        if a2.shape[1] != b2.shape[0]:
            raise Fail(f"FusedGemm: inner dimensions differ: {a2.shape} x {b2.shape}")
        y = a2 @ b2
        if alpha != 1.0:
            y = (y * alpha).astype(a.dtype, copy=False)
        if c is not None and beta != 0.0:
            y = y + (c * beta if beta != 1.0 else c).astype(a.dtype, copy=False)
        return act(y.astype(a.dtype, copy=False))

    return run


def _batch_transposed(x: np.ndarray, trans_batch: int, trans: int) -> np.ndarray:
    """onnxruntime's FusedMatMul operand layout: transBatch moves axis 0 behind the batch axes
    (just before the last one); trans then swaps the last two axes."""
    if trans_batch and x.ndim >= 3:
        x = np.moveaxis(x, 0, -2)
    if trans and x.ndim >= 2:
        x = np.swapaxes(x, -1, -2)
    return x


@kernel("FusedMatMul", since=(1,))
def fused_matmul(a, b, *, alpha, transA, transB, transBatchA, transBatchB):
    a2 = _batch_transposed(a, transBatchA, transA)
    b2 = _batch_transposed(b, transBatchB, transB)
    try:
        y = np.matmul(widen(a2), widen(b2))
    except ValueError as error:
        raise Fail(f"FusedMatMul: shapes {a.shape} and {b.shape} do not multiply ({error})") from None
    if alpha != 1.0:
        y = y * y.dtype.type(alpha)
    return y.astype(a.dtype, copy=False)


def _conv_geometry(spatial, kernel_shape, auto_pad, pads, strides, dilations):
    rank = len(spatial)
    strides = tuple(strides) if strides else (1,) * rank
    dilations = tuple(dilations) if dilations else (1,) * rank
    spans = [d * (k - 1) + 1 for d, k in zip(dilations, kernel_shape)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, stride, span in zip(spatial, strides, spans):
            out = -(-size // stride)
            total = max(0, (out - 1) * stride + span - size)
            small, large = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else large)
            end.append(large if auto_pad == "SAME_UPPER" else small)
    elif auto_pad == "VALID":
        begin, end = [0] * rank, [0] * rank
    elif auto_pad == "NOTSET":
        pads = tuple(pads) if pads else (0,) * (2 * rank)
        begin, end = list(pads[:rank]), list(pads[rank:])
    else:
        raise InvalidArgument(f"unknown auto_pad {auto_pad!r}")
    outs = [
        (size + b + e - span) // stride + 1 for size, b, e, span, stride in zip(spatial, begin, end, spans, strides)
    ]
    if any(o <= 0 for o in outs):
        raise Fail(f"convolution output would be empty: input {tuple(spatial)}, kernel {tuple(kernel_shape)}")
    return begin, end, strides, dilations, outs


def conv(x, w, b, *, auto_pad, dilations, group, kernel_shape, pads, strides):
    """N-d grouped convolution (ONNX Conv semantics)."""
    if x.ndim < 3 or w.ndim != x.ndim:
        raise Fail(f"Conv: X {x.shape} and W {w.shape} must both be (N, C, spatial...)")
    n, c = x.shape[:2]
    m = w.shape[0]
    kernel_shape = tuple(kernel_shape) if kernel_shape else w.shape[2:]
    if c != w.shape[1] * group or m % group:
        raise Fail(f"Conv: channels {c} and weights {w.shape} do not fit group={group}")
    begin, end, strides, dilations, outs = _conv_geometry(x.shape[2:], kernel_shape, auto_pad, pads, strides, dilations)
    padded = np.pad(x, [(0, 0), (0, 0)] + list(zip(begin, end)))
    cols = []
    for offset in np.ndindex(*kernel_shape):
        index = tuple(slice(k * d, k * d + s * (o - 1) + 1, s) for k, d, s, o in zip(offset, dilations, strides, outs))
        cols.append(padded[(slice(None), slice(None)) + index])
    taps = math.prod(kernel_shape)
    stacked = np.stack(cols, axis=2).reshape(n, group, (c // group) * taps, -1)
    weights = w.reshape(group, m // group, -1)
    y = np.matmul(weights, stacked).reshape((n, m) + tuple(outs))
    if b is not None:
        y = y + b.reshape((1, m) + (1,) * len(outs))
    return y.astype(x.dtype, copy=False)


@kernel("FusedConv", since=(1,), factory=True)
def fused_conv(
    ctx,
    *,
    auto_pad,
    dilations=None,
    group,
    kernel_shape=None,
    pads=None,
    strides=None,
    activation=None,
    activation_params=None,
):
    act = _activation(activation, tuple(activation_params or ()), "FusedConv")
    geometry = dict(
        auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads, strides=strides
    )

    def run(x, w, b=None, z=None):
        y = conv(x, w, b, **geometry)
        if z is not None:
            y = y + z
        return act(y)

    return run
