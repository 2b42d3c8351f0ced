"""Normalisation: BatchNormalization, LayerNormalization, InstanceNormalization,
GroupNormalization, RMSNormalization, MeanVarianceNormalization, LRN, LpNormalization.

Statistics are computed in at least float32 (``stash_type`` 1, which is every default) and the
result is cast back, so float16 in gives float16 out without losing precision in the sums.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from ._channel_jit import affine_channels
from ._layernorm_jit import layer_norm_last_axis
from ._registry import kernel


def _compute_dtype(dtype, stash_type=1):
    """float64 stays float64; everything else (float16, bfloat16, float32) computes in float32."""
    if stash_type != 1 or np.dtype(dtype) == np.float64:
        return np.float64 if np.dtype(dtype) == np.float64 else np.float32
    return np.float32


def _channel_param(p, ndim, dtype):
    """A per-channel (or, with legacy ``spatial=0``, per-channel-and-position) parameter shaped to
    broadcast against ``(N, C, ...)``."""
    p = np.asarray(p, dtype=dtype)
    return p.reshape((1,) + p.shape + (1,) * (ndim - 1 - p.ndim))


def _check_axis(axis, ndim, op):
    if not -ndim <= axis < ndim:
        raise InvalidArgument(f"{op}: axis {axis} is out of range for rank {ndim}")
    return axis + ndim if axis < 0 else axis


# --- BatchNormalization --------------------------------------------------------------------------


def _batchnorm_inference(x, scale, b, mean, var, epsilon):
    # Folded into one multiply-add per element: y = x * a + c with per-channel a and c, two
    # passes over x instead of five.
    ct = _compute_dtype(x.dtype)
    n = x.ndim
    a = _channel_param(scale, n, ct) / np.sqrt(_channel_param(var, n, ct) + ct(epsilon))
    c = _channel_param(b, n, ct) - _channel_param(mean, n, ct) * a
    if x.ndim >= 2 and a.size == x.shape[1]:  # per-channel: one compiled pass
        fast = affine_channels(x, a, c)
        if fast is not None:
            return fast
    y = np.multiply(x, a, dtype=ct)
    y += c
    return y.astype(x.dtype, copy=False)


def _batchnorm_training(x, scale, b, mean, var, epsilon, momentum):
    """Normalise with the batch's statistics; return them and the updated running ones."""
    ct = _compute_dtype(x.dtype)
    xc = x.astype(ct)
    axes = (0,) + tuple(range(2, x.ndim))
    batch_mean = xc.mean(axis=axes)
    batch_var = xc.var(axis=axes)
    y = _batchnorm_inference(x, scale, b, batch_mean, batch_var, epsilon)
    running_mean = (mean.astype(ct) * ct(momentum) + batch_mean * ct(1 - momentum)).astype(mean.dtype)
    running_var = (var.astype(ct) * ct(momentum) + batch_var * ct(1 - momentum)).astype(var.dtype)
    return y, running_mean, running_var, batch_mean.astype(mean.dtype), batch_var.astype(var.dtype)


@kernel("BatchNormalization", since=(1, 6, 7), factory=True)
def batchnorm_1(ctx, *, epsilon, momentum, **attrs):
    # Before opset 9 extra outputs mean training (and, with is_test, only when not testing);
    # spatial=0 needs nothing special since parameters broadcast by their own shape.
    training = ctx.num_outputs > 1 and not attrs.get("is_test", 0)

    def run(x, scale, b, mean, var):
        if training:
            return _batchnorm_training(x, scale, b, mean, var, epsilon, momentum)
        y = _batchnorm_inference(x, scale, b, mean, var, epsilon)
        return y, mean, var, mean, var

    return run


@kernel("BatchNormalization", since=(9,))
def batchnorm_9(x, scale, b, mean, var, *, epsilon, momentum):
    # momentum only matters for training, which opset 9 selects by asking for extra outputs;
    # inference is what every runtime does here.
    y = _batchnorm_inference(x, scale, b, mean, var, epsilon)
    return y, mean, var, mean, var


@kernel("BatchNormalization", since=(14, 15))
def batchnorm_14(x, scale, b, mean, var, *, epsilon, momentum, training_mode):
    if training_mode:
        return _batchnorm_training(x, scale, b, mean, var, epsilon, momentum)[:3]
    return _batchnorm_inference(x, scale, b, mean, var, epsilon), mean, var


# --- Layer / RMS / Group / Instance normalisation ---------------------------------------------------


@kernel("LayerNormalization", since=(17,))
def layer_normalization(x, scale, b=None, *, axis, epsilon, stash_type):
    axis = _check_axis(axis, x.ndim, "LayerNormalization")
    if axis == x.ndim - 1 and stash_type == 1:  # a transformer's: one compiled loop per row
        fast = layer_norm_last_axis(x, scale, b, epsilon)
        if fast is not None:
            return fast
    ct = _compute_dtype(x.dtype, stash_type)
    xc = x.astype(ct)
    axes = tuple(range(axis, x.ndim))
    mean = xc.mean(axis=axes, keepdims=True)
    centred = xc - mean
    inv_std = 1.0 / np.sqrt((centred * centred).mean(axis=axes, keepdims=True) + ct(epsilon))
    y = centred * inv_std * scale.astype(ct)
    if b is not None:
        y = y + b.astype(ct)
    return y.astype(x.dtype), mean, inv_std


@kernel("RMSNormalization", since=(23,))
def rms_normalization(x, scale, *, axis, epsilon, stash_type):
    axis = _check_axis(axis, x.ndim, "RMSNormalization")
    ct = _compute_dtype(x.dtype, stash_type)
    xc = x.astype(ct)
    axes = tuple(range(axis, x.ndim))
    inv_rms = 1.0 / np.sqrt((xc * xc).mean(axis=axes, keepdims=True) + ct(epsilon))
    return (xc * inv_rms * scale.astype(ct)).astype(x.dtype)


def _normalize_over(xc, axes, epsilon):
    mean = xc.mean(axis=axes, keepdims=True)
    centred = xc - mean
    return centred / np.sqrt((centred * centred).mean(axis=axes, keepdims=True) + epsilon)


@kernel("InstanceNormalization", since=(1, 6, 22))
def instance_normalization(x, scale, b, *, epsilon, **legacy):
    if x.ndim < 3:
        raise Fail(f"InstanceNormalization: input must be at least 3-D, got shape {list(x.shape)}")
    ct = _compute_dtype(x.dtype)
    y = _normalize_over(x.astype(ct), tuple(range(2, x.ndim)), ct(epsilon))
    y = y * _channel_param(scale, x.ndim, ct) + _channel_param(b, x.ndim, ct)
    return y.astype(x.dtype)


def _group_normalized(x, num_groups, epsilon, ct):
    n, c = x.shape[:2]
    if num_groups <= 0 or c % num_groups:
        raise InvalidArgument(f"GroupNormalization: {c} channels cannot be split into num_groups={num_groups}")
    grouped = x.astype(ct).reshape((n, num_groups, -1))
    return _normalize_over(grouped, (2,), ct(epsilon))


@kernel("GroupNormalization", since=(18,))
def group_normalization_18(x, scale, bias, *, epsilon, num_groups):
    # Opset 18 has one scale and bias per group (deprecated for the per-channel 21).
    ct = _compute_dtype(x.dtype)
    y = _group_normalized(x, num_groups, epsilon, ct)
    y = y * scale.astype(ct).reshape(1, -1, 1) + bias.astype(ct).reshape(1, -1, 1)
    return y.reshape(x.shape).astype(x.dtype)


@kernel("GroupNormalization", since=(21,))
def group_normalization_21(x, scale, bias, *, epsilon, num_groups, stash_type):
    ct = _compute_dtype(x.dtype, stash_type)
    y = _group_normalized(x, num_groups, epsilon, ct).reshape(x.shape)
    y = y * _channel_param(scale, x.ndim, ct) + _channel_param(bias, x.ndim, ct)
    return y.astype(x.dtype)


@kernel("MeanVarianceNormalization", since=(9, 13))
def mean_variance_normalization(x, *, axes):
    ct = _compute_dtype(x.dtype)
    xc = x.astype(ct)
    axes = tuple(_check_axis(a, x.ndim, "MeanVarianceNormalization") for a in axes)
    mean = xc.mean(axis=axes, keepdims=True)
    variance = (xc * xc).mean(axis=axes, keepdims=True) - mean * mean
    # The schema's function: (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9).
    return ((xc - mean) / (np.sqrt(variance) + ct(1e-9))).astype(x.dtype)


# --- LRN, LpNormalization --------------------------------------------------------------------------


@kernel("LRN", since=(1, 13))
def lrn(x, *, alpha, beta, bias, size):
    if size is None or size <= 0:
        raise InvalidArgument(f"LRN: size must be positive, got {size}")
    ct = _compute_dtype(x.dtype)
    xc = x.astype(ct)
    channels = x.shape[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    padding = [(0, 0)] * x.ndim
    padding[1] = (before, after)
    squares = np.pad(xc * xc, padding)
    window = np.zeros_like(xc)
    for offset in range(size):
        window += squares[:, offset : offset + channels]
    return (xc / (ct(bias) + ct(alpha / size) * window) ** ct(beta)).astype(x.dtype)


@kernel("LpNormalization", since=(1, 22))
def lp_normalization(x, *, axis, p):
    axis = _check_axis(axis, x.ndim, "LpNormalization")
    if p == 1:
        norm = np.abs(x).sum(axis=axis, keepdims=True)
    elif p == 2:
        norm = np.sqrt((x * x).sum(axis=axis, keepdims=True))
    else:
        raise InvalidArgument(f"LpNormalization: p must be 1 or 2, got {p}")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = x / norm
    # A zero vector normalises to zero rather than NaN.
    return np.where(norm == 0, x.dtype.type(0), out).astype(x.dtype)
