"""Quantized pooling and reductions: QLinearAveragePool, QLinearReduceMean, QLinearSoftmax.

Each dequantizes (``(x - zero_point) * scale``, in float32), computes in float and requantizes
(round half to even, saturate).  onnxruntime computes some of these with integer sums or lookup
tables, so its results may differ by one quantization step where a value lies on a rounding
boundary.
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from ._common import softmax
from ._registry import kernel
from .qlinear import _limits, params, quantize


def _dequantize(x, scale, zero, name):
    s, z = params(x, scale, zero, name)
    return (x.astype(np.float32) - np.float32(z)) * s


def _requantize(values, x, scale, zero, name):
    s, z = params(x, scale, zero, name)
    return quantize(values, s, z, x.dtype)


def _pool_geometry(spatial, kernel_shape, strides, pads, auto_pad, ceil_mode, op):
    """Per spatial axis: (begin pad, end pad, output size), as ONNX AveragePool defines them."""
    rank = len(spatial)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        outs = [-(-size // s) for size, s in zip(spatial, strides)]
        totals = [max(0, (o - 1) * s + k - size) for o, s, k, size in zip(outs, strides, kernel_shape, spatial)]
        begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in totals]
        return [(b, t - b, o) for b, t, o in zip(begin, totals, outs)]
    if auto_pad == "VALID":
        begin, end = [0] * rank, [0] * rank
    elif auto_pad == "NOTSET":
        pad = tuple(pads) if pads else (0,) * (2 * rank)
        if len(pad) != 2 * rank:
            raise InvalidArgument(f"{op}: pads {list(pad)} must have {2 * rank} values")
        begin, end = list(pad[:rank]), list(pad[rank:])
    else:
        raise InvalidArgument(f"{op}: unknown auto_pad {auto_pad!r}")
    geometry = []
    for size, b, e, k, s in zip(spatial, begin, end, kernel_shape, strides):
        extent = size + b + e - k
        out = (-(-extent // s) if ceil_mode else extent // s) + 1
        if ceil_mode and (out - 1) * s >= size + b:
            out -= 1  # the last window would start in the end padding
        geometry.append((b, e, out))
    return geometry


def _window_sums(padded, kernel_shape, strides, outs):
    total = None
    for offset in np.ndindex(*kernel_shape):
        index = tuple(slice(k, k + s * (o - 1) + 1, s) for k, s, o in zip(offset, strides, outs))
        window = padded[(slice(None), slice(None)) + index]
        total = window.copy() if total is None else total + window
    return total


@kernel("QLinearAveragePool", since=(1,))
def qlinear_average_pool(
    x,
    x_scale,
    x_zero_point=None,
    y_scale=None,
    y_zero_point=None,
    *,
    auto_pad,
    kernel_shape,
    strides=None,
    pads=None,
    ceil_mode,
    count_include_pad,
    channels_last,
):
    op = "QLinearAveragePool"
    rank = x.ndim - 2
    if rank < 1 or len(kernel_shape) != rank:
        raise Fail(f"{op}: input {x.shape} and kernel_shape {list(kernel_shape)} do not fit")
    sx, zx = params(x, x_scale, x_zero_point, "x")
    sy, zy = params(x, y_scale, y_zero_point, "y")
    # As onnxruntime: float32 dequantized values summed window position by position (row-major;
    # padding adds nothing), divided by the count and by y_scale, then the zero point added and
    # the sum rounded half to even.  That order decides which side of a tie a value falls on.
    values = (x.astype(np.float32) - np.float32(zx)) * sx
    if channels_last:
        values = np.moveaxis(values, -1, 1)
    spatial = values.shape[2:]
    strides = tuple(strides) if strides else (1,) * rank
    geometry = _pool_geometry(spatial, kernel_shape, strides, pads, auto_pad, ceil_mode, op)
    outs = [o for _, _, o in geometry]
    if any(o <= 0 for o in outs):
        raise Fail(f"{op}: output would be empty for input {x.shape} and kernel {list(kernel_shape)}")
    # Pad far enough for the last (ceil_mode) window; a 1 marks positions that are counted:
    # the input only, or the input and its explicit padding (count_include_pad).
    ends = zip(geometry, strides, kernel_shape, spatial)
    extra = [max(0, (o - 1) * s + k - (size + b + e)) for (b, e, o), s, k, size in ends]
    widths = [(b, e + x_) for (b, e, _), x_ in zip(geometry, extra)]
    padded = np.pad(values, [(0, 0), (0, 0)] + widths)
    if count_include_pad:
        whole = [n + b + e for n, (b, e, _) in zip(spatial, geometry)]
        counted = np.pad(np.ones(whole, np.float32), [(0, x_) for x_ in extra])
    else:
        counted = np.pad(np.ones(spatial, np.float32), widths)
    sums = _window_sums(padded, kernel_shape, strides, outs)
    counts = np.maximum(_window_sums(counted[None, None], kernel_shape, strides, outs), np.float32(1))
    mean = np.clip(np.rint(sums / counts / sy + np.float32(zy)), *_limits(x.dtype))
    if channels_last:
        mean = np.moveaxis(mean, 1, -1)
    return np.ascontiguousarray(mean.astype(x.dtype))


@kernel("QLinearReduceMean", since=(1,))
def qlinear_reduce_mean(
    data, data_scale, data_zero_point=None, reduced_scale=None, reduced_zero_point=None, *, axes, keepdims
):
    op = "QLinearReduceMean"
    rank = data.ndim
    if any(not -rank <= a < rank for a in axes):
        raise InvalidArgument(f"{op}: axes {list(axes)} are out of range for rank {rank}")
    values = _dequantize(data, data_scale, data_zero_point, "data")
    normalized = tuple(sorted({a % rank for a in axes})) if axes else tuple(range(rank))
    mean = values.mean(axis=normalized, keepdims=bool(keepdims), dtype=np.float64).astype(np.float32)
    return _requantize(mean, data, reduced_scale, reduced_zero_point, "reduced")


@kernel("QLinearSoftmax", since=(1,))
def qlinear_softmax(x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *, axis, opset):
    op = "QLinearSoftmax"
    rank = x.ndim
    if not -rank <= axis < rank:
        raise InvalidArgument(f"{op}: axis {axis} is out of range for rank {rank}")
    axis %= rank
    values = _dequantize(x, x_scale, x_zero_point, "X").astype(np.float64)
    if opset < 13:
        # Softmax-1/11: the input is coerced to 2-D at `axis` and normalized over the second axis.
        flat = values.reshape(math.prod(x.shape[:axis]), -1)
        probabilities = softmax(flat, axis=-1).reshape(x.shape)
    else:
        probabilities = softmax(values, axis=axis)
    return _requantize(probabilities.astype(np.float32), x, y_scale, y_zero_point, "y")
