"""Numeric helpers shared by the elementwise, activation and math kernels (no kernels here).

numpy has no native arithmetic for bfloat16 and the float8 family beyond what ml_dtypes emulates,
and float16 reductions accumulate badly, so kernels that need accuracy compute such inputs in
float32 and round the result back to the input's dtype; float32 and float64 are computed as they
are, never widened in the result.
"""

from __future__ import annotations

import functools
import math

import ml_dtypes
import numpy as np

from ._gelu_jit import gelu_float32, tanh_gelu_float32

#: Float dtypes narrower than float32 that are computed in float32.
NARROW_FLOATS = frozenset(
    np.dtype(t)
    for t in (
        np.float16,
        ml_dtypes.bfloat16,
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e4m3fnuz,
        ml_dtypes.float8_e5m2,
        ml_dtypes.float8_e5m2fnuz,
        ml_dtypes.float8_e8m0fnu,
        ml_dtypes.float4_e2m1fn,
    )
)


def is_float(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is a real floating type (numpy's or one of ml_dtypes')."""
    return dtype.kind == "f" or dtype in NARROW_FLOATS


def widen(x: np.ndarray) -> np.ndarray:
    """``x`` in a dtype numpy computes accurately: narrow floats become float32."""
    return x.astype(np.float32) if x.dtype in NARROW_FLOATS else x


def as_dtype(value, dtype: np.dtype) -> np.ndarray:
    """``value`` as an ndarray of ``dtype`` (ufuncs on 0-d arrays return numpy scalars)."""
    if type(value) is np.ndarray and value.dtype == dtype:  # the common case, without two calls
        return value
    return np.asarray(value).astype(dtype, copy=False)


def float_unary(fn):
    """Decorate ``fn(x, **attrs)`` so that narrow floats are computed in float32 and the result
    comes back in the input's dtype, as an ndarray.  NaN and infinities are legitimate ONNX
    results: sessions run kernels under ``np.errstate(all="ignore")``, once per run."""

    def wrapper(x, *args, **attrs):
        return as_dtype(fn(widen(x), *args, **attrs), x.dtype)

    wrapper.__qualname__ = wrapper.__name__ = getattr(fn, "__name__", "float_unary")
    return wrapper


def _erf_slow(x: np.ndarray) -> np.ndarray:
    """erf(x) for x >= 0 to about double precision, but with ~140 passes over the array.

    Below 3 the series ``erf(x) = 2/sqrt(pi) exp(-x^2) sum 2^n x^(2n+1) / (2n+1)!!`` (all terms
    positive, so no cancellation); from 3 on the continued fraction of ``erfc``.
    """
    small = np.minimum(x, 3.0)
    sq = small * small
    term = small.copy()
    total = small.copy()
    for n in range(1, 80):
        term = term * (2.0 * sq) / (2 * n + 1)
        total = total + term
    series = (2.0 / np.sqrt(np.pi)) * np.exp(-sq) * total
    big = np.maximum(x, 3.0)
    fraction = big.copy()
    for k in range(60, 0, -1):  # erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))
        fraction = big + (k / 2.0) / fraction
    tail = 1.0 - np.exp(-big * big) / (np.sqrt(np.pi) * fraction)
    return np.where(x < 3.0, series, tail)


# Beyond 6, erf rounds to 1 in double precision.
_ERF_PIECES = ((1.0, 2.0), (2.0, 3.0), (3.0, 4.0), (4.0, 6.0))


@functools.cache
def _erf_interpolants():
    """Degree-24 Chebyshev interpolants of erf on each piece of [1, 6], built once from the slow
    evaluation: a few dozen flops per element instead of ~140 passes."""
    return tuple(np.polynomial.chebyshev.Chebyshev.interpolate(_erf_slow, 24, domain=piece) for piece in _ERF_PIECES)


# erfc(a) ~ t * exp(-a^2 + P(t)), t = 1 / (1 + a/2): a Chebyshev fit with relative error under
# 1.2e-7 for every a >= 0 (Numerical Recipes' erfcc), highest coefficient first for Horner.
_ERFC_FIT = (
    0.17087277,
    -0.82215223,
    1.48851587,
    -1.13520398,
    0.27886807,
    -0.18628806,
    0.09678418,
    0.37409196,
    1.00002368,
    -1.26551223,
)


def _erfc_single(a: np.ndarray, sq: np.ndarray | None = None) -> np.ndarray:
    """erfc(a) for float32 ``a >= 0`` (a new array), to a relative error under 1.2e-7 everywhere
    (the fit above); ``sq`` is ``a * a`` when the caller has it."""
    t = np.multiply(a, np.float32(0.5))
    t += np.float32(1)
    np.reciprocal(t, out=t)
    poly = np.full_like(a, _ERFC_FIT[0])
    for coefficient in _ERFC_FIT[1:]:
        poly *= t
        poly += np.float32(coefficient)
    poly -= np.square(a) if sq is None else sq
    np.exp(poly, out=poly)  # underflow to 0 is the answer far out (sessions run under errstate)
    poly *= t
    return poly


def gelu_single(x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """Exact (erf) Gelu ``x/2 (1 + erf(x/sqrt 2))`` of ``x + bias`` computed in float32 (a new
    float32 array), as ``x/2 erfc(-x/sqrt 2)`` below zero and ``x/2 (2 - erfc(x/sqrt 2))``
    above, so the negative tail keeps its relative accuracy (``1 + erf`` would cancel there).
    Relative error under 2e-6 for |x| < 4, growing with x^2 beyond (2e-5 where the result
    leaves float32's range).  ``bias`` (optional) is 1-D with ``x``'s last dimension, added in
    float32 (BiasGelu).

    The fast path of the Gelu kernels, run on every FFN activation of a transformer: one
    compiled pass (``_gelu_jit``, about ten times quicker), or without numba the same
    arithmetic in about fifteen in-place numpy passes."""
    result = gelu_float32(x, bias)
    if result is not None:
        return result
    x = np.asarray(x, dtype=np.float32)
    if bias is not None:
        x = x + np.asarray(bias, dtype=np.float32)
    return _gelu_numpy(x)


def gelu_tanh_single(x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """Gelu's tanh approximation ``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` of ``x + bias``
    in float32 (a new float32 array; ``bias`` as in :func:`gelu_single`): com.microsoft's
    FastGelu and ONNX Gelu with ``approximate="tanh"``.  One compiled pass
    (``_gelu_loops.tanh_gelu_rows``, in the equal form ``x / (1 + exp(-2u))``), or numpy's tanh
    without numba."""
    result = tanh_gelu_float32(x, bias)
    if result is not None:
        return result
    x = np.asarray(x, dtype=np.float32)
    if bias is not None:
        x = x + np.asarray(bias, dtype=np.float32)
    inner = np.float32(math.sqrt(2 / math.pi)) * (x + np.float32(0.044715) * x * x * x)
    return np.float32(0.5) * x * (np.float32(1) + np.tanh(inner))


def _gelu_numpy(x: np.ndarray) -> np.ndarray:
    """:func:`gelu_single` of float32 ``x`` in numpy passes (the path without numba)."""
    a = np.abs(x)
    a *= np.float32(1 / math.sqrt(2.0))
    e = _erfc_single(a)
    # e below zero, 2 - e from zero up, as e + [x >= 0] (2 - 2e): a product with the 0/1 mask
    # costs three plain passes, where numpy's masked ``where=`` loop took ~7 ns a value (1.4 ms
    # of MiniLM's 128×1536 activations, half of this function).
    d = np.multiply(e, np.float32(-2))
    d += np.float32(2)
    d *= x >= 0
    e += d
    e *= x
    e *= np.float32(0.5)
    return e


def _erf_single(x: np.ndarray) -> np.ndarray:
    """erf to single precision, computed in float32 with in-place passes (the fast path for
    float32 and narrower types): the erfc fit from 0.5 up, and the Taylor series below, where
    ``1 - erfc`` would lose the relative accuracy of small values."""
    x = np.asarray(x, dtype=np.float32)
    a = np.abs(x)
    sq = np.square(a)
    poly = _erfc_single(a, sq)
    large = np.subtract(np.float32(1), poly, out=poly)
    # Taylor to a^13 below 0.5 (the next term is under 5e-10 there), over the whole array: a
    # few more passes cost less than gathering the small values out and back.
    series = np.full_like(a, np.float32(1 / 9360))
    for coefficient in (-1 / 1320, 1 / 216, -1 / 42, 1 / 10, -1 / 3, 1):
        series *= sq
        series += np.float32(coefficient)
    series *= a
    series *= np.float32(2.0 / np.sqrt(np.pi))
    np.copyto(large, series, where=a < np.float32(0.5))
    return np.copysign(large, x)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function (numpy has none), in float64.

    float64 inputs get double precision: below 1 the Taylor series (20 terms reach 1e-17 there,
    and keep the relative accuracy of tiny arguments); on [1, 6] piecewise Chebyshev
    interpolants; beyond, 1.  Narrower inputs take the single-precision fast path, about ten
    times quicker (Gelu in transformer models calls this on every activation).
    """
    if np.asarray(x).dtype != np.float64:
        return _erf_single(x)
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    sq = np.minimum(a, 1.0) ** 2
    term = np.ones_like(a)
    total = np.ones_like(a)
    for n in range(1, 22):  # sum (-1)^n x^(2n) / (n! (2n+1))
        term = term * (-sq) / n
        total = total + term / (2 * n + 1)
    result = np.array((2.0 / np.sqrt(np.pi)) * a * total)  # an ndarray even at rank 0
    for (low, high), piece in zip(_ERF_PIECES, _erf_interpolants()):
        inside = (a >= low) & (a < high)
        if inside.any():
            result[inside] = piece(a[inside])
    result[a >= _ERF_PIECES[-1][1]] = 1.0
    result[np.isnan(a)] = np.nan
    return np.copysign(result, x)
