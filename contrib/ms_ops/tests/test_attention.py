"""Attention and MultiHeadAttention against onnxruntime: masks in every format, past/present
key-values, attention bias, unidirectional, custom scale and hidden sizes."""

from __future__ import annotations

import numpy as np
import pytest

B, S, D, N = 2, 6, 32, 4


def _mask(kind, rng, total, seq=S):
    if kind is None:
        return None
    if kind == "lengths":
        return np.array([total, total - 3], dtype=np.int32)
    if kind == "lengths_zero":
        return np.array([total, 0], dtype=np.int32)
    if kind == "start_end":
        return np.array([total, total - 1, 0, 2], dtype=np.int32)
    if kind == "raw2d":
        m = np.ones((B, total), dtype=np.int32)
        m[0, -2:] = 0
        m[1, :1] = 0
        return m
    if kind == "raw3d":
        diagonal = np.eye(seq, total, total - seq, dtype=np.int32)  # every row keeps one key
        return rng.integers(0, 2, size=(B, seq, total)).astype(np.int32) | diagonal
    raise AssertionError(kind)


def _attention_inputs(rng, mask=None, past_len=0, bias=True, attention_bias=False, sizes=(D, D, D)):
    x = rng.standard_normal((B, S, D)).astype(np.float32)
    w = (rng.standard_normal((D, sum(sizes))) / np.sqrt(D)).astype(np.float32)
    inputs = [("x", x), ("w", w), ("bias" if bias else "", rng.standard_normal(sum(sizes)).astype(np.float32))]
    total = past_len + S
    m = _mask(mask, rng, total)
    inputs.append(("mask", m) if m is not None else ("", None))
    if past_len:
        inputs.append(("past", rng.standard_normal((2, B, N, past_len, D // N)).astype(np.float32)))
    else:
        inputs.append(("", None))
    if attention_bias:
        inputs.append(("attn_bias", rng.standard_normal((1, N, S, total)).astype(np.float32)))
    while inputs[-1][0] == "":
        inputs.pop()
    return inputs


@pytest.mark.parametrize("mask", [None, "lengths", "lengths_zero", "start_end", "raw2d", "raw3d"])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention_masks(run_both, close, rng, mask, unidirectional):
    inputs = _attention_inputs(rng, mask=mask)
    close(*run_both("Attention", inputs, ["y"], initializers=("w", "bias"), num_heads=N, unidirectional=unidirectional))


@pytest.mark.parametrize("mask", [None, "lengths", "raw2d"])
def test_attention_past_present(run_both, close, rng, mask):
    inputs = _attention_inputs(rng, mask=mask, past_len=5)
    close(*run_both("Attention", inputs, ["y", "present"], num_heads=N, unidirectional=1))


def test_attention_bias_scale_filter(run_both, close, rng):
    inputs = _attention_inputs(rng, mask="raw2d", attention_bias=True)
    close(*run_both("Attention", inputs, ["y"], num_heads=N, scale=0.3, mask_filter_value=-50.0))


def test_attention_qkv_hidden_sizes(run_both, close, rng):
    inputs = _attention_inputs(rng, sizes=(D, D, 2 * D), mask="lengths")
    close(*run_both("Attention", inputs, ["y"], num_heads=N, qkv_hidden_sizes=[D, D, 2 * D]))


def test_attention_without_bias(run_both, close, rng):
    inputs = _attention_inputs(rng, bias=False)
    close(*run_both("Attention", inputs, ["y"], num_heads=N))


def _heads(rng, batch, heads, seq, size):
    return rng.standard_normal((batch, heads, seq, size)).astype(np.float32)


@pytest.mark.parametrize("mask", [None, "lengths", "raw2d", "raw3d"])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_mha_separate_qkv(run_both, close, rng, mask, unidirectional):
    q = rng.standard_normal((B, S, D)).astype(np.float32)
    k = rng.standard_normal((B, S, D)).astype(np.float32)
    v = rng.standard_normal((B, S, D)).astype(np.float32)
    bias = rng.standard_normal(3 * D).astype(np.float32)
    m = _mask(mask, rng, S)
    inputs = [("q", q), ("k", k), ("v", v), ("bias", bias), ("mask", m) if m is not None else ("", None)]
    while inputs[-1][0] == "":
        inputs.pop()
    close(*run_both("MultiHeadAttention", inputs, ["y"], num_heads=N, unidirectional=unidirectional))


def test_mha_bias_with_present_outputs(run_both, close, rng):
    """Where present_key and present_value are read, they carry the biases (the products then do
    not add them later, as they do where only the output is read: test_mha_separate_qkv)."""
    q, k, v = (rng.standard_normal((B, S, D)).astype(np.float32) for _ in range(3))
    bias = rng.standard_normal(3 * D).astype(np.float32)
    inputs = [("q", q), ("k", k), ("v", v), ("bias", bias)]
    close(*run_both("MultiHeadAttention", inputs, ["y", "present_key", "present_value"], num_heads=N))


def test_mha_cross_attention(run_both, close, rng):
    kv_len = 11
    q = rng.standard_normal((B, S, D)).astype(np.float32)
    k = rng.standard_normal((B, kv_len, D)).astype(np.float32)
    v = rng.standard_normal((B, kv_len, 2 * D)).astype(np.float32)
    mask = np.array([kv_len, 7], dtype=np.int32)
    close(
        *run_both(
            "MultiHeadAttention",
            [("q", q), ("k", k), ("v", v), ("", None), ("mask", mask)],
            ["y", "present_key", "present_value"],
            num_heads=N,
        )
    )


@pytest.mark.parametrize("with_mask", [False, True])
def test_mha_past_present(run_both, close, rng, with_mask):
    past = 4
    q = rng.standard_normal((B, S, D)).astype(np.float32)
    k = rng.standard_normal((B, S, D)).astype(np.float32)
    v = rng.standard_normal((B, S, D)).astype(np.float32)
    mask = np.ones((B, past + S), dtype=np.int32)
    mask[1, :2] = 0
    inputs = [
        ("q", q),
        ("k", k),
        ("v", v),
        ("", None),
        ("mask", mask) if with_mask else ("", None),
        ("attn_bias", rng.standard_normal((B, 1, S, past + S)).astype(np.float32)),
        ("past_key", _heads(rng, B, N, past, D // N)),
        ("past_value", _heads(rng, B, N, past, D // N)),
    ]
    close(*run_both("MultiHeadAttention", inputs, ["y", "present_key", "present_value"], num_heads=N, unidirectional=1))


def test_mha_bnsh_key_value(run_both, close, rng):
    # Cross attention with key/value already in BNSH (a cross-attention cache): no concat, no bias.
    q = rng.standard_normal((B, S, D)).astype(np.float32)
    k = _heads(rng, B, N, 9, D // N)
    v = _heads(rng, B, N, 9, D // N)
    close(*run_both("MultiHeadAttention", [("q", q), ("k", k), ("v", v)], ["y"], num_heads=N))


def test_mha_packed_kv(run_both, run_ours, close, rng):
    # onnxruntime's CPU kernel has no packed KV: compare with the same K and V passed separately.
    q = rng.standard_normal((B, S, D)).astype(np.float32)
    kv = rng.standard_normal((B, 7, N, 2, D // N)).astype(np.float32)
    bias = rng.standard_normal(3 * D).astype(np.float32)
    packed = run_ours("MultiHeadAttention", [("q", q), ("kv", kv), ("", None), ("bias", bias)], ["y"], num_heads=N)
    k, v = (kv[:, :, :, i].reshape(B, 7, D) for i in range(2))
    close(packed, run_both("MultiHeadAttention", [("q", q), ("k", k), ("v", v), ("bias", bias)], ["y"], num_heads=N)[1])


def test_mha_packed_qkv(run_both, run_ours, close, rng):
    qkv = rng.standard_normal((B, S, N, 3, D // N)).astype(np.float32)
    bias = rng.standard_normal(3 * D).astype(np.float32)
    packed = run_ours(
        "MultiHeadAttention", [("qkv", qkv), ("", None), ("", None), ("bias", bias)], ["y"], num_heads=N, scale=0.2
    )
    q, k, v = (qkv[:, :, :, i].reshape(B, S, D) for i in range(3))
    close(
        packed,
        run_both("MultiHeadAttention", [("q", q), ("k", k), ("v", v), ("bias", bias)], ["y"], num_heads=N, scale=0.2)[
            1
        ],
    )


def test_mha_qk_output(run_both, close, rng):
    q = rng.standard_normal((B, S, D)).astype(np.float32)
    k = rng.standard_normal((B, S, D)).astype(np.float32)
    v = rng.standard_normal((B, S, D)).astype(np.float32)
    bias = rng.standard_normal((1, N, S, S)).astype(np.float32)
    inputs = [("q", q), ("k", k), ("v", v), ("", None), ("", None), ("attn_bias", bias)]
    close(*run_both("MultiHeadAttention", inputs, ["y", "", "", ("qk", 1)], num_heads=N))


def test_attention_4d_mask_matches_3d(run_both, run_ours, close, rng):
    # onnxruntime's CPU kernel lacks the Megatron (B, 1, max, max) mask; it equals the 3-D mask
    # of the rows at the query positions.
    past, max_len = 3, 12
    inputs = _attention_inputs(rng, past_len=past)
    mask4 = np.tril(np.ones((B, 1, max_len, max_len), np.int32))
    mask4[1, :, :, 6:] = 0
    with_4d = inputs[:3] + [("mask", mask4)] + inputs[4:]
    mask3 = mask4[:, 0, past : past + S, : past + S]
    with_3d = inputs[:3] + [("mask", np.ascontiguousarray(mask3))] + inputs[4:]
    close(
        run_ours("Attention", with_4d, ["y", "present"], num_heads=N),
        run_both("Attention", with_3d, ["y", "present"], num_heads=N)[1],
    )


def test_attention_shared_past_buffer(run_ours, close, rng):
    # past_present_share_buffer: the first past_sequence_length rows of a max-length buffer are
    # the past; the new keys/values are written after them.
    past_len, max_len = 4, 10
    inputs = _attention_inputs(rng, mask="lengths", past_len=past_len)
    buffer = np.zeros((2, B, N, max_len, D // N), np.float32)
    buffer[:, :, :, :past_len] = inputs[4][1]
    shared = inputs[:4] + [("past", buffer), ("", None), ("past_len", np.array([past_len], np.int32))]
    y_shared, present_shared = run_ours(
        "Attention", shared, ["y", "present"], num_heads=N, unidirectional=1, past_present_share_buffer=1
    )
    y, present = run_ours("Attention", inputs, ["y", "present"], num_heads=N, unidirectional=1)
    close([y_shared, present_shared[:, :, :, : past_len + S]], [y, present])
    assert present_shared.shape == buffer.shape


@pytest.mark.parametrize(
    "op,inputs,attrs,message",
    [
        ("Attention", "attention", {"do_rotary": 1}, "do_rotary"),
        ("Attention", "attention_cuda_mask", {}, "CUDA"),
    ],
)
def test_attention_unsupported_features_raise_not_implemented(run_ours, rng, op, inputs, attrs, message):
    import onnxplug

    args = _attention_inputs(rng)
    if inputs == "attention_cuda_mask":
        args = args[:3] + [("mask", np.zeros(3 * B + 2, np.int32))]
    with pytest.raises(onnxplug.NotImplemented, match=message):
        run_ours(op, args, ["y"], num_heads=N, **attrs)


def test_attention_and_mha_float16(run_both, close, rng):
    x = rng.standard_normal((B, S, D)).astype(np.float16)
    w = (rng.standard_normal((D, 3 * D)) / np.sqrt(D)).astype(np.float16)
    bias = rng.standard_normal(3 * D).astype(np.float16)
    close(
        *run_both(
            "Attention", [("x", x), ("w", w), ("bias", bias), ("mask", _mask("lengths", rng, S))], ["y"], num_heads=N
        ),
        rtol=2e-3,
        atol=2e-3,
    )
    q, k, v = (rng.standard_normal((B, S, D)).astype(np.float16) for _ in range(3))
    close(
        *run_both("MultiHeadAttention", [("q", q), ("k", k), ("v", v)], ["y"], num_heads=N, unidirectional=1),
        rtol=2e-3,
        atol=2e-3,
    )


@pytest.mark.parametrize("mask", [None, "raw2d"])
@pytest.mark.parametrize("with_qk", [False, True])
def test_mha_long_sequence(run_both, close, rng, mask, with_qk):
    # 2×4×96×96 scores: enough values for the compiled softmax (onnxplug_cpu.numerics.softmax_last_axis)
    # with the attention bias of an exported BERT added in place, and the qk output kept apart.
    seq = 96
    q, k, v = ((rng.standard_normal((B, seq, D)) * 2).astype(np.float32) for _ in range(3))
    inputs = [("q", q), ("k", k), ("v", v), ("", None)]
    m = None if mask is None else np.ones((B, seq), dtype=np.int32)
    if m is not None:
        m[1, -20:] = 0
    inputs.append(("mask", m) if m is not None else ("", None))
    inputs.append(("attn_bias", (rng.standard_normal((1, 1, seq, seq)) * 3).astype(np.float32)))
    outputs = ["y", "", "", ("qk", 1)] if with_qk else ["y"]
    close(*run_both("MultiHeadAttention", inputs, outputs, num_heads=N))
