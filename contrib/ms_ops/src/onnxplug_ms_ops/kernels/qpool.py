"""Quantized pooling and reductions: QLinearAveragePool, QLinearReduceMean, QLinearSoftmax.

Each follows onnxruntime's arithmetic where it decides which side of a rounding tie a value
falls on: AveragePool sums float32 dequantized values in window order; Softmax uses
onnxruntime's exp table and its floor(1 / y_scale) output scale.  ReduceMean (which onnxruntime
has no CPU kernel for) is its definition: dequantize, mean, requantize.  Rounding is half to
even, results saturate.
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

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


def _softmax_rows(q: np.ndarray, x_scale: float, y_scale: float, y_zero: int, dtype) -> np.ndarray:
    """Softmax of the rows of 8-bit ``q`` (N, D) the way onnxruntime computes it, so that ties
    round alike: exp((x - max + shift) * x_scale) in float32 (shift keeps the row sum finite),
    summed in order, times floor(1 / y_scale), divided by the sum, rounded half to even."""
    d = q.shape[1]
    shift = max(0.0, math.log(np.finfo(np.float32).max / d) - 5) / float(x_scale)
    values = q.astype(np.int64)
    offsets = values - values.max(axis=1, keepdims=True)  # in [-255, 0]
    table = np.exp((np.arange(-255, 1, dtype=np.float64) + shift) * float(x_scale)).astype(np.float32)
    exps = table[offsets + 255]
    total = np.cumsum(exps, axis=1, dtype=np.float32)[:, -1:]
    scale = np.float32(math.floor(1.0 / float(y_scale)))
    low, high = _limits(dtype)
    return np.clip(np.rint(exps * scale / total) + y_zero, low, high).astype(dtype)


@kernel("QLinearSoftmax", since=(1,))
def qlinear_softmax(x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *, axis, opset):
    op = "QLinearSoftmax"
    rank = x.ndim
    if not -rank <= axis < rank:
        raise InvalidArgument(f"{op}: axis {axis} is out of range for rank {rank}")
    if x.size == 0:
        return x.copy()
    axis %= rank
    sx, _ = params(x, x_scale, x_zero_point, "X")  # the zero point cancels out of a softmax
    sy, zy = params(x, y_scale, y_zero_point, "y")
    if opset < 13:
        # Softmax-1/11: the input is coerced to 2-D at `axis` and normalized over the second axis.
        rows = x.reshape(math.prod(x.shape[:axis]), -1)
        return _softmax_rows(rows, sx, sy, zy, x.dtype).reshape(x.shape)
    moved = np.moveaxis(x, axis, -1)
    out = _softmax_rows(moved.reshape(-1, x.shape[axis]), sx, sy, zy, x.dtype).reshape(moved.shape)
    return np.ascontiguousarray(np.moveaxis(out, -1, axis))
