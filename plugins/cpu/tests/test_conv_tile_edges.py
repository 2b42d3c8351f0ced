"""The float32 convolution tiles' edges (``kernels._f32_conv``): the gather's phase images whatever
the scratch held, and a short last row tile (``kernels._f32_tile_ir.tile_2_rows``) that computes
only its one or two channels, with the six-row tiles' bits and nothing written past them."""

from __future__ import annotations

import os

import numpy as np
import pytest

from onnxplug_cpu.kernels import _f32_conv, _f32_conv_layout
from onnxplug_cpu.numerics import PackedConv, convolve

pytest.importorskip("numba")
if os.environ.get("ONNXPLUG_CPU_JIT", "1") == "0":
    pytest.skip("the compiled kernels are disabled by ONNXPLUG_CPU_JIT=0", allow_module_level=True)
if _f32_conv.loops() is None:
    pytest.skip("the float32 tiles need a CPU with AVX-512F (this one has none)", allow_module_level=True)


@pytest.fixture(autouse=True)
def tiles_on(monkeypatch):
    monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "1")


@pytest.fixture
def fresh_plans():
    """Layer plans made while a test ran are dropped when it ends."""
    yield
    _f32_conv.plan.cache_clear()
    _f32_conv_layout.masked_layout.cache_clear()


def _reference(x, weights, bias, attrs):
    """The layer in float64 on the numpy paths (the tiles switched off)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ONNXPLUG_CPU_CONV_TILE", "0")
        return convolve(x.astype(np.float64), weights.astype(np.float64), bias.astype(np.float64), **attrs)


# (channels, height, width, kernel, strides, pads): every form of the gather
GATHERS = [
    (3, 9, 11, (3, 3), (2, 2), (1, 1, 1, 1)),  # both column phases, an odd width
    (2, 8, 10, (3, 3), (2, 2), (0, 0, 0, 0)),  # both column phases, no padding
    (2, 13, 11, (5, 5), (2, 2), (2, 2, 1, 2)),  # left pad 2
    (2, 9, 10, (3, 3), (2, 2), (0, 1, 1, 0)),  # left pad 1, even width
    (3, 7, 9, (3, 3), (1, 1), (1, 1, 1, 1)),  # one phase, padded all round
    (2, 11, 12, (1, 1), (2, 2), (0, 0, 0, 0)),  # one phase of four
    (2, 10, 13, (3, 1), (1, 3), (1, 0, 2, 1)),  # a column stride of 3, uneven pads
    (1, 4, 5, (7, 7), (3, 3), (3, 3, 3, 3)),  # a kernel wider than the map
]


@pytest.mark.parametrize("layer", GATHERS)
def test_the_gather_writes_every_cell_of_the_phase_images(layer):
    """Whatever the scratch held before (NaN here), the phase images are the padded input split
    by phase, zero in the padding and the tiles' overrun: the gather zeroes only the cells it
    does not copy to."""
    c, h, w, kernel, strides, pads = layer
    x = np.random.default_rng(5).standard_normal((c, h, w), dtype=np.float32)
    geometry = _f32_conv.plan((1, c, h, w), 4, 1, kernel, strides, None, pads, "NOTSET").geometry
    sh, sw = geometry.stride
    top, left = geometry.pads
    padded = np.zeros((c, geometry.hq * sh, geometry.wq * sw), np.float32)
    rows, cols = min(h, padded.shape[1] - top), min(w, padded.shape[2] - left)
    padded[:, top : top + rows, left : left + cols] = x[:, :rows, :cols]
    planes = np.full((len(geometry.phases), c, geometry.length), np.nan, np.float32)
    loops = _f32_conv.loops()
    loops.gather(x, planes, sh, sw, top, left, geometry.phases, geometry.hq, geometry.wq, 0, c)
    for p, (py, px) in enumerate(geometry.phases):
        image = padded[:, py::sh, px::sw][:, : geometry.hq, : geometry.wq].reshape(c, -1)
        np.testing.assert_array_equal(planes[p, :, : image.shape[1]], image)
        assert (planes[p, :, image.shape[1] :] == 0).all()


# (channels, height, width, kernel, strides, pads): read in place, masked, from padded planes
ROW_TILE_LAYERS = [
    (5, 9, 15, (1, 1), (1, 1), (0, 0, 0, 0)),  # pointwise: the input read in place
    (4, 10, 13, (3, 3), (1, 1), (1, 1, 1, 1)),  # a small map read masked
    (3, 17, 19, (3, 3), (2, 2), (1, 1, 1, 1)),  # phase-split padded planes, cropped as stored
]


@pytest.mark.parametrize("maps", [1, 2, 3, 4, 5, 8, 10, 16, 32])
@pytest.mark.parametrize("layer", ROW_TILE_LAYERS, ids=["in-place", "masked", "padded"])
def test_short_last_row_tiles_store_the_six_row_tiles_bits(layer, maps, fresh_plans):
    """A last row tile of one or two channels (``_f32_tile_ir.tile_2_rows``, read in place or from
    padded planes) computes only those channels, and every other count the six-row tile: the same
    bits as the six-row tiles of a layer whose extra channels repeat the last one, with the bias,
    a residual, the clamp and the SiLU in the store, and within float32 accuracy of a float64
    sum."""
    c, h, w, kernel, strides, pads = layer
    rng = np.random.default_rng(maps)
    x = rng.standard_normal((1, c, h, w), dtype=np.float32)
    weights = rng.standard_normal((maps, c, *kernel), dtype=np.float32)
    bias = rng.standard_normal(maps, dtype=np.float32)
    rows = _f32_conv.loops().ROWS
    extra = np.minimum(np.arange(-(-maps // rows) * rows), maps - 1)  # the last channel repeated
    attrs = dict(strides=strides, pads=pads)
    residual = rng.standard_normal((1, extra.size, *_reference(x, weights, bias, attrs).shape[2:]), dtype=np.float32)

    def both(**fused):
        """The layer, and the first ``maps`` channels of the layer of whole six-row tiles."""
        z = fused.pop("residual", None)
        got = convolve(
            x,
            weights,
            bias,
            packed=PackedConv(weights, 1),
            residual=None if z is None else z[:, :maps],
            **attrs,
            **fused,
        )
        whole = convolve(
            x, weights[extra], bias[extra], packed=PackedConv(weights[extra], 1), residual=z, **attrs, **fused
        )
        return got, whole[:, :maps]

    got, whole = both()
    np.testing.assert_array_equal(got, whole)
    expected = _reference(x, weights, bias, attrs)
    assert np.abs(got - expected).max() <= 2e-6 * max(1.0, np.abs(expected).max()) * np.sqrt(weights[0].size)
    np.testing.assert_array_equal(*both(residual=residual, clamp=(-1.0, 1.5)))
    np.testing.assert_array_equal(*both(silu_alpha=1.702))


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5])
def test_short_row_tiles_write_no_row_past_their_channels(rows):
    """The tiles of a layer of ``rows`` channels (one row tile, short or six rows computing
    fewer) leave the rows after them untouched: the output's channels are rows of a larger
    guarded array."""
    loops = _f32_conv.loops()
    rng = np.random.default_rng(43)
    columns = 130  # two full column tiles and a short one
    a = rng.standard_normal((rows, 20), dtype=np.float32)
    b = rng.standard_normal((20, columns), dtype=np.float32)
    guarded = np.full((rows + 6, columns), 7.0, dtype=np.float32)
    offsets = np.arange(20, dtype=np.int64) * columns
    no_bias, no_residual, inf = np.zeros(0, np.float32), np.zeros((0, 0), np.float32), np.float32(np.inf)
    no_crop = (np.zeros(0, np.uint16), np.zeros(0, np.int64))
    count = loops.tile_count(rows, 1, columns)
    args = (no_bias, no_residual, -inf, inf, *no_crop, 1, np.float32(np.nan), False, 0, 0, count)
    loops.tiles(a, b.reshape(-1), offsets, guarded[:rows], columns, 1, 0, *args)
    np.testing.assert_allclose(guarded[:rows], a @ b, rtol=1e-5, atol=1e-5)
    assert (guarded[rows:] == 7.0).all()
