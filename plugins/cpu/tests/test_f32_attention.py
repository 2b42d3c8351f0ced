"""Attention's heads block by block of queries (``kernels._f32_attention``): values against a
float64 attention over shapes that leave short row tiles, short column tiles and a short last
block, masks per batch and per head, biases per head added on the way; the same bits as the
three-step path (products on the tiles, numpy's scale and mask, the compiled softmax) and
however the blocks are split over threads; what it declines; com.microsoft's
MultiHeadAttention through a session taking it."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug_cpu import numerics
from onnxplug_cpu.kernels import _f32_attention, _f32_conv, _f32_matmul

pytest.importorskip("numba")
if os.environ.get("ONNXPLUG_CPU_JIT", "1") == "0":
    pytest.skip("the compiled kernels are disabled by ONNXPLUG_CPU_JIT=0", allow_module_level=True)
if _f32_conv.loops() is None:
    pytest.skip("the float32 tiles need a CPU with AVX-512F (this one has none)", allow_module_level=True)

pytestmark = pytest.mark.numba


@pytest.fixture(autouse=True)
def tiles_on(monkeypatch):
    monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "1")


def _heads(rng, batch, heads, length, head_size):
    """(B, N, S, H) views of a (B, S, N·H) projection, as attention's kernels make them."""
    projection = rng.standard_normal((batch, length, heads * head_size), dtype=np.float32)
    return projection.reshape(batch, length, heads, head_size).transpose(0, 2, 1, 3)


def _reference(q, k, v, scale, term=None):
    """float64 attention, heads merged to (B, S, N·H)."""
    scores = np.matmul(q.astype(np.float64), np.swapaxes(k.astype(np.float64), -1, -2)) * scale
    if term is not None:
        scores = scores + term
    scores -= scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    out = np.matmul(probs, v.astype(np.float64))
    batch, heads, length, head_size = out.shape
    return out.transpose(0, 2, 1, 3).reshape(batch, length, heads * head_size)


def _three_steps(q, k, v, scale, term=None):
    """The path it replaces: both products on the tiles, numpy's scale and mask, the softmax."""
    scores = numerics.batched_matmul(q, np.swapaxes(k, -1, -2))
    scores *= np.float32(scale)
    if term is not None:
        scores = scores + term
    probs = numerics.softmax_last_axis(np.ascontiguousarray(scores), in_place=True)
    out = numerics.batched_matmul(probs, v)
    batch, heads, length, head_size = out.shape
    return out.transpose(0, 2, 1, 3).reshape(batch, length, heads * head_size)


SHAPES = [
    # batch, heads, queries, keys, head size
    (1, 12, 197, 197, 64),  # ViT-B: a short last block and column tile
    (1, 4, 128, 128, 32),  # MiniLM's head size: one 32-column tile of values
    (2, 3, 50, 37, 40),  # two batches; 40 features: a 48-column tile
    (1, 2, 9, 130, 16),  # one short block; keys past two column tiles
    (1, 1, 30, 5, 100),  # five keys; values wider than a column tile
]


@pytest.mark.parametrize("batch, heads, length, keys, head_size", SHAPES)
@pytest.mark.parametrize("masked", ["none", "batch", "head"])
def test_attention_matches_a_float64_attention_and_the_three_step_bits(batch, heads, length, keys, head_size, masked):
    rng = np.random.default_rng(batch * 100 + keys)
    q = _heads(rng, batch, heads, length, head_size)
    k, v = _heads(rng, batch, heads, keys, head_size), _heads(rng, batch, heads, keys, head_size)
    term = None
    if masked != "none":
        shape = (batch, 1 if masked == "batch" else heads, length, keys)
        term = np.where(rng.random(shape) < 0.3, np.float32(-10000), np.float32(0)).astype(np.float32)
        term[..., 0] = 0  # every row keeps a key
    scale = 1 / np.sqrt(head_size)
    got = _f32_attention.attend_merged(q, k, v, scale, term)
    assert got is not None and got.shape == (batch, length, heads * head_size) and got.dtype == np.float32
    want = _reference(q, k, v, scale, term)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(got, _three_steps(q, k, v, scale, term))


@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_the_same_bits_however_the_blocks_are_split(parts, monkeypatch):
    rng = np.random.default_rng(5)
    q, k, v = (_heads(rng, 1, 6, 61, 24) for _ in range(3))
    bias = rng.standard_normal((1, 6, 61, 61), dtype=np.float32)
    monkeypatch.setattr(_f32_matmul, "team_parts", lambda groups, m, width: 1)
    alone = _f32_attention.attend_merged(q, k, v, 0.3, bias)
    monkeypatch.setattr(_f32_matmul, "team_parts", lambda groups, m, width: parts)
    np.testing.assert_array_equal(_f32_attention.attend_merged(q, k, v, 0.3, bias), alone)


def test_per_head_biases_are_added_on_the_way():
    """MultiHeadAttention's deferred Q, K and V biases ``(1, N, 1, H)``: the same bits as adding
    them to the operands first."""
    rng = np.random.default_rng(7)
    q, k, v = (_heads(rng, 1, 4, 33, 16) for _ in range(3))
    shifts = tuple(rng.standard_normal((1, 4, 1, 16), dtype=np.float32) for _ in range(3))
    got = _f32_attention.attend_merged(q, k, v, 0.25, None, shifts)
    added = _f32_attention.attend_merged(q + shifts[0], k + shifts[1], v + shifts[2], 0.25)
    np.testing.assert_array_equal(got, added)


def test_nan_and_fully_masked_rows_follow_the_softmax():
    """A NaN score makes its row NaN; a row whose every key has the lowest float32 added is the
    softmax of the scores less a common shift (uniform where they are equal), as the three steps
    give it."""
    rng = np.random.default_rng(3)
    q, k, v = (_heads(rng, 1, 2, 12, 16) for _ in range(3))
    q = q.copy()
    q[0, 1, 4, 0] = np.nan
    term = np.zeros((1, 1, 12, 12), np.float32)
    term[0, 0, 7] = np.finfo(np.float32).min
    got = _f32_attention.attend_merged(q, k, v, 0.25, term)
    np.testing.assert_array_equal(got, _three_steps(q, k, v, 0.25, term))
    assert np.isnan(got[0, 4, 16:]).all() and not np.isnan(got[0, 4, :16]).any()


def test_attention_declines_what_it_does_not_compute():
    rng = np.random.default_rng(1)
    q, k, v = (_heads(rng, 1, 2, 16, 8) for _ in range(3))
    assert _f32_attention.attend_merged(q.astype(np.float64), k, v, 1.0) is None
    assert _f32_attention.attend_merged(q[:, :, :4], k, v, 1.0) is None  # fewer than MIN_ROWS queries
    assert _f32_attention.attend_merged(q, k[:, :, :5], v, 1.0) is None  # keys and values differ
    assert _f32_attention.attend_merged(q, k, v, 1.0, np.zeros((1, 3, 16, 16), np.float32)) is None
    assert _f32_attention.attend_merged(q, k, v, 1.0, np.zeros((16, 16), np.float64)) is None


def test_multi_head_attention_nodes_take_it(monkeypatch):
    """com.microsoft MultiHeadAttention with a bias and a key padding mask, through a session:
    onnxruntime's semantics (the three-step path's bits) with the fused heads taken."""
    pytest.importorskip("onnxplug_ms_ops")
    from onnxplug_ms_ops.kernels import attention

    calls = []
    original = _f32_attention.attend_merged

    def counted(*args, **kwargs):
        result = original(*args, **kwargs)
        calls.append(result is not None)
        return result

    seq, hidden, heads = 40, 64, 4
    node = helper.make_node(
        "MultiHeadAttention", ["q", "k", "v", "bias", "mask"], ["y"], domain="com.microsoft", num_heads=heads
    )
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, seq, hidden]) for n in ("q", "k", "v")]
    inputs.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, [3 * hidden]))
    inputs.append(helper.make_tensor_value_info("mask", TensorProto.INT32, [1, seq]))
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    rng = np.random.default_rng(2)
    feeds = {n: rng.standard_normal((1, seq, hidden), dtype=np.float32) for n in ("q", "k", "v")}
    feeds["bias"] = rng.standard_normal(3 * hidden, dtype=np.float32)
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    wanted = {}
    for kept in (seq, seq - 9):
        feeds["mask"] = (np.arange(seq) < kept).astype(np.int32)[None]
        monkeypatch.setattr(attention, "attention_heads", lambda *a, **k: None)
        wanted[kept] = session.run(None, feeds)[0]
        monkeypatch.setattr(attention, "attention_heads", counted)
        np.testing.assert_array_equal(session.run(None, feeds)[0], wanted[kept])
    assert calls == [True, True]
    assert not np.allclose(wanted[seq], wanted[seq - 9])  # the mask is applied
