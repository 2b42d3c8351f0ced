"""Element-wise arithmetic and activations.

Float ops stay float: array-api-strict refuses mixing a Python float with an integer array, and
CuPy would promote, so integer types are claimed only where the op is exact on them (Add, Sub,
Mul, Abs, Neg, Sign, Max, Min, Clip).
"""

from __future__ import annotations

import math

from onnxplug.errors import InvalidArgument

from ._common import FLOATS, NUMBERS, SIGNED_INTS, namespace, registry, wide_float

_F = {"T": FLOATS}


def _unary(op: str, since: tuple[int, ...], fn, types=FLOATS) -> None:
    def kernel(x):
        return fn(namespace(x), x)

    kernel.__name__ = kernel.__qualname__ = op.lower()
    registry.kernel(op, since=since, types={"T": types})(kernel)


def _erf(xp, x):
    """erf from the standard's functions (it has no erf): a Maclaurin series below 0.5, where
    the rational form's absolute error would be a large relative one, and Abramowitz & Stegun
    7.1.26 (absolute error < 1.5e-7 where erf > 0.52) above.  Computed in float32 at least."""
    w = wide_float(xp, x)
    a = xp.abs(w)
    small = xp.minimum(a, xp.asarray(0.5, dtype=w.dtype))
    s2 = small * small
    term = small
    series = small
    for n in range(1, 12):
        term = term * (-s2) / n
        series = series + term / (2 * n + 1)
    series = series * (2 / math.sqrt(math.pi))
    t = 1 / (1 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    rational = 1 - poly * xp.exp(-a * a)
    y = xp.where(a < 0.5, series, rational)
    return xp.astype(xp.sign(w) * y, x.dtype)


def _softplus(xp, x):
    return xp.logaddexp(xp.zeros_like(x), x)


_unary("Relu", (6, 13, 14), lambda xp, x: xp.maximum(x, xp.zeros_like(x)))
_unary("Sigmoid", (6, 13), lambda xp, x: 1 / (1 + xp.exp(-x)))
_unary("Tanh", (6, 13), lambda xp, x: xp.tanh(x))
_unary("Exp", (6, 13), lambda xp, x: xp.exp(x))
_unary("Log", (6, 13), lambda xp, x: xp.log(x))
_unary("Abs", (6, 13), lambda xp, x: xp.abs(x), NUMBERS)
_unary("Neg", (6, 13), lambda xp, x: -x, FLOATS + SIGNED_INTS)
_unary("Sqrt", (6, 13), lambda xp, x: xp.sqrt(x))
_unary("Reciprocal", (6, 13), lambda xp, x: 1 / x)
_unary("Floor", (6, 13), lambda xp, x: xp.floor(x))
_unary("Ceil", (6, 13), lambda xp, x: xp.ceil(x))
_unary("Round", (11, 22), lambda xp, x: xp.round(x))  # halves to even, as ONNX says
_unary("Sign", (9, 13), lambda xp, x: xp.sign(x), NUMBERS)
_unary("Sin", (7, 22), lambda xp, x: xp.sin(x))
_unary("Cos", (7, 22), lambda xp, x: xp.cos(x))
_unary("Erf", (9, 13), _erf)
_unary("Softplus", (1, 22), _softplus)
_unary("Softsign", (1, 22), lambda xp, x: x / (1 + xp.abs(x)))
_unary("Mish", (18, 22), lambda xp, x: x * xp.tanh(_softplus(xp, x)))
_unary("HardSwish", (14, 22), lambda xp, x: x * xp.clip(x / 6 + 0.5, 0.0, 1.0))


@registry.kernel("LeakyRelu", since=(6, 16), types=_F)
def leaky_relu(x, *, alpha):
    xp = namespace(x)
    return xp.where(x < 0, x * alpha, x)


@registry.kernel("Elu", since=(6, 22), types=_F)
def elu(x, *, alpha):
    xp = namespace(x)
    return xp.where(x < 0, alpha * xp.expm1(x), x)


@registry.kernel("Celu", since=(12, 28), types=_F)
def celu(x, *, alpha):
    xp = namespace(x)
    return xp.maximum(x, xp.zeros_like(x)) + xp.minimum(xp.zeros_like(x), alpha * xp.expm1(x / alpha))


@registry.kernel("Selu", since=(6, 22), types=_F)
def selu(x, *, alpha, gamma):
    xp = namespace(x)
    return gamma * xp.where(x <= 0, alpha * xp.expm1(x), x)


@registry.kernel("HardSigmoid", since=(6, 22), types=_F)
def hard_sigmoid(x, *, alpha, beta):
    xp = namespace(x)
    return xp.clip(alpha * x + beta, 0.0, 1.0)


@registry.kernel("ThresholdedRelu", since=(10, 22), types=_F)
def thresholded_relu(x, *, alpha):
    xp = namespace(x)
    return xp.where(x > alpha, x, xp.zeros_like(x))


@registry.kernel("Shrink", since=(9,), types=_F)
def shrink(x, *, bias, lambd):
    xp = namespace(x)
    zero = xp.zeros_like(x)
    return xp.where(x < -lambd, x + bias, xp.where(x > lambd, x - bias, zero))


@registry.kernel("Gelu", since=(20,), types=_F)
def gelu(x, *, approximate):
    xp = namespace(x)
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1 + xp.tanh(inner))
    if approximate != "none":
        raise InvalidArgument(f"Gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return 0.5 * x * (1 + _erf(xp, x / math.sqrt(2)))


@registry.kernel("PRelu", since=(9, 16), types=_F)
def prelu(x, slope):
    xp = namespace(x, slope)
    return xp.where(x < 0, x * slope, x)


def _same_dtype(op: str, *arrays) -> None:
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) > 1:
        raise InvalidArgument(f"{op}: input types differ ({', '.join(sorted(str(d) for d in dtypes))})")


def _binary(op: str, fn, types=FLOATS, since=(7, 13, 14)) -> None:
    def kernel(a, b):
        _same_dtype(op, a, b)
        return fn(a, b)

    kernel.__name__ = kernel.__qualname__ = op.lower()
    registry.kernel(op, since=since, types={"T": types})(kernel)


_binary("Add", lambda a, b: a + b, NUMBERS)
_binary("Sub", lambda a, b: a - b, NUMBERS)
_binary("Mul", lambda a, b: a * b, NUMBERS)
_binary("Div", lambda a, b: a / b)


@registry.kernel("Pow", since=(7, 12, 13, 15), types={"T": FLOATS, "T1": NUMBERS})
def power(x, y):
    """The exponent is cast to the base's type (exact for the integer exponents the node
    cases use), since the standard does not mix dtypes."""
    xp = namespace(x, y)
    return xp.pow(x, y if y.dtype == x.dtype else xp.astype(y, x.dtype))


def _variadic(op: str, since: tuple[int, ...], fold, finish=None, types=FLOATS) -> None:
    def kernel(*inputs):
        if not inputs:
            raise InvalidArgument(f"{op}: needs at least one input")
        _same_dtype(op, *inputs)
        result = inputs[0]
        for value in inputs[1:]:
            result = fold(namespace(result, value), result, value)
        if len(inputs) == 1:
            xp = namespace(result)
            result = xp.asarray(result, copy=True)
        return result if finish is None else finish(result, len(inputs))

    kernel.__name__ = kernel.__qualname__ = op.lower()
    registry.kernel(op, since=since, types={"T": types})(kernel)


_variadic("Max", (8, 12, 13), lambda xp, a, b: xp.maximum(a, b), types=NUMBERS)
_variadic("Min", (8, 12, 13), lambda xp, a, b: xp.minimum(a, b), types=NUMBERS)
_variadic("Sum", (8, 13), lambda xp, a, b: a + b)
_variadic("Mean", (8, 13), lambda xp, a, b: a + b, finish=lambda total, n: total / n)


@registry.kernel("Clip", since=(6,), types=_F)
def clip_6(x, *, max, min):  # noqa: A002 - the schema's attribute names
    xp = namespace(x)
    return xp.clip(x, min, max)


@registry.kernel("Clip", since=(11, 12, 13), types={"T": NUMBERS})
def clip(x, low=None, high=None):
    """min and max are 0-d device tensors: applied with ``maximum``/``minimum`` (no host read)."""
    xp = namespace(x)
    y = x
    if low is not None:
        y = xp.maximum(y, xp.astype(low, x.dtype))
    if high is not None:
        y = xp.minimum(y, xp.astype(high, x.dtype))
    return y
