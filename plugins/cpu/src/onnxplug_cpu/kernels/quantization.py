"""Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and the integer
convolution / matmul family (ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul).

Integer results are computed exactly: convolutions with constant weights on the float32 paths
where the sums provably stay below 2**24 (``kernels._exact_conv``), other accumulations of
8/16-bit products in float64 (exact below 2**53, and BLAS-fast) or int64, and only then cast to
int32.  Rounding to integers is
half-to-even (``np.rint``) followed by saturation to the output type's range.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.graph import np_dtype

from ..numerics import convolve
from . import _requant_jit
from ._exact_conv import ExactConv, type_range
from ._int8_conv import Int8Conv, int8_conv_for
from ._int8_matmul import Int8MatMul
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


def _matmul_exact(a, b):
    """Integer matmul with an int32 result; float64 BLAS is exact for 8/16-bit operands."""
    if a.ndim == 0 or b.ndim == 0:
        raise InvalidArgument("MatMulInteger inputs must have rank >= 1")
    return np.rint(np.matmul(a.astype(np.float64), b.astype(np.float64)))


def _row_zero(zero, a):
    """A's zero point: scalar, or one per row (1-D of length M) for a matrix."""
    if zero is None:
        return 0
    if zero.size == 1:
        return zero.reshape(()).astype(np.int64)
    if a.ndim >= 2 and zero.ndim == 1 and zero.shape[0] == a.shape[-2]:
        return zero.astype(np.int64)[:, None]
    return zero.astype(np.int64)


def _col_zero(zero):
    if zero is None:
        return 0
    return zero.reshape(()).astype(np.int64) if zero.size == 1 else zero.astype(np.int64)


def _int8_matmul(ctx, b_slot: int, b_zero_slot: int) -> Int8MatMul | None:
    """The int8 VNNI product (``kernels._int8_matmul``) for constant 2-D weights whose zero
    point (scalar or per column) is constant or absent and whose centred values fit int8."""
    b = ctx.constant(b_slot)
    b_zero = ctx.constant(b_zero_slot)
    if b is None or b.ndim != 2 or b.dtype not in (np.int8, np.uint8):
        return None
    if b_zero is None and b_zero_slot < ctx.num_inputs:
        return None  # a zero point computed at run time
    centred = b.astype(np.int64)
    if b_zero is not None:
        if b_zero.size != 1 and b_zero.shape != (b.shape[1],):
            return None  # the general path reports the bad shape
        centred -= b_zero.astype(np.int64).reshape(-1 if b_zero.size > 1 else ())
    return Int8MatMul(centred) if Int8MatMul.accepts(centred) else None


def _int8_input(prepared, a, a_zero_point) -> bool:
    """Whether a call's ``a`` suits the prepared int8 product: 8-bit, a scalar zero point, its
    last axis the weights' depth."""
    return (
        prepared is not None
        and a.dtype in (np.uint8, np.int8)
        and a.ndim >= 1
        and a.shape[-1] == prepared.depth
        and (a_zero_point is None or (a_zero_point.size == 1 and a_zero_point.dtype == a.dtype))
    )


@kernel("MatMulInteger", since=(10,), factory=True)
def matmul_integer(ctx):
    prepared = _int8_matmul(ctx, 1, 3)

    def run(a, b, a_zero_point=None, b_zero_point=None):
        if _int8_input(prepared, a, a_zero_point):
            y = prepared.integer(a, 0 if a_zero_point is None else int(a_zero_point.reshape(())))
            if y is not None:
                return y
        left = a.astype(np.int64) - _row_zero(a_zero_point, a)
        right = b.astype(np.int64) - _col_zero(b_zero_point)
        return _matmul_exact(left, right).astype(np.int32)

    return run


def _requantize(acc, multiplier, y_zero_point, *, in_place=False):
    """Scale an int32 accumulator to the output's quantized type (float32 arithmetic, like the
    reference), rounding half-to-even and saturating.  ``in_place``: ``acc`` is the caller's
    float32 scratch array and may be overwritten."""
    if in_place and acc.dtype == np.float32:
        scaled = acc
    else:
        scaled = acc.astype(np.float32)  # rounds exact integers beyond 2**24 as int32 → float32 does
    scaled *= multiplier.astype(np.float32)
    np.rint(scaled, out=scaled)
    if not _small_int(y_zero_point.dtype):
        return _saturate(scaled.astype(np.float64) + y_zero_point.astype(np.float64), y_zero_point.dtype)
    # Saturating to [low - zero, high - zero] and then adding the zero point is saturating after
    # the addition (exact small integers); the addition writes the output type directly.
    low, high = _INT_RANGES[y_zero_point.dtype]
    if y_zero_point.size != 1:
        scaled += y_zero_point.astype(np.float32)
        np.clip(scaled, low, high, out=scaled)
        return scaled.astype(y_zero_point.dtype)
    zero = float(y_zero_point.reshape(()))
    np.clip(scaled, np.float32(low - zero), np.float32(high - zero), out=scaled)
    out = np.empty(scaled.shape, dtype=y_zero_point.dtype)
    np.add(scaled, np.float32(zero), out=out, casting="unsafe")
    return out


def _requantize_compiled(scaled, multiplier, y_zero_point, plus=None):
    """:func:`_requantize` of QLinearConv's float32 ``(N, M, ...)`` sums (this call's own array)
    in one compiled in-place pass (``kernels._requant_jit``) for a scalar 8-bit zero point and a
    scalar or ``(1, M, 1...)`` multiplier; ``None`` where that does not apply (numpy's path).
    ``plus`` (``ExactConv.rounded_parts``' float32 correction, ``(M,)`` or ``(M, P)``) is added
    to the sums first, in the same pass; ``None`` is returned only without it."""
    jit = _requant_jit.compiled()
    if plus is not None:
        kernels = _requant_jit.compiled_with_correction()
        if kernels is None or jit is None:
            return None
        jit = kernels[0] if plus.ndim == 1 else kernels[1]
    if jit is None or scaled.ndim < 2 or not scaled.flags.c_contiguous or not scaled.flags.writeable:
        return None
    if y_zero_point.size != 1 or y_zero_point.dtype not in (np.int8, np.uint8):
        return None
    channels = scaled.shape[1]
    factors = multiplier.astype(np.float32).reshape(-1)
    if factors.size not in (1, channels) or (multiplier.ndim > 1 and multiplier.shape[1] != factors.size):
        return None
    factors = np.ascontiguousarray(np.broadcast_to(factors, (channels,)))
    low, high = _INT_RANGES[y_zero_point.dtype]
    zero = float(y_zero_point.reshape(()))
    flat = scaled.reshape(scaled.shape[0], channels, -1)
    if plus is None:
        jit(flat, factors, np.float32(low - zero), np.float32(high - zero), np.float32(zero))
    else:
        jit(flat, plus, factors, np.float32(low - zero), np.float32(high - zero), np.float32(zero))
    return scaled.astype(y_zero_point.dtype)  # exact: integers within the type's range


@kernel("QLinearMatMul", since=(10, 21), factory=True)
def qlinear_matmul(ctx):
    prepared = _int8_matmul(ctx, 3, 5)

    def run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
        if (
            _int8_input(prepared, a, a_zero_point)
            and a_scale.size == 1
            and y_zero_point.size == 1
            and y_zero_point.dtype in (np.uint8, np.int8)
            and b_scale.size in (1, prepared.columns)
        ):
            multiplier = (
                _as_float(a_scale).astype(np.float32).reshape(())
                * _as_float(b_scale).astype(np.float32).reshape(-1)
                / _as_float(y_scale).astype(np.float32).reshape(())
            )
            y = prepared.qlinear(a, int(a_zero_point.reshape(())), multiplier, y_zero_point)
            if y is not None:
                return y
        return _qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point)

    return run


def _qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    left = a.astype(np.int64) - _row_zero(a_zero_point, a)
    right = b.astype(np.int64) - _col_zero(b_zero_point)
    acc = _matmul_exact(left, right)
    a_s = _as_float(a_scale).astype(np.float32)
    if a_s.ndim == 1 and a_s.size > 1:
        a_s = a_s[:, None]
    multiplier = a_s * _as_float(b_scale).astype(np.float32) / _as_float(y_scale).astype(np.float32)
    return _requantize(acc, multiplier, y_zero_point)


# --- integer convolution -------------------------------------------------------------------


def _integer_conv(x, w, *, auto_pad, dilations, group, kernel_shape, pads, strides):
    """Exact convolution of zero-point-corrected integer tensors; returns float64 sums.

    The provider's one convolution (``numerics.convolve``) in float64: the integer products and
    their sums are exact while they stay below 2**53, far beyond what 8-bit inputs reach.
    """
    return convolve(
        x.astype(np.float64),
        w.astype(np.float64),
        group=group,
        kernel_shape=kernel_shape,
        strides=strides,
        dilations=dilations,
        pads=pads,
        auto_pad=auto_pad,
    )


def _scalar(param, what):
    """A per-tensor parameter (scalar or one element) as a 0-d array."""
    if param.size != 1:
        raise InvalidArgument(f"{what} must be a scalar, got shape {param.shape}")
    return param.reshape(())


def _per_channel(zero, channels):
    """A weight zero point / scale: scalar or one per output channel, shaped to broadcast."""
    if zero.size == 1:
        return zero.reshape(())
    if zero.ndim != 1 or zero.shape[0] != channels:
        raise InvalidArgument(f"per-channel parameter shape {zero.shape} does not match {channels} channels")
    return zero


def _centred_weights(w, w_zero_point):
    """Convolution weights minus their (scalar or per-output-channel) zero point, in int64."""
    wi = w.astype(np.int64)
    if w_zero_point is None:
        return wi
    wz = _per_channel(w_zero_point.astype(np.int64), w.shape[0])
    return wi - (wz.reshape((-1,) + (1,) * (w.ndim - 1)) if wz.ndim else wz)


def _exact_conv(ctx, w_slot, x_zero_slot, w_zero_slot, group, geometry, bias_slot=None) -> ExactConv | Int8Conv | None:
    """The prepared exact path for an ungrouped Conv whose weights, weight zero point (if any),
    input zero point and bias (if any) are constants: the int8 VNNI product
    (``kernels._int8_conv``) where the CPU has it and the centred weights fit int8, else the
    float32 path (``kernels._exact_conv``); ``None`` otherwise (the kernel then takes the
    general float64 path)."""
    w = ctx.constant(w_slot)
    x_zero = ctx.constant(x_zero_slot)
    w_zero = ctx.constant(w_zero_slot)
    if w is None or x_zero is None or group != 1 or (w_zero is None and w_zero_slot < ctx.num_inputs):
        return None
    bias = None if bias_slot is None else ctx.constant(bias_slot)
    if bias is None and bias_slot is not None and bias_slot < ctx.num_inputs:
        return None  # a bias computed at run time: the general path adds it
    if type_range(x_zero.dtype) is None or x_zero.size != 1 or w.ndim < 3:
        return None
    if bias is not None and bias.shape != (w.shape[0],):
        return None  # the general path reports the bad shape
    centred = _centred_weights(w, w_zero)
    integer = int8_conv_for(centred, x_zero.dtype, int(x_zero.reshape(())), geometry, bias)
    if integer is not None and integer.fits_int32:
        return integer
    prepared = ExactConv(centred, x_zero.dtype, int(x_zero.reshape(())), geometry, bias)
    return prepared if prepared.exact_in_float32 else None


@kernel("ConvInteger", since=(10,), factory=True)
def conv_integer(ctx, *, auto_pad, dilations=None, group, kernel_shape=None, pads=None, strides=None):
    geometry = dict(
        auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads, strides=strides
    )
    exact = _exact_conv(ctx, 1, 2, 3, group, geometry)

    def run(x, w, x_zero_point=None, w_zero_point=None):
        x_zero = 0 if x_zero_point is None else _scalar(x_zero_point, "x_zero_point").astype(np.int64)
        if isinstance(exact, Int8Conv) and x.dtype == exact.x_dtype and x.ndim == 4:
            return exact.integer(x)
        if isinstance(exact, ExactConv) and x.dtype == exact.x_dtype:
            return exact.sums(x).astype(np.int32)  # exact integers: the cast does not round
        acc = _integer_conv(x.astype(np.int64) - x_zero, _centred_weights(w, w_zero_point), **geometry)
        return np.rint(acc).astype(np.int32)

    return run


def _multiplier(x_scale, w_scale, y_scale, channels):
    """QLinearConv's ``x_scale * w_scale / y_scale`` in float32: a scalar or ``(M,)``."""
    w_s = _per_channel(_as_float(w_scale).astype(np.float32), channels)
    x_s = _as_float(_scalar(x_scale, "x_scale")).astype(np.float32)
    y_s = _as_float(_scalar(y_scale, "y_scale")).astype(np.float32)
    return x_s * w_s / y_s


@kernel("QLinearConv", since=(10,), factory=True)
def qlinear_conv(ctx, *, auto_pad, dilations=None, group, kernel_shape=None, pads=None, strides=None):
    geometry = dict(
        auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads, strides=strides
    )
    exact = _exact_conv(ctx, 3, 2, 5, group, geometry, bias_slot=8)

    def run(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None):
        x_zero = _scalar(x_zero_point, "x_zero_point")
        multiplier = _multiplier(x_scale, w_scale, y_scale, w.shape[0])
        y_zero = _scalar(y_zero_point, "y_zero_point")
        if isinstance(exact, Int8Conv) and x.dtype == exact.x_dtype and x.ndim == 4:
            y = exact.qlinear(x, multiplier, y_zero)
            if y is not None:
                return y
        if isinstance(exact, ExactConv) and x.dtype == exact.x_dtype:
            acc, plus = exact.rounded_parts(x)
            if plus is not None:
                if multiplier.ndim:
                    multiplier = multiplier.reshape((1, -1) + (1,) * (acc.ndim - 2))
                # The correction (and bias) added in the requantization's pass, not one of its own.
                fast = _requantize_compiled(acc, multiplier, y_zero, plus)
                if fast is not None:
                    return fast
                acc += plus.reshape((-1,) + (1,) * (acc.ndim - 2)) if plus.ndim == 1 else plus.reshape(acc.shape[1:])
        else:
            xi = x.astype(np.int64) - x_zero.astype(np.int64)
            acc = _integer_conv(xi, _centred_weights(w, w_zero_point), **geometry)
            if B is not None:
                acc += B.reshape((1, -1) + (1,) * (acc.ndim - 2)).astype(np.float64)
        if multiplier.ndim:
            multiplier = multiplier.reshape((1, -1) + (1,) * (acc.ndim - 2))
        # The accumulator is this call's own array (both paths return a fresh one).
        if acc.dtype in (np.float32, np.float64):
            # float64 sums (several blocks) are exact integers: their float32 rounding is the
            # int32 -> float32 conversion _requantize starts with.
            fast = _requantize_compiled(acc.astype(np.float32, copy=False), multiplier, y_zero)
            if fast is not None:
                return fast
        return _requantize(acc, multiplier, y_zero, in_place=True)

    return run
