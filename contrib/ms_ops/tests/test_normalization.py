"""Skip/simplified/embed layer normalizations against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

B, S, H = 2, 9, 48


@pytest.mark.parametrize("skip_shape", [(B, S, H), (1, S, H), (S, H)])
@pytest.mark.parametrize("with_beta,with_bias", [(False, False), (True, False), (True, True)])
def test_skip_layer_norm(run_both, close, rng, skip_shape, with_beta, with_bias):
    inputs = [
        ("x", rng.standard_normal((B, S, H)).astype(np.float32)),
        ("skip", rng.standard_normal(skip_shape).astype(np.float32)),
        ("gamma", rng.standard_normal(H).astype(np.float32)),
        ("beta" if with_beta else "", rng.standard_normal(H).astype(np.float32)),
    ]
    if with_bias:
        inputs.append(("bias", rng.standard_normal(H).astype(np.float32)))
    outputs = ["y", "mean", "inv_std", "sum"]
    close(*run_both("SkipLayerNormalization", inputs, outputs, epsilon=1e-5))


@pytest.mark.parametrize("with_beta,with_bias", [(False, False), (True, True)])
def test_skip_layer_norm_compiled_rows(run_both, close, rng, with_beta, with_bias):
    # 2×96×128 values: the CPU provider's compiled row loop (numerics.layer_norm_last_axis).
    shape = (2, 96, 128)
    inputs = [
        ("x", (rng.standard_normal(shape) * 3 + 2).astype(np.float32)),
        ("skip", rng.standard_normal(shape).astype(np.float32)),
        ("gamma", rng.standard_normal(128).astype(np.float32)),
        ("beta" if with_beta else "", rng.standard_normal(128).astype(np.float32)),
    ]
    if with_bias:
        inputs.append(("bias", rng.standard_normal(128).astype(np.float32)))
    outputs = ["y", "mean", "inv_std", "sum"]
    close(*run_both("SkipLayerNormalization", inputs, outputs, epsilon=1e-5))


def test_skip_layer_norm_float16(run_both, close, rng):
    inputs = [
        ("x", rng.standard_normal((B, S, H)).astype(np.float16)),
        ("skip", rng.standard_normal((B, S, H)).astype(np.float16)),
        ("gamma", rng.standard_normal(H).astype(np.float16)),
        ("beta", rng.standard_normal(H).astype(np.float16)),
    ]
    close(*run_both("SkipLayerNormalization", inputs, ["y"]), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("with_bias", [False, True])
def test_skip_simplified_layer_norm(run_both, close, rng, with_bias):
    inputs = [
        ("x", rng.standard_normal((B, S, H)).astype(np.float32)),
        ("skip", rng.standard_normal((B, S, H)).astype(np.float32)),
        ("gamma", rng.standard_normal(H).astype(np.float32)),
    ]
    if with_bias:
        inputs.append(("bias", rng.standard_normal(H).astype(np.float32)))
    ours, theirs = run_both("SkipSimplifiedLayerNormalization", inputs, ["y", "", "inv_std", "sum"], epsilon=1e-6)
    close(ours, theirs)


@pytest.mark.parametrize("axis", [-1, 1])
def test_simplified_layer_norm(run_both, close, rng, axis):
    # onnxruntime registers SimplifiedLayerNormalization in the default domain.
    x = rng.standard_normal((B, S, H)).astype(np.float32)
    scale_shape = (H,) if axis == -1 else (S, H)
    scale = rng.standard_normal(scale_shape).astype(np.float32)
    close(
        *run_both(
            "SimplifiedLayerNormalization",
            [("x", x), ("scale", scale)],
            ["y", "inv_std"],
            domain="",
            axis=axis,
            epsilon=1e-6,
        )
    )


@pytest.mark.parametrize("axis", [-1, -2])
def test_layer_norm_opset1(run_both, close, rng, axis):
    # A model whose default opset is below 17 selects onnxruntime's opset-1 LayerNormalization.
    x = rng.standard_normal((B, S, H)).astype(np.float32)
    shape = (H,) if axis == -1 else (S, H)
    inputs = [
        ("x", x),
        ("scale", rng.standard_normal(shape).astype(np.float32)),
        ("b", rng.standard_normal(shape).astype(np.float32)),
    ]
    close(*run_both("LayerNormalization", inputs, ["y", "mean", "inv_std"], domain="", opset=13, axis=axis))


@pytest.mark.parametrize("segments,mask,positions", [(True, True, False), (False, False, False), (True, True, True)])
def test_embed_layer_norm(run_both, close, rng, segments, mask, positions):
    vocab, max_pos = 50, 32
    ids = rng.integers(0, vocab, size=(B, S)).astype(np.int32)
    inputs = [
        ("ids", ids),
        ("segment_ids" if segments else "", rng.integers(0, 2, size=(B, S)).astype(np.int32)),
        ("word", rng.standard_normal((vocab, H)).astype(np.float32)),
        ("pos", rng.standard_normal((max_pos, H)).astype(np.float32)),
        ("segment" if segments else "", rng.standard_normal((2, H)).astype(np.float32)),
        ("gamma", rng.standard_normal(H).astype(np.float32)),
        ("beta", rng.standard_normal(H).astype(np.float32)),
    ]
    m = np.ones((B, S), dtype=np.int32)
    m[1, 5:] = 0
    inputs.append(("mask" if mask else "", m))
    if positions:
        inputs.append(("position_ids", rng.integers(0, max_pos, size=(B, S)).astype(np.int32)))
    outputs = ["y", "mask_index", "embedding_sum"]
    close(*run_both("EmbedLayerNormalization", inputs, outputs, initializers=("word", "pos", "segment"), epsilon=1e-5))


def test_embed_layer_norm_rejects_bad_ids(run_ours, rng):
    import onnxplug

    ids = np.array([[1, 2, 99]], dtype=np.int32)
    inputs = [
        ("ids", ids),
        ("", None),
        ("word", np.ones((10, 4), np.float32)),
        ("pos", np.ones((3, 4), np.float32)),
        ("", None),
        ("gamma", np.ones(4, np.float32)),
        ("beta", np.zeros(4, np.float32)),
    ]
    with pytest.raises(onnxplug.InvalidArgument, match="99"):
        run_ours("EmbedLayerNormalization", [i for i in inputs if i[0]], ["y"])
