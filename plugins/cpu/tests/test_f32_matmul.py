"""Products with a constant right operand on the tiles, read in place (``kernels._f32_matmul``):
values against a float64 product over widths that leave a short last column tile, row counts
that leave a short last row tile, depths of one block and several, batched left operands; the
convolution tiles' bits where the depth is one block (the prefetching tiles included), the same
bits however the tiles are split over threads; MatMul and Gemm nodes through a session against
onnx's reference evaluator, with the tiles taken; which operands qualify; numba's cache."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxplug
from onnxplug.testing import make_model
from onnxplug_cpu import numerics
from onnxplug_cpu.kernels import _f32_conv, _f32_matmul, _f32_products

pytest.importorskip("numba")
if os.environ.get("ONNXPLUG_CPU_JIT", "1") == "0":
    pytest.skip("the compiled kernels are disabled by ONNXPLUG_CPU_JIT=0", allow_module_level=True)
if _f32_conv.loops() is None:
    pytest.skip("the float32 tiles need a CPU with AVX-512F (this one has none)", allow_module_level=True)

threadpoolctl = pytest.importorskip("threadpoolctl")

pytestmark = pytest.mark.numba


@pytest.fixture(autouse=True)
def tiles_on(monkeypatch):
    monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "1")


def _operands(rows, depth, width, seed=3):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, depth), dtype=np.float32), rng.standard_normal((depth, width), dtype=np.float32)


@pytest.mark.parametrize(
    "rows, depth, width",
    [
        (8, 64, 256),  # whole column tiles
        (13, 100, 130),  # a 2-column last tile, a short last row tile
        (40, 1700, 100),  # a 36-column last tile; three blocks of depth, the last short
        (9, 900, 60),  # a single short column tile; two blocks
        (128, 96, 200),  # many prefetching tiles
    ],
)
def test_products_match_a_float64_product(rows, depth, width):
    a, b = _operands(rows, depth, width)
    weights = _f32_matmul.ConstantRight(b)
    assert weights.applies(a)
    got = weights.times(a)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert got.shape == (rows, width) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("rows, depth, width", [(30, 64, 200), (128, 96, 130)])
def test_one_block_gives_the_bits_of_the_convolution_tiles(rows, depth, width):
    """Within one block of depth each sum has the same products in the same order as the
    convolution tiles' product (``matrix_product``): prefetching changes no value."""
    assert depth <= _f32_matmul.loops().BLOCK
    a, b = _operands(rows, depth, width, seed=5)
    np.testing.assert_array_equal(_f32_matmul.ConstantRight(b).times(a), _f32_products.matrix_product(a, b))


def test_the_split_over_threads_keeps_the_bits(monkeypatch):
    a, b = _operands(70, 900, 300, seed=7)
    weights = _f32_matmul.ConstantRight(b)
    results = []
    for threads in (1, 2):
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            results.append(weights.times(a))
    np.testing.assert_array_equal(results[0], results[1])
    monkeypatch.setenv("ONNXPLUG_CPU_TEAM", "0")  # without the team the product is left to numpy
    assert not weights.applies(a)


@pytest.mark.parametrize(
    "rows, depth, width",
    [
        (13, 100, 1024),  # whole panels, a short last row tile
        (40, 1700, 2048),  # three blocks of depth, the last short
        (9, 900, 1100),  # a 12-column last panel (the stride patched below); two blocks
    ],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_panels_give_the_bits_of_the_weights_as_stored(rows, depth, width, threads, monkeypatch):
    """Weights whose rows lie a multiple of ``PANEL_STRIDE`` bytes apart are copied into panels of
    64 columns; the product over them has the same blocks, tiles and sums as over the weights as
    stored: the same bits, with and without a Gemm's ``C``, on one thread or split."""
    a, b = _operands(rows, depth, width, seed=13)
    if width % 1024:
        monkeypatch.setattr(_f32_matmul, "PANEL_STRIDE", 4)  # any row stride: a ragged last panel
    packed = _f32_matmul.ConstantRight(b)
    assert packed.panels is not None and packed.panels.shape == (-(-width // 64), depth, 64)
    monkeypatch.setattr(_f32_matmul, "PANEL_STRIDE", 3)  # no float32 row is 3 bytes apart
    monkeypatch.setattr(_f32_matmul, "PANEL_MIN_BYTES", b.nbytes + 1)
    stored = _f32_matmul.ConstantRight(b)
    assert stored.panels is None
    c = np.random.default_rng(2).standard_normal(width, dtype=np.float32)
    with threadpoolctl.threadpool_limits(threads, user_api="blas"):
        np.testing.assert_array_equal(packed.times(a), stored.times(a))
        np.testing.assert_array_equal(packed.times(a, c), stored.times(a, c))
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(packed.times(a), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_large_weights_go_in_panels_whatever_their_width(monkeypatch):
    """From ``PANEL_MIN_BYTES`` on, weights of any width are copied into panels (a ragged last
    one included); below it only rows a multiple of ``PANEL_STRIDE`` bytes apart are."""
    b = np.random.default_rng(4).standard_normal((96, 1000), dtype=np.float32)  # rows 4000 bytes apart
    assert _f32_matmul.ConstantRight(b).panels is None
    monkeypatch.setattr(_f32_matmul, "PANEL_MIN_BYTES", b.nbytes)
    packed = _f32_matmul.ConstantRight(b)
    assert packed.panels is not None and packed.panels.shape == (16, 96, 64)
    a = np.random.default_rng(5).standard_normal((20, 96), dtype=np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(packed.times(a), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_the_panel_constants_are_the_loops_own():
    loops = _f32_matmul.loops()
    assert (_f32_matmul.COLUMNS, _f32_matmul.BLOCK) == (loops.COLUMNS, loops.BLOCK)


def test_batched_left_operands_keep_their_leading_axes():
    rng = np.random.default_rng(11)
    a = rng.standard_normal((2, 3, 17, 64), dtype=np.float32)
    b = rng.standard_normal((64, 260), dtype=np.float32)
    got = _f32_matmul.ConstantRight(b).times(a[:, :, :, :])
    assert got.shape == (2, 3, 17, 260)
    np.testing.assert_allclose(got, np.matmul(a.astype(np.float64), b), rtol=2e-5, atol=1e-4)


def test_only_large_row_major_float32_matrices_qualify(monkeypatch):
    assert _f32_matmul.prepare(np.ones((64, 64), np.float64)) is None
    assert _f32_matmul.prepare(np.ones((16, 16), np.float32)) is None  # under MIN_VALUES
    assert _f32_matmul.prepare(np.ones((4, 64, 64), np.float32)) is None  # batched weights stay numpy's
    assert _f32_matmul.prepare(np.ones((256, 128), np.float32).T) is None  # the tiles read rows in place
    weights = np.ones((128, 128), np.float32)
    assert _f32_matmul.prepare(weights).b is weights  # not copied
    monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "0")
    assert _f32_matmul.prepare(weights) is None


def _spy_on_times(monkeypatch):
    calls = []
    original = _f32_matmul.ConstantRight.times

    def spy(self, a):
        calls.append(a.shape)
        return original(self, a)

    monkeypatch.setattr(_f32_matmul.ConstantRight, "times", spy)
    return calls


def _session(model):
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = 2
    return onnxplug.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def test_a_matmul_with_constant_weights_runs_on_the_tiles(monkeypatch):
    calls = _spy_on_times(monkeypatch)
    rng = np.random.default_rng(2)
    weights = rng.standard_normal((96, 200), dtype=np.float32)
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    model = make_model(
        [node], [("x", TensorProto.FLOAT, [1, 40, 96])], [("y", TensorProto.FLOAT, None)], {"w": weights}
    )
    x = rng.standard_normal((1, 40, 96), dtype=np.float32)
    got = _session(model).run(None, {"x": x})[0]
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert calls == [(1, 40, 96)]


@pytest.mark.parametrize("trans_b", [0, 1])
def test_a_gemm_with_constant_weights_runs_on_the_tiles_unless_transposed(monkeypatch, trans_b):
    calls = _spy_on_times(monkeypatch)
    rng = np.random.default_rng(4)
    weights = rng.standard_normal((200, 96) if trans_b else (96, 200), dtype=np.float32)
    bias = rng.standard_normal(200, dtype=np.float32)
    node = helper.make_node("Gemm", ["x", "w", "c"], ["y"], alpha=0.5, beta=2.0, transB=trans_b)
    model = make_model(
        [node], [("x", TensorProto.FLOAT, [24, 96])], [("y", TensorProto.FLOAT, None)], {"w": weights, "c": bias}
    )
    x = rng.standard_normal((24, 96), dtype=np.float32)
    got = _session(model).run(None, {"x": x})[0]
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert calls == ([] if trans_b else [(24, 96)])


@pytest.mark.parametrize("c_shape", [(200,), (1, 200), (24, 200), (1,)])
def test_a_gemm_s_c_goes_in_first_and_the_tiles_add_onto_it(c_shape, monkeypatch):
    """With ``alpha = beta = 1`` a Gemm's ``C`` (broadcast) is put in the output first and every
    block of the product added onto it: no pass of its own; a ``C`` that does not broadcast is
    refused as numpy's path refuses it."""
    from onnxplug.errors import InvalidArgument
    from onnxplug_cpu.kernels import math as linear

    rng = np.random.default_rng(6)
    a = rng.standard_normal((24, 900), dtype=np.float32)  # two blocks of depth
    b = rng.standard_normal((900, 200), dtype=np.float32)
    c = rng.standard_normal(c_shape, dtype=np.float32)
    weights = _f32_matmul.prepare(b)
    calls = []
    original = _f32_matmul.ConstantRight.times
    monkeypatch.setattr(
        _f32_matmul.ConstantRight,
        "times",
        lambda self, left, start=None: calls.append(start is not None) or original(self, left, start),
    )
    got = linear.gemm_product(a, b, c, 1.0, 1.0, 0, 0, weights)
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    assert calls == [True]
    with pytest.raises(InvalidArgument, match="does not broadcast"):
        linear.gemm_product(a, b, np.ones(7, np.float32), 1.0, 1.0, 0, 0, weights)


def test_a_new_process_loads_the_loops_from_numba_cache(cache_misses_in_new_processes):
    code = (
        "import numpy as np\n"
        "from onnxplug_cpu.kernels import _f32_matmul, _f32_matmul_loops as loops\n"
        "a = np.ones((64, 64), np.float32); w = _f32_matmul.ConstantRight(np.ones((64, 130), np.float32))\n"
        "y = np.empty((64, 130), np.float32)\n"
        "loops.product(a, w.b, w.offsets, y, False); loops.product_parallel(a, w.b, w.offsets, y, True, 2)\n"
        "p = _f32_matmul.ConstantRight(np.ones((64, 1024), np.float32)); z = np.empty((64, 1024), np.float32)\n"
        "loops.panel_product(a, p.panels, p.offsets, z, False)\n"
        "loops.panel_product_parallel(a, p.panels, p.offsets, z, True, 2)\n"
        "compiled = (loops.product, loops.product_parallel, loops.panel_product, loops.panel_product_parallel)\n"
        "print(sum(sum(f.stats.cache_misses.values()) for f in compiled))\n"
    )
    first, second = cache_misses_in_new_processes(code)
    assert first > 0 and second == 0


@pytest.mark.parametrize("lead, m, depth, width", [((2, 3), 13, 64, 70), ((12,), 128, 64, 128), ((1, 4), 40, 900, 33)])
def test_batched_products_match_a_float64_product(lead, m, depth, width):
    """Attention's per-head products (``numerics.batched_matmul``): every matrix's tiles in one
    range, heads split between threads mid-matrix, depths past one block."""
    rng = np.random.default_rng(len(lead) + m)
    a = rng.standard_normal((*lead, m, depth), dtype=np.float32)
    b = rng.standard_normal((*lead, width, depth), dtype=np.float32).swapaxes(-1, -2)  # as kᵀ: a view
    got = _f32_matmul.batched(a, b)
    assert got is not None and got.shape == (*lead, m, width)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    with threadpoolctl.threadpool_limits(1, user_api="blas"):  # one thread: the same bits
        np.testing.assert_array_equal(_f32_matmul.batched(a, b), got)


@pytest.mark.parametrize("parts", [1, 2, 5])
def test_strided_heads_are_laid_out_as_copies_of_themselves(parts):
    """Attention's operands as views of the (B, S, N·H) projections (Q's heads, Kᵀ): the copy made
    on the run's threads is the view's values in C order, however the heads are split."""
    rng = np.random.default_rng(9)
    projection = rng.standard_normal((1, 37, 8 * 16), dtype=np.float32)
    heads = projection.reshape(1, 37, 8, 16).transpose(0, 2, 1, 3)  # (B, N, S, H); one batch: views
    for view in (heads, heads.swapaxes(-1, -2)):
        grouped = view.reshape(8, *view.shape[2:])
        assert not grouped.flags.c_contiguous
        copy = _f32_matmul.laid_out(grouped, parts)
        assert copy.flags.c_contiguous
        np.testing.assert_array_equal(copy, np.ascontiguousarray(grouped))


def test_batched_products_leave_other_operands_to_numpy():
    a = np.ones((2, 16, 8), np.float32)
    assert _f32_matmul.batched(a, np.ones((1, 8, 4), np.float32)) is None  # broadcasting leading axes
    assert _f32_matmul.batched(a.astype(np.float64), np.ones((2, 8, 4))) is None
    assert _f32_matmul.batched(a[:, :4], np.ones((2, 8, 4), np.float32)) is None  # fewer than MIN_ROWS rows
    assert _f32_matmul.batched(a[0], np.ones((8, 4), np.float32)) is None  # 2-D: MatMul's own path
    np.testing.assert_array_equal(
        numerics.batched_matmul(a[:, :4], np.ones((2, 8, 4), np.float32)), np.full((2, 4, 4), 8)
    )


@pytest.mark.parametrize("parts", [1, 2, 5])
def test_shifts_are_added_in_the_laid_out_copies(parts, monkeypatch):
    """``batched_matmul(a, b, a_shift=, b_shift=)``: attention's per-head Q and V biases (one per
    column) and K's (one per row of Kᵀ) added in the copies the products make, on contiguous and
    strided operands: the same bits as adding them first, and numpy's product where the tiles
    decline."""
    monkeypatch.setattr(_f32_matmul, "team_parts", lambda groups, m, width: parts)
    rng = np.random.default_rng(11)
    q = rng.standard_normal((1, 37, 8 * 16), dtype=np.float32).reshape(1, 37, 8, 16).transpose(0, 2, 1, 3)
    k = rng.standard_normal((1, 29, 8 * 16), dtype=np.float32).reshape(1, 29, 8, 16).transpose(0, 2, 1, 3)
    q_shift, k_shift = (rng.standard_normal((1, 8, 1, 16), dtype=np.float32) for _ in range(2))
    kt, kt_shift = k.swapaxes(-1, -2), k_shift.swapaxes(-1, -2)  # (1, 8, 16, 29) and (1, 8, 16, 1)
    for left in (q, np.ascontiguousarray(q)):
        got = numerics.batched_matmul(left, kt, a_shift=q_shift, b_shift=kt_shift)
        np.testing.assert_array_equal(got, _f32_matmul.batched(left + q_shift, kt + kt_shift))
        want = np.matmul((left + q_shift).astype(np.float64), (kt + kt_shift).astype(np.float64))
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    few = q[:, :, :4]  # fewer than MIN_ROWS rows: numpy's product, shifts added first
    np.testing.assert_array_equal(
        numerics.batched_matmul(few, kt, a_shift=q_shift, b_shift=kt_shift), np.matmul(few + q_shift, kt + kt_shift)
    )
