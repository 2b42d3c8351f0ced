"""Layer normalizations: skip (residual) fusions, RMS ("simplified") norms, embedding + norm.

Statistics are computed in float32 (float64 for double inputs) and the result cast back, as
onnxruntime's CPU kernels do for float16/bfloat16.  ``SimplifiedLayerNormalization`` and the
opset-1 ``LayerNormalization`` are registered in the default domain, where onnxruntime puts them.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug_cpu.numerics import layer_norm_last_axis, skip_layer_norm_last_axis

from ._common import compute_dtype
from ._registry import kernel


def _normalize(x: np.ndarray, axis: int, epsilon: float, *, center: bool, dtype: np.dtype):
    """``(normalized, mean, inv_std)`` over the axes from ``axis`` on; mean is 0 when not centering."""
    axes = tuple(range(axis, x.ndim))
    w = x.astype(dtype, copy=False)
    if center:
        mean = w.mean(axis=axes, keepdims=True)
        centred = w - mean
    else:
        mean = np.zeros((), dtype=dtype)
        centred = w
    inv_std = 1.0 / np.sqrt((centred * centred).mean(axis=axes, keepdims=True) + dtype.type(epsilon))
    return centred * inv_std, mean, inv_std


def _check_skip(x, skip, op):
    if x.ndim not in (2, 3):
        raise Fail(f"{op}: input must be 2-D or 3-D, got shape {x.shape}")
    if skip.shape != x.shape and skip.shape not in (x.shape[-2:], (1,) + x.shape[-2:]):
        raise Fail(f"{op}: skip of shape {skip.shape} does not fit input of shape {x.shape}")


def _skip_sum(x, skip, bias, op):
    _check_skip(x, skip, op)
    total = x + skip
    if bias is not None:
        total = total + bias
    return total


def _check_vector(value, name, size, op):
    if value is not None and value.shape != (size,):
        raise Fail(f"{op}: {name} must have shape ({size},), got {value.shape}")


@kernel("SkipLayerNormalization", since=(1,))
def skip_layer_norm(x, skip, gamma, beta=None, bias=None, *, epsilon):
    hidden = x.shape[-1]
    for name, value in (("gamma", gamma), ("beta", beta), ("bias", bias)):
        _check_vector(value, name, hidden, "SkipLayerNormalization")
    _check_skip(x, skip, "SkipLayerNormalization")
    fast = skip_layer_norm_last_axis(x, skip, bias, gamma, beta, epsilon)  # float32: one compiled pass
    if fast is not None:
        return fast
    total = _skip_sum(x, skip, bias, "SkipLayerNormalization")
    fast = layer_norm_last_axis(total, gamma, beta, epsilon)
    if fast is not None:
        return (*fast, total)
    dtype = compute_dtype(x.dtype)
    normal, mean, inv_std = _normalize(total, x.ndim - 1, epsilon, center=True, dtype=dtype)
    y = normal * gamma.astype(dtype)
    if beta is not None:
        y = y + beta.astype(dtype)
    stats_shape = x.shape[:-1] + (1,)
    return (
        y.astype(x.dtype, copy=False),
        np.broadcast_to(mean, stats_shape).astype(np.float32),
        inv_std.astype(np.float32),
        total,
    )


@kernel("SkipSimplifiedLayerNormalization", since=(1,))
def skip_simplified_layer_norm(x, skip, gamma, bias=None, *, epsilon):
    hidden = x.shape[-1]
    for name, value in (("gamma", gamma), ("bias", bias)):
        _check_vector(value, name, hidden, "SkipSimplifiedLayerNormalization")
    total = _skip_sum(x, skip, bias, "SkipSimplifiedLayerNormalization")
    dtype = compute_dtype(x.dtype)
    normal, _, inv_std = _normalize(total, x.ndim - 1, epsilon, center=False, dtype=dtype)
    y = normal * gamma.astype(dtype)
    stats_shape = x.shape[:-1] + (1,)
    return (
        y.astype(x.dtype, copy=False),
        np.zeros(stats_shape, dtype=np.float32),
        inv_std.astype(np.float32),
        total,
    )


def _axis(axis: int, rank: int, op: str) -> int:
    if not -rank <= axis < rank:
        raise InvalidArgument(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def _stash(stash_type: int, x: np.ndarray) -> np.dtype:
    # stash_type 1 = float; double inputs keep double precision either way.
    return np.dtype(np.float64) if stash_type == 11 or x.dtype == np.float64 else np.dtype(np.float32)


@kernel("LayerNormalization", since=(1,), domain="")
def layer_norm_v1(x, scale, b=None, *, axis, epsilon, stash_type):
    axis = _axis(axis, x.ndim, "LayerNormalization")
    dtype = _stash(stash_type, x)
    normal, mean, inv_std = _normalize(x, axis, epsilon, center=True, dtype=dtype)
    y = normal * scale.astype(dtype)
    if b is not None:
        y = y + b.astype(dtype)
    stat_type = np.float64 if stash_type == 11 else np.float32
    return y.astype(scale.dtype, copy=False), mean.astype(stat_type), inv_std.astype(stat_type)


@kernel("SimplifiedLayerNormalization", since=(1,), domain="")
def simplified_layer_norm(x, scale, *, axis, epsilon, stash_type):
    axis = _axis(axis, x.ndim, "SimplifiedLayerNormalization")
    dtype = _stash(stash_type, x)
    normal, _, inv_std = _normalize(x, axis, epsilon, center=False, dtype=dtype)
    y = normal * scale.astype(dtype)
    stat_type = np.float64 if stash_type == 11 else np.float32
    return y.astype(scale.dtype, copy=False), inv_std.astype(stat_type)


def _lookup(table: np.ndarray, ids: np.ndarray, name: str) -> np.ndarray:
    bad = (ids < 0) | (ids >= table.shape[0])
    if bad.any():
        raise InvalidArgument(
            f"EmbedLayerNormalization: {name} value {int(ids[bad][0])} is out of range [0, {table.shape[0]})"
        )
    return table[ids]


@kernel("EmbedLayerNormalization", since=(1,))
def embed_layer_norm(
    input_ids,
    segment_ids,
    word_embedding,
    position_embedding,
    segment_embedding=None,
    gamma=None,
    beta=None,
    mask=None,
    position_ids=None,
    *,
    epsilon,
    mask_index_type=None,
):
    if input_ids.ndim != 2:
        raise Fail(f"EmbedLayerNormalization: input_ids must be 2-D (batch, sequence), got {input_ids.shape}")
    batch, seq = input_ids.shape
    hidden = word_embedding.shape[-1]
    if position_ids is None:
        position_ids = np.broadcast_to(np.arange(seq, dtype=np.int64), (batch, seq))
    elif position_ids.shape not in ((batch, seq), (1, seq)):
        raise Fail(f"EmbedLayerNormalization: position_ids shape {position_ids.shape} does not fit ({batch}, {seq})")
    total = _lookup(word_embedding, input_ids, "input_ids") + _lookup(position_embedding, position_ids, "position_ids")
    if segment_ids is not None and segment_embedding is not None:
        total = total + _lookup(segment_embedding, segment_ids, "segment_ids")
    _check_vector(gamma, "gamma", hidden, "EmbedLayerNormalization")
    _check_vector(beta, "beta", hidden, "EmbedLayerNormalization")
    dtype = compute_dtype(word_embedding.dtype)
    normal, _, _ = _normalize(total, 2, epsilon, center=True, dtype=dtype)
    y = (normal * gamma.astype(dtype) + beta.astype(dtype)).astype(word_embedding.dtype, copy=False)
    if mask is None:
        mask_index = np.zeros(batch, dtype=np.int32)
    else:
        mask_index = np.count_nonzero(mask, axis=-1).astype(np.int32)
    return y, mask_index, total.astype(word_embedding.dtype, copy=False)
