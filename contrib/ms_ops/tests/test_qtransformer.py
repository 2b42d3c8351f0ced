"""QAttention and QEmbedLayerNormalization (what quantize_dynamic writes for BERT) against
onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest


def _q(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


# onnxruntime's CPU QAttention takes uint8 inputs only (int8 weights or uint8 weights).
@pytest.mark.parametrize("x_type,w_type", [(np.uint8, np.int8), (np.uint8, np.uint8)])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("mask", [None, "lengths", "2d"])
def test_qattention(run_both, close, rng, x_type, w_type, per_column, mask):
    batch, seq, d, hidden, heads = 2, 5, 16, 24, 3
    shape = (3 * hidden,) if per_column else ()
    w_zero = np.asarray(rng.integers(-3, 4, size=shape) + (128 if w_type == np.uint8 else 0), w_type)
    inputs = [
        ("x", _q(rng, x_type, (batch, seq, d))),
        ("w", _q(rng, w_type, (d, 3 * hidden))),
        ("bias", (rng.standard_normal(3 * hidden) * 0.1).astype(np.float32)),
        ("x_scale", np.array(0.02, np.float32)),
        ("w_scale", np.asarray(rng.random(shape) * 0.002 + 0.001, np.float32)),
    ]
    if mask == "lengths":
        inputs.append(("mask", np.array([5, 3], np.int32)))
    elif mask == "2d":
        inputs.append(("mask", np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)))
    else:
        inputs.append(("", None))
    inputs += [("x_zero", np.array(128 if x_type == np.uint8 else 1, x_type)), ("w_zero", w_zero)]
    ours, theirs = run_both(
        "QAttention", inputs, ["y"], initializers=("w", "bias", "w_scale", "w_zero"), num_heads=heads
    )
    close(ours, theirs, rtol=1e-4, atol=1e-5)


def test_qattention_with_past_and_unidirectional(run_both, close, rng):
    batch, seq, d, hidden, heads, past_len = 2, 3, 8, 16, 2, 4
    inputs = [
        ("x", _q(rng, np.uint8, (batch, seq, d))),
        ("w", _q(rng, np.int8, (d, 3 * hidden))),
        ("bias", (rng.standard_normal(3 * hidden) * 0.1).astype(np.float32)),
        ("x_scale", np.array(0.03, np.float32)),
        ("w_scale", np.array(0.004, np.float32)),
        ("", None),
        ("x_zero", np.array(120, np.uint8)),
        ("w_zero", np.array(0, np.int8)),
        ("past", rng.standard_normal((2, batch, heads, past_len, hidden // heads)).astype(np.float32)),
    ]
    ours, theirs = run_both("QAttention", inputs, ["y", "present"], num_heads=heads, unidirectional=1)
    close(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("segments", [True, False])
def test_qembed_layer_normalization(run_both, close, rng, dtype, segments):
    batch, seq, hidden, vocab = 2, 6, 8, 20
    zero = np.array(128 if dtype == np.uint8 else 0, dtype)
    inputs = [
        ("ids", rng.integers(0, vocab, size=(batch, seq)).astype(np.int32)),
        ("seg_ids", rng.integers(0, 2, size=(batch, seq)).astype(np.int32) if segments else None),
        ("word", _q(rng, dtype, (vocab, hidden))),
        ("pos", _q(rng, dtype, (16, hidden))),
        ("seg", _q(rng, dtype, (2, hidden)) if segments else None),
        ("gamma", _q(rng, dtype, (hidden,))),
        ("beta", _q(rng, dtype, (hidden,))),
        ("mask", np.array([[1] * 6, [1] * 4 + [0] * 2], np.int32)),
        ("word_s", np.array(0.02, np.float32)),
        ("pos_s", np.array(0.01, np.float32)),
        ("seg_s", np.array(0.03, np.float32) if segments else None),
        ("gamma_s", np.array(0.01, np.float32)),
        ("beta_s", np.array(0.005, np.float32)),
        ("word_z", zero),
        ("pos_z", zero),
        ("seg_z", zero if segments else None),
        ("gamma_z", zero),
        ("beta_z", zero),
    ]
    inputs = [(name if value is not None else "", value) for name, value in inputs]
    constants = {name for name, _ in inputs if name not in ("ids", "seg_ids", "mask", "")}
    ours, theirs = run_both(
        "QEmbedLayerNormalization", inputs, ["y", "mask_index"], initializers=constants, epsilon=1e-5
    )
    close(ours, theirs, rtol=1e-4, atol=1e-4)
