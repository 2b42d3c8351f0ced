"""onnxruntime.quantization's enums and the arithmetic of linear quantization.

The enum members, their values and their ``from_string``/``tensor_type`` helpers are
onnxruntime's, so code that stores or compares them moves over unchanged.  The range rules
(``get_qmin_qmax_for_qType``) and the scale/zero-point rule (``compute_scale_zp``) follow
onnxruntime's semantics: the real range always contains 0 (so 0 is exactly representable, which
padding and ReLU rely on), symmetric ranges are centred, and ``reduce_range`` keeps 7 bits for
8-bit types (for CPUs whose int8 dot products saturate in 16 bits).
"""

from __future__ import annotations

from enum import Enum

import ml_dtypes
import numpy as np
from onnx import TensorProto

from ..errors import InvalidArgument

__all__ = [
    "QuantFormat",
    "QuantType",
    "QuantizationMode",
    "compute_scale_zp",
    "get_qmin_qmax_for_qType",
    "quantize_nparray",
]


class QuantizationMode(Enum):
    """IntegerOps: dynamic quantization (ConvInteger, MatMulInteger); QLinearOps: static."""

    IntegerOps = 0
    QLinearOps = 1

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def from_string(mode: str) -> QuantizationMode:
        try:
            return QuantizationMode[mode]
        except KeyError:
            raise InvalidArgument(f"unknown QuantizationMode {mode!r}") from None


class QuantFormat(Enum):
    """QOperator: quantized operators (QLinearConv...); QDQ: float operators between
    QuantizeLinear/DequantizeLinear pairs, which a runtime may fuse."""

    QOperator = 0
    QDQ = 1

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def from_string(format: str) -> QuantFormat:  # noqa: A002 - onnxruntime's parameter name
        try:
            return QuantFormat[format]
        except KeyError:
            raise InvalidArgument(f"unknown QuantFormat {format!r}") from None


class QuantType(Enum):
    QInt8 = 0
    QUInt8 = 1
    QFLOAT8E4M3FN = 2
    QInt16 = 3
    QUInt16 = 4
    QInt4 = 5
    QUInt4 = 6

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def from_string(t: str) -> QuantType:
        try:
            return QuantType[t]
        except KeyError:
            raise InvalidArgument(f"unknown QuantType {t!r}") from None

    @property
    def tensor_type(self) -> int:
        """The ONNX TensorProto element type of this quantized type."""
        return _TENSOR_TYPES[self]


_TENSOR_TYPES = {
    QuantType.QInt8: TensorProto.INT8,
    QuantType.QUInt8: TensorProto.UINT8,
    QuantType.QFLOAT8E4M3FN: TensorProto.FLOAT8E4M3FN,
    QuantType.QInt16: TensorProto.INT16,
    QuantType.QUInt16: TensorProto.UINT16,
    QuantType.QInt4: TensorProto.INT4,
    QuantType.QUInt4: TensorProto.UINT4,
}

# numpy dtypes of the integer quantized element types.
NP_TYPES = {
    TensorProto.INT8: np.dtype(np.int8),
    TensorProto.UINT8: np.dtype(np.uint8),
    TensorProto.INT16: np.dtype(np.int16),
    TensorProto.UINT16: np.dtype(np.uint16),
    TensorProto.INT4: np.dtype(ml_dtypes.int4),
    TensorProto.UINT4: np.dtype(ml_dtypes.uint4),
}

_FULL = {
    TensorProto.INT8: (-128, 127),
    TensorProto.UINT8: (0, 255),
    TensorProto.INT16: (-32768, 32767),
    TensorProto.UINT16: (0, 65535),
    TensorProto.INT4: (-8, 7),
    TensorProto.UINT4: (0, 15),
}
# Symmetric signed ranges drop the most negative value so that -x is representable for every x.
_SYMMETRIC = {
    TensorProto.INT8: (-127, 127),
    TensorProto.INT16: (-32767, 32767),
    TensorProto.INT4: (-7, 7),
}
_REDUCED = {
    TensorProto.INT8: (-64, 64),
    TensorProto.UINT8: (0, 127),
    TensorProto.INT16: (-16384, 16384),
    TensorProto.UINT16: (0, 32767),
    TensorProto.INT4: (-4, 4),
    TensorProto.UINT4: (0, 7),
}


def _elem_type(q_type) -> int:
    return q_type.tensor_type if isinstance(q_type, QuantType) else int(q_type)


def get_qmin_qmax_for_qType(q_type, reduce_range: bool = False, symmetric: bool = False):
    """The integer range ``(qmin, qmax)`` of a quantized type, as arrays of that type."""
    elem = _elem_type(q_type)
    if elem not in _FULL:
        raise InvalidArgument(f"quantized type {q_type} has no integer range (int4/8/16 and uint4/8/16 do)")
    if reduce_range:
        low, high = _REDUCED[elem]
    elif symmetric and elem in _SYMMETRIC:
        low, high = _SYMMETRIC[elem]
    else:
        low, high = _FULL[elem]
    dtype = NP_TYPES[elem]
    return np.array(low, dtype=dtype), np.array(high, dtype=dtype)


def compute_scale_zp(rmin, rmax, qmin, qmax, symmetric: bool = False, min_real_range: float | None = None):
    """``[zero_point, scale]`` mapping the real range onto ``[qmin, qmax]`` (onnxruntime's order).

    The range is widened to contain 0; with ``symmetric`` it becomes ``[-absmax, absmax]`` and the
    zero point the middle of the integer range.  A degenerate range gets scale 1 and zero point 0,
    as onnxruntime does, so constant-zero tensors still quantize.
    """
    if qmin > 0 or qmax < 0:
        raise InvalidArgument(f"qmin {qmin} and qmax {qmax} must satisfy qmin <= 0 <= qmax")
    rmin = np.minimum(np.asarray(rmin, dtype=np.float32), np.float32(0))
    rmax = np.maximum(np.asarray(rmax, dtype=np.float32), np.float32(0))
    if min_real_range is not None:
        rmax = np.maximum(rmax, rmin + np.float32(min_real_range))
    if symmetric:
        absmax = np.maximum(np.abs(rmin), np.abs(rmax))
        rmin, rmax = -absmax, absmax
    span = np.float64(rmax) - np.float64(rmin)
    scale = np.asarray(span / (np.float64(qmax) - np.float64(qmin)))
    if scale < np.finfo(np.float32).tiny:
        return [np.array(0, dtype=np.asarray(qmin).dtype), np.array(1.0, dtype=np.float32)]
    if symmetric:
        zero = np.round((np.float64(qmax) + np.float64(qmin)) / 2.0)
    else:
        zero = np.round(np.float64(qmin) - np.float64(rmin) / scale)
    zero = np.clip(zero, np.float64(qmin), np.float64(qmax))
    return [np.array(zero).astype(np.asarray(qmin).dtype), scale.astype(np.float32)]


def quantize_nparray(q_type, arr, scale, zero_point, low=None, high=None):
    """``saturate(round(arr / scale) + zero_point)`` in the quantized type; half-to-even rounding,
    like QuantizeLinear, so a weight quantized here equals one quantized by the graph."""
    elem = _elem_type(q_type)
    qmin, qmax = get_qmin_qmax_for_qType(elem)
    low = qmin if low is None else low
    high = qmax if high is None else high
    values = np.asarray(arr, dtype=np.float32) / np.asarray(scale, dtype=np.float32)
    values = np.rint(values).astype(np.float64) + np.asarray(zero_point).astype(np.float64)
    return np.clip(values, np.float64(low), np.float64(high)).astype(NP_TYPES[elem])
