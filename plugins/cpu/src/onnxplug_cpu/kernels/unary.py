"""Elementwise unary math: Neg, Abs, Sign, Reciprocal, Sqrt, Exp, Log, Floor, Ceil, Round, Erf,
the trigonometric and hyperbolic functions, Clip, IsNaN and IsInf.

Float kernels go through :func:`float_unary`, which computes narrow floats in float32 and returns
the input's dtype; integer inputs (Neg, Abs, Sign, Clip) are computed exactly in their own dtype.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import InvalidArgument

from ._numeric import as_dtype, erf, float_unary, widen
from ._registry import kernel
from ._typed import FLOAT_TYPES, WIDE_TYPES, when_typed_single


def _register(op, fn, since, legacy=(), *, bare=None, bare_types=WIDE_TYPES):
    """Register ``fn(x)`` at ``since``; opset-1 versions also take the obsolete ``consumed_inputs``.

    With ``bare`` (a ufunc), a node whose input is declared with one of ``bare_types`` and a
    known rank runs ``bare`` itself (see :mod:`._typed`): on a small tensor ``fn``'s dtype checks
    cost as much as the ufunc."""
    if bare is None:
        kernel(op, since=since)(fn)
    else:
        kernel(op, since=since, factory=True)(when_typed_single(fn, bare, bare_types))
    if legacy:

        def legacy_kernel(x, *, consumed_inputs=None):
            return fn(x)

        legacy_kernel.__qualname__ = legacy_kernel.__name__ = f"{fn.__name__}_legacy"
        kernel(op, since=legacy)(legacy_kernel)


def _exact_or_float(ufunc, name):
    """A ufunc applied exactly to integers and through float32 to narrow floats."""
    via_float = float_unary(ufunc)

    def compute(x):
        if x.dtype.kind in "iu":
            with np.errstate(all="ignore"):  # -INT_MIN wraps, like the C kernels
                return as_dtype(ufunc(x), x.dtype)
        return via_float(x)

    compute.__qualname__ = compute.__name__ = name
    return compute


def _float_only(ufunc, name):
    compute = float_unary(ufunc)
    compute.__qualname__ = compute.__name__ = name
    return compute


def _reciprocal(x):
    return np.reciprocal(x) if x.dtype.kind == "f" else 1 / x


for _op, _ufunc, _name, _since, _legacy in (
    ("Neg", np.negative, "neg", (6, 13), (1,)),
    ("Abs", np.abs, "abs_", (6, 13), (1,)),
    ("Sign", np.sign, "sign", (9, 13), ()),
):
    _register(_op, _exact_or_float(_ufunc, _name), _since, _legacy, bare=_ufunc)
_register(
    "Reciprocal", _float_only(_reciprocal, "reciprocal"), (6, 13), (1,), bare=np.reciprocal, bare_types=FLOAT_TYPES
)
for _op, _ufunc, _name, _since, _legacy in (
    ("Sqrt", np.sqrt, "sqrt", (6, 13), (1,)),
    ("Exp", np.exp, "exp", (6, 13), (1,)),
    ("Log", np.log, "log", (6, 13), (1,)),
    ("Floor", np.floor, "floor", (6, 13), (1,)),
    ("Ceil", np.ceil, "ceil", (6, 13), (1,)),
    ("Round", np.rint, "round_", (11, 22), ()),  # rint rounds halves to even
):
    _register(_op, _float_only(_ufunc, _name), _since, _legacy, bare=_ufunc, bare_types=FLOAT_TYPES)
_register("Erf", _float_only(erf, "erf_"), (9, 13))
for _op, _ufunc, _since in (
    ("Sin", np.sin, (7, 22)),
    ("Cos", np.cos, (7, 22)),
    ("Tan", np.tan, (7, 22)),
    ("Asin", np.arcsin, (7, 22)),
    ("Acos", np.arccos, (7, 22)),
    ("Atan", np.arctan, (7, 22)),
    ("Sinh", np.sinh, (9, 22)),
    ("Cosh", np.cosh, (9, 22)),
    ("Asinh", np.arcsinh, (9, 22)),
    ("Acosh", np.arccosh, (9, 22)),
    ("Atanh", np.arctanh, (9, 22)),
):
    _register(_op, _float_only(_ufunc, _op.lower()), _since, bare=_ufunc, bare_types=FLOAT_TYPES)


def _clip(x, low, high):
    # max is applied last, so min > max yields max everywhere, as onnxruntime does.
    result = x
    if low is not None:
        result = np.maximum(result, low)
    if high is not None:
        result = np.minimum(result, high)
    return as_dtype(result, x.dtype)


@kernel("Clip", since=(1,))
def clip_1(x, *, consumed_inputs=None, max=None, min=None):  # noqa: A002 - schema names
    return _clip(x, None if min is None else x.dtype.type(min), None if max is None else x.dtype.type(max))


@kernel("Clip", since=(6,))
def clip_6(x, *, max, min):  # noqa: A002 - schema names
    with np.errstate(over="ignore"):  # FLT_MAX defaults overflow float16 to inf, which is harmless
        return _clip(x, x.dtype.type(min), x.dtype.type(max))


def _bound(value, x, name):
    if value is None:
        return None
    if value.size != 1:
        raise InvalidArgument(f"Clip: {name} must be a scalar, got shape {value.shape}")
    if value.dtype != x.dtype:
        raise InvalidArgument(f"Clip: {name} has type {value.dtype}, input has {x.dtype}")
    return value.reshape(())


@kernel("Clip", since=(11, 12, 13))
def clip(x, min=None, max=None):  # noqa: A002 - schema names
    return _clip(x, _bound(min, x, "min"), _bound(max, x, "max"))


@kernel("IsNaN", since=(9, 13, 20))
def isnan(x):
    return np.asarray(np.isnan(widen(x)))


@kernel("IsInf", since=(10, 20))
def isinf(x, *, detect_negative, detect_positive):
    x = widen(x)
    if x.dtype.kind in "iu":
        return np.zeros(x.shape, dtype=np.bool_)
    result = np.zeros(x.shape, dtype=np.bool_)
    if detect_positive:
        result |= x == np.inf
    if detect_negative:
        result |= x == -np.inf
    return result
