"""Sums and means over consecutive middle axes as their slices added in order
(``kernels.reduce.middle_sum``, behind ReduceSum and ReduceMean): numpy's bits, NaN and
infinities as numpy, the shapes keepdims gives, and the calls that keep numpy's reduction."""

from __future__ import annotations

import numpy as np
import pytest

from onnxplug_cpu.kernels import reduce


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("keepdims", [True, False])
@pytest.mark.parametrize("shape, axes", [((1, 256, 3, 41), (2,)), ((2, 5, 7, 33), (1, 2)), ((4, 9, 17), (1,))])
def test_the_bits_of_numpy(shape, axes, keepdims, dtype):
    x = (np.random.default_rng(1).standard_normal(shape) * 100).astype(dtype)
    x.reshape(-1)[7] = np.nan
    x.reshape(-1)[100] = np.inf
    assert reduce.middle_sum(x, axes, keepdims) is not None
    wanted = np.sum(x, axis=axes, keepdims=keepdims), np.mean(x, axis=axes, keepdims=keepdims)
    for got, want in zip((reduce._sum(x, axes, keepdims), reduce._mean(x, axes, keepdims)), wanted):
        assert got.dtype == dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_a_reduce_mean_node_over_a_middle_axis_matches_the_reference():
    import onnx
    from onnx import TensorProto, helper

    import onnxplug

    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[2], keepdims=0)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 3, 41])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(2).standard_normal((1, 256, 3, 41)).astype(np.float32)
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x})[0]
    want = onnx.reference.ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_other_calls_keep_numpy():
    x = np.ones((2, 8, 3, 40), np.float32)
    assert reduce.middle_sum(x, (3,), False) is None  # the last axis: numpy's pairwise sum
    assert reduce.middle_sum(x, (1, 3), False) is None  # not consecutive
    assert reduce.middle_sum(x.transpose(0, 2, 1, 3), (2,), False) is None  # not contiguous
    assert reduce.middle_sum(np.ones((2, 8, 3, 4), np.float32), (2,), False) is None  # short slices
    assert reduce.middle_sum(np.ones((2, 100, 40), np.float32), (1,), False) is None  # many slices
    assert reduce.middle_sum(x.astype(np.int32), (2,), False) is None
    assert reduce.middle_sum(x, (), False) is None
