"""Recurrent attention building blocks: LinearAttention and CausalConvWithState (opset 27).

Both carry a state across calls (a ``(B, H_kv, d_k, d_v)`` memory matrix, or the last ``k - 1``
input columns of a causal convolution) so that a prefill and a series of decode steps give the
same result as one long call.  They compute in float32 (float64 for double inputs) and cast
back.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail

from ._registry import kernel
from .attention import compute_dtype

_RULES = ("linear", "gated", "delta", "gated_delta")


def _heads(x, heads, name, dtype):
    """``(B, T, H*D) -> (B, H, T, D)`` in ``dtype``."""
    if x.ndim != 3 or x.shape[2] % heads:
        raise Fail(f"{name} must be (B, T, H*D) with H={heads} dividing the last dimension, got shape {x.shape}")
    b, t, hidden = x.shape
    return x.reshape(b, t, heads, hidden // heads).transpose(0, 2, 1, 3).astype(dtype)


def _per_head(x, name, batch, steps, widths, dtype):
    """Decay/beta ``(B, T, W)`` -> ``(B, W', T, rest)`` for W = W' * rest, one of ``widths``."""
    if x.ndim != 3 or x.shape[:2] != (batch, steps) or x.shape[2] not in widths:
        raise Fail(f"{name} must have shape ({batch}, {steps}, one of {sorted(set(widths))}), got {x.shape}")
    heads = widths[x.shape[2]]
    return x.reshape(batch, steps, heads, -1).transpose(0, 2, 1, 3).astype(dtype)


@kernel("LinearAttention", since=(27,))
def linear_attention(
    query,
    key,
    value,
    past_state=None,
    decay=None,
    beta=None,
    *,
    chunk_size,
    kv_num_heads,
    q_num_heads,
    scale,
    update_rule,
):
    """Run the recurrence token by token (``chunk_size`` is only a tiling hint)."""
    if update_rule not in _RULES:
        raise Fail(f"update_rule must be one of {_RULES}, got '{update_rule}'")
    if q_num_heads <= 0 or kv_num_heads <= 0 or q_num_heads % kv_num_heads:
        raise Fail(f"q_num_heads {q_num_heads} must be a positive multiple of kv_num_heads {kv_num_heads}")
    gated = update_rule in ("gated", "gated_delta")
    delta = update_rule in ("delta", "gated_delta")
    if gated != (decay is not None):
        raise Fail(f"update_rule '{update_rule}' {'needs' if gated else 'takes no'} decay input")
    if delta != (beta is not None):
        raise Fail(f"update_rule '{update_rule}' {'needs' if delta else 'takes no'} beta input")
    dtype = compute_dtype(query, key, value)
    q = _heads(query, q_num_heads, "query", dtype)
    k = _heads(key, kv_num_heads, "key", dtype)
    v = _heads(value, kv_num_heads, "value", dtype)
    batch, _, steps, d_k = q.shape
    d_v = v.shape[3]
    if k.shape[:3] != (batch, kv_num_heads, steps) or k.shape[3] != d_k or v.shape[2] != steps:
        raise Fail(f"query {query.shape}, key {key.shape} and value {value.shape} do not agree")
    group = q_num_heads // kv_num_heads
    q = q.reshape(batch, kv_num_heads, group, steps, d_k)
    if gated:  # per head (B, H, T, 1) or per key feature (B, H, T, d_k)
        decay = np.exp(
            _per_head(
                decay, "decay", batch, steps, {kv_num_heads: kv_num_heads, kv_num_heads * d_k: kv_num_heads}, dtype
            )
        )
    if delta:  # per head (B, H, T, 1) or shared (B, 1, T, 1)
        beta = _per_head(beta, "beta", batch, steps, {kv_num_heads: kv_num_heads, 1: 1}, dtype)
    shape = (batch, kv_num_heads, d_k, d_v)
    if past_state is None:
        state = np.zeros(shape, dtype)
    elif past_state.shape != shape:
        raise Fail(f"past_state shape {past_state.shape} should be {shape}")
    else:
        state = past_state.astype(dtype)
    factor = dtype.type(1 / np.sqrt(d_k) if not scale else scale)

    out = np.empty((batch, kv_num_heads, group, steps, d_v), dtype)
    for t in range(steps):
        k_t, v_t = k[:, :, t], v[:, :, t]
        if gated:
            state = state * decay[:, :, t, :, None]
        if delta:  # write only the part of v_t the (decayed) memory does not already recall
            recalled = np.einsum("bhdm,bhd->bhm", state, k_t)
            v_t = beta[:, :, t] * (v_t - recalled)
        state = state + k_t[..., :, None] * v_t[..., None, :]
        out[:, :, :, t] = np.einsum("bhgd,bhdm->bhgm", q[:, :, :, t], state)
    out = (out * factor).reshape(batch, q_num_heads, steps, d_v).transpose(0, 2, 1, 3)
    state_dtype = query.dtype if past_state is None else past_state.dtype
    return (out.reshape(batch, steps, q_num_heads * d_v).astype(query.dtype), state.astype(state_dtype))


@kernel("CausalConvWithState", since=(27,))
def causal_conv_with_state(x, weight, bias=None, past_state=None, *, activation):
    """Depthwise causal 1-D convolution, left-padded with the carried state (or zeros)."""
    if activation not in ("none", "silu", "swish"):
        raise Fail(f"activation must be 'none', 'silu' or 'swish', got '{activation}'")
    if x.ndim != 3:
        raise Fail(f"input must be (batch, channels, length), got shape {x.shape}")
    batch, channels, length = x.shape
    if weight.ndim != 3 or weight.shape[:2] != (channels, 1) or weight.shape[2] < 1:
        raise Fail(f"weight must be ({channels}, 1, k), got shape {weight.shape}")
    width = weight.shape[2]
    if bias is not None and bias.shape != (channels,):
        raise Fail(f"bias must be ({channels},), got shape {bias.shape}")
    carry = (batch, channels, width - 1)
    if past_state is None:
        past_state = np.zeros(carry, x.dtype)
    elif past_state.shape != carry:
        raise Fail(f"past_state shape {past_state.shape} should be {carry}")
    padded = np.concatenate((past_state, x), axis=2)
    dtype = compute_dtype(x, weight)
    wide = padded.astype(dtype)
    taps = weight[:, 0].astype(dtype)
    out = np.zeros((batch, channels, length), dtype)
    for j in range(width):  # one pass per kernel tap
        out += taps[:, j, None] * wide[:, :, j : j + length]
    if bias is not None:
        out += bias.astype(dtype)[:, None]
    if activation != "none":
        # The function body applies SiLU to the convolution's T-typed result.
        out = out.astype(x.dtype).astype(dtype)
        with np.errstate(over="ignore"):
            out = out / (1 + np.exp(-out))
    return out.astype(x.dtype), padded[:, :, padded.shape[2] - (width - 1) :]
