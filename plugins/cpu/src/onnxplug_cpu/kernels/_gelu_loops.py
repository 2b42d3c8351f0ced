"""The compiled loop of :mod:`._gelu_jit` (imported only when :func:`._jit.compiler` gives a
decorator: this module needs numba).

Everything the loop uses is a module global, not a closure variable: numba keys its on-disk
cache on a closure's captured values, and an intrinsic object pickles differently in every
process, so a closure recompiled the loop (0.7 s) in each new process.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from ._jit import compiler

# ``fastmath={"contract"}`` only: multiply-adds fuse (fewer instructions, one rounding instead of
# two); no reassociation, so the polynomials are evaluated in the order written.
_jit = compiler(fastmath={"contract"})
if _jit is None:  # pragma: no cover - the caller checks compiler() first
    raise ImportError("numba is disabled (ONNXPLUG_CPU_JIT=0) or not installed")

_f32 = np.float32
# ``_numeric._ERFC_FIT``, highest coefficient first: erfc(a) ~ t exp(P(t) - a^2), t = 1/(1 + a/2).
_C9, _C8, _C7, _C6, _C5 = _f32(0.17087277), _f32(-0.82215223), _f32(1.48851587), _f32(-1.13520398), _f32(0.27886807)
_C4, _C3, _C2, _C1, _C0 = _f32(-0.18628806), _f32(0.09678418), _f32(0.37409196), _f32(1.00002368), _f32(-1.26551223)
_LN2_HI = _f32(0.693359375)  # 0x3f318000: 9 significant bits, so n * _LN2_HI is exact for |n| < 2^15
_LN2_LO = _f32(math.log(2) - 0.693359375)
_LOG2E = _f32(1 / math.log(2))
#: exp(y) for y below this is 0 in float32 even after the factors t and x/2 (2^-173 is under
#: half the smallest subnormal): clamping keeps the exponent n where its bits are valid.
_LOWEST = _f32(-120.0)
_INV_SQRT2, _HALF, _ONE, _TWO = _f32(1 / math.sqrt(2)), _f32(0.5), _f32(1), _f32(2)
# exp(r) on |r| <= ln2/2 by Taylor to r^7 (the truncation, 5e-9, is below float32's rounding).
_E7, _E6, _E5, _E4, _E3 = _f32(1 / 5040), _f32(1 / 720), _f32(1 / 120), _f32(1 / 24), _f32(1 / 6)


@intrinsic
def float_from_bits(typingctx, bits):
    """The float32 whose bits are the low 32 of the integer ``bits`` (an LLVM bitcast): numba
    has no scalar bit reinterpretation, and 2^n is built from its exponent bits."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        low = builder.trunc(args[0], ir.IntType(32)) if bits.bitwidth > 32 else args[0]
        return builder.bitcast(low, ir.FloatType())

    return types.float32(bits), codegen


@_jit
def gelu_value(v):  # pragma: no cover - compiled (LLVM inlines it into the loop)
    """Gelu of one float32 ``v``: ``v/2 erfc(-v/sqrt 2)``, as ``_numeric.gelu_single``."""
    a = abs(v) * _INV_SQRT2
    t = np.divide(_ONE, _ONE + _HALF * a)  # np.divide: no ZeroDivisionError check, which is a branch
    p = _C9 * t + _C8
    p = p * t + _C7
    p = p * t + _C6
    p = p * t + _C5
    p = p * t + _C4
    p = p * t + _C3
    p = p * t + _C2
    p = p * t + _C1
    p = p * t + _C0
    # -a^2 as -(v/2) v: v/2 is exact and the product fuses into one rounding with p, where
    # squaring the rounded a would add its error twice (it grows with a^2 in the tail).
    y = max(p - (_HALF * v) * v, _LOWEST)
    n = np.rint(y * _LOG2E)
    r = (y - n * _LN2_HI) - n * _LN2_LO
    q = _E7 * r + _E6
    q = q * r + _E5
    q = q * r + _E4
    q = q * r + _E3
    q = q * r + _HALF
    q = q * r + _ONE
    q = q * r + _ONE
    k = np.int32(n)
    k1 = k >> 1  # 2^n as 2^k1 * 2^(n - k1): both halves normal down to n = -174
    q = q * float_from_bits((k1 + 127) << 23)
    q = q * float_from_bits((k - k1 + 127) << 23)
    e = t * q  # erfc(|v| / sqrt 2)
    s = _TWO - e if v >= 0 else e  # a select, not a branch
    return _HALF * v * s


@_jit
def gelu_rows(x, bias, out):  # pragma: no cover - compiled
    """``out[i, j] = gelu(x[i, j] + bias[j])``; ``bias`` empty: no bias."""
    rows, cols = x.shape
    if bias.shape[0] == 0:
        for i in range(rows):
            src, dst = x[i], out[i]
            for j in range(cols):
                dst[j] = gelu_value(src[j])
    else:
        for i in range(rows):
            src, dst = x[i], out[i]
            for j in range(cols):
                dst[j] = gelu_value(src[j] + bias[j])
