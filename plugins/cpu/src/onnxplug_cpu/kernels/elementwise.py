"""Broadcasting arithmetic: Add, Sub, Mul, Div, Pow, Mod, the variadic Max, Min, Sum, Mean, and Where.

Opsets 1 and 6 of the binary ops predate numpy-style broadcasting: with ``broadcast=1`` the
second input's shape must match a contiguous run of the first input's dims starting at ``axis``
(the trailing dims when ``axis`` is absent), so it is reshaped with unit dims around it.
"""

from __future__ import annotations

import functools

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from ._numeric import as_dtype, is_float, widen
from ._registry import kernel
from ._typed import when_typed_alike


def _same_dtype(op, *arrays):
    first = arrays[0].dtype
    for other in arrays[1:]:
        if other.dtype != first:
            raise InvalidArgument(f"{op}: input types differ ({first} and {other.dtype})")


def legacy_broadcast(op, a, b, broadcast, axis):
    """``(a, b)`` aligned by the pre-opset-7 rule (see the module docstring)."""
    if not broadcast:
        if a.shape != b.shape and b.size != 1:
            raise InvalidArgument(f"{op}: shapes {a.shape} and {b.shape} differ and broadcast is 0 (opset < 7)")
        return a, b
    if axis is None:
        return a, b
    start = axis + a.ndim if axis < 0 else axis
    window = a.shape[start : start + b.ndim]
    # Size-1 dims of b stretch, as the exporters of that era (and onnxruntime) allowed.
    if start < 0 or start + b.ndim > a.ndim or any(d not in (w, 1) for d, w in zip(b.shape, window)):
        raise InvalidArgument(f"{op}: shape {b.shape} cannot broadcast into {a.shape} at axis {axis}")
    return a, b.reshape((1,) * start + b.shape + (1,) * (a.ndim - start - b.ndim))


def _register_binary(op, fn, *, modern, legacy, ufunc=None):
    """Register ``fn(a, b)`` for the numpy-broadcasting versions and a wrapper for the legacy ones.

    With ``ufunc``, a node whose inputs are :func:`._typed.typed_alike` runs the bare ufunc: on small
    tensors the kernel's own checks cost half as much as numpy's call."""
    if ufunc is None:
        kernel(op, since=modern)(fn)
    else:
        kernel(op, since=modern, factory=True)(when_typed_alike(fn, ufunc))

    def legacy_kernel(a, b, *, axis=None, broadcast, **_consumed_inputs):
        a, b = legacy_broadcast(op, a, b, broadcast, axis)
        return fn(a, b)

    legacy_kernel.__qualname__ = legacy_kernel.__name__ = f"{fn.__name__}_legacy"
    kernel(op, since=legacy)(legacy_kernel)


def _arith(op, ufunc):
    def compute(a, b):
        # Identity first: numpy shares one dtype object per builtin type, and the equality
        # test alone costs a tenth of a small add.
        if a.dtype is not b.dtype and a.dtype != b.dtype:
            _same_dtype(op, a, b)
        # Integer wrap-around and IEEE specials are results: sessions run kernels under
        # np.errstate(all="ignore") (one per run; a context per call would cost more than the add).
        result = ufunc(a, b)
        return result if type(result) is np.ndarray else as_dtype(result, a.dtype)

    compute.__qualname__ = compute.__name__ = op.lower()
    return compute


def div(a, b):
    _same_dtype("Div", a, b)
    if a.dtype.kind not in "iu":
        return as_dtype(np.divide(a, b), a.dtype)  # x/0 is inf or NaN (errstate: see _arith)
    if np.any(b == 0):
        raise InvalidArgument("Div: integer division by zero")
    with np.errstate(all="ignore"):  # INT_MIN / -1 wraps to INT_MIN instead of trapping
        quotient = np.floor_divide(a, b)
        if a.dtype.kind == "i":
            # ONNX truncates toward zero; numpy floors: step back up where the floor was inexact
            # and the signs differ.
            inexact = (a - quotient * b) != 0
            quotient = quotient + (inexact & ((a < 0) != (b < 0))).astype(a.dtype)
    return as_dtype(quotient, a.dtype)


for _op, _fn, _ufunc in (
    ("Add", _arith("Add", np.add), np.add),
    ("Sub", _arith("Sub", np.subtract), np.subtract),
    ("Mul", _arith("Mul", np.multiply), np.multiply),
    ("Div", div, None),
):
    _register_binary(_op, _fn, modern=(7, 13, 14), legacy=(1, 6), ufunc=_ufunc)


def power(x, y):
    """``x ** y`` in ``x``'s dtype; the exponent may be of another numeric type (opset 12+)."""
    with np.errstate(all="ignore"):
        if is_float(x.dtype):
            base = widen(x)
            exponent = widen(y)
            if exponent.dtype.kind in "iub":
                exponent = exponent.astype(base.dtype)
            return as_dtype(np.power(base, exponent), x.dtype)
        if is_float(y.dtype):
            # An integer base with a float exponent: compute in double, truncate like C's cast.
            return as_dtype(np.trunc(np.power(x.astype(np.float64), widen(y).astype(np.float64))), x.dtype)
        base = x.astype(np.int64)
        exponent = y.astype(np.int64)
        negative = exponent < 0
        result = np.power(base, np.where(negative, 0, exponent))
        if np.any(negative):
            # x ** -n is a fraction that truncates to 0 except for x = 1 and x = -1.
            odd = (exponent % 2) != 0
            fraction = np.where(base == 1, 1, np.where(base == -1, np.where(odd, -1, 1), 0))
            result = np.where(negative, fraction, result)
        return as_dtype(result, x.dtype)


kernel("Pow", since=(7, 12, 13, 15))(power)


@kernel("Pow", since=(1,))
def power_legacy(x, y, *, axis=None, broadcast):
    x, y = legacy_broadcast("Pow", x, y, broadcast, axis)
    return power(x, y)


@kernel("Mod", since=(10, 13, 28))
def mod(a, b, *, fmod):
    """``fmod=0``: the remainder takes the divisor's sign (floored); ``fmod=1``: the dividend's
    (truncated, C's fmod)."""
    _same_dtype("Mod", a, b)
    if fmod not in (0, 1):
        raise InvalidArgument(f"Mod: fmod must be 0 or 1, got {fmod}")
    if a.dtype.kind in "iu" and np.any(b == 0):
        raise InvalidArgument("Mod: integer modulo by zero")
    with np.errstate(all="ignore"):
        result = np.fmod(widen(a), widen(b)) if fmod else np.mod(widen(a), widen(b))
    return as_dtype(result, a.dtype)


def _variadic(op, inputs, combine, *, mean=False):
    if not inputs:
        raise Fail(f"{op}: needs at least one input")
    _same_dtype(op, *inputs)
    dtype = inputs[0].dtype
    if len(inputs) == 2 and not mean and dtype.kind in "fiub" and dtype.itemsize >= 4:
        result = combine(inputs[0], inputs[1])  # numpy computes these dtypes as they are
    else:
        result = functools.reduce(combine, [widen(x) for x in inputs])
        if mean:
            result = result / result.dtype.type(len(inputs))
    return as_dtype(result, dtype)


def _pairwise_first(op, name, combine):
    """The variadic kernel with the two-input case of one wide dtype checked inline: most Max,
    Min and Sum nodes have two inputs, and on small tensors the general path's checks cost
    as much as numpy's call."""

    def variadic(*inputs):
        if len(inputs) == 2:
            a, b = inputs
            dtype = a.dtype
            if (dtype is b.dtype or dtype == b.dtype) and dtype.kind in "fiu" and dtype.itemsize >= 4:
                result = combine(a, b)
                return result if type(result) is np.ndarray else as_dtype(result, dtype)
        return _variadic(op, inputs, combine)

    variadic.__qualname__ = variadic.__name__ = name
    return variadic


maximum = _pairwise_first("Max", "maximum", np.maximum)
minimum = _pairwise_first("Min", "minimum", np.minimum)
total = _pairwise_first("Sum", "total", np.add)


def mean(*inputs):
    return _variadic("Mean", inputs, np.add, mean=True)


def _ignoring_consumed_inputs(fn):
    def legacy(*inputs, consumed_inputs=None):
        return fn(*inputs)

    legacy.__qualname__ = legacy.__name__ = f"{fn.__name__}_legacy"
    return legacy


for _op, _fn, _ufunc, _modern in (
    ("Max", maximum, np.maximum, (6, 8, 12, 13)),
    ("Min", minimum, np.minimum, (6, 8, 12, 13)),
    ("Sum", total, np.add, (6, 8, 13)),
    ("Mean", mean, None, (6, 8, 13)),
):
    if _ufunc is None:
        kernel(_op, since=_modern)(_fn)
    else:
        kernel(_op, since=_modern, factory=True)(when_typed_alike(_fn, _ufunc))
    kernel(_op, since=(1,))(_ignoring_consumed_inputs(_fn))


@kernel("Where", since=(9, 16))
def where(condition, x, y):
    _same_dtype("Where", x, y)
    if condition.dtype != np.bool_:
        raise InvalidArgument(f"Where: condition must be bool, got {condition.dtype}")
    return np.asarray(np.where(condition, x, y)).astype(x.dtype, copy=False)
