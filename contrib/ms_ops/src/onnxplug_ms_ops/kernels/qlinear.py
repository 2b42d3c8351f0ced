"""QLinear* ops on per-tensor quantized uint8/int8 tensors, and NhwcMaxPool.

Requantization rounds half to even and saturates, in float32, the way onnxruntime's MLAS
routines do: ``q = clamp(rint(value / scale) + zero_point)``.  Unary ops (Sigmoid, LeakyRelu)
build the 256-entry table of every possible input once per call and index it, which is exact
per input value and independent of the tensor size.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from ._common import scalar
from ._registry import kernel


def _limits(dtype):
    info = np.iinfo(dtype)
    return info.min, info.max


def quantize(values: np.ndarray, scale: float, zero: int, dtype) -> np.ndarray:
    low, high = _limits(dtype)
    q = np.rint(values / np.float32(scale)) + np.float32(zero)
    return np.clip(q, low, high).astype(dtype)


def params(x, scale, zero, name):
    """A per-tensor (scale, zero point) of quantized ``x``, the zero point checked against its type."""
    s = np.float32(scalar(scale, f"{name}_scale"))
    z = scalar(zero, f"{name}_zero_point")
    if zero is not None and zero.dtype != x.dtype:
        raise Fail(f"{name}_zero_point has type {zero.dtype}, expected {x.dtype}")
    return s, z


def _binary(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point, combine):
    if a.dtype != b.dtype:
        raise Fail(f"A and B must have the same type, got {a.dtype} and {b.dtype}")
    sa, za = params(a, a_scale, a_zero_point, "A")
    sb, zb = params(b, b_scale, b_zero_point, "B")
    sc, zc = params(a, c_scale, c_zero_point, "C")
    da = a.astype(np.float32) - np.float32(za)
    db = b.astype(np.float32) - np.float32(zb)
    try:
        value = combine(da, db, sa, sb, sc)
    except ValueError as error:
        raise Fail(f"shapes {a.shape} and {b.shape} do not broadcast ({error})") from None
    low, high = _limits(a.dtype)
    return np.clip(np.rint(value) + np.float32(zc), low, high).astype(a.dtype)


@kernel("QLinearAdd", since=(1,))
def qlinear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
    return _binary(
        a,
        a_scale,
        a_zero_point,
        b,
        b_scale,
        b_zero_point,
        c_scale,
        c_zero_point,
        lambda da, db, sa, sb, sc: da * (sa / sc) + db * (sb / sc),
    )


@kernel("QLinearMul", since=(1,))
def qlinear_mul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
    return _binary(
        a,
        a_scale,
        a_zero_point,
        b,
        b_scale,
        b_zero_point,
        c_scale,
        c_zero_point,
        lambda da, db, sa, sb, sc: (da * db) * (sa * sb / sc),
    )


def _table_op(x, x_scale, x_zero_point, y_scale, y_zero_point, fn):
    sx, zx = params(x, x_scale, x_zero_point, "X")
    sy, zy = params(x, y_scale, y_zero_point, "Y")
    low, high = _limits(x.dtype)
    every = np.arange(low, high + 1)
    table = quantize(fn((every.astype(np.float32) - np.float32(zx)) * sx), sy, zy, x.dtype)
    return table[x.astype(np.int64) - low]


@kernel("QLinearSigmoid", since=(1,))
def qlinear_sigmoid(x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None):
    return _table_op(
        x, x_scale, x_zero_point, y_scale, y_zero_point, lambda v: (1.0 / (1.0 + np.exp(-v))).astype(np.float32)
    )


@kernel("QLinearLeakyRelu", since=(1,))
def qlinear_leaky_relu(x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *, alpha):
    return _table_op(
        x, x_scale, x_zero_point, y_scale, y_zero_point, lambda v: np.where(v >= 0, v, v * np.float32(alpha))
    )


@kernel("QLinearGlobalAveragePool", since=(1,))
def qlinear_global_average_pool(x, x_scale, x_zero_point, y_scale, y_zero_point, *, channels_last):
    if x.ndim < 3:
        raise Fail(f"QLinearGlobalAveragePool: input must have rank >= 3, got shape {x.shape}")
    sx, zx = params(x, x_scale, x_zero_point, "x")
    sy, zy = params(x, y_scale, y_zero_point, "y")
    axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    count = int(np.prod([x.shape[a] for a in axes]))
    total = x.sum(axis=axes, keepdims=True, dtype=np.int64) - count * zx
    value = total.astype(np.float32) * np.float32(sx / (sy * np.float32(count)))
    low, high = _limits(x.dtype)
    return np.clip(np.rint(value) + np.float32(zy), low, high).astype(x.dtype)


@kernel("QLinearConcat", since=(1,))
def qlinear_concat(y_scale, y_zero_point, *inputs, axis):
    if not inputs or len(inputs) % 3:
        raise Fail(f"QLinearConcat: inputs must be (tensor, scale, zero point) triples, got {len(inputs)} values")
    sy = np.float32(scalar(y_scale, "Y_scale"))
    zy = scalar(y_zero_point, "Y_zero_point")
    dtype = y_zero_point.dtype
    parts = []
    for i in range(0, len(inputs), 3):
        x, s, z = inputs[i : i + 3]
        if x.dtype != dtype:
            raise Fail(f"QLinearConcat: input {i // 3} has type {x.dtype}, expected {dtype}")
        sx, zx = np.float32(scalar(s, "scale")), scalar(z, "zero point")
        if sx == sy and zx == zy:
            parts.append(x)
        else:
            parts.append(quantize((x.astype(np.float32) - np.float32(zx)) * sx, sy, zy, dtype))
    rank = parts[0].ndim
    if not -rank <= axis < rank:
        raise InvalidArgument(f"QLinearConcat: axis {axis} is out of range for rank {rank}")
    try:
        return np.concatenate(parts, axis=axis)
    except ValueError as error:
        raise Fail(f"QLinearConcat: shapes {[p.shape for p in parts]} do not concatenate on axis {axis}") from error


@kernel("NhwcMaxPool", since=(1,))
def nhwc_max_pool(x, *, auto_pad, kernel_shape, dilations=None, strides=None, pads=None, ceil_mode):
    rank = x.ndim - 2
    if rank < 1 or len(kernel_shape) != rank:
        raise Fail(f"NhwcMaxPool: input {x.shape} and kernel_shape {kernel_shape} do not fit (N, spatial..., C)")
    strides = tuple(strides) if strides else (1,) * rank
    dilations = tuple(dilations) if dilations else (1,) * rank
    spatial = x.shape[1:-1]
    spans = [d * (k - 1) + 1 for d, k in zip(dilations, kernel_shape)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        # As onnxruntime's pooling: the SAME padding is sized for the undilated kernel, then
        # the output is whatever the dilated kernel yields over the padded input.
        targets = [-(-size // s) for size, s in zip(spatial, strides)]
        totals = [max(0, (t - 1) * s + k - size) for t, s, k, size in zip(targets, strides, kernel_shape, spatial)]
        begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in totals]
        end = [t - b for t, b in zip(totals, begin)]
        ceil_mode = 0
    elif auto_pad == "VALID":
        begin, end = [0] * rank, [0] * rank
    elif auto_pad == "NOTSET":
        pad = tuple(pads) if pads else (0,) * (2 * rank)
        begin, end = list(pad[:rank]), list(pad[rank:])
    else:
        raise InvalidArgument(f"NhwcMaxPool: unknown auto_pad {auto_pad!r}")
    outs = []
    for size, b, e, span, s in zip(spatial, begin, end, spans, strides):
        extent = size + b + e - span
        out = (-(-extent // s) if ceil_mode else extent // s) + 1
        if ceil_mode and (out - 1) * s >= size + b:
            out -= 1  # the last window would start in the end padding
        outs.append(out)
    if any(o <= 0 for o in outs):
        raise Fail(f"NhwcMaxPool: output would be empty for input {x.shape} and kernel {tuple(kernel_shape)}")
    low = np.iinfo(x.dtype).min
    extra = [
        max(0, (o - 1) * s + span - (size + b + e))
        for o, s, span, size, b, e in zip(outs, strides, spans, spatial, begin, end)
    ]
    padded = np.pad(x, [(0, 0)] + [(b, e + x_) for b, e, x_ in zip(begin, end, extra)] + [(0, 0)], constant_values=low)
    result = None
    for offset in np.ndindex(*kernel_shape):
        index = tuple(slice(k * d, k * d + s * (o - 1) + 1, s) for k, d, s, o in zip(offset, dilations, strides, outs))
        window = padded[(slice(None),) + index + (slice(None),)]
        result = window if result is None else np.maximum(result, window)
    return np.ascontiguousarray(result)
