"""MatMulInteger and QLinearMatMul with constant weights on AVX-512 VNNI (``kernels._int8_matmul``):
the int64 definition for MatMulInteger, and the same bits as the general path
(``ONNXPLUG_CPU_VNNI=0``) for both, over ranks, depths that are not multiples of four, column
counts that are not multiples of the tile, row counts on both sides of the column tile, int8 and
uint8 inputs, and per-column weight zero points and scales."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug
from onnxplug_cpu.kernels import _int8_matmul, _vnni

needs_vnni = pytest.mark.skipif(
    not _vnni.available(),
    reason="the int8 path needs a CPU with AVX-512 VNNI and numba (absent, or ONNXPLUG_CPU_JIT/VNNI=0)",
)
_TYPES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}

# (shape of a, columns of b)
SHAPES = [((5, 7), 3), ((130, 64), 13), ((2, 33, 48), 50), ((9,), 6), ((1, 768), 70), ((200, 3), 7)]


def _weights(rng, depth, columns, b_type, per_column):
    shape = (columns,) if per_column else ()
    if b_type == np.int8:
        return rng.integers(-128, 128, (depth, columns)).astype(np.int8), np.zeros(shape, np.int8)
    zero = rng.integers(120, 136, shape).astype(np.uint8)
    return (rng.integers(-99, 100, (depth, columns)) + zero).astype(np.uint8), zero


def _model(op, a_type, b, b_zero, rng, per_column):
    columns = b.shape[1]
    a_zero = np.array(3 if a_type == np.uint8 else -7, a_type)
    if op == "MatMulInteger":
        inits = {"b": b, "az": a_zero, "bz": b_zero}
        node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
        out_type = TensorProto.INT32
    else:
        inits = {
            "as": np.array(0.03, np.float32),
            "az": a_zero,
            "b": b,
            "bs": (rng.random((columns,) if per_column else ()) * 0.01 + 0.001).astype(np.float32),
            "bz": b_zero,
            "ys": np.array(0.2, np.float32),
            "yz": np.array(100 if a_type == np.uint8 else 5, a_type),
        }
        node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
        out_type = _TYPES[a_type]
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("a", _TYPES[a_type], None)],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString(), a_zero


def _case(op, a_shape, columns, a_type, b_type, per_column):
    """A one-node model of ``op`` with random weights, and a random input for it."""
    rng = np.random.default_rng(a_shape[-1] * columns + len(a_shape))
    b, b_zero = _weights(rng, a_shape[-1], columns, b_type, per_column)
    data, a_zero = _model(op, a_type, b, b_zero, rng, per_column)
    low, high = (0, 256) if a_type == np.uint8 else (-128, 128)
    return data, rng.integers(low, high, a_shape).astype(a_type), a_zero, b, b_zero


def _run(data, a, monkeypatch, vnni):
    monkeypatch.setenv("ONNXPLUG_CPU_VNNI", "1" if vnni else "0")
    return onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]


@pytest.fixture
def calls(count_calls):
    """Counts the calls that reach the VNNI path (``count_calls`` is in this folder's conftest)."""
    return count_calls(_int8_matmul.Int8MatMul, "qlinear", "integer")


@needs_vnni
@pytest.mark.parametrize(("a_shape", "columns"), SHAPES)
@pytest.mark.parametrize(("a_type", "b_type"), [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)])
@pytest.mark.parametrize("per_column", [False, True])
def test_matmul_integer_against_int64_definition(a_shape, columns, a_type, b_type, per_column, monkeypatch, calls):
    data, a, a_zero, b, b_zero = _case("MatMulInteger", a_shape, columns, a_type, b_type, per_column)
    got = _run(data, a, monkeypatch, vnni=True)
    assert calls["integer"] == 1
    want = (a.astype(np.int64) - int(a_zero)) @ (b.astype(np.int64) - b_zero.astype(np.int64))
    assert got.dtype == np.int32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@needs_vnni
@pytest.mark.parametrize(("a_shape", "columns"), SHAPES)
@pytest.mark.parametrize(("a_type", "b_type"), [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)])
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul_same_bits_as_general_path(a_shape, columns, a_type, b_type, per_column, monkeypatch, calls):
    data, a, *_ = _case("QLinearMatMul", a_shape, columns, a_type, b_type, per_column)
    got = _run(data, a, monkeypatch, vnni=True)
    assert calls["qlinear"] == 1
    expected = _run(data, a, monkeypatch, vnni=False)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@needs_vnni
def test_weights_computed_at_run_time_take_the_general_path(monkeypatch, calls):
    """B as a graph input (not a constant) cannot be prepared: the general path computes it."""
    rng = np.random.default_rng(2)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("a", TensorProto.UINT8, None),
            helper.make_tensor_value_info("b", TensorProto.INT8, None),
        ],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    a = rng.integers(0, 256, (4, 8)).astype(np.uint8)
    b = rng.integers(-128, 128, (8, 5)).astype(np.int8)
    got = onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"a": a, "b": b})[0]
    assert calls["integer"] == 0
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
