"""MatMulBnb4: a MatMul whose weight is 4-bit FP4 or NF4 (bitsandbytes' formats, QLoRA), as
onnxruntime's ``matmul_bnb4_quantizer`` writes it.

B holds the [N, K] weight flattened row-major, two codes per byte (the high nibble first); each
code indexes the 16-value table of its ``quant_type`` (0 = FP4, 1 = NF4) and is scaled by the
``absmax`` of its block of ``block_size`` elements.  Constant weights are dequantized once.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.errors import NotImplemented as NotImplementedError_

from ._common import compute_dtype
from ._registry import kernel

# The code tables of the two formats (QLoRA, arXiv:2305.14314): FP4 is a 1-2-1 minifloat
# (sign, two exponent bits, one mantissa bit, subnormal 1/192); NF4 holds the quantiles of a
# standard normal distribution normalized to [-1, 1].
_TABLES = {
    0: np.array([0, 1 / 192, 2 / 3, 1, 1 / 3, 1 / 2, 1 / 6, 1 / 4], dtype=np.float32),
    1: np.array(
        [
            -1.0,
            -0.6961928009986877,
            -0.5250730514526367,
            -0.39491748809814453,
            -0.28444138169288635,
            -0.18477343022823334,
            -0.09105003625154495,
            0.0,
            0.07958029955625534,
            0.16093020141124725,
            0.24611230194568634,
            0.33791524171829224,
            0.44070982933044434,
            0.5626170039176941,
            0.7229568362236023,
            1.0,
        ],
        dtype=np.float32,
    ),
}
_TABLES[0] = np.concatenate([_TABLES[0], -_TABLES[0]])  # codes 8..15 are the negatives


def dequantize_bnb4(b, absmax, *, K, N, block_size, quant_type):
    """The float32 [N, K] weight of MatMulBnb4."""
    op = "MatMulBnb4"
    if quant_type not in _TABLES:
        raise InvalidArgument(f"{op}: quant_type must be 0 (FP4) or 1 (NF4), got {quant_type}")
    if block_size < 16 or block_size & (block_size - 1):
        raise InvalidArgument(f"{op}: block_size must be a power of 2 and at least 16, got {block_size}")
    total = N * K
    if b.size != (total + 1) // 2:
        raise Fail(f"{op}: B must hold (N * K + 1) / 2 = {(total + 1) // 2} bytes, got shape {b.shape}")
    blocks = -(-total // block_size)
    if absmax.size != blocks:
        raise Fail(f"{op}: absmax must hold {blocks} values (one per block), got shape {absmax.shape}")
    packed = b.reshape(-1)
    codes = np.stack([packed >> 4, packed & 0x0F], axis=1).reshape(-1)[:total]
    scale = np.repeat(absmax.reshape(-1).astype(np.float32), block_size)[:total]
    return (_TABLES[quant_type][codes] * scale).reshape(N, K)


@kernel("MatMulBnb4", since=(1,), factory=True)
def matmul_bnb4(ctx, *, K, N, block_size, quant_type, transB, training_mode):
    op = "MatMulBnb4"
    if not transB:
        # documented as A [.., N] @ dequant(B), the backward pass of training; onnxruntime's CPU
        # kernel computes something else, and matmul_bnb4_quantizer writes transB=1 only.
        raise NotImplementedError_(f"{op}: transB=0 (the training backward pass) is not supported")
    geometry = dict(K=K, N=N, block_size=block_size, quant_type=quant_type)
    sources = (ctx.constant(1), ctx.constant(2))
    constant = None if any(s is None for s in sources) else dequantize_bnb4(*sources, **geometry)

    def run(a, b, absmax):
        if a.shape[-1:] != (K,):
            raise Fail(f"{op}: A's last dimension must be K={K}, got shape {a.shape}")
        same = constant is not None and b is sources[0] and absmax is sources[1]
        weight = constant if same else dequantize_bnb4(b, absmax, **geometry)
        dtype = compute_dtype(a.dtype)
        y = np.matmul(a.astype(np.float32, copy=False), weight.T)
        return y.astype(dtype, copy=False).astype(a.dtype, copy=False)

    return run
