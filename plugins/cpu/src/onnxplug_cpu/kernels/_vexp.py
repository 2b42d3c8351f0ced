"""``exp`` of one float32 for compiled loops, branch-free so that LLVM vectorises the loop that
inlines it (imported only when :func:`._jit.compiler` gives a decorator: this module needs numba).

Why not ``math.exp``: numba calls libm's scalar ``expf`` for it (there is no vector math library
here), which keeps the whole loop scalar.  Here: ``n = rint(y log2 e)``, ``r = y - n ln2`` in two
steps (Cody-Waite: ``n ln2_hi`` is exact), a degree-7 Taylor polynomial of ``exp(r)`` on
``|r| <= ln2/2`` (its truncation, 5e-9, is below float32's rounding), then ``2^n`` from its
exponent bits in two halves, so that results under the smallest normal float round once to a
subnormal or 0 as libm's do.  Within about 2 ulp of ``np.exp`` for every float32 ``y``; NaN stays
NaN, ``-inf`` gives 0 and ``+inf`` gives ``inf``.

Everything is a module global, not a closure variable: numba keys its on-disk cache on a
closure's captured values, and an intrinsic object pickles differently in every process, so a
closure recompiled its loop (0.7 s) in each new process.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from ._jit import compiler

# ``fastmath={"contract"}`` only: multiply-adds fuse (fewer instructions, one rounding instead of
# two); no reassociation, so the steps are evaluated in the order written.
jit = compiler(fastmath={"contract"})
if jit is None:  # pragma: no cover - the callers check compiler() first
    raise ImportError("numba is disabled (ONNXPLUG_CPU_JIT=0) or not installed")

_f32 = np.float32
_LN2_HI = _f32(0.693359375)  # 0x3f318000: 9 significant bits, so n * _LN2_HI is exact for |n| < 2^15
_LN2_LO = _f32(math.log(2) - 0.693359375)
_LOG2E = _f32(1 / math.log(2))
#: exp(y) is 0 in float32 below about -103.97 and inf above 88.73: clamping there keeps n where
#: its exponent bits are valid (-174 < n < 130) and the results the same.
_LOW, _HIGH = _f32(-120.0), _f32(89.0)
_HALF, _ONE = _f32(0.5), _f32(1)
_E7, _E6, _E5, _E4, _E3 = _f32(1 / 5040), _f32(1 / 720), _f32(1 / 120), _f32(1 / 24), _f32(1 / 6)


@intrinsic
def float_from_bits(typingctx, bits):
    """The float32 whose bits are the low 32 of the integer ``bits`` (an LLVM bitcast): numba
    has no scalar bit reinterpretation."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        low = builder.trunc(args[0], ir.IntType(32)) if bits.bitwidth > 32 else args[0]
        return builder.bitcast(low, ir.FloatType())

    return types.float32(bits), codegen


@jit
def exp_value(y):  # pragma: no cover - compiled (LLVM inlines it into the callers' loops)
    """exp of one float32 ``y``."""
    y = _LOW if y < _LOW else y  # compare-selects that keep NaN (a NaN compares false)
    y = _HIGH if y > _HIGH else y
    n = np.rint(y * _LOG2E)
    r = (y - n * _LN2_HI) - n * _LN2_LO
    q = _E7 * r + _E6
    q = q * r + _E5
    q = q * r + _E4
    q = q * r + _E3
    q = q * r + _HALF
    q = q * r + _ONE
    q = q * r + _ONE
    k = np.int32(n)  # a NaN n gives garbage bits here, but q is NaN already
    k1 = k >> 1  # 2^n as 2^k1 * 2^(n - k1): both halves normal for -174 < n < 130
    q = q * float_from_bits((k1 + 127) << 23)
    return q * float_from_bits((k - k1 + 127) << 23)


_TWO = _f32(2)
#: tanh's odd Taylor series below :data:`_TANH_SERIES_BELOW` (its next term, 21844/6081075 x^13, is
#: under 6e-10 there); above it ``1 - 2 / (exp(2|x|) + 1)``, whose cancellation costs at most a
#: few ulp once the result is past 0.29.
_TANH_SERIES_BELOW = _f32(0.3)
_T3, _T5, _T7 = _f32(-1 / 3), _f32(2 / 15), _f32(-17 / 315)
_T9, _T11 = _f32(62 / 2835), _f32(-1382 / 155925)


@jit
def tanh_value(v):  # pragma: no cover - compiled (inlined into the callers' loops)
    """tanh of one float32 ``v``, branch-free (both forms computed, one selected) so that a loop
    calling it vectorises, where ``math.tanh`` is a scalar libm call.  Within a few ulp of
    ``np.tanh`` (2.5 at most, measured over every magnitude); ±inf give ±1, ±0 and NaN stay.
    Callers compile with ``error_model="numpy"``, or the division's zero check keeps the loop
    scalar."""
    a = -v if v < 0 else v
    e = exp_value(a + a)
    far = _ONE - _TWO / (e + _ONE)
    s = a * a
    near = a + a * (((((_T11 * s + _T9) * s + _T7) * s + _T5) * s + _T3) * s)
    r = near if a < _TANH_SERIES_BELOW else far
    r = -r if v < 0 else r
    return v if v == 0 else r  # -0.0 stays -0.0
