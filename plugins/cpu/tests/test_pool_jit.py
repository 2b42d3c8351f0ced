"""The compiled 2-D MaxPool and AveragePool loops of ``kernels._pool_compiled.compiled_reduce``
(``kernels._pool_jit``, ``_pool_s2_loops``, ``_pool3_loops``: CPUs without AVX-512F, and windows
the AVX-512 planes leave out; ``test_pool_planes.py`` has the planes): the numpy path's values
over pads, strides, ceil_mode, auto_pad and count_include_pad, NaN and infinities, onnx's
reference evaluator on nodes, and the calls that keep the numpy path (Indices, dilations, other
dtypes, small inputs)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxplug
from onnxplug.testing import make_model
from onnxplug_cpu.kernels import _pool_compiled

# The compiled pools run where numba is loaded (a float32 convolution loads it: kernels._jit).
numba = pytest.importorskip("numba")
if os.environ.get("ONNXPLUG_CPU_JIT", "1") == "0":
    pytest.skip("the compiled kernels are disabled by ONNXPLUG_CPU_JIT=0", allow_module_level=True)

GEOMETRIES = [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[2, 2], strides=[2, 2]),
    dict(kernel_shape=[3, 2], strides=[1, 3], pads=[2, 0, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1]),
    dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
    dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(kernel_shape=[2, 3], auto_pad="SAME_LOWER"),
    dict(kernel_shape=[7, 7]),
]


def _model(op, x_shape, geometry, outputs=("y",)):
    attrs = dict(geometry)
    if op == "MaxPool":
        attrs.pop("count_include_pad", None)
    node = helper.make_node(op, ["x"], list(outputs), **attrs)
    declared = [(name, TensorProto.FLOAT if name == "y" else TensorProto.INT64, None) for name in outputs]
    return make_model([node], [("x", TensorProto.FLOAT, x_shape)], declared, opset=19)


def _run(model, x):
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


@pytest.fixture(autouse=True)
def _without_the_planes(monkeypatch):
    """The loops this module tests, not the AVX-512 planes that take their common windows."""
    monkeypatch.setattr(_pool_compiled, "plan", lambda *args, **kwargs: None)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_matches_the_numpy_path_and_the_reference(monkeypatch, op, geometry):
    rng = np.random.default_rng(len(str(geometry)))
    x = rng.standard_normal((2, 6, 23, 26)).astype(np.float32)
    model = _model(op, list(x.shape), geometry)
    finite = _run(model, x)[0]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(finite, want, rtol=1e-6, atol=1e-6)
    x[0, 1, 4, 5] = np.nan
    x[1, 2, 10, 11] = np.inf
    x[1, 3] = -np.inf
    compiled = _run(model, x)[0]
    calls = []
    monkeypatch.setattr(_pool_compiled, "_compiled_pool", lambda *args: calls.append(args))
    numpy_path = _run(model, x)[0]
    assert len(calls) == 1  # asked, and made to decline
    np.testing.assert_array_equal(compiled, numpy_path)


def test_other_calls_keep_the_numpy_path(monkeypatch):
    calls = []
    monkeypatch.setattr(_pool_compiled, "_compiled_pool", lambda *args: calls.append(args))
    x = np.random.default_rng(0).standard_normal((1, 8, 24, 24)).astype(np.float32)
    model = _model("MaxPool", list(x.shape), GEOMETRIES[0], ("y", "i"))
    y, indices = _run(model, x)
    want_y, want_i = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(indices, want_i)
    _run(_model("MaxPool", [1, 1, 8, 8], GEOMETRIES[0]), x[:, :1, :8, :8].copy())  # small
    _run(_model("AveragePool", list(x.shape), dict(kernel_shape=[2, 2], dilations=[2, 2])), x)
    _run(_model("MaxPool", list(x.shape), GEOMETRIES[1]), x.astype(np.float64).astype(np.float32)[..., ::1])
    assert len(calls) == 1  # only the last, plain float32 call


def test_pools_alone_do_not_load_numba(tmp_path):
    """A model whose only compiled candidates are pools keeps numba unloaded (its memory)."""
    model = _model("MaxPool", [1, 8, 40, 40], GEOMETRIES[0])
    path = tmp_path / "pool.onnx"
    path.write_bytes(model.SerializeToString())
    code = (
        "import sys, numpy as np, onnxplug\n"
        f"s = onnxplug.InferenceSession({str(path)!r}, providers=['CPUExecutionProvider'])\n"
        "s.run(None, {'x': np.ones((1, 8, 40, 40), np.float32)})\n"
        "assert 'numba' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_blocks_of_planes_on_two_threads_match_the_numpy_path(monkeypatch, op):
    """64 planes of 48×48 at two threads: the compiled pool runs in two blocks of planes (on
    Python threads here; on numba's team in ``test_f32_conv.py``)."""
    from onnxplug_cpu.kernels import _split_rows

    monkeypatch.setenv("ONNXPLUG_CPU_TEAM", "0")
    monkeypatch.setattr(_split_rows, "thread_budget", lambda: 2)
    monkeypatch.setattr(_pool_compiled, "thread_budget", lambda: 2)
    blocks = []
    real = _pool_compiled.run_in_row_blocks
    monkeypatch.setattr(
        _pool_compiled, "run_in_row_blocks", lambda work, rows, **kw: blocks.append(rows) or real(work, rows, **kw)
    )
    x = np.random.default_rng(3).standard_normal((2, 32, 48, 48)).astype(np.float32)
    model = _model(op, list(x.shape), GEOMETRIES[0])
    compiled = _run(model, x)[0]
    assert blocks == [64]
    monkeypatch.setattr(_pool_compiled, "_compiled_pool", lambda *args: None)
    np.testing.assert_array_equal(compiled, _run(model, x)[0])


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("shape", [(2, 40, 9, 7), (1, 20, 16, 16), (1, 1000, 1, 5), (1, 6, 64, 64)])
def test_small_maps_pool_all_planes_at_once(monkeypatch, op, include_pad, shape):
    """3×3 stride-1 windows padded by one on maps of up to 64×64 cells (Inception's branch pools)
    take ``kernels._pool3_loops``, all the planes in one flat run (AveragePool's division in it):
    the row loops' values, the numpy path's, and infinities or NaN on a plane's edge kept to that
    plane."""
    geometry = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    if op == "AveragePool":
        geometry["count_include_pad"] = include_pad
    rng = np.random.default_rng(sum(shape) + include_pad)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 1, 0, 0] = np.inf  # first cell of a plane: the plane before must not read it
    x[0, 2, -1, -1] = -np.inf  # last cell: nor the plane after
    x[0, 3, 0, -1] = np.nan
    model = _model(op, list(x.shape), geometry)
    calls = []
    real = _pool_compiled._pool_3x3
    monkeypatch.setattr(_pool_compiled, "_pool_3x3", lambda *args: calls.append(1) or real(*args))
    framed = _run(model, x)[0]
    assert calls == [1]
    finite = x.copy()
    finite[~np.isfinite(finite)] = 0
    np.testing.assert_allclose(
        _run(model, finite)[0], ReferenceEvaluator(model).run(None, {"x": finite})[0], rtol=1e-6, atol=1e-6
    )
    assert np.isfinite(framed[0, 0]).all() and np.isfinite(framed[0, 4:]).all()
    monkeypatch.setattr(_pool_compiled, "_small_3x3", lambda *args: False)
    np.testing.assert_array_equal(framed, _run(model, x)[0])  # the row loops
    monkeypatch.setattr(_pool_compiled, "_compiled_pool", lambda *args: None)
    np.testing.assert_array_equal(framed, _run(model, x)[0])  # the numpy path


@pytest.mark.parametrize("jit", ["1", "0"])
def test_a_float32_convolution_loads_numba_unless_disabled(tmp_path, jit):
    """A float32 2-D Conv's session imports numba (its epilogue, shifted adds and pools run
    compiled: kernels._jit); ``ONNXPLUG_CPU_JIT=0`` keeps it out."""
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    weights = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], np.ones(108, np.float32))
    model = make_model([node], [("x", TensorProto.FLOAT, [1, 3, 8, 8])], [("y", TensorProto.FLOAT, None)])
    model.graph.initializer.append(weights)
    path = tmp_path / "conv.onnx"
    path.write_bytes(model.SerializeToString())
    code = (
        "import sys, onnxplug\n"
        f"onnxplug.InferenceSession({str(path)!r}, providers=['CPUExecutionProvider'])\n"
        "print('numba' in sys.modules)\n"
    )
    env = dict(os.environ, ONNXPLUG_CPU_JIT=jit)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ("True" if jit == "1" else "False")


def test_small_map_pools_load_from_numba_cache_in_a_new_process(cache_misses_in_new_processes):
    code = (
        "import numpy as np\n"
        "from onnxplug_cpu.kernels import _pool3_loops as loops\n"
        "x = np.ones((8, 7, 7), np.float32); y = np.empty_like(x)\n"
        "none = np.zeros(0, np.float32); none.flags.writeable = False\n"
        "counts = np.full(49, 9, np.float32); counts.flags.writeable = False\n"
        "loops.pool_3x3(x, y, True, np.float32(-np.inf), none)\n"
        "loops.pool_3x3(x, y, False, np.float32(0), counts)\n"
        "print(sum(loops.pool_3x3.stats.cache_misses.values()))\n"
    )
    first, second = cache_misses_in_new_processes(code)
    assert first > 0 and second == 0


@pytest.mark.parametrize("maximum", [True, False])
@pytest.mark.parametrize("form", ["rows", "all-planes", "unpadded-s2"])
def test_pools_on_the_team_match_python_threads(maximum, form, monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "1")  # the team serves pools where it runs convolutions
    if form == "all-planes":  # 3×3 stride 1 on 14×14 maps: kernels._pool3_loops
        x = np.random.default_rng(13).standard_normal((1, 576, 14, 14), dtype=np.float32)
        geometry = dict(begin=(1, 1), kernel_shape=(3, 3), strides=(1, 1), dilations=None, maximum=maximum)
        out = (14, 14)
    elif form == "unpadded-s2":  # MaxPool: kernels._pool_s2_loops
        x = np.random.default_rng(13).standard_normal((1, 64, 41, 41), dtype=np.float32)
        geometry = dict(begin=(0, 0), kernel_shape=(3, 3), strides=(2, 2), dilations=None, maximum=maximum)
        out = (20, 20)
    else:
        x = np.random.default_rng(13).standard_normal((1, 64, 40, 40), dtype=np.float32)
        geometry = dict(begin=(1, 1), kernel_shape=(3, 3), strides=(2, 2), dilations=None, maximum=maximum)
        out = (20, 20)
    results = []
    for team in ("1", "0"):
        monkeypatch.setenv("ONNXPLUG_CPU_TEAM", team)
        with threadpoolctl.threadpool_limits(2, user_api="blas"):
            results.append(_pool_compiled.compiled_reduce(x, out, **geometry)[0])
    assert results[0] is not None
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("shape", [(3, 23, 26), (2, 26, 23), (64, 27, 27), (4, 3, 3), (2, 3, 4)])
def test_unpadded_stride_2_maxima_in_one_pass_per_row_give_the_row_loops_bits(shape):
    """``kernels._pool_s2_loops`` (3×3 MaxPool at stride 2, no padding, every window inside)
    against the general compiled loop (``kernels._pool_jit``) it replaces there: the same bits
    with NaN, infinities and signed zeros, on odd and even sides."""
    from onnxplug_cpu.kernels import _pool_jit, _pool_s2_loops

    rng = np.random.default_rng(shape[1] * 31 + shape[2])
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[[3, 5, x.size - 2]] = [np.nan, np.inf, -np.inf]
    x[:, :, 0] = np.where(rng.random(shape[:2]) < 0.5, -0.0, 0.0)
    out = ((shape[1] - 3) // 2 + 1, (shape[2] - 3) // 2 + 1)
    want = np.empty(shape[:1] + out, np.float32)
    got = np.empty_like(want)
    _pool_jit.compiled(3, 2, True)(x, want, 3, 2, 0, 0)
    _pool_s2_loops.max_3x3_s2(x, got)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got, want)


def test_only_unpadded_stride_2_maxima_with_every_window_inside_take_the_one_pass_loop(monkeypatch):
    from onnxplug_cpu.kernels import _pool_s2_loops

    calls = []
    original = _pool_s2_loops.max_3x3_s2
    monkeypatch.setattr(_pool_s2_loops, "max_3x3_s2", lambda x, y: calls.append(y.shape) or original(x, y))
    x = np.random.default_rng(2).standard_normal((1, 8, 23, 26)).astype(np.float32)
    geometry = dict(kernel_shape=(3, 3), strides=(2, 2), dilations=None)
    got, _ = _pool_compiled.compiled_reduce(x, (11, 12), (0, 0), maximum=True, **geometry)
    assert calls == [(8, 11, 12)] and got is not None
    _pool_compiled.compiled_reduce(x, (12, 13), (1, 1), maximum=True, **geometry)  # padded: the row loops
    _pool_compiled.compiled_reduce(x, (12, 13), (0, 0), maximum=True, **geometry)  # ceil_mode's extra window
    _pool_compiled.compiled_reduce(x, (11, 12), (0, 0), maximum=False, **geometry)  # AveragePool's sums
    assert calls == [(8, 11, 12)]


@pytest.mark.parametrize("maximum", [True, False])
@pytest.mark.parametrize("shape", [(3, 23, 26), (2, 26, 23), (64, 28, 28), (4, 2, 2), (2, 3, 5)])
def test_unpadded_2x2_stride_2_pools_in_one_pass_give_the_row_loops_bits(shape, maximum):
    """``kernels._pool_s2_loops``' 2×2 loops (VGG's, a UNet's, DenseNet's transitions) against the
    general compiled loop: the same bits with NaN, infinities and signed zeros, odd sides
    dropping their last row or column as the floor of the output size does."""
    from onnxplug_cpu.kernels import _pool_jit, _pool_s2_loops

    rng = np.random.default_rng(shape[1] * 17 + shape[2])
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[[1, 6, x.size - 1]] = [np.nan, np.inf, -np.inf]
    x[:, :, 0] = np.where(rng.random(shape[:2]) < 0.5, -0.0, 0.0)
    out = (shape[1] // 2, shape[2] // 2)
    want = np.empty(shape[:1] + out, np.float32)
    got = np.empty_like(want)
    _pool_jit.compiled(2, 2, maximum)(x, want, 2, 2, 0, 0)
    serial, parallel = _pool_s2_loops.inside_loops(2, maximum)
    serial(x, got)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got, want)
    split = np.empty_like(want)
    parallel(x, split, 2)
    np.testing.assert_array_equal(split, want)


@pytest.mark.parametrize("maximum", [True, False])
def test_only_unpadded_2x2_stride_2_pools_take_the_one_pass_loop(monkeypatch, maximum):
    from onnxplug_cpu.kernels import _pool_s2_loops

    name = "max_2x2_s2" if maximum else "sum_2x2_s2"
    calls = []
    original = getattr(_pool_s2_loops, name)
    monkeypatch.setattr(_pool_s2_loops, name, lambda x, y: calls.append(y.shape) or original(x, y))
    x = np.random.default_rng(3).standard_normal((1, 8, 23, 26)).astype(np.float32)
    geometry = dict(kernel_shape=(2, 2), strides=(2, 2), dilations=None)
    got, _ = _pool_compiled.compiled_reduce(x, (11, 13), (0, 0), maximum=maximum, **geometry)
    assert calls == [(8, 11, 13)] and got is not None
    _pool_compiled.compiled_reduce(x, (12, 14), (1, 1), maximum=maximum, **geometry)  # padded: the row loops
    _pool_compiled.compiled_reduce(x, (12, 13), (0, 0), maximum=maximum, **geometry)  # ceil_mode's extra row
    assert calls == [(8, 11, 13)]
