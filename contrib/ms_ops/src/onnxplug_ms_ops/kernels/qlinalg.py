"""QGemm, QLinearWhere and the com.microsoft QuantizeLinear / DequantizeLinear.

Integer products are accumulated in float64 (exact for 8-bit operands up to K = 2**37) and
rescaled in float32, as onnxruntime's MLAS does.  The com.microsoft Q/DQ ops predate ONNX's
16-bit and 4-bit quantized types, which is why onnxruntime's quantizer writes them
(``UseQDQContribOps``); they quantize per tensor or along ``axis`` (default 1).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from ._common import per_column, scalar
from ._registry import kernel
from .qlinear import params, quantize

_RANGES = {
    np.dtype(np.uint8): (0, 255),
    np.dtype(np.int8): (-128, 127),
    np.dtype(np.uint16): (0, 65535),
    np.dtype(np.int16): (-32768, 32767),
    np.dtype(np.int32): (-(2**31), 2**31 - 1),
    np.dtype(ml_dtypes.uint4): (0, 15),
    np.dtype(ml_dtypes.int4): (-8, 7),
}


@kernel("QGemm", since=(1,))
def qgemm(
    a,
    a_scale,
    a_zero_point,
    b,
    b_scale,
    b_zero_point,
    c=None,
    y_scale=None,
    y_zero_point=None,
    *,
    transA,
    transB,
    alpha,
):
    op = "QGemm"
    if a.ndim != 2 or b.ndim != 2:
        raise Fail(f"{op}: A and B must be 2-D, got shapes {a.shape} and {b.shape}")
    a = a.T if transA else a
    b = b.T if transB else b
    if a.shape[1] != b.shape[0]:
        raise Fail(f"{op}: op(A) {a.shape} and op(B) {b.shape} do not multiply")
    columns = b.shape[1]
    za = scalar(a_zero_point, "a_zero_point")
    zb = per_column(b_zero_point, "b_zero_point", columns, 0, op)
    acc = (a.astype(np.float64) - za) @ (b.astype(np.float64) - zb)
    if c is not None:
        try:
            acc = acc + c.astype(np.float64)
        except ValueError:
            raise Fail(f"{op}: C of shape {c.shape} does not broadcast to {acc.shape}") from None
    # C is int32 quantized with scale alpha * a_scale * b_scale, so it shares the product's scale.
    multiplier = np.float32(alpha) * np.float32(scalar(a_scale, "a_scale"))
    multiplier = multiplier * per_column(b_scale, "b_scale", columns, 1, op).astype(np.float32)
    y = (acc.astype(np.float32) * multiplier).astype(np.float32)
    if y_scale is None:
        return y
    if y_zero_point is None:
        # onnxruntime: y_scale without a zero point gives float output divided by y_scale
        return (y / np.float32(scalar(y_scale, "y_scale"))).astype(np.float32)
    return quantize(y, np.float32(scalar(y_scale, "y_scale")), scalar(y_zero_point, "y_zero_point"), y_zero_point.dtype)


@kernel("QLinearWhere", since=(1,))
def qlinear_where(condition, x, x_scale, x_zero_point, y, y_scale, y_zero_point, z_scale, z_zero_point):
    if x.dtype != y.dtype:
        raise Fail(f"QLinearWhere: X and Y must have the same type, got {x.dtype} and {y.dtype}")
    sz, zz = params(x, z_scale, z_zero_point, "z")
    sides = []
    for value, scale, zero, name in ((x, x_scale, x_zero_point, "x"), (y, y_scale, y_zero_point, "y")):
        s, z = params(value, scale, zero, name)
        same = s == sz and z == zz
        sides.append(value if same else quantize((value.astype(np.float32) - np.float32(z)) * s, sz, zz, x.dtype))
    try:
        return np.where(condition, *sides).astype(x.dtype, copy=False)
    except ValueError:
        raise Fail(f"QLinearWhere: shapes {condition.shape}, {x.shape} and {y.shape} do not broadcast") from None


def _along(param, x, axis, name, op):
    """``param`` shaped to broadcast against ``x``: a scalar, or a 1-D tensor along ``axis``."""
    if param.ndim == 0 or (param.ndim == 1 and param.size == 1 and x.ndim <= 1):
        return param.reshape(())
    if param.ndim != 1:
        raise InvalidArgument(f"{op}: {name} must be a scalar or 1-D, got shape {param.shape}")
    if not -x.ndim <= axis < x.ndim:
        raise InvalidArgument(f"{op}: axis {axis} is out of range for input of rank {x.ndim}")
    axis %= x.ndim
    if param.shape[0] != x.shape[axis]:
        raise InvalidArgument(f"{op}: {name} has {param.shape[0]} values, input axis {axis} has {x.shape[axis]}")
    shape = [1] * x.ndim
    shape[axis] = -1
    return param.reshape(shape)


@kernel("QuantizeLinear", since=(1,))
def quantize_linear(x, y_scale, y_zero_point=None, *, axis=None):
    op = "QuantizeLinear"
    axis = 1 if axis is None else axis
    dtype = y_zero_point.dtype if y_zero_point is not None else np.dtype(np.uint8)
    if dtype not in _RANGES or dtype == np.int32:
        raise Fail(f"{op}: unsupported output type {dtype}")
    scale = _along(y_scale, x, axis, "y_scale", op).astype(np.float32)
    zero = 0 if y_zero_point is None else _along(y_zero_point, x, axis, "y_zero_point", op).astype(np.float32)
    low, high = _RANGES[dtype]
    return np.clip(np.rint(x.astype(np.float32) / scale) + zero, low, high).astype(dtype)


@kernel("DequantizeLinear", since=(1,))
def dequantize_linear(x, x_scale, x_zero_point=None, *, axis=None):
    op = "DequantizeLinear"
    axis = 1 if axis is None else axis
    if x_zero_point is not None and x_zero_point.dtype != x.dtype:
        raise Fail(f"{op}: x_zero_point has type {x_zero_point.dtype}, expected {x.dtype}")
    scale = _along(x_scale, x, axis, "x_scale", op)
    zero = 0 if x_zero_point is None else _along(x_zero_point, x, axis, "x_zero_point", op).astype(np.float32)
    values = (x.astype(np.float32) - zero) * scale.astype(np.float32)
    return values.astype(x_scale.dtype, copy=False)
