"""The CPU Conv's fast paths (``onnxplug_cpu.numerics.convolve`` with a ``PackedConv``): Winograd
F(4×4) and F(2×2) for 3×3 stride-1 layers, depthwise shifted multiply-adds, and FusedConv's
in-place activations, each against the general im2col path in float64 and against onnx's
reference evaluator or onnxruntime on whole nodes.  These are the numpy paths, which
``ONNXPLUG_CPU_CONV_TILE=0`` and CPUs without AVX-512F take (the compiled tiles are tested in
``test_f32_conv.py``): every test here runs with the tiles off."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxplug
from onnxplug.testing import make_model
from onnxplug_cpu import numerics
from onnxplug_cpu.numerics import PackedConv, convolve, pack_conv_weights


@pytest.fixture(autouse=True)
def numpy_paths(monkeypatch):
    monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "0")


def _general(x, w, b=None, **geometry):
    """The im2col path in float64 (a plain packed matrix takes no fast path)."""
    group = geometry.get("group", 1)
    w64 = w.astype(np.float64)
    return convolve(x.astype(np.float64), w64, b, packed=pack_conv_weights(w64, group), **geometry)


def _scaled_error(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize(
    "shape, maps, geometry, tile",
    [
        ((1, 32, 29, 31), 64, dict(pads=[1, 1, 1, 1]), 4),
        ((2, 32, 19, 13), 32, dict(pads=[0, 2, 1, 0]), 4),  # asymmetric pads, odd sizes
        ((1, 40, 24, 24), 32, dict(auto_pad="SAME_UPPER"), 4),
        ((1, 40, 23, 24), 48, dict(auto_pad="SAME_LOWER"), 4),
        ((1, 32, 30, 26), 32, dict(auto_pad="VALID"), 4),
        ((1, 128, 12, 11), 128, dict(pads=[1, 1, 1, 1]), 2),  # too few 4×4 tiles: F(2×2)
    ],
)
def test_winograd_matches_the_direct_path(shape, maps, geometry, tile):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((maps, shape[1], 3, 3)).astype(np.float32)
    b = rng.standard_normal(maps).astype(np.float32)
    packed = PackedConv(w, 1)
    out, *_ = numerics.pool_geometry(
        shape[2:], (3, 3), None, None, geometry.get("pads"), geometry.get("auto_pad", "NOTSET")
    )
    assert numerics._winograd_tile(packed, x, None, None, out) == tile
    got = convolve(x, w, b, packed=packed, **geometry)
    want = _general(x, w, b, **geometry)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert _scaled_error(got, want) < 1e-5


@pytest.mark.parametrize(
    "strides, dilations, channels",
    [((2, 2), (1, 1), 32), ((1, 1), (2, 1), 32), ((1, 1), (1, 1), 16), ((1, 1), (1, 1), 32)],
)
def test_no_winograd_outside_its_geometry(strides, dilations, channels):
    """Strided, dilated or narrow layers stay on im2col (narrow weights are not even transformed)."""
    w = np.ones((channels, channels, 3, 3), dtype=np.float32)
    x = np.ones((1, channels, 26, 26), dtype=np.float32)
    packed = PackedConv(w, 1)
    expected = 4 if channels >= numerics.WINOGRAD_MIN_CHANNELS and strides == dilations == (1, 1) else 0
    assert (channels >= numerics.WINOGRAD_MIN_CHANNELS) == packed.uses_winograd
    assert numerics._winograd_tile(packed, x, strides, dilations, (24, 24)) == expected
    assert numerics._winograd_tile(packed, x.astype(np.float64), None, None, (24, 24)) == 0


def test_winograd_on_a_resnet_layer_matches_onnxruntime():
    """A 64→64 3×3 layer at 56×56 (ResNet's first stage) against onnxruntime's direct convolution."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle here")
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    x = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    model = make_model(
        [node], [("x", TensorProto.FLOAT, [1, 64, 56, 56])], [("y", TensorProto.FLOAT, None)], {"w": w, "b": b}
    ).SerializeToString()
    ours = onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert _scaled_error(ours, theirs) < 1e-5
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4 * float(np.abs(theirs).max()))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape, kernel, geometry",
    [
        ((1, 8, 11, 9), (3, 3), dict(pads=[1, 1, 1, 1])),
        ((2, 5, 12, 13), (3, 3), dict(strides=[2, 2], pads=[1, 0, 0, 1])),
        ((1, 6, 15, 10), (5, 3), dict(dilations=[2, 1], pads=[2, 1, 3, 1])),
        ((1, 7, 9, 9), (3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 1])),
        ((1, 4, 8, 8), (2, 2), dict(auto_pad="VALID")),
        ((1, 4, 8, 8), (1, 1), dict()),
        ((2, 64, 9, 7), (3, 3), dict(pads=[1, 2, 0, 1], strides=[1, 2])),  # channels-last
        ((1, 96, 10, 11), (3, 3), dict(auto_pad="SAME_LOWER", dilations=[1, 2])),
    ],
)
def test_depthwise_matches_im2col_and_the_reference(shape, kernel, geometry, dtype):
    rng = np.random.default_rng(shape[1])
    c = shape[1]
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((c, 1) + kernel).astype(dtype)
    b = rng.standard_normal(c).astype(dtype)
    packed = PackedConv(w, c)
    assert packed.depthwise is not None
    got = convolve(x, w, b, group=c, packed=packed, **geometry)
    want = _general(x, w, b, group=c, **geometry)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, **geometry)
    model = make_model(
        [node], [("x", TensorProto.FLOAT, list(shape))], [("y", TensorProto.FLOAT, None)], {"w": w, "b": b}
    )
    reference = ReferenceEvaluator(model).run(None, {"x": x.astype(np.float32)})[0]
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-5)


def test_channel_multiplier_is_not_depthwise():
    """group == C with two filters per channel goes through the grouped matmul instead."""
    w = np.ones((8, 1, 3, 3), dtype=np.float32)
    assert PackedConv(w, 4).depthwise is None
    assert PackedConv(w, 8).depthwise is not None
    x = np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)
    got = convolve(x, w, group=4, packed=PackedConv(w, 4), pads=[1, 1, 1, 1])
    np.testing.assert_allclose(got, _general(x, w, group=4, pads=[1, 1, 1, 1]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "shape, kernel, attrs",
    [
        ((1, 6, 5, 4), (2, 2), dict(strides=[2, 2])),
        ((2, 4, 3, 5), (3, 2), dict(strides=[3, 2], group=2, output_padding=[1, 1])),
        ((1, 4, 4, 4), (2, 2), dict(strides=[2, 2], pads=[1, 0, 0, 1])),
        ((1, 3, 4, 5), (2, 2), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
        ((1, 2, 6), (4,), dict(strides=[4], output_padding=[2])),
    ],
)
def test_conv_transpose_without_overlap_matches_onnxruntime(shape, kernel, attrs):
    """kernel == stride: the products are placed by one transposing copy instead of scatter-adds
    (onnx's reference evaluator mishandles group here, so onnxruntime is the oracle)."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle here")
    rng = np.random.default_rng(len(shape) + kernel[0])
    group = attrs.get("group", 1)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((shape[1], 3) + kernel).astype(np.float32)
    b = rng.standard_normal(3 * group).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    model = make_model(
        [node], [("x", TensorProto.FLOAT, list(shape))], [("y", TensorProto.FLOAT, None)], {"w": w, "b": b}
    )
    got = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape, maps, kernel, geometry",
    [
        ((1, 8, 9, 11), 4, (3, 3), dict(pads=[1, 1, 1, 1])),
        ((2, 6, 7, 10), 3, (3, 2), dict(pads=[0, 2, 1, 0])),  # asymmetric pads, odd sizes, batch
        ((1, 5, 12, 9), 2, (3, 3), dict(dilations=[2, 3], pads=[2, 1, 2, 3])),
        ((2, 4, 8, 8), 2, (5, 5), dict(auto_pad="SAME_LOWER")),
        ((1, 3, 6, 7), 1, (2, 3), dict(auto_pad="VALID")),
        ((1, 4, 16, 15), 4, (3, 3), dict(pads=[1, 1, 1, 1])),
        ((1, 64, 20, 20), 16, (3, 3), dict(pads=[1, 1, 1, 1])),  # Winograd-eligible, but narrowing
    ],
)
def test_shifted_matches_im2col_and_the_reference(shape, maps, kernel, geometry, dtype):
    rng = np.random.default_rng(maps + shape[2])
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((maps, shape[1]) + kernel).astype(dtype)
    b = rng.standard_normal(maps).astype(dtype)
    packed = PackedConv(w, 1)
    assert packed.shiftable
    out, *_ = numerics.pool_geometry(
        shape[2:], kernel, None, geometry.get("dilations"), geometry.get("pads"), geometry.get("auto_pad", "NOTSET")
    )
    tile = numerics._winograd_tile(packed, x, None, geometry.get("dilations"), out)
    assert numerics._shifts(tile, None, maps, shape[1], out)
    got = convolve(x, w, b, packed=packed, **geometry)
    want = _general(x, w, b, **geometry)
    assert got.dtype == dtype and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-4)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **geometry)
    model = make_model(
        [node], [("x", TensorProto.FLOAT, list(shape))], [("y", TensorProto.FLOAT, None)], {"w": w, "b": b}
    )
    reference = ReferenceEvaluator(model).run(None, {"x": x.astype(np.float32)})[0]
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize(
    "shape, maps, kernel, geometry",
    [
        ((2, 6, 7, 10), 3, (3, 2), dict(pads=[0, 2, 1, 0])),
        ((1, 5, 12, 9), 2, (3, 3), dict(dilations=[2, 3], pads=[2, 1, 2, 3])),
        ((2, 4, 8, 8), 2, (5, 5), dict(auto_pad="SAME_LOWER")),
        ((1, 16, 40, 36), 16, (3, 3), dict(pads=[1, 1, 1, 1])),
    ],
)
def test_compiled_shift_adds_are_the_numpy_passes_bits(monkeypatch, shape, maps, kernel, geometry, with_bias):
    """``kernels._shifted_jit`` adds the offsets' contributions and the bias in the numpy
    passes' order; float64 (and the exact integer sums' float64 accumulation) keep the passes."""
    from onnxplug_cpu.kernels import _shifted

    if _shifted._compiled_shift_add() is None:
        pytest.skip("numba is not installed or is disabled by ONNXPLUG_CPU_JIT=0")
    rng = np.random.default_rng(shape[1] + maps)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((maps, shape[1]) + kernel).astype(np.float32)
    b = rng.standard_normal(maps).astype(np.float32) if with_bias else None
    packed = PackedConv(w, 1)
    compiled = convolve(x, w, b, packed=packed, **geometry)
    calls = []
    monkeypatch.setattr(_shifted, "_compiled_shift_add", lambda: calls.append(1))
    passes = convolve(x, w, b, packed=packed, **geometry)
    assert calls == [1]
    np.testing.assert_array_equal(compiled, passes)
    convolve(x.astype(np.float64), w.astype(np.float64), b, packed=PackedConv(w.astype(np.float64), 1), **geometry)
    assert calls == [1]  # float64 never asks for the compiled pass


def test_no_winograd_for_layers_that_widen_more_than_twice():
    assert PackedConv(np.ones((64, 32, 3, 3), dtype=np.float32), 1).uses_winograd
    assert not PackedConv(np.ones((65, 32, 3, 3), dtype=np.float32), 1).uses_winograd


def test_widening_or_grouped_layers_are_not_shifted():
    assert not PackedConv(np.ones((8, 4, 3, 3)), 1).shiftable
    assert not PackedConv(np.ones((4, 2, 3, 3)), 2).shiftable
    assert not PackedConv(np.ones((4, 4, 1, 1)), 1).shiftable
    assert not numerics._shifts(0, (2, 2), 4, 8, (20, 20))  # strided
    assert not numerics._shifts(0, None, 512, 512, (7, 7))  # small map, M = C: im2col
    assert not numerics._shifts(4, None, 64, 64, (56, 56))  # M = C with a Winograd tile
    assert numerics._shifts(4, None, 16, 64, (56, 56))


def test_winograd_filters_are_made_for_the_tile_a_call_takes():
    """No filters at creation; a 7×7 map at batch 1 takes neither tile (im2col), so none are made;
    a 28×28 map makes the F(4×4) ones only (ResNet-50's 7×7 layers once held unused F(4×4)
    filters, 4× their weights)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    packed = PackedConv(w, 1)
    assert packed.uses_winograd and packed.winograd == {}
    for side, tiles_made in ((7, []), (28, [4])):
        x = rng.standard_normal((1, 64, side, side)).astype(np.float32)
        np.testing.assert_allclose(
            convolve(x, w, pads=(1, 1, 1, 1), packed=packed),
            convolve(x, w, pads=(1, 1, 1, 1)),
            rtol=1e-4,
            atol=2e-3,  # Winograd's float32 rounding against im2col, on outputs of size ~24
        )
        assert sorted(packed.winograd) == tiles_made
