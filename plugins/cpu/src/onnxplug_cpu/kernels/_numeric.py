"""Numeric helpers shared by the elementwise, activation and math kernels (no kernels here).

numpy has no native arithmetic for bfloat16 and the float8 family beyond what ml_dtypes emulates,
and float16 reductions accumulate badly, so kernels that need accuracy compute such inputs in
float32 and round the result back to the input's dtype; float32 and float64 are computed as they
are, never widened in the result.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

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
    return np.asarray(value).astype(dtype, copy=False)


def float_unary(fn):
    """Decorate ``fn(x, **attrs)`` so that narrow floats are computed in float32 and the result
    comes back in the input's dtype, as an ndarray, with floating-point warnings silenced
    (NaN and infinities are legitimate ONNX results)."""

    def wrapper(x, *args, **attrs):
        with np.errstate(all="ignore"):
            return as_dtype(fn(widen(x), *args, **attrs), x.dtype)

    wrapper.__qualname__ = wrapper.__name__ = getattr(fn, "__name__", "float_unary")
    return wrapper


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, to about double precision, in float64 (numpy has none).

    Below |x| = 3 the series ``erf(x) = 2/sqrt(pi) exp(-x^2) sum 2^n x^(2n+1) / (2n+1)!!`` is used
    (all terms positive, so no cancellation); above it the continued fraction of ``erfc``.
    """
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    small = np.minimum(a, 3.0)
    sq = small * small
    term = small.copy()
    total = small.copy()
    for n in range(1, 80):
        term = term * (2.0 * sq) / (2 * n + 1)
        total = total + term
    series = (2.0 / np.sqrt(np.pi)) * np.exp(-sq) * total
    big = np.maximum(a, 3.0)
    fraction = big.copy()
    for k in range(60, 0, -1):  # erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))
        fraction = big + (k / 2.0) / fraction
    tail = 1.0 - np.exp(-big * big) / (np.sqrt(np.pi) * fraction)
    result = np.where(a < 3.0, series, tail)
    result = np.where(np.isnan(x), np.nan, result)
    return np.copysign(result, x)
