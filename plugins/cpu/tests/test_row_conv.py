"""The row tiles (``kernels._row_conv``): output channels in the lanes, positions of one output
row in registers, the padding's taps left out.  Their sums against a float64 convolution, which
layers they take, what their tables leave out, the same bits on any split and on the kept and
bound calls, and nothing written outside the output."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxplug
from onnxplug.kernels import RunState, enter_run, leave_run
from onnxplug.testing import make_model
from onnxplug_cpu.kernels import _row_conv
from onnxplug_cpu.numerics import PackedConv, convolve

pytest.importorskip("numba")
if os.environ.get("ONNXPLUG_CPU_JIT", "1") == "0":
    pytest.skip("the compiled kernels are disabled by ONNXPLUG_CPU_JIT=0", allow_module_level=True)
if _row_conv.loops() is None:
    pytest.skip("the row tiles need a CPU with AVX-512F (this one has none)", allow_module_level=True)

pytestmark = pytest.mark.numba


@pytest.fixture(autouse=True)
def rows_on(monkeypatch):
    monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "1")
    monkeypatch.setenv("ONNXPLUG_CPU_ROW_TILES", "1")
    monkeypatch.delenv("ONNXPLUG_CPU_TEAM", raising=False)


# (batch, channels, maps, height, width, kernel, stride, pad): every tile width from 4 to 12, a
# partial last block of channels (33, 40, 48), strides 1 and 2, pads 0 and 1, 2×2 and 1×3 kernels
LAYERS = [
    (1, 16, 32, 7, 7, (3, 3), 1, 1),
    (2, 16, 48, 9, 13, (3, 3), 1, 1),
    (1, 16, 33, 6, 25, (3, 3), 2, 1),
    (2, 32, 64, 2, 40, (2, 2), 1, 1),
    (1, 20, 40, 11, 56, (3, 3), 1, 1),
    (1, 16, 32, 5, 10, (3, 3), 1, 0),
    (2, 16, 96, 14, 14, (3, 3), 2, 1),
    (1, 64, 32, 8, 23, (2, 2), 2, 0),
    (1, 16, 64, 3, 48, (3, 3), 1, 1),
    (1, 16, 32, 4, 4, (3, 3), 1, 1),
    (1, 16, 32, 5, 5, (3, 3), 1, 1),
    (1, 16, 32, 6, 9, (3, 3), 1, 1),
    (1, 16, 32, 3, 11, (3, 3), 1, 1),
    (1, 48, 32, 5, 8, (1, 3), 1, 1),
    (1, 16, 32, 9, 11, (5, 5), 1, 2),
    (2, 16, 48, 13, 27, (3, 3), 2, 3),
    (1, 16, 32, 6, 7, (3, 3), 1, 2),
    (2, 16, 64, 14, 23, (1, 1), 2, 0),
    (1, 32, 32, 5, 8, (2, 2), 1, 2),  # the top and bottom rows read only padding: the bias alone
]


def _case(layer, seed=0):
    n, c, m, h, w, kernel, stride, pad = layer
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    weights = rng.standard_normal((m, c, *kernel), dtype=np.float32)
    bias = rng.standard_normal(m, dtype=np.float32)
    attrs = dict(strides=[stride, stride], pads=[pad] * 4)
    return x, weights, bias, attrs


def _plan(x, weights, attrs):
    kernel = weights.shape[2:]
    pad, stride = attrs["pads"][0], attrs["strides"][0]
    out = tuple((size + 2 * pad - k) // stride + 1 for size, k in zip(x.shape[2:], kernel))
    return _row_conv.plan(x.shape, weights.shape[0], kernel, (stride, stride), (1, 1), (pad,) * 4, out)


def _reference(x, weights, bias, attrs, residual=None, clamp=None, silu=None):
    y = convolve(
        x.astype(np.float64), weights.astype(np.float64), None if bias is None else bias.astype(np.float64), **attrs
    )
    if residual is not None:
        y = y + residual
    if clamp is not None:
        y = np.clip(y, *clamp)
    if silu is not None:
        y = y / (1 + np.exp(-silu * y))
    return y


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("store", ["plain", "no bias", "residual", "silu"])
def test_values_match_a_float64_sum(layer, store):
    x, weights, bias, attrs = _case(layer)
    plan = _plan(x, weights, attrs)
    assert plan is not None
    bound = _row_conv.BoundRows(plan, weights.reshape(len(weights), -1))
    b = None if store == "no bias" else bias
    residual = np.random.default_rng(1).standard_normal(plan.shape, dtype=np.float32) if store == "residual" else None
    clamp = None if store == "silu" else (-2.0, 3.0)
    silu = 1.702 if store == "silu" else None
    got = bound(x, b, residual, clamp, silu)
    want = _reference(x, weights, b, attrs, residual, clamp, silu)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    np.testing.assert_array_equal(bound(x, b, residual, clamp, silu), got)  # the kept call


def test_a_residual_to_broadcast_is_added_after_the_bias_then_clamped():
    x, weights, bias, attrs = _case(LAYERS[1])
    plan = _plan(x, weights, attrs)
    bound = _row_conv.BoundRows(plan, weights.reshape(len(weights), -1))
    row = np.random.default_rng(2).standard_normal((1, plan.shape[1], 1, 1), dtype=np.float32)
    got = bound(x, bias, row, (0.0, 6.0))
    want = _reference(x, weights, bias, attrs, row, (0.0, 6.0))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-4)


def test_which_layers_row_tiles_take():
    def planned(c, m, h, w, kernel, stride, pad, dilation=1):
        x = np.zeros((1, c, h, w), np.float32)
        out = tuple((size + 2 * pad - dilation * (k - 1) - 1) // stride + 1 for size, k in zip((h, w), kernel))
        return _row_conv.plan(x.shape, m, kernel, (stride, stride), (dilation, dilation), (pad,) * 4, out) is not None

    assert planned(64, 64, 14, 14, (3, 3), 1, 1) and planned(256, 256, 2, 40, (2, 2), 1, 1)
    assert planned(128, 128, 28, 28, (3, 3), 2, 1) and planned(16, 32, 80, 80, (3, 3), 1, 1)
    assert planned(16, 32, 27, 27, (5, 5), 1, 2) and planned(64, 64, 14, 14, (3, 3), 1, 2)
    assert not planned(16, 32, 32, 160, (2, 2), 1, 0)  # 64-long sums: too shallow (MIN_DEPTH)
    assert not planned(3, 32, 32, 160, (3, 3), 1, 1)  # a 3-channel stem (MIN_CHANNELS, MIN_DEPTH)
    assert not planned(3, 64, 224, 224, (7, 7), 2, 3)  # fewer than MIN_CHANNELS input channels
    assert not planned(64, 16, 14, 14, (3, 3), 1, 1)  # fewer than MIN_MAPS output channels
    assert not planned(64, 64, 14, 14, (1, 1), 1, 0)  # pointwise: the column tiles read it in place
    assert planned(32, 64, 80, 80, (1, 1), 2, 0)  # ... but strided, they copy a phase first
    assert not planned(64, 64, 14, 14, (3, 3), 1, 2, dilation=2)
    assert not planned(64, 64, 3, 3, (3, 3), 1, 1)  # rows of fewer than MIN_POSITIONS
    assert not planned(16, 64, 56, 56, (7, 7), 1, 3)  # a tap that skips 3 positions: no loop for it
    assert not planned(16, 64, 28, 28, (7, 7), 1, 1)  # more than MAX_TAPS
    assert not planned(64, 64, 224, 224, (3, 3), 1, 1)  # a map of more than MAX_CELLS


def test_a_node_s_layers_for_several_shapes_share_one_packing():
    x, weights, bias, attrs = _case(LAYERS[0])
    packed = PackedConv(weights, 1)
    for size in (7, 9, 11):
        image = np.random.default_rng(size).standard_normal((1, 16, size, size), dtype=np.float32)
        got = convolve(image, weights, bias, packed=packed, **attrs)
        np.testing.assert_allclose(got, _reference(image, weights, bias, attrs), rtol=2e-5, atol=1e-4)
    remembered = [
        packed.remembered(
            (1, 16, size, size), (None, *(attrs.get(k) for k in ("strides", "dilations", "pads")), "NOTSET")
        )
        for size in (7, 9, 11)
    ]
    layers = [layer for layer in remembered if isinstance(layer, _row_conv.BoundRows)]
    assert len(layers) == 3 and all(layer.w is packed.row_weights() for layer in layers)


def test_padding_taps_are_left_out_of_the_tables():
    x = np.zeros((1, 16, 7, 7), np.float32)
    plan = _row_conv.plan(x.shape, 32, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (7, 7))
    tiles, tables = plan.tiles, plan.tables
    assert tiles.shape == (7, 3) and list(tiles[:, 1]) == [7] * 7  # one tile of 7 a row
    assert list(tiles[:, 2]) == [6, 9, 9, 9, 9, 9, 6]  # the top and bottom rows' padding row out
    first = tables[1, :9]
    # tap (ky, kx) reads from position 1 when kx = 0 (position 0's left cell is padding) and to
    # position 5 when kx = 2
    assert [tuple(entry[2:]) for entry in first] == [(1, 7), (0, 7), (0, 6)] * 3
    assert [entry[1] for entry in first] == [tap * 32 * 16 for tap in range(9)]  # weights tap-major
    # a stride-2 layer reads its input in place: position p of a tap at input column 2p + kx - 1
    x = np.zeros((1, 16, 14, 14), np.float32)
    strided = _row_conv.plan(x.shape, 32, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), (7, 7))
    assert strided.step == 2 and [tuple(e[2:]) for e in strided.tables[0, :3]] == [(1, 7), (0, 7), (0, 7)]


def test_same_bits_on_any_split_and_python_threads(monkeypatch):
    x, weights, bias, attrs = _case((1, 32, 96, 14, 14, (3, 3), 1, 1))
    plan = _plan(x, weights, attrs)
    bound = _row_conv.BoundRows(plan, weights.reshape(len(weights), -1))
    results = []
    for threads, team in ((1, "1"), (2, "1"), (2, "0")):
        monkeypatch.setenv("ONNXPLUG_CPU_TEAM", team)
        token = enter_run(RunState(threads=threads))
        try:
            assert plan.parts(threads) == threads
            results.append(bound(x, bias, None, (0.0, 6.0)))
            results.append(bound(x, bias, None, (0.0, 6.0)))
        finally:
            leave_run(token)
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])


def test_nothing_is_written_outside_the_output():
    # 33 channels: the last block's lanes past channel 33 masked; 13 columns: tiles of 7 and 6
    x, weights, bias, attrs = _case((2, 16, 33, 9, 13, (3, 3), 1, 1))
    plan = _plan(x, weights, attrs)
    bound = _row_conv.BoundRows(plan, weights.reshape(len(weights), -1))
    size = int(np.prod(plan.shape))
    buffer = np.full(size + 64, 7.0, np.float32)
    out = buffer[32 : 32 + size].reshape(plan.shape)
    got = bound(x, bias, None, None, None, None, out)
    assert got is out
    assert (buffer[:32] == 7.0).all() and (buffer[32 + size :] == 7.0).all()
    np.testing.assert_allclose(got, _reference(x, weights, bias, attrs), rtol=2e-5, atol=1e-4)


def _model(kernel=(3, 3), pads=(1, 1, 1, 1), strides=(1, 1)):
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=list(pads), strides=list(strides)),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["y"]),
    ]
    weights = {
        "w1": rng.standard_normal((64, 16, *kernel), dtype=np.float32) * 0.1,
        "b1": rng.standard_normal(64, dtype=np.float32),
        "w2": rng.standard_normal((64, 64, 3, 3), dtype=np.float32) * 0.1,
        "b2": rng.standard_normal(64, dtype=np.float32),
    }
    return make_model(nodes, [("x", TensorProto.FLOAT, [1, 16, 12, 20])], [("y", TensorProto.FLOAT, None)], weights)


@pytest.mark.parametrize("segments", ["1", "0"])
@pytest.mark.parametrize("geometry", [dict(), dict(strides=(2, 2)), dict(kernel=(2, 2))])
def test_sessions_run_their_layers_on_row_tiles(monkeypatch, segments, geometry):
    """Through a session (the plan's segments bind the layers, or each node calls its own), the
    layers run on row tiles, with the residual Add fused where ms_ops fuses it, and agree with
    onnx's reference evaluator on every run."""
    monkeypatch.setenv("ONNXPLUG_SEGMENTS", segments)
    model = _model(**geometry)
    x = np.random.default_rng(6).standard_normal((1, 16, 12, 20), dtype=np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    calls = []
    for name in ("__call__", "bind"):
        original = getattr(_row_conv.BoundRows, name)
        monkeypatch.setattr(_row_conv.BoundRows, name, lambda *a, _o=original, **k: calls.append(1) or _o(*a, **k))
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = 2
    session = onnxplug.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    first = session.run(None, {"x": x})[0]
    np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-4)
    for _ in range(2):
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], first)
    assert calls  # the row tiles ran the layers


def test_switched_off_the_column_tiles_take_the_layers(monkeypatch):
    x, weights, bias, attrs = _case(LAYERS[0])
    made = []
    original = _row_conv.BoundRows.__init__
    monkeypatch.setattr(_row_conv.BoundRows, "__init__", lambda self, *a: made.append(1) or original(self, *a))
    for switch, expected in (("0", []), ("1", [1])):
        monkeypatch.setenv("ONNXPLUG_CPU_ROW_TILES", switch)
        made.clear()
        got = convolve(x, weights, bias, packed=PackedConv(weights, 1), **attrs)
        assert made == expected
        np.testing.assert_allclose(got, _reference(x, weights, bias, attrs), rtol=2e-5, atol=1e-4)


def test_read_only_and_writable_arrays_share_one_compiled_loop():
    """A model's initializers are read-only arrays: the loop is compiled for one signature, with
    every array it only reads typed read-only, so that no mix compiles another (seconds each)."""
    x, weights, bias, attrs = _case(LAYERS[0])
    plan = _plan(x, weights, attrs)
    bound = _row_conv.BoundRows(plan, weights.reshape(len(weights), -1))
    want = bound(x, bias, None, (0.0, 6.0))
    frozen_x, frozen_bias = x.copy(), bias.copy()
    frozen_x.flags.writeable = frozen_bias.flags.writeable = False
    np.testing.assert_array_equal(bound(frozen_x, frozen_bias, None, (0.0, 6.0)), want)
    loops = _row_conv.loops()
    assert len(loops.convolve_rows.signatures) == 1 and len(loops.tiles_range.signatures) == 1


def test_both_splits_give_the_same_bits(monkeypatch):
    """Split by output rows (weights that fit a core's cache) or by blocks of channels, every
    output is one tile's sum in one order: the same bits at any thread count."""
    x, weights, bias, attrs = _case((1, 64, 64, 14, 14, (3, 3), 1, 1))
    plan = _plan(x, weights, attrs)
    results = []
    for limit in (0, _row_conv.WEIGHTS_IN_CACHE):
        monkeypatch.setattr(_row_conv, "WEIGHTS_IN_CACHE", limit)
        bound = _row_conv.BoundRows(plan, weights.reshape(len(weights), -1))
        assert bound.by_tiles == (limit > 0)
        for threads in (1, 2):
            token = enter_run(RunState(threads=threads))
            try:
                results.append(bound(x, bias, None, (0.0, 6.0)))
            finally:
                leave_run(token)
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])
