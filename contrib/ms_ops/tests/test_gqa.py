"""GroupQueryAttention and RotaryEmbedding against onnxruntime.

GroupQueryAttention leaves output rows of right-padding and cache rows past each entry's length
unspecified, so those are compared only where they are defined.
"""

from __future__ import annotations

import numpy as np
import pytest

N, KV, H = 4, 2, 16
MAX_POS = 64


def _caches(rng, rot):
    angles = np.arange(MAX_POS)[:, None] * (10000.0 ** (-np.arange(rot // 2) * 2.0 / rot))[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


@pytest.mark.parametrize("layout", ["bsh", "bnsh"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("positions", ["offset", "per_token"])
def test_rotary_embedding(run_both, close, rng, layout, interleaved, positions):
    batch, seq = 2, 5
    x = rng.standard_normal((batch, seq, N * H) if layout == "bsh" else (batch, N, seq, H)).astype(np.float32)
    pos = np.array([3], dtype=np.int64) if positions == "offset" else rng.integers(0, MAX_POS, (batch, seq))
    cos, sin = _caches(rng, H)
    attrs = {"interleaved": interleaved}
    if layout == "bsh":
        attrs["num_heads"] = N
    close(
        *run_both(
            "RotaryEmbedding", [("x", x), ("pos", pos.astype(np.int64)), ("cos", cos), ("sin", sin)], ["y"], **attrs
        )
    )


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_partial(run_both, close, rng, interleaved):
    x = rng.standard_normal((2, 5, N * H)).astype(np.float32)
    cos, sin = _caches(rng, H // 2)
    pos = rng.integers(0, MAX_POS, (2, 5)).astype(np.int64)
    close(
        *run_both(
            "RotaryEmbedding",
            [("x", x), ("pos", pos), ("cos", cos), ("sin", sin)],
            ["y"],
            num_heads=N,
            rotary_embedding_dim=H // 2,
            interleaved=interleaved,
        )
    )


def _compare_gqa(ours, theirs, close, lengths, past_lens, seq, first_prompt):
    """Compare output rows and present rows that GroupQueryAttention defines."""
    out_ours, out_theirs = ours[0], theirs[0]
    assert out_ours.shape == out_theirs.shape and out_ours.dtype == out_theirs.dtype
    for b, (length, past) in enumerate(zip(lengths, past_lens)):
        rows = min(seq, length - past) if not first_prompt else min(seq, length)
        close([out_ours[b, :rows]], [out_theirs[b, :rows]])
        for got, want in zip(ours[1:3], theirs[1:3]):
            assert got.shape == want.shape
            close([got[b, :, :length]], [want[b, :, :length]])
    for got, want in zip(ours[3:], theirs[3:]):
        close([got[..., : max(lengths)]], [want[..., : max(lengths)]])


def _gqa_inputs(rng, batch, seq, past_buffer, seqlens, total, *, packed=False, rotary=False, extra=()):
    q = rng.standard_normal((batch, seq, N * H)).astype(np.float32)
    k = rng.standard_normal((batch, seq, KV * H)).astype(np.float32)
    v = rng.standard_normal((batch, seq, KV * H)).astype(np.float32)
    if packed:
        inputs = [("qkv", np.concatenate([q, k, v], axis=-1)), ("", None), ("", None)]
    else:
        inputs = [("q", q), ("k", k), ("v", v)]
    if past_buffer:
        inputs += [
            ("past_key", rng.standard_normal((batch, KV, past_buffer, H)).astype(np.float32)),
            ("past_value", rng.standard_normal((batch, KV, past_buffer, H)).astype(np.float32)),
        ]
    else:
        inputs += [("", None), ("", None)]
    inputs += [("seqlens_k", np.array(seqlens, dtype=np.int32)), ("total", np.array(total, dtype=np.int32))]
    if rotary:
        cos, sin = _caches(rng, H)
        inputs += [("cos", cos), ("sin", sin)]
    inputs += list(extra)
    while inputs[-1][0] == "":
        inputs.pop()
    return inputs


OUTPUTS = ["y", "present_key", "present_value"]


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("rotary,interleaved", [(False, 0), (True, 0), (True, 1)])
def test_gqa_first_prompt_right_padded(run_both, close, rng, packed, rotary, interleaved):
    seq = 7
    lengths = [7, 4]
    inputs = _gqa_inputs(rng, 2, seq, 0, [n - 1 for n in lengths], seq, packed=packed, rotary=rotary)
    ours, theirs = run_both(
        "GroupQueryAttention",
        inputs,
        OUTPUTS,
        num_heads=N,
        kv_num_heads=KV,
        do_rotary=int(rotary),
        rotary_interleaved=interleaved,
    )
    _compare_gqa(ours, theirs, close, lengths, [0, 0], seq, True)


@pytest.mark.parametrize("rotary", [False, True])
def test_gqa_token_generation(run_both, close, rng, rotary):
    buffer = 12
    lengths = [9, 5]
    inputs = _gqa_inputs(rng, 2, 1, buffer, [n - 1 for n in lengths], max(lengths), rotary=rotary)
    ours, theirs = run_both("GroupQueryAttention", inputs, OUTPUTS, num_heads=N, kv_num_heads=KV, do_rotary=int(rotary))
    _compare_gqa(ours, theirs, close, lengths, [n - 1 for n in lengths], 1, False)


def test_gqa_subsequent_prompt(run_both, close, rng):
    seq, past = 3, 5
    inputs = _gqa_inputs(rng, 1, seq, past, [past + seq - 1], past + seq, rotary=True)
    ours, theirs = run_both("GroupQueryAttention", inputs, OUTPUTS, num_heads=N, kv_num_heads=KV, do_rotary=1)
    _compare_gqa(ours, theirs, close, [past + seq], [past], seq, False)


@pytest.mark.parametrize(
    "attrs",
    [
        {"local_window_size": 2},
        {"softcap": 5.0},
        {"smooth_softmax": 1},
        {"scale": 0.05},
        {"qk_output": 1},
        {"qk_output": 2},
    ],
)
def test_gqa_attributes(run_both, close, rng, attrs):
    seq = 6
    inputs = _gqa_inputs(rng, 2, seq, 0, [seq - 1, seq - 1], seq)
    outputs = OUTPUTS + (["qk"] if attrs.get("qk_output") else [])
    ours, theirs = run_both("GroupQueryAttention", inputs, outputs, num_heads=N, kv_num_heads=KV, **attrs)
    _compare_gqa(ours, theirs, close, [seq, seq], [0, 0], seq, True)


def test_gqa_attention_bias_and_head_sink(run_both, close, rng):
    seq, buffer = 1, 8
    lengths = [6, 8]
    extra = [
        ("", None),
        ("", None),
        ("", None),
        ("bias", rng.standard_normal((2, 1, seq, 8)).astype(np.float32)),
        ("sink", rng.standard_normal(N).astype(np.float32)),
    ]
    inputs = _gqa_inputs(rng, 2, seq, buffer, [n - 1 for n in lengths], max(lengths), extra=extra)
    ours, theirs = run_both("GroupQueryAttention", inputs, OUTPUTS, num_heads=N, kv_num_heads=KV)
    _compare_gqa(ours, theirs, close, lengths, [n - 1 for n in lengths], seq, False)


@pytest.mark.parametrize("window", [1, 3])
def test_gqa_local_window_with_past(run_both, close, rng, window):
    buffer = 10
    lengths = [8, 4]
    inputs = _gqa_inputs(rng, 2, 1, buffer, [n - 1 for n in lengths], max(lengths), rotary=True)
    ours, theirs = run_both(
        "GroupQueryAttention", inputs, OUTPUTS, num_heads=N, kv_num_heads=KV, do_rotary=1, local_window_size=window
    )
    _compare_gqa(ours, theirs, close, lengths, [n - 1 for n in lengths], 1, False)


def test_gqa_float16(run_both, close, rng):
    seq = 5
    inputs = _gqa_inputs(rng, 1, seq, 0, [seq - 1], seq)
    inputs = [(n, a.astype(np.float16) if a is not None and a.dtype == np.float32 else a) for n, a in inputs]
    ours, theirs = run_both("GroupQueryAttention", inputs, OUTPUTS, num_heads=N, kv_num_heads=KV)
    assert ours[0].dtype == np.float16
    _compare_gqa(ours, theirs, lambda a, b: close(a, b, rtol=2e-3, atol=2e-3), [seq], [0], seq, True)


def test_gqa_prompt_into_max_length_buffer(run_both, close, rng):
    # A first prompt written into a preallocated (max_sequence_length) cache.
    seq, buffer = 5, 16
    lengths = [5, 2]
    inputs = _gqa_inputs(rng, 2, seq, buffer, [n - 1 for n in lengths], seq, rotary=True)
    ours, theirs = run_both("GroupQueryAttention", inputs, OUTPUTS, num_heads=N, kv_num_heads=KV, do_rotary=1)
    assert ours[1].shape == (2, KV, buffer, H)
    _compare_gqa(ours, theirs, close, lengths, [0, 0], seq, True)


def test_gqa_explicit_position_ids(run_both, close, rng):
    lengths = [7, 3]
    positions = ("position_ids", np.array([[11], [2]], dtype=np.int64))
    inputs = _gqa_inputs(rng, 2, 1, 8, [n - 1 for n in lengths], max(lengths), rotary=True, extra=[positions])
    ours, theirs = run_both(
        "GroupQueryAttention", inputs, OUTPUTS, num_heads=N, kv_num_heads=KV, do_rotary=1, rotary_interleaved=1
    )
    _compare_gqa(ours, theirs, close, lengths, [n - 1 for n in lengths], 1, False)


def test_gqa_non_causal(run_both, close, rng):
    seq = 6
    inputs = _gqa_inputs(rng, 2, seq, 0, [seq - 1, seq - 1], seq)
    ours, theirs = run_both("GroupQueryAttention", inputs, OUTPUTS, num_heads=N, kv_num_heads=KV, causal=0)
    _compare_gqa(ours, theirs, close, [seq, seq], [0, 0], seq, True)
