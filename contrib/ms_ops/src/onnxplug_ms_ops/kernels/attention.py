"""Attention and MultiHeadAttention (onnxruntime's contrib versions).

Both reduce to :func:`attend` on (batch, heads, sequence, head_size) arrays.  Masks follow
onnxruntime's CPU kernels: a masked-out key gets ``mask_filter_value`` (default -10000, not
-inf, so a fully padded row still has a defined softmax), and a key after the query position
under ``unidirectional`` gets the lowest float, overriding the padding value.
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.errors import NotImplemented as NotImplementedError_
from onnxplug_cpu.numerics import attention_heads, batched_matmul

from ._common import compute_dtype, softmax
from ._registry import kernel

_LOWEST = np.finfo(np.float32).min


def key_mask(mask_index, batch, seq, past, total, filter_value, causal, op):
    """The additive (batch, 1, seq, total) mask, or ``None`` when nothing is masked."""
    if mask_index is None and not causal:
        return None
    if not causal and mask_index.ndim in (2, 3) and mask_index.shape[0] == batch and bool((mask_index > 0).all()):
        # (batch, total) or (batch, seq, total) that keeps every key (a batch of one unpadded
        # sequence, BERT's usual feed): adding a mask of zeros would change nothing.  Its shape
        # is checked below only where something is masked; here it must still fit.
        if mask_index.shape in ((batch, total), (batch, seq, total)):
            return None
    mask = np.zeros((batch, seq, total), dtype=np.float32)
    if mask_index is not None:
        dims = mask_index.shape
        if mask_index.ndim == 1 and dims[0] in (batch, 2 * batch):
            keys = np.arange(total)[None, :]
            masked = keys >= mask_index[:batch, None]
            if dims[0] == 2 * batch:
                masked |= keys < np.minimum(mask_index[batch:, None], total)
            mask[np.broadcast_to(masked[:, None, :], mask.shape)] = filter_value
        elif mask_index.ndim == 1 and dims[0] == 3 * batch + 2:
            raise NotImplementedError_(f"{op}: mask_index of shape (3 * batch_size + 2) is only supported on CUDA")
        elif mask_index.ndim == 2 and dims == (batch, total):
            mask[np.broadcast_to((mask_index <= 0)[:, None, :], mask.shape)] = filter_value
        elif mask_index.ndim == 3 and dims == (batch, seq, total):
            mask[mask_index <= 0] = filter_value
        elif mask_index.ndim == 4 and dims[0] == batch and dims[1] == 1 and dims[2] >= total and dims[3] >= total:
            # Megatron GPT-2: (batch, 1, max_sequence_length, max_sequence_length), rows at the
            # query positions.
            window = mask_index[:, 0, past : past + seq, :total]
            mask[window <= 0] = filter_value
        else:
            raise Fail(
                f"{op}: mask_index of shape {dims} fits none of (batch)={batch}, (2*batch), "
                f"(batch, total)=({batch}, {total}), (batch, seq, total)=({batch}, {seq}, {total})"
            )
    if causal:
        future = np.arange(total)[None, :] > past + np.arange(seq)[:, None]
        mask[:, future] = _LOWEST
    return mask[:, None]


def attend(q, k, v, *, scale, mask=None, bias=None, keep_scores=True, shifts=None):
    """softmax(scale * q k^T + mask + bias) v on (B, N, S, H) float arrays; returns (out, scores,
    probs), scores ``None`` unless ``keep_scores`` (without them the softmax works in place on
    the product, and the scale and the additions are in place too: no (B, N, S, T) temporaries;
    float32 on the CPU provider's tiles computes the heads block by block of queries,
    ``onnxplug_cpu.numerics.attention_heads``, and returns no probs either).
    ``shifts``: Q, K and V biases ``(1, N, 1, H)`` not yet added to ``q``, ``k`` and ``v`` (the
    products add them in the copies they make of their operands)."""
    if not keep_scores:  # float32 on the CPU provider's tiles: one block of queries at a time
        term = mask if bias is None else bias if mask is None else mask + bias
        merged = attention_heads(q, k, v, scale, None if term is None else term.astype(q.dtype, copy=False), shifts)
        if merged is not None:  # (B, S, N·H) seen as (B, N, S, H): merge_heads gives it back uncopied
            batch, heads_count, seq, head_size = q.shape
            return merged.reshape(batch, seq, heads_count, head_size).transpose(0, 2, 1, 3), None, None
    q_shift, k_shift, v_shift = shifts or (None, None, None)
    k_shift = None if k_shift is None else np.swapaxes(k_shift, -1, -2)
    scores = batched_matmul(q, np.swapaxes(k, -1, -2), a_shift=q_shift, b_shift=k_shift)  # fresh, C-contiguous
    scores *= q.dtype.type(scale)
    if mask is not None:
        scores = _add_into(scores, mask)
    if bias is not None:
        scores = _add_into(scores, bias.astype(scores.dtype, copy=False))
    probs = softmax(scores.copy() if keep_scores else scores, in_place=True)
    return batched_matmul(probs, v, b_shift=v_shift), (scores if keep_scores else None), probs


def _add_into(scores, term):
    """``scores + term``, into ``scores`` when ``term`` broadcasts to its shape."""
    if np.broadcast_shapes(scores.shape, term.shape) == scores.shape:
        return np.add(scores, term, out=scores)
    return scores + term


def heads(x, num_heads, op, name):
    """(B, S, N*H) -> (B, N, S, H)."""
    b, s, hidden = x.shape
    if hidden % num_heads:
        raise Fail(f"{op}: {name} hidden size {hidden} is not a multiple of num_heads={num_heads}")
    return x.reshape(b, s, num_heads, hidden // num_heads).transpose(0, 2, 1, 3)


def merge_heads(x):
    """(B, N, S, H) -> (B, S, N*H)."""
    b, n, s, h = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, n * h)


def _check_bias(attention_bias, batch, num_heads, seq, total, op):
    if attention_bias is None:
        return
    dims = attention_bias.shape
    if (
        attention_bias.ndim != 4
        or dims[0] not in (1, batch)
        or dims[1] not in (1, num_heads)
        or dims[2] not in (1, seq)  # 1: broadcast over queries (onnxruntime wants S; a shape-blind fusion may give 1)
        or dims[3] != total
    ):
        raise Fail(f"{op}: attention_bias of shape {dims} does not broadcast to ({batch}, {num_heads}, {seq}, {total})")


def attention_from_qkv(
    qkv,
    out_dtype,
    sizes,
    num_heads,
    *,
    mask_index,
    past,
    attention_bias,
    past_sequence_length,
    unidirectional,
    scale,
    filter_value,
    share_buffer,
    want_present,
    op,
):
    """Attention's heads on its projected (B, S, Q+K+V) ``qkv`` (``sizes`` the three hidden sizes);
    returns (output, present).  Shared by Attention and QAttention (which projects in integers)."""
    batch, seq, _ = qkv.shape
    dtype = qkv.dtype
    q = heads(qkv[..., : sizes[0]], num_heads, op, "Q")
    k = heads(qkv[..., sizes[0] : sizes[0] + sizes[1]], num_heads, op, "K")
    v = heads(qkv[..., sizes[0] + sizes[1] :], num_heads, op, "V")
    past_len = 0
    share = share_buffer and past is not None
    if past is not None:
        expected = (2, batch, num_heads)
        if past.ndim != 5 or past.shape[:3] != expected or past.shape[4] != k.shape[3] or sizes[1] != sizes[2]:
            raise Fail(
                f"{op}: past must be (2, {batch}, {num_heads}, past_len, {k.shape[3]}) with equal K/V "
                f"hidden sizes, got {past.shape}"
            )
        if share:
            if past_sequence_length is None:
                raise Fail(f"{op}: past_present_share_buffer needs the past_sequence_length input")
            past_len = int(past_sequence_length.reshape(-1)[0])
            if not 0 <= past_len <= past.shape[3] - seq:
                raise InvalidArgument(
                    f"{op}: past_sequence_length {past_len} does not leave room for {seq} "
                    f"tokens in a buffer of {past.shape[3]}"
                )
            k = np.concatenate([past[0, :, :, :past_len].astype(dtype), k], axis=2)
            v = np.concatenate([past[1, :, :, :past_len].astype(dtype), v], axis=2)
        else:
            past_len = past.shape[3]
            k = np.concatenate([past[0].astype(dtype), k], axis=2)
            v = np.concatenate([past[1].astype(dtype), v], axis=2)
    total = past_len + seq
    _check_bias(attention_bias, batch, num_heads, seq, total, op)
    mask = key_mask(mask_index, batch, seq, past_len, total, filter_value, unidirectional, op)
    head_scale = scale if scale else 1.0 / math.sqrt(sizes[0] // num_heads)
    out, _, _ = attend(q, k, v, scale=head_scale, mask=mask, bias=attention_bias, keep_scores=False)
    output = merge_heads(out).astype(out_dtype, copy=False)
    if share:
        present = np.array(past, copy=True)
        present[0, :, :, past_len:total] = k[:, :, past_len:]
        present[1, :, :, past_len:total] = v[:, :, past_len:]
    elif k.shape == v.shape:
        present = np.stack([k, v]).astype(out_dtype, copy=False)
    elif want_present:
        raise Fail(f"{op}: present needs equal K and V hidden sizes, got qkv_hidden_sizes {sizes}")
    else:
        present = None
    return output, present


@kernel("Attention", since=(1,), factory=True)
def attention(
    ctx,
    *,
    num_heads,
    qkv_hidden_sizes=None,
    unidirectional,
    scale=None,
    mask_filter_value=None,
    do_rotary=None,
    rotary_embedding_dim=None,
    past_present_share_buffer=None,
):
    op = "Attention"
    if do_rotary:
        raise NotImplementedError_(
            f"{op}: do_rotary=1 is not supported (onnxruntime's CPU kernel has no rotary "
            "either); use RotaryEmbedding + MultiHeadAttention"
        )
    filter_value = -10000.0 if mask_filter_value is None else float(mask_filter_value)
    want_present = ctx.num_outputs > 1 and ctx.outputs_used[1]

    def run(x, weights, bias=None, mask_index=None, past=None, attention_bias=None, past_sequence_length=None):
        if x.ndim != 3 or weights.ndim != 2 or weights.shape[0] != x.shape[2]:
            raise Fail(f"{op}: input {x.shape} and weights {weights.shape} must be (B, S, D) and (D, 3*hidden)")
        sizes = tuple(qkv_hidden_sizes) if qkv_hidden_sizes else (weights.shape[1] // 3,) * 3
        if len(sizes) != 3 or sum(sizes) != weights.shape[1] or any(s % num_heads or s <= 0 for s in sizes):
            raise Fail(
                f"{op}: qkv_hidden_sizes {sizes} must be three positive multiples of num_heads={num_heads} "
                f"summing to the weights' second dimension {weights.shape[1]}"
            )
        if sizes[0] != sizes[1]:
            raise Fail(f"{op}: Q and K hidden sizes differ ({sizes[0]} vs {sizes[1]})")
        dtype = compute_dtype(x.dtype)
        qkv = np.matmul(x.astype(dtype, copy=False), weights.astype(dtype, copy=False))
        if bias is not None:
            if bias.shape != (weights.shape[1],):
                raise Fail(f"{op}: bias must have shape ({weights.shape[1]},), got {bias.shape}")
            qkv = qkv + bias.astype(dtype, copy=False)
        return attention_from_qkv(
            qkv,
            x.dtype,
            sizes,
            num_heads,
            mask_index=mask_index,
            past=past,
            attention_bias=attention_bias,
            past_sequence_length=past_sequence_length,
            unidirectional=unidirectional,
            scale=scale,
            filter_value=filter_value,
            share_buffer=bool(past_present_share_buffer),
            want_present=want_present,
            op=op,
        )

    return run


def _mha_inputs(query, key, value, bias, num_heads, op, defer_bias=False):
    """Q (B,N,S,H), K and V (B,N,L,H), whether K/V came as BNSH (cache, not concatenated), and
    the Q, K and V biases ``(1, N, 1, H)`` left for :func:`attend` to add (``defer_bias``, 3-D
    query, key and value only) or ``None`` (added here, or no bias)."""
    if query.ndim == 5:
        if key is not None or value is not None or query.shape[3] != 3:
            raise Fail(f"{op}: packed QKV query must be (B, S, N, 3, H) with no key or value, got {query.shape}")
        if bias is not None:
            b = bias.reshape(3, num_heads, -1)
            query = query + b.transpose(1, 0, 2)
        q, k, v = (query[:, :, :, i].transpose(0, 2, 1, 3) for i in range(3))
        return q, k, v, False, None
    if query.ndim != 3:
        raise Fail(f"{op}: query must be 3-D or packed 5-D, got shape {query.shape}")
    hidden = query.shape[2]
    q_bias = k_bias = v_bias = None
    if bias is not None:
        q_bias, k_bias, v_bias = bias[:hidden], bias[hidden : 2 * hidden], bias[2 * hidden :]
        if defer_bias and key is not None and value is not None and key.ndim == 3 and value.ndim == 3:
            q, k, v = (heads(x, num_heads, op, name) for x, name in ((query, "query"), (key, "key"), (value, "value")))
            biases = (q_bias, k_bias, v_bias)
            if all(b.size == t.shape[1] * t.shape[3] for b, t in zip(biases, (q, k, v))):
                return q, k, v, False, tuple(b.reshape(1, num_heads, 1, -1) for b in biases)
    # the sums laid out as (B, S, D) runs, the heads views of them: the per-head products lay the
    # views out on the run's threads (numpy's transposing add into the heads' layout took ~100 µs
    # a layer for K at 128 tokens, the plain add and that layout ~45)
    q = heads(query + q_bias if q_bias is not None else query, num_heads, op, "query")
    if key is None:
        raise Fail(f"{op}: key is required unless query is packed QKV")
    if key.ndim == 5:
        if value is not None or key.shape[3] != 2:
            raise Fail(f"{op}: packed KV key must be (B, L, N, 2, H) with no value, got {key.shape}")
        if k_bias is not None:
            key = key + np.stack([k_bias, v_bias]).reshape(2, num_heads, -1).transpose(1, 0, 2)
        return q, key[:, :, :, 0].transpose(0, 2, 1, 3), key[:, :, :, 1].transpose(0, 2, 1, 3), False, None
    if value is None:
        raise Fail(f"{op}: value is required with a 3-D or 4-D key")
    if key.ndim == 4 and value.ndim == 4:
        return q, key, value, True, None
    if key.ndim != 3 or value.ndim != 3:
        raise Fail(f"{op}: key {key.shape} and value {value.shape} must both be 3-D (BSD) or 4-D (BNSH)")
    k = heads(key + k_bias if k_bias is not None else key, num_heads, op, "key")
    v = heads(value + v_bias if v_bias is not None else value, num_heads, op, "value")
    return q, k, v, False, None


@kernel("MultiHeadAttention", since=(1,), factory=True)
def multi_head_attention(ctx, *, num_heads, unidirectional, scale=None, mask_filter_value=None):
    op = "MultiHeadAttention"
    filter_value = -10000.0 if mask_filter_value is None else float(mask_filter_value)
    want_qk = ctx.num_outputs > 3 and ctx.outputs_used[3]
    # K and V with their biases are outputs (present_key, present_value) only where read
    want_kv = any(ctx.outputs_used[1:3])

    def run(
        query,
        key=None,
        value=None,
        bias=None,
        key_padding_mask=None,
        attention_bias=None,
        past_key=None,
        past_value=None,
        past_sequence_length=None,
        cache_indirection=None,
    ):
        if cache_indirection is not None or past_sequence_length is not None:
            raise NotImplementedError_(
                f"{op}: cache_indirection and past_sequence_length (buffer sharing for beam "
                "search) are not supported on CPU"
            )
        dtype = compute_dtype(query.dtype)
        as_float = [None if t is None else t.astype(dtype, copy=False) for t in (query, key, value, bias)]
        defer = not want_kv and past_key is None and past_value is None
        q, k, v, cached, shifts = _mha_inputs(*as_float, num_heads, op, defer_bias=defer)
        batch, _, seq, head_size = q.shape
        if (past_key is None) != (past_value is None):
            raise Fail(f"{op}: past_key and past_value must be given together")
        past_len = 0
        if past_key is not None and not cached:
            if past_key.ndim != 4 or past_key.shape[:2] != (batch, num_heads) or past_key.shape[3] != k.shape[3]:
                raise Fail(
                    f"{op}: past_key must be ({batch}, {num_heads}, past_len, {k.shape[3]}), got {past_key.shape}"
                )
            past_len = past_key.shape[2]
            k = np.concatenate([past_key.astype(dtype), k], axis=2)
            v = np.concatenate([past_value.astype(dtype), v], axis=2)
        total = k.shape[2]
        if k.shape[:2] != (batch, num_heads) or k.shape[3] != head_size or v.shape[2] != total:
            raise Fail(f"{op}: key {k.shape} / value {v.shape} do not fit query heads {q.shape}")
        _check_bias(attention_bias, batch, num_heads, seq, total, op)
        mask = key_mask(key_padding_mask, batch, seq, past_len, total, filter_value, unidirectional, op)
        head_scale = scale if scale else 1.0 / math.sqrt(head_size)
        out, scores, _ = attend(
            q, k, v, scale=head_scale, mask=mask, bias=attention_bias, keep_scores=want_qk, shifts=shifts
        )
        dt = query.dtype
        qk = None
        if want_qk:
            with np.errstate(over="ignore"):  # causally masked scores are the lowest float32
                qk = scores.astype(dt, copy=False)
        return merge_heads(out).astype(dt, copy=False), k.astype(dt, copy=False), v.astype(dt, copy=False), qk

    return run
