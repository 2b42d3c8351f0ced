"""The compiled 2-D Resize (``kernels._resize_jit``): the numpy path's bits for nearest (every
rounding) and linear, over coordinate modes and up- and downscaling, onnx's reference evaluator
on whole nodes, and which calls take it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxplug
from onnxplug.errors import InvalidArgument
from onnxplug.testing import make_model
from onnxplug_cpu.kernels import _resize_2d, resize

MODES = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"]
SCALES = [(2.0, 2.0), (4.0, 3.0), (1.5, 0.6), (0.5, 0.5), (1.0, 2.0), (2.0, 1.0)]


def _run(x, scales, mode, ctm, nearest_mode="round_prefer_floor"):
    return resize.resize_11(
        x,
        None,
        np.array([1.0, 1.0, *scales], np.float32),
        None,
        coordinate_transformation_mode=ctm,
        cubic_coeff_a=-0.75,
        exclude_outside=0,
        extrapolation_value=0.0,
        mode=mode,
        nearest_mode=nearest_mode,
    )


def _both(monkeypatch, *args):
    calls = []
    real = _resize_2d._compiled_2d

    def spy():
        kernels = real()
        calls.append(kernels is not None)
        return kernels

    monkeypatch.setattr(_resize_2d, "_compiled_2d", spy)
    with np.errstate(invalid="ignore"):  # inf * 0 taps (sessions run kernels so)
        fast = _run(*args)
        monkeypatch.setattr(_resize_2d, "_compiled_2d", lambda: None)
        slow = _run(*args)
    return fast, slow, calls


@pytest.mark.numba
@pytest.mark.parametrize("scales", SCALES)
@pytest.mark.parametrize("ctm", MODES)
@pytest.mark.parametrize("nearest_mode", ["floor", "round_prefer_floor", "round_prefer_ceil", "ceil"])
def test_nearest_matches_numpy_path(monkeypatch, scales, ctm, nearest_mode):
    x = np.random.default_rng(1).standard_normal((2, 3, 74, 91)).astype(np.float32)
    fast, slow, calls = _both(monkeypatch, x, scales, "nearest", ctm, nearest_mode)
    assert calls == [True]
    assert fast.dtype == np.float32 and fast.shape == slow.shape
    np.testing.assert_array_equal(fast, slow)


@pytest.mark.numba
@pytest.mark.parametrize("scales", [s for s in SCALES if 1.0 not in s])
@pytest.mark.parametrize("ctm", MODES[:4])
def test_linear_matches_numpy_path(monkeypatch, scales, ctm):
    x = np.random.default_rng(2).standard_normal((1, 4, 66, 81)).astype(np.float32)
    x[0, 0, 3, 5] = np.inf  # the same infinities and NaNs as the numpy path
    fast, slow, calls = _both(monkeypatch, x, scales, "linear", ctm)
    assert calls == [True]
    np.testing.assert_array_equal(fast, slow)


#: resize_11's attributes for an asymmetric, floored nearest resize (YOLO's upsampling).
_NEAREST = dict(
    coordinate_transformation_mode="asymmetric",
    cubic_coeff_a=-0.75,
    exclude_outside=0,
    extrapolation_value=0.0,
    mode="nearest",
    nearest_mode="floor",
)


def test_other_calls_keep_the_numpy_path(monkeypatch):
    calls = []
    monkeypatch.setattr(_resize_2d, "_compiled_2d", lambda: calls.append(1))
    rng = np.random.default_rng(3)
    _run(rng.standard_normal((1, 2, 4, 4)).astype(np.float32), (2.0, 2.0), "nearest", "asymmetric")  # small
    _run(rng.standard_normal((1, 8, 40, 40)), (2.0, 2.0), "linear", "half_pixel")  # float64
    _run(rng.standard_normal((1, 8, 40, 40)).astype(np.float32), (2.0, 2.0), "cubic", "half_pixel")
    _run(rng.standard_normal((1, 8, 40, 40)).astype(np.float32), (1.0, 2.0), "linear", "half_pixel")  # one axis
    assert calls == []  # each plan declined before the kernel lookup (the last on its unresized axis)
    x = rng.standard_normal((1, 8, 40, 40)).astype(np.float32)
    y = resize.resize_11(x, None, np.array([1.0, 2.0, 2.0, 2.0], np.float32), None, **_NEAREST)  # the channel axis too
    assert y.shape == (1, 16, 80, 80) and calls == []


@pytest.mark.parametrize(
    "mode,ctm,nearest_mode",
    [
        ("nearest", "asymmetric", "floor"),
        ("linear", "half_pixel", "round_prefer_floor"),
        ("linear", "align_corners", "floor"),
    ],
)
def test_nodes_match_the_reference(mode, ctm, nearest_mode):
    x = np.random.default_rng(4).standard_normal((1, 16, 24, 20)).astype(np.float32)
    node = helper.make_node(
        "Resize", ["x", "", "scales"], ["y"], mode=mode, coordinate_transformation_mode=ctm, nearest_mode=nearest_mode
    )
    scales = np.array([1, 1, 2, 2], np.float32)
    model = make_model(
        [node],
        [("x", TensorProto.FLOAT, x.shape)],
        [("y", TensorProto.FLOAT, None)],
        {"scales": scales},
        opset=13,
    )
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-6, atol=1e-6)


@pytest.mark.numba
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_a_run_on_the_team_splits_the_planes_with_the_same_bits(monkeypatch, mode):
    """Inside a run whose convolutions started numba's team, a large resize splits its planes over
    it: the one-thread pass's bits."""
    from onnxplug_cpu.kernels import _team

    if _resize_2d._compiled_2d() is None or not _team.parallel_ready():
        pytest.skip("needs numba with a thread-safe threading layer (omp or tbb)")
    x = np.random.default_rng(3).standard_normal((1, 16, 64, 64)).astype(np.float32)
    scales = (2.0, 3.0)  # not an exact 2× of both axes: the gather (test_doubling_... below)
    alone = _run(x, scales, mode, "half_pixel")
    monkeypatch.setattr(_resize_2d, "team_joined", lambda: True)
    monkeypatch.setattr(_resize_2d, "thread_budget", lambda: 2)
    real = _resize_2d._compiled_2d_parallel
    split = []
    monkeypatch.setattr(
        _resize_2d, "_compiled_2d_parallel", lambda: tuple(lambda *a, f=f: split.append(a[-1]) or f(*a) for f in real())
    )
    np.testing.assert_array_equal(_run(x, scales, mode, "half_pixel"), alone)
    assert split == [2]


@pytest.mark.numba
@pytest.mark.parametrize("team", [False, True])
@pytest.mark.parametrize("shape", [(1, 128, 10, 10), (2, 3, 33, 17), (1, 16, 64, 64)])
def test_an_exact_doubling_takes_the_doubling_loop(monkeypatch, shape, team):
    """A nearest 2× upsampling of both axes whose tables read each position twice (asymmetric
    with floor; half_pixel with either rounding) doubles the values in one pass, split over the
    team in a team run: the gather's bits.  Tables that do not (asymmetric with ceil) keep the
    gather."""
    from onnxplug_cpu.kernels import _team

    if _resize_2d._compiled_2d() is None or (team and not _team.parallel_ready()):
        pytest.skip("needs numba (and, on the team, a thread-safe threading layer)")
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    if team:
        monkeypatch.setattr(_resize_2d, "team_joined", lambda: True)
        monkeypatch.setattr(_resize_2d, "thread_budget", lambda: 2)
    doubling = []
    real = _resize_2d._compiled_doubling
    monkeypatch.setattr(_resize_2d, "_compiled_doubling", lambda: doubling.append(1) or real())
    for ctm, nearest_mode, doubled in [
        ("asymmetric", "floor", True),
        ("half_pixel", "round_prefer_floor", True),
        ("half_pixel", "round_prefer_ceil", True),  # k ∓ 0.25 rounds to k either way
        ("asymmetric", "ceil", False),  # 2k + 1 reads k + 1
        ("align_corners", "round_prefer_floor", None),  # depends on the size: the tables decide
    ]:
        doubling.clear()
        got = _run(x, (2.0, 2.0), "nearest", ctm, nearest_mode)
        if doubled is not None:
            assert doubling == ([1] if doubled else []), (ctm, nearest_mode)
        want = ReferenceEvaluator(_node_model(shape, ctm, nearest_mode)).run(None, {"x": x})[0]
        np.testing.assert_array_equal(got, want)
        if doubling:
            np.testing.assert_array_equal(got, x.repeat(2, axis=2).repeat(2, axis=3))


def _node_model(shape, ctm, nearest_mode):
    node = helper.make_node(
        "Resize",
        ["x", "", "scales"],
        ["y"],
        mode="nearest",
        coordinate_transformation_mode=ctm,
        nearest_mode=nearest_mode,
    )
    scales = np.array([1.0, 1.0, 2.0, 2.0], np.float32)
    return make_model(
        [node], [("x", TensorProto.FLOAT, list(shape))], [("y", TensorProto.FLOAT, None)], {"scales": scales}
    )


def test_geometry_kept_per_input_values_not_per_array():
    """The output geometry is worked out once per input shape and scales/sizes/roi values: the
    same array with other values in it (or another array with the same values) gives its own."""
    x = np.random.default_rng(4).standard_normal((1, 3, 20, 20)).astype(np.float32)
    scales = np.array([1.0, 1.0, 2.0, 2.0], np.float32)
    attrs = _NEAREST
    first = resize.resize_11(x, None, scales, None, **attrs)
    scales[2:] = 3.0
    second = resize.resize_11(x, None, scales, None, **attrs)
    sizes = np.array([1, 3, 30, 50], np.int64)
    third = resize.resize_11(x, None, None, sizes, **attrs)
    assert first.shape == (1, 3, 40, 40) and second.shape == (1, 3, 60, 60) and third.shape == (1, 3, 30, 50)
    np.testing.assert_array_equal(second, x.repeat(3, axis=2).repeat(3, axis=3))
    with pytest.raises(InvalidArgument, match="positive"):
        resize.resize_11(x, None, -scales, None, **attrs)


def test_a_node_keeps_its_geometry_only_for_inputs_that_cannot_change(monkeypatch):
    """A Resize node (``resize._ResizeNode``) reuses the output geometry of its last call where the
    input has the same shape and ``roi``/``scales``/``sizes`` are the same read-only arrays (a
    model's constants); a writable array, which may have been changed in place, another array or
    another shape work it out again."""
    opts = resize._options("nearest", "asymmetric", "floor")
    node = resize._ResizeNode(opts)
    worked_out = []
    real = resize._geometry
    monkeypatch.setattr(resize, "_geometry", lambda *a: worked_out.append(1) or real(*a))
    x = np.random.default_rng(3).standard_normal((1, 4, 10, 10)).astype(np.float32)
    constant = np.array([1.0, 1.0, 2.0, 2.0], np.float32)
    constant.flags.writeable = False
    for _ in range(3):
        assert node(x, None, constant).shape == (1, 4, 20, 20)
    assert worked_out == [1]
    fed = np.array([1.0, 1.0, 2.0, 2.0], np.float32)
    assert node(x, None, fed).shape == (1, 4, 20, 20)
    fed[2:] = 3.0  # the same object, changed in place: its new values are read
    y = node(x, None, fed)
    assert y.shape == (1, 4, 30, 30) and len(worked_out) == 3
    np.testing.assert_array_equal(y, resize._resize(x, None, fed, None, opts))  # (works it out: 4)
    other = np.random.default_rng(4).standard_normal((1, 4, 6, 6)).astype(np.float32)
    assert node(other, None, constant).shape == (1, 4, 12, 12) and len(worked_out) == 5


@pytest.mark.numba
def test_a_node_keeps_the_compiled_pass_bound_to_its_geometry(monkeypatch):
    """With constant scales a node binds the compiled pass once (``_resize_2d.bound``) and calls
    it again for the same input shape; a float64 input of that shape takes the numpy path."""
    node = resize._ResizeNode(resize._options("nearest", "asymmetric", "floor"))
    bound = []
    real = _resize_2d.bound
    monkeypatch.setattr(_resize_2d, "bound", lambda *a: bound.append(real(*a)) or bound[-1])
    constant = np.array([1.0, 1.0, 2.0, 2.0], np.float32)
    constant.flags.writeable = False
    x = np.random.default_rng(5).standard_normal((1, 128, 10, 10)).astype(np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(node(x, None, constant), x.repeat(2, axis=2).repeat(2, axis=3))
    assert len(bound) == 2 and bound[0] is not None  # resize_nd's first call, then the node's own
    np.testing.assert_array_equal(node(x.astype(np.float64), None, constant), x.repeat(2, axis=2).repeat(2, axis=3))
    assert len(bound) == 2


@pytest.mark.numba
@pytest.mark.parametrize("ctm", ["half_pixel", "pytorch_half_pixel"])
@pytest.mark.parametrize("width", [3, 4, 7, 81])
def test_a_bilinear_doubling_takes_the_pairwise_loop_with_the_numpy_path_s_bits(monkeypatch, ctm, width):
    """A bilinear 2× upsampling's columns repeat two taps (``_resize_2d._doubles_columns``): its loop
    blends each pair of neighbours into both outputs between them (``linear_doubled_columns``),
    with the numpy path's bits, infinities and NaN included; a tripled width keeps the gather."""
    x = np.random.default_rng(7).standard_normal((1, 128, 6, width)).astype(np.float32)
    x[0, 1, 2, width // 2] = np.inf
    x[0, 2, 0, 0] = np.nan
    options = resize._options_key(resize._options("linear", ctm))
    plan = _resize_2d.plan_2d(x.shape, (1, 128, 12, 2 * width), (1.0, 1.0, 2.0, 2.0), options)
    assert plan[0] == "linear_doubled"
    assert _resize_2d.plan_2d(x.shape, (1, 128, 12, 3 * width), (1.0, 1.0, 2.0, 3.0), options)[0] == "linear"
    fast, slow, calls = _both(monkeypatch, x, (2.0, 2.0), "linear", ctm)
    assert calls == [True]
    np.testing.assert_array_equal(fast, slow)
