"""GroupQueryAttention and RotaryEmbedding: the decoder-side attention of LLM exports.

GroupQueryAttention keeps its KV cache in BNSH buffers and learns each batch entry's length
from ``seqlens_k`` (total length - 1).  A "first prompt" (``sequence_length > 1`` and equal to
``total_sequence_length``) starts from an empty cache, so right-padded prompts of different
lengths share one call; otherwise the new tokens follow ``seqlens_k[b] + 1 - sequence_length``
cached ones.  Rows of the present cache past an entry's length are unspecified (zeros here).
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.errors import NotImplemented as NotImplementedError_

from ._common import compute_dtype
from ._registry import kernel


def rotate(x, cos, sin, interleaved):
    """Rotary embedding of the first ``2 * cos.shape[-1]`` features of x (..., S, H);
    ``cos``/``sin`` broadcast against x's leading axes with shape (..., S, rot/2)."""
    half = cos.shape[-1]
    rot = 2 * half
    if rot > x.shape[-1]:
        raise Fail(f"rotary dimension {rot} exceeds head size {x.shape[-1]}")
    part = x[..., :rot]
    if interleaved:
        first, second = part[..., 0::2], part[..., 1::2]
    else:
        first, second = part[..., :half], part[..., half:]
    out_first = first * cos - second * sin
    out_second = second * cos + first * sin
    if interleaved:
        rotated = np.stack([out_first, out_second], axis=-1).reshape(part.shape)
    else:
        rotated = np.concatenate([out_first, out_second], axis=-1)
    return np.concatenate([rotated, x[..., rot:]], axis=-1) if rot < x.shape[-1] else rotated


def _cache_rows(cache, positions, op):
    if positions.size and (positions.min() < 0 or positions.max() >= cache.shape[0]):
        bad = positions[(positions < 0) | (positions >= cache.shape[0])][0]
        raise InvalidArgument(f"{op}: position {int(bad)} is outside the cos/sin cache of {cache.shape[0]} rows")
    return cache[positions]


@kernel("RotaryEmbedding", since=(1,))
def rotary_embedding(
    x,
    position_ids,
    cos_cache,
    sin_cache,
    *,
    num_heads=None,
    rotary_embedding_dim=None,
    interleaved=None,
    is_packed_batching=None,
    scale=None,
):
    op = "RotaryEmbedding"
    if is_packed_batching:
        raise NotImplementedError_(f"{op}: is_packed_batching=1 is not supported")
    if cos_cache.ndim != 2 or cos_cache.shape != sin_cache.shape:
        raise Fail(f"{op}: cos_cache {cos_cache.shape} and sin_cache {sin_cache.shape} must be equal 2-D shapes")
    if x.ndim == 4:
        batch, _, seq, head_size = x.shape
        bnsh = x
    elif x.ndim == 3:
        batch, seq, hidden = x.shape
        if num_heads:
            head_size = hidden // num_heads
        else:
            head_size = rotary_embedding_dim or 2 * cos_cache.shape[1]
        if not head_size or hidden % head_size:
            raise Fail(f"{op}: hidden size {hidden} is not a multiple of the head size {head_size}")
        bnsh = x.reshape(batch, seq, hidden // head_size, head_size).transpose(0, 2, 1, 3)
    else:
        raise Fail(f"{op}: input must be 3-D (B, S, hidden) or 4-D (B, N, S, H), got {x.shape}")
    rot = rotary_embedding_dim or head_size
    if rot > head_size or rot != 2 * cos_cache.shape[1]:
        raise Fail(
            f"{op}: rotary dimension {rot} needs cos/sin caches with {rot // 2} columns and at most "
            f"head size {head_size}; got caches {cos_cache.shape}"
        )
    if position_ids.size == 1:
        positions = np.broadcast_to(position_ids.reshape(-1)[0] + np.arange(seq), (batch, seq))
    elif position_ids.shape == (batch, seq):
        positions = position_ids
    else:
        raise Fail(f"{op}: position_ids must be (1,) or ({batch}, {seq}), got {position_ids.shape}")
    dtype = compute_dtype(x.dtype)
    cos = _cache_rows(cos_cache, positions, op).astype(dtype)[:, None]
    sin = _cache_rows(sin_cache, positions, op).astype(dtype)[:, None]
    out = rotate(bnsh.astype(dtype, copy=False), cos, sin, bool(interleaved)).astype(x.dtype, copy=False)
    if x.ndim == 3:
        out = out.transpose(0, 2, 1, 3).reshape(x.shape)
    return out


def _sink_softmax(scores, valid, sink):
    """Softmax over the valid keys; ``sink`` (per head, or None) adds exp(sink) to the denominator."""
    masked = np.where(valid, scores, -np.inf)
    top = masked.max(axis=-1, keepdims=True)
    if sink is not None:
        top = np.maximum(top, sink)
    top = np.where(np.isfinite(top), top, 0)
    weights = np.where(valid, np.exp(masked - top), 0)
    total = weights.sum(axis=-1, keepdims=True)
    if sink is not None:
        total = total + np.exp(sink - top)
    return weights / np.where(total > 0, total, 1)


@kernel("GroupQueryAttention", since=(1,), factory=True)
def group_query_attention(
    ctx,
    *,
    num_heads,
    kv_num_heads,
    scale=None,
    softcap=None,
    local_window_size,
    do_rotary=None,
    rotary_interleaved=None,
    causal,
    smooth_softmax,
    qk_output,
    sliding_window_cache,
    k_quant_type,
    v_quant_type,
    kv_cache_bit_width=None,
    qk_norm_epsilon,
    q_norm_epsilon=None,
    k_norm_epsilon=None,
):
    op = "GroupQueryAttention"
    if k_quant_type != "NONE" or v_quant_type != "NONE":
        raise NotImplementedError_(f"{op}: quantized KV caches (k_quant_type={k_quant_type!r}) are not supported")
    if sliding_window_cache:
        raise NotImplementedError_(f"{op}: sliding_window_cache=1 is not supported")
    if num_heads <= 0 or kv_num_heads <= 0 or num_heads % kv_num_heads:
        raise Fail(f"{op}: num_heads={num_heads} must be a positive multiple of kv_num_heads={kv_num_heads}")
    if not causal and local_window_size != -1:
        raise Fail(f"{op}: local_window_size must be -1 when causal is 0")
    group = num_heads // kv_num_heads

    def run(
        query,
        key=None,
        value=None,
        past_key=None,
        past_value=None,
        seqlens_k=None,
        total_sequence_length=None,
        cos_cache=None,
        sin_cache=None,
        position_ids=None,
        attention_bias=None,
        head_sink=None,
        k_scale=None,
        v_scale=None,
        q_norm_weight=None,
        k_norm_weight=None,
        query_seqlens=None,
    ):
        if q_norm_weight is not None or k_norm_weight is not None or query_seqlens is not None:
            raise NotImplementedError_(f"{op}: q_norm_weight, k_norm_weight and query_seqlens are not supported")
        if query.ndim != 3:
            raise Fail(f"{op}: query must be 3-D (B, S, D), got {query.shape}")
        batch, seq, width = query.shape
        dtype = compute_dtype(query.dtype)
        wide = query.astype(dtype, copy=False)
        if key is None:
            if value is not None or width % (num_heads + 2 * kv_num_heads):
                raise Fail(f"{op}: packed QKV width {width} is not (num_heads + 2 * kv_num_heads) * head_size")
            head = width // (num_heads + 2 * kv_num_heads)
            q_part = wide[..., : num_heads * head]
            k_part = wide[..., num_heads * head : (num_heads + kv_num_heads) * head]
            v_part = wide[..., (num_heads + kv_num_heads) * head :]
        else:
            if value is None or width % num_heads:
                raise Fail(f"{op}: query width {width} is not a multiple of num_heads, or value is missing")
            head = width // num_heads
            q_part, k_part, v_part = wide, key.astype(dtype, copy=False), value.astype(dtype, copy=False)
            if k_part.shape != (batch, seq, kv_num_heads * head) or v_part.shape != k_part.shape:
                raise Fail(
                    f"{op}: key {key.shape} and value {value.shape} must be ({batch}, {seq}, {kv_num_heads * head})"
                )
        q = q_part.reshape(batch, seq, num_heads, head).transpose(0, 2, 1, 3)
        k_new = k_part.reshape(batch, seq, kv_num_heads, head).transpose(0, 2, 1, 3)
        v_new = v_part.reshape(batch, seq, kv_num_heads, head).transpose(0, 2, 1, 3)

        if seqlens_k is None or seqlens_k.shape != (batch,):
            got = None if seqlens_k is None else seqlens_k.shape
            raise Fail(f"{op}: seqlens_k must have shape ({batch},), got {got}")
        total_max = int(total_sequence_length.reshape(-1)[0])
        lengths = seqlens_k.astype(np.int64) + 1
        first_prompt = seq > 1 and seq == total_max
        past_lens = np.zeros(batch, dtype=np.int64) if first_prompt else lengths - seq
        if (past_lens < 0).any() or (lengths > total_max).any():
            raise InvalidArgument(
                f"{op}: seqlens_k {seqlens_k.tolist()} do not fit sequence_length {seq} "
                f"and total_sequence_length {total_max}"
            )
        buffer = 0 if past_key is None else past_key.shape[2]
        if (past_key is None) != (past_value is None) or (
            past_key is not None
            and (past_key.shape != (batch, kv_num_heads, buffer, head) or past_value.shape != past_key.shape)
        ):
            raise Fail(f"{op}: past_key/past_value must both be ({batch}, {kv_num_heads}, past, {head})")
        if (past_lens > buffer).any():
            raise InvalidArgument(
                f"{op}: seqlens_k {seqlens_k.tolist()} needs more cached tokens than past_key holds ({buffer})"
            )
        present_len = max(buffer, total_max)
        if (past_lens + seq > present_len).any():
            raise InvalidArgument(
                f"{op}: {seq} new tokens after {past_lens.tolist()} cached ones exceed the "
                f"present cache length {present_len}"
            )

        if do_rotary:
            if cos_cache is None or sin_cache is None:
                raise Fail(f"{op}: do_rotary=1 needs cos_cache and sin_cache")
            if position_ids is not None:
                positions = np.broadcast_to(position_ids, (batch, seq))
            else:
                positions = past_lens[:, None] + np.arange(seq)[None, :]
            cos = _cache_rows(cos_cache, positions, op).astype(dtype)[:, None]
            sin = _cache_rows(sin_cache, positions, op).astype(dtype)[:, None]
            q = rotate(q, cos, sin, bool(rotary_interleaved))
            k_new = rotate(k_new, cos, sin, bool(rotary_interleaved))

        rows = np.arange(present_len)
        keep_past = (rows[None, :buffer] < past_lens[:, None])[:, None, :, None]
        present = []
        for past, new in ((past_key, k_new), (past_value, v_new)):
            cache = np.zeros((batch, kv_num_heads, present_len, head), dtype=dtype)
            if past is not None:
                cache[:, :, :buffer] = np.where(keep_past, past.astype(dtype), 0)
            rows_new = past_lens[:, None] + np.arange(seq)[None, :]
            cache[np.arange(batch)[:, None], :, rows_new] = new.transpose(0, 2, 1, 3)
            present.append(cache)

        head_scale = scale if scale else 1.0 / math.sqrt(head)
        # Query heads n = g * group + j share KV head g: fold each group's heads into the rows of
        # one matmul per KV head instead of repeating the cache.
        grouped = q.reshape(batch, kv_num_heads, group * seq, head)
        scores = np.matmul(grouped, np.swapaxes(present[0], -1, -2)).reshape(batch, num_heads, seq, present_len)
        scores *= dtype.type(head_scale)
        if softcap:
            scores = softcap * np.tanh(scores / softcap)
        if attention_bias is not None:
            width_bias = min(attention_bias.shape[-1], present_len)
            scores[..., :width_bias] += attention_bias[..., :width_bias].astype(dtype)
        query_pos = past_lens[:, None] + np.arange(seq)[None, :]  # (B, S)
        key_pos = rows[None, None, :]
        valid = key_pos < lengths[:, None, None]
        if causal:
            valid = valid & (key_pos <= query_pos[:, :, None])
            if local_window_size >= 0:
                # the window holds local_window_size keys, the query's own position included
                valid = valid & (key_pos > query_pos[:, :, None] - local_window_size)
        valid = valid[:, None]  # (B, 1, S, L)
        sink = None
        if head_sink is not None:
            sink = head_sink.astype(dtype).reshape(1, num_heads, 1, 1)
        elif smooth_softmax == 1:
            sink = np.zeros((1, 1, 1, 1), dtype=dtype)
        probs = _sink_softmax(scores, valid, sink)
        out = np.matmul(probs.reshape(batch, kv_num_heads, group * seq, present_len), present[1])
        out = out.reshape(batch, num_heads, seq, head).transpose(0, 2, 1, 3).reshape(batch, seq, num_heads * head)
        # onnxruntime reports masked-out scores as 0 (not -inf) before the softmax
        qk = probs if qk_output == 2 else np.where(valid, scores, 0)
        return (
            out.astype(query.dtype, copy=False),
            present[0].astype(query.dtype, copy=False),
            present[1].astype(query.dtype, copy=False),
            qk[..., :total_max].astype(query.dtype, copy=False),
        )

    return run
