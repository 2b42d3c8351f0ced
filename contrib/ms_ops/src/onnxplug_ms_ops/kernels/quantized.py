"""Quantized matmuls: MatMulNBits (block-quantized weights), DynamicQuantizeMatMul and
MatMulIntegerToFloat.

Integer products are accumulated in float64, which is exact for 8-bit operands up to
K = 2**37, and rescaled in float32 as onnxruntime does.  MatMulNBits dequantizes constant
weights once per node (the factory), so a run is one float matmul.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from ._common import compute_dtype, per_column, scalar
from ._registry import kernel


def unpack_bits(packed: np.ndarray, bits: int) -> np.ndarray:
    """Little-endian bit stream along the last axis -> integers of ``bits`` bits (int32)."""
    stream = np.unpackbits(packed, axis=-1, bitorder="little")
    count = stream.shape[-1] // bits
    stream = stream[..., : count * bits].reshape(packed.shape[:-1] + (count, bits)).astype(np.int32)
    return stream @ (1 << np.arange(bits, dtype=np.int32))


def dequantize_nbits(b, scales, zero_points, g_idx, *, K, N, bits, block_size):
    """The float32 (K, N) weight matrix of MatMulNBits."""
    op = "MatMulNBits"
    if not 2 <= bits <= 8:
        raise Fail(f"{op}: bits={bits} is not in 2..8")
    if block_size < 16 or block_size & (block_size - 1):
        raise Fail(f"{op}: block_size={block_size} must be a power of two >= 16")
    k_blocks = -(-K // block_size)
    blob = block_size * bits // 8
    if b.shape != (N, k_blocks, blob):
        raise Fail(f"{op}: B must have shape (N, k_blocks, blob_size) = ({N}, {k_blocks}, {blob}), got {b.shape}")
    q = unpack_bits(b, bits).reshape(N, k_blocks * block_size)[:, :K]
    if scales.size != N * k_blocks:
        raise Fail(f"{op}: scales must hold N * k_blocks = {N * k_blocks} values, got shape {scales.shape}")
    scale = scales.reshape(N, k_blocks).astype(np.float32)
    if zero_points is None:
        zero = np.full((N, k_blocks), 1 << (bits - 1), dtype=np.float32)
    elif zero_points.dtype == np.uint8:
        per_row = -(-k_blocks * bits // 8)
        if zero_points.size != N * per_row:
            raise Fail(f"{op}: packed zero_points must have shape ({N}, {per_row}), got {zero_points.shape}")
        zero = unpack_bits(zero_points.reshape(N, per_row), bits)[:, :k_blocks].astype(np.float32)
    else:
        if zero_points.size != N * k_blocks:
            raise Fail(f"{op}: zero_points must have shape ({N}, {k_blocks}), got {zero_points.shape}")
        zero = zero_points.reshape(N, k_blocks).astype(np.float32)
    if g_idx is not None:
        if g_idx.shape != (K,):
            raise Fail(f"{op}: g_idx must have shape ({K},), got {g_idx.shape}")
        if (g_idx < 0).any() or (g_idx >= k_blocks).any():
            raise InvalidArgument(f"{op}: g_idx values must be in [0, {k_blocks})")
        block_of = g_idx
    else:
        block_of = np.arange(K) // block_size
    weights = (q.astype(np.float32) - zero[:, block_of]) * scale[:, block_of]
    return np.ascontiguousarray(weights.T)


def _int8_activation_matmul(a: np.ndarray, weights: np.ndarray, block_size: int) -> np.ndarray:
    """``a @ weights`` with ``a`` quantized to int8 per block of ``block_size`` along K
    (symmetric, scale max|a| / 127, rounded half to even), as onnxruntime's accuracy_level=4
    kernel computes when it could prepack constant weights (a level-4 node whose weights are
    fed at run time is computed in float32, as there)."""
    k, n = weights.shape
    blocks = -(-k // block_size)
    rows = a.reshape(-1, k)
    padded = np.zeros((rows.shape[0], blocks * block_size), np.float32)
    padded[:, :k] = rows
    chunks = padded.reshape(rows.shape[0], blocks, block_size)
    scale = (np.abs(chunks).max(axis=2) / np.float32(127)).astype(np.float32)
    inverse = np.divide(np.float32(1), scale, out=np.zeros_like(scale), where=scale != 0)
    q = np.clip(np.rint(chunks * inverse[..., None]), -128, 127)
    w = np.zeros((blocks * block_size, n), np.float32)
    w[:k] = weights
    partial = np.einsum("mbk,bkn->mbn", q, w.reshape(blocks, block_size, n))
    y = (partial * scale[..., None]).sum(axis=1, dtype=np.float32)
    return y.reshape(a.shape[:-1] + (n,))


@kernel("MatMulNBits", since=(1,), factory=True)
def matmul_nbits(ctx, *, K, N, bits, block_size, accuracy_level, weight_prepacked):
    op = "MatMulNBits"
    if weight_prepacked:
        raise Fail(f"{op}: weight_prepacked={weight_prepacked} is a CUDA layout; the CPU needs plain packed weights")
    geometry = dict(K=K, N=N, bits=bits, block_size=block_size)
    # Constant weights are dequantized once; a run uses them when it is handed those same
    # arrays (a feed overriding one of them takes the slow path).
    sources = tuple(ctx.constant(i) for i in range(1, 5))
    # accuracy_level=4 with prepacked weights: onnxruntime quantizes A to int8 (checked on
    # x86-64 with AVX2, where its 2-bit kernel needs blocks of 32 or more).
    int8_activations = accuracy_level == 4 and (bits != 2 or block_size >= 32)
    constant = None
    if sources[0] is not None and sources[1] is not None and 0 not in sources[0].shape:
        constant = dequantize_nbits(*sources, **geometry)

    def run(a, b, scales, zero_points=None, g_idx=None, bias=None):
        if a.shape[-1:] != (K,):
            raise Fail(f"{op}: A's last dimension must be K={K}, got shape {a.shape}")
        if bias is not None and bias.shape != (N,):
            raise Fail(f"{op}: bias must have shape ({N},), got {bias.shape}")
        dtype = compute_dtype(a.dtype)
        if 0 in b.shape:
            y = np.zeros(a.shape[:-1] + (N,), dtype=dtype)
        else:
            given = (b, scales, zero_points, g_idx)
            prepacked = constant is not None and all(x is y for x, y in zip(given, sources))
            weights = constant if prepacked else dequantize_nbits(*given, **geometry)
            if prepacked and int8_activations and g_idx is None:
                y = _int8_activation_matmul(a.astype(np.float32, copy=False), weights, block_size).astype(dtype)
            else:
                y = np.matmul(a.astype(np.float32, copy=False), weights).astype(dtype, copy=False)
        if bias is not None:
            y = y + bias.astype(dtype)
        return y.astype(a.dtype, copy=False)

    return run


def _integer_matmul(a, b, op):
    try:
        return np.matmul(a, b)
    except ValueError as error:
        raise Fail(f"{op}: shapes {a.shape} and {b.shape} do not multiply ({error})") from None


def quantize_dynamic_uint8(a: np.ndarray) -> tuple[np.ndarray, np.float32, int]:
    """ONNX DynamicQuantizeLinear: uint8 values, scale and zero point covering [min(a, 0), max(a, 0)]."""
    low = np.float32(min(float(a.min(initial=0.0)), 0.0))
    high = np.float32(max(float(a.max(initial=0.0)), 0.0))
    scale = np.float32((high - low) / np.float32(255))
    if scale == 0:
        return np.zeros(a.shape, dtype=np.float64), np.float32(0), 0
    zero = int(np.clip(np.rint(np.float32(0) - low / scale), 0, 255))
    q = np.clip(np.rint(a.astype(np.float32) / scale) + zero, 0, 255)
    return q, scale, zero


@kernel("DynamicQuantizeMatMul", since=(1,))
def dynamic_quantize_matmul(a, b, b_scale, b_zero_point=None, bias=None):
    op = "DynamicQuantizeMatMul"
    columns = b.shape[-1]
    q, a_scale, a_zero = quantize_dynamic_uint8(a)
    b_zero = per_column(b_zero_point, "b_zero_point", columns, 0, op)
    acc = _integer_matmul(q - a_zero, b.astype(np.float64) - b_zero, op)
    scale = np.float32(a_scale) * per_column(b_scale, "b_scale", columns, 1, op).astype(np.float32)
    y = acc.astype(np.float32) * scale
    if bias is not None:
        y = y + bias
    return y.astype(np.float32, copy=False)


@kernel("MatMulIntegerToFloat", since=(1,))
def matmul_integer_to_float(a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
    op = "MatMulIntegerToFloat"
    columns = b.shape[-1]
    a_zero = scalar(a_zero_point, "a_zero_point")
    b_zero = per_column(b_zero_point, "b_zero_point", columns, 0, op)
    acc = _integer_matmul(a.astype(np.float64) - a_zero, b.astype(np.float64) - b_zero, op)
    out_type = a_scale.dtype
    scale = np.float32(scalar(a_scale, "a_scale")) * per_column(b_scale, "b_scale", columns, 1, op).astype(np.float32)
    y = acc.astype(np.float32) * scale
    if bias is not None:
        y = y + bias.astype(np.float32)
    return y.astype(out_type, copy=False)
