"""The numba 3×3 depthwise kernels (``kernels._depthwise_jit``): the numpy passes' bits on both
strides (also on wide layers, which the numpy passes compute channels-last), with the bias and
clamp in their store; onnx's reference evaluator on whole
nodes, the dispatch (which layers take them), and the numpy fallback with ``ONNXPLUG_CPU_JIT=0``."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from onnxplug.testing import make_model
from onnxplug_cpu.kernels import _depthwise, _depthwise_jit
from onnxplug_cpu.numerics import PackedConv, convolve, pool_geometry

CASES = [
    ((1, 8, 11, 9), dict(pads=[1, 1, 1, 1])),
    ((2, 5, 12, 13), dict(strides=[2, 2], pads=[1, 0, 0, 1])),
    ((1, 7, 9, 10), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    ((1, 4, 8, 8), dict(auto_pad="VALID")),
    ((1, 3, 3, 3), dict()),  # a single output cell
    ((2, 64, 9, 7), dict(pads=[1, 2, 0, 1])),  # the numpy passes go channels-last from here
    ((1, 96, 14, 14), dict(strides=[2, 2], pads=[0, 0, 1, 1])),
    ((1, 144, 7, 7), dict(pads=[1, 1, 1, 1])),
    # stride 2 on wide maps, both pad parities
    ((1, 6, 50, 53), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 5, 49, 50), dict(strides=[2, 2], pads=[0, 0, 1, 1])),
    ((1, 70, 30, 52), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    # stride 1, padding 1 all round: each plane as one flat run (narrow and degenerate maps)
    ((2, 5, 1, 1), dict(pads=[1, 1, 1, 1])),
    ((1, 3, 1, 17), dict(pads=[1, 1, 1, 1])),
    ((1, 4, 16, 1), dict(pads=[1, 1, 1, 1])),
    ((2, 40, 28, 28), dict(auto_pad="SAME_UPPER")),
    # stride 2 with padding 1 before and a ceil(H/2) × ceil(W/2) output: four phase planes, one
    # flat run (even and odd sides, a single cell, a single row or column)
    ((1, 24, 14, 14), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 3, 15, 16), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 4, 16, 15), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 3, 2, 2), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 3, 1, 9), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 3, 9, 1), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 6, 13, 9), dict(strides=[2, 2], pads=[1, 1, 0, 0])),
    ((1, 5, 1, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    # small maps: one copy of all the planes (kernels._depthwise_loops.FRAMED_CELLS)
    ((3, 10, 7, 7), dict(pads=[1, 1, 1, 1])),
    ((2, 7, 13, 11), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 4, 16, 16), dict(pads=[1, 1, 1, 1])),
]


def _call(x, w, geometry):
    out, begin, end, _ = pool_geometry(
        x.shape[2:], (3, 3), geometry.get("strides"), None, geometry.get("pads"), geometry.get("auto_pad", "NOTSET")
    )
    return (x, w, begin, end, out, tuple(geometry.get("strides", (1, 1))), (1, 1))


def _data(shape, dtype):
    rng = np.random.default_rng(shape[1] * 7 + shape[2])
    return rng.standard_normal(shape).astype(dtype), rng.standard_normal((shape[1], 3, 3)).astype(dtype)


def _fused(x, w, call) -> bool:
    """Whether this layer runs on the fused multiply-add forms (``kernels._depthwise_ir``)."""
    return str(_depthwise.plan_depthwise(*call[:7])._form).endswith("_fma")


def _assert_same(got, want, fused):
    """The numpy passes' bits, or on the fused forms their values to float32 accuracy (nine
    products and the bias: a few units in the last place of the largest term), NaN and
    infinities where they are."""
    if not fused:
        np.testing.assert_array_equal(got, want)
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    scale = max(1.0, float(np.abs(want[finite]).max(initial=0.0)))
    assert np.abs(got[finite] - want[finite]).max(initial=0.0) <= 8 * np.finfo(np.float32).eps * scale


@pytest.mark.numba
@pytest.mark.parametrize("fma", ["1", "0"], ids=["fused", "numpy-bits"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, geometry", CASES)
def test_compiled_gives_the_numpy_passes_values(shape, geometry, dtype, fma, monkeypatch):
    """The compiled forms give the numpy passes' bits, but for the fused multiply-add forms
    (float32 ``flat`` and ``phases`` layers on AVX-512F; ``ONNXPLUG_CPU_DEPTHWISE_FMA=0`` keeps the
    bits), which give their values to float32 accuracy."""
    monkeypatch.setenv("ONNXPLUG_CPU_DEPTHWISE_FMA", fma)
    x, w = _data(shape, dtype)
    call = _call(x, w, geometry)
    want = _depthwise.depthwise_conv_numpy(*call)
    fused = _fused(x, w, call)
    assert not fused or (fma == "1" and dtype == np.float32)

    def no_numpy(*args):
        raise AssertionError("the numpy path was taken")

    monkeypatch.setattr(_depthwise, "depthwise_conv_numpy", no_numpy)
    got = _depthwise.depthwise_conv(*call)
    assert got.dtype == dtype and got.shape == want.shape and got.flags.c_contiguous
    _assert_same(got, want, fused)


@pytest.mark.numba
def test_fused_forms_take_padding_one_layers_in_float32():
    """The fused multiply-add forms serve float32 layers with padding 1 at stride 1 (the output
    the input's size) and at stride 2 (``ceil`` halves), where the CPU has AVX-512F."""
    if not _depthwise_jit.fused_planes():
        pytest.skip("the fused forms need numba and a CPU with AVX-512F")
    x, w = _data((1, 8, 14, 13), np.float32)
    assert _fused(x, w, _call(x, w, dict(pads=[1, 1, 1, 1])))
    assert _fused(x, w, _call(x, w, dict(strides=[2, 2], pads=[1, 1, 1, 1])))
    assert not _fused(x, w, _call(x, w, dict(strides=[2, 2], pads=[0, 0, 1, 1])))
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    assert not _fused(x64, w64, _call(x64, w64, dict(pads=[1, 1, 1, 1])))


@pytest.mark.parametrize("shape, geometry", CASES)
def test_whole_node_matches_the_reference(shape, geometry):
    x, w4 = _data(shape, np.float32)
    w = w4.reshape(shape[1], 1, 3, 3)
    b = np.linspace(-1, 1, shape[1], dtype=np.float32)
    c = shape[1]
    got = convolve(x, w, b, group=c, packed=PackedConv(w, c), **geometry)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, **geometry)
    model = make_model(
        [node], [("x", TensorProto.FLOAT, list(shape))], [("y", TensorProto.FLOAT, None)], {"w": w, "b": b}
    )
    reference = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kernel, geometry",
    [
        ((5, 5), dict(pads=[2, 2, 2, 2])),
        ((3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
        ((3, 3), dict(strides=[1, 2], pads=[1, 1, 1, 1])),
        ((3, 3), dict(strides=[3, 3])),
    ],
)
def test_other_geometries_take_the_numpy_passes(kernel, geometry, monkeypatch):
    calls = []
    numpy_path = _depthwise.depthwise_conv_numpy

    def counted(*args):
        calls.append(args)
        return numpy_path(*args)

    monkeypatch.setattr(_depthwise, "depthwise_conv_numpy", counted)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 6, 13, 12)).astype(np.float32)
    w = rng.standard_normal((6, 1) + kernel).astype(np.float32)
    convolve(x, w, None, group=6, packed=PackedConv(w, 6), **geometry)
    assert len(calls) == 1


def test_jit_off_uses_the_numpy_passes(monkeypatch):
    monkeypatch.setenv("ONNXPLUG_CPU_JIT", "0")
    _depthwise_jit.compiled.cache_clear()
    try:
        assert _depthwise_jit.compiled() is None
        x, w = _data((1, 70, 10, 10), np.float32)
        call = _call(x, w, dict(pads=[1, 1, 1, 1]))
        np.testing.assert_array_equal(_depthwise.depthwise_conv(*call), _depthwise.depthwise_conv_numpy(*call))
    finally:
        _depthwise_jit.compiled.cache_clear()


@pytest.mark.numba
def test_too_little_padding_is_refused_before_the_unchecked_loop():
    x, w = _data((1, 4, 6, 6), np.float32)
    with pytest.raises(ValueError, match="smaller than output"):
        _depthwise.depthwise_conv(x, w, (0, 0), (0, 0), (6, 6), (1, 1), (1, 1))


@pytest.mark.numba
@pytest.mark.parametrize("stride", [1, 2])
def test_bias_and_clamp_in_the_store_match_the_numpy_passes(stride):
    x, w = _data((1, 9, 17, 16), np.float32)
    x[0, 3, 4, 5] = np.nan
    x[0, 5, 6, 0] = np.inf  # on the left edge: the flat run must not carry it into the row above
    call = _call(x, w, dict(strides=[stride, stride], pads=[1, 1, 1, 1]))
    b = np.linspace(-1, 1, 9, dtype=np.float32)
    want = np.clip(_depthwise.depthwise_conv_numpy(*call) + b.reshape(1, -1, 1, 1), np.float32(-0.5), np.float32(1.5))
    got = _depthwise.depthwise_conv(*call, b, (-0.5, 1.5))
    _assert_same(got, want, _fused(x, w, call))
    assert np.isnan(got).any() and (got == np.float32(-0.5)).any() and (got == np.float32(1.5)).any()


@pytest.mark.numba
def test_a_node_s_later_calls_reuse_its_layer_and_still_check_their_inputs(monkeypatch):
    """The first call of a shape plans the compiled layer and keeps it with the node's
    PackedConv (a ``BoundDepthwise``); later calls with the node's attribute objects skip the
    routing (same bits), a bias of the wrong shape is still refused, and a residual or SiLU
    (which the kernel's store does not take) still goes the whole way."""
    from onnxplug.errors import Fail

    x, taps = _data((1, 12, 10, 9), np.float32)
    w = taps.reshape(12, 1, 3, 3)
    b = np.linspace(-1, 1, 12, dtype=np.float32)
    attrs = dict(group=12, strides=[1, 1], pads=[1, 1, 1, 1])  # one set of objects, as a node's
    packed = PackedConv(w, 12)
    first = convolve(x, w, b, packed=packed, clamp=(0.0, 6.0), **attrs)
    planned = []
    original = _depthwise.plan_depthwise
    monkeypatch.setattr(_depthwise, "plan_depthwise", lambda *a: planned.append(1) or original(*a))
    np.testing.assert_array_equal(convolve(x, w, b, packed=packed, clamp=(0.0, 6.0), **attrs), first)
    assert planned == []
    with pytest.raises(Fail, match="B shape"):
        convolve(x, w, b[:-1], packed=packed, **attrs)
    residual = np.ones_like(first)
    with_residual = convolve(x, w, b, packed=packed, residual=residual, clamp=(0.0, 6.0), **attrs)
    unclamped = convolve(x, w, b, packed=packed, **attrs)
    np.testing.assert_array_equal(with_residual, np.clip(unclamped + residual, 0.0, 6.0))
    assert planned == [1]


@pytest.mark.numba
def test_a_bound_layer_keeps_arguments_only_for_the_same_bias_and_clamp():
    """A ``BoundDepthwise`` keeps its kernel's arguments for the last bias and clamp objects: a
    call with another bias, another clamp or none computes with what it was given."""
    x, taps = _data((1, 12, 10, 9), np.float32)
    w = taps.reshape(12, 1, 3, 3)
    bound = _depthwise.plan_depthwise(x, taps, (1, 1), (1, 1), (10, 9), (1, 1), (1, 1))
    plain = bound(x)
    b, other = np.linspace(-1, 1, 12, dtype=np.float32), np.linspace(2, -2, 12, dtype=np.float32)
    relu, six = (0.0, np.inf), (0.0, 6.0)
    for bias, clamp in [(b, relu), (b, relu), (other, relu), (other, six), (None, six), (None, None), (b, relu)]:
        shifted = plain if bias is None else plain + bias[:, None, None]
        expected = shifted if clamp is None else np.clip(shifted, *clamp)
        np.testing.assert_allclose(bound(x, bias, clamp), expected, atol=1e-5)
    assert bound(x, b, relu).shape == convolve(x, w, b, group=12, pads=[1, 1, 1, 1]).shape


@pytest.mark.numba
@pytest.mark.parametrize("stride", [1, 2])
def test_small_planes_read_as_one_run_keep_each_plane_to_itself(stride):
    """Maps of up to ``FRAMED_CELLS`` cells are read from one copy of all the planes, where the
    row above a plane's first row is the previous plane's last: those taps must read zeros."""
    x, w = _data((2, 6, 7, 7), np.float32)
    assert 7 * 7 <= _depthwise_loops().FRAMED_CELLS
    x[0, 2, 0, 3] = np.inf  # the first row of a middle plane: the plane before must not read it
    x[0, 2, 6, 4] = -np.inf  # its last row: nor the plane after
    x[0, 5, 6, 6] = np.inf  # the first image's last cell: the next image's first plane follows
    x[1, 0, 0, 0] = np.nan
    call = _call(x, w, dict(strides=[stride, stride], pads=[1, 1, 1, 1]))
    want = _depthwise.depthwise_conv_numpy(*call)
    got = _depthwise.depthwise_conv(*call)
    _assert_same(got, want, _fused(x, w, call))
    assert np.isfinite(got[0, [0, 1, 3, 4]]).all() and np.isfinite(got[1, 1:]).all()
    assert not np.isfinite(got[0, 2]).all() and np.isnan(got[1, 0]).any()


def _depthwise_loops():
    from onnxplug_cpu.kernels import _depthwise_loops

    return _depthwise_loops


@pytest.mark.numba
def test_a_new_process_loads_the_loops_from_numba_cache(cache_misses_in_new_processes):
    code = (
        "import numpy as np\n"
        "from onnxplug_cpu.kernels import _depthwise, _depthwise_loops as loops\n"
        "x = np.ones((1, 4, 9, 40), np.float32); w = np.ones((4, 3, 3), np.float32)\n"
        "_depthwise.depthwise_conv(x, w, (1, 1), (1, 1), (9, 40), (1, 1), (1, 1))\n"  # flat
        "_depthwise.depthwise_conv(x, w, (0, 0), (0, 0), (7, 38), (1, 1), (1, 1))\n"  # rows
        "_depthwise.depthwise_conv(x, w, (1, 1), (1, 1), (5, 20), (2, 2), (1, 1))\n"  # rows, stride 2
        "_depthwise.depthwise_conv(x[..., :9], w, (1, 1), (1, 1), (5, 5), (2, 2), (1, 1))\n"  # phases, stride 2
        "_depthwise.depthwise_conv(x[..., :7, :7], w, (1, 1), (1, 1), (7, 7), (1, 1), (1, 1))\n"  # framed
        "forms = (loops.stride_1, loops.stride_2, loops.stride_1_flat, loops.stride_2_phases)\n"
        "forms += (loops.stride_1_fma, loops.stride_2_fma)\n"
        "print(sum(sum(f.stats.cache_misses.values()) for f in forms))\n"
    )
    first, second = cache_misses_in_new_processes(code)
    assert first > 0 and second == 0


@pytest.mark.numba
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_layers_on_the_team_keep_their_bits(stride, monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "1")  # the team serves them where it runs convolutions
    rng = np.random.default_rng(17)
    x = rng.standard_normal((1, 48, 30, 30), dtype=np.float32)
    weights = rng.standard_normal((48, 1, 3, 3), dtype=np.float32)
    bias = rng.standard_normal(48, dtype=np.float32)
    results = []
    for team in ("1", "0"):
        monkeypatch.setenv("ONNXPLUG_CPU_TEAM", team)
        with threadpoolctl.threadpool_limits(2, user_api="blas"):
            results.append(
                convolve(
                    x,
                    weights,
                    bias,
                    group=48,
                    strides=(stride, stride),
                    pads=(1, 1, 1, 1),
                    packed=PackedConv(weights, 48),
                    clamp=(0.0, 6.0),
                )
            )
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("shape", [(1, 40, 30, 30), (2, 3, 4, 5)], ids=["compiled", "small"])
@pytest.mark.parametrize("clamp", [(0.0, np.inf), (-0.5, 0.7), None], ids=["relu", "clip", "none"])
def test_pointwise_depthwise_layers_are_one_affine_pass_with_the_numpy_bits(shape, clamp):
    """A depthwise 1×1 layer at stride 1 (a BatchNormalization and its Relu, as ms_ops' rule
    writes them) is ``x · w + b`` rounded as numpy rounds, then clamped, in one pass
    (``BoundChannelAffine``); without a bias nothing is added (-0.0 stays -0.0)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape, dtype=np.float32)
    x.flat[:4] = [np.nan, -0.0, np.inf, -np.inf]
    c = shape[1]
    w = (1 + 0.3 * rng.standard_normal((c, 1, 1, 1))).astype(np.float32)
    b = rng.standard_normal(c, dtype=np.float32)
    packed = PackedConv(w, c)
    assert isinstance(
        _depthwise.plan_depthwise(x, w.reshape(c, 1, 1), (0, 0), (0, 0), shape[2:], (1, 1), (1, 1)),
        _depthwise.BoundChannelAffine,
    )
    for bias in (b, None):
        want = x * w.reshape(1, c, 1, 1)
        if bias is not None:
            want = want + bias.reshape(1, c, 1, 1)
        if clamp is not None:
            want = np.where(want < np.float32(clamp[0]), np.float32(clamp[0]), want)
            want = np.where(want > np.float32(clamp[1]), np.float32(clamp[1]), want)
        for _ in range(2):  # planned, then the node's remembered layer
            got = convolve(x, w, bias, group=c, packed=packed, clamp=clamp)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
