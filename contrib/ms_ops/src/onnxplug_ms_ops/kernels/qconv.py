"""The com.microsoft QLinearConv: ONNX QLinearConv that may take channels-last (NHWC) tensors.

onnxruntime's ORT_ENABLE_ALL optimizer (its NHWC transformer) rewrites quantized convolutions
into this op with ``channels_last=1`` between Transposes; such models are plain NHWC, not
machine-specific, so they run here.  The convolution is computed exactly on the zero-point
centred integers (in float64, exact below 2**53) and requantized in float32 as onnxruntime
does: ``rint(acc * (x_scale * w_scale / y_scale)) + y_zero_point``, saturated.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail
from onnxplug_cpu.numerics import convolve

from ._common import scalar
from ._registry import kernel


def _per_channel(value, channels, name):
    if value.size == 1:
        return value.reshape(())
    if value.shape != (channels,):
        raise Fail(f"QLinearConv: {name} must be a scalar or have {channels} values (one per output channel)")
    return value


@kernel("QLinearConv", since=(1,))
def qlinear_conv(
    x,
    x_scale,
    x_zero_point,
    w,
    w_scale,
    w_zero_point,
    y_scale,
    y_zero_point,
    b=None,
    *,
    auto_pad,
    channels_last,
    dilations=None,
    group,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    if x.ndim < 3 or w.ndim != x.ndim:
        raise Fail(f"QLinearConv: x {x.shape} and w {w.shape} must have the same rank, at least 3")
    if channels_last:
        x = np.moveaxis(x, -1, 1)
    channels = w.shape[0]
    xi = x.astype(np.float64) - scalar(x_zero_point, "x_zero_point")
    w_zero = _per_channel(w_zero_point, channels, "w_zero_point").astype(np.float64)
    wi = w.astype(np.float64) - (w_zero.reshape((-1,) + (1,) * (w.ndim - 1)) if w_zero.ndim else w_zero)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    acc = convolve(
        xi,
        wi,
        None if b is None else b.astype(np.float64),
        op="QLinearConv",
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )
    multiplier = np.float32(scalar(x_scale, "x_scale")) * _per_channel(w_scale, channels, "w_scale").astype(np.float32)
    multiplier = (multiplier / np.float32(scalar(y_scale, "y_scale"))).astype(np.float32)
    scaled = acc.astype(np.float32) * (multiplier.reshape(shape) if multiplier.ndim else multiplier)
    info = np.iinfo(y_zero_point.dtype)
    y = np.clip(np.rint(scaled) + scalar(y_zero_point, "y_zero_point"), info.min, info.max).astype(y_zero_point.dtype)
    return np.ascontiguousarray(np.moveaxis(y, 1, -1)) if channels_last else y
