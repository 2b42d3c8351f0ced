"""Type conversions: Cast, CastLike and BitCast.

Numeric conversions are numpy/ml_dtypes ``astype`` (integers wrap, floats round to nearest even)
plus the ONNX rules numpy lacks: saturation of float8 targets (the default since opset 19), the
exponent-only float8e8m0 with its rounding modes, and strings in both directions.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx

from onnxplug.errors import InvalidArgument
from onnxplug.graph import np_dtype

from ._numeric import NARROW_FLOATS, widen
from ._registry import kernel

_FLOAT8 = frozenset(
    np.dtype(t)
    for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz)
)
_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
_SUB_BYTE_INTS = {
    np.dtype(ml_dtypes.int4): (4, True),
    np.dtype(ml_dtypes.uint4): (4, False),
    np.dtype(ml_dtypes.int2): (2, True),
    np.dtype(ml_dtypes.uint2): (2, False),
}
_STRING = np.dtype(object)


def target_dtype(to: int, op: str) -> np.dtype:
    try:
        return np_dtype(to)
    except ValueError:
        name = onnx.TensorProto.DataType.Name(to) if to in onnx.TensorProto.DataType.values() else str(to)
        raise InvalidArgument(f"{op}: unsupported target type {name}") from None


def cast(x: np.ndarray, target: np.dtype, *, saturate: int = 1, round_mode: str = "up") -> np.ndarray:
    """``x`` converted to ``target`` by ONNX's Cast rules."""
    if x.dtype == target:
        return x
    if target == _STRING:
        return _to_string(x)
    if x.dtype == _STRING:
        return _from_string(x, target)
    with np.errstate(all="ignore"):  # out-of-range conversions are defined (or undefined) results
        if target == _E8M0:
            return _to_e8m0(x, saturate, round_mode)
        if target in _FLOAT8 and saturate:
            wide = widen(x).astype(np.float64) if x.dtype.kind in "iub" else widen(x)
            limit = float(ml_dtypes.finfo(target).max)
            return np.clip(wide, -limit, limit).astype(target)
        if target in _SUB_BYTE_INTS and x.dtype.kind in "iub":
            return _wrap_sub_byte(x, target)
        if x.dtype in NARROW_FLOATS and target.kind in "iub":
            x = x.astype(np.float32)  # exact; ml_dtypes' direct paths to integers vary
        return np.asarray(x.astype(target))


def _wrap_sub_byte(x, target):
    """Integers into int4/uint4/int2/uint2 keep the low bits (two's complement), like wider ints."""
    bits, signed = _SUB_BYTE_INTS[target]
    low = x.astype(np.int64) & ((1 << bits) - 1)
    if signed:
        low = np.where(low >= 1 << (bits - 1), low - (1 << bits), low)
    return low.astype(target)


def _to_e8m0(x, saturate, round_mode):
    """float8e8m0 stores only a biased exponent: the float32 exponent field, rounded by the
    mantissa per ``round_mode``. Negative inputs are undefined by the spec (their magnitude is
    used); 255 is NaN."""
    if round_mode not in ("up", "down", "nearest"):
        raise InvalidArgument(f"Cast: round_mode must be 'up', 'down' or 'nearest', got {round_mode!r}")
    bits = widen(x).astype(np.float32).view(np.uint32)  # astype copies: contiguous, rank kept
    exponent = ((bits >> 23) & 0xFF).astype(np.int32)
    mantissa = bits & 0x7FFFFF
    special = exponent == 0xFF
    nan = special & (mantissa != 0)
    if round_mode == "up":
        exponent = exponent + (mantissa != 0)
    elif round_mode == "nearest":
        # Ties round up; below the float32 normal range the implicit bit is 0, so only more than
        # half rounds up there.
        half = 0x400000
        exponent = exponent + np.where(exponent > 0, mantissa >= half, mantissa > half)
    overflow = (exponent > 254) & ~special
    if saturate:
        exponent = np.where(overflow | (special & ~nan), 254, exponent)
    else:
        exponent = np.where(overflow | special, 255, exponent)
        exponent = np.where((bits & 0x7FFFFFFF) == 0, 255, exponent)  # zero is below E8M0_MIN
    exponent = np.where(nan, 255, exponent)
    return exponent.astype(np.uint8).view(_E8M0)


def _to_string(x):
    """Numbers spelled as onnxruntime spells them: floats with ``%.8g`` and ``NaN``/``INF``/``-INF``,
    integers in decimal, booleans as ``1``/``0`` (ONNX's node tests have no string casts to pin
    this down, so the reference runtime's spelling is the one users can compare against)."""
    if x.dtype.kind in "iu" or x.dtype in _SUB_BYTE_INTS:
        return x.astype(np.int64 if x.dtype.kind != "u" else np.uint64).astype(np.str_).astype(object)
    if x.dtype == np.bool_:
        return x.astype(np.uint8).astype(np.str_).astype(object)
    wide = x.astype(np.float64)
    text = np.char.mod("%.8g", wide).astype(object)
    text[np.isnan(wide)] = "NaN"
    text[wide == np.inf] = "INF"
    text[wide == -np.inf] = "-INF"
    return text


def _from_string(x, target):
    """Plain and scientific notation, and INF/+INF/-INF/NaN in any case; integers parse exactly
    and fall back to truncating a float form ("100.5" -> 100); booleans also accept true/false."""
    text = np.char.strip(x.astype(np.str_))
    if target == np.bool_:
        lowered = np.char.lower(text)
        text = np.where(lowered == "true", "1", np.where(lowered == "false", "0", text))
        return _parse_float(text) != 0
    if target.kind in "iu":
        try:
            return text.astype(target)
        except (ValueError, OverflowError):
            with np.errstate(all="ignore"):
                return np.trunc(_parse_float(text)).astype(target)
    if target in _SUB_BYTE_INTS:
        return cast(_from_string(x, np.dtype(np.int64)), target)
    return cast(_parse_float(text), target)


def _parse_float(text):
    try:
        return text.astype(np.float64)
    except ValueError as error:
        raise InvalidArgument(f"Cast: cannot parse a number from the string tensor: {error}") from None


@kernel("Cast", since=(1, 6, 9, 13), factory=True)
def cast_1(ctx, *, to):
    if isinstance(to, str):  # opset 1 spelled the type as a string
        to = onnx.TensorProto.DataType.Value(to.upper())
    target = target_dtype(to, "Cast")
    return lambda x: cast(x, target)


@kernel("Cast", since=(19, 21, 23), factory=True)
def cast_19(ctx, *, saturate, to):
    target = target_dtype(to, "Cast")
    return lambda x: cast(x, target, saturate=saturate)


@kernel("Cast", since=(24, 25, 28), factory=True)
def cast_24(ctx, *, round_mode, saturate, to):
    target = target_dtype(to, "Cast")
    return lambda x: cast(x, target, saturate=saturate, round_mode=round_mode)


@kernel("CastLike", since=(15,))
def castlike_15(x, like):
    return cast(x, like.dtype)


@kernel("CastLike", since=(19, 21, 23))
def castlike_19(x, like, *, saturate):
    return cast(x, like.dtype, saturate=saturate)


@kernel("CastLike", since=(24, 25))
def castlike_24(x, like, *, round_mode, saturate):
    return cast(x, like.dtype, saturate=saturate, round_mode=round_mode)


def _bit_width(dtype):
    if dtype in _SUB_BYTE_INTS:
        return _SUB_BYTE_INTS[dtype][0]
    if dtype == np.dtype(ml_dtypes.float4_e2m1fn):
        return 4
    return dtype.itemsize * 8


@kernel("BitCast", since=(26,), factory=True)
def bitcast(ctx, *, to):
    """Reinterpret the bits. ml_dtypes stores each 4- and 2-bit element in the low bits of its
    own byte, so a byte-wise view reinterprets those types too."""
    target = target_dtype(to, "BitCast")
    if target == _STRING:
        raise InvalidArgument("BitCast: the target type cannot be string")

    def run(x):
        if x.dtype == _STRING:
            raise InvalidArgument("BitCast: the input cannot be a string tensor")
        if _bit_width(x.dtype) != _bit_width(target):
            raise InvalidArgument(
                f"BitCast: {x.dtype} ({_bit_width(x.dtype)} bits) and {target} "
                f"({_bit_width(target)} bits) differ in width"
            )
        return np.array(x, order="C").view(target)  # a contiguous copy that keeps rank 0

    return run
