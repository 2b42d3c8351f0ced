"""The AVX-512 pool planes (``kernels._pool_ir`` through ``kernels._pool_rows``, planned per input
shape by ``kernels._pool_compiled.plan``): the numpy path's values over the windows they serve,
padded or not, ceil_mode, auto_pad and count_include_pad, narrow and wide maps, NaN and
infinities; onnx's reference evaluator; the same values on one thread, on numba's team and on
Python threads; the node's plan kept per input shape; the loops served by numba's on-disk cache."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxplug
from onnxplug.testing import make_model
from onnxplug_cpu.kernels import _jit, _pool_compiled

numba = pytest.importorskip("numba")  # the planes run where numba is loaded (here: imported)
if os.environ.get("ONNXPLUG_CPU_JIT", "1") == "0":
    pytest.skip("the compiled kernels are disabled by ONNXPLUG_CPU_JIT=0", allow_module_level=True)
if not _jit.cpu_has(("avx512f",), ("avx512f",)):
    pytest.skip("the pool planes need a CPU with AVX-512F", allow_module_level=True)

GEOMETRIES = [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),  # ResNet's
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1]),  # Inception-v2's
    dict(kernel_shape=[3, 3], strides=[2, 2]),  # SqueezeNet's
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[3, 2], pads=[2, 1, 0, 1]),
    dict(kernel_shape=[2, 2], strides=[2, 2]),  # VGG's, DenseNet's
    dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
    dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),  # Inception's branches
    dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
    dict(kernel_shape=[3, 3], pads=[2, 0, 1, 1]),
    dict(kernel_shape=[2, 1], strides=[2, 1]),  # an OCR recognizer's
    dict(kernel_shape=[2, 1], strides=[1, 1], pads=[1, 0, 0, 0]),
]
SHAPES = [(2, 3, 23, 26), (1, 2, 7, 5), (1, 2, 5, 49), (1, 3, 9, 70), (1, 2, 4, 112)]


def _model(op, x_shape, geometry):
    attrs = dict(geometry)
    if op == "MaxPool":
        attrs.pop("count_include_pad", None)
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    return make_model([node], [("x", TensorProto.FLOAT, x_shape)], [("y", TensorProto.FLOAT, None)], opset=19)


def _session(model):
    return onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _planned(monkeypatch):
    """Records each plan made (``None`` where the planes do not serve the call)."""
    plans = []
    real = _pool_compiled.plan
    monkeypatch.setattr(_pool_compiled, "plan", lambda *a, **k: plans.append(real(*a, **k)) or plans[-1])
    return plans


def _numpy_path(monkeypatch, model, x):
    with monkeypatch.context() as patch:
        patch.setattr(_pool_compiled, "plan", lambda *args, **kwargs: None)
        patch.setattr(_pool_compiled, "_compiled_pool", lambda *args: None)
        return _session(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_the_planes_give_the_numpy_paths_values(monkeypatch, geometry, op, shape):
    """Equal values (``-0.0`` and ``0.0`` count as equal: a maximum of signed zeros may take
    either), NaN where a window holds one, infinities kept to their windows."""
    if shape[2] + sum(geometry.get("pads", [0] * 4)[::2]) < geometry["kernel_shape"][0]:
        pytest.skip("the window is taller than the padded map: no output (a Fail at the geometry)")
    rng = np.random.default_rng(sum(shape) + len(str(geometry)))
    x = rng.standard_normal(shape).astype(np.float32)
    model = _model(op, list(shape), geometry)
    plans = _planned(monkeypatch)
    finite = _session(model).run(None, {"x": x})[0]
    assert len(plans) == 1 and plans[0] is not None
    pads = geometry.get("pads", [0] * 4)
    if pads[:2] == pads[2:]:  # (onnx's reference swaps the end of the rows' pads and the start of the columns')
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
        np.testing.assert_allclose(finite, want, rtol=1e-6, atol=1e-6)
    x.flat[rng.choice(x.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    x[0, -1] = -np.inf  # a whole plane: its windows' maxima -inf, averages -inf
    got = _session(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, _numpy_path(monkeypatch, model, x))


def test_other_windows_and_types_keep_the_other_paths(monkeypatch):
    x = np.random.default_rng(1).standard_normal((1, 4, 12, 12)).astype(np.float32)
    plans = _planned(monkeypatch)
    for geometry in (
        dict(kernel_shape=[4, 4]),
        dict(kernel_shape=[3, 3], dilations=[2, 2]),
        dict(kernel_shape=[1, 1], strides=[2, 2]),
        dict(kernel_shape=[3, 3], strides=[1, 3]),
    ):
        model = _model("MaxPool", list(x.shape), geometry)
        np.testing.assert_array_equal(_session(model).run(None, {"x": x})[0], _numpy_path(monkeypatch, model, x))
    assert plans == [None] * 4
    double = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2])
    model = make_model([double], [("x", TensorProto.DOUBLE, [1, 4, 12, 12])], [("y", TensorProto.DOUBLE, None)])
    _session(model).run(None, {"x": x.astype(np.float64)})
    assert len(plans) == 4  # float64: not asked


def test_a_node_keeps_its_plan_for_its_last_input_shape(monkeypatch):
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    model = make_model([node], [("x", TensorProto.FLOAT, [1, 8, "h", "w"])], [("y", TensorProto.FLOAT, None)])
    session = _session(model)
    plans = _planned(monkeypatch)
    rng = np.random.default_rng(2)
    for shape in [(1, 8, 20, 20), (1, 8, 20, 20), (1, 8, 9, 31), (1, 8, 9, 31), (1, 8, 20, 20)]:
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], _numpy_path(monkeypatch, model, x))
    assert len(plans) == 3 and all(plans)


@pytest.mark.parametrize("window", [0, 2, 5])
def test_blocks_of_planes_give_one_threads_bits(window):
    from onnxplug_cpu.kernels import _pool_rows

    rng = np.random.default_rng(window)
    x = rng.standard_normal((7, 19, 37)).astype(np.float32)
    x[3, 4, 5] = np.nan
    stride = 2 if window != 2 else 1
    out = ((19 + 1 - 3) // stride + 1, (37 + 1 - 3) // stride + 1) if window != 5 else (9, 18)
    counts = np.full(out[0] * out[1], 4, np.float32) if window == 5 else np.zeros(0, np.float32)  # AveragePool
    counts.flags.writeable = False
    top = 0 if window == 5 else 1
    masks = np.zeros(0, np.uint16)
    one = np.empty((7, *out), np.float32)
    _pool_rows.pool_planes(x, one, counts, masks, window, stride, top, top)
    for parts in (2, 3, 7):
        split = np.full_like(one, 42.0)
        _pool_rows.pool_planes_parallel(x, split, counts, masks, window, stride, top, top, parts)
        np.testing.assert_array_equal(split, one)
    assert np.isnan(one[3]).any() and not np.isnan(one[[0, 1, 2, 4, 5, 6]]).any()


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("team", ["1", "0"])
def test_two_threads_on_the_team_or_python_threads_give_one_threads_bits(monkeypatch, op, team):
    """64 planes of 48×48 (two blocks of 32K values) at two threads, on numba's team or (the
    team off) on Python threads, against the same plan at one thread."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "1")  # the team serves pools where it runs convolutions
    monkeypatch.setenv("ONNXPLUG_CPU_TEAM", team)
    x = np.random.default_rng(3).standard_normal((2, 32, 48, 48)).astype(np.float32)
    blocks = []
    real = _pool_compiled.run_in_row_blocks
    monkeypatch.setattr(
        _pool_compiled, "run_in_row_blocks", lambda work, rows, **kw: blocks.append(rows) or real(work, rows, **kw)
    )
    results = []
    for threads in (2, 1):
        pool = _pool_compiled.plan(x.shape, (24, 24), (1, 1), (3, 3), (2, 2), None, op == "MaxPool")
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            results.append(pool(x))
    np.testing.assert_array_equal(results[0], results[1])
    assert blocks == ([] if team == "1" else [64])


def test_the_plane_loops_load_from_numba_cache_in_a_new_process(cache_misses_in_new_processes):
    code = (
        "import numpy as np\n"
        "from onnxplug_cpu.kernels import _pool_rows as loops\n"
        "x = np.ones((8, 7, 7), np.float32); y = np.empty((8, 3, 3), np.float32)\n"
        "none = np.zeros(0, np.float32); none.flags.writeable = False\n"
        "masks = np.zeros(0, np.uint16); masks.flags.writeable = False\n"
        "loops.pool_planes(x, y, none, masks, 0, 2, 0, 0)\n"
        "loops.pool_planes_parallel(x, y, none, masks, 4, 2, 0, 0, 2)\n"
        "print(sum(sum(f.stats.cache_misses.values()) for f in (loops.pool_planes, loops.pool_planes_parallel)))\n"
    )
    first, second = cache_misses_in_new_processes(code)
    assert first > 0 and second == 0


def test_concurrent_runs_of_other_shapes_keep_each_shape_on_its_own_plan(monkeypatch):
    """Two threads run one session, each its own input shape, over and over: a node's kept plan
    is replaced whole, so no call pools one shape through the other's plan."""
    from concurrent.futures import ThreadPoolExecutor

    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    model = make_model([node], [("x", TensorProto.FLOAT, [1, 8, "h", "w"])], [("y", TensorProto.FLOAT, None)])
    session = _session(model)
    rng = np.random.default_rng(6)
    inputs = [rng.standard_normal(shape).astype(np.float32) for shape in [(1, 8, 40, 40), (1, 8, 17, 70)]]
    wants = [_numpy_path(monkeypatch, model, x) for x in inputs]

    def runs(which):
        for _ in range(200):
            got = session.run(None, {"x": inputs[which]})[0]
            if not np.array_equal(got, wants[which]):
                return False
        return True

    with ThreadPoolExecutor(2) as pool:
        assert all(pool.map(runs, [0, 1]))


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pads_that_would_need_a_huge_array_are_refused_naming_it(op, dtype):
    """Huge pads make a huge output (stride 1) or, on the numpy path, a huge padded input (a
    stride as large as the pads): an ``InvalidArgument`` naming the array, not an attempt."""
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    x = np.ones((1, 4, 5, 5), dtype)
    for strides, what in (([1, 1], f"{op} output"), ([100000, 100000], "padded input")):
        node = helper.make_node(op, ["x"], ["y"], kernel_shape=[3, 3], strides=strides, pads=[100000] * 4)
        model = make_model([node], [("x", elem, list(x.shape))], [("y", elem, None)], opset=19)
        with pytest.raises(onnxplug.errors.InvalidArgument, match=what):
            _session(model).run(None, {"x": x})
