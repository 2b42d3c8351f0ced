"""The compiled loop of :mod:`._gelu_jit` (imported only when :func:`._jit.compiler` gives a
decorator: this module needs numba).  Module globals only, as in :mod:`._vexp`: numba's cache
keys closures on their captured values."""

from __future__ import annotations

import math

import numba
import numpy as np

from ._jit import compiler
from ._vexp import exp_value, jit

_split = compiler(parallel=True)

_f32 = np.float32
# ``_numeric._ERFC_FIT``, highest coefficient first: erfc(a) ~ t exp(P(t) - a^2), t = 1/(1 + a/2).
_C9, _C8, _C7, _C6, _C5 = _f32(0.17087277), _f32(-0.82215223), _f32(1.48851587), _f32(-1.13520398), _f32(0.27886807)
_C4, _C3, _C2, _C1, _C0 = _f32(-0.18628806), _f32(0.09678418), _f32(0.37409196), _f32(1.00002368), _f32(-1.26551223)
_INV_SQRT2, _HALF, _ONE, _TWO = _f32(1 / math.sqrt(2)), _f32(0.5), _f32(1), _f32(2)


@jit
def gelu_rows(x, bias, out):  # pragma: no cover - compiled
    """``out[i, j] = gelu(x[i, j] + bias[j])`` (``bias`` empty: no bias), ``v/2 erfc(-v/sqrt 2)``
    as ``_numeric.gelu_single``.  One function around :func:`._vexp.exp_value`: with Gelu in
    a function of its own, LLVM inlined exp into it but then not Gelu into the loop, which
    stayed scalar (2 ms instead of 0.2 ms for 128×1536)."""
    rows, cols = x.shape
    has_bias = bias.shape[0] > 0
    for i in range(rows):
        src, dst = x[i], out[i]
        for j in range(cols):
            v = src[j] + bias[j] if has_bias else src[j]  # loop-invariant: LLVM unswitches it
            a = abs(v) * _INV_SQRT2
            t = np.divide(_ONE, _ONE + _HALF * a)  # np.divide: no ZeroDivisionError branch
            p = _C9 * t + _C8
            p = p * t + _C7
            p = p * t + _C6
            p = p * t + _C5
            p = p * t + _C4
            p = p * t + _C3
            p = p * t + _C2
            p = p * t + _C1
            p = p * t + _C0
            # -a^2 as -(v/2) v: v/2 is exact and the product fuses into one rounding with p,
            # where squaring the rounded a would add its error twice (it grows with a^2 in the
            # tail).  Far out exp underflows to 0, and so does the result (NaN stays NaN).
            e = t * exp_value(p - (_HALF * v) * v)  # erfc(|v| / sqrt 2)
            s = _TWO - e if v >= 0 else e  # a select, not a branch
            dst[j] = _HALF * v * s


# Gelu's tanh form: sqrt(2/pi) (v + 0.044715 v^3) = v (_K0 + _K1 v^2).
_K0 = _f32(math.sqrt(2 / math.pi))
_K1 = _f32(math.sqrt(2 / math.pi) * 0.044715)
_MINUS_TWO = _f32(-2)


@jit
def tanh_gelu_rows(x, bias, out):  # pragma: no cover - compiled
    """``out[i, j] = gelu_tanh(x[i, j] + bias[j])`` (``bias`` empty: none), as
    ``v / (1 + exp(-2u))`` with ``u = sqrt(2/pi) (v + 0.044715 v^3)``: the same function as
    ``v/2 (1 + tanh u)`` (``1 + tanh u = 2 / (1 + exp(-2u))``) without its cancellation for
    negative ``v``, and one exp instead of a tanh."""
    rows, cols = x.shape
    has_bias = bias.shape[0] > 0
    for i in range(rows):
        src, dst = x[i], out[i]
        for j in range(cols):
            v = src[j] + bias[j] if has_bias else src[j]
            u = v * (_K0 + _K1 * v * v)
            dst[j] = np.divide(v, _ONE + exp_value(_MINUS_TWO * u))


@_split
def gelu_rows_parallel(x, bias, out, parts):  # pragma: no cover - compiled
    """:func:`gelu_rows` with the rows in ``parts`` blocks on numba's threading layer (the same
    values: each row's loop is the same)."""
    rows = x.shape[0]
    for part in numba.prange(parts):
        lo, hi = rows * part // parts, rows * (part + 1) // parts
        gelu_rows(x[lo:hi], bias, out[lo:hi])


@_split
def tanh_gelu_rows_parallel(x, bias, out, parts):  # pragma: no cover - compiled
    """:func:`tanh_gelu_rows` split as :func:`gelu_rows_parallel`."""
    rows = x.shape[0]
    for part in numba.prange(parts):
        lo, hi = rows * part // parts, rows * (part + 1) // parts
        tanh_gelu_rows(x[lo:hi], bias, out[lo:hi])
