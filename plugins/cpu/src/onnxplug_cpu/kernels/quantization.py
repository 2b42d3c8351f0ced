"""Quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear.

Rounding to integers is half-to-even (``np.rint``) followed by saturation to the output type's
range.  The integer products (ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul) are in
:mod:`.quantized_products`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.graph import np_dtype

from ._registry import kernel

# Saturation ranges of the integer quantized types, keyed by numpy dtype.
_INT_RANGES = {
    np.dtype(np.uint8): (0, 255),
    np.dtype(np.int8): (-128, 127),
    np.dtype(np.uint16): (0, 65535),
    np.dtype(np.int16): (-32768, 32767),
    np.dtype(ml_dtypes.uint4): (0, 15),
    np.dtype(ml_dtypes.int4): (-8, 7),
    np.dtype(ml_dtypes.uint2): (0, 3),
    np.dtype(ml_dtypes.int2): (-2, 1),
}
# float8 types whose non-saturating conversion can produce inf/NaN.
_FLOAT8 = {
    np.dtype(ml_dtypes.float8_e4m3fn),
    np.dtype(ml_dtypes.float8_e4m3fnuz),
    np.dtype(ml_dtypes.float8_e5m2),
    np.dtype(ml_dtypes.float8_e5m2fnuz),
}


def _as_float(a):
    """numpy arithmetic on ml_dtypes floats (bfloat16, float8...) is done in float32."""
    if a.dtype in (np.float16, np.float32, np.float64):
        return a
    return a.astype(np.float32)


def _param_like(param, x, axis, block_size, what):
    """Reshape a scale/zero-point so that it broadcasts against ``x``: per-tensor (scalar or one
    element), per-axis (1-D along ``axis``) or blocked (same rank, repeated ``block_size`` times)."""
    if param.ndim == 0 or (param.size == 1 and block_size <= 0):
        return param.reshape(())
    axis = axis + x.ndim if axis < 0 else axis
    if x.ndim == 1 and block_size <= 0:
        axis = 0  # a 1-D input has a single axis whatever the attribute says
    if not 0 <= axis < x.ndim:
        raise InvalidArgument(f"axis {axis} is out of range for input of rank {x.ndim}")
    if block_size > 0:
        if param.ndim != x.ndim:
            raise InvalidArgument(f"blocked {what} must have the input's rank {x.ndim}, got shape {param.shape}")
        expanded = np.repeat(param, block_size, axis=axis)
        if expanded.shape[axis] < x.shape[axis]:
            raise InvalidArgument(
                f"{what} shape {param.shape} with block_size {block_size} does not cover input shape {x.shape}"
            )
        expanded = np.take(expanded, np.arange(x.shape[axis]), axis=axis)
        if expanded.shape != x.shape:
            raise InvalidArgument(f"blocked {what} shape {param.shape} does not match input shape {x.shape}")
        return expanded
    if param.ndim != 1 or param.shape[0] != x.shape[axis]:
        raise InvalidArgument(
            f"per-axis {what} must be 1-D of length {x.shape[axis]} (axis {axis}), got shape {param.shape}"
        )
    shape = [1] * x.ndim
    shape[axis] = param.shape[0]
    return param.reshape(shape)


def _saturate(values, dtype, saturate=True):
    """Round (integers) and saturate float ``values`` into the quantized ``dtype``."""
    if dtype in _INT_RANGES:
        low, high = _INT_RANGES[dtype]
        # NaN has no integer image: it quantizes like 0 (to the zero point).
        return np.clip(np.rint(np.where(np.isnan(values), 0, values)), low, high).astype(dtype)
    if dtype in _FLOAT8 and saturate:
        limit = float(ml_dtypes.finfo(dtype).max)
        values = np.where(np.isnan(values), values, np.clip(values, -limit, limit))
    return values.astype(dtype)


def _quantize(x, y_scale, y_zero_point, *, axis=1, saturate=1, block_size=0, output_dtype=0, precision=0):
    if y_zero_point is not None:
        out_dtype = y_zero_point.dtype
        if output_dtype and np_dtype(output_dtype) != out_dtype:
            raise InvalidArgument(f"output_dtype {output_dtype} differs from y_zero_point's type {out_dtype}")
    else:
        out_dtype = np_dtype(output_dtype) if output_dtype else np.dtype(np.uint8)
    if out_dtype not in _INT_RANGES and out_dtype.kind not in "fV" and out_dtype not in _FLOAT8:
        raise Fail(f"{out_dtype} is not a quantized type")
    scale = _param_like(y_scale, x, axis, block_size, "y_scale")
    if not precision and y_zero_point is not None and x.dtype == np.float32 and _small_int(out_dtype):
        return _quantize_small(x, scale, _param_like(y_zero_point, x, axis, block_size, "y_zero_point"), out_dtype)
    if precision:
        work = np_dtype(precision)
        scaled = _as_float(x.astype(work) / scale.astype(work))
    else:
        scaled = _as_float(x) / _as_float(scale)
    if y_zero_point is not None:
        zero = _param_like(y_zero_point, x, axis, block_size, "y_zero_point")
        if out_dtype in _INT_RANGES:
            scaled = np.rint(np.where(np.isnan(scaled), 0, scaled)) + zero.astype(np.float64)
        else:
            scaled = scaled + zero.astype(np.float32)
    return _saturate(scaled, out_dtype, bool(saturate))


@kernel("QuantizeLinear", since=(10,))
def quantize_linear_10(x, y_scale, y_zero_point=None):
    return _quantize(x, y_scale, y_zero_point)


@kernel("QuantizeLinear", since=(13,))
def quantize_linear_13(x, y_scale, y_zero_point=None, *, axis):
    return _quantize(x, y_scale, y_zero_point, axis=axis)


@kernel("QuantizeLinear", since=(19,))
def quantize_linear_19(x, y_scale, y_zero_point=None, *, axis, saturate):
    return _quantize(x, y_scale, y_zero_point, axis=axis, saturate=saturate)


@kernel("QuantizeLinear", since=(21,))
def quantize_linear_21(x, y_scale, y_zero_point=None, *, axis, saturate, block_size, output_dtype):
    return _quantize(
        x, y_scale, y_zero_point, axis=axis, saturate=saturate, block_size=block_size, output_dtype=output_dtype
    )


@kernel("QuantizeLinear", since=(23, 24, 25, 28))
def quantize_linear_23(x, y_scale, y_zero_point=None, *, axis, saturate, block_size, output_dtype, precision):
    return _quantize(
        x,
        y_scale,
        y_zero_point,
        axis=axis,
        saturate=saturate,
        block_size=block_size,
        output_dtype=output_dtype,
        precision=precision,
    )


def _small_int(dtype) -> bool:
    """8- and 16-bit integers: their values and differences are exact in float32 (|.| < 2**17)."""
    return dtype in _INT_RANGES and dtype.itemsize <= 2 and dtype.kind in "iu"


def _quantize_small(x, scale, zero, out_dtype):
    """QuantizeLinear of float32 into an 8/16-bit integer type, in float32 and in place.

    The same values as the general path: ``x / scale`` and its rounding are float32 there too;
    adding the zero point in float32 is exact while the rounded value is below 2**24 in magnitude,
    and a value beyond that saturates to the same bound either way.  NaN becomes the zero point.
    With a scalar zero point the saturation happens before the zero point is added (to
    ``[low - zero, high - zero]``: the same result) and the addition writes the integers directly.
    """
    scaled = np.divide(x, scale.astype(np.float32, copy=False), dtype=np.float32)
    np.rint(scaled, out=scaled)
    low, high = _INT_RANGES[out_dtype]
    if zero.ndim == 0:
        z = float(zero)
        np.clip(scaled, np.float32(low - z), np.float32(high - z), out=scaled)
        flat = scaled.reshape(-1)
        # One read without a temporary finds a NaN (clipped values cannot overflow into one).
        if flat.size and np.isnan(np.dot(flat, flat)):
            flat[np.isnan(flat)] = 0
        out = np.empty(scaled.shape, dtype=out_dtype)
        np.add(scaled, np.float32(z), out=out, casting="unsafe")  # exact small integers
        return out
    nan = np.isnan(scaled)
    if nan.any():
        scaled[nan] = 0
    scaled += zero.astype(np.float32)
    np.clip(scaled, low, high, out=scaled)
    return scaled.astype(out_dtype)


def _dequantize(x, x_scale, x_zero_point, *, axis=1, block_size=0, output_dtype=0):
    out_dtype = np_dtype(output_dtype) if output_dtype else x_scale.dtype
    if _small_int(x.dtype) and x_scale.dtype == np.float32:
        # Exact in float32: 8/16-bit integers and their differences are below 2**17.
        if x_zero_point is not None:  # one pass: the cast happens inside the subtraction
            zero = _param_like(x_zero_point, x, axis, block_size, "x_zero_point").astype(np.float32)
            values = np.subtract(x, zero, dtype=np.float32)
        else:
            values = x.astype(np.float32)
        values *= _param_like(x_scale, x, axis, block_size, "x_scale")
        return values.astype(out_dtype, copy=False)
    if x.dtype in _INT_RANGES or x.dtype.kind in "iu":
        values = x.astype(np.int64)
        if x_zero_point is not None:
            values = values - _param_like(x_zero_point, x, axis, block_size, "x_zero_point").astype(np.int64)
        values = values.astype(np.float64 if x.dtype == np.int32 else np.float32)
    else:  # float8 / float4: the zero point is a float of the same type
        values = x.astype(np.float32)
        if x_zero_point is not None:
            values = values - _param_like(x_zero_point, x, axis, block_size, "x_zero_point").astype(np.float32)
    scale = _param_like(x_scale, x, axis, block_size, "x_scale")
    return (values * _as_float(scale)).astype(out_dtype)


@kernel("DequantizeLinear", since=(10,))
def dequantize_linear_10(x, x_scale, x_zero_point=None):
    return _dequantize(x, x_scale, x_zero_point)


@kernel("DequantizeLinear", since=(13, 19))
def dequantize_linear_13(x, x_scale, x_zero_point=None, *, axis):
    return _dequantize(x, x_scale, x_zero_point, axis=axis)


@kernel("DequantizeLinear", since=(21,))
def dequantize_linear_21(x, x_scale, x_zero_point=None, *, axis, block_size):
    return _dequantize(x, x_scale, x_zero_point, axis=axis, block_size=block_size)


@kernel("DequantizeLinear", since=(23, 24, 25, 28))
def dequantize_linear_23(x, x_scale, x_zero_point=None, *, axis, block_size, output_dtype):
    return _dequantize(x, x_scale, x_zero_point, axis=axis, block_size=block_size, output_dtype=output_dtype)


def quantize_dequantize(x, q_scale, q_zero, dq_scale, dq_zero, q_attrs, dq_attrs):
    """``DequantizeLinear(QuantizeLinear(x, ...), ...)`` through the two kernels, with the nodes'
    attributes (the general path of the CPU provider's fused Q→DQ pairs, ``kernels._qdq``)."""
    q_keys = ("axis", "saturate", "block_size", "output_dtype", "precision")
    quantized = _quantize(x, q_scale, q_zero, **{k: v for k, v in q_attrs.items() if k in q_keys})
    dq_keys = ("axis", "block_size", "output_dtype")
    return _dequantize(quantized, dq_scale, dq_zero, **{k: v for k, v in dq_attrs.items() if k in dq_keys})


@kernel("DynamicQuantizeLinear", since=(11,))
def dynamic_quantize_linear(x):
    """uint8 quantization whose range always includes 0, so that 0 is exactly representable."""
    x32 = x.astype(np.float32)
    high = max(float(x32.max()) if x32.size else 0.0, 0.0)
    low = min(float(x32.min()) if x32.size else 0.0, 0.0)
    scale = np.float32((high - low) / 255.0)
    if scale == 0:  # an all-zero input: onnxruntime reports scale 1 rather than a zero scale
        scale = np.float32(1.0)
    zero = np.uint8(np.clip(np.rint(np.float32(0 - low) / scale), 0, 255))
    y = np.clip(np.rint(x32 / scale) + float(zero), 0, 255).astype(np.uint8)
    return y, np.array(scale, np.float32), np.array(zero, np.uint8)
