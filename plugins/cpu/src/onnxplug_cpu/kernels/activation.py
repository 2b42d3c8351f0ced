"""Activations: the ReLU family, sigmoids, Softmax/LogSoftmax/Hardmax, GELU, Swish, SwiGLU, Shrink.

Float kernels compute narrow floats (float16, bfloat16) in float32 and return the input's dtype
(see :func:`float_unary`); ReLU-like kernels that also take integers (Relu, LeakyRelu, PRelu,
Shrink) compute those exactly.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.kernels import Binding

from ._channel_jit import MIN_ELEMENTS as COMPILED_RELU_ELEMENTS
from ._channel_jit import relu as compiled_relu
from ._numeric import as_dtype, erf, float_unary, gelu_single, gelu_tanh_single, widen
from ._registry import kernel
from ._sigmoid_jit import logistic
from ._softmax_jit import softmax_last_axis
from ._typed import FLOAT_TYPES, when_typed_single


def _legacy(fn, name):
    """``fn`` for opset 1, which also carried the obsolete ``consumed_inputs`` attribute."""

    def legacy(x, *, consumed_inputs=None, **attrs):
        return fn(x, **attrs)

    legacy.__qualname__ = legacy.__name__ = name
    return legacy


def relu(x):
    fast = compiled_relu(x)  # large float32 maps: one compiled pass, on the team in a team run
    if fast is not None:
        return fast
    return np.asarray(np.maximum(x, x.dtype.type(0)))


_ZERO32 = np.float32(0)


def _relu_float32(x, out=None):
    """Relu of an input declared float32 with a known rank (see :mod:`._typed`); ``out``: a
    C-contiguous float32 array of its shape to write (a Concat's view, ``accepts_out``)."""
    if x.size >= COMPILED_RELU_ELEMENTS:
        fast = compiled_relu(x, out)
        if fast is not None:
            return fast
    return np.maximum(x, _ZERO32, out=out)


def _relu_into(out, x):
    _relu_float32(x, out)


def _bind_relu(inputs, output, scratch):
    """The Relu bound into its planned array, so that it may join a segment, also where it
    writes into a Concat (Inception's pool branches end in one after the pool: their convolution
    moved in front of it, ``onnxplug_cpu.rules_conv``)."""
    x = inputs[0]
    if x.dtype != np.float32 or output.dtype != np.float32 or x.shape != output.shape:
        return None
    if not output.flags.c_contiguous:
        return None
    return Binding(_relu_into)


_relu_float32.bind = _bind_relu
_relu_float32.accepts_out = True
kernel("Relu", since=(6, 13, 14), factory=True)(when_typed_single(relu, _relu_float32, (TensorProto.FLOAT,)))
kernel("Relu", since=(1,))(_legacy(relu, "relu_legacy"))


def _sigmoid(x):
    y = logistic(x)  # float32 maps: one compiled pass (kernels._sigmoid_jit)
    if y is not None:
        return y
    # 1 / (1 + exp(-x)) in place, in two passes.  Below about -88 (float32; -709 float64) exp
    # overflows to inf and the result is 0 where the true value is subnormal, as onnxruntime's.
    e = np.negative(x)
    if e.dtype.kind != "f":  # integer-typed calls (SwiGLU's alpha * gate is float already)
        e = e.astype(np.float64)
    np.exp(e, out=e)
    e += 1
    return np.divide(e.dtype.type(1), e, out=e)  # numpy's reciprocal is not vectorised: 2x slower


sigmoid = float_unary(_sigmoid)
kernel("Sigmoid", since=(6, 13), factory=True)(when_typed_single(sigmoid, _sigmoid, FLOAT_TYPES))
kernel("Sigmoid", since=(1,))(_legacy(sigmoid, "sigmoid_legacy"))

tanh = float_unary(np.tanh)
kernel("Tanh", since=(6, 13))(tanh)
kernel("Tanh", since=(1,))(_legacy(tanh, "tanh_legacy"))


def _axis(x, axis, op):
    if not -max(x.ndim, 1) <= axis < max(x.ndim, 1):
        raise Fail(f"{op}: axis {axis} is out of range for rank {x.ndim}")  # onnxruntime's class
    return axis + x.ndim if axis < 0 else axis


def _softmax(x, axis):
    if axis == x.ndim - 1:  # float32 over the last axis: one compiled loop per row (attention)
        fast = softmax_last_axis(x)
        if fast is not None:
            return fast
    exp_x = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return exp_x / np.sum(exp_x, axis=axis, keepdims=True)


def _log_softmax(x, axis):
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _hardmax(x, axis):
    out = np.zeros(x.shape, dtype=x.dtype)
    if x.size:
        np.put_along_axis(out, np.argmax(x, axis=axis, keepdims=True), 1, axis=axis)
    return out


def _in_own_dtype(fn):
    """Like :func:`float_unary` but computing float16/bfloat16 in their own arithmetic.

    Softmax feeds attention, and ONNX's expected attention outputs for float16/bfloat16 are
    computed step by step in the narrow dtype; a float32 softmax differs from them by an ulp,
    which their rtol of 1e-3 does not absorb. numpy's float16 exp and sums are correctly
    rounded from float32 internally, so the narrow result is still within an ulp or two.
    """

    def wrapper(x, **attrs):  # overflow to inf is a result (sessions run under np.errstate)
        return as_dtype(fn(x, **attrs), x.dtype)

    wrapper.__qualname__ = wrapper.__name__ = fn.__name__
    return wrapper


def _normalizer(op, fn, *, narrow=float_unary):
    """Register ``fn(x, axis)`` for the three versions: opsets 1 and 11 flatten the input to 2-D
    at ``axis`` and normalise each row; opset 13 normalises along the single ``axis``."""

    def coerced(x, *, axis):
        if x.ndim == 0:
            return fn(x.reshape(1, 1), 1).reshape(())
        axis = _axis(x, axis, op)
        if x.size == 0:
            return x.copy()
        rows = math.prod(x.shape[:axis])
        return fn(x.reshape(rows, -1), 1).reshape(x.shape)

    def single(x, *, axis):
        if x.ndim == 0:
            return fn(x.reshape(1), 0).reshape(())
        axis = _axis(x, axis, op)
        return x.copy() if x.size == 0 else fn(x, axis)

    for variant, since in ((coerced, (1, 11)), (single, (13,))):
        wrapped = narrow(variant)
        wrapped.__qualname__ = wrapped.__name__ = f"{op.lower()}_{variant.__name__}"
        kernel(op, since=since)(wrapped)


_normalizer("Softmax", _softmax, narrow=_in_own_dtype)
_normalizer("LogSoftmax", _log_softmax, narrow=_in_own_dtype)
_normalizer("Hardmax", _hardmax)


def _elu(x, *, alpha):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


elu = float_unary(_elu)
kernel("Elu", since=(6, 22))(elu)
kernel("Elu", since=(1,))(_legacy(elu, "elu_legacy"))


def _selu(x, *, alpha, gamma):
    return gamma * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


selu = float_unary(_selu)
kernel("Selu", since=(6, 22))(selu)
kernel("Selu", since=(1,))(_legacy(selu, "selu_legacy"))


@kernel("Celu", since=(12, 28))
@float_unary
def celu(x, *, alpha):
    if alpha == 0:
        raise InvalidArgument("Celu: alpha must not be 0")
    return np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(np.minimum(x, 0) / alpha))


def _leaky_relu(x, *, alpha):
    if x.dtype.kind in "iu":
        return as_dtype(np.where(x >= 0, x, alpha * x), x.dtype)
    with np.errstate(all="ignore"):
        return as_dtype(np.where(x >= 0, x, alpha * widen(x)), x.dtype)


kernel("LeakyRelu", since=(6, 16))(_leaky_relu)
kernel("LeakyRelu", since=(1,))(_legacy(_leaky_relu, "leaky_relu_legacy"))


def prelu(x, slope):
    """``slope`` broadcasts to ``x`` (unidirectionally: the output keeps ``x``'s shape)."""
    if x.dtype != slope.dtype:
        raise InvalidArgument(f"PRelu: input types differ ({x.dtype} and {slope.dtype})")
    try:
        slope = np.broadcast_to(slope, x.shape)
    except ValueError:
        raise InvalidArgument(f"PRelu: slope of shape {slope.shape} does not broadcast to {x.shape}") from None
    with np.errstate(all="ignore"):
        return as_dtype(np.where(x < 0, widen(slope) * widen(x), x), x.dtype)


kernel("PRelu", since=(7, 9, 16))(prelu)


def _per_channel(x, slope):
    """Before opset 7 a 1-D slope of length C applies along the channel axis (axis 1)."""
    if slope.ndim == 1 and x.ndim >= 2 and slope.shape[0] == x.shape[1] and slope.shape[0] != x.shape[-1]:
        return slope.reshape((slope.shape[0],) + (1,) * (x.ndim - 2))
    return slope


@kernel("PRelu", since=(6,))
def prelu_6(x, slope):
    return prelu(x, _per_channel(x, slope))


@kernel("PRelu", since=(1,))
def prelu_legacy(x, slope, *, consumed_inputs=None):
    return prelu(x, _per_channel(x, slope))


@kernel("ThresholdedRelu", since=(10, 22))
@float_unary
def thresholded_relu(x, *, alpha):
    return np.where(x > alpha, x, 0)


def _hard_sigmoid(x, *, alpha, beta):
    return np.clip(alpha * x + beta, 0, 1)


hard_sigmoid = float_unary(_hard_sigmoid)
kernel("HardSigmoid", since=(6, 22))(hard_sigmoid)
kernel("HardSigmoid", since=(1,))(_legacy(hard_sigmoid, "hard_sigmoid_legacy"))


@kernel("HardSwish", since=(14, 22))
@float_unary
def hard_swish(x):
    return x * np.clip(x / 6 + 0.5, 0, 1)


@kernel("Softplus", since=(1, 22))
@float_unary
def softplus(x):
    return np.logaddexp(0, x)  # log(1 + exp(x)) without overflow


@kernel("Softsign", since=(1, 22))
@float_unary
def softsign(x):
    return x / (1 + np.abs(x))


@kernel("Gelu", since=(20,))
@float_unary
def gelu(x, *, approximate):
    if approximate == "none":
        if x.dtype == np.float32:
            return gelu_single(x)
        return 0.5 * x * (1 + erf(x / np.sqrt(2)).astype(x.dtype))
    if approximate == "tanh":
        if x.dtype == np.float32:
            return gelu_tanh_single(x)
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    raise InvalidArgument(f"Gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


@kernel("Mish", since=(18, 22))
@float_unary
def mish(x):
    return x * np.tanh(np.logaddexp(0, x))


@kernel("Swish", since=(24,))
@float_unary
def swish(x, *, alpha):
    y = logistic(x, alpha)
    return y if y is not None else x * _sigmoid(alpha * x)


@kernel("SwiGLU", since=(28,))
def swiglu(a, b, *, alpha):
    if a.dtype != b.dtype or a.shape != b.shape:
        raise InvalidArgument(f"SwiGLU: A ({a.dtype}{list(a.shape)}) and B ({b.dtype}{list(b.shape)}) must match")
    with np.errstate(all="ignore"):
        gate = widen(a)
        return as_dtype(gate * _sigmoid(alpha * gate) * widen(b), a.dtype)


@kernel("Shrink", since=(9,))
def shrink(x, *, bias, lambd):
    with np.errstate(all="ignore"):
        wide = widen(x).astype(np.float64) if x.dtype.kind in "iu" else widen(x)
        result = np.where(wide < -lambd, wide + bias, np.where(wide > lambd, wide - bias, 0))
    return as_dtype(result, x.dtype)
