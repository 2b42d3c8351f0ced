"""GatherBlockQuantized (the embedding tables onnxruntime's 4-bit quantizer writes) and
TransposeMatMul (FusedMatMul's older name, which onnxruntime keeps for old models).

GatherBlockQuantized gathers first and dequantizes only the gathered rows, so a large
embedding table is never expanded to floats: ``(data - zero_point) * scale`` per block of
``block_size`` along ``quantize_axis`` (int4/uint4 and unpacked 8-bit data), or
``float(data) * scale`` for float8/float4 data (symmetric; ``block_size=0`` is one block per
row and a scale dimension of 1 broadcasts).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.errors import NotImplemented as NotImplementedError_

from ._registry import kernel
from .fused import fused_matmul

_INT4 = (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4))
_FLOAT_CODES = {np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2)}
_FLOAT_CODES |= {np.dtype(ml_dtypes.float8_e5m2fnuz), np.dtype(ml_dtypes.float4_e2m1fn)}


def _params_for(values, idx, gather_axis, quantize_axis, block, length, name, rank):
    """A per-block parameter (scales or zero points) expanded to the gathered output's shape."""
    op = "GatherBlockQuantized"
    if values.ndim != rank:
        raise Fail(f"{op}: {name} must have the data's rank {rank}, got shape {values.shape}")
    if gather_axis == quantize_axis:
        gathered = np.take(values, idx // block, axis=gather_axis)
        return gathered
    rows = np.zeros_like(idx) if values.shape[gather_axis] == 1 else idx  # a dimension of 1 broadcasts
    gathered = np.take(values, rows, axis=gather_axis)
    # where the quantized axis sits once the gathered axis became idx.ndim axes
    axis = quantize_axis if quantize_axis < gather_axis else quantize_axis + idx.ndim - 1
    if gathered.shape[axis] == 1 and block >= length:
        return gathered
    return np.repeat(gathered, block, axis=axis).take(np.arange(length), axis=axis)


@kernel("GatherBlockQuantized", since=(1,))
def gather_block_quantized(data, indices, scales, zero_points=None, *, bits, block_size, quantize_axis, gather_axis):
    op = "GatherBlockQuantized"
    rank = data.ndim
    if not (-rank <= gather_axis < rank and -rank <= quantize_axis < rank):
        raise InvalidArgument(
            f"{op}: gather_axis {gather_axis} / quantize_axis {quantize_axis} out of range for rank {rank}"
        )
    gather_axis, quantize_axis = gather_axis % rank, quantize_axis % rank
    floats = data.dtype in _FLOAT_CODES
    if data.dtype == np.uint8 and bits != 8:
        raise NotImplementedError_(f"{op}: uint8 data packed with bits={bits} is not supported (only bits=8)")
    if not (floats or data.dtype in _INT4 or data.dtype == np.uint8):
        raise InvalidArgument(f"{op}: unsupported data type {data.dtype}")
    if floats and zero_points is not None:
        raise InvalidArgument(f"{op}: float8/float4 data is symmetric and takes no zero_points")
    length = data.shape[quantize_axis]
    if floats and block_size == 0:
        block = length  # one block per row
    elif block_size < 16 or block_size & (block_size - 1):
        raise InvalidArgument(f"{op}: block_size must be a power of 2 and at least 16, got {block_size}")
    else:
        block = block_size
    expected = -(-length // block)
    if scales.shape[quantize_axis] != expected and not (floats and scales.shape[quantize_axis] == 1):
        raise Fail(
            f"{op}: scales has {scales.shape[quantize_axis]} blocks along axis {quantize_axis}, expected {expected}"
        )
    count = data.shape[gather_axis]
    idx = np.asarray(indices).astype(np.int64)
    if ((idx < -count) | (idx >= count)).any():
        raise InvalidArgument(f"{op}: indices must be in [{-count}, {count - 1}] for axis {gather_axis}")
    idx = np.where(idx < 0, idx + count, idx)
    values = np.take(data, idx, axis=gather_axis).astype(np.float32)
    scale = _params_for(scales, idx, gather_axis, quantize_axis, block, length, "scales", rank).astype(np.float32)
    if not floats:
        if zero_points is None:
            zero = np.float32(0 if data.dtype in _INT4 else 1 << (bits - 1))
        else:
            if zero_points.dtype != data.dtype:
                raise Fail(f"{op}: zero_points has type {zero_points.dtype}, expected {data.dtype}")
            zero = _params_for(zero_points, idx, gather_axis, quantize_axis, block, length, "zero_points", rank)
            zero = zero.astype(np.float32)
        values = values - zero
    return (values * scale).astype(scales.dtype)


@kernel("TransposeMatMul", since=(1,))
def transpose_matmul(a, b, *, alpha, transA, transB):
    return fused_matmul(a, b, alpha=alpha, transA=transA, transB=transB, transBatchA=0, transBatchB=0)
