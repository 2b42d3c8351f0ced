"""The float32 convolution on compiled AVX-512 tiles (``kernels._f32_conv``, on by default,
``ONNXPLUG_CPU_CONV_TILE=0`` turns it off): values against a float64 sum over strides, dilations,
pads, asymmetric kernels, batches, pointwise and grouped layers; the epilogue's order (bias,
residual, clamp), in the tiles' store included; short last tiles; the same bits however the
tiles are split over threads (numba's team, Python threads, one thread); the products it serves
(Winograd and transposed convolutions) against numpy; onnx's reference evaluator through a
session; and a forked child that must not enter the team its parent started."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxplug
from onnxplug.testing import make_model
from onnxplug_cpu.kernels import _f32_conv, _f32_conv_layout, _f32_products, _team
from onnxplug_cpu.numerics import PackedConv, convolve

pytest.importorskip("numba")
if os.environ.get("ONNXPLUG_CPU_JIT", "1") == "0":
    pytest.skip("the compiled kernels are disabled by ONNXPLUG_CPU_JIT=0", allow_module_level=True)
if _f32_conv.loops() is None:
    pytest.skip("the float32 tiles need a CPU with AVX-512F (this one has none)", allow_module_level=True)

threadpoolctl = pytest.importorskip("threadpoolctl")


@pytest.fixture(autouse=True)
def tiles_on(monkeypatch):
    """The column tiles on, and the row tiles (``kernels._row_conv``, test_row_conv.py) off:
    these tests are the column tiles', whose layers the row tiles would otherwise take."""
    monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "1")
    monkeypatch.setenv("ONNXPLUG_CPU_ROW_TILES", "0")


# (batch, channels, maps, height, width, kernel, strides, pads, dilations)
LAYERS = [
    (1, 3, 16, 33, 34, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    (2, 16, 32, 20, 21, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    (1, 8, 8, 9, 10, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # pointwise: read in place
    (2, 70, 13, 9, 10, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    (1, 8, 13, 9, 10, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    (1, 5, 7, 11, 12, (5, 5), (1, 1), (2, 2, 2, 2), (2, 2)),
    (1, 4, 4, 12, 13, (3, 3), (2, 2), (1, 1, 1, 1), (2, 2)),
    (1, 6, 10, 7, 8, (3, 1), (1, 2), (1, 0, 0, 1), (1, 1)),
    (1, 3, 5, 1, 2, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    (1, 3, 5, 4, 5, (7, 7), (3, 3), (3, 3, 3, 3), (1, 1)),
    (1, 64, 70, 7, 7, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # more than 64 columns, channel tail
    # stride 2 with both column phases read: each input row split into both in one loop
    (1, 5, 7, 15, 17, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1)),  # odd width, no left pad
    (1, 4, 6, 13, 11, (5, 5), (2, 2), (2, 2, 1, 2), (1, 1)),  # left pad 2, odd width
    (2, 3, 5, 9, 10, (3, 3), (2, 2), (0, 1, 1, 0), (1, 1)),  # left pad 1, even width
    (1, 6, 4, 8, 9, (4, 4), (2, 2), (1, 1, 1, 1), (1, 1)),  # an even kernel
]


@pytest.fixture
def fresh_plans():
    """Layer plans made while a test patched the planning are dropped when it ends."""
    yield
    _f32_conv.plan.cache_clear()
    _f32_conv_layout.masked_layout.cache_clear()


def _case(layer, seed=0):
    n, c, m, h, w, kernel, strides, pads, dilations = layer
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    weights = rng.standard_normal((m, c, *kernel), dtype=np.float32)
    bias = rng.standard_normal(m, dtype=np.float32)
    return x, weights, bias, dict(strides=strides, pads=pads, dilations=dilations)


def _reference(x, weights, bias, attrs):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ONNXPLUG_CPU_CONV_TILE", "0")
        return convolve(x.astype(np.float64), weights.astype(np.float64), bias.astype(np.float64), **attrs)


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: "x".join(map(str, layer[:5])) + f"-k{layer[5]}-s{layer[6]}")
def test_values_match_a_float64_sum(layer):
    x, weights, bias, attrs = _case(layer)
    expected = _reference(x, weights, bias, attrs)
    got = convolve(x, weights, bias, packed=PackedConv(weights, 1), **attrs)
    assert got.dtype == np.float32 and got.shape == expected.shape
    scale = np.abs(expected).max()
    assert np.abs(got - expected).max() <= 2e-6 * max(1.0, scale) * np.sqrt(weights[0].size)


def test_epilogue_adds_bias_then_residual_then_clamps():
    x, weights, bias, attrs = _case(LAYERS[1])
    expected = _reference(x, weights, bias, attrs).astype(np.float32)
    residual = np.random.default_rng(3).standard_normal(expected.shape, dtype=np.float32)
    got = convolve(x, weights, bias, packed=PackedConv(weights, 1), residual=residual, clamp=(0.0, 1.5), **attrs)
    np.testing.assert_allclose(got, np.clip(expected + residual, 0.0, 1.5), atol=1e-4)
    # a broadcast residual takes the numpy epilogue after the tiles: same order
    row = residual[:1, :, :1, :1]
    got = convolve(x, weights, bias, packed=PackedConv(weights, 1), residual=row, clamp=(0.0, 6.0), **attrs)
    np.testing.assert_allclose(got, np.clip(expected + row, 0.0, 6.0), atol=1e-4)


def _tiles_are_used():
    return _f32_conv.available()


@pytest.mark.parametrize("layer", [LAYERS[0], LAYERS[3], LAYERS[10]])
def test_same_bits_on_any_split(layer, monkeypatch):
    assert _tiles_are_used()
    x, weights, bias, attrs = _case(layer)
    results = []
    for threads, team in ((1, "1"), (2, "1"), (2, "0")):
        monkeypatch.setenv("ONNXPLUG_CPU_TEAM", team)
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            results.append(convolve(x, weights, bias, packed=PackedConv(weights, 1), clamp=(-1.0, 1.0), **attrs))
    for other in results[1:]:
        np.testing.assert_array_equal(results[0], other)


#: Stride-1 layers whose output rows are as wide as their input's: read in place, the padding's
#: lanes masked off (``_f32_conv_layout.masked_layout``).  (N, C, M, H, W, kernel, pads, dilations, groups)
MASKED = [
    (1, 16, 20, 13, 13, (3, 3), (1, 1, 1, 1), (1, 1), 1),  # three tiles and a short one
    (2, 8, 13, 7, 7, (3, 3), (1, 1, 1, 1), (1, 1), 1),  # one tile, two images
    (1, 6, 7, 9, 11, (3, 3), (2, 1, 0, 1), (1, 1), 1),  # more padding above, none below
    (1, 5, 6, 12, 12, (3, 3), (2, 2, 2, 2), (2, 2), 1),  # dilated
    (1, 4, 9, 1, 17, (3, 3), (1, 1, 1, 1), (1, 1), 1),  # a single row
    (1, 4, 9, 16, 1, (3, 3), (1, 1, 1, 1), (1, 1), 1),  # a single column
    (1, 6, 10, 10, 9, (1, 3), (0, 1, 0, 1), (1, 1), 1),  # a row kernel
    (1, 6, 10, 10, 9, (5, 1), (2, 0, 2, 0), (1, 1), 1),  # a column kernel (no padding across)
    (1, 8, 12, 9, 9, (3, 3), (1, 1, 1, 1), (1, 1), 2),  # two groups
    (1, 3, 4, 20, 30, (3, 3), (1, 1, 1, 1), (1, 1), 1),  # many tiles, rows across tiles
]


@pytest.mark.parametrize("layer", MASKED, ids=lambda layer: "x".join(map(str, layer[:5])) + f"-k{layer[5]}-g{layer[8]}")
def test_masked_layers_give_the_padded_planes_bits(layer, monkeypatch, fresh_plans):
    """Read in place with the padding's lanes masked off, a layer computes the sums the padded
    planes do, bit for bit (a masked lane reads zero, the padding's value), with the bias,
    residual, clamp and SiLU stored as there; and matches a float64 sum.  (Without the tail's
    dot products, which add in another order: tested below.)"""
    monkeypatch.setattr(_f32_conv_layout, "TAIL_COLUMNS", -1)
    monkeypatch.setattr(_f32_conv_layout, "MASKED_SHARE", 2.0)  # masked wherever it can be, saving or not
    _f32_conv.plan.cache_clear()
    _f32_conv_layout.masked_layout.cache_clear()
    n, c, m, h, w, kernel, pads, dilations, groups = layer
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    weights = rng.standard_normal((m, c // groups, *kernel), dtype=np.float32)
    bias = rng.standard_normal(m, dtype=np.float32)
    attrs = dict(pads=pads, dilations=dilations, group=groups)
    residual = rng.standard_normal((n, m, h, w), dtype=np.float32) if (h, w) != (1, 1) else None
    geometry = (x.shape, m, groups, kernel, None, dilations, pads, "NOTSET")
    assert _f32_conv.plan(*geometry).masked

    def both(**fused):
        masked = convolve(x, weights, bias, packed=PackedConv(weights, groups), **attrs, **fused)
        with monkeypatch.context() as patch:
            patch.setattr(_f32_conv, "masked_layout", lambda *a: None)
            _f32_conv.plan.cache_clear()
            assert not _f32_conv.plan(*geometry).masked
            padded = convolve(x, weights, bias, packed=PackedConv(weights, groups), **attrs, **fused)
        _f32_conv.plan.cache_clear()
        return masked, padded

    masked, padded = both()
    np.testing.assert_array_equal(masked, padded)
    expected = _reference(x, weights, bias, attrs)
    assert np.abs(masked - expected).max() <= 2e-6 * max(1.0, np.abs(expected).max()) * np.sqrt(weights[0].size)
    masked, padded = both(residual=residual, clamp=(-1.0, 1.5))
    np.testing.assert_array_equal(masked, padded)
    masked, padded = both(silu_alpha=1.702)
    np.testing.assert_array_equal(masked, padded)


def test_small_maps_are_read_masked_and_large_ones_from_padded_planes():
    """Masked where the padded planes would compute at least 5 % more columns (a 14×14 map's
    224 against 208; a 7×7 map's 64 against 48 and a dot product), and on every map of up to
    56×56 cells (3264 against 3136 columns, but no padded copy); padded planes on larger maps
    (112×112, where VGG-19's runs were slower masked, and 57×57, just past the bound)."""
    for side, masked in ((7, True), (13, True), (14, True), (28, True), (56, True), (57, False), (112, False)):
        assert _f32_conv.plan((1, 32, side, side), 32, 1, (3, 3), None, None, (1, 1, 1, 1), "NOTSET").masked == masked


def test_a_huge_kernel_keeps_the_padded_planes_without_a_huge_table(monkeypatch, fresh_plans):
    """The lane masks are one int64 per tap and column tile: a table over ``MAX_LANE_MASKS``
    entries is not built (the padded planes read the layer)."""
    monkeypatch.setattr(_f32_conv_layout, "MAX_LANE_MASKS", 9 * 3)  # three tiles of 3×3 taps
    _f32_conv_layout.masked_layout.cache_clear()
    kernel, pads = (3, 3), (1, 1, 1, 1)
    assert _f32_conv_layout.masked_layout((4, 13, 13), 1, kernel, None, None, pads, "NOTSET") is not None  # 3 tiles
    assert _f32_conv_layout.masked_layout((4, 13, 14), 1, kernel, None, None, pads, "NOTSET") is not None  # 3 tiles
    assert _f32_conv_layout.masked_layout((4, 15, 14), 1, kernel, None, None, pads, "NOTSET") is None  # 4 tiles: 36


def test_masked_lanes_touch_nothing_outside_the_input():
    """The taps of the first and last rows point before and past the input's buffer; their lanes
    are masked off, so a layer on an array at the very start and end of its memory reads no
    other cell (NaN all round it would show in the sums)."""
    rng = np.random.default_rng(9)
    framed = np.full(3 * 4 * 5 * 5 + 2 * 64, np.nan, dtype=np.float32)
    x = framed[64:-64].reshape(3, 4, 5, 5)  # not contiguous with anything but NaN
    x[...] = rng.standard_normal(x.shape, dtype=np.float32)
    weights = rng.standard_normal((6, 4, 3, 3), dtype=np.float32)
    layer = _f32_conv.plan(x.shape, 6, 1, (3, 3), None, None, (1, 1, 1, 1), "NOTSET")
    assert layer.masked
    got = _f32_conv.run(layer, x, np.ascontiguousarray(weights.reshape(6, -1)))
    assert np.isfinite(got).all()
    expected = _reference(x, weights, np.zeros(6, np.float32), dict(pads=(1, 1, 1, 1)))
    np.testing.assert_allclose(got, expected, atol=1e-4)


@pytest.mark.parametrize(
    "layer",
    [
        (1, 40, 20, 7, 7, (1, 1), (0, 0, 0, 0), (1, 1), 1),  # pointwise, 49 columns: 48 and one
        (2, 24, 13, 7, 7, (3, 3), (1, 1, 1, 1), (1, 1), 1),  # read masked, two images
        (1, 16, 12, 7, 7, (3, 3), (1, 1, 1, 1), (1, 1), 4),  # grouped
        (1, 8, 9, 3, 11, (1, 1), (0, 0, 0, 0), (1, 1), 1),  # 33 columns: 32 and one
        (1, 2050, 31, 7, 7, (1, 1), (0, 0, 0, 0), (1, 1), 1),  # weights in blocks of two row tiles
        (1, 1024, 13, 14, 14, (1, 1), (0, 0, 0, 0), (1, 1), 1),  # 196 columns: four, deep enough
        (2, 128, 9, 14, 14, (3, 3), (1, 1, 1, 1), (1, 1), 1),  # four, masked, 1152 deep
        (1, 1024, 7, 6, 11, (1, 1), (0, 0, 0, 0), (1, 1), 1),  # 66 columns: two at once
        (1, 1024, 5, 1, 67, (1, 1), (0, 0, 0, 0), (1, 1), 1),  # 67 columns: three at once
    ],
    ids=["pointwise", "masked", "grouped", "33-columns", "blocks", "four-deep", "four-masked", "two", "three"],
)
def test_tail_columns_as_dot_products_store_as_the_tiles_do(layer, monkeypatch, fresh_plans):
    """The last column or two of a layer read in place are dot products of the weights' rows
    (``_f32_conv_tail.tail_rows``): the same sums to float32 accuracy, with the bias, the
    residual, the clamp and the SiLU stored in the same order as the tiles store them."""
    n, c, m, h, w, kernel, pads, dilations, groups = layer
    rng = np.random.default_rng(11)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    weights = rng.standard_normal((m, c // groups, *kernel), dtype=np.float32)
    bias = rng.standard_normal(m, dtype=np.float32)
    residual = rng.standard_normal((n, m, h, w), dtype=np.float32)
    attrs = dict(pads=pads, dilations=dilations, group=groups)
    assert _f32_conv.plan(x.shape, m, groups, kernel, None, dilations, pads, "NOTSET").tail > 0
    expected = _reference(x, weights, bias, attrs)
    bound = np.sqrt(weights[0].size) * 4e-6 * max(1.0, np.abs(expected).max())
    got = convolve(x, weights, bias, packed=PackedConv(weights, groups), **attrs)
    assert np.abs(got - expected).max() <= bound
    fused = dict(residual=residual, clamp=(-0.5, 2.0))
    got = convolve(x, weights, bias, packed=PackedConv(weights, groups), **attrs, **fused)
    assert np.abs(got - np.clip(expected + residual, -0.5, 2.0)).max() <= bound
    got = convolve(x, weights, bias, packed=PackedConv(weights, groups), silu_alpha=1.0, **attrs)
    silu = expected / (1.0 + np.exp(-expected))
    assert np.abs(got - silu).max() <= 2 * bound
    # and the tail's columns are the ones the tiles compute without one, to float32 accuracy
    monkeypatch.setattr(_f32_conv_layout, "TAIL_COLUMNS", -1)
    monkeypatch.setattr(_f32_conv_layout, "WIDE_TAIL_COLUMNS", -1)
    _f32_conv_layout.masked_layout.cache_clear()
    _f32_conv.plan.cache_clear()
    assert _f32_conv.plan(x.shape, m, groups, kernel, None, dilations, pads, "NOTSET").tail == 0
    whole = convolve(x, weights, bias, packed=PackedConv(weights, groups), silu_alpha=1.0, **attrs)
    _f32_conv.plan.cache_clear()
    np.testing.assert_allclose(got, whole, rtol=1e-5, atol=bound)


@pytest.mark.parametrize(
    "channels,kernel,pads,tail",
    [
        (1024, (1, 1), (0, 0, 0, 0), 4),
        (512, (1, 1), (0, 0, 0, 0), 0),
        (128, (3, 3), (1, 1, 1, 1), 4),
        (64, (3, 3), (1, 1, 1, 1), 0),
    ],
)
def test_four_last_columns_are_dot_products_only_where_they_are_deep(channels, kernel, pads, tail, fresh_plans):
    """A 14×14 map's last four columns are dot products where each is at least WIDE_TAIL_DEPTH
    long (1024 input channels pointwise, 128 with a 3×3 kernel), else the tiles' vector."""
    plan = _f32_conv.plan((1, channels, 14, 14), 8, 1, kernel, None, (1, 1), pads, "NOTSET")
    assert plan.tail == tail


def test_integer_valued_sums_are_exact():
    rng = np.random.default_rng(5)
    x = rng.integers(-8, 8, (1, 16, 12, 12)).astype(np.float32)
    weights = rng.integers(-8, 8, (8, 16, 3, 3)).astype(np.float32)
    got = convolve(x, weights, None, pads=(1, 1, 1, 1), packed=PackedConv(weights, 1))
    expected = _reference(x, weights, np.zeros(8, np.float32), dict(pads=(1, 1, 1, 1)))
    np.testing.assert_array_equal(got, expected.astype(np.float32))


@pytest.mark.parametrize(
    "left, right",
    [((36, 36), (36, 500)), ((3, 7, 20), (3, 20, 130)), ((5, 1, 4, 9), (2, 9, 70)), ((1, 300), (300, 64))],
)
def test_matmul_matches_numpy(left, right):
    rng = np.random.default_rng(7)
    a = rng.standard_normal(left, dtype=np.float32)
    b = rng.standard_normal(right, dtype=np.float32)
    np.testing.assert_allclose(_f32_products.matmul(a, b), np.matmul(a, b), rtol=1e-5, atol=1e-4)
    # non-contiguous operands (a transposed view) are copied, not misread
    np.testing.assert_allclose(
        _f32_products.matmul(a, np.swapaxes(np.swapaxes(b, -1, -2).copy(), -1, -2)),
        np.matmul(a, b),
        rtol=1e-5,
        atol=1e-4,
    )


@pytest.mark.parametrize(
    "op, attrs, w_shape",
    [
        ("Conv", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]), (8, 6, 3, 3)),
        ("Conv", dict(kernel_shape=[1, 1], group=2), (8, 3, 1, 1)),  # grouped: tile products
        ("ConvTranspose", dict(kernel_shape=[2, 2], strides=[2, 2]), (6, 4, 2, 2)),  # Wᵀ @ x on tiles
        ("ConvTranspose", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), (6, 4, 3, 3)),
    ],
)
def test_sessions_agree_with_the_reference_evaluator(op, attrs, w_shape):
    rng = np.random.default_rng(11)
    weights = rng.standard_normal(w_shape, dtype=np.float32)
    bias = rng.standard_normal(
        w_shape[1] * attrs.get("group", 1) if op == "ConvTranspose" else w_shape[0], dtype=np.float32
    )
    x = rng.standard_normal((2, 6, 15, 14), dtype=np.float32)
    model = make_model(
        [helper.make_node(op, ["x", "w", "b"], ["y"], **attrs)],
        [("x", TensorProto.FLOAT, list(x.shape))],
        [("y", TensorProto.FLOAT, None)],
        {"w": weights, "b": bias},
    )
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, rtol=1e-4, atol=1e-4)


def _child(queue):
    x, weights, bias, attrs = _case(LAYERS[1])
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        y = convolve(x, weights, bias, packed=PackedConv(weights, 1), **attrs)
    queue.put((_team.parallel_ready(), float(np.abs(y).sum())))


def test_a_forked_child_keeps_out_of_its_parents_team():
    """GNU OpenMP aborts a forked child that enters a parallel region its parent used: the child
    must run the serial forms (and finish)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("this platform cannot fork")
    x, weights, bias, attrs = _case(LAYERS[1])
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        expected = convolve(x, weights, bias, packed=PackedConv(weights, 1), **attrs)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    ready, total = queue.get(timeout=5)
    assert ready is False or not _team.parallel_ready()  # a parent that never started it lends nothing
    assert total == pytest.approx(float(np.abs(expected).sum()), rel=1e-6)


@pytest.mark.parametrize("threads", [2, 0])  # 0: the default, the libraries' own count
def test_a_team_run_pins_blas_and_the_session_restores_it(monkeypatch, threads):
    """The run that starts the team sets BLAS to one thread (no OpenBLAS worker polling beside it)
    and reads its own thread count from the run; after the run the BLAS count is what it was."""
    from onnxplug.kernels import current_run

    seen = []
    original = _f32_conv.BoundLayer.__call__

    def spy(*args, **kwargs):
        result = original(*args, **kwargs)
        run = current_run()
        controllers = threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers
        numpys = [c for c in controllers if "numpy" in c.filepath]  # the BLAS the provider calls
        seen.append((run.threads, [c.get_num_threads() for c in numpys]))
        return result

    monkeypatch.setattr(_f32_conv.BoundLayer, "__call__", spy)
    weights = np.random.default_rng(19).standard_normal((16, 8, 3, 3), dtype=np.float32)
    model = make_model(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        [("x", TensorProto.FLOAT, [1, 8, 64, 64])],
        [("y", TensorProto.FLOAT, None)],
        {"w": weights},
    )
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxplug.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(20).standard_normal((1, 8, 64, 64), dtype=np.float32)
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        session.run(None, {"x": x})
        after = [c["num_threads"] for c in threadpoolctl.threadpool_info() if "numpy" in c["filepath"]]
    assert seen and seen[0][0] == 2, seen
    if _team.parallel_ready():
        assert all(count == 1 for count in seen[0][1]), seen  # pinned during the run
    assert all(count == 2 for count in after)  # restored


def test_pointwise_bias_and_clamp_in_the_store_are_the_epilogues_bits():
    """A pointwise layer adds its bias and clamps in the tiles' store: the same bits as the sums
    then ``+ b`` then the clamp in float32, NaN kept."""
    rng = np.random.default_rng(23)
    x = rng.standard_normal((1, 20, 9, 11), dtype=np.float32)
    x[0, 3, 4, 5] = np.nan
    weights = rng.standard_normal((13, 20, 1, 1), dtype=np.float32)
    bias = rng.standard_normal(13, dtype=np.float32)
    plain = convolve(x, weights, None, packed=PackedConv(weights, 1))
    fused = convolve(x, weights, bias, packed=PackedConv(weights, 1), clamp=(-0.5, 2.0))
    expected = np.clip(plain + bias.reshape(1, -1, 1, 1), np.float32(-0.5), np.float32(2.0))
    np.testing.assert_array_equal(fused, expected)
    assert np.isnan(fused[0, :, 4, 5]).all()


# (batch, channels, maps, height, width, kernel, strides, pads, group)
GROUPED = [
    (1, 12, 12, 14, 14, (1, 1), (1, 1), (0, 0, 0, 0), 3),  # ShuffleNet's grouped 1×1, read in place
    (2, 8, 16, 9, 11, (3, 3), (1, 1), (1, 1, 1, 1), 2),  # gathered, cropped by the epilogue
    (1, 6, 9, 10, 10, (1, 1), (2, 2), (0, 0, 0, 0), 3),  # stride 2: stored straight into the output
    (1, 40, 20, 7, 7, (3, 3), (2, 2), (1, 1, 1, 1), 4),  # 7 rows of output channels a group
]


def _grouped_case(layer, seed=29):
    n, c, m, h, w, kernel, strides, pads, group = layer
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    weights = rng.standard_normal((m, c // group, *kernel), dtype=np.float32)
    bias = rng.standard_normal(m, dtype=np.float32)
    return x, weights, bias, dict(strides=strides, pads=pads, group=group)


@pytest.mark.parametrize("layer", GROUPED, ids=lambda layer: "x".join(map(str, layer[:5])) + f"-g{layer[8]}")
def test_grouped_layers_with_a_residual_match_a_float64_sum_on_any_split(layer, monkeypatch):
    """All groups in one call: each reads its own block of input channels and writes its rows,
    with the bias, the residual and the clamp; the same bits on one thread, the team and Python
    threads."""
    x, weights, bias, attrs = _grouped_case(layer)
    expected = _reference(x, weights, bias, attrs)
    residual = np.random.default_rng(31).standard_normal(expected.shape, dtype=np.float32)
    want = np.clip(expected + residual, 0.0, 2.0)
    results = []
    for threads, team in ((1, "1"), (2, "1"), (2, "0")):
        monkeypatch.setenv("ONNXPLUG_CPU_TEAM", team)
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            packed = PackedConv(weights, attrs["group"])
            results.append(convolve(x, weights, bias, packed=packed, residual=residual, clamp=(0.0, 2.0), **attrs))
    assert results[0].shape == want.shape
    np.testing.assert_allclose(results[0], want, atol=2e-5 * np.sqrt(weights[0].size) * max(1.0, np.abs(want).max()))
    for other in results[1:]:
        np.testing.assert_array_equal(results[0], other)


def test_a_residual_stored_by_the_tiles_is_the_epilogues_bits():
    """Where the tiles store the output (pointwise, and stride 2 without padding), the residual is
    added in their store: the same bits as the sums, ``+ b``, ``+ z``, then the clamp, NaN kept."""
    rng = np.random.default_rng(37)
    for strides in ((1, 1), (2, 2)):
        x = rng.standard_normal((2, 20, 9, 11), dtype=np.float32)
        weights = rng.standard_normal((13, 20, 1, 1), dtype=np.float32)
        bias = rng.standard_normal(13, dtype=np.float32)
        plain = convolve(x, weights, None, strides=strides, packed=PackedConv(weights, 1))
        residual = rng.standard_normal(plain.shape, dtype=np.float32)
        residual[1, 2, 0, 1] = np.nan
        fused = convolve(
            x, weights, bias, strides=strides, packed=PackedConv(weights, 1), residual=residual, clamp=(-0.5, 2.0)
        )
        expected = np.clip((plain + bias.reshape(1, -1, 1, 1)) + residual, np.float32(-0.5), np.float32(2.0))
        np.testing.assert_array_equal(fused, expected)
        assert np.isnan(fused[1, 2, 0, 1])


@pytest.mark.parametrize("columns", [1, 15, 16, 17, 33, 48, 49, 64, 65, 196])
def test_short_last_tiles_compute_only_their_columns(columns):
    """A last tile of 48, 32 or 16 columns or fewer takes a narrower tile: every column is still
    computed and nothing past the output is written."""
    rng = np.random.default_rng(41)
    a = rng.standard_normal((7, 30), dtype=np.float32)
    b = rng.standard_normal((30, columns), dtype=np.float32)
    np.testing.assert_allclose(_f32_products.matrix_product(a, b), a @ b, rtol=1e-5, atol=1e-5)
    loops = _f32_conv.loops()
    guarded = np.full((7, columns + 64), 7.0, dtype=np.float32)  # 64 sentinel columns a row
    offsets = np.arange(30, dtype=np.int64) * columns
    no_bias, no_residual, inf = np.zeros(0, np.float32), np.zeros((0, 0), np.float32), np.float32(np.inf)
    count = loops.tile_count(7, 1, columns)
    no_crop = (np.zeros(0, np.uint16), np.zeros(0, np.int64))
    for chunk in (1, 2, count):  # column-major, in chunks, weights-first: the same sums
        args = (no_bias, no_residual, -inf, inf, *no_crop, chunk, np.float32(np.nan), False, 0, 0, count)
        loops.tiles(a, b.reshape(-1), offsets, guarded, columns, 1, 0, *args)
        np.testing.assert_allclose(guarded[:, :columns], a @ b, rtol=1e-5, atol=1e-5)
        assert (guarded[:, columns:] == 7.0).all()
    x = rng.standard_normal((1, 5, 1, columns), dtype=np.float32)
    weights = rng.standard_normal((9, 5, 1, 1), dtype=np.float32)
    got = convolve(x, weights, None, packed=PackedConv(weights, 1))
    np.testing.assert_allclose(got, _reference(x, weights, np.zeros(9, np.float32), {}), rtol=1e-5, atol=1e-5)


def test_a_node_s_later_calls_reuse_its_plan_and_still_check_their_inputs(monkeypatch):
    """The first call of a shape plans the layer and keeps the plan with the weights (a
    ``BoundLayer``) on the node's PackedConv; later calls with the node's own attribute objects
    skip the routing (same bits), a bias of the wrong shape is still refused, and switching the
    tiles off still takes effect."""
    from onnxplug.errors import Fail

    x, weights, bias, _ = _case(LAYERS[1])
    attrs = dict(strides=[1, 1], pads=[1, 1, 1, 1], dilations=None)  # one set of objects, as a node's
    packed = PackedConv(weights, 1)
    first = convolve(x, weights, bias, packed=packed, clamp=(0.0, 6.0), **attrs)
    planned, ran = [], []
    monkeypatch.setattr(_f32_conv, "plan", lambda *a: planned.append(a))
    original = _f32_conv.BoundLayer.__call__
    monkeypatch.setattr(_f32_conv.BoundLayer, "__call__", lambda *a: ran.append(1) or original(*a))
    np.testing.assert_array_equal(convolve(x, weights, bias, packed=packed, clamp=(0.0, 6.0), **attrs), first)
    assert ran == [1] and planned == []
    with pytest.raises(Fail, match="B shape"):
        convolve(x, weights, bias[:-1], packed=packed, **attrs)
    monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "0")
    ran.clear()
    off = convolve(x, weights, bias, packed=packed, clamp=(0.0, 6.0), **attrs)
    assert ran == [] and np.abs(off - first).max() < 1e-4


def test_a_node_keeps_its_compiled_layers_for_a_bounded_number_of_shapes():
    """A node fed ever new input shapes (dynamic image sizes) keeps the compiled layers of its
    last ``_REMEMBERED_SHAPES`` only, and every call still computes its own shape."""
    from onnxplug_cpu import numerics

    rng = np.random.default_rng(21)
    weights = rng.standard_normal((8, 4, 3, 3), dtype=np.float32)
    packed = PackedConv(weights, 1)
    attrs = dict(pads=[1, 1, 1, 1])
    for side in range(4, 4 + numerics._REMEMBERED_SHAPES + 5):
        x = rng.standard_normal((1, 4, side, side + 1), dtype=np.float32)
        got = convolve(x, weights, None, packed=packed, **attrs)
        expected = _reference(x, weights, np.zeros(8, np.float32), attrs)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
        assert len(packed._bound) <= numerics._REMEMBERED_SHAPES
    assert (1, 4, 4, 5) not in packed._bound  # the first shapes went first


def test_a_bound_layer_keeps_arguments_only_for_the_same_bias_and_store():
    """A bound layer keeps its compiled call's arguments for the last bias, clamp and SiLU
    objects: a call with another bias (or the same values in a new array), another clamp, no
    bias, or a residual computes with what it was given, and the kept arguments come back."""
    x, weights, bias, attrs = _case(LAYERS[1])
    layer = _f32_conv.plan(x.shape, weights.shape[0], 1, (3, 3), (1, 1), None, (1, 1, 1, 1), "NOTSET")
    bound = _f32_conv.BoundLayer(layer, np.ascontiguousarray(weights.reshape(weights.shape[0], -1)))
    plain = _reference(x, weights, np.zeros_like(bias), dict(strides=[1, 1], pads=[1, 1, 1, 1])).astype(np.float32)
    relu, six = (0.0, np.inf), (0.0, 6.0)
    other = bias[::-1].copy()
    residual = np.random.default_rng(5).standard_normal(plain.shape, dtype=np.float32)
    calls = [
        (bias, None, relu, np.maximum(plain + bias[:, None, None], 0)),
        (bias, None, relu, np.maximum(plain + bias[:, None, None], 0)),
        (other, None, relu, np.maximum(plain + other[:, None, None], 0)),
        (other, None, six, np.clip(plain + other[:, None, None], 0, 6)),
        (None, None, six, np.clip(plain, 0, 6)),
        (bias, residual, relu, np.maximum(plain + bias[:, None, None] + residual, 0)),
        (bias, None, relu, np.maximum(plain + bias[:, None, None], 0)),
    ]
    for b, z, clamp, expected in calls:
        np.testing.assert_allclose(bound(x, b, z, clamp), expected, atol=1e-4)
    other[:] = bias  # the kept arguments read the array the node passes, as it is now
    np.testing.assert_allclose(bound(x, other, None, six), np.clip(plain + bias[:, None, None], 0, 6), atol=1e-4)


@pytest.mark.parametrize("chunk", [1, 3, 1000])
@pytest.mark.parametrize(
    "layer", [LAYERS[0], LAYERS[5], LAYERS[9], LAYERS[12]], ids=["s2", "s1-dilated", "k7s3", "s2-left-pad-2"]
)
def test_cropping_tiles_store_exactly_the_output(layer, chunk):
    """A gathered layer's tiles compress each vector's kept columns into the output rows: every
    output cell is written once with the bias, the residual and the clamp, and nothing past a row
    of the output is touched (64 sentinel columns a row)."""
    x, weights, bias, attrs = _case(layer)
    expected = _reference(x, weights, bias, attrs)
    residual = np.random.default_rng(43).standard_normal(expected.shape, dtype=np.float32)
    want = np.clip(expected + residual, -1.0, 2.0)
    packed = PackedConv(weights, 1)
    pads = tuple(attrs["pads"])
    layer_plan = _f32_conv.plan(
        x.shape, weights.shape[0], 1, weights.shape[2:], attrs["strides"], attrs["dilations"], pads, "NOTSET"
    )
    assert not layer_plan.direct and layer_plan.keep.size
    loops = _f32_conv.loops()
    geometry = layer_plan.geometry
    n, m, oh, ow = layer_plan.shape
    for image in range(n):
        planes = np.empty((len(geometry.phases), x.shape[1], geometry.length), np.float32)
        loops.gather(
            x[image], planes, *geometry.stride, *geometry.pads, geometry.phases, geometry.hq, geometry.wq, 0, x.shape[1]
        )
        guarded = np.full((m, oh * ow + 64), 7.0, dtype=np.float32)
        z = np.zeros((m, oh * ow + 64), np.float32)
        z[:, : oh * ow] = residual[image].reshape(m, -1)
        count = loops.tile_count(m, 1, geometry.columns)
        loops.tiles(
            packed.matrix[0],
            planes.reshape(-1),
            layer_plan.offsets,
            guarded,
            geometry.columns,
            1,
            0,
            bias,
            z,
            np.float32(-1.0),
            np.float32(2.0),
            layer_plan.keep,
            layer_plan.at,
            chunk,
            np.float32(np.nan),  # no SiLU
            False,  # the planes, not the input read in place
            0,  # no tail
            0,
            count,
        )
        assert (guarded[:, oh * ow :] == 7.0).all()
        np.testing.assert_allclose(
            guarded[:, : oh * ow].reshape(m, oh, ow), want[image], atol=2e-5 * np.sqrt(weights[0].size) * 4
        )


def test_every_tile_order_gives_the_same_bits():
    """Layers run their tiles column-major, weights-first, or in chunks of column tiles in
    between (``ConvPlan.chunk``); each tile's sums are the same in any order."""
    x, weights, bias, attrs = _case(LAYERS[1])
    matrix = np.ascontiguousarray(weights.reshape(weights.shape[0], -1))
    layer = _f32_conv.plan(x.shape, weights.shape[0], 1, (3, 3), None, None, (1, 1, 1, 1), "NOTSET")
    results, planned = [], layer.chunk  # a cached plan: restored after
    try:
        for chunk in (1, 2, 5, 1000):
            layer.chunk = chunk
            results.append(_f32_conv.run(layer, x, matrix, bias, None, (0.0, 6.0)))
    finally:
        layer.chunk = planned
    for other in results[1:]:
        np.testing.assert_array_equal(results[0], other)
    wide = _f32_conv.plan((1, 256, 4, 40), 256, 1, (3, 3), None, None, (1, 1, 1, 1), "NOTSET")
    assert wide.chunk == 3  # ocr_rec's 256-channel layer on a 4×40 map: weights first (3 tiles)
    stem = _f32_conv.plan((1, 3, 224, 224), 64, 1, (3, 3), None, None, (1, 1, 1, 1), "NOTSET")
    assert stem.chunk >= 256  # a stem's 3 channels: each output row written a third of it at a time
    strided = _f32_conv.plan((1, 3, 320, 320), 32, 1, (3, 3), (2, 2), None, (1, 1, 1, 1), "NOTSET")
    assert 1 < strided.chunk < 403  # a stride-2 stem's four phases of 3 channels: chunks
    wider = _f32_conv.plan((1, 16, 112, 112), 96, 1, (1, 1), None, None, (0, 0, 0, 0), "NOTSET")
    assert wider.chunk == 1  # column-major: each column tile's input stays in L1 across the rows


@pytest.mark.parametrize("layer", [LAYERS[1], LAYERS[3], LAYERS[4]], ids=["gathered", "pointwise", "strided"])
@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_silu_in_the_store_matches_the_separate_pass(layer, alpha, monkeypatch):
    """FusedConv's QuickGelu in the tiles' store (exp in LLVM IR, as kernels._vexp computes it):
    within 2 ulp-scale of the convolution then numerics.silu; a residual is added before it;
    exp's overflow gives an exact 0 and NaN stays NaN."""
    from onnxplug_cpu.numerics import silu

    x, weights, bias, attrs = _case(layer)
    x = x * 40  # sums far past exp's range on both sides
    x[0, 0, 0, 0] = np.nan
    packed = PackedConv(weights, 1)
    plain = convolve(x, weights, bias, packed=packed, **attrs)
    residual = np.random.default_rng(47).standard_normal(plain.shape, dtype=np.float32)
    fused = convolve(x, weights, bias, packed=packed, residual=residual, silu_alpha=alpha, **attrs)
    want = silu(plain + residual, alpha)
    finite = np.isfinite(want)
    np.testing.assert_allclose(fused[finite], want[finite], rtol=3e-7, atol=1e-37)
    np.testing.assert_array_equal(np.isnan(fused), np.isnan(want))
    assert (fused[plain + residual < -200 / alpha] == 0).all()
    monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "0")  # the numpy path: the separate pass
    np.testing.assert_array_equal(
        convolve(x, weights, bias, packed=PackedConv(weights, 1), residual=residual, silu_alpha=alpha, **attrs)[finite],
        silu(convolve(x, weights, bias, packed=PackedConv(weights, 1), residual=residual, **attrs), alpha)[finite],
    )


def _read_only(array):
    view = array.view()
    view.flags.writeable = False
    return view


@pytest.mark.parametrize("layer", [LAYERS[0], LAYERS[2]], ids=["gathered", "in-place"])
def test_read_only_and_writable_arrays_share_one_compiled_loop(layer, monkeypatch):
    """A model's initializers and feeds reach the layer read-only, its intermediates writable.
    Each loop has one compiled signature (every input it only reads typed read-only): left to
    compile per call, numba built a specialisation for each mix, 16 of ``convolve_images`` in the
    test suite at ~13 s of LLVM each on a cold cache."""
    x, weights, bias, attrs = _case(layer)
    residual = np.random.default_rng(5).standard_normal(convolve(x, weights, bias, **attrs).shape, dtype=np.float32)
    results = []
    for split in ("1", "2"):  # the driver on the team, and its serial loops on Python threads
        monkeypatch.setenv("ONNXPLUG_CPU_TEAM", "1" if split == "1" else "0")
        with threadpoolctl.threadpool_limits(int(split), user_api="blas"):
            for wrap in (lambda a: a, _read_only):
                packed = PackedConv(wrap(weights), 1)
                got = convolve(wrap(x), wrap(weights), wrap(bias), packed=packed, residual=wrap(residual), **attrs)
                results.append(got)
    for other in results[1:]:
        np.testing.assert_array_equal(results[0], other)
    # and the products on the same tiles
    product = _f32_products.matrix_product(
        _read_only(weights.reshape(weights.shape[0], -1)), _read_only(np.ones((weights[0].size, 5), np.float32))
    )
    np.testing.assert_allclose(
        product, weights.reshape(weights.shape[0], -1).sum(axis=1, keepdims=True).repeat(5, 1), rtol=1e-5
    )
    compiled = _f32_conv.loops()
    for loop in (compiled.convolve_images, compiled.gather, compiled.tiles, compiled.tiles_parallel):
        assert len(loop.signatures) == 1, loop.__name__
