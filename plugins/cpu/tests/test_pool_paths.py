"""MaxPool and AveragePool reduce one spatial axis at a time (``kernels.pool.separable_reduce``):
against onnx's reference evaluator over strides, dilations, asymmetric pads, ceil_mode, auto_pad
and 1-, 2- and 3-D windows."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxplug
from onnxplug.testing import make_model
from onnxplug_cpu.kernels.pool import pool_geometry, separable_reduce

CASES = [
    ((1, 3, 11, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 2, 10, 13), dict(kernel_shape=[3, 2], strides=[2, 3], pads=[0, 1, 2, 0], ceil_mode=1)),
    ((1, 2, 12, 12), dict(kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 2, 1, 0])),
    ((1, 4, 7, 8), dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 1])),
    ((1, 4, 9), dict(kernel_shape=[4], strides=[3], pads=[2, 1])),
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2], pads=[1, 0, 1, 0, 1, 1])),
]


def _run(op, shape, attrs):
    rng = np.random.default_rng(len(shape) + shape[-1])
    x = rng.standard_normal(shape).astype(np.float32)
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    model = make_model([node], [("x", TensorProto.FLOAT, list(shape))], [("y", TensorProto.FLOAT, None)])
    got = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    want = ReferenceEvaluator(model).run(None, {"x": x})
    return got[0], want[0]


@pytest.mark.parametrize("shape, attrs", CASES)
def test_max_pool_matches_the_reference(shape, attrs):
    got, want = _run("MaxPool", shape, attrs)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("shape, attrs", [c for c in CASES if "dilations" not in c[1]])
def test_average_pool_matches_the_reference(shape, attrs, include_pad):
    got, want = _run("AveragePool", shape, dict(attrs, count_include_pad=include_pad))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_separable_reduce_is_the_window_reduction():
    """Against every window reduced at once (a sliding_window_view over the padded input)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 9, 10))
    out, begin, end, _ = pool_geometry((9, 10), (3, 4), (2, 3), (1, 2), (1, 0, 2, 3), "NOTSET", 1)
    got = separable_reduce(x, out, begin, end, (3, 4), (2, 3), (1, 2), -np.inf, np.maximum)
    padded = np.pad(x, [(0, 0), (0, 0), (begin[0], end[0]), (begin[1], end[1])], constant_values=-np.inf)
    view = np.lib.stride_tricks.sliding_window_view(padded, (3, 7), axis=(2, 3))[:, :, ::2, ::3, :, ::2]
    want = view[:, :, : out[0], : out[1]].max(axis=(-2, -1))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "shape, attrs",
    [
        ((1, 64, 7, 7), dict(kernel_shape=[7, 7])),  # ResNet-50's head: a global average
        ((1, 8, 6, 6), dict(kernel_shape=[7, 7], pads=[1, 1, 0, 0])),  # padding not counted
        ((1, 8, 6, 6), dict(kernel_shape=[7, 7], pads=[1, 1, 0, 0], count_include_pad=1)),  # counted
    ],
)
def test_an_average_pool_whose_one_window_is_the_map_matches_the_reference(shape, attrs):
    """The node's global-average path (``average_pool_node`` declines a compiled plan for it)."""
    got, want = _run("AveragePool", shape, attrs)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
