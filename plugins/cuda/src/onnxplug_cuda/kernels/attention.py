"""ONNX ``Attention`` (opsets 23-25): scaled dot-product attention with multi-head, grouped and
multi-query heads, a bool or additive mask, causal masking (bottom-right aligned to the past),
softcap, a past/present key-value cache and the ``qk_matmul_output`` debug output.

Everything is ``matmul`` and element-wise work on the device; the mask bias is built there from
``arange`` comparisons.  Declined at claim time (they run on the CPU provider): the external
cache (``nonpad_kv_seqlen``) and sliding windows (``left_window_size``/``right_window_size``).
A fully masked query row gives zeros, as the standard's errata say.
"""

from __future__ import annotations

import math

from onnxplug.errors import InvalidArgument

from ._common import FLOATS, declines, namespace, onnx_dtype, registry, wide_float


def _heads(xp, x, heads, what):
    """[B, S, heads * size] -> [B, heads, S, size]."""
    if heads is None or heads <= 0 or x.shape[2] % heads:
        raise InvalidArgument(f"Attention: {what} hidden size {x.shape[2]} is not a multiple of {heads} heads")
    batch, length, hidden = x.shape
    return xp.permute_dims(xp.reshape(x, (batch, length, heads, hidden // heads)), (0, 2, 1, 3))


def _padded_mask(xp, mask, total):
    """A mask shorter than the key sequence is padded with "not attended"."""
    missing = total - mask.shape[-1]
    if missing <= 0:
        return mask
    fill = False if mask.dtype == xp.bool else -math.inf
    extra = xp.full((*mask.shape[:-1], missing), fill, dtype=mask.dtype)
    return xp.concat([mask, extra], axis=-1)


def _bias(xp, q_len, kv_len, mask, is_causal, past, dtype):
    bias = xp.zeros((q_len, kv_len), dtype=dtype)
    if mask is not None:
        mask = _padded_mask(xp, mask, kv_len)
        if mask.dtype == xp.bool:
            mask = xp.where(mask, xp.zeros((), dtype=dtype), xp.full((), -math.inf, dtype=dtype))
        bias = bias + xp.astype(mask, dtype)
    if is_causal:
        rows = xp.reshape(xp.arange(q_len), (q_len, 1))
        columns = xp.reshape(xp.arange(kv_len), (1, kv_len))
        allowed = columns <= rows + past
        bias = bias + xp.where(allowed, xp.zeros((), dtype=dtype), xp.full((), -math.inf, dtype=dtype))
    return bias


@registry.kernel("Attention", since=(23, 24, 25), types={"T1": FLOATS, "T2": FLOATS})
def attention(
    q,
    k,
    v,
    attn_mask=None,
    past_key=None,
    past_value=None,
    nonpad_kv_seqlen=None,
    *,
    is_causal,
    kv_num_heads=None,
    q_num_heads=None,
    qk_matmul_output_mode,
    scale=None,
    softcap,
    softmax_precision=None,
    **_sliding_window,
):
    """``_sliding_window`` (opset 25's window sizes) is declined at claim time unless unset."""
    xp = namespace(q, k, v)
    dtype = q.dtype  # float16 computes in float32 throughout, cast back at the end
    q, k, v = wide_float(xp, q), wide_float(xp, k), wide_float(xp, v)
    if past_key is not None and past_value is not None:
        past_key, past_value = wide_float(xp, past_key), wide_float(xp, past_value)
    if attn_mask is not None and attn_mask.dtype != xp.bool:
        attn_mask = wide_float(xp, attn_mask)
    if not q.ndim == k.ndim == v.ndim and q.ndim in (3, 4):
        raise InvalidArgument(f"Attention: Q, K and V must all be 3-D or 4-D, got {q.shape}, {k.shape}, {v.shape}")
    three_d = q.ndim == 3
    if three_d:
        q = _heads(xp, q, q_num_heads, "Q")
        k = _heads(xp, k, kv_num_heads, "K")
        v = _heads(xp, v, kv_num_heads, "V")
    if (past_key is None) != (past_value is None):
        raise InvalidArgument("Attention: past_key and past_value must be given together")
    past = 0
    if past_key is not None:
        past = past_key.shape[2]
        k = xp.concat([past_key, k], axis=2)
        v = xp.concat([past_value, v], axis=2)
    present_key, present_value = xp.astype(k, dtype), xp.astype(v, dtype)
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads != kv_heads:
        if heads % kv_heads:
            raise InvalidArgument(f"Attention: {heads} query heads are not a multiple of {kv_heads} key/value heads")
        k = xp.repeat(k, heads // kv_heads, axis=1)
        v = xp.repeat(v, heads // kv_heads, axis=1)
    root = math.sqrt(1 / math.sqrt(q.shape[3]) if scale is None else scale)
    scores = xp.matmul(q * root, xp.permute_dims(k * root, (0, 1, 3, 2)))
    if softcap > 0:
        scores = softcap * xp.tanh(scores / softcap)
    debug = scores
    bias = _bias(xp, q.shape[2], k.shape[2], attn_mask, is_causal, past, q.dtype)
    scores = scores + bias
    if qk_matmul_output_mode == 2:
        debug = scores
    precision = onnx_dtype(xp, softmax_precision) if softmax_precision else None
    wide = xp.astype(scores, precision) if precision is not None else wide_float(xp, scores)
    top = xp.max(wide, axis=-1, keepdims=True)
    top = xp.where(xp.isfinite(top), top, xp.zeros_like(top))
    e = xp.exp(wide - top)
    total = xp.sum(e, axis=-1, keepdims=True)
    probabilities = e / xp.where(total == 0, xp.ones_like(total), total)
    blocked = xp.max(bias, axis=-1, keepdims=True) == -math.inf
    probabilities = xp.astype(xp.where(blocked, xp.zeros_like(probabilities), probabilities), q.dtype)
    if qk_matmul_output_mode == 3:
        debug = probabilities
    y = xp.matmul(probabilities, v)
    if three_d:
        y = xp.permute_dims(y, (0, 2, 1, 3))
        y = xp.reshape(y, (y.shape[0], y.shape[1], y.shape[2] * y.shape[3]))
    return xp.astype(y, dtype), present_key, present_value, xp.astype(debug, dtype)


@declines("Attention")
def _attention_cases(node):
    if len(node.inputs) > 6 and node.inputs[6]:
        return "nonpad_kv_seqlen (the external KV cache) is left to the CPU provider"
    attributes = node.attributes
    if attributes.get("left_window_size", -1) >= 0 or attributes.get("right_window_size", -1) >= 0:
        return "sliding-window attention is left to the CPU provider"
    if node.input_types[0] != node.input_types[1]:
        return "Q and K/V of different types are left to the CPU provider"
    return None
