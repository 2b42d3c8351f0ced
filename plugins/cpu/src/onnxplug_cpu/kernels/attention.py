"""Scaled dot-product attention (Attention-23/24/25) and RotaryEmbedding.

Attention is computed in float32 (float64 for double inputs; the softmax in ``softmax_precision``
when given) and cast back to the query's type, so float16 models do not lose precision in the QK product or
the softmax.  bfloat16 is the exception: the spec's function body runs every step in T1, and with
only 8 mantissa bits the expected results carry that step-by-step rounding (a float32 pipeline is
off by one bfloat16 ulp in a quarter of the outputs), so bfloat16 inputs are computed in bfloat16
with each matmul rounded back to it.  Grouped-query attention never repeats K/V: the query heads are
viewed as ``(kv_heads, group)`` and broadcast against their shared K/V head, which is the
``floor(h / group)`` assignment the spec describes.

Masking is assembled as one boolean "allowed" mask (boolean ``attn_mask``, causal frontier,
sliding window, ``nonpad_kv_seqlen`` padding) plus an optional additive float ``attn_mask``;
a query row with no allowed key gives a zero output row (and a zero mode-3 ``qk`` row) instead
of NaN, as the 1.23 errata require.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.graph import np_dtype

from ._registry import kernel

#: ``qk_matmul_output_mode`` values.
_QK_RAW, _QK_SOFTCAPPED, _QK_BIASED, _QK_SOFTMAX = 0, 1, 2, 3
_BFLOAT16 = np_dtype(16)


def compute_dtype(*arrays):
    """float64 when an input is double, else float32 (16-bit types are widened)."""
    if any(a.dtype == np.float64 for a in arrays):
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def _work_dtype(q, v):
    """The type attention runs in (see the module docstring for bfloat16)."""
    if q.dtype == _BFLOAT16 and v.dtype == _BFLOAT16:
        return q.dtype
    return compute_dtype(q, v)


def softmax_rows(x):
    """Softmax over the last axis; a row that is entirely ``-inf`` becomes zeros, not NaN."""
    with np.errstate(invalid="ignore", over="ignore"):
        peak = np.max(x, axis=-1, keepdims=True, initial=-np.inf)  # initial: no keys at all
        peak = np.where(np.isneginf(peak), 0, peak)
        exp = np.exp(x - peak)
        total = np.sum(exp, axis=-1, keepdims=True)
        return exp / np.where(total == 0, 1, total)


def _split_heads(x, heads, name):
    """``(B, S, H*D) -> (B, H, S, D)``."""
    hidden = x.shape[2]
    if heads is None or heads <= 0 or hidden % heads:
        raise Fail(f"{name} hidden size {hidden} is not divisible by num_heads={heads}")
    return x.reshape(x.shape[0], x.shape[1], heads, hidden // heads).transpose(0, 2, 1, 3)


def _as_4d(q, k, v, q_num_heads, kv_num_heads):
    ranks = (q.ndim, k.ndim, v.ndim)
    if ranks == (3, 3, 3):
        if q_num_heads is None or kv_num_heads is None:
            raise Fail("3-D Q/K/V need the q_num_heads and kv_num_heads attributes")
        return (
            _split_heads(q, q_num_heads, "Q"),
            _split_heads(k, kv_num_heads, "K"),
            _split_heads(v, kv_num_heads, "V"),
        )
    if ranks != (4, 4, 4):
        raise Fail(f"Q, K and V must all be 3-D or all 4-D, got ranks {ranks}")
    if q_num_heads is not None and q_num_heads != q.shape[1]:
        raise Fail(f"q_num_heads={q_num_heads} does not match Q shape {q.shape}")
    if kv_num_heads is not None and kv_num_heads != k.shape[1]:
        raise Fail(f"kv_num_heads={kv_num_heads} does not match K shape {k.shape}")
    return q, k, v


def _check_shapes(q, k, v):
    batch, q_heads, _, head = q.shape
    if k.shape[0] != batch or v.shape[0] != batch:
        raise Fail(f"batch sizes differ: Q {q.shape}, K {k.shape}, V {v.shape}")
    if k.shape[3] != head:
        raise Fail(f"Q head size {head} differs from K head size {k.shape[3]}")
    if k.shape[1:3] != v.shape[1:3]:
        raise Fail(f"K {k.shape} and V {v.shape} disagree on heads or sequence length")
    if k.shape[1] == 0 or q_heads % k.shape[1]:
        raise Fail(f"q_num_heads {q_heads} is not a multiple of kv_num_heads {k.shape[1]}")


def _with_past(current, past, name):
    if past is None:
        return current
    if past.ndim != 4 or past.shape[:2] != current.shape[:2] or past.shape[3] != current.shape[3]:
        raise Fail(f"{name} shape {past.shape} does not fit {current.shape}")
    return np.concatenate((past, current.astype(past.dtype, copy=False)), axis=2)


def _key_positions(total, q_len, offset, is_causal, left, right, nonpad):
    """The structural allowed mask (causal, window, padding), or None when nothing restricts."""
    if not (is_causal or left >= 0 or right >= 0 or nonpad is not None):
        return None
    keys = np.arange(total)
    # Absolute position of each query: (q, 1), or (B, 1, q, 1) with a per-batch offset.
    position = np.arange(q_len)[:, None] + (offset if np.ndim(offset) == 0 else np.reshape(offset, (-1, 1, 1, 1)))
    allowed = np.ones((1, 1), dtype=bool)
    if is_causal:
        allowed = allowed & (keys <= position)
    if left >= 0:
        allowed = allowed & (position - keys <= left)
    if right >= 0:
        allowed = allowed & (keys - position <= right)
    if nonpad is not None:
        allowed = allowed & (keys < nonpad.reshape(-1, 1, 1, 1))
    return allowed


def _bias(mask, structural, total, dtype):
    """Combine ``attn_mask`` and the structural mask into an additive bias (None if no mask)."""
    additive = None
    allowed = structural
    if mask is not None:
        if not 1 <= mask.ndim <= 4:
            raise Fail(f"attn_mask must have rank 1 to 4, got shape {mask.shape}")
        short = total - mask.shape[-1]
        if short < 0:
            raise Fail(f"attn_mask last dimension {mask.shape[-1]} exceeds the total sequence length {total}")
        if mask.dtype == np.bool_:
            if short:  # shorter masks are padded with "not allowed"
                mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, short)])
            allowed = mask if allowed is None else allowed & mask
        else:
            additive = mask.astype(dtype)
            if short:
                additive = np.pad(additive, [(0, 0)] * (mask.ndim - 1) + [(0, short)], constant_values=-np.inf)
    if allowed is None:
        return additive
    zero = np.zeros((), dtype) if additive is None else additive
    return np.where(allowed, zero, dtype.type(-np.inf))


def attention(
    q,
    k,
    v,
    attn_mask,
    past_key,
    past_value,
    nonpad_kv_seqlen,
    *,
    is_causal,
    kv_num_heads,
    q_num_heads,
    qk_matmul_output_mode,
    scale,
    softcap,
    softmax_precision,
    left_window_size,
    right_window_size,
    want_qk,
):
    """The whole operator; returns ``(Y, present_key, present_value, qk_or_None)``."""
    three_d = q.ndim == 3
    q4, k4, v4 = _as_4d(q, k, v, q_num_heads, kv_num_heads)
    if (past_key is None) != (past_value is None):
        raise Fail("past_key and past_value must be given together")
    if nonpad_kv_seqlen is not None and past_key is not None:
        raise Fail("nonpad_kv_seqlen cannot be combined with past_key/past_value")
    present_key = _with_past(k4, past_key, "past_key")
    present_value = _with_past(v4, past_value, "past_value")
    _check_shapes(q4, present_key, present_value)
    batch, q_heads, q_len, head = q4.shape
    kv_heads, total = present_key.shape[1], present_key.shape[2]
    group = q_heads // kv_heads
    dtype = _work_dtype(q, v)
    soft_dtype = dtype if softmax_precision is None else np_dtype(softmax_precision)

    offset = 0 if past_key is None else past_key.shape[2]
    if nonpad_kv_seqlen is not None:
        nonpad_kv_seqlen = np.asarray(nonpad_kv_seqlen).reshape(-1)
        if nonpad_kv_seqlen.shape[0] != batch:
            raise Fail(f"nonpad_kv_seqlen has {nonpad_kv_seqlen.shape[0]} entries for batch {batch}")
        if np.any(nonpad_kv_seqlen < 0) or np.any(nonpad_kv_seqlen > total):
            raise InvalidArgument(f"nonpad_kv_seqlen {nonpad_kv_seqlen.tolist()} outside [0, {total}]")
        # External cache: the query block ends at the last valid key (bottom-right alignment).
        offset = nonpad_kv_seqlen.astype(np.int64) - q_len
    structural = _key_positions(total, q_len, offset, is_causal, left_window_size, right_window_size, nonpad_kv_seqlen)
    bias = _bias(attn_mask, structural, total, dtype)
    full = (batch, q_heads, q_len, total)
    if bias is not None:
        try:
            if np.broadcast_shapes(bias.shape, full) != full:
                raise ValueError
        except ValueError:
            raise Fail(f"attention mask of shape {bias.shape} does not broadcast to {full}") from None

    root = dtype.type(np.sqrt(1 / np.sqrt(head) if scale is None else np.float64(scale)))
    qs = q4.astype(dtype) * root
    ks = present_key.astype(dtype) * root
    # Query head h reads K/V head h // group: view Q as (B, kv_heads, group, S, D).
    scores = (
        np.matmul(qs.reshape(batch, kv_heads, group, q_len, head), np.swapaxes(ks, -1, -2)[:, :, None])
        .reshape(full)
        .astype(dtype, copy=False)
    )
    qk = scores if qk_matmul_output_mode == _QK_RAW else None
    if softcap > 0:
        cap = dtype.type(softcap)  # a float32 scalar would promote bfloat16 scores
        scores = cap * np.tanh(scores / cap)
    if qk_matmul_output_mode == _QK_SOFTCAPPED:
        qk = scores
    if bias is not None:
        with np.errstate(invalid="ignore"):
            scores = scores + bias
    if qk_matmul_output_mode == _QK_BIASED:
        qk = scores
    if soft_dtype != dtype:
        scores = scores.astype(soft_dtype)
        if soft_dtype == np.float16:  # round to it, but exponentiate in float32
            scores = scores.astype(np.float32)
    probs = softmax_rows(scores)
    if bias is not None:
        dead = np.all(np.isneginf(bias), axis=-1, keepdims=True)
        if dead.any():
            probs = np.where(dead, probs.dtype.type(0), probs)
    if qk_matmul_output_mode == _QK_SOFTMAX:
        qk = probs
    probs = probs.astype(dtype, copy=False)
    out = np.matmul(probs.reshape(batch, kv_heads, group, q_len, total), present_value.astype(dtype)[:, :, None])
    out = out.reshape(batch, q_heads, q_len, -1)
    if three_d:
        out = out.transpose(0, 2, 1, 3).reshape(batch, q_len, -1)
    if qk is not None and want_qk:
        qk = np.broadcast_to(qk, full).astype(q.dtype)
    else:
        qk = None
    return out.astype(q.dtype), present_key, present_value, qk


def _runner(ctx, attrs):
    want_qk = ctx.num_outputs > 3 and ctx.outputs_used[3]
    mode = attrs["qk_matmul_output_mode"]
    if mode not in (0, 1, 2, 3):
        raise Fail(f"qk_matmul_output_mode must be 0..3, got {mode}")
    precision = attrs["softmax_precision"]
    if precision is not None and precision not in (1, 10, 11, 16):
        raise Fail(f"softmax_precision must be 1, 10, 11 or 16, got {precision}")
    for name in ("left_window_size", "right_window_size"):
        if attrs[name] < -1:
            raise Fail(f"{name} must be -1 or nonnegative, got {attrs[name]}")

    def run(q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
        return attention(q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen, want_qk=want_qk, **attrs)

    return run


@kernel("Attention", since=(23, 24), factory=True)
def attention_23(
    ctx,
    *,
    is_causal,
    kv_num_heads=None,
    q_num_heads=None,
    qk_matmul_output_mode,
    scale=None,
    softcap,
    softmax_precision=None,
):
    return _runner(
        ctx,
        dict(
            is_causal=is_causal,
            kv_num_heads=kv_num_heads,
            q_num_heads=q_num_heads,
            qk_matmul_output_mode=qk_matmul_output_mode,
            scale=scale,
            softcap=softcap,
            softmax_precision=softmax_precision,
            left_window_size=-1,
            right_window_size=-1,
        ),
    )


@kernel("Attention", since=(25,), factory=True)
def attention_25(
    ctx,
    *,
    is_causal,
    kv_num_heads=None,
    q_num_heads=None,
    qk_matmul_output_mode,
    scale=None,
    softcap,
    softmax_precision=None,
    left_window_size,
    right_window_size,
):
    return _runner(
        ctx,
        dict(
            is_causal=is_causal,
            kv_num_heads=kv_num_heads,
            q_num_heads=q_num_heads,
            qk_matmul_output_mode=qk_matmul_output_mode,
            scale=scale,
            softcap=softcap,
            softmax_precision=softmax_precision,
            left_window_size=left_window_size,
            right_window_size=right_window_size,
        ),
    )


@kernel("RotaryEmbedding", since=(23,))
def rotary_embedding(x, cos_cache, sin_cache, position_ids=None, *, interleaved, num_heads=None, rotary_embedding_dim):
    """Rotate the first ``rotary_embedding_dim`` features of every head by position angles."""
    if x.ndim == 4:
        heads = x.transpose(0, 2, 1, 3)  # (B, S, H, D)
    elif x.ndim == 3:
        if not num_heads or x.shape[2] % num_heads:
            raise Fail(
                f"3-D input of shape {x.shape} needs num_heads dividing its hidden size, got num_heads={num_heads}"
            )
        heads = x.reshape(x.shape[0], x.shape[1], num_heads, x.shape[2] // num_heads)
    else:
        raise Fail(f"input must be 3-D or 4-D, got shape {x.shape}")
    head = heads.shape[3]
    dim = rotary_embedding_dim or head
    if dim > head or dim % 2:
        raise Fail(f"rotary_embedding_dim {dim} must be even and at most the head size {head}")
    half = dim // 2
    if position_ids is not None:
        if position_ids.size and (
            position_ids.min() < 0
            or position_ids.max() >= cos_cache.shape[0]
            or position_ids.max() >= sin_cache.shape[0]
        ):
            raise InvalidArgument(f"position_ids outside [0, {cos_cache.shape[0]}) of the caches")
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    if cos_cache.shape[-1] != half or sin_cache.shape[-1] != half:
        raise Fail(
            f"cos/sin caches of shapes {cos_cache.shape}/{sin_cache.shape} need a last "
            f"dimension of rotary_embedding_dim/2 = {half}"
        )
    dtype = compute_dtype(x)
    cos = cos_cache.astype(dtype)[..., None, :]  # broadcast over heads
    sin = sin_cache.astype(dtype)[..., None, :]
    out = heads.astype(dtype)  # a fresh array: safe to write into
    first = out[..., 0:dim:2] if interleaved else out[..., :half]
    second = out[..., 1:dim:2] if interleaved else out[..., half:dim]
    try:
        real = cos * first - sin * second
        imag = sin * first + cos * second
        first[...], second[...] = real, imag
    except ValueError:
        raise Fail(f"cos/sin caches of shape {cos_cache.shape} do not fit input {x.shape}") from None
    out = out.astype(x.dtype, copy=False)
    if x.ndim == 4:
        return out.transpose(0, 2, 1, 3)
    return out.reshape(x.shape)


def _modify(runner, name, values, outer):
    """Run a FlexAttention modifier subgraph on ``values``; it must keep shape and type."""
    results = runner([values], outer)
    if len(results) != 1:
        raise Fail(f"{name} must produce exactly one output, got {len(results)}")
    result = np.asarray(results[0])
    if result.shape != values.shape:
        raise Fail(f"{name} changed the shape {values.shape} to {result.shape}")
    return result.astype(values.dtype, copy=False)


@kernel("FlexAttention", since=(1,), domain="ai.onnx.preview", factory=True)
def flex_attention(ctx, *, prob_mod=None, score_mod=None, scale=None, softmax_precision=None):
    """Attention with optional score/probability modifier subgraphs (PyTorch flex_attention).

    Scores, softmax and the modifiers run in ``softmax_precision`` (float32 for 16-bit inputs
    by default), which is also the element type the modifier subgraphs are declared with.
    """
    score_runner = None if score_mod is None else ctx.subgraph("score_mod")
    prob_runner = None if prob_mod is None else ctx.subgraph("prob_mod")
    if softmax_precision is not None and softmax_precision not in (1, 10, 11, 16):
        raise Fail(f"softmax_precision must be 1, 10, 11 or 16, got {softmax_precision}")

    def run(q, k, v, *outer):
        if not q.ndim == k.ndim == v.ndim == 4:
            raise Fail(f"Q, K and V must be 4-D, got {q.shape}, {k.shape}, {v.shape}")
        _check_shapes(q, k, v)
        batch, q_heads, q_len, head = q.shape
        kv_heads, kv_len = k.shape[1:3]
        group = q_heads // kv_heads
        dtype = compute_dtype(q, k, v)
        soft = compute_dtype(q) if softmax_precision is None else np_dtype(softmax_precision)
        root = dtype.type(np.sqrt(np.float32(1 / np.sqrt(head) if scale is None else scale)))
        scores = np.matmul(
            (q.astype(dtype) * root).reshape(batch, kv_heads, group, q_len, head),
            np.swapaxes(k.astype(dtype) * root, -1, -2)[:, :, None],
        )
        scores = scores.reshape(batch, q_heads, q_len, kv_len).astype(soft)
        if score_runner is not None:
            scores = _modify(score_runner, "score_mod", scores, outer)
        with np.errstate(invalid="ignore", over="ignore"):
            exp = np.exp(scores - np.max(scores, axis=-1, keepdims=True, initial=-np.inf))
            probs = exp / np.sum(exp, axis=-1, keepdims=True)
        if prob_runner is not None:
            probs = _modify(prob_runner, "prob_mod", probs, outer)
        out = np.matmul(probs.reshape(batch, kv_heads, group, q_len, kv_len), v.astype(soft)[:, :, None])
        return out.reshape(batch, q_heads, q_len, -1).astype(q.dtype)

    return run
