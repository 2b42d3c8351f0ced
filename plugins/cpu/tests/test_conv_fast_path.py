"""A Conv node's later calls (``numerics.Convolution``, ``kernels._team.run_settings``): a call
with an input shape seen before goes straight to the compiled layer kept for it, with the run's
settings read once a run; the same bits as the first call; a switch or a thread count changed
between runs takes effect on the next run."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.kernels import RunState, current_run, enter_run, leave_run
from onnxplug.testing import make_model
from onnxplug_cpu import numerics
from onnxplug_cpu.kernels import _f32_conv, _row_conv, _team

pytest.importorskip("numba")
if os.environ.get("ONNXPLUG_CPU_JIT", "1") == "0":
    pytest.skip("the compiled kernels are disabled by ONNXPLUG_CPU_JIT=0", allow_module_level=True)
if _f32_conv.loops() is None:
    pytest.skip("the float32 tiles need a CPU with AVX-512F (this one has none)", allow_module_level=True)

pytestmark = pytest.mark.numba


@pytest.fixture(autouse=True)
def tiles_on(monkeypatch):
    monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "1")
    monkeypatch.delenv("ONNXPLUG_CPU_TEAM", raising=False)


def _session(threads=2):
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),  # FusedConv's clamp, where ms_ops fuses it
        helper.make_node("Conv", ["r1", "w2"], ["y"]),  # pointwise, no bias
    ]
    weights = {
        "w1": rng.standard_normal((32, 16, 3, 3), dtype=np.float32),
        "b1": rng.standard_normal(32, dtype=np.float32),
        "w2": rng.standard_normal((24, 32, 1, 1), dtype=np.float32),
    }
    model = make_model(nodes, [("x", TensorProto.FLOAT, [1, 16, 20, 20])], [("y", TensorProto.FLOAT, None)], weights)
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = threads
    return onnxplug.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def test_later_runs_go_straight_to_the_kept_layers(monkeypatch):
    # each node's own call (the plan's segments, which replay bound layers instead, are
    # test_segments.py's)
    monkeypatch.setenv("ONNXPLUG_SEGMENTS", "0")
    session = _session()
    x = np.random.default_rng(6).standard_normal((1, 16, 20, 20), dtype=np.float32)
    first = session.run(None, {"x": x})[0]
    routed, layers = [], []
    original_convolve = numerics.convolve

    def counted(original):
        def again(*arguments):  # the kept call, counted where it ran
            y = original(*arguments)
            if y is not None:
                layers.append(1)
            return y

        return again

    monkeypatch.setattr(numerics, "convolve", lambda *a, **k: routed.append(1) or original_convolve(*a, **k))
    # (the 3×3 layer on the row tiles, the pointwise one on the column tiles)
    for bound in (_f32_conv.BoundLayer, _row_conv.BoundRows):
        monkeypatch.setattr(bound, "again", counted(bound.again))
    for _ in range(2):
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], first)
    assert routed == [] and layers == [1, 1, 1, 1]  # two layers, two runs, no routing
    # Switched off between runs: the next run routes every layer to the numpy paths.
    monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "0")
    layers.clear()
    off = session.run(None, {"x": x})[0]
    assert routed == [1, 1] and layers == []
    np.testing.assert_allclose(off, first, rtol=1e-4, atol=1e-3)


def test_run_settings_are_read_once_a_run_and_equal_ones_are_one_object(monkeypatch):
    outside = _team.run_settings()
    assert outside is _team.run_settings()  # equal settings: one object, even outside a run
    token = enter_run(RunState(threads=2))
    try:
        settings = _team.run_settings()
        assert settings.budget == 2 and settings.tiles
        monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "0")
        assert _team.run_settings() is settings  # kept for the rest of the run
    finally:
        leave_run(token)
    token = enter_run(RunState(threads=2))
    try:
        assert current_run().notes == {} and not _team.run_settings().tiles  # the next run reads it
    finally:
        leave_run(token)


def test_a_kept_call_is_replanned_for_another_thread_budget():
    """A bound layer keeps its compiled call for the run settings it was made at: a run with
    another thread count splits the layer anew (the same bits), and the kept call follows."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 64, 28, 28), dtype=np.float32)
    weights = rng.standard_normal((64, 64 * 9), dtype=np.float32)
    bias = rng.standard_normal(64, dtype=np.float32)
    layer = _f32_conv.plan(x.shape, 64, 1, (3, 3), None, None, (1, 1, 1, 1), "NOTSET")
    bound = _f32_conv.BoundLayer(layer, weights)
    results, kept = [], []
    for threads in (1, 2, 1):
        token = enter_run(RunState(threads=threads))
        try:
            results.append(bound(x, bias))
            results.append(bound(x, bias))  # the kept call
            kept.append(bound._last[3])
        finally:
            leave_run(token)
    assert [settings.budget for settings in kept] == [1, 2, 1] and kept[0] is kept[2]
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])


def test_a_residual_layer_keeps_its_call_and_takes_each_run_s_residual(monkeypatch):
    """A layer with a residual (a FusedConv's Z: a ResNet's or MobileNetV2's block end) keeps its
    compiled call too; each call puts its own residual in, with the bits of a call worked out anew."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 16, 12, 12), dtype=np.float32)
    w = rng.standard_normal((24, 16, 3, 3), dtype=np.float32)
    b = rng.standard_normal(24, dtype=np.float32)
    clamp = (0.0, 6.0)

    def layer():
        return numerics.Convolution(w, 1, kernel_shape=(3, 3), pads=(1, 1, 1, 1))

    token = enter_run(RunState(threads=2))
    try:
        residuals = [rng.standard_normal((1, 24, 12, 12), dtype=np.float32) for _ in range(3)]
        want = [layer()(x, w, b, z, clamp) for z in residuals]  # each a first call
        want_plain = layer()(x, w, b, None, clamp)
        convolution = layer()
        convolution(x, w, b, residuals[0], clamp)
        worked_out = []
        original = _f32_conv.BoundLayer._convolve
        monkeypatch.setattr(
            _f32_conv.BoundLayer, "_convolve", lambda *a, **k: worked_out.append(1) or original(*a, **k)
        )
        for z, expected in zip(residuals, want):
            np.testing.assert_array_equal(convolution(x, w, b, z, clamp), expected)
        assert worked_out == []  # every later call took the kept one, with its own residual
        np.testing.assert_array_equal(convolution(x, w, b, None, clamp), want_plain)
        assert worked_out == [1]  # without a residual the call is worked out again
    finally:
        leave_run(token)


def test_a_kept_call_returns_its_own_array(monkeypatch):
    """Not a view: a graph output that is a view is copied on its way out (``fresh_outputs``),
    4.8 MB for a 96 × 112 × 112 map, which cost a detector's or a UNet's run that copy."""
    from onnxplug.runtime import session as session_module

    handed = []
    real = session_module.fresh_outputs
    monkeypatch.setattr(session_module, "fresh_outputs", lambda values: handed.extend(values) or real(values))
    session = _session()
    x = np.random.default_rng(6).standard_normal((1, 16, 20, 20), dtype=np.float32)
    for _ in range(3):  # the later runs take the kept calls
        session.run(None, {"x": x})
    assert all(y.base is None for y in handed)


def _pointwise_convolution(rng):
    w = rng.standard_normal((24, 16, 1, 1), dtype=np.float32)
    convolution = numerics.Convolution(w, 1, kernel_shape=(1, 1), strides=(1, 1), dilations=(1, 1), pads=(0,) * 4)
    return convolution, w


def test_out_receives_the_kept_layer():
    """A Concat written in place hands its view as ``out`` (``onnxplug.runtime._concat_in_place``):
    the kept layer's tiles store there, the same values as without; the first call (the full
    route, which plans the layer) returns its own array, which the Concat copies."""
    rng = np.random.default_rng(8)
    reference, w = _pointwise_convolution(rng)
    convolution = numerics.Convolution(w, 1, kernel_shape=(1, 1), strides=(1, 1), dilations=(1, 1), pads=(0,) * 4)
    x = rng.standard_normal((1, 16, 12, 12), dtype=np.float32)
    expected = reference(x, w)
    joined = np.zeros((1, 40, 12, 12), np.float32)
    view = joined[:, 8:32]
    np.testing.assert_array_equal(convolution(x, w, out=view), expected)
    view[...] = 0
    assert convolution(x, w, out=view) is view
    np.testing.assert_array_equal(view, expected)
    np.testing.assert_array_equal(joined[:, :8], 0)
    np.testing.assert_array_equal(joined[:, 32:], 0)


@pytest.mark.parametrize(
    "out",
    [
        np.zeros((1, 24, 12, 13), np.float32),
        np.zeros((1, 24, 12, 12), np.float64),
        np.zeros((1, 48, 12, 12), np.float32)[:, ::2],
    ],
    ids=["other-shape", "other-type", "strided"],
)
def test_out_that_does_not_fit_is_left_alone(out):
    rng = np.random.default_rng(8)
    convolution, w = _pointwise_convolution(rng)
    x = rng.standard_normal((1, 16, 12, 12), dtype=np.float32)
    expected = convolution(x, w)
    untouched = out.copy()
    y = convolution(x, w, out=out)
    assert y is not out
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_array_equal(out, untouched)


def test_the_last_shape_s_kept_call_follows_every_change_of_its_inputs():
    """``Convolution`` tries the kept call of the input shape it saw last first (straight to the
    compiled entry point, ``kernels._jit.direct_call``): another shape, another bias object, a
    residual where there was none (or none where there was one) and a strided input each still
    get the layer a fresh node computes on its first call."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((24, 16, 1, 1), dtype=np.float32)
    b, other_b = rng.standard_normal(24, dtype=np.float32), rng.standard_normal(24, dtype=np.float32)
    clamp = (np.float32(0), np.float32(6))
    small = rng.standard_normal((1, 16, 12, 12), dtype=np.float32)
    large = rng.standard_normal((1, 16, 20, 20), dtype=np.float32)
    residual = rng.standard_normal((1, 24, 12, 12), dtype=np.float32)
    strided = rng.standard_normal((1, 32, 12, 12), dtype=np.float32)[:, ::2]

    def fresh(x, bias, z=None):  # a node's first call: the full route
        convolution = numerics.Convolution(w, 1, kernel_shape=(1, 1), strides=(1, 1), dilations=(1, 1), pads=(0,) * 4)
        return convolution(x, w, bias, z, clamp)

    node = numerics.Convolution(w, 1, kernel_shape=(1, 1), strides=(1, 1), dilations=(1, 1), pads=(0,) * 4)
    calls = [(small, b, None), (small, b, None), (large, b, None), (small, b, None), (small, other_b, None)]
    calls += [(small, other_b, residual), (small, other_b, residual), (small, other_b, None), (strided, other_b, None)]
    for x, bias, z in calls * 2:
        np.testing.assert_array_equal(node(x, w, bias, z, clamp), fresh(x, bias, z))


def test_a_depthwise_node_s_last_shape_goes_straight_to_its_layer_too(monkeypatch):
    """A 3×3 depthwise node (``_depthwise.BoundDepthwise``) is tried first for its last input
    shape as the tiles' layers are; a residual (which that layer does not take), another bias or
    another shape go the full route, each with the values a fresh node computes."""
    from onnxplug_cpu.kernels import _depthwise

    rng = np.random.default_rng(12)
    w = rng.standard_normal((16, 1, 3, 3), dtype=np.float32)
    b, other_b = rng.standard_normal(16, dtype=np.float32), rng.standard_normal(16, dtype=np.float32)
    clamp = (np.float32(0), np.float32(6))
    small = rng.standard_normal((1, 16, 14, 14), dtype=np.float32)
    large = rng.standard_normal((1, 16, 20, 20), dtype=np.float32)
    residual = rng.standard_normal((1, 16, 14, 14), dtype=np.float32)
    geometry = dict(kernel_shape=(3, 3), strides=(1, 1), dilations=(1, 1), pads=(1,) * 4)

    def fresh(x, bias, z=None):
        return numerics.Convolution(w, 16, **geometry)(x, w, bias, z, clamp)

    kept = []
    real_again = _depthwise.BoundDepthwise.again
    monkeypatch.setattr(
        _depthwise.BoundDepthwise, "again", lambda *a: (lambda y: kept.append(y is not None) or y)(real_again(*a))
    )
    node = numerics.Convolution(w, 16, **geometry)
    calls = [(small, b, None), (small, b, None), (large, b, None), (small, b, None), (small, other_b, None)]
    calls += [(small, other_b, residual), (small, other_b, None), (small, other_b, None)]
    for x, bias, z in calls:
        np.testing.assert_array_equal(node(x, w, bias, z, clamp), fresh(x, bias, z))
    assert any(kept) and not all(kept)  # the repeated calls took the kept layer, the changes did not
    with pytest.raises(onnxplug.Fail, match="B shape"):  # checked on the full route, never reshaped
        node(small, w, np.zeros(5, np.float32), None, clamp)
