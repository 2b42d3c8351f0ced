"""Sigmoid and SiLU (``x * sigmoid(alpha * x)``) of float32 arrays in one compiled pass.

Why: numpy makes ``1 / (1 + exp(-x))`` four passes over the map (negate, exp, add, reciprocal)
and a SiLU one more pass and one more array for its Mul; YOLO-style detectors follow every
convolution with a SiLU, and those passes were 19 % of the ``yolo`` benchmark model's run.
numba alone does not help: its ``exp`` is a scalar libm call per element (5× slower than numpy's
SIMD exp), and its default error model puts a zero-division check in every division, which stops
LLVM from vectorising the loop.  So ``exp`` is written out here as Cephes' ``expf`` (range
reduction by ``ln 2`` split in two constants, a degree-5 polynomial, the power of two built from
its exponent bits; about 1 ulp), with ``error_model="numpy"``, in straight loops LLVM vectorises.
The power of two goes through an int32 scratch block viewed as float32 (a bit cast numba has no
scalar form for), so the work is done in blocks of :data:`BLOCK` elements that stay in L1.

Results are within a few ulp of ``x / (1 + exp(-alpha x))`` in float64 (the tests check 1e-6
relative); where ``exp`` overflows (``alpha x`` below about -88.4) the power of two is +inf and
the result is an exact (signed) 0, as numpy's; NaN stays NaN.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._jit import compiler

__all__ = ["BLOCK", "MIN_ELEMENTS", "compiled", "logistic"]

#: Elements per block: the float32 scratch and the block of input and output stay in L1.
BLOCK = 2048


@functools.cache
def compiled() -> tuple[Any, Any] | None:
    """``(sigmoid(x, out), silu(x, alpha, out))`` on contiguous float32 arrays of one shape
    (``out`` may be ``x``), or ``None`` without numba or with ``ONNXPLUG_CPU_JIT=0``."""
    jit = compiler(error_model="numpy")
    if jit is None:
        return None

    # One function per kernel with the exp written out in it: numba's on-disk cache cannot key
    # a function that calls other jitted closures, which would be recompiled in every process.
    def build(with_x):
        @jit
        def kernel(x, scale, out):  # pragma: no cover - compiled
            flat, dest = x.reshape(-1), out.reshape(-1)
            bits = np.empty(BLOCK, np.int32)
            power, g, xs = bits.view(np.float32), np.empty(BLOCK, np.float32), np.empty(BLOCK, np.float32)
            for start in range(0, flat.size, BLOCK):
                stop = min(flat.size, start + BLOCK)
                block, target = flat[start:stop], dest[start:stop]  # slices: loads provably contiguous
                # exp(a) for a = scale * x: a = k ln2 + g, |g| <= ln2 / 2; bits: 2^k as float32 bits.
                # xs: a copy of the block, so that ``out`` may be ``x`` (an output that may alias
                # its input keeps LLVM's loop scalar: 8× slower).
                for j in range(stop - start):
                    v = block[j]
                    xs[j] = v
                    a = scale * v
                    a = np.float32(-87.0) if a < np.float32(-87.0) else a  # 2^-126: the least normal power
                    a = np.float32(89.0) if a > np.float32(89.0) else a  # k = 128: the exponent bits of +inf
                    k = np.floor(a * np.float32(1.44269504088896341) + np.float32(0.5))
                    g[j] = a - k * np.float32(0.693359375) - k * np.float32(-2.12194440e-4)
                    bits[j] = (np.int32(k) + np.int32(127)) << np.int32(23)
                for j in range(stop - start):
                    r = g[j]
                    p = np.float32(1.9875691500e-4)
                    p = p * r + np.float32(1.3981999507e-3)
                    p = p * r + np.float32(8.3334519073e-3)
                    p = p * r + np.float32(4.1665795894e-2)
                    p = p * r + np.float32(1.6666665459e-1)
                    p = p * r + np.float32(5.0000001201e-1)
                    e = (p * r * r + r + np.float32(1.0)) * power[j]
                    target[j] = (xs[j] if with_x else np.float32(1.0)) / (np.float32(1.0) + e)

        return kernel

    sigmoid_kernel, silu_kernel = build(False), build(True)

    def sigmoid(x, out):
        sigmoid_kernel(x, np.float32(-1.0), out)

    def silu(x, alpha, out):
        silu_kernel(x, np.float32(-alpha), out)

    return sigmoid, silu


#: Smaller arrays keep numpy's passes: the first compiled call loads numba (about half a
#: second and 60 MiB, once per process), which a few thousand elements never pay back.
MIN_ELEMENTS = 4096


def logistic(x: np.ndarray, alpha: float | None = None, out: np.ndarray | None = None) -> np.ndarray | None:
    """``sigmoid(x)`` (``alpha`` None) or ``x * sigmoid(alpha * x)`` of a contiguous float32
    ``x`` into ``out`` (a fresh array when ``None``; ``x`` itself is allowed), or ``None`` when
    the compiled loops do not apply (another dtype or layout, a small array, no numba)."""
    if x.dtype != np.float32 or x.size < MIN_ELEMENTS or not x.flags.c_contiguous:
        return None
    kernels = compiled()
    if kernels is None:
        return None
    if out is None:
        out = np.empty(x.shape, np.float32)
    if alpha is None:
        kernels[0](x, out)
    else:
        kernels[1](x, np.float32(alpha), out)
    return out
