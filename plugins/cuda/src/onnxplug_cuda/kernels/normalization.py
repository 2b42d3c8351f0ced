"""Softmax, LogSoftmax and the normalizations (LayerNormalization, BatchNormalization at
inference, InstanceNormalization).  float16 statistics are accumulated in float32."""

from __future__ import annotations

import math

from onnxplug.errors import InvalidArgument

from ._common import FLOATS, declines, namespace, registry, wide_float

_T = {"T": FLOATS}


def _softmax(xp, x, axis):
    shifted = x - xp.max(x, axis=axis, keepdims=True)
    e = xp.exp(shifted)
    return e / xp.sum(e, axis=axis, keepdims=True)


def _log_softmax(xp, x, axis):
    shifted = x - xp.max(x, axis=axis, keepdims=True)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))


def _coerced(fn):
    """Opsets 1 and 11: the input is seen as 2-D, [prod(shape[:axis]), prod(shape[axis:])]."""

    def kernel(x, *, axis):
        xp = namespace(x)
        start = axis if axis >= 0 else axis + x.ndim
        flat = xp.reshape(x, (math.prod(x.shape[:start]), math.prod(x.shape[start:])))
        return xp.reshape(fn(xp, flat, 1), x.shape)

    return kernel


@registry.kernel("Softmax", since=(13,), types=_T)
def softmax(x, *, axis):
    return _softmax(namespace(x), x, axis)


@registry.kernel("LogSoftmax", since=(13,), types=_T)
def log_softmax(x, *, axis):
    return _log_softmax(namespace(x), x, axis)


registry.kernel("Softmax", since=(1, 11), types=_T)(_coerced(_softmax))
registry.kernel("LogSoftmax", since=(1, 11), types=_T)(_coerced(_log_softmax))


@registry.kernel("LayerNormalization", since=(17,), types={"T": FLOATS, "U": ("tensor(float)",)})
def layer_norm(x, scale, bias=None, *, axis, epsilon, stash_type):
    if stash_type != 1:
        raise InvalidArgument(f"LayerNormalization: stash_type {stash_type} is not supported (only 1, float)")
    xp = namespace(x)
    start = axis if axis >= 0 else axis + x.ndim
    axes = tuple(range(start, x.ndim))
    wide = wide_float(xp, x)
    mean = xp.mean(wide, axis=axes, keepdims=True)
    centred = wide - mean
    variance = xp.mean(centred * centred, axis=axes, keepdims=True)
    inv = 1 / xp.sqrt(variance + epsilon)
    y = xp.astype(centred * inv, x.dtype) * scale
    if bias is not None:
        y = y + bias
    return y, xp.astype(mean, xp.float32), xp.astype(inv, xp.float32)


@declines("LayerNormalization")
def _float_stash(node):
    if node.attributes.get("stash_type", 1) != 1:
        return "only stash_type 1 (float statistics) runs on the CUDA kernels"
    return None


def _per_channel(xp, value, like):
    """A [C] parameter shaped to broadcast over [N, C, *spatial], in ``like``'s dtype."""
    value = value if value.dtype == like.dtype else xp.astype(value, like.dtype)
    return xp.reshape(value, (1, value.shape[0]) + (1,) * (like.ndim - 2))


@registry.kernel(
    "BatchNormalization", since=(7, 9, 14, 15), types={"T": FLOATS, "T1": FLOATS, "T2": FLOATS, "U": FLOATS}
)
def batch_norm(x, scale, bias, mean, var, *, epsilon, **_training):
    """Inference: the running statistics normalise (momentum is a training attribute); training
    mode is declined at claim time."""
    xp = namespace(x, scale, bias, mean, var)
    wide = wide_float(xp, x)
    inv = 1 / xp.sqrt(_per_channel(xp, var, wide) + epsilon)
    y = (wide - _per_channel(xp, mean, wide)) * inv * _per_channel(xp, scale, wide) + _per_channel(xp, bias, wide)
    return (xp.astype(y, x.dtype),)  # the schema's optional outputs make this a multi-output kernel


@declines("BatchNormalization")
def _inference_only(node):
    if node.attributes.get("spatial", 1) != 1:
        return "BatchNormalization-7 with spatial=0 (per-element statistics) runs on the CPU provider"
    if node.attributes.get("training_mode", 0):
        return "training_mode=1 (batch statistics and running-mean outputs) runs on the CPU provider"
    if len([o for o in node.outputs if o]) > 1:
        return "the running-statistics outputs are a training feature: BatchNormalization runs on the CPU provider"
    return None


@registry.kernel("InstanceNormalization", since=(6, 22), types=_T)
def instance_norm(x, scale, bias, *, epsilon):
    xp = namespace(x, scale, bias)
    wide = wide_float(xp, x)
    axes = tuple(range(2, x.ndim))
    mean = xp.mean(wide, axis=axes, keepdims=True)
    centred = wide - mean
    variance = xp.mean(centred * centred, axis=axes, keepdims=True)
    y = centred / xp.sqrt(variance + epsilon) * _per_channel(xp, scale, wide) + _per_channel(xp, bias, wide)
    return xp.astype(y, x.dtype)
