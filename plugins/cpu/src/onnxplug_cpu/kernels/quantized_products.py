"""The integer products: MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv.

Integer results are computed exactly: with AVX-512 VNNI and constant weights as int8 products
(``kernels._int8_conv``, ``kernels._int8_matmul``); otherwise convolutions with constant weights
on the float32 paths where the sums provably stay below 2**24 (``kernels._exact_conv``), and
other accumulations of 8/16-bit products in float64 (exact below 2**53, and BLAS-fast) or
int64, cast to int32 only at the end.  Requantization rounds half-to-even (``np.rint``), then
saturates to the output type's range.  Split from :mod:`.quantization` (QuantizeLinear and
DequantizeLinear), whose conversions it shares.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import InvalidArgument

from ..numerics import convolve
from . import _requant_jit
from ._exact_conv import ExactConv, type_range
from ._int8_conv import Int8Conv, int8_conv_for
from ._int8_matmul import Int8MatMul
from ._registry import kernel
from .quantization import _INT_RANGES, _as_float, _saturate, _small_int


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
